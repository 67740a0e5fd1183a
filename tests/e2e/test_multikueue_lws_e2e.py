"""LeaderWorkerSets across clusters, end to end, as `make up` runs them: a fleet of its own started
with `localfleet up --agents --manager --setup-multikueue` (a manager with the setup guide's
objects, two workers with the real LWS controller and kwok nodes) and a short workerLostTimeout.
Everything is driven with kubectl on the manager, as a user would.

a. the sample LWS runs entirely on one worker, its status shows on the manager, and deleting it on
   the manager removes everything on the worker;
b. three groups land whole on one worker;
c. a worker without quota for the whole LWS is passed over;
d. scaling 2 -> 3 -> 1 changes the remote LWS in place;
f. ten LWS at once spread over both workers, no LWS split;
g. an LWS larger than any worker's quota stays pending, the remote LWS does not flap, and the
   manager's Workloads say why;
e. (last: it stops a worker's kube-apiserver) a lost worker's LWS moves whole to the other worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

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
    cpu_quota_patch,
    mk_cluster,
    own_fleet,
    poll,
    summary,
    unique,
    wait_until,
)

from kueue_domain import api
from manager.adapters.leaderworkerset import ANNOTATION_WORKER_CLUSTER

pytestmark = pytest.mark.realcluster

WORKER_LOST_TIMEOUT = "20s"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


@pytest.fixture(scope="module")
def mk():
    """A fleet of its own (manager + 2 workers, MultiKueue set up, workerLostTimeout 20s), always
    torn down at the end of the module."""
    args = ("--agents", "--manager", "--worker-lost-timeout", WORKER_LOST_TIMEOUT)
    with own_fleet("kf-mk-lws-e2e-", *args, keep_logs_env="MK_LWS_E2E_LOGS") as fleet:
        assert len(fleet.workers) == 2
        yield fleet


@pytest.fixture(autouse=True)
def nothing_stuck(mk):
    """After every test: nothing stuck, nothing leaked (fleet_kit.assert_invariants)."""
    yield
    assert_invariants(mk)


# -- the objects and what the manager shows of them -----------------------------------------------


def lws_manifest(name: str, replicas: int = 2, size: int = 2, cpu: str = "100m") -> dict:
    template = {
        "spec": {"containers": [{"name": "c", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": cpu}}}]}
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}},
    }


def owned_by(wl: dict, name: str) -> bool:
    return (wl["metadata"].get("annotations") or {}).get(api.ANNOTATION_JOB_OWNER_NAME) == name


def members(mk: Fleet, name: str, workloads: list[dict] | None = None) -> list[dict]:
    """The manager's Workloads of the LWS `name`, one per group."""
    workloads = mk.items(MANAGER, "workloads") if workloads is None else workloads
    return [wl for wl in workloads if owned_by(wl, name)]


def placement(found: list[dict], count: int) -> str | None:
    """The one worker all `count` members are Ready on (check Ready, one clusterName), else None."""
    if len(found) != count or any(check_state(wl).get("state") != api.CHECK_STATE_READY for wl in found):
        return None
    clusters = {cluster_name(wl) for wl in found}
    return clusters.pop() if len(clusters) == 1 and "" not in clusters else None


def placed_on(mk: Fleet, name: str, count: int):
    def check():
        found = members(mk, name)
        return placement(found, count) or NotYet(summary(found))

    return check


def moved_to(mk: Fleet, name: str, worker: str):
    found = members(mk, name)
    return placement(found, len(found) or 1) == worker or NotYet(summary(found))


def remote_ready(mk: Fleet, worker: str, name: str, ready: int):
    def check():
        remote = mk.lws(worker, name)
        return remote if remote and (remote.get("status") or {}).get("readyReplicas") == ready else None

    return check


def manager_shows(mk: Fleet, name: str, worker: str, ready: int):
    """The manager's LWS carries the worker's status and the annotation naming the worker."""

    def check():
        local = mk.lws(MANAGER, name) or {}
        annotations = (local.get("metadata") or {}).get("annotations") or {}
        if annotations.get(ANNOTATION_WORKER_CLUSTER) != mk_cluster(worker):
            return None
        return local if (local.get("status") or {}).get("readyReplicas") == ready else None

    return check


def remote_copies(mk: Fleet, worker: str, name: str) -> list[dict]:
    return [wl for wl in mk.items(worker, "workloads") if owned_by(wl, name)]


def pods_of(mk: Fleet, cluster: str, name: str) -> list[dict]:
    return mk.items(cluster, "pods", "-l", f"{LWS_NAME_LABEL}={name}")


def nothing_left_on(mk: Fleet, worker: str, name: str) -> bool:
    return (
        mk.lws(worker, name) is None
        and not remote_copies(mk, worker, name)
        and not mk.json(worker, "get", "pods", "-n", NAMESPACE, "-l", f"{LWS_NAME_LABEL}={name}")["items"]
    )


def delete_and_wait(mk: Fleet, name: str, timeout: float = 90) -> None:
    mk.kubectl(MANAGER, "delete", "lws", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=false")
    wait_until(
        f"LWS {name}, its pods and Workload copies gone from every worker",
        lambda: all(nothing_left_on(mk, w, name) for w in mk.workers),
        timeout=timeout,
        interval=1,
    )


@pytest.fixture
def submit(mk):
    """Create LWSs on the manager; every one is deleted afterwards, and gone from the workers."""
    created: list[str] = []

    def create(*objects: dict) -> None:
        mk.kubectl(
            MANAGER,
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
        )
        created.extend(o["metadata"]["name"] for o in objects)

    yield create
    for name in created:
        mk.kubectl(MANAGER, "delete", "lws", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=false")
    for name in created:
        delete_and_wait(mk, name)


@contextlib.contextmanager
def worker_cpu_quota(mk: Fleet, quotas: dict[str, str]):
    """The workers' cluster-queue cpu quota set for the block, restored afterwards."""
    originals = {}
    try:
        for worker, cpu in quotas.items():
            cq = mk.json(worker, "get", "clusterqueue", CLUSTER_QUEUE)
            originals[worker] = cq
            mk.kubectl(
                worker, "patch", "clusterqueue", CLUSTER_QUEUE, "--type=json", "-p", cpu_quota_patch(cq, cpu)
            )
        yield
    finally:
        for worker, cq in originals.items():
            cpu = next(
                r["nominalQuota"]
                for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
                if r["name"] == "cpu"
            )
            mk.kubectl(
                worker, "patch", "clusterqueue", CLUSTER_QUEUE, "--type=json", "-p", cpu_quota_patch(cq, cpu)
            )


class PlacementWatch(threading.Thread):
    """Polls the manager's Workloads of some LWSs; records every moment one LWS's members name two
    different workers."""

    def __init__(self, mk: Fleet, names: list[str]) -> None:
        super().__init__(daemon=True)
        self.mk, self.names = mk, names
        self.samples = 0
        self.splits: list[tuple[float, str, list[str]]] = []
        self._stop_event = threading.Event()
        self._t0 = time.monotonic()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                workloads = self.mk.items(MANAGER, "workloads")
            except (AssertionError, subprocess.TimeoutExpired):
                continue
            self.samples += 1
            for name in self.names:
                clusters = {cluster_name(wl) for wl in members(self.mk, name, workloads)} - {""}
                if len(clusters) > 1:
                    self.splits.append((round(time.monotonic() - self._t0, 1), name, sorted(clusters)))
            self._stop_event.wait(0.5)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=60)


@contextlib.contextmanager
def lws_events(mk: Fleet, worker: str, name: str):
    """Counts the ADDED and DELETED watch events of the LWS `name` on a worker during the block."""
    cmd = [
        mk.kubectl_binary,
        "--kubeconfig",
        mk.state["clusters"][worker]["kubeconfig"],
        "get",
        "lws",
        "-n",
        NAMESPACE,
        "--field-selector",
        f"metadata.name={name}",
        "--watch",
        "--output-watch-events",
        "-o",
        "json",
    ]
    counts = {"ADDED": 0, "DELETED": 0}
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, text=True)
        try:
            yield counts
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            out.seek(0)
            text, decoder, pos = out.read(), json.JSONDecoder(), 0
            while pos < len(text.rstrip()):
                while text[pos].isspace():
                    pos += 1
                event, pos = decoder.raw_decode(text, pos)
                if event.get("type") in counts:
                    counts[event["type"]] += 1


def other_worker(mk: Fleet, worker: str) -> str:
    return next(w for w in mk.workers if w != worker)


# -- the tests ----------------------------------------------------------------------------------


def test_a_sample_lws_runs_entirely_on_one_worker(mk, submit):
    sample = yaml.safe_load(SAMPLE_LWS.read_text())
    name = unique("sample")
    sample["metadata"].update(name=name, namespace=NAMESPACE)
    size, replicas = sample["spec"]["leaderWorkerTemplate"]["size"], sample["spec"]["replicas"]
    assert replicas == 2
    submit(sample)

    worker = wait_until("both groups Ready on one worker", placed_on(mk, name, 2))
    for wl in members(mk, name):
        assert check_state(wl)["state"] == "Ready"
        assert check_state(wl)["message"] == f'The workload was admitted on "{mk_cluster(worker)}"'
    wait_until(f"readyReplicas=2 on {worker}", remote_ready(mk, worker, name, 2))
    local = wait_until(
        "the manager's LWS readyReplicas=2 naming the worker", manager_shows(mk, name, worker, 2)
    )
    assert local["status"]["replicas"] == 2
    running = [p for p in pods_of(mk, worker, name) if p["status"].get("phase") == "Running"]
    assert len(running) == replicas * size
    other = other_worker(mk, worker)
    assert mk.lws(other, name) is None and not remote_copies(mk, other, name) and not pods_of(mk, other, name)
    assert mk.items(MANAGER, "pods") == [], "no pod runs on the manager cluster"

    mk.kubectl(MANAGER, "delete", "lws", name, "-n", NAMESPACE)
    wait_until(
        f"the LWS, its pods and Workload copies gone from {worker}",
        lambda: nothing_left_on(mk, worker, name),
        timeout=60,
        interval=1,
    )


def test_b_three_groups_land_whole_on_one_worker(mk, submit):
    name = unique("three")
    submit(lws_manifest(name, replicas=3, size=2))
    worker = wait_until("three groups Ready on one worker", placed_on(mk, name, 3))
    wait_until(f"readyReplicas=3 on {worker}", remote_ready(mk, worker, name, 3))
    assert len(pods_of(mk, worker, name)) == 6
    assert len(remote_copies(mk, worker, name)) == 3
    other = other_worker(mk, worker)
    assert mk.lws(other, name) is None and not pods_of(mk, other, name)
    wait_until("the manager's LWS readyReplicas=3", manager_shows(mk, name, worker, 3))


@pytest.mark.parametrize(
    "quota",
    [
        pytest.param("300m", id="less-than-one-group"),
        pytest.param("500m", id="one-group-but-not-two"),
    ],
)
def test_c_a_worker_without_quota_for_the_whole_lws_is_passed_over(mk, submit, quota):
    # A group is 2 pods x 200m = 400m, the LWS 800m: with `quota` on worker1 it belongs on worker2.
    first, second = mk.workers
    name = unique("quota")
    with worker_cpu_quota(mk, {first: quota}):
        submit(lws_manifest(name, replicas=2, size=2, cpu="200m"))
        found = poll(placed_on(mk, name, 2), timeout=45)
        states = summary(members(mk, name))
        assert found == second, f"expected the whole LWS on {second}; the manager's Workloads: {states}"
        wait_until(f"readyReplicas=2 on {second}", remote_ready(mk, second, name, 2))
        assert mk.lws(first, name) is None and not pods_of(mk, first, name)


def test_d_scaling_changes_the_remote_lws_in_place(mk, submit):
    name = unique("scale")
    submit(lws_manifest(name, replicas=2))
    worker = wait_until("two groups Ready on one worker", placed_on(mk, name, 2))
    uid = wait_until(f"readyReplicas=2 on {worker}", remote_ready(mk, worker, name, 2))["metadata"]["uid"]

    mk.kubectl(MANAGER, "scale", "lws", name, "-n", NAMESPACE, "--replicas=3")
    assert wait_until("three groups Ready", placed_on(mk, name, 3)) == worker
    remote = wait_until(f"readyReplicas=3 on {worker}", remote_ready(mk, worker, name, 3))
    assert remote["metadata"]["uid"] == uid
    wait_until("the manager's LWS readyReplicas=3", manager_shows(mk, name, worker, 3))

    mk.kubectl(MANAGER, "scale", "lws", name, "-n", NAMESPACE, "--replicas=1")
    remote = wait_until(f"readyReplicas=1 on {worker}", remote_ready(mk, worker, name, 1))
    assert remote["metadata"]["uid"] == uid and remote["spec"]["replicas"] == 1
    wait_until("one member left on the manager", lambda: len(members(mk, name)) == 1)
    wait_until(f"one Workload copy left on {worker}", lambda: len(remote_copies(mk, worker, name)) == 1)
    wait_until(f"two pods left on {worker}", lambda: len(pods_of(mk, worker, name)) == 2)
    (copy_left,) = remote_copies(mk, worker, name)
    assert copy_left["metadata"]["annotations"][api.ANNOTATION_COMPONENT_WORKLOAD_INDEX] == "0"
    assert mk.lws(worker, name)["metadata"]["uid"] == uid
    wait_until("the manager's LWS readyReplicas=1", manager_shows(mk, name, worker, 1))


def test_f_ten_lws_at_once_spread_over_both_workers_without_a_split(mk, submit):
    # Each LWS is 2 groups x 2 pods x 1200m = 4.8 cpu: a worker (32 cpu) holds six, so ten need both.
    names = [unique(f"ten{i}") for i in range(10)]
    watch = PlacementWatch(mk, names)
    watch.start()
    try:
        submit(*[lws_manifest(n, replicas=2, size=2, cpu="1200m") for n in names])

        def all_placed():
            workloads = mk.items(MANAGER, "workloads")
            where = {n: placement(members(mk, n, workloads), 2) for n in names}
            return where if all(where.values()) else None

        where = poll(all_placed, timeout=90, interval=1)
    finally:
        watch.stop()
    workloads = mk.items(MANAGER, "workloads")
    summary = {
        n: [(cluster_name(wl), check_state(wl).get("state")) for wl in members(mk, n, workloads)]
        for n in names
    }
    assert where, f"not all ten LWS were placed whole; members (clusterName, check): {summary}"
    assert watch.splits == [], f"an LWS's members named two workers: {watch.splits}"
    assert watch.samples > 3
    assert set(where.values()) == set(mk.workers), f"expected both workers in use: {where}"
    for worker in mk.workers:
        remote = {o["metadata"]["name"]: o for o in mk.items(worker, "lws")}
        for n in names:
            if where[n] == worker:
                assert n in remote
            else:
                assert n not in remote, f"{n} runs on {where[n]} but has a copy on {worker}"


@pytest.mark.parametrize(
    ("shape", "cpu"),
    [
        ("every group is too large", "1200m"),
        ("only the whole LWS is too large", "600m"),
    ],
)
def test_g_an_lws_larger_than_any_worker_stays_pending_and_nothing_flaps(mk, submit, shape, cpu):
    # Both workers get 2 cpu; the LWS is 2 groups x 2 pods x `cpu`: 4.8 (2.4 a group) or 2.4 (1.2 a group).
    name = unique("big")
    with worker_cpu_quota(mk, {w: "2" for w in mk.workers}):
        try:
            with contextlib.ExitStack() as stack:
                counts = {w: stack.enter_context(lws_events(mk, w, name)) for w in mk.workers}
                time.sleep(1)  # the watches are listing
                submit(lws_manifest(name, replicas=2, size=2, cpu=cpu))
                time.sleep(15)
                found = members(mk, name)
            report = [
                {
                    "workload": wl["metadata"]["name"],
                    "clusterName": cluster_name(wl),
                    "check": (check_state(wl).get("state"), check_state(wl).get("message")),
                    "conditions": [
                        (c["type"], c["status"], c.get("reason"), c.get("message"))
                        for c in (wl.get("status") or {}).get("conditions") or ()
                    ],
                }
                for wl in found
            ]
            print(f"\n[{shape}] remote LWS events {counts}; the manager's Workloads:")
            print(json.dumps(report, indent=1))
            assert len(found) == 2
            assert all(counts[w] == {"ADDED": 0, "DELETED": 0} for w in mk.workers), (
                f"the LWS was created or deleted on a worker: {counts}; Workloads: {report}"
            )
            assert all(check_state(wl).get("state") == api.CHECK_STATE_PENDING for wl in found), report
            assert not any(cluster_name(wl) for wl in found), report
            messages = [check_state(wl).get("message") or "" for wl in found]
            assert any(
                m.startswith("Not admitted by any worker cluster yet")
                and all(f'"{mk_cluster(w)}"' in m for w in mk.workers)
                for m in messages
            ), f"no Workload says that no worker admits it: {report}"
            if cpu == "600m":  # each group fits alone: the workers say the group does not fit as a whole
                assert any("The group of 2 workloads does not fit as a whole" in m for m in messages), report
        finally:
            delete_and_wait(mk, name)


def test_e_a_lost_worker_s_lws_moves_whole_to_the_other_worker(mk, submit):
    """Stops the chosen worker's kube-apiserver (SIGSTOP); runs last, because that worker's
    worker_agent loses its Lease meanwhile and exits (its supervisor restarts it after a back-off)."""
    name = unique("lost")
    submit(lws_manifest(name, replicas=2, size=2))
    lost = wait_until("two groups Ready on one worker", placed_on(mk, name, 2))
    wait_until(f"readyReplicas=2 on {lost}", remote_ready(mk, lost, name, 2))
    other = other_worker(mk, lost)
    watch = PlacementWatch(mk, [name])
    watch.start()
    pid = mk.apiserver_pid(lost)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(
            f"both groups Ready on {other}",
            lambda: moved_to(mk, name, other),
            timeout=120,
            interval=1,
        )
        moved_after = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        wait_until(f"readyReplicas=2 on {other}", remote_ready(mk, other, name, 2), timeout=60)
        wait_until(
            "the manager's LWS readyReplicas=2 naming the new worker", manager_shows(mk, name, other, 2)
        )
        time.sleep(5)  # the lost worker is back: the manager reconnects and sees its old copies
    finally:
        watch.stop()
    print(f"\nmoved from {lost} to {other} {moved_after:.0f}s after its kube-apiserver stopped")
    assert watch.splits == [], f"the members named two workers: {watch.splits}"
    assert watch.samples > 10
    assert placed_on(mk, name, 2)() == other
    # Once the lost worker is back, the group must not run there any more.
    wait_until(
        f"the LWS and its pods gone from {lost} after it came back",
        lambda: mk.lws(lost, name) is None and not pods_of(mk, lost, name),
        timeout=150,  # removed by the garbage collector, which runs every gcInterval (1m)
        interval=1,
    )
