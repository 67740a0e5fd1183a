"""How a client reaches and authenticates to one apiserver: from a kubeconfig (file or dict) or from
the Pod's ServiceAccount, as client-go's clientcmd and rest.InClusterConfig read them.

Our own loader, not kubernetes_asyncio's: importing that package loads every generated model and
costs a process about 35 MiB of memory, which matters in a manager that holds twenty workers.

Supported: server, certificate-authority(-data), insecure-skip-tls-verify, tls-server-name and
proxy-url of a cluster; token, tokenFile, client-certificate(-data), client-key(-data),
username/password and exec plugins (client.authentication.k8s.io v1 and v1beta1, token or client
certificate, re-run once the credential expires) of a user. auth-provider plugins are refused.
Paths in a kubeconfig file are relative to the file's directory. Client keys are loaded into the TLS
context through a file that exists only while it is read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
import json
import os
import ssl
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

Obj = dict[str, Any]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# client-go re-reads a token file at most once a minute (transport.cachingTokenSource).
TOKEN_FILE_REREAD_SECONDS = 60.0
# A cluster extension handed to exec plugins as spec.cluster.config when provideClusterInfo is set.
EXEC_CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class CredentialsError(Exception):
    """The kubeconfig or the in-cluster environment cannot give a usable client configuration."""


# ------------------------------------------------------------------------------------------------
# Exec plugins


@dataclass
class ExecPlugin:
    """A kubeconfig user's `exec` block: a command that prints an ExecCredential."""

    api_version: str
    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cluster_info: Obj | None = None  # set when provideClusterInfo is true

    @classmethod
    def parse(cls, block: Obj, cluster: Obj) -> ExecPlugin:
        for key in ("command", "apiVersion"):
            if not block.get(key):
                raise CredentialsError(f"exec: missing {key!r} in the user's exec block")
        if block["apiVersion"] not in EXEC_API_VERSIONS:
            raise CredentialsError(
                f"exec plugin: invalid apiVersion {block['apiVersion']!r}; "
                f"want one of {', '.join(EXEC_API_VERSIONS)}"
            )
        args = block.get("args") or []
        if not isinstance(args, list):
            raise CredentialsError("exec: args must be a list of strings")
        env = {}
        for item in block.get("env") or []:
            if not isinstance(item, dict) or "name" not in item:
                raise CredentialsError("exec: each env entry needs a name and a value")
            env[str(item["name"])] = str(item.get("value", ""))
        info = None
        if block.get("provideClusterInfo"):
            # client.authentication.k8s.io Cluster: the kubeconfig cluster's own field names.
            keys = (
                "server",
                "tls-server-name",
                "insecure-skip-tls-verify",
                "certificate-authority-data",
                "proxy-url",
            )
            info = {k: cluster[k] for k in keys if cluster.get(k)}
            for extension in cluster.get("extensions") or []:
                if isinstance(extension, dict) and extension.get("name") == EXEC_CLUSTER_EXTENSION:
                    info["config"] = extension.get("extension")
        return cls(str(block["apiVersion"]), str(block["command"]), [str(a) for a in args], env, info)

    async def run(self) -> Obj:
        """Run the plugin once; its ExecCredential `status`."""
        spec: Obj = {"interactive": False}
        if self.cluster_info is not None:
            spec["cluster"] = self.cluster_info
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise CredentialsError(f"exec: executable {self.command} failed: {exc.strerror or exc}") from exc
        stdout, stderr = await proc.communicate()
        if proc.returncode != 0:
            detail = stderr.decode(errors="replace").strip()
            raise CredentialsError(
                f"exec: executable {self.command} failed with exit code {proc.returncode}"
                + (f": {detail}" if detail else "")
            )
        try:
            credential = json.loads(stdout)
        except ValueError as exc:
            raise CredentialsError(f"exec: decoding stdout of {self.command}: {exc}") from exc
        if not isinstance(credential, dict) or credential.get("kind") != "ExecCredential":
            raise CredentialsError(f"exec: {self.command} did not print an ExecCredential")
        if credential.get("apiVersion") != self.api_version:
            raise CredentialsError(
                f"exec plugin is configured to use API version {self.api_version}, "
                f"plugin returned version {credential.get('apiVersion')}"
            )
        status = credential.get("status")
        if not isinstance(status, dict) or not (
            status.get("token") or (status.get("clientCertificateData") and status.get("clientKeyData"))
        ):
            raise CredentialsError(f"exec: {self.command} returned neither a token nor a client certificate")
        return status


def _expiry(status: Obj) -> float | None:
    """The credential's expirationTimestamp as a time.time() value; None when it does not expire."""
    stamp = status.get("expirationTimestamp")
    if not stamp:
        return None
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise CredentialsError(f"exec: invalid expirationTimestamp {stamp!r}") from exc


# ------------------------------------------------------------------------------------------------
# Credentials


@dataclass
class Credentials:
    """Where the apiserver is and how to prove who we are; `authorization()` and `ssl_context()`
    give what each request needs, refreshing tokens (token files, exec plugins) as they expire."""

    host: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    verify: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    basic_auth: tuple[str, str] | None = None
    exec_plugin: ExecPlugin | None = None

    def __post_init__(self) -> None:
        self.host = self.host.rstrip("/")
        self._token_read_at = -1.0
        self._exec_expiry: float | None = 0.0  # 0: never run; None: valid forever
        self._exec_lock = asyncio.Lock()
        self._ssl: ssl.SSLContext | None = None
        self._ssl_key: tuple[Any, ...] | None = None

    async def authorization(self) -> str | None:
        """The Authorization header value, or None (client certificates only)."""
        if self.exec_plugin is not None:
            await self._refresh_exec()
        elif self.token_file and time.monotonic() - self._token_read_at >= TOKEN_FILE_REREAD_SECONDS:
            self._read_token_file()
        if self.token:
            return f"Bearer {self.token}"
        if self.basic_auth:
            user, password = self.basic_auth
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return None

    def _read_token_file(self) -> None:
        assert self.token_file is not None
        try:
            with open(self.token_file) as f:
                token = f.read().strip()
        except OSError as exc:
            if self.token:  # keep the last good token, as client-go does
                return
            raise CredentialsError(f"reading token file {self.token_file}: {exc.strerror or exc}") from exc
        self.token = token or self.token
        self._token_read_at = time.monotonic()

    async def _refresh_exec(self) -> None:
        assert self.exec_plugin is not None
        if not self._exec_expired():
            return
        async with self._exec_lock:
            if not self._exec_expired():
                return
            status = await self.exec_plugin.run()
            self.token = status.get("token") or None
            if status.get("clientCertificateData"):
                self.cert_data = str(status["clientCertificateData"]).encode()
                self.key_data = str(status.get("clientKeyData", "")).encode()
            self._exec_expiry = _expiry(status)

    def _exec_expired(self) -> bool:
        return self._exec_expiry is not None and time.time() >= self._exec_expiry

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for https servers (None for http), rebuilt when the client certificate
        changes (an exec plugin may hand out a new one)."""
        if not self.host.startswith("https"):
            return None
        key = (self.cert_file, self.key_file, self.cert_data, self.key_data)
        if self._ssl is None or self._ssl_key != key:
            self._ssl, self._ssl_key = self._build_ssl(), key
        return self._ssl

    def _build_ssl(self) -> ssl.SSLContext:
        if self.ca_file or self.ca_data:
            # Only the kubeconfig's CA is trusted, as client-go does; the system roots when it has none.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            if self.ca_file:
                ctx.load_verify_locations(cafile=self.ca_file)
            if self.ca_data:
                ctx.load_verify_locations(cadata=self.ca_data.decode(errors="replace"))
        else:
            ctx = ssl.create_default_context()
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, keyfile=self.key_file)
        elif self.cert_data:
            with _private_file(self.cert_data + b"\n" + (self.key_data or b"")) as path:
                ctx.load_cert_chain(path)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if hasattr(ssl, "VERIFY_X509_STRICT"):
            # Cluster CAs often lack extensions RFC 5280 strict mode wants; Go clients accept them.
            ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
        return ctx


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A file readable only by us holding `data`, removed when the block ends."""
    fd, path = tempfile.mkstemp(prefix="kube-cred-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# ------------------------------------------------------------------------------------------------
# Loaders


def from_kubeconfig_file(path: str, context: str | None = None) -> Credentials:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise CredentialsError(f"reading kubeconfig {path}: {exc.strerror or exc}") from exc
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise CredentialsError(f"kubeconfig {path} is not valid YAML: {exc}") from exc
    return from_kubeconfig_dict(config, context, base_dir=os.path.dirname(os.path.abspath(path)))


def from_kubeconfig_dict(config: Any, context: str | None = None, base_dir: str | None = None) -> Credentials:
    """Credentials for `context` (default: current-context) of a parsed kubeconfig."""
    if not isinstance(config, dict):
        raise CredentialsError("invalid kubeconfig: not a mapping")
    context_name = context or config.get("current-context")
    if not context_name:
        raise CredentialsError("invalid kubeconfig: no context given and current-context is not set")
    ctx = _named(config, "contexts", "context", context_name)
    cluster = _named(config, "clusters", "cluster", ctx.get("cluster"))
    user = _named(config, "users", "user", ctx.get("user"), missing_ok=True)
    server = cluster.get("server")
    if not server:
        raise CredentialsError(f"invalid kubeconfig: cluster {ctx.get('cluster')!r} has no server")

    def path(value: Any) -> str | None:
        if not value:
            return None
        value = os.path.expanduser(str(value))
        return value if os.path.isabs(value) or base_dir is None else os.path.join(base_dir, value)

    creds = Credentials(
        host=str(server),
        ca_file=path(cluster.get("certificate-authority")),
        ca_data=_b64(cluster.get("certificate-authority-data"), "certificate-authority-data"),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
        cert_file=path(user.get("client-certificate")),
        key_file=path(user.get("client-key")),
        cert_data=_b64(user.get("client-certificate-data"), "client-certificate-data"),
        key_data=_b64(user.get("client-key-data"), "client-key-data"),
        token=user.get("token") or None,
        token_file=path(user.get("tokenFile")),
    )
    if user.get("username") and user.get("password"):
        creds.basic_auth = (str(user["username"]), str(user["password"]))
    if user.get("auth-provider"):
        name = (user["auth-provider"] or {}).get("name", "")
        raise CredentialsError(f"auth-provider {name!r} is not supported; use an exec plugin")
    if user.get("exec"):
        creds.exec_plugin = ExecPlugin.parse(user["exec"], cluster)
    if bool(creds.cert_file or creds.cert_data) != bool(creds.key_file or creds.key_data):
        raise CredentialsError(
            "invalid kubeconfig: a client certificate needs its key, and a key its certificate"
        )
    return creds


def in_cluster() -> Credentials:
    """Credentials of the Pod's ServiceAccount, as rest.InClusterConfig (token re-read every minute)."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise CredentialsError(
            "unable to load in-cluster configuration, "
            "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined"
        )
    if ":" in host:  # IPv6
        host = f"[{host}]"
    creds = Credentials(
        host=f"https://{host}:{port}",
        ca_file=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"),
        token_file=os.path.join(SERVICE_ACCOUNT_DIR, "token"),
    )
    creds._read_token_file()
    return creds


def _named(config: Obj, list_key: str, inner: str, name: Any, missing_ok: bool = False) -> Obj:
    for entry in config.get(list_key) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(inner) or {}
            if not isinstance(value, dict):
                raise CredentialsError(f"invalid kubeconfig: {inner} {name!r} is not a mapping")
            return value
    if missing_ok and not name:
        return {}
    raise CredentialsError(f"invalid kubeconfig: {inner} {name!r} not found")


def _b64(value: Any, name: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CredentialsError(f"invalid kubeconfig: {name} is not valid base64") from exc
