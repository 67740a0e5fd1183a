"""Secure metrics against a real kube-apiserver, for both processes (`python -m worker_agent`,
`python -m manager`): /metrics is HTTPS and answers 401 to a caller without a token or with one the
TokenReview does not authenticate, 403 to an authenticated ServiceAccount no RBAC rule allows
`get /metrics`, and the metrics to one bound to deploy's kueue-metrics-reader ClusterRole; the health
probes stay plain HTTP without a token. `--metrics-insecure` serves plain HTTP to anyone; a bad
`--metrics-cert-dir` stops start-up. The HTTP layer's cases one by one: tests/unit/test_metrics_auth.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from kube_runtime import delegated_auth
from kube_runtime.client import AlreadyExists, KubeClient, NotFound
from kueue_domain import api

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "kueue-system"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
SERVICE_ACCOUNT = api.Resource("", "v1", "serviceaccounts", "ServiceAccount", True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # self-signed at start-up
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def metrics_reader_role() -> dict:
    """The kueue-metrics-reader ClusterRole as deploy/worker-agent/rbac.yaml defines it."""
    docs = yaml.safe_load_all((REPO / "deploy" / "worker-agent" / "rbac.yaml").read_text())
    return next(d for d in docs if d and d["metadata"]["name"] == "kueue-metrics-reader")


async def service_account_token(kube: KubeClient, name: str) -> str:
    with contextlib.suppress(AlreadyExists):
        await kube.create(
            SERVICE_ACCOUNT,
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": NAMESPACE},
            },
        )
    token = await kube.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return token["status"]["token"]


@contextlib.asynccontextmanager
async def identities(kube: KubeClient) -> AsyncIterator[tuple[str, str, str]]:
    """(reader token, its user name, an unbound ServiceAccount's token): the reader bound to
    kueue-metrics-reader; everything removed afterwards."""
    suffix = uuid.uuid4().hex[:6]
    reader, other = f"metrics-reader-{suffix}", f"metrics-other-{suffix}"
    with contextlib.suppress(AlreadyExists):
        await kube.create(
            api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
    with contextlib.suppress(AlreadyExists):
        await kube.request("POST", f"{RBAC}/clusterroles", body=metrics_reader_role())
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": reader},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "kueue-metrics-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": reader, "namespace": NAMESPACE}],
    }
    await kube.request("POST", f"{RBAC}/clusterrolebindings", body=binding)
    try:
        yield (
            await service_account_token(kube, reader),
            f"system:serviceaccount:{NAMESPACE}:{reader}",
            await service_account_token(kube, other),
        )
    finally:
        with contextlib.suppress(NotFound):
            await kube.request("DELETE", f"{RBAC}/clusterrolebindings/{reader}")
        for name in (reader, other):
            with contextlib.suppress(NotFound):
                await kube.delete(SERVICE_ACCOUNT, name, NAMESPACE)


@contextlib.contextmanager
def process(module: str, kubeconfig: str, config: str, log: Path, *flags: str):
    """`python -m <module>`; yields (metrics port, health port)."""
    metrics, health = free_port(), free_port()
    path = log.with_suffix(".yaml")
    path.write_text(config)
    args = ["--kubeconfig", kubeconfig, "--config", str(path)]
    args += [
        "--metrics-bind-address",
        f"127.0.0.1:{metrics}",
        "--health-probe-bind-address",
        f"127.0.0.1:{health}",
    ]
    if module == "worker_agent":
        args += ["--visibility-bind-address", "0"]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, *flags],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        yield metrics, health
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_ready(health: int, log: Path, seconds: float = 60) -> None:
    async with asyncio.timeout(seconds):
        while (await asyncio.to_thread(get, f"http://127.0.0.1:{health}/readyz"))[0] != 200:  # noqa: ASYNC110
            await asyncio.sleep(0.3)
    assert "Traceback" not in log.read_text()  # noqa: ASYNC240 - a small local file


AGENT_CONFIG = (
    "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
    "leaderElection: {leaderElect: false}\nwebhook: {port: 0}\n"
)
MANAGER_CONFIG = (
    "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nnamespace: kueue-system\n"
    "leaderElection: {leaderElect: false}\n"
)
PROCESSES = [
    pytest.param("worker_agent", AGENT_CONFIG, "kueue_admission_attempts_total", id="worker_agent"),
    pytest.param("manager", MANAGER_CONFIG, "multikueue_workloads_dispatched_total", id="manager"),
]


@pytest.mark.parametrize(("module", "config", "metric"), PROCESSES)
async def test_only_a_metrics_reader_reads_the_metrics(kube, fleet, tmp_path, module, config, metric):
    log = tmp_path / f"{module}.log"
    async with identities(kube) as (reader, reader_name, other):
        with process(module, fleet.kubeconfig("manager"), config, log) as (metrics, health):
            await wait_ready(health, log)
            url = f"https://127.0.0.1:{metrics}/metrics"
            assert await asyncio.to_thread(get, url) == (401, "Unauthorized\n")
            assert await asyncio.to_thread(get, url, "not-a-token") == (401, "Unauthorized\n")
            other_name = reader_name.replace("metrics-reader-", "metrics-other-")
            assert await asyncio.to_thread(get, url, other) == (
                403,
                f"Authorization denied for user {other_name}\n",
            )
            status, text = await asyncio.to_thread(get, url, reader)
            assert status == 200, text
            assert f"# TYPE {metric} counter" in text
            # The probes: plain HTTP, no token; the metrics port speaks TLS only.
            assert await asyncio.to_thread(get, f"http://127.0.0.1:{health}/healthz") == (200, "ok")
            assert (await asyncio.to_thread(get, f"http://127.0.0.1:{metrics}/metrics", reader))[0] != 200
    assert "Authorization for user" not in log.read_text()  # no review failed


async def test_metrics_insecure_serves_plain_http(kube, fleet, tmp_path):
    log = tmp_path / "agent-insecure.log"
    with process("worker_agent", fleet.kubeconfig("manager"), AGENT_CONFIG, log, "--metrics-insecure") as (
        metrics,
        health,
    ):
        await wait_ready(health, log)
        status, text = await asyncio.to_thread(get, f"http://127.0.0.1:{metrics}/metrics")
        assert status == 200 and "# TYPE kueue_admission_attempts_total counter" in text


@pytest.mark.parametrize("module", ["worker_agent", "manager"])
def test_a_certificate_directory_without_a_pair_stops_start_up(tmp_path, module):
    res = subprocess.run(
        [sys.executable, "-m", module, "--metrics-cert-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert f"{module}: --metrics-cert-dir {tmp_path}: no tls.crt or tls.key there" in res.stderr


async def test_the_manager_service_account_may_review_metrics_callers(kube, fleet):
    """deploy/manager's RBAC lets its ServiceAccount make the reviews (the worker_agent's:
    tests/integration/test_worker_agent_rbac.py)."""
    deploy = REPO / "deploy" / "manager"
    fleet.kubectl("manager", "apply", "-f", str(deploy / "namespace.yaml"), "-f", str(deploy / "rbac.yaml"))
    token = await service_account_token(kube, "kueue-federation-manager")
    admin = yaml.safe_load(Path(fleet.kubeconfig("manager")).read_text())  # noqa: ASYNC240 - a small local file
    admin["users"] = [{"name": "manager", "user": {"token": token}}]
    admin["contexts"] = [
        {"name": "manager", "context": {"cluster": admin["clusters"][0]["name"], "user": "manager"}}
    ]
    admin["current-context"] = "manager"
    async with await KubeClient.from_kubeconfig_dict(admin) as manager_kube:
        user = await delegated_auth.TokenReviewer(manager_kube).review(token)
        assert user is not None and user.name == "system:serviceaccount:kueue-system:kueue-federation-manager"
        access = delegated_auth.SubjectAccessReviewer(manager_kube, always_allow_groups=())
        decision = await access.authorize(user, delegated_auth.NonResourceAttributes("get", "/metrics"))
        assert decision.allowed is False


@pytest.mark.parametrize("module", ["worker_agent", "manager"])
def test_secure_metrics_and_probes_on_one_address_stop_start_up(fleet, tmp_path, module):
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "config.yaml"
    config.write_text(MANAGER_CONFIG)
    args = ["--kubeconfig", fleet.kubeconfig("manager"), "--config", str(config)]
    args += ["--metrics-bind-address", address, "--health-probe-bind-address", address]
    res = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert (
        f"{module}: metrics.bindAddress and health.healthProbeBindAddress are both {address}: metrics are "
        "served over HTTPS and the probes over HTTP, so they need different ports (or --metrics-insecure)"
    ) in res.stderr
