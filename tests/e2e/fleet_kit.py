"""What the e2e modules that start a fleet of their own share: the fleet (read from its state.json,
driven with kubectl as a user would), waiting, and reading Workloads and their MultiKueue check."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import localfleet

REPO = Path(__file__).resolve().parents[2]
LOCALFLEET = REPO / "hack" / "localfleet.py"
SAMPLE_LWS = REPO / "examples" / "sample-leaderworkerset.yaml"
MANAGER = "manager"
NAMESPACE = "default"
QUEUE = "user-queue"
CLUSTER_QUEUE = "cluster-queue"
CHECK = "sample-multikueue"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def mk_cluster(worker: str) -> str:
    """The MultiKueueCluster of a fleet worker, named as the setup guide does: multikueue-test-worker1."""
    return localfleet.multikueue_cluster_name(worker)


@dataclass
class Fleet:
    """One fleet, read from its state.json; every call is one kubectl."""

    run_dir: Path
    state: dict
    kubectl_binary: str
    workers: list[str] = field(default_factory=list)

    def kubectl(self, cluster: str, *args: str, input: str | None = None, check: bool = True) -> str:
        res = subprocess.run(
            [
                self.kubectl_binary,
                "--kubeconfig",
                self.state["clusters"][cluster]["kubeconfig"],
                "--request-timeout=30s",
                *args,
            ],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} on {cluster} failed: {res.stderr}")
        return res.stdout

    def json(self, cluster: str, *args: str) -> dict:
        return json.loads(self.kubectl(cluster, *args, "-o", "json"))

    def items(self, cluster: str, kind: str, *args: str) -> list[dict]:
        """Objects of `kind` in the test namespace that are not being deleted."""
        found = self.json(cluster, "get", kind, "-n", NAMESPACE, *args)["items"]
        return [o for o in found if not o["metadata"].get("deletionTimestamp")]

    def get(self, cluster: str, kind: str, name: str) -> dict | None:
        out = self.kubectl(cluster, "get", kind, name, "-n", NAMESPACE, "--ignore-not-found", "-o", "json")
        return json.loads(out) if out.strip() else None

    def lws(self, cluster: str, name: str) -> dict | None:
        return self.get(cluster, "lws", name)

    def create(self, cluster: str, *objects: dict) -> None:
        body = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        self.kubectl(cluster, "create", "-f", "-", input=json.dumps(body))

    def pid(self, cluster: str, component: str) -> int:
        """The current pid of a supervised process (the supervisor's status file has it)."""
        for proc in self.state["processes"]:
            if proc["cluster"] == cluster and proc["component"] == component:
                return json.loads(Path(proc["status"]).read_text())["pid"]
        raise AssertionError(f"no {component} of {cluster} in {self.run_dir}/state.json")

    def apiserver_pid(self, cluster: str) -> int:
        return self.pid(cluster, "kube-apiserver")


@contextlib.contextmanager
def own_fleet(prefix: str, *up_args: str, keep_logs_env: str = "") -> Iterator[Fleet]:
    """A fleet of its own (`up --setup-multikueue --no-sample --no-smoke` plus `up_args`), always
    torn down when the block ends. With `keep_logs_env` naming a set environment variable, the
    processes' logs are copied into that directory first."""
    run_dir = Path(tempfile.mkdtemp(prefix=prefix, dir="/dev/shm"))
    base = [sys.executable, str(LOCALFLEET), "--dir", str(run_dir)]
    try:
        up = subprocess.run(
            [*base, "up", "--setup-multikueue", "--no-sample", "--no-smoke", *up_args],
            capture_output=True,
            text=True,
        )
        if up.returncode != 0:
            raise AssertionError(f"localfleet up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        state = json.loads((run_dir / "state.json").read_text())
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kueue-federation"
        kubectl = cache / "bin" / f"kubernetes-v{state['versions']['K8S_VERSION']}" / "kubectl"
        workers = [n for n, c in state["clusters"].items() if c["role"] == "worker"]
        yield Fleet(run_dir, state, str(kubectl), workers)
    finally:
        keep = os.environ.get(keep_logs_env) if keep_logs_env else None
        if keep:
            for log in run_dir.glob("*/*.log"):
                target = Path(keep) / run_dir.name / f"{log.parent.name}-{log.name}"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(log.read_bytes())
        subprocess.run([*base, "down"], capture_output=True)


# -- waiting --------------------------------------------------------------------------------------


def wait_until(what: str, check: Callable[[], Any], timeout: float = 90.0, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def poll(check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """The first truthy result of `check` within `timeout`, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval)
    return None


@dataclass
class NotYet:
    """A falsy check result that keeps what was seen: wait_until shows the last one."""

    seen: object

    def __bool__(self) -> bool:
        return False


# -- reading objects ------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def condition(obj: dict, ctype: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == ctype), {})


def is_true(obj: dict, ctype: str) -> bool:
    return condition(obj, ctype).get("status") == "True"


def check_state(wl: dict) -> dict:
    return next((s for s in (wl.get("status") or {}).get("admissionChecks") or () if s["name"] == CHECK), {})


def cluster_name(wl: dict) -> str:
    """The fleet worker a Workload is placed on: its clusterName is the worker's MultiKueueCluster
    (multikueue-test-worker1), the fleet names the cluster worker1; "" when it is placed nowhere."""
    return localfleet.fleet_worker((wl.get("status") or {}).get("clusterName") or "")


def summary(workloads: list[dict]) -> list[tuple]:
    """(Workload, clusterName, check state, check message) of each."""
    return [
        (
            wl["metadata"]["name"],
            cluster_name(wl),
            check_state(wl).get("state"),
            check_state(wl).get("message"),
        )
        for wl in workloads
    ]


def cpu_quota_patch(cq: dict, cpu: str) -> str:
    """A JSON patch setting the cpu nominalQuota of the ClusterQueue's first flavor."""
    resources = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    index = next(i for i, r in enumerate(resources) if r["name"] == "cpu")
    path = f"/spec/resourceGroups/0/flavors/0/resources/{index}/nominalQuota"
    return json.dumps([{"op": "replace", "path": path, "value": cpu}])


# -- the invariant: nothing stuck, nothing leaked -------------------------------------------------

ORIGIN_SELECTOR = "kueue.x-k8s.io/multikueue-origin=multikueue"
JOB_KINDS = {
    "Job": "jobs.batch",
    "JobSet": "jobsets.jobset.x-k8s.io",
    "LeaderWorkerSet": "leaderworkersets.leaderworkerset.x-k8s.io",
    "Pod": "pods",
}


def fleet_worker(fleet: Fleet, cluster: str) -> str:
    """The fleet worker a MultiKueueCluster name designates ("" when it is none of the fleet's)."""
    worker = localfleet.fleet_worker(cluster)
    return worker if worker in fleet.workers else ""


def invariant_violations(fleet: Fleet) -> list[str]:
    """What is wrong, read from the API, with the promise that nothing is stuck or leaked: every
    manager Workload of the MultiKueue check is Finished; or Admitted with exactly one copy, admitted,
    on the worker it names, where its Job (not suspended) or LWS exists; or pending without a
    half-done eviction and saying why. No manager Job is suspended with active pods counted, and no
    worker holds an admitted copy for a Workload that does not run there."""
    problems: list[str] = []
    copies = {
        w: {c["metadata"]["name"]: c for c in fleet.items(w, "workloads", "-l", ORIGIN_SELECTOR)}
        for w in fleet.workers
    }
    placed: dict[str, str] = {}
    for wl in fleet.items(MANAGER, "workloads"):
        name, state = wl["metadata"]["name"], check_state(wl)
        if not state or is_true(wl, "Finished"):
            continue
        if is_true(wl, "Admitted"):
            worker = fleet_worker(fleet, cluster_name(wl))
            holders = [w for w in fleet.workers if name in copies[w]]
            if holders != [worker] or not is_true(copies[worker][name], "Admitted"):
                problems.append(f"{name}: admitted on {cluster_name(wl)!r}, copies on {holders}")
                continue
            placed[name] = worker
            annotations = wl["metadata"].get("annotations") or {}
            refs = wl["metadata"].get("ownerReferences") or [{}]
            kind = refs[0].get("kind", "")
            owner = annotations.get("kueue.x-k8s.io/job-owner-name") or refs[0].get("name", "")
            job = fleet.get(worker, JOB_KINDS[kind], owner) if kind in JOB_KINDS and owner else {}
            if job is None or (kind in ("Job", "JobSet") and job["spec"].get("suspend")):
                problems.append(f"{name}: admitted on {worker} where its {kind} is missing or suspended")
        elif is_true(wl, "Evicted") and is_true(wl, "QuotaReserved"):
            problems.append(f"{name}: evicted but still holding quota")
        elif cluster_name(wl):
            problems.append(f"{name}: not admitted but placed on {cluster_name(wl)}")
        elif is_true(wl, "QuotaReserved"):
            if not any(name in copies[w] for w in fleet.workers) and not state.get("message"):
                problems.append(f"{name}: holds quota, has no copy and its check says nothing")
        elif not condition(wl, "QuotaReserved").get("message"):
            problems.append(f"{name}: pending and nothing says why")
    for worker, found in copies.items():
        for name, copy_ in found.items():
            if is_true(copy_, "Admitted") and placed.get(name) != worker:
                problems.append(f"{name}: a copy admitted on {worker} for a Workload not placed there")
    for job in fleet.items(MANAGER, "jobs"):
        if job["spec"].get("suspend") and (job.get("status") or {}).get("active"):
            problems.append(f"Job {job['metadata']['name']}: suspended with active pods counted")
    return problems


def assert_invariants(fleet: Fleet, settle: float = 60.0) -> None:
    """Once the scenario has settled (within `settle` seconds), invariant_violations finds nothing."""
    if poll(lambda: not invariant_violations(fleet), settle, interval=2) is None:
        raise AssertionError(f"invariants broken: {invariant_violations(fleet)}")
