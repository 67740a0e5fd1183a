"""`python -m worker_agent` configured by the Red Hat build of Kueue's `Kueue` object, on a real
apiserver: from the cluster (`--kueue-cr-from-cluster`) and from a file (`--kueue-cr`). Only
namespaces labelled kueue.openshift.io/managed=true are managed; a change of the object that changes
the Configuration restarts the process in place (same PID) with the new behaviour; an invalid
change is refused and the process keeps running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from admission_kit import (
    Cleanup,
    cluster_queue,
    consistently,
    eventually,
    local_queue,
    resource_flavor,
    unique,
)

from kube_runtime.client import KubeClient, NotFound
from kueue_domain import api
from kueue_domain.operator_config import KUEUE, MANAGED_NAMESPACE_LABEL

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
CRD = Path(__file__).parent / "fixtures" / "kueue-openshift-crd.yaml"
RESTARTING = "configuration changed; restarting"
SYNCED = "caches synced"


def kueue_object(label_policy: str = "QueueName", gang: dict | None = None) -> dict:
    return {
        "apiVersion": KUEUE.api_version,
        "kind": "Kueue",
        "metadata": {"name": "cluster"},
        "spec": {
            "managementState": "Managed",
            "config": {
                "integrations": {"frameworks": ["BatchJob"]},
                "workloadManagement": {"labelPolicy": label_policy},
                "gangScheduling": gang or {"policy": "None"},
                "preemption": {"preemptionPolicy": "Classical"},
            },
        },
    }


def job(name: str, queue: str | None) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: queue} if queue else {}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                }
            },
        },
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


class AgentProcess:
    """`python -m worker_agent` (or `manager`) with its log in a file."""

    def __init__(self, args: list[str], log: Path, module: str = "worker_agent") -> None:
        self.health = free_port()
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, *args, "--metrics-bind-address", "0",
                 "--health-probe-bind-address", f"127.0.0.1:{self.health}"],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip

    def count(self, text: str) -> int:
        return self.log.read_text().count(text)

    async def running_with(self, syncs: int) -> bool:
        """Alive, synced `syncs` times (once per start) and ready."""
        assert self.proc.poll() is None, self.log.read_text()
        return self.count(SYNCED) >= syncs and await asyncio.to_thread(ready, self.health)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def workload_of(kube: KubeClient, namespace: str, job_name: str) -> dict | None:
    items, _ = await kube.list(api.WORKLOAD, namespace=namespace)
    owned = [
        wl
        for wl in items
        if any(ref.get("name") == job_name for ref in wl["metadata"].get("ownerReferences") or ())
    ]
    return owned[0] if owned else None


@contextlib.asynccontextmanager
async def queues_in(kube: KubeClient, *, managed: str, unmanaged: str):
    """Two namespaces (one opted in), a ClusterQueue for all, a LocalQueue `main` in each."""
    cleanup = Cleanup(kube)
    rf, cq = unique("rf"), unique("cq")
    for name, labels in ((managed, {MANAGED_NAMESPACE_LABEL: "true"}), (unmanaged, {})):
        await kube.create(
            api.NAMESPACE,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        )
    try:
        await kube.create(api.RESOURCE_FLAVOR, resource_flavor(rf))
        cleanup.add(api.RESOURCE_FLAVOR, rf)
        await kube.create(api.CLUSTER_QUEUE, cluster_queue(cq, {rf: {"cpu": "10"}}))
        cleanup.add(api.CLUSTER_QUEUE, cq)
        for ns in (managed, unmanaged):
            await kube.create(api.LOCAL_QUEUE, local_queue(ns, "main", cq), namespace=ns)
        yield
    finally:
        for ns in (managed, unmanaged):
            items, _ = await kube.list(api.WORKLOAD, namespace=ns)
            for wl in items:
                with contextlib.suppress(NotFound):
                    await kube.patch_merge(
                        api.WORKLOAD, wl["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace=ns
                    )
            with contextlib.suppress(NotFound):
                await kube.delete(api.NAMESPACE, ns)
        await cleanup.run()


def base_config(tmp_path: Path) -> Path:
    """What the Kueue object does not decide: no Lease, no webhook server (the fleet has its own)."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        "leaderElection: {leaderElect: false}\nwebhook: {port: 0}\n"
    )
    return path


async def test_without_the_kueue_object_in_the_cluster_the_agent_does_not_start(fleet, kube, tmp_path: Path):
    with contextlib.suppress(NotFound):  # no CRD on this fleet, or no object
        await kube.delete(KUEUE, "cluster")
    res = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "worker_agent", "--kubeconfig", fleet.kubeconfig("manager"),
         "--kueue-cr-from-cluster", "--config", str(base_config(tmp_path))],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert (
        "worker_agent: invalid configuration kueue.openshift.io/v1 Kueue cluster:\n"
        "  - not found: create the Kueue object named 'cluster' (the CRD kueues.kueue.openshift.io must be "
        "installed), or run with --config"
    ) in res.stderr


async def test_the_kueue_object_in_the_cluster_configures_the_agent_and_its_changes_restart_it(
    fleet, kube, tmp_path: Path
):
    fleet.kubectl("manager", "apply", "-f", str(CRD))
    fleet.kubectl("manager", "wait", "--for", "condition=Established", "crd/kueues.kueue.openshift.io")
    with contextlib.suppress(NotFound):
        await kube.delete(KUEUE, "cluster")
    await kube.create(KUEUE, kueue_object())
    managed, unmanaged = unique("rh-managed"), unique("rh-unmanaged")
    agent = AgentProcess(
        ["--kubeconfig", fleet.kubeconfig("manager"), "--kueue-cr-from-cluster",
         "--config", str(base_config(tmp_path))],
        tmp_path / "agent.log",
    )  # fmt: skip
    try:
        async with queues_in(kube, managed=managed, unmanaged=unmanaged):
            await eventually(lambda: agent.running_with(1), timeout=60)
            for ns in (managed, unmanaged):
                await kube.create(api.JOB, job("queued", "main"), namespace=ns)
            await kube.create(api.JOB, job("unlabelled", None), namespace=managed)

            # Namespace opt-in: only the labelled namespace's Job gets a Workload.
            await eventually(lambda: workload_of(kube, managed, "queued"), timeout=30)

            async def left_alone() -> bool:
                return (
                    await workload_of(kube, unmanaged, "queued") is None
                    and await workload_of(kube, managed, "unlabelled") is None
                )

            await consistently(left_alone, duration=3)

            # labelPolicy None: the process restarts in place and manages Jobs without a queue name.
            await kube.patch_merge(
                KUEUE, "cluster", {"spec": {"config": {"workloadManagement": {"labelPolicy": "None"}}}}
            )
            await eventually(lambda: agent.running_with(2), timeout=60)
            assert agent.count(RESTARTING) == 1
            log = agent.log.read_text()
            assert "changed=['manageJobsWithoutQueueName']" in log
            wl = await eventually(lambda: workload_of(kube, managed, "unlabelled"), timeout=30)
            assert wl["spec"].get("queueName", "") == ""
            assert await workload_of(kube, unmanaged, "queued") is None

            # A change that maps to the same Configuration, and an invalid one: no restart.
            await kube.patch_merge(KUEUE, "cluster", {"metadata": {"labels": {"team": "a"}}})
            await kube.patch_merge(
                KUEUE, "cluster", {"spec": {"config": {"gangScheduling": {"policy": "Foo"}}}}
            )

            async def refused() -> bool:
                return "the changed Kueue object is invalid" in agent.log.read_text()

            await eventually(refused, timeout=30)
            assert (
                'spec.config.gangScheduling.policy: "Foo" is not one of ByWorkload, None'
                in agent.log.read_text()
            )
            await consistently(lambda: agent.running_with(2), duration=3)
            assert agent.count(RESTARTING) == 1
    finally:
        agent.stop()
        with contextlib.suppress(NotFound):
            await kube.delete(KUEUE, "cluster")
        fleet.kubectl("manager", "delete", "-f", str(CRD), "--ignore-not-found")
    assert agent.proc.returncode == 0, agent.log.read_text()


async def test_a_kueue_object_file_is_polled_and_its_changes_restart_the_agent(fleet, kube, tmp_path: Path):
    cr = tmp_path / "kueue.yaml"
    cr.write_text(yaml.safe_dump(kueue_object()))
    managed, unmanaged = unique("rh-managed"), unique("rh-unmanaged")
    agent = AgentProcess(
        ["--kubeconfig", fleet.kubeconfig("manager"), "--kueue-cr", str(cr),
         "--kueue-cr-poll-interval", "0.5", "--config", str(base_config(tmp_path))],
        tmp_path / "agent.log",
    )  # fmt: skip
    try:
        async with queues_in(kube, managed=managed, unmanaged=unmanaged):
            await eventually(lambda: agent.running_with(1), timeout=60)
            pid = agent.proc.pid
            await kube.create(api.JOB, job("unlabelled", None), namespace=managed)
            await kube.create(api.JOB, job("queued", "main"), namespace=unmanaged)
            await consistently(
                lambda: _none(
                    workload_of(kube, managed, "unlabelled"), workload_of(kube, unmanaged, "queued")
                ),
                duration=3,
            )
            cr.write_text(yaml.safe_dump(kueue_object(label_policy="None")))
            await eventually(lambda: agent.running_with(2), timeout=60)
            assert agent.proc.pid == pid and agent.count(RESTARTING) == 1
            await eventually(lambda: workload_of(kube, managed, "unlabelled"), timeout=30)
            assert await workload_of(kube, unmanaged, "queued") is None
    finally:
        agent.stop()
    assert agent.proc.returncode == 0, agent.log.read_text()


async def test_the_manager_restarts_when_the_kueue_objects_frameworks_change(fleet, tmp_path: Path):
    """The manager maps the same object: enabling LeaderWorkerSet restarts it with the LWS adapter."""
    cr = tmp_path / "kueue.yaml"
    cr.write_text(yaml.safe_dump(kueue_object()))
    config = tmp_path / "manager.yaml"
    config.write_text(f"leaderElection: {{leaderElect: false}}\nmultiKueue: {{origin: {unique('rh')}}}\n")
    manager = AgentProcess(
        ["--kubeconfig", fleet.kubeconfig("manager"), "--kueue-cr", str(cr),
         "--kueue-cr-poll-interval", "0.5", "--config", str(config)],
        tmp_path / "manager.log",
        module="manager",
    )  # fmt: skip
    try:
        await eventually(lambda: manager.running_with(1), timeout=60)
        obj = kueue_object()
        obj["spec"]["config"]["integrations"]["frameworks"].append("LeaderWorkerSet")
        cr.write_text(yaml.safe_dump(obj))
        await eventually(lambda: manager.running_with(2), timeout=60)
        log = manager.log.read_text()
        assert manager.count(RESTARTING) == 1 and "changed=['integrations.frameworks']" in log
        assert "frameworks=['batch/job', 'leaderworkerset.x-k8s.io/leaderworkerset']" in log
    finally:
        manager.stop()
    assert manager.proc.returncode == 0, manager.log.read_text()


async def _none(*reads) -> bool:
    values = [await read for read in reads]
    return all(value is None for value in values)
