"""The local fleet as a user sees it: CRDs, Ready nodes, a running LWS, the manager's identity, and down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

import localfleet
from localfleet.operators import OPERATORS

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
SAMPLE_LWS = REPO / "examples" / "sample-leaderworkerset.yaml"


def wait_until(what: str, check, timeout: float = 90.0, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def test_our_crds_are_served_on_every_cluster(fleet):
    for cluster in fleet.clusters:
        out = fleet.kubectl(cluster, "get", "crd", "workloads.kueue.x-k8s.io", "-o", "json").stdout
        crd = json.loads(out)
        assert [(v["name"], v["storage"]) for v in crd["spec"]["versions"]] == [
            ("v1beta1", False),
            ("v1beta2", True),
        ]
        established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert established["Established"] == "True"
        fleet.kubectl(cluster, "get", "crd", "leaderworkersets.leaderworkerset.x-k8s.io")


def test_workers_have_ready_fake_nodes_with_capacity(fleet):
    for worker in fleet.workers:
        nodes = json.loads(fleet.kubectl(worker, "get", "nodes", "-o", "json").stdout)["items"]
        assert len(nodes) == 4
        for node in nodes:
            ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
            assert ready == "True"
            assert node["status"]["allocatable"]["cpu"] == "8"
            assert node["status"]["allocatable"]["memory"] == "32Gi"


def test_sample_leaderworkerset_runs_on_a_worker(fleet):
    """The sample LWS (replicas 2, size 3) created directly on a worker gets all 6 pods Ready."""
    lws = yaml.safe_load(SAMPLE_LWS.read_text())
    lws["metadata"]["name"] = "e2e-sample"
    lws["metadata"]["namespace"] = "default"
    lws["metadata"].get("labels", {}).pop("kueue.x-k8s.io/queue-name", None)
    worker = fleet.workers[-1]
    fleet.kubectl(worker, "apply", "-f", "-", input=json.dumps(lws))
    try:

        def ready_replicas():
            res = fleet.kubectl(worker, "get", "lws", "e2e-sample", "-o", "jsonpath={.status.readyReplicas}")
            return res.stdout.strip() == str(lws["spec"]["replicas"])

        wait_until("sample LWS readyReplicas", ready_replicas)
        pods = json.loads(
            fleet.kubectl(
                worker, "get", "pods", "-l", "leaderworkerset.sigs.k8s.io/name=e2e-sample", "-o", "json"
            ).stdout
        )["items"]
        size = lws["spec"]["leaderWorkerTemplate"]["size"]
        assert len(pods) == lws["spec"]["replicas"] * size
        assert all(p["status"]["phase"] == "Running" for p in pods)
        assert all(p["spec"]["nodeName"].startswith(f"{worker}-node-") for p in pods)
    finally:
        fleet.kubectl(worker, "delete", "lws", "e2e-sample", "--ignore-not-found", "--wait=true")


def test_a_running_pod_marked_not_ready_becomes_ready_again(fleet):
    """kube-controller-manager sets Ready=False on the pods of a node whose heartbeat it saw stop (a
    worker's kube-apiserver paused for a minute does it to every node); a kubelet sets them Ready
    again on its next status sync, and so does kwok with the fleet's pod-ready-again stage."""
    worker = fleet.workers[-1]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "e2e-ready-again", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }

    def ready() -> str:
        out = fleet.kubectl(
            worker, "get", "pod", "e2e-ready-again", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')]}"
        ).stdout
        return json.loads(out).get("status", "") if out.strip() else ""

    fleet.kubectl(worker, "apply", "-f", "-", input=json.dumps(pod))
    try:
        wait_until("the pod Ready", lambda: ready() == "True")
        # What the node lifecycle controller writes (MarkPodsNotReady).
        patch = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}}
        fleet.kubectl(
            worker, "patch", "pod", "e2e-ready-again", "--subresource=status", "-p", json.dumps(patch)
        )
        wait_until("the pod Ready again", lambda: ready() == "True", timeout=30)
    finally:
        fleet.kubectl(worker, "delete", "pod", "e2e-ready-again", "--ignore-not-found", "--wait=false")


def test_manager_identity_on_worker_is_least_privilege(fleet):
    worker = fleet.workers[0]
    kubeconfig = yaml.safe_load(Path(fleet.multikueue_kubeconfig(worker)).read_text())
    # What MultiKueue accepts: inline CA and credentials, no file references, no insecure flag.
    cluster = kubeconfig["clusters"][0]["cluster"]
    user = kubeconfig["users"][0]["user"]
    assert "certificate-authority-data" in cluster and "certificate-authority" not in cluster
    assert "insecure-skip-tls-verify" not in cluster
    assert set(user) == {"client-certificate-data", "client-key-data"}

    def can_i(*args: str) -> str:
        res = subprocess.run(
            [
                fleet.kubectl_binary,
                "--kubeconfig",
                fleet.multikueue_kubeconfig(worker),
                "auth",
                "can-i",
                *args,
            ],
            capture_output=True,
            text=True,
        )
        return res.stdout.strip()

    assert can_i("create", "workloads.kueue.x-k8s.io", "-n", "default") == "yes"
    assert can_i("patch", "workloads.kueue.x-k8s.io", "--subresource=status", "-n", "default") == "yes"
    assert can_i("create", "leaderworkersets.leaderworkerset.x-k8s.io", "-n", "default") == "yes"
    assert can_i("delete", "jobs.batch", "-n", "default") == "yes"
    assert can_i("watch", "clusterqueues.kueue.x-k8s.io") == "yes"
    assert can_i("create", "clusterqueues.kueue.x-k8s.io") == "no"
    assert can_i("get", "secrets", "-n", "default") == "no"
    assert can_i("create", "namespaces") == "no"


def test_setup_multikueue_objects_pass_the_apiservers_validation(fleet):
    """What `setup-multikueue` applies is valid against our CRDs on every cluster (a server-side dry
    run: the test fleet runs no manager, and other tests own its queues)."""
    workers = [
        localfleet.WorkerSetup(w, "32", "128Gi", Path(fleet.multikueue_kubeconfig(w)).read_text())
        for w in fleet.workers
    ]
    for cluster, docs in localfleet.multikueue_setup_objects(workers):
        out = fleet.kubectl(
            cluster, "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs)
        ).stdout
        assert len(out.splitlines()) == len(docs), out


def test_up_env_status_down_lifecycle():
    """A second, small fleet: `env` exports work with kubectl; `down` leaves none of its processes."""
    run_dir = Path(tempfile.mkdtemp(prefix="kf-lifecycle-", dir="/dev/shm"))
    base = [sys.executable, str(REPO / "hack" / "localfleet.py"), "--dir", str(run_dir)]
    try:
        subprocess.run(
            [*base, "up", "--workers", "1", "--nodes", "1"], check=True, capture_output=True, text=True
        )
        state = json.loads((run_dir / "state.json").read_text())
        pids = [p["pid"] for p in state["processes"]]
        by_cluster = Counter(p["cluster"] for p in state["processes"])
        # manager: etcd, apiserver, kcm, conversion webhook; worker: the same + scheduler, kwok, every
        # operator's controller and the Ray dashboard stand-in
        assert by_cluster == {"manager": 4, "worker1": 6 + len(OPERATORS) + 1}, state["processes"]
        env_out = subprocess.run([*base, "env"], check=True, capture_output=True, text=True).stdout
        exports = dict(line.removeprefix("export ").split("=", 1) for line in env_out.splitlines())
        assert set(exports) >= {
            "KUBECONFIG_MANAGER",
            "KUBECONFIG_WORKER1",
            "WORKER1_MULTIKUEUE_KUBECONFIG",
            "LOCALFLEET_STATE",
            "PATH",
        }
        kubectl_dir = exports["PATH"].strip('"').split(":")[0]
        res = subprocess.run(
            [
                f"{kubectl_dir}/kubectl",
                "--kubeconfig",
                exports["KUBECONFIG_MANAGER"],
                "get",
                "crd",
                "workloads.kueue.x-k8s.io",
            ],
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stderr
        status = subprocess.run([*base, "status"], check=True, capture_output=True, text=True).stdout
        assert "worker1 (worker)" in status and "STOPPED" not in status

        subprocess.run([*base, "down"], check=True, capture_output=True)
        assert not run_dir.exists()
        alive = [
            pid
            for pid in pids
            if Path(f"/proc/{pid}").exists()
            and Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
        ]
        assert alive == []
        again = subprocess.run([*base, "down"], capture_output=True, text=True)
        assert again.returncode == 0 and "nothing to stop" in again.stderr
    finally:
        subprocess.run([*base, "down"], capture_output=True)
        if run_dir.exists():
            os.system(f"rm -rf {run_dir}")
