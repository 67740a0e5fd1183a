"""What a new user meets: `make up` (localfleet `up --agents --manager --setup-multikueue`, on a
fleet of its own) ends with the sample LeaderWorkerSet running on a worker and no warning, names
the MultiKueue objects as the setup guide does, and the guide's own checks print what the guide
says they print. Then the kubectl plugin (`kubectl multikueue`) on that fleet."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from fleet_kit import LOCALFLEET, MANAGER, unique, wait_until

import localfleet

pytestmark = pytest.mark.realcluster

GUIDE_OUTPUT = [
    "CQ - Active: True Reason: Ready Message: Can admit new workloads",
    "AC - Active: True Reason: Active Message: The admission check is active",
    "MC - Active: True Reason: Active Message: Connected",
    "MC - Active: True Reason: Active Message: Connected",
]
# The console script pyproject installs next to the interpreter running the tests.
PLUGIN = str(Path(sys.executable).with_name("kubectl-multikueue"))
LWS = "nginx-leaderworkerset"


@dataclass
class MadeUp:
    run_dir: Path
    base: list[str]
    up: subprocess.CompletedProcess
    env: dict[str, str]  # what `localfleet env` exports

    def kubectl(self, cluster: str, *args: str, input: str | None = None) -> str:
        state = json.loads((self.run_dir / "state.json").read_text())
        kubectl = localfleet.Kubectl(
            localfleet.Binaries(state["versions"]).path("kubectl"), self.kubeconfig(cluster)
        )
        return kubectl(*args, input=input).stdout

    def kubeconfig(self, cluster: str) -> str:
        return self.env["KUBECONFIG_MANAGER" if cluster == MANAGER else f"KUBECONFIG_{cluster.upper()}"]

    def plugin(self, *args: str, cluster: str = MANAGER) -> subprocess.CompletedProcess:
        return subprocess.run(
            [PLUGIN, *args, "--kubeconfig", self.kubeconfig(cluster)],
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture(scope="module")
def made_up() -> Iterator[MadeUp]:
    run_dir = Path(tempfile.mkdtemp(prefix="kf-make-up-", dir="/dev/shm"))
    base = [sys.executable, str(LOCALFLEET), "--dir", str(run_dir)]
    try:
        # What `make up` runs once the binaries are built.
        up = subprocess.run(
            [*base, "up", "--agents", "--manager", "--setup-multikueue"], capture_output=True, text=True
        )
        assert up.returncode == 0, f"{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        exports = subprocess.run([*base, "env"], check=True, capture_output=True, text=True).stdout
        env = {
            k.removeprefix("export "): v.strip('"')
            for k, v in (line.split("=", 1) for line in exports.splitlines() if "=" in line)
        }
        yield MadeUp(run_dir, base, up, env)
    finally:
        subprocess.run([*base, "down"], capture_output=True)


def test_make_up_runs_the_sample_and_the_setup_guide_works_verbatim(made_up):
    up = made_up.up
    said = up.stdout + up.stderr
    assert not [line for line in said.splitlines() if "note:" in line or "warning" in line.lower()], said
    assert f"The sample LeaderWorkerSet default/{LWS} runs on worker" in up.stdout
    # The next steps it printed include the guide's checks; run them as a user would, in a shell
    # with the fleet's environment.
    printed = [line for line in up.stdout.splitlines() if "-o jsonpath=" in line and "- Active:" in line]
    assert printed == localfleet.guide_checks(
        'kubectl --kubeconfig "$KUBECONFIG_MANAGER"', ["worker1", "worker2"]
    )
    exports = subprocess.run([*made_up.base, "env"], check=True, capture_output=True, text=True).stdout
    checks = subprocess.run(
        ["bash", "-c", exports + "\n" + "\n".join(printed)], capture_output=True, text=True, check=True
    )
    assert checks.stdout.splitlines() == GUIDE_OUTPUT, checks.stdout + checks.stderr

    names = made_up.kubectl(
        MANAGER, "get", "multikueueclusters,multikueueconfigs,admissionchecks,secrets", "-A", "-o", "name"
    )
    for name in (
        "multikueuecluster.kueue.x-k8s.io/multikueue-test-worker1",
        "multikueuecluster.kueue.x-k8s.io/multikueue-test-worker2",
        "multikueueconfig.kueue.x-k8s.io/multikueue-test",
        "admissioncheck.kueue.x-k8s.io/sample-multikueue",
        "secret/worker1-secret",
        "secret/worker2-secret",
    ):
        assert name in names.split(), names
    lws = json.loads(made_up.kubectl(MANAGER, "get", "lws", LWS, "-n", "default", "-o", "json"))
    assert lws["status"]["readyReplicas"] == 2


# -- the kubectl plugin ----------------------------------------------------------------------------


def test_plugin_status_shows_each_worker_connected_and_every_cluster_queue(made_up):
    res = made_up.plugin("status")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["WORKER", "ACTIVE", "REASON", "MESSAGE", "KUBECONFIG"]
    for worker in ("worker1", "worker2"):
        assert any(
            line.split()
            == [
                f"multikueue-test-{worker}",
                "True",
                "Active",
                "Connected",
                "Secret",
                f"kueue-system/{worker}-secret",
            ]
            for line in lines
        ), res.stdout
    data = json.loads(made_up.plugin("status", "-o", "json").stdout)
    queues = {(q["cluster"], q["name"]): q for q in data["clusterQueues"]}
    assert set(queues) == {
        ("(manager)", "cluster-queue"),
        ("multikueue-test-worker1", "cluster-queue"),
        ("multikueue-test-worker2", "cluster-queue"),
    }
    # The sample's two groups hold quota on the manager and on the worker that runs them.
    assert queues[("(manager)", "cluster-queue")]["admitted"] == 2
    assert sorted(q["admitted"] for k, q in queues.items() if k[0] != "(manager)") == [0, 2]
    assert data["unreachable"] == {}


def test_plugin_describes_the_sample_lws_where_it_runs(made_up):
    res = made_up.plugin("describe", "lws", LWS)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(made_up.plugin("describe", "lws", LWS, "-o", "json").stdout)
    (worker,) = data["workers"]
    assert worker.startswith("multikueue-test-worker")
    assert data["workers"][worker] == "ready 2/2 groups"
    assert [(w["stage"], w["worker"]) for w in data["workloads"]] == [("Running", worker)] * 2
    assert f"Worker:      {worker}" in res.stdout
    assert any(e["reason"] == "QuotaReserved" for e in data["events"]), data["events"]
    missing = made_up.plugin("describe", "job", "no-such-job")
    assert missing.returncode == 2
    assert 'jobs.batch "no-such-job" not found in namespace default' in missing.stderr


def test_plugin_workloads_say_why_a_job_waits_on_every_worker(made_up):
    """A Job asking for more CPU than any worker's ClusterQueue has fits the manager's (their sum):
    it reaches the workers, and the plugin shows each worker's own reason."""
    name = unique("too-big")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "40"}},
                        }
                    ],
                }
            },
        },
    }
    made_up.kubectl(MANAGER, "create", "-f", "-", input=json.dumps(job))
    try:

        def row():
            res = made_up.plugin("workloads", "-o", "json")
            rows = [r for r in json.loads(res.stdout) if r["job"] == f"Job/{name}"]
            why = rows[0]["why"] if rows and rows[0]["stage"] == "Dispatching" else ""
            return rows[0] if "multikueue-test-worker2: position" in why else None

        found = wait_until("the Job's Workload dispatched to both workers", row, timeout=60)
        assert found["worker"] == "-"
        # Each worker's own reason (the manager's check quotes them) and the copy's place in that
        # worker's queue (its visibility API).
        for worker in ("multikueue-test-worker1", "multikueue-test-worker2"):
            assert f'"{worker}": couldn\'t assign flavors to pod set main' in found["why"], found["why"]
            assert f"{worker}: position 0 in its ClusterQueue" in found["why"], found["why"]
        table = made_up.plugin("workloads").stdout.splitlines()
        assert table[0].split() == ["NAME", "JOB", "STAGE", "WORKER", "WHY"]
        assert any(f"Job/{name}" in line and "Dispatching" in line for line in table)
        lws_rows = [line for line in table if f"LeaderWorkerSet/{LWS}" in line]
        assert len(lws_rows) == 2 and all("Running" in line for line in lws_rows), table
    finally:
        made_up.kubectl(MANAGER, "delete", "job", name, "-n", "default", "--wait=false")


def test_plugin_kubeconfig_creates_an_identity_the_manager_accepts(made_up, tmp_path):
    """Run against worker2, it prints a kubeconfig; a MultiKueueCluster using it becomes Active."""
    res = made_up.plugin("kubeconfig", "--service-account", "plugin-sa", cluster="worker2")
    assert res.returncode == 0, res.stderr
    assert "serviceaccount kueue-system/plugin-sa: created" in res.stderr
    assert "token:" in res.stderr and "token:" not in res.stdout.split("users:")[0]
    config = yaml.safe_load(res.stdout)
    assert config["users"][0]["name"] == "kueue-system/plugin-sa"
    assert "certificate-authority-data" in config["clusters"][0]["cluster"]
    secret, cluster = "plugin-worker2-secret", "plugin-worker2"
    (tmp_path / "kubeconfig").write_text(res.stdout)
    made_up.kubectl(
        MANAGER,
        "create",
        "secret",
        "generic",
        secret,
        "-n",
        "kueue-system",
        f"--from-file=kubeconfig={tmp_path / 'kubeconfig'}",
    )
    mkc = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "MultiKueueCluster",
        "metadata": {"name": cluster},
        "spec": {"kubeConfig": {"locationType": "Secret", "location": secret}},
    }
    made_up.kubectl(MANAGER, "apply", "-f", "-", input=json.dumps(mkc))
    try:

        def active():
            out = made_up.kubectl(
                MANAGER,
                "get",
                "multikueuecluster",
                cluster,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Active')].status}",
            )
            return out.strip() == "True"

        wait_until("the MultiKueueCluster with the plugin's kubeconfig Active", active, timeout=60)
        again = made_up.plugin("kubeconfig", "--service-account", "plugin-sa", cluster="worker2")
        assert again.returncode == 0 and "serviceaccount kueue-system/plugin-sa: exists" in again.stderr
    finally:
        made_up.kubectl(MANAGER, "delete", "multikueuecluster", cluster, "--wait=false")
        made_up.kubectl(MANAGER, "delete", "secret", secret, "-n", "kueue-system")


def test_plugin_is_a_kubectl_plugin(made_up):
    """kubectl finds it on PATH as `kubectl multikueue`."""
    state = json.loads((made_up.run_dir / "state.json").read_text())
    kubectl = localfleet.Binaries(state["versions"]).path("kubectl")
    path = f"{Path(PLUGIN).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    res = subprocess.run(
        [str(kubectl), "multikueue", "status", "--kubeconfig", made_up.kubeconfig(MANAGER)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "multikueue-test-worker1" in res.stdout
    assert shutil.which("kubectl-multikueue", path=path) == PLUGIN
