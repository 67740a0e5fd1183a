"""kube_runtime/credentials.py: kubeconfig and in-cluster loading, token files and exec plugins."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import ssl

import pytest
import yaml

from kube_runtime import credentials
from kube_runtime.credentials import CredentialsError
from worker_agent.webhooks import certs


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def cert_and_key() -> tuple[bytes, bytes]:
    """A self-signed certificate and its key (the webhook CA generator's), PEM."""
    return certs.generate_ca(dt.datetime.now(dt.UTC))


def config(user: dict, cluster: dict | None = None, name: str = "c") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster or {"server": "https://127.0.0.1:6443/"}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


async def test_token_and_basic_auth_headers():
    creds = credentials.from_kubeconfig_dict(config({"token": "abc"}))
    assert creds.host == "https://127.0.0.1:6443"
    assert await creds.authorization() == "Bearer abc"
    basic = credentials.from_kubeconfig_dict(config({"username": "u", "password": "p"}))
    assert await basic.authorization() == "Basic " + b64(b"u:p")
    assert await credentials.from_kubeconfig_dict(config({})).authorization() is None


def test_context_selection_and_errors():
    two = config({"token": "a"})
    two["clusters"].append({"name": "d", "cluster": {"server": "http://other:8080"}})
    two["contexts"].append({"name": "d", "context": {"cluster": "d", "user": "c"}})
    assert credentials.from_kubeconfig_dict(two).host == "https://127.0.0.1:6443"
    assert credentials.from_kubeconfig_dict(two, context="d").host == "http://other:8080"
    with pytest.raises(CredentialsError, match="context 'nope' not found"):
        credentials.from_kubeconfig_dict(two, context="nope")
    with pytest.raises(CredentialsError, match="not a mapping"):
        credentials.from_kubeconfig_dict("just text")
    with pytest.raises(CredentialsError, match="has no server"):
        credentials.from_kubeconfig_dict(config({}, cluster={"insecure-skip-tls-verify": True}))
    with pytest.raises(CredentialsError, match="certificate-authority-data is not valid base64"):
        credentials.from_kubeconfig_dict(
            config({}, cluster={"server": "https://x", "certificate-authority-data": "%%%"})
        )
    with pytest.raises(CredentialsError, match="auth-provider 'oidc' is not supported"):
        credentials.from_kubeconfig_dict(config({"auth-provider": {"name": "oidc"}}))
    with pytest.raises(CredentialsError, match="needs its key"):
        credentials.from_kubeconfig_dict(config({"client-certificate-data": b64(b"x")}))


def test_file_paths_are_relative_to_the_kubeconfig(tmp_path, cert_and_key):
    cert, key = cert_and_key
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "client.crt").write_bytes(cert)
    (tmp_path / "pki" / "client.key").write_bytes(key)
    (tmp_path / "pki" / "ca.crt").write_bytes(cert)
    path = tmp_path / "kubeconfig"
    user = {"client-certificate": "pki/client.crt", "client-key": "pki/client.key"}
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority": "pki/ca.crt"}
    path.write_text(yaml.safe_dump(config(user, cluster)))
    creds = credentials.from_kubeconfig_file(str(path))
    assert creds.cert_file == str(tmp_path / "pki" / "client.crt")
    assert creds.ca_file == str(tmp_path / "pki" / "ca.crt")
    ctx = creds.ssl_context()
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", certs.CA_COMMON_NAME),),)]
    with pytest.raises(CredentialsError, match="reading kubeconfig"):
        credentials.from_kubeconfig_file(str(tmp_path / "missing"))
    (tmp_path / "bad").write_text("a: [b")
    with pytest.raises(CredentialsError, match="not valid YAML"):
        credentials.from_kubeconfig_file(str(tmp_path / "bad"))


def test_embedded_client_key_leaves_no_file(tmp_path, monkeypatch, cert_and_key):
    cert, key = cert_and_key
    monkeypatch.setattr(credentials.tempfile, "tempdir", str(tmp_path))
    user = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(cert)}
    creds = credentials.from_kubeconfig_dict(config(user, cluster))
    ctx = creds.ssl_context()
    assert ctx is not None and len(ctx.get_ca_certs()) == 1
    assert creds.ssl_context() is ctx  # cached while the certificate stays the same
    assert list(tmp_path.iterdir()) == []


def test_insecure_and_plain_http():
    insecure = credentials.from_kubeconfig_dict(
        config(
            {}, cluster={"server": "https://x:1", "insecure-skip-tls-verify": True, "proxy-url": "http://p"}
        )
    )
    ctx = insecure.ssl_context()
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    assert insecure.proxy == "http://p"
    assert (
        credentials.from_kubeconfig_dict(config({}, cluster={"server": "http://x:1"})).ssl_context() is None
    )


async def test_token_file_is_reread(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("first\n")
    creds = credentials.from_kubeconfig_dict(config({"tokenFile": str(token)}))
    assert await creds.authorization() == "Bearer first"
    token.write_text("second")
    assert await creds.authorization() == "Bearer first"  # within the re-read interval
    monkeypatch.setattr(credentials, "TOKEN_FILE_REREAD_SECONDS", 0.0)
    assert await creds.authorization() == "Bearer second"
    token.unlink()
    assert await creds.authorization() == "Bearer second"  # the last good token stays


def plugin(tmp_path, credential: dict, exit_code: int = 0, stderr: str = "") -> str:
    """A shell exec plugin that counts its runs, saves KUBERNETES_EXEC_INFO and prints `credential`."""
    script = tmp_path / "plugin.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo run >> "{tmp_path}/runs"\n'
        f'printf %s "$KUBERNETES_EXEC_INFO" > "{tmp_path}/info"\n'
        f'printf %s "$EXTRA" > "{tmp_path}/extra"\n'
        + (f"echo '{stderr}' >&2\n" if stderr else "")
        + f"cat <<'EOF'\n{json.dumps(credential)}\nEOF\n"
        f"exit {exit_code}\n"
    )
    script.chmod(0o700)
    return str(script)


def runs(tmp_path) -> int:
    path = tmp_path / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def exec_user(command: str, api_version: str = "client.authentication.k8s.io/v1", **extra) -> dict:
    block = {"apiVersion": api_version, "command": command, "env": [{"name": "EXTRA", "value": "x"}]}
    return {"exec": {**block, **extra}}


def credential(status: dict, api_version: str = "client.authentication.k8s.io/v1") -> dict:
    return {"apiVersion": api_version, "kind": "ExecCredential", "status": status}


async def test_exec_plugin_token_without_expiry_runs_once(tmp_path):
    command = plugin(tmp_path, credential({"token": "t1"}))
    cluster = {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": b64(b"ca"),
        "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "a"}}],
    }
    creds = credentials.from_kubeconfig_dict(config(exec_user(command, provideClusterInfo=True), cluster))
    assert await creds.authorization() == "Bearer t1"
    assert await creds.authorization() == "Bearer t1"
    assert runs(tmp_path) == 1
    info = json.loads((tmp_path / "info").read_text())
    assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": b64(b"ca"),
        "config": {"audience": "a"},
    }
    assert (tmp_path / "extra").read_text() == "x"


async def test_exec_plugin_reruns_once_the_credential_expires(tmp_path, cert_and_key):
    cert, key = cert_and_key
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "clientCertificateData": cert.decode(),
        "clientKeyData": key.decode(),
        "expirationTimestamp": past,
    }
    command = plugin(tmp_path, credential(status, "client.authentication.k8s.io/v1beta1"))
    user = exec_user(command, "client.authentication.k8s.io/v1beta1")
    creds = credentials.from_kubeconfig_dict(config(user))
    assert await creds.authorization() is None  # a client certificate, no token
    assert creds.cert_data == cert and creds.ssl_context() is not None
    await creds.authorization()
    assert runs(tmp_path) == 2
    assert "spec" in json.loads((tmp_path / "info").read_text())
    assert "cluster" not in json.loads((tmp_path / "info").read_text())["spec"]


async def test_exec_plugin_failures_say_what_went_wrong(tmp_path):
    failing = plugin(tmp_path, credential({"token": "t"}), exit_code=3, stderr="no login")
    with pytest.raises(CredentialsError, match="failed with exit code 3: no login"):
        await credentials.from_kubeconfig_dict(config(exec_user(failing))).authorization()
    other = plugin(tmp_path, credential({"token": "t"}, "client.authentication.k8s.io/v1beta1"))
    with pytest.raises(
        CredentialsError, match=r"plugin returned version client\.authentication\.k8s\.io/v1beta1"
    ):
        await credentials.from_kubeconfig_dict(config(exec_user(other))).authorization()
    empty = plugin(tmp_path, credential({}))
    with pytest.raises(CredentialsError, match="neither a token nor a client certificate"):
        await credentials.from_kubeconfig_dict(config(exec_user(empty))).authorization()
    missing = str(tmp_path / "no-such-plugin")
    with pytest.raises(CredentialsError, match="no-such-plugin failed"):
        await credentials.from_kubeconfig_dict(config(exec_user(missing))).authorization()
    with pytest.raises(CredentialsError, match="invalid apiVersion"):
        credentials.from_kubeconfig_dict(config(exec_user(missing, "v2")))
    with pytest.raises(CredentialsError, match="missing 'command'"):
        credentials.from_kubeconfig_dict(config({"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}))


async def test_in_cluster(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(CredentialsError, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"):
        credentials.in_cluster()
    (tmp_path / "token").write_text("sa-token")
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    creds = credentials.in_cluster()
    assert creds.host == "https://[fd00::1]:443"
    assert creds.ca_file == os.path.join(str(tmp_path), "ca.crt")
    assert await creds.authorization() == "Bearer sa-token"
