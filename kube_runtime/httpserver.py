"""The process's HTTP endpoints: /metrics (Prometheus), /healthz (liveness) and /readyz (readiness).

As upstream Kueue (controller-runtime) serves them: the metrics server (`metrics.bindAddress`,
default `:8443`) speaks HTTPS and answers only callers whose bearer token a TokenReview
authenticates and whom a SubjectAccessReview allows `get` on the non-resource URL `/metrics`
(controller-runtime's `filters.WithAuthenticationAndAuthorization`: 401 without a valid token, 403
when not allowed, 500 when a review cannot be made); its certificate comes from `--metrics-cert-dir`
(tls.crt, tls.key, re-read when they change) or is self-signed at start-up. `--metrics-insecure`
serves /metrics over plain HTTP to anyone instead. The health probes (`health.healthProbeBindAddress`)
stay plain HTTP and unauthenticated. docs/metrics.md says how to scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import shutil
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

from kube_runtime.certs import self_signed_serving_cert
from kube_runtime.delegated_auth import (
    Decision,
    NonResourceAttributes,
    SubjectAccessReviewer,
    TokenReviewer,
    UserInfo,
    bearer_token,
)
from kube_runtime.tlsoptions import TLSOptions

log = structlog.get_logger(__name__)

ReadinessCheck = Callable[[], Any]  # returns bool (or an awaitable of bool); raising counts as failing
TokenReview = Callable[[str], Awaitable[UserInfo | None]]  # raising: the review could not be made
AccessReview = Callable[[UserInfo, NonResourceAttributes], Awaitable[Decision]]

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CERT_RELOAD_SECONDS = 10.0  # controller-runtime's certwatcher also polls every 10 s


# ------------------------------------------------------------------------------------------------
# How /metrics is served


@dataclass(frozen=True)
class MetricsServing:
    """`insecure`: plain HTTP, no authentication (`--metrics-insecure`). Otherwise HTTPS with
    `cert_dir`/tls.crt and tls.key (`--metrics-cert-dir`) or a self-signed certificate."""

    insecure: bool = False
    cert_dir: str | None = None
    # Minimum version, cipher suites, curve for the HTTPS server (a Configuration's `tls`).
    tls: TLSOptions | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MetricsServing:
        return cls(insecure=bool(args.metrics_insecure), cert_dir=args.metrics_cert_dir or None)

    def problem(self) -> str | None:
        """Why the certificate directory cannot be used (None when it can, or when none is given)."""
        if self.insecure or not self.cert_dir:
            return None
        missing = [name for name in (CERT_FILE, KEY_FILE) if not (Path(self.cert_dir) / name).is_file()]
        if missing:
            return f"--metrics-cert-dir {self.cert_dir}: no {' or '.join(missing)} there"
        try:
            _context(Path(self.cert_dir) / CERT_FILE, Path(self.cert_dir) / KEY_FILE)
        except (OSError, ssl.SSLError) as exc:
            return f"--metrics-cert-dir {self.cert_dir}: {exc}"
        return None


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-insecure",
        action="store_true",
        help="serve /metrics over plain HTTP to anyone, without authentication or authorization "
        "(default: HTTPS, bearer token checked by TokenReview, `get /metrics` by SubjectAccessReview); "
        "docs/metrics.md",
    )
    parser.add_argument(
        "--metrics-cert-dir",
        metavar="DIR",
        help=f"the metrics server's certificate: DIR/{CERT_FILE} and DIR/{KEY_FILE}, re-read when they "
        "change (default: a self-signed certificate made at start-up)",
    )


def _context(cert_file: Path, key_file: Path, tls: TLSOptions | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls is not None:
        tls.apply(context)
    context.load_cert_chain(str(cert_file), str(key_file))
    return context


class ServingCertificate:
    """The metrics server's TLS context: from a directory (kept current by `watch`) or self-signed."""

    def __init__(self, cert_dir: str | None = None, tls: TLSOptions | None = None) -> None:
        self.cert_dir = Path(cert_dir) if cert_dir else None
        self.tls = tls
        self._stamp: tuple = ()
        if self.cert_dir is None:
            self.context = self._self_signed()
        else:
            self._stamp = self._files_stamp()
            self.context = _context(self.cert_dir / CERT_FILE, self.cert_dir / KEY_FILE, tls)

    def _self_signed(self) -> ssl.SSLContext:
        cert, key = self_signed_serving_cert()
        directory = tempfile.mkdtemp(prefix="metrics-cert-")  # ssl loads files only; removed at once
        try:
            cert_file, key_file = Path(directory) / CERT_FILE, Path(directory) / KEY_FILE
            cert_file.write_bytes(cert)
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(key)
            return _context(cert_file, key_file, self.tls)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _files_stamp(self) -> tuple:
        assert self.cert_dir is not None
        stamp = []
        for name in (CERT_FILE, KEY_FILE):
            st = (self.cert_dir / name).stat()
            stamp.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(stamp)

    def reload_if_changed(self) -> bool:
        """Load the files again when they changed (new handshakes use them); a half-written or bad
        pair keeps the last good one."""
        if self.cert_dir is None:
            return False
        try:
            stamp = self._files_stamp()
            if stamp == self._stamp:
                return False
            self.context.load_cert_chain(str(self.cert_dir / CERT_FILE), str(self.cert_dir / KEY_FILE))
        except (OSError, ssl.SSLError) as exc:
            log.warning("cannot reload the metrics certificate; keeping the last one", error=str(exc))
            return False
        self._stamp = stamp
        log.info("reloaded the metrics serving certificate", cert_dir=str(self.cert_dir))
        return True

    async def watch(self, interval: float = CERT_RELOAD_SECONDS) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()


class MetricsAuth:
    """controller-runtime's `filters.WithAuthenticationAndAuthorization` in front of /metrics: a bearer
    token (TokenReview) of a user allowed `<method> <path>` (SubjectAccessReview on the non-resource
    URL, verb = the request's method in lower case). Answers as its filter does, in text:
    401 `Unauthorized`, 403 `Authorization denied for user <name>`, 500 `Authentication failed` or
    `Authorization for user <name> failed`."""

    def __init__(self, review_token: TokenReview, review_access: AccessReview) -> None:
        self.review_token = review_token
        self.review_access = review_access

    @classmethod
    def delegated(cls, kube: Any) -> MetricsAuth:
        """Reviews by the cluster `kube` talks to (create on tokenreviews and subjectaccessreviews),
        each answer cached 10 s. No group skips the SubjectAccessReview (controller-runtime's
        authorizer has no always-allowed group)."""
        tokens = TokenReviewer(kube)
        access = SubjectAccessReviewer(kube, always_allow_groups=())
        return cls(tokens.review, access.authorize)

    async def refusal(self, request: web.Request) -> web.Response | None:
        """None when the request may go on; otherwise the answer to give."""
        token = bearer_token(request.headers)
        if token is None:
            return _text(401, "Unauthorized")
        try:
            user = await self.review_token(token)
        except Exception as exc:
            log.error("Authentication failed", path=request.path, error=str(exc) or type(exc).__name__)
            return _text(500, "Authentication failed")
        if user is None:
            return _text(401, "Unauthorized")
        attributes = NonResourceAttributes(request.method.lower(), request.path)
        try:
            decision = await self.review_access(user, attributes)
        except Exception as exc:
            message = f"Authorization for user {user.name} failed"
            log.error(message, path=request.path, error=str(exc) or type(exc).__name__)
            return _text(500, message)
        if not decision.allowed:
            message = f"Authorization denied for user {user.name}"
            log.debug(message, path=request.path, reason=decision.reason)
            return _text(403, message)
        return None


def _text(status: int, message: str) -> web.Response:
    """Go's http.Error: the message and a newline, text/plain, nosniff."""
    return web.Response(
        status=status,
        text=message + "\n",
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


# ------------------------------------------------------------------------------------------------
# The servers


class HealthServer:
    """`await server.start()`; with port 0 the bound port is in `server.port` afterwards.

    Serves /metrics (when `metrics`) and the probes /healthz /livez /readyz (when `probes`); over
    TLS with `certificate`, /metrics only to callers `auth` lets through when given."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 8080,
        registry: CollectorRegistry | None = None,
        check_timeout: float = 5.0,
        *,
        metrics: bool = True,
        probes: bool = True,
        certificate: ServingCertificate | None = None,
        auth: MetricsAuth | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.registry = registry or REGISTRY
        self.metrics = metrics
        self.probes = probes
        self.certificate = certificate
        self.auth = auth
        self._check_timeout = check_timeout
        self._checks: dict[str, ReadinessCheck] = {}
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.certificate is not None else "http"

    def add_readiness_check(self, name: str, fn: ReadinessCheck) -> None:
        self._checks[name] = fn

    def remove_readiness_check(self, name: str) -> None:
        self._checks.pop(name, None)

    async def start(self) -> None:
        app = web.Application()
        if self.metrics:
            app.router.add_get("/metrics", self._metrics)
        if self.probes:
            app.router.add_get("/healthz", self._healthz)
            app.router.add_get("/livez", self._healthz)
            app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        context = self.certificate.context if self.certificate is not None else None
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=context)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        if self.certificate is not None and self.certificate.cert_dir is not None:
            self._watch = asyncio.get_running_loop().create_task(
                self.certificate.watch(), name="metrics-certificate"
            )
        log.info("http server listening", host=self.host, port=self.port, scheme=self.scheme)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.auth is not None:
            refusal = await self.auth.refusal(request)
            if refusal is not None:
                return refusal
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(self.registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def failing_checks(self) -> list[str]:
        failing = []
        for name, fn in list(self._checks.items()):
            if not await self._passes(name, fn):
                failing.append(name)
        return failing

    async def _passes(self, name: str, fn: ReadinessCheck) -> bool:
        try:
            result = fn()
            if inspect.isawaitable(result):
                async with asyncio.timeout(self._check_timeout):
                    result = await result
            return bool(result)
        except Exception as exc:
            log.info("readiness check failed", check=name, error=str(exc) or type(exc).__name__)
            return False

    async def _readyz(self, request: web.Request) -> web.Response:
        failing = set(await self.failing_checks())
        lines = [f"[-]{name} failed" if name in failing else f"[+]{name} ok" for name in self._checks]
        if failing:
            lines.append("readyz check failed")
            return web.Response(status=500, text="\n".join(lines) + "\n")
        if "verbose" in request.query:
            return web.Response(text="\n".join([*lines, "readyz check passed"]) + "\n")
        return web.Response(text="ok")


def parse_bind_address(address: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """`:8080`, `127.0.0.1:0` or `0` (disabled is `0`, returned as port -1)."""
    if address in ("0", ""):
        return default_host, -1
    host, _, port = address.rpartition(":")
    return host or default_host, int(port)


def addresses_problem(metrics_address: str, health_address: str, serving: MetricsServing) -> str | None:
    """Why the two addresses cannot be served together (None when they can): secure metrics (HTTPS)
    and the probes (HTTP) cannot share a port."""
    metrics = parse_bind_address(metrics_address)
    if serving.insecure or metrics[1] <= 0 or metrics != parse_bind_address(health_address):
        return None
    return (
        f"metrics.bindAddress and health.healthProbeBindAddress are both {metrics_address}: metrics are "
        "served over HTTPS and the probes over HTTP, so they need different ports (or --metrics-insecure)"
    )


async def start_servers(
    metrics_address: str,
    health_address: str,
    registry: CollectorRegistry,
    ready: ReadinessCheck,
    *,
    serving: MetricsServing | None = None,
    kube: Any = None,
    auth: MetricsAuth | None = None,
) -> list[HealthServer]:
    """The metrics server on `metrics_address` (`metrics.bindAddress`) and the probes' on
    `health_address` (`health.healthProbeBindAddress`); "0" turns one off. Secure metrics (the
    default) need `kube` for their reviews (or `auth`) and an address of their own; with
    `serving.insecure` one address may serve both, over HTTP."""
    serving = serving or MetricsServing()
    problem = addresses_problem(metrics_address, health_address, serving)
    if problem:
        raise ValueError(problem)
    metrics_host, metrics_port = parse_bind_address(metrics_address)
    health_host, health_port = parse_bind_address(health_address)
    shared = metrics_port > 0 and (metrics_host, metrics_port) == (health_host, health_port)
    servers: list[HealthServer] = []
    try:
        if metrics_port >= 0:
            certificate: ServingCertificate | None = None
            if not serving.insecure:
                if auth is None:
                    if kube is None:
                        raise ValueError("secure metrics serving needs a cluster client for its reviews")
                    auth = MetricsAuth.delegated(kube)
                certificate = ServingCertificate(serving.cert_dir, serving.tls)
            server = HealthServer(
                metrics_host,
                metrics_port,
                registry,
                probes=shared,
                certificate=certificate,
                auth=None if serving.insecure else auth,
            )
            if shared:
                server.add_readiness_check("informers-synced", ready)
            await server.start()
            servers.append(server)
            log.info(
                "serving /metrics" + (" /healthz /readyz" if shared else ""),
                address=f"{server.scheme}://{metrics_host}:{server.port}",
                authenticated=not serving.insecure,
            )
        if health_port >= 0 and not shared:
            server = HealthServer(health_host, health_port, registry, metrics=False)
            server.add_readiness_check("informers-synced", ready)
            await server.start()
            servers.append(server)
            log.info("serving /healthz /readyz", address=f"http://{health_host}:{server.port}")
    except BaseException:
        for server in servers:
            await server.stop()
        raise
    return servers
