"""Self-managed TLS for the webhook server (`internalCertManagement`), as Kueue's cert-controller
does it: a CA and a serving certificate kept in one Secret (default `kueue-webhook-server-cert` in
the configuration's namespace) so that every replica serves the same certificate, written to
`webhook.certDir` as tls.crt / tls.key, renewed before it expires, and the CA bundle patched into
our Mutating- and ValidatingWebhookConfiguration, our CRDs' conversion webhook and the visibility
API's APIServices. The visibility server (worker_agent/visibility.py) serves the same certificate:
it also names the visibility Service, which the kube-apiserver's aggregator dials as
`<service>.<namespace>.svc`.

Rotation keeps clients working throughout: the serving certificate (one year) is re-issued by the
same CA when fewer than 30 days remain. When the CA itself (ten years) nears its end a new CA is
made and the Secret's ca.crt holds the new CA followed by the old one, so a replica still serving
the old certificate stays trusted until it picks up the new one (every replica re-reads the Secret
each check interval).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from kube_runtime.certs import (  # noqa: F401 - re-exported: the webhook certificates' helpers
    BACKDATE,
    CA_COMMON_NAME,
    CA_VALIDITY,
    SERVING_VALIDITY,
    generate_ca,
    issue_serving_cert,
    load_certs,
)
from kube_runtime.client import ApiError, Conflict, KubeClient, KubeClientError, NotFound
from kube_runtime.clock import Clock
from kueue_domain import api
from kueue_domain.config import Configuration
from worker_agent.visibility import APISERVICE_NAMES
from worker_agent.visibility import SERVICE_NAME as VISIBILITY_SERVICE_NAME

log = structlog.get_logger("worker_agent.webhooks.certs")

Obj = dict[str, Any]

ROTATION_MARGIN = dt.timedelta(days=30)
CHECK_INTERVAL_SECONDS = 60.0  # re-read the Secret, renew if due, re-inject the CA bundle
FIELD_MANAGER = "kueue-webhook-cert-manager"


# ------------------------------------------------------------------------------------------------
# Certificates (pure)


@dataclass(frozen=True)
class CertBundle:
    """PEM data: `ca_cert` may hold several CAs, the current one first."""

    ca_cert: bytes
    ca_key: bytes
    tls_cert: bytes
    tls_key: bytes

    def to_secret_data(self) -> dict[str, str]:
        return {
            api.SECRET_KEY_CA_CERT: base64.b64encode(self.ca_cert).decode(),
            api.SECRET_KEY_CA_KEY: base64.b64encode(self.ca_key).decode(),
            api.SECRET_KEY_TLS_CERT: base64.b64encode(self.tls_cert).decode(),
            api.SECRET_KEY_TLS_KEY: base64.b64encode(self.tls_key).decode(),
        }

    @classmethod
    def from_secret(cls, secret: Obj) -> CertBundle | None:
        data = secret.get("data") or {}
        keys = (
            api.SECRET_KEY_CA_CERT,
            api.SECRET_KEY_CA_KEY,
            api.SECRET_KEY_TLS_CERT,
            api.SECRET_KEY_TLS_KEY,
        )
        if not all(data.get(k) for k in keys):
            return None
        try:
            return cls(*(base64.b64decode(data[k]) for k in keys))
        except ValueError:
            return None


def rotation_reason(
    bundle: CertBundle,
    dns_names: Iterable[str],
    ip_addresses: Iterable[str],
    now: dt.datetime,
    margin: dt.timedelta = ROTATION_MARGIN,
) -> str | None:
    """Why `bundle` must be renewed now, or None when it is fine."""
    try:
        cas = load_certs(bundle.ca_cert)
        serving = load_certs(bundle.tls_cert)[0]
        serialization.load_pem_private_key(bundle.ca_key, password=None)
        serialization.load_pem_private_key(bundle.tls_key, password=None)
    except ValueError:
        return "unreadable certificate data"
    ca = cas[0]
    if ca.not_valid_after_utc - now < margin:
        return "the CA expires soon"
    if serving.not_valid_after_utc - now < margin:
        return "the serving certificate expires soon"
    if serving.not_valid_before_utc > now + BACKDATE:
        return "the serving certificate is not valid yet"
    try:
        serving.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the serving certificate is not signed by the current CA"
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    have_dns = set(sans.get_values_for_type(x509.DNSName))
    have_ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    missing = [n for n in dns_names if n not in have_dns] + [
        ip for ip in ip_addresses if str(ipaddress.ip_address(ip)) not in have_ips
    ]
    if missing:
        return "the serving certificate does not cover " + ", ".join(missing)
    return None


def renew(
    bundle: CertBundle | None,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: dt.datetime,
    margin: dt.timedelta = ROTATION_MARGIN,
) -> CertBundle:
    """A bundle valid for the names: a new serving certificate, and a new CA too when the current
    one is missing, unreadable or near its end (the old CA stays in ca.crt while it is valid)."""
    ca_cert, ca_key, previous = b"", b"", b""
    if bundle is not None:
        try:
            cas = load_certs(bundle.ca_cert)
            serialization.load_pem_private_key(bundle.ca_key, password=None)
            if cas[0].not_valid_after_utc - now >= margin:
                ca_cert, ca_key = bundle.ca_cert, bundle.ca_key
            elif cas[0].not_valid_after_utc > now:
                previous = cas[0].public_bytes(serialization.Encoding.PEM)
        except ValueError:
            pass
    if not ca_cert:
        new_ca, ca_key = generate_ca(now)
        ca_cert = new_ca + previous
    tls_cert, tls_key = issue_serving_cert(ca_cert, ca_key, dns_names, ip_addresses, now)
    return CertBundle(ca_cert, ca_key, tls_cert, tls_key)


def serving_names(config: Configuration) -> tuple[list[str], list[str]]:
    """DNS names and IP addresses the serving certificate covers: the webhook Service's and the
    visibility Service's in-cluster names, plus `webhook.host` when it names one address (e.g.
    127.0.0.1 for a local fleet)."""
    namespace = config.namespace
    dns = []
    for service in (config.webhook_service_name, VISIBILITY_SERVICE_NAME):
        dns += [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    ips: list[str] = []
    host = config.webhook_host
    if host and host not in ("0.0.0.0", "::"):
        try:
            ips.append(str(ipaddress.ip_address(host)))
        except ValueError:
            dns.append(host)
    return dns, ips


def write_cert_files(cert_dir: str | Path, bundle: CertBundle) -> tuple[Path, Path]:
    """tls.crt and tls.key in `cert_dir`, each replaced atomically; the key readable by us only."""
    directory = Path(cert_dir)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data, mode in (
        (api.SECRET_KEY_TLS_CERT, bundle.tls_cert, 0o644),
        (api.SECRET_KEY_TLS_KEY, bundle.tls_key, 0o600),
    ):
        path = directory / name
        tmp = directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        tmp.replace(path)
        paths.append(path)
    return paths[0], paths[1]


# ------------------------------------------------------------------------------------------------
# The Secret and the webhook configurations


class _CertFiles:
    """tls.crt and tls.key in `cert_dir`, where the webhook server reads them."""

    cert_dir: str

    @property
    def cert_file(self) -> Path:
        return Path(self.cert_dir) / api.SECRET_KEY_TLS_CERT

    @property
    def key_file(self) -> Path:
        return Path(self.cert_dir) / api.SECRET_KEY_TLS_KEY


class CertManager(_CertFiles):
    """Keeps the Secret, the files in certDir and the configurations' caBundle in step."""

    def __init__(
        self,
        kube: KubeClient,
        config: Configuration,
        clock: Clock | None = None,
        *,
        webhook_configurations: Sequence[tuple[api.Resource, str]] = (
            (api.MUTATING_WEBHOOK_CONFIGURATION, api.MUTATING_WEBHOOK_CONFIGURATION_NAME),
            (api.VALIDATING_WEBHOOK_CONFIGURATION, api.VALIDATING_WEBHOOK_CONFIGURATION_NAME),
        ),
        conversion_crds: Sequence[str] = api.KUEUE_CRD_NAMES,
        api_services: Sequence[str] = APISERVICE_NAMES,
        margin: dt.timedelta = ROTATION_MARGIN,
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock or Clock()
        self.namespace = config.namespace
        self.secret_name = config.webhook_secret_name
        self.cert_dir = config.webhook_cert_dir
        self.dns_names, self.ip_addresses = serving_names(config)
        self.webhook_configurations = list(webhook_configurations)
        self.conversion_crds = list(conversion_crds)
        self.api_services = list(api_services)
        self.margin = margin
        self.bundle: CertBundle | None = None
        self.stored = False  # the bundle is the one in the Secret (not a local stand-in)
        self._log = log.bind(namespace=self.namespace, name=self.secret_name, kind="Secret")

    def ca_bundle(self) -> bytes:
        return self.bundle.ca_cert if self.bundle else b""

    async def sync(self) -> bool:
        """Bring the bundle in line with the Secret (creating or renewing it when needed) and write
        the files; True when the serving certificate changed. When the Secret cannot be read or
        written, a locally generated bundle serves until it can."""
        try:
            bundle = await self._sync_secret()
            self.stored = True
        except (KubeClientError, TimeoutError) as exc:
            if (
                self.bundle is not None
                and rotation_reason(
                    self.bundle, self.dns_names, self.ip_addresses, self.clock.now(), self.margin
                )
                is None
            ):
                self._log.warning(
                    "cannot sync the webhook certificate Secret; keeping the current one", error=str(exc)
                )
                return False
            self._log.warning(
                "cannot read or write the webhook certificate Secret; serving a certificate only this "
                "replica knows until it can (check the Role for secrets in the namespace)",
                error=str(exc),
            )
            bundle = renew(self.bundle, self.dns_names, self.ip_addresses, self.clock.now(), self.margin)
            self.stored = False
        changed = (
            self.bundle is None
            or bundle.tls_cert != self.bundle.tls_cert
            or bundle.tls_key != self.bundle.tls_key
        )
        self.bundle = bundle
        if changed or not self.cert_file.exists():
            write_cert_files(self.cert_dir, bundle)
        return changed

    async def _sync_secret(self) -> CertBundle:
        for _ in range(5):  # optimistic concurrency with the other replicas
            try:
                secret = await self.kube.get(api.SECRET, self.secret_name, namespace=self.namespace)
            except NotFound:
                secret = None
            current = CertBundle.from_secret(secret) if secret is not None else None
            now = self.clock.now()
            reason = (
                "no certificate yet"
                if current is None
                else rotation_reason(current, self.dns_names, self.ip_addresses, now, self.margin)
            )
            if reason is None and current is not None:
                return current
            fresh = renew(current, self.dns_names, self.ip_addresses, now, self.margin)
            try:
                if secret is None:
                    await self.kube.create(
                        api.SECRET,
                        {
                            "apiVersion": "v1",
                            "kind": "Secret",
                            "metadata": {"name": self.secret_name, "namespace": self.namespace},
                            "type": "Opaque",
                            "data": fresh.to_secret_data(),
                        },
                        namespace=self.namespace,
                    )
                else:
                    secret["data"] = {**(secret.get("data") or {}), **fresh.to_secret_data()}
                    await self.kube.replace(api.SECRET, secret, namespace=self.namespace)
            except Conflict:  # another replica wrote first (AlreadyExists is a Conflict): use theirs
                continue
            self._log.info(
                "issued webhook certificates", reason=reason, dns_names=self.dns_names, ips=self.ip_addresses
            )
            return fresh
        raise Conflict({"code": 409, "message": "the webhook certificate Secret kept changing"})

    async def inject_ca_bundle(self) -> None:
        """Patch our CA bundle into every webhook of the configurations that exist, and into the
        conversion webhook of our CRDs that convert through one. Only a bundle from the Secret:
        replicas serving local stand-ins would overwrite each other's CA."""
        if self.bundle is None or not self.stored:
            return
        wanted = base64.b64encode(self.bundle.ca_cert).decode()
        for resource, name in self.webhook_configurations:
            obj = await self._read(resource, name)
            paths = [
                f"/webhooks/{i}/clientConfig/caBundle"
                for i, hook in enumerate((obj or {}).get("webhooks") or ())
                if (hook.get("clientConfig") or {}).get("caBundle") != wanted
            ]
            await self._add_bundle(resource, obj, paths, wanted)
        for name in self.conversion_crds:
            obj = await self._read(api.CUSTOM_RESOURCE_DEFINITION, name)
            conversion = ((obj or {}).get("spec") or {}).get("conversion") or {}
            client_config = (conversion.get("webhook") or {}).get("clientConfig")
            if conversion.get("strategy") != "Webhook" or not self._addresses_us(client_config):
                continue
            if client_config.get("caBundle") != wanted:
                paths = ["/spec/conversion/webhook/clientConfig/caBundle"]
                await self._add_bundle(api.CUSTOM_RESOURCE_DEFINITION, obj, paths, wanted)
        for name in self.api_services:
            obj = await self._read(api.API_SERVICE, name)
            spec = (obj or {}).get("spec") or {}
            service = spec.get("service") or {}
            ours = (
                service.get("name") == VISIBILITY_SERVICE_NAME and service.get("namespace") == self.namespace
            )
            if ours and spec.get("caBundle") != wanted and not spec.get("insecureSkipTLSVerify"):
                await self._add_bundle(api.API_SERVICE, obj, ["/spec/caBundle"], wanted)

    def _addresses_us(self, client_config: Obj | None) -> bool:
        """A conversion webhook reaches this agent: our Service in our namespace, or a URL on our
        port. Another agent of the cluster (a second install, a test's) keeps its own CRDs' CA."""
        if not client_config:
            return False
        service = client_config.get("service")
        if service is not None:
            return (
                service.get("name") == self.config.webhook_service_name
                and service.get("namespace") == self.namespace
            )
        port = urllib.parse.urlsplit(str(client_config.get("url") or "")).port
        return port is not None and port == self.config.webhook_port

    async def _read(self, resource: api.Resource, name: str) -> Obj | None:
        try:
            return await self.kube.get(resource, name)
        except NotFound:
            return None
        except KubeClientError as exc:
            log.warning(
                "cannot read an object to inject the CA bundle", kind=resource.kind, name=name, error=str(exc)
            )
            return None

    async def _add_bundle(
        self, resource: api.Resource, obj: Obj | None, paths: list[str], wanted: str
    ) -> None:
        """One JSON patch adding the bundle at `paths`, guarded by the resourceVersion it was read at."""
        if obj is None or not paths:
            return
        name = obj["metadata"]["name"]
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]}
        ]
        ops += [{"op": "add", "path": path, "value": wanted} for path in paths]
        try:
            await self.kube.patch_json(resource, name, ops, field_manager=FIELD_MANAGER)
            log.info("injected the webhook CA bundle", kind=resource.kind, name=name, places=len(paths))
        except ApiError as exc:  # changed meanwhile (a failed test is 422): next round
            log.info(
                "could not inject the webhook CA bundle yet", kind=resource.kind, name=name, error=str(exc)
            )


class FileCerts(_CertFiles):
    """`internalCertManagement.enable: false`: certificates provided in certDir (cert-manager)."""

    def __init__(self, config: Configuration) -> None:
        self.cert_dir = config.webhook_cert_dir
        self._mtimes: tuple[float, float] | None = None

    async def sync(self) -> bool:
        """True when the files appeared or changed; FileNotFoundError while they are missing."""
        mtimes = (self.cert_file.stat().st_mtime, self.key_file.stat().st_mtime)
        changed = mtimes != self._mtimes
        self._mtimes = mtimes
        return changed

    async def inject_ca_bundle(self) -> None:
        return None
