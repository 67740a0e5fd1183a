"""The harness's own logic, without starting any cluster."""

from __future__ import annotations

import importlib.util
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("localfleet", REPO / "hack" / "localfleet.py")
localfleet = importlib.util.module_from_spec(spec)
sys.modules["localfleet"] = localfleet
spec.loader.exec_module(localfleet)


def test_versions_are_pinned_in_one_file():
    v = localfleet.read_versions()
    assert v["K8S_VERSION"].startswith("1.36.")
    assert v["KWOK_VERSION"].startswith("v0.8.")
    assert v["LWS_VERSION"].startswith("v0.")


def test_binary_cache_is_keyed_by_version():
    bins = localfleet.Binaries({"K8S_VERSION": "1.36.3", "KWOK_VERSION": "v0.8.0", "LWS_VERSION": "v0.9.0"})
    assert bins.path("kube-apiserver").parent.name == "kubernetes-v1.36.3"
    assert bins.path("etcd").parent.name == "kubernetes-v1.36.3"
    assert bins.path("kwok").parent.name == "kwok-v0.8.0"
    assert bins.path("lws-manager").parent.name == "lws-v0.9.0"
    assert str(bins.path("kubectl")).startswith(str(localfleet.CACHE))


def test_certificates_chain_to_the_ca_and_serve_loopback(tmp_path):
    ca = localfleet.CertificateAuthority("test CA")
    crt, key = ca.issue("kube-apiserver", server=True)
    cert = x509.load_pem_x509_certificate(crt)
    cert.verify_directly_issued_by(ca.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    client_crt, _ = ca.issue("admin", organizations=["system:masters"])
    subject = x509.load_pem_x509_certificate(client_crt).subject.rfc4514_string()
    assert "CN=admin" in subject and "O=system:masters" in subject
    # The pair loads as a TLS identity.
    (tmp_path / "c.crt").write_bytes(crt)
    (tmp_path / "c.key").write_bytes(key)
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
        tmp_path / "c.crt", tmp_path / "c.key"
    )


def test_kubeconfig_is_self_contained_as_multikueue_requires():
    ca = localfleet.CertificateAuthority("test CA")
    crt, key = ca.issue("someone")
    kc = localfleet.kubeconfig("worker1", "https://127.0.0.1:6443", ca.cert_pem, crt, key, "someone")
    text = yaml.safe_dump(kc)
    for forbidden in (
        "certificate-authority:",
        "tokenFile",
        "insecure-skip-tls-verify",
        "exec:",
        "client-certificate:",
    ):
        assert forbidden not in text
    assert kc["current-context"] == "worker1"
    assert kc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"


def test_lws_webhooks_are_rewritten_to_the_local_process(tmp_path):
    manifest = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                {
                    "name": "mlws.example",
                    "clientConfig": {"service": {"name": "s", "namespace": "system", "path": "/m-lws"}},
                    "rules": [{"resources": ["leaderworkersets"]}],
                },
                {
                    "name": "mpod.example",
                    "clientConfig": {"service": {"name": "s", "namespace": "system", "path": "/m-pod"}},
                    "rules": [{"resources": ["pods"]}],
                },
            ],
        },
    ]
    lws_dir = tmp_path / "lws"
    lws_dir.mkdir()
    (lws_dir / "webhooks.yaml").write_text(yaml.safe_dump_all(manifest))

    class Bins:
        lws_webhooks = lws_dir / "webhooks.yaml"

    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.bins = Bins()
    up.ca = localfleet.CertificateAuthority("test CA")
    plan = localfleet.ClusterPlan("worker1", "worker", tmp_path, ports={"lws-webhook": 19443})
    docs = up.lws_webhook_configs(plan)
    hooks = docs[0]["webhooks"]
    assert docs[0]["metadata"]["name"] == "lws-mutating-webhook-configuration"
    assert hooks[0]["clientConfig"]["url"] == "https://127.0.0.1:19443/m-lws"
    assert "service" not in hooks[0]["clientConfig"] and hooks[0]["clientConfig"]["caBundle"]
    assert "objectSelector" not in hooks[0]
    assert hooks[1]["objectSelector"]["matchExpressions"][0]["key"] == "leaderworkerset.sigs.k8s.io/name"


def test_stop_processes_kills_the_whole_group_and_only_recorded_binaries(tmp_path):
    sleep = "/bin/sleep" if Path("/bin/sleep").exists() else "/usr/bin/sleep"
    # A process group whose leader has a child: both must go.
    script = f"{sleep} 300 & wait"
    proc = subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True)
    time.sleep(0.3)
    children = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) >= 2
    record = {"pid": proc.pid, "pgid": proc.pid, "cmd": ["/bin/sh"], "cluster": "x", "component": "y"}
    # A recorded command that does not match what runs under that pid is never signalled.
    stranger = dict(record, cmd=["/usr/bin/something-else"])
    localfleet.stop_processes([stranger], timeout=0.5)
    assert proc.poll() is None
    localfleet.stop_processes([record], timeout=5)
    proc.wait(timeout=5)
    for pid in children:
        assert not localfleet.pid_alive(int(pid))


def test_down_is_idempotent_on_a_missing_dir(tmp_path):
    assert localfleet.down(tmp_path / "nope") == 0


@pytest.mark.parametrize("goversion", ["go1.25.3", "go1.9"])
def test_old_go_is_refused_with_a_clear_message(monkeypatch, goversion):
    builder = localfleet.Builder(localfleet.Binaries(localfleet.read_versions()))

    def fake_run(args, **kwargs):
        return subprocess.CompletedProcess(
            args, 0, stdout=f"{goversion}\nhttps://proxy.golang.org\n/tmp/mod\n"
        )

    monkeypatch.setattr(localfleet.shutil, "which", lambda name: "/usr/bin/go")
    monkeypatch.setattr(localfleet.subprocess, "run", fake_run)
    with pytest.raises(localfleet.FleetError, match="too old"):
        builder.check_go()


def test_missing_go_is_refused_with_a_clear_message(monkeypatch):
    builder = localfleet.Builder(localfleet.Binaries(localfleet.read_versions()))
    monkeypatch.setattr(localfleet.shutil, "which", lambda name: None)
    with pytest.raises(localfleet.FleetError, match="Go is not installed"):
        builder.check_go()
