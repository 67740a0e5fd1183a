"""The local fleet keeps itself running (docs/local-fleet.md, "Supervision"): every process runs under
localfleet/supervisor.py, which restarts it with kubelet's back-off. On a fleet of its own (a manager
cluster and two workers, our worker_agents on each):

a. a worker_agent killed with SIGKILL is back and admitting within its back-off, RESTARTS=1;
b. a worker's kube-apiserver paused for 40 s (SIGSTOP, SIGCONT): with no user action, the cluster
   admits a Job again within a minute of SIGCONT;
c. `down` stops the three clusters promptly, without SIGKILL, and leaves nothing running, the
   restarted programs included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
LOCALFLEET = REPO / "hack" / "localfleet.py"
WORKER = "worker1"
QUEUE_OBJECTS = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: sup-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: sup-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: sup-flavor
      resources: [{name: cpu, nominalQuota: "4"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: sup-lq, namespace: default}
spec: {clusterQueue: sup-cq}
"""


class SupervisedFleet:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.base = [sys.executable, str(LOCALFLEET), "--dir", str(run_dir)]
        self.state: dict = {}
        self.env: dict[str, str] = {}

    def load(self) -> None:
        self.state = json.loads((self.run_dir / "state.json").read_text())
        out = subprocess.run([*self.base, "env"], check=True, capture_output=True, text=True).stdout
        self.env = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())

    def record(self, cluster: str, component: str) -> dict:
        for proc in self.state["processes"]:
            if proc["cluster"] == cluster and proc["component"] == component:
                return proc
        raise AssertionError(f"no {cluster}/{component} in {self.run_dir}/state.json")

    def status(self, cluster: str, component: str) -> dict:
        try:
            return json.loads(Path(self.record(cluster, component)["status"]).read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        kubectl = Path(self.env["PATH"].strip('"').split(":")[0]) / "kubectl"
        return subprocess.run(
            [str(kubectl), "--kubeconfig", self.env["KUBECONFIG_WORKER1"], *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        )

    def job_admitted(self, name: str) -> bool:
        res = self.kubectl("get", "workloads", "-n", "default", "-o", "json", check=False)
        if res.returncode != 0:
            return False
        for wl in json.loads(res.stdout)["items"]:
            owners = wl["metadata"].get("ownerReferences") or []
            if any(o.get("name") == name for o in owners):
                conditions = (wl.get("status") or {}).get("conditions") or []
                return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)
        return False

    def submit_job(self, name: str) -> bool:
        """Create a Job for sup-lq on worker1; False while the apiserver or our webhook refuses."""
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"kueue.x-k8s.io/queue-name": "sup-lq"},
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
                        ],
                    }
                }
            },
        }
        res = self.kubectl("create", "-f", "-", stdin=json.dumps(job), check=False)
        return res.returncode == 0 or "AlreadyExists" in res.stderr


def until(what: str, check, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def admits_a_job(fleet: SupervisedFleet, timeout: float) -> float:
    """Seconds until a new Job on worker1 is Admitted (its creation retried while refused)."""
    name = f"sup-{uuid.uuid4().hex[:6]}"
    start = time.monotonic()
    until(f"Job {name} created on {WORKER}", lambda: fleet.submit_job(name), timeout)
    until(
        f"Job {name} Admitted on {WORKER}",
        lambda: fleet.job_admitted(name),
        timeout - (time.monotonic() - start),
    )
    return time.monotonic() - start


@pytest.fixture(scope="module")
def fleet():
    run_dir = Path(tempfile.mkdtemp(prefix="kf-supervised-", dir="/dev/shm"))
    fleet = SupervisedFleet(run_dir)
    try:
        subprocess.run(
            [*fleet.base, "up", "--workers", "2", "--nodes", "1", "--agents", "--no-smoke"],
            check=True,
            capture_output=True,
            text=True,
        )
        fleet.load()
        until(
            "the queue objects on worker1",
            lambda: fleet.kubectl("apply", "-f", "-", stdin=QUEUE_OBJECTS, check=False).returncode == 0,
            60,
        )
        admits_a_job(fleet, 60)
        yield fleet
    finally:
        subprocess.run([*fleet.base, "down"], capture_output=True)


def test_a_killed_worker_agent_is_restarted_and_admits_again(fleet):
    first = fleet.status(WORKER, "worker-agent")["pid"]
    os.kill(first, signal.SIGKILL)
    restarted = until(
        "the worker_agent restarted",
        lambda: (s := fleet.status(WORKER, "worker-agent")).get("pid") not in (None, first) and s,
        30,
    )
    assert restarted["restarts"] == 1 and restarted["lastExit"] == {"signal": "SIGKILL"}
    took = admits_a_job(fleet, 60)
    print(f"\nadmitting again {took:.1f}s after the restart")
    status = subprocess.run([*fleet.base, "status"], check=True, capture_output=True, text=True).stdout
    line = next(
        entry
        for entry in status.splitlines()
        if entry.strip().startswith("worker-agent") and str(restarted["pid"]) in entry
    )
    assert " 1 " in line and "SIGKILL" in line, status


def test_a_paused_apiserver_heals_without_user_action(fleet):
    apiserver = fleet.status(WORKER, "kube-apiserver")["pid"]
    os.kill(apiserver, signal.SIGSTOP)
    try:
        time.sleep(40)
    finally:
        os.kill(apiserver, signal.SIGCONT)
    took = admits_a_job(fleet, 60)
    print(f"\na Job Admitted {took:.1f}s after SIGCONT")
    assert fleet.status(WORKER, "kube-apiserver")["pid"] == apiserver  # paused, never restarted


def test_down_is_prompt_and_leaves_nothing_running(fleet):
    pids = [p["pid"] for p in fleet.state["processes"]]
    pids += [
        pid
        for p in fleet.state["processes"]
        if (pid := fleet.status(p["cluster"], p["component"]).get("pid"))
    ]
    start = time.monotonic()
    res = subprocess.run([*fleet.base, "down"], check=True, capture_output=True, text=True)
    took = time.monotonic() - start
    print(f"\n`down` of three clusters: {took:.1f}s")
    assert "SIGKILL" not in res.stderr, res.stderr
    assert took < 8, f"`down` took {took:.1f}s"
    alive = [
        pid
        for pid in pids
        if Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    ]
    assert alive == []
