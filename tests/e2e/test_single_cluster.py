"""Job integrations end to end on one cluster, driven with kubectl as a user would
(docs/single-cluster.md): a fleet started with `localfleet up --agents` (worker_agent with its
webhooks, the real LeaderWorkerSet controller, kube-scheduler and kwok nodes).

- the sample LWS runs both groups when there is quota for both (readyReplicas=2);
- with quota for one group only, one group's pods run and the other's stay gated until quota frees;
- a Job runs, completes, and its Workload is Finished;
- a higher-priority Job evicts a lower one, which is suspended and runs again later;
- an LWS scales 2 -> 3 -> 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
SAMPLE_LWS = REPO / "examples" / "sample-leaderworkerset.yaml"
FLEET_DIR = Path(os.environ.get("AGENT_FLEET_DIR", "/dev/shm/kueue-federation-e2e-agents"))


class Kubectl:
    def __init__(self, binary: str, kubeconfig: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str:
        res = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args], input=input, capture_output=True, text=True
        )
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr}")
        return res.stdout

    def apply(self, obj: dict | str) -> None:
        self("apply", "-f", "-", input=obj if isinstance(obj, str) else json.dumps(obj))

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json"))


def wait_until(what: str, check, timeout: float = 90.0, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def kubectl():
    """A one-worker fleet with agents; it is stopped at the end of the module."""
    base = [sys.executable, str(REPO / "hack" / "localfleet.py"), "--dir", str(FLEET_DIR)]
    subprocess.run([*base, "down"], capture_output=True)
    up = subprocess.run(
        [*base, "up", "--workers", "1", "--agents", "--no-smoke"], capture_output=True, text=True
    )
    if up.returncode != 0:
        subprocess.run([*base, "down"], capture_output=True)
        raise AssertionError(f"localfleet up --agents failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
    try:
        state = json.loads((FLEET_DIR / "state.json").read_text())
        k8s = state["versions"]["K8S_VERSION"]
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kueue-federation"
        binary = str(cache / "bin" / f"kubernetes-v{k8s}" / "kubectl")
        yield Kubectl(binary, state["clusters"]["worker1"]["kubeconfig"])
    finally:
        subprocess.run([*base, "down"], capture_output=True)


@pytest.fixture
def ns(kubectl):
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def queues(kubectl: Kubectl, ns: str, cpu: str, **preemption: str) -> str:
    cq = f"cq-{ns}"
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
            }
        ],
    }
    if preemption:
        spec["preemption"] = preemption
    kubectl.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": spec,
        }
    )
    kubectl.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "user-queue", "namespace": ns},
            "spec": {"clusterQueue": cq},
        }
    )
    return cq


def sample_lws(ns: str, name: str = "nginx-leaderworkerset") -> dict:
    lws = yaml.safe_load(SAMPLE_LWS.read_text())
    lws["metadata"]["name"] = name
    lws["metadata"]["namespace"] = ns
    return lws


def pods(kubectl: Kubectl, ns: str) -> list[dict]:
    return kubectl.json("get", "pods", "-n", ns)["items"]


def gated(pod: dict) -> bool:
    return any(g["name"] == "kueue.x-k8s.io/admission" for g in pod["spec"].get("schedulingGates") or ())


def running(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and not gated(pod)


def ready_replicas(kubectl: Kubectl, ns: str, name: str) -> int:
    return kubectl.json("get", "leaderworkerset", name, "-n", ns).get("status", {}).get("readyReplicas", 0)


def workloads(kubectl: Kubectl, ns: str) -> list[dict]:
    return [
        w
        for w in kubectl.json("get", "workloads", "-n", ns)["items"]
        if not w["metadata"].get("deletionTimestamp")
    ]


def condition(obj: dict, ctype: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions") or () if c["type"] == ctype), {})


def test_sample_lws_runs_both_groups(kubectl, ns):
    queues(kubectl, ns, "10")
    kubectl.apply(sample_lws(ns))
    wait_until("readyReplicas=2", lambda: ready_replicas(kubectl, ns, "nginx-leaderworkerset") == 2)
    wls = workloads(kubectl, ns)
    assert len(wls) == 2
    assert all(condition(w, "Admitted").get("status") == "True" for w in wls)
    assert all(not gated(p) for p in pods(kubectl, ns))


def test_quota_for_one_group_runs_one_group(kubectl, ns):
    cq = queues(kubectl, ns, "500m")  # one group: 100m leader + 2 x 200m workers
    kubectl.apply(sample_lws(ns))

    def one_group_running():
        current = pods(kubectl, ns)
        if len(current) != 6:
            return None
        run = [p for p in current if running(p)]
        held = [p for p in current if gated(p)]
        return (run, held) if len(run) == 3 and len(held) == 3 else None

    run, held = wait_until("one group running, one gated", one_group_running)
    group = lambda p: p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]  # noqa: E731
    assert len({group(p) for p in run}) == 1 and len({group(p) for p in held}) == 1
    time.sleep(3)
    assert len([p for p in pods(kubectl, ns) if gated(p)]) == 3
    kubectl(
        "patch",
        "clusterqueue",
        cq,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota","value":"1"}]',
    )
    wait_until("readyReplicas=2", lambda: ready_replicas(kubectl, ns, "nginx-leaderworkerset") == 2)


def job(ns: str, name: str, priority: str | None = None, keep_running: bool = False) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": "user-queue"}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                # kwok completes Job pods 1-6 s after they are Ready, except pods with this annotation
                # (localfleet/binaries.py KEEP_RUNNING_ANNOTATION).
                "metadata": {
                    "annotations": {"kueue-federation.dev/keep-running": "true"} if keep_running else {}
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
                    ],
                },
            },
        },
    }


def job_workload(kubectl: Kubectl, ns: str, job_name: str) -> dict | None:
    for w in workloads(kubectl, ns):
        if any(
            o["name"] == job_name and o["kind"] == "Job" for o in w["metadata"].get("ownerReferences") or ()
        ):
            return w
    return None


def test_job_runs_and_its_workload_finishes(kubectl, ns):
    queues(kubectl, ns, "2")
    kubectl.apply(job(ns, "hello"))
    wl = wait_until("a Workload for the Job", lambda: job_workload(kubectl, ns, "hello"))
    assert wl["metadata"]["name"].startswith("job-hello-")
    wait_until(
        "Job complete",
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in kubectl.json("get", "job", "hello", "-n", ns).get("status", {}).get("conditions") or ()
        ),
    )
    wl = wait_until(
        "Workload Finished", lambda: condition(job_workload(kubectl, ns, "hello") or {}, "Finished")
    )
    assert (wl["status"], wl["reason"]) == ("True", "Succeeded")


def test_higher_priority_job_evicts_lower_one(kubectl, ns):
    queues(kubectl, ns, "1", withinClusterQueue="LowerPriority")
    for name, value in (("low", 10), ("high", 100)):
        kubectl.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"{ns}-{name}"},
                "value": value,
            }
        )
    kubectl.apply(job(ns, "low", f"{ns}-low", keep_running=True))

    def started(name):
        return lambda: kubectl.json("get", "job", name, "-n", ns)["spec"].get("suspend") is False

    wait_until("low running", started("low"))
    kubectl.apply(job(ns, "high", f"{ns}-high"))
    wait_until(
        "low suspended", lambda: kubectl.json("get", "job", "low", "-n", ns)["spec"].get("suspend") is True
    )
    low_wl = job_workload(kubectl, ns, "low")
    assert condition(low_wl, "Evicted").get("reason") == "Preempted"
    wait_until("high running", started("high"))
    wait_until("low running again", started("low"), timeout=120)
    high = kubectl.json("get", "job", "high", "-n", ns)
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in high["status"]["conditions"])
    low_wl = job_workload(kubectl, ns, "low")
    assert condition(low_wl, "Admitted").get("status") == "True"
    assert condition(low_wl, "Requeued").get("reason") == "Preempted"


def test_lws_scales(kubectl, ns):
    queues(kubectl, ns, "10")
    kubectl.apply(sample_lws(ns, "scaling"))
    wait_until("readyReplicas=2", lambda: ready_replicas(kubectl, ns, "scaling") == 2)
    kubectl("scale", "leaderworkerset", "scaling", "-n", ns, "--replicas=3")
    wait_until("3 workloads", lambda: len(workloads(kubectl, ns)) == 3)
    wait_until("readyReplicas=3", lambda: ready_replicas(kubectl, ns, "scaling") == 3)
    kubectl("scale", "leaderworkerset", "scaling", "-n", ns, "--replicas=1")
    wait_until("1 workload", lambda: len(workloads(kubectl, ns)) == 1)
    wait_until(
        "3 pods",
        lambda: len([p for p in pods(kubectl, ns) if not p["metadata"].get("deletionTimestamp")]) == 3,
    )
