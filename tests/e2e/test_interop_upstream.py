"""Mixed fleets: our MultiKueue manager and worker_agent next to upstream Kueue (KUEUE_VERSION of
hack/versions.env), each fleet started with `localfleet up --setup-multikueue --upstream-kueue ...`
and driven with kubectl on the manager, as a user would.

Our manager, worker1 upstream Kueue, worker2 ours (one fleet for the class):
1. a batch/v1 Job runs on the upstream worker; Admitted, clusterName and Finished show on the
   manager's Workload, the Job's completion on the manager's Job;
2. the sample LeaderWorkerSet runs on the upstream worker; every group's Workload on the manager is
   admitted there;
3. a batch of Jobs larger than one worker spreads over both workers;
4. a JobSet (the guide's shape) runs on the upstream worker, its status mirrored.

Upstream's manager, worker1 ours (a second fleet, started after the first is down):
5. a Job, a JobSet and the sample LWS dispatched to our worker. Upstream v0.19's manager talks v1beta2 to its
   workers, which our CRDs serve (storage version) next to v1beta1.
"""

from __future__ import annotations

import contextlib

import pytest
import yaml
from fleet_kit import (
    CLUSTER_QUEUE,
    MANAGER,
    NAMESPACE,
    PAUSE_IMAGE,
    QUEUE,
    SAMPLE_LWS,
    Fleet,
    NotYet,
    assert_invariants,
    check_state,
    cluster_name,
    condition,
    cpu_quota_patch,
    is_true,
    mk_cluster,
    own_fleet,
    summary,
    unique,
    wait_until,
)

from kueue_domain import api

pytestmark = pytest.mark.realcluster

# kwok completes a Job's pod 1-6 s after it is Ready, unless the pod carries this annotation.
KEEP_RUNNING = "kueue-federation.dev/keep-running"
UPSTREAM_WORKER = "worker1"
KEEP_LOGS = "INTEROP_E2E_LOGS"  # a directory to keep the processes' logs in


@pytest.fixture(scope="class")
def mixed():
    """Our manager; worker1 runs upstream Kueue, worker2 our worker_agent."""
    args = ("--workers", "2", "--upstream-kueue", UPSTREAM_WORKER)
    with own_fleet("kf-interop-mixed-", *args, keep_logs_env=KEEP_LOGS) as fleet:
        assert "upstreamKueue" in fleet.state["clusters"][UPSTREAM_WORKER]
        assert "agent" in fleet.state["clusters"]["worker2"]
        assert "manager" in fleet.state["clusters"][MANAGER]
        yield fleet


@pytest.fixture(scope="class")
def upstream_manager():
    """Upstream Kueue (with its MultiKueue manager) on the manager; worker1 runs our worker_agent."""
    args = ("--workers", "1", "--upstream-kueue", MANAGER)
    with own_fleet("kf-interop-upmgr-", *args, keep_logs_env=KEEP_LOGS) as fleet:
        assert "upstreamKueue" in fleet.state["clusters"][MANAGER]
        assert "agent" in fleet.state["clusters"]["worker1"]
        yield fleet


# -- waiting and reading --------------------------------------------------------------------------


def owned_workloads(fleet: Fleet, cluster: str, kind: str, name: str) -> list[dict]:
    """The Workloads of the job object `kind`/`name`: by owner reference (a Job's) or by the
    job-owner-name annotation (an LWS group's)."""
    found = []
    for wl in fleet.items(cluster, "workloads"):
        owners = wl["metadata"].get("ownerReferences") or ()
        annotations = wl["metadata"].get("annotations") or {}
        if any(o["kind"] == kind and o["name"] == name for o in owners) or (
            annotations.get(api.ANNOTATION_JOB_OWNER_NAME) == name
        ):
            found.append(wl)
    return found


def job(name: str, cpu: str = "1", keep_running: bool = False) -> dict:
    template: dict = {
        "spec": {
            "containers": [{"name": "c", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": cpu}}}],
            "restartPolicy": "Never",
        }
    }
    if keep_running:
        template["metadata"] = {"annotations": {KEEP_RUNNING: "true"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": template},
    }


def jobset(name: str) -> dict:
    """The setup guide's shape of JobSet: a leader Job of one pod and a workers Job of two."""

    def replicated(rj: str, pods: int) -> dict:
        pod = {
            "containers": [{"name": "c", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "1"}}}],
            "restartPolicy": "Never",
        }
        spec = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": {"spec": pod}}
        return {"name": rj, "replicas": 1, "template": {"spec": spec}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
        "spec": {"suspend": True, "replicatedJobs": [replicated("leader", 1), replicated("workers", 2)]},
    }


def jobset_completed_on(fleet: Fleet, name: str, worker: str) -> dict:
    """The JobSet's Workload Finished on the manager, admitted on `worker`, and the manager's JobSet
    Completed with the worker's status."""

    def finished():
        found = owned_workloads(fleet, MANAGER, "JobSet", name)
        return found[0] if len(found) == 1 and is_true(found[0], "Finished") else NotYet(summary(found))

    wl = wait_until(f"JobSet {name}'s Workload Finished on the manager", finished, interval=0.3)
    assert cluster_name(wl) == worker
    assert check_state(wl)["message"] == f'The workload was admitted on "{mk_cluster(worker)}"'
    local = wait_until(
        "the manager's JobSet Completed (mirrored from the worker)",
        lambda: (js := fleet.get(MANAGER, "jobsets", name)) and is_true(js, "Completed") and js,
    )
    succeeded = {r["name"]: r["succeeded"] for r in local["status"]["replicatedJobsStatus"]}
    assert succeeded == {"leader": 1, "workers": 1}
    return wl


def sample_lws(name: str) -> dict:
    sample = yaml.safe_load(SAMPLE_LWS.read_text())
    sample["metadata"].update(name=name, namespace=NAMESPACE)
    assert sample["spec"]["replicas"] == 2
    return sample


@contextlib.contextmanager
def only_worker_with_quota(fleet: Fleet, worker: str):
    """Every other worker's cluster-queue has no cpu quota for the block: all work lands on `worker`."""
    originals = {}
    try:
        for other in fleet.workers:
            if other == worker:
                continue
            cq = fleet.json(other, "get", "clusterqueue", CLUSTER_QUEUE)
            originals[other] = cq
            fleet.kubectl(
                other, "patch", "clusterqueue", CLUSTER_QUEUE, "--type=json", "-p", cpu_quota_patch(cq, "0")
            )
        yield
    finally:
        for other, cq in originals.items():
            cpu = next(
                r["nominalQuota"]
                for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
                if r["name"] == "cpu"
            )
            fleet.kubectl(
                other, "patch", "clusterqueue", CLUSTER_QUEUE, "--type=json", "-p", cpu_quota_patch(cq, cpu)
            )


def delete_and_wait(fleet: Fleet, kind: str, names: list[str], timeout: float = 90) -> None:
    """Delete job objects on the manager; wait until no worker keeps a copy."""
    for name in names:
        fleet.kubectl(MANAGER, "delete", kind, name, "-n", NAMESPACE, "--ignore-not-found", "--wait=false")

    def gone() -> bool:
        return all(fleet.get(w, kind, n) is None for w in fleet.workers for n in names)

    wait_until(f"{kind} {', '.join(names)} gone from every worker", gone, timeout=timeout, interval=1)


# -- our manager, an upstream worker ------------------------------------------------------------


class TestOurManagerWithAnUpstreamWorker:
    @pytest.fixture(autouse=True)
    def nothing_stuck(self, mixed):
        """After every test: nothing stuck, nothing leaked (fleet_kit.assert_invariants)."""
        yield
        assert_invariants(mixed)

    def test_a_job_runs_on_the_upstream_worker_and_its_status_is_mirrored(self, mixed):
        name = unique("job")
        seen_on_worker: list[dict] = []

        def finished():
            copies = owned_workloads(mixed, UPSTREAM_WORKER, "Job", name)
            seen_on_worker.extend(c for c in copies if is_true(c, "Admitted"))
            found = owned_workloads(mixed, MANAGER, "Job", name)
            if len(found) == 1 and is_true(found[0], "Finished"):
                return found[0]
            return NotYet(summary(found))

        with only_worker_with_quota(mixed, UPSTREAM_WORKER):
            mixed.create(MANAGER, job(name))
            wl = wait_until(f"Job {name}'s Workload Finished on the manager", finished, interval=0.3)
        assert cluster_name(wl) == UPSTREAM_WORKER
        assert is_true(wl, "Admitted")
        assert check_state(wl)["state"] == "Ready"
        assert check_state(wl)["message"] == f'The workload was admitted on "{mk_cluster(UPSTREAM_WORKER)}"'
        assert seen_on_worker, f"upstream Kueue on {UPSTREAM_WORKER} never admitted the Workload copy"
        assert seen_on_worker[0]["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE
        local_job = wait_until(
            "the manager's Job Complete (mirrored from the worker)",
            lambda: (j := mixed.get(MANAGER, "jobs", name)) and is_true(j, "Complete") and j,
        )
        assert local_job["status"]["succeeded"] == 1
        assert mixed.get("worker2", "jobs", name) is None
        delete_and_wait(mixed, "jobs", [name])

    def test_a_jobset_runs_on_the_upstream_worker_and_its_status_is_mirrored(self, mixed):
        name = unique("js")
        with only_worker_with_quota(mixed, UPSTREAM_WORKER):
            mixed.create(MANAGER, jobset(name))
            jobset_completed_on(mixed, name, UPSTREAM_WORKER)
        assert mixed.get("worker2", "jobsets", name) is None
        delete_and_wait(mixed, "jobsets", [name])

    def test_the_sample_lws_runs_on_the_upstream_worker(self, mixed):
        name = unique("sample")
        lws = sample_lws(name)
        replicas, size = lws["spec"]["replicas"], lws["spec"]["leaderWorkerTemplate"]["size"]

        def admitted_there():
            found = owned_workloads(mixed, MANAGER, "LeaderWorkerSet", name)
            placed = [
                wl
                for wl in found
                if check_state(wl).get("state") == "Ready" and cluster_name(wl) == UPSTREAM_WORKER
            ]
            return found if len(found) == replicas == len(placed) else NotYet(summary(found))

        with only_worker_with_quota(mixed, UPSTREAM_WORKER):
            mixed.create(MANAGER, lws)
            members = wait_until(f"both groups admitted on {UPSTREAM_WORKER}", admitted_there)
        for wl in members:
            assert is_true(wl, "Admitted")
            assert (
                check_state(wl)["message"] == f'The workload was admitted on "{mk_cluster(UPSTREAM_WORKER)}"'
            )
        remote = wait_until(
            f"readyReplicas={replicas} on {UPSTREAM_WORKER}",
            lambda: (
                (r := mixed.get(UPSTREAM_WORKER, "lws", name))
                and (r.get("status") or {}).get("readyReplicas") == replicas
                and r
            ),
        )
        assert remote["spec"]["replicas"] == replicas
        copies = owned_workloads(mixed, UPSTREAM_WORKER, "LeaderWorkerSet", name)
        assert len(copies) == replicas and all(is_true(c, "Admitted") for c in copies)
        pods = mixed.items(UPSTREAM_WORKER, "pods", "-l", f"leaderworkerset.sigs.k8s.io/name={name}")
        assert sum(1 for p in pods if p["status"].get("phase") == "Running") == replicas * size
        wait_until(
            "the manager's LWS shows the worker's readyReplicas",
            lambda: (
                ((mixed.get(MANAGER, "lws", name) or {}).get("status") or {}).get("readyReplicas") == replicas
            ),
        )
        assert mixed.get("worker2", "lws", name) is None
        delete_and_wait(mixed, "lws", [name])

    def test_a_batch_of_jobs_spreads_over_both_workers(self, mixed):
        # 7 CPU each, never finishing: a worker's 32 CPU hold 4, so 8 need both workers.
        names = [unique("spread") for _ in range(8)]
        mixed.create(MANAGER, *(job(n, cpu="7", keep_running=True) for n in names))

        def all_placed():
            found = [wl for n in names for wl in owned_workloads(mixed, MANAGER, "Job", n)]
            placed = [wl for wl in found if check_state(wl).get("state") == "Ready" and cluster_name(wl)]
            return placed if len(placed) == len(names) else NotYet(summary(found))

        try:
            placed = wait_until("all 8 Jobs admitted on a worker", all_placed, timeout=120)
            per_worker = {w: sum(1 for wl in placed if cluster_name(wl) == w) for w in mixed.workers}
            assert per_worker[UPSTREAM_WORKER] > 0 and per_worker["worker2"] > 0, per_worker
            assert sum(per_worker.values()) == len(names)
            for worker in mixed.workers:
                running = [j for j in mixed.items(worker, "jobs") if j["metadata"]["name"] in names]
                assert len(running) == per_worker[worker], (worker, [j["metadata"]["name"] for j in running])
        finally:
            delete_and_wait(mixed, "jobs", names, timeout=120)


# -- upstream's manager, our worker ---------------------------------------------------------------


class WorkerServesNoV1beta2(AssertionError):
    """Upstream's manager cannot connect: our worker's CRDs do not serve kueue.x-k8s.io/v1beta2."""


def connected(fleet: Fleet, worker: str) -> None:
    """Upstream's MultiKueueCluster for `worker` becomes Active; WorkerServesNoV1beta2 when it says
    that the worker serves no v1beta2 (its first discovery fails on it)."""

    def active():
        mkc = fleet.json(MANAGER, "get", "multikueuecluster", mk_cluster(worker))
        message = condition(mkc, "Active").get("message", "")
        if "kueue.x-k8s.io/v1beta2" in message:
            raise WorkerServesNoV1beta2(f"MultiKueueCluster {worker}: {message}")
        return is_true(mkc, "Active") or NotYet(condition(mkc, "Active"))

    wait_until(f"MultiKueueCluster {worker} Active", active, timeout=60)


class TestUpstreamManagerWithOurWorker:
    def test_a_job_dispatched_by_upstream_runs_on_our_worker(self, upstream_manager):
        fleet, worker = upstream_manager, "worker1"
        connected(fleet, worker)
        name = unique("job")
        fleet.create(MANAGER, job(name))

        def finished():
            found = owned_workloads(fleet, MANAGER, "Job", name)
            return found[0] if len(found) == 1 and is_true(found[0], "Finished") else NotYet(summary(found))

        wl = wait_until(f"Job {name}'s Workload Finished on the manager", finished)
        assert cluster_name(wl) == worker
        assert is_true(wl, "Admitted")
        assert check_state(wl)["message"] == f'The workload was admitted on "{mk_cluster(worker)}"'
        delete_and_wait(fleet, "jobs", [name])

    def test_a_jobset_dispatched_by_upstream_runs_on_our_worker(self, upstream_manager):
        fleet, worker = upstream_manager, "worker1"
        connected(fleet, worker)
        name = unique("js")
        fleet.create(MANAGER, jobset(name))
        jobset_completed_on(fleet, name, worker)
        delete_and_wait(fleet, "jobsets", [name])

    def test_the_sample_lws_dispatched_by_upstream_runs_on_our_worker(self, upstream_manager):
        fleet, worker = upstream_manager, "worker1"
        connected(fleet, worker)
        name = unique("sample")
        lws = sample_lws(name)
        replicas = lws["spec"]["replicas"]
        fleet.create(MANAGER, lws)

        def admitted_there():
            found = owned_workloads(fleet, MANAGER, "LeaderWorkerSet", name)
            placed = [wl for wl in found if is_true(wl, "Admitted") and cluster_name(wl) == worker]
            return found if len(found) == replicas == len(placed) else NotYet(summary(found))

        wait_until(f"both groups admitted on {worker}", admitted_there)
        wait_until(
            f"readyReplicas={replicas} on {worker}",
            lambda: (
                ((fleet.get(worker, "lws", name) or {}).get("status") or {}).get("readyReplicas") == replicas
            ),
        )
        delete_and_wait(fleet, "lws", [name])
