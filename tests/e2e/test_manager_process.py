"""`python -m manager` as processes: two replicas elect one leader through the Lease, the leader
connects to a worker and serves upstream's MultiKueue metrics, the other takes over when the
leader stops; a bad configuration stops start-up with a clear message; logs carry no secrets."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from test_worker_agent_process import free_port, http_get, wait_until

from kube_runtime.client import KubeClient, NotFound
from kueue_domain import api

pytestmark = pytest.mark.realcluster


def start_manager(kubeconfig: str, config: Path, log: Path) -> tuple[subprocess.Popen, int]:
    metrics = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "manager", "--kubeconfig", kubeconfig, "--config", str(config),
                "--metrics-bind-address", f"127.0.0.1:{metrics}", "--health-probe-bind-address", "0",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc, metrics


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_two_manager_replicas_one_leader_and_failover(fleet, tmp_path: Path):
    kubeconfig = fleet.kubeconfig("manager")
    suffix = uuid.uuid4().hex[:6]
    lease, cluster, secret = f"mk-lease-{suffix}", f"proc-{suffix}", f"proc-{suffix}-secret"
    worker_kubeconfig = Path(fleet.multikueue_kubeconfig(fleet.workers[0])).read_text()  # noqa: ASYNC240
    config = tmp_path / "manager.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nnamespace: kueue-system\n"
        f"leaderElection: {{leaderElect: true, resourceName: {lease}, leaseDuration: 4s, renewDeadline: 3s, "
        "retryPeriod: 1s}\n"
        f"multiKueue: {{origin: proc-{suffix}}}\n"
    )
    async with await KubeClient.from_kubeconfig_file(kubeconfig) as kube:
        with contextlib.suppress(Exception):
            await kube.create(
                api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}
            )
        await kube.create(
            api.SECRET,
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": "kueue-system"},
             "stringData": {"kubeconfig": worker_kubeconfig}},
        )  # fmt: skip
        await kube.create(
            api.MULTIKUEUE_CLUSTER,
            {"apiVersion": api.API_VERSION, "kind": "MultiKueueCluster", "metadata": {"name": cluster},
             "spec": {"kubeConfig": {"locationType": "Secret", "location": secret}}},
        )  # fmt: skip
        first, first_metrics = start_manager(kubeconfig, config, tmp_path / "first.log")
        second, second_metrics = start_manager(kubeconfig, config, tmp_path / "second.log")
        try:

            async def one_leader() -> bool:
                try:
                    got = await kube.get(api.LEASE, lease, "kueue-system")
                except NotFound:
                    return False
                return bool((got.get("spec") or {}).get("holderIdentity"))

            await wait_until(one_leader, 30)

            async def connected() -> bool:
                mkc = await kube.get(api.MULTIKUEUE_CLUSTER, cluster)
                return any(
                    c.get("type") == "Active" and c.get("status") == "True"
                    for c in (mkc.get("status") or {}).get("conditions") or ()
                )

            await wait_until(connected, 30)
            holder = (await kube.get(api.LEASE, lease, "kueue-system"))["spec"]["holderIdentity"]
            leader, follower = (first, second) if str(first.pid) in holder else (second, first)
            leader_metrics = first_metrics if leader is first else second_metrics
            status, text = http_get(
                f"https://127.0.0.1:{leader_metrics}/metrics", fleet.metrics_token("manager")
            )
            assert status == 200
            assert 'multikueue_cluster_status{cluster="' + cluster + '",status="active"} 1.0' in text
            assert "# TYPE multikueue_workloads_dispatched_total counter" in text
            assert "# TYPE kueue_federation_multikueue_dispatch_stage_seconds histogram" in text

            stop(leader)

            async def taken_over() -> bool:
                got = await kube.get(api.LEASE, lease, "kueue-system")
                return str(follower.pid) in ((got.get("spec") or {}).get("holderIdentity") or "")

            await wait_until(taken_over, 30)
            assert follower.poll() is None
        finally:
            stop(first)
            stop(second)
            for resource, name, ns in (
                (api.MULTIKUEUE_CLUSTER, cluster, None),
                (api.SECRET, secret, "kueue-system"),
                (api.LEASE, lease, "kueue-system"),
            ):
                with contextlib.suppress(NotFound):
                    await kube.delete(resource, name, ns)
    logs = (tmp_path / "first.log").read_text() + (tmp_path / "second.log").read_text()
    token_or_key = [line for line in worker_kubeconfig.splitlines() if "-data:" in line]
    for line in token_or_key:
        assert line.split(":", 1)[1].strip() not in logs, "a credential reached the logs"


async def test_bad_configuration_stops_start_up_with_a_clear_message(fleet, tmp_path: Path):
    config = tmp_path / "manager.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        "multiKueue: {origin: 'not a label!', gcInterval: -1m}\n"
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "manager",
            "--kubeconfig",
            fleet.kubeconfig("manager"),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "multiKueue.gcInterval: must be greater than or equal to 0" in result.stderr
    assert "multiKueue.origin: 'not a label!' is not a valid label value" in result.stderr
    assert "Traceback" not in result.stderr
