"""An aiohttp application served over TLS with certificates that may not exist yet: what the worker's
admission webhook server and its visibility API server share.

`await server.start()` listens at once if the certificates can be had, else keeps retrying in the
background every `retry_seconds`; either way it returns. Once listening, `port` is the bound port
(useful with port 0) and the CA bundle is injected where the API server needs it. `maintain()` runs
every `check_interval` seconds until `stop()` (certificate renewal, reloads); a failed check is
logged and tried again at the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable
from typing import Any

import structlog
from aiohttp import web

from kube_runtime.client import KubeClientError
from kube_runtime.clock import Clock
from kube_runtime.tlsoptions import TLSOptions

START_TIMEOUT_SECONDS = 30.0


class RetryingTLSServer:
    """Subclasses give `app()`, `maintain()`, the log lines, and may refine `prepare()` and `context()`.

    `certificates` has `sync()` (True when the files changed), `cert_file`, `key_file` and
    `inject_ca_bundle()`."""

    # "cannot serve <what> yet; retrying"
    what = "the server"
    # "<task_prefix>-serve" and "<task_prefix>-certs": the background tasks' names.
    task_prefix = "tls"
    # "<check_failed>" when a `maintain()` round fails.
    check_failed = "server check failed"
    # Only the first failure to start is an error; the retries are logged at debug level.
    quiet_retries = False
    retry_seconds = 5.0
    # Minimum version, cipher suites, curve (a Configuration's `tls`); None: TLS 1.2 and up, defaults.
    tls_options: TLSOptions | None = None
    log: Any = structlog.get_logger(__name__)

    def __init__(
        self, certificates: Any, *, host: str, port: int, clock: Clock | None, check_interval: float
    ) -> None:
        self.certificates = certificates
        self.host = host
        self.port = port
        self.clock = clock or Clock()
        self.check_interval = check_interval
        self._ssl: ssl.SSLContext | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._failed_once = False

    # -- what a subclass gives ---------------------------------------------------------------

    def app(self) -> web.Application:
        raise NotImplementedError

    async def prepare(self) -> None:
        """What listening needs first (within START_TIMEOUT_SECONDS)."""
        await self.certificates.sync()

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.tls_options is not None:
            self.tls_options.apply(context)
        context.load_cert_chain(str(self.certificates.cert_file), str(self.certificates.key_file))
        return context

    def serving_log(self) -> tuple[str, dict[str, Any]]:
        """The line logged once listening, and its fields besides the address."""
        return f"serving {self.what}", {}

    async def maintain(self) -> None:
        """One periodic check; raising logs `check_failed` as a warning."""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        return self._site is not None

    @property
    def address(self) -> str:
        return f"{self.host or '*'}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        if not await self._try_serve():
            self._spawn(self._retry_serve(), f"{self.task_prefix}-serve")
        self._spawn(self._maintain(), f"{self.task_prefix}-certs")

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner, self._site = None, None

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _try_serve(self) -> bool:
        assert self._runner is not None
        try:
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                await self.prepare()
            context = self.context()
            site = web.TCPSite(self._runner, self.host or None, self.port, ssl_context=context)
            await site.start()
        except (OSError, KubeClientError, TimeoutError, ssl.SSLError) as exc:
            report = self.log.debug if self.quiet_retries and self._failed_once else self.log.error
            report(
                f"cannot serve {self.what} yet; retrying",
                address=self.address,
                error=str(exc) or type(exc).__name__,
            )
            self._failed_once = True
            return False
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._ssl, self._site = context, site
        message, details = self.serving_log()
        self.log.info(message, address=self.address, **details)
        with contextlib.suppress(KubeClientError, TimeoutError):  # logged inside; retried every check
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                await self.certificates.inject_ca_bundle()
        return True

    async def _retry_serve(self) -> None:
        while True:
            await self.clock.sleep(self.retry_seconds)
            if await self._try_serve():
                return

    async def _maintain(self) -> None:
        while True:
            await self.clock.sleep(self.check_interval)
            try:
                await self.maintain()
            except Exception as exc:
                self.log.warning(self.check_failed, error=str(exc) or type(exc).__name__)
