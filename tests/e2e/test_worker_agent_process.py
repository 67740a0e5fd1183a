"""`python -m worker_agent` as a process: leader election, /readyz, /metrics with upstream names (over
HTTPS, with the fleet's metrics-reader token), and user mistakes (a missing LocalQueue or
ClusterQueue) reported without a traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from kube_runtime.client import KubeClient, NotFound
from kueue_domain import api

pytestmark = pytest.mark.realcluster


def typed(resource: api.Resource, body: dict) -> dict:
    return {"apiVersion": resource.api_version, "kind": resource.kind, **body}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, token: str | None = None) -> tuple[int, str]:
    """(status, body); an HTTPS URL (our secure /metrics, self-signed) is not verified."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


async def wait_until(check, seconds: float = 30) -> None:
    try:
        async with asyncio.timeout(seconds):
            while not await check():  # noqa: ASYNC110 - polling a process and an API server
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"{check.__name__} did not hold within {seconds}s") from None


async def test_worker_agent_process(fleet, tmp_path: Path):
    cluster = fleet.workers[-1]
    kubeconfig = fleet.kubeconfig(cluster)
    token = fleet.metrics_token(cluster)  # /metrics is HTTPS behind a TokenReview and a SubjectAccessReview
    metrics_port, health_port = free_port(), free_port()
    lease = f"test-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\n"
        "kind: Configuration\n"
        f"leaderElection: {{leaderElect: true, resourceName: {lease}}}\n"
        "webhook: {port: 0}\n"
    )
    log_path = tmp_path / "agent.log"
    suffix = uuid.uuid4().hex[:6]
    ns, rf, cq = f"agent-{suffix}", f"rf-{suffix}", f"cq-{suffix}"
    async with await KubeClient.from_kubeconfig_file(kubeconfig) as kube:
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(  # noqa: ASYNC220 - started once, not awaited
                [
                    sys.executable,
                    "-m",
                    "worker_agent",
                    "--kubeconfig",
                    kubeconfig,
                    "--config",
                    str(config),
                    "--metrics-bind-address",
                    f"127.0.0.1:{metrics_port}",
                    "--health-probe-bind-address",
                    f"127.0.0.1:{health_port}",
                    "--visibility-bind-address",
                    "0",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        try:

            async def ready() -> bool:
                return http_get(f"http://127.0.0.1:{health_port}/readyz")[0] == 200

            await wait_until(ready)

            async def leading() -> bool:
                try:
                    obj = await kube.get(api.LEASE, lease, namespace="kueue-system")
                except NotFound:
                    return False
                return bool(obj["spec"].get("holderIdentity"))

            await wait_until(leading)

            await kube.create(api.NAMESPACE, typed(api.NAMESPACE, {"metadata": {"name": ns}}))
            await kube.create(
                api.RESOURCE_FLAVOR, typed(api.RESOURCE_FLAVOR, {"metadata": {"name": rf}, "spec": {}})
            )
            await kube.create(
                api.CLUSTER_QUEUE,
                typed(
                    api.CLUSTER_QUEUE,
                    {
                        "metadata": {"name": cq},
                        "spec": {
                            "namespaceSelector": {},
                            "resourceGroups": [
                                {
                                    "coveredResources": ["cpu"],
                                    "flavors": [
                                        {"name": rf, "resources": [{"name": "cpu", "nominalQuota": "2"}]}
                                    ],
                                }
                            ],
                        },
                    },
                ),
            )
            await kube.create(
                api.LOCAL_QUEUE,
                typed(api.LOCAL_QUEUE, {"metadata": {"name": "main"}, "spec": {"clusterQueue": cq}}),
                namespace=ns,
            )
            await kube.create(
                api.LOCAL_QUEUE,
                typed(
                    api.LOCAL_QUEUE, {"metadata": {"name": "orphan"}, "spec": {"clusterQueue": "no-such-cq"}}
                ),
                namespace=ns,
            )
            for name, queue in (("ok", "main"), ("no-lq", "nowhere"), ("no-cq", "orphan")):
                await kube.create(
                    api.WORKLOAD,
                    typed(
                        api.WORKLOAD,
                        {
                            "metadata": {"name": name},
                            "spec": {
                                "queueName": queue,
                                "podSets": [
                                    {
                                        "name": "main",
                                        "count": 1,
                                        "template": {
                                            "spec": {
                                                "containers": [
                                                    {"name": "c", "resources": {"requests": {"cpu": "1"}}}
                                                ]
                                            }
                                        },
                                    }
                                ],
                            },
                        },
                    ),
                    namespace=ns,
                )

            async def admitted() -> bool:
                wl = await kube.get(api.WORKLOAD, "ok", namespace=ns)
                conds = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or ()}
                return conds.get("Admitted", {}).get("status") == "True"

            await wait_until(admitted)

            async def metrics_show_admission() -> bool:
                status, text = http_get(f"https://127.0.0.1:{metrics_port}/metrics", token)
                return status == 200 and f'kueue_admitted_workloads_total{{cluster_queue="{cq}"' in text

            await wait_until(metrics_show_admission)
            _, text = http_get(f"https://127.0.0.1:{metrics_port}/metrics", token)
            assert "kueue_admission_attempts_total" in text
            assert "kueue_worker_agent_engine_cpu_seconds_total" in text

            async def inadmissible_reported() -> bool:
                reasons = []
                for name in ("no-lq", "no-cq"):
                    wl = await kube.get(api.WORKLOAD, name, namespace=ns)
                    conds = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or ()}
                    reasons.append(conds.get("QuotaReserved", {}).get("reason"))
                # Upstream v0.19's default (Misconfigured with UnadmittedWorkloadsObservability).
                return reasons == ["Inadmissible", "Inadmissible"]

            await wait_until(inadmissible_reported)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            for resource, name, namespace in (
                (api.NAMESPACE, ns, None),
                (api.CLUSTER_QUEUE, cq, None),
                (api.RESOURCE_FLAVOR, rf, None),
            ):
                try:
                    await kube.delete(resource, name, namespace=namespace)
                    await kube.patch_merge(resource, name, {"metadata": {"finalizers": None}})
                except NotFound:
                    pass
    output = log_path.read_text()
    assert "Traceback" not in output, output[-3000:]
    assert proc.returncode == 0, output[-3000:]
