"""Chaos: a steady run of Jobs and LeaderWorkerSets through the federation while its processes are
killed and paused, then what the API shows about it (docs/reliability.md, "Chaos").

On a fleet of its own in /dev/shm/kf-chaos-* (`localfleet up --agents --manager
--setup-multikueue`, two workers, workerLostTimeout 20s, as test_multikueue_lws_e2e's), it submits
CHAOS_WORKLOADS objects on the manager (every LWS_EVERY-th a LeaderWorkerSet of 2 groups of 2 pods,
the others batch/v1 Jobs that kwok completes) at a steady rate, and meanwhile:

  1. SIGKILLs worker1's kube-apiserver (its supervisor restarts it);
  2. SIGSTOPs worker2's kube-apiserver for workerLostTimeout + 10 s, then SIGCONT;
  3. SIGKILLs the manager (the supervisor restarts it; twice in the long form);
  4. starts a second manager replica and SIGKILLs the leader: the other takes the Lease;
  5. SIGKILLs worker1's worker_agent.

Informers on every cluster watch the Workloads, Jobs and LWS (the workers' copies by the
MultiKueue origin label) for the whole run. Afterwards it asserts:

- no Workload copy was admitted on two workers at once, except a copy left on a lost worker (paused,
  or its kube-apiserver killed: an outage past workerLostTimeout) after the manager moved its
  Workload, and such copies are gone soon after the worker is back;
- no LWS was split: its group Workloads on the manager never named two workers;
- no Job ran twice: a Job copy (or remote LWS) never existed on two workers at once outside the
  lost-worker episode; a copy uid appears at most once more than the Workload moved; no copy was
  created after the manager's Job completed (creationTimestamp > the Complete condition's time);
- nothing is lost: every Job Complete and its Workload Finished, every LWS readyReplicas 2 with its
  groups admitted on one worker;
- no orphan: once done, every copy on a worker belongs to a live manager Workload admitted on that
  worker (waiting up to the GC interval), and after deleting everything on the manager, nothing
  with the origin label is left on any worker.

`make test` runs the short form (24 objects, faults overlapping); `make chaos` the long one
(CHAOS_WORKLOADS=500, CHAOS_MODE=long: faults one after another, the manager restarted twice on its
own before the leader kill). CHAOS_REPORT=FILE writes the figures as JSON. On a failure,
CHAOS_DUMP=DIR keeps every object of the run and the fleet's logs, and CHAOS_HOLD=SECONDS keeps the
fleet up that long; CHAOS_RECOVERY sets how long everything may take to finish after the last fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import secrets
import signal
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet_kit import (
    CHECK,
    MANAGER,
    NAMESPACE,
    QUEUE,
    Fleet,
    assert_invariants,
    cluster_name,
    mk_cluster,
    own_fleet,
)
from test_multikueue_lws_e2e import WORKER_LOST_TIMEOUT, lws_manifest

import localfleet
from kube_runtime.client import AlreadyExists, KubeClient, KubeClientError, NotFound
from kube_runtime.informer import Informer
from kueue_domain import api
from kueue_domain import workload as wlutil

# The fleet's start is in the budget: about 1 min, 2 under load; the long form runs about 10 min.
pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(1800 if os.environ.get("CHAOS_MODE") == "long" else 480),
]

Obj = dict[str, Any]
LONG = os.environ.get("CHAOS_MODE") == "long"
WORKLOADS = int(os.environ.get("CHAOS_WORKLOADS", "500" if LONG else "24"))
RATE = float(os.environ.get("CHAOS_RATE", "2" if LONG else "0.3"))  # objects submitted per second
LWS_EVERY = int(os.environ.get("CHAOS_LWS_EVERY", "5" if LONG else "3"))
LWS_REPLICAS, LWS_SIZE = 2, 2
LOST_SECONDS = float(WORKER_LOST_TIMEOUT.removesuffix("s"))
GC_INTERVAL = 60.0  # localfleet's manager config: multiKueue.gcInterval 1m
AGENT_LEASE = "c1f6bfd2.kueue.x-k8s.io"
MANAGER_LEASE = "kueue-federation-manager"
LEASE_NAMESPACE = "kueue-system"
ORIGIN_SELECTOR = f"{api.LABEL_MULTIKUEUE_ORIGIN}=multikueue"
TAKEOVER_LIMIT = 15.0
# How long after the last fault and the last submission every Job may take to complete and every LWS
# to become ready.
RECOVERY = float(os.environ.get("CHAOS_RECOVERY", "240" if LONG else "150"))
COPY_KINDS = {"workload": api.WORKLOAD, "job": api.JOB, "lws": api.LEADER_WORKER_SET}


@pytest.fixture(scope="module")
def mk():
    """A fleet of its own, as test_multikueue_lws_e2e's (manager + 2 workers, MultiKueue set up,
    workerLostTimeout 20s), in /dev/shm/kf-chaos-*; always torn down at the end of the module."""
    args = ("--agents", "--manager", "--worker-lost-timeout", WORKER_LOST_TIMEOUT)
    with own_fleet("kf-chaos-", *args) as fleet:
        assert len(fleet.workers) == 2
        yield fleet


def job_manifest(name: str) -> Obj:
    """A 1-pod Job for the manager's queue; kwok completes its pod a few seconds after it binds."""
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
        "spec": {
            "suspend": True,
            "managedBy": api.MANAGED_BY_MULTIKUEUE,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def owner_of(wl: Obj) -> str:
    """The Job or LWS a manager Workload belongs to."""
    meta = wl["metadata"]
    owner = (meta.get("annotations") or {}).get(api.ANNOTATION_JOB_OWNER_NAME)
    return owner or next((o["name"] for o in meta.get("ownerReferences") or ()), "")


def condition_true(obj: Obj | None, ctype: str) -> Obj | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def live(obj: Obj) -> bool:
    return not obj["metadata"].get("deletionTimestamp")


def timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class FaultRecord:
    fault: str
    target: str
    at: float  # seconds after the first submission
    recovered_after: float | None = None  # seconds from the fault (from SIGCONT for a pause)
    detail: dict = field(default_factory=dict)


@dataclass
class Overlap:
    """One object seen on two workers at once (admitted, for a Workload copy)."""

    at: float
    kind: str
    name: str
    workers: list[str]
    on_lost_worker: bool
    lasted: float | None = None  # seconds until one worker was left


class Observer:
    """Informers on every cluster for the whole run; handlers record overlaps, splits, moves and
    the uids of the workers' Job and LWS copies."""

    def __init__(self, kubes: dict[str, KubeClient], workers: list[str], t0: float) -> None:
        self.kubes, self.workers, self.t0 = kubes, workers, t0
        self.informers: dict[tuple[str, str], Informer] = {}
        self.overlaps: list[Overlap] = []
        self._open_overlaps: dict[tuple[str, str], Overlap] = {}
        self.splits: list[tuple[float, str, list[str]]] = []
        self.moves: dict[str, list[tuple[str, str]]] = {}  # manager Workload -> (from, to)
        self.last_cluster: dict[str, str] = {}
        # manager Workload -> (at, clusterName, check state) at each change of either
        self.history: dict[str, list[tuple[float, str, str]]] = {}
        # manager Workload -> how many times it got a clusterName (the first placement included)
        self.placements: dict[str, int] = {}
        # (kind, name) -> uid -> (worker, creationTimestamp) of every Job/LWS copy seen on a worker
        self.copy_uids: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
        self.lost: dict[str, list[float | None]] = {}  # worker -> [paused at, stale copies gone at]
        self.events = 0

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def start(self) -> None:
        for kind in ("workload", "job", "lws"):
            self._add(MANAGER, kind, None, self._manager_changed)
            for worker in self.workers:
                self._add(worker, kind, ORIGIN_SELECTOR, self._copy_changed(worker, kind))

    def _add(self, cluster: str, kind: str, selector: str | None, handler) -> None:
        informer = Informer(
            self.kubes[cluster],
            COPY_KINDS[kind],
            namespace=NAMESPACE,
            label_selector=selector,
            inactivity_timeout=10,
            backoff_max=3,
            name=f"chaos-{cluster}-{kind}",
        )
        informer.add_handler(
            on_add=lambda obj: handler(obj), on_update=lambda _old, obj: handler(obj), on_delete=handler
        )
        self.informers[(cluster, kind)] = informer
        informer.start()

    async def wait_synced(self) -> None:
        async with asyncio.timeout(60):
            for informer in self.informers.values():
                await informer.wait_synced()

    async def stop(self) -> None:
        for informer in self.informers.values():
            await informer.stop()

    def store(self, cluster: str, kind: str) -> list[Obj]:
        return self.informers[(cluster, kind)].list()

    def get(self, cluster: str, kind: str, name: str) -> Obj | None:
        return self.informers[(cluster, kind)].get_object(name, NAMESPACE)

    def on_lost_worker(self, workers: list[str]) -> bool:
        """Whether one of `workers` is in its lost episode (paused, and its stale copies not yet gone)."""
        return any(w in self.lost and self.lost[w][1] is None for w in workers)

    def _copy_changed(self, worker: str, kind: str):
        def handler(obj: Obj) -> None:
            self.events += 1
            name = obj["metadata"]["name"]
            if kind != "workload" and live(obj):
                uids = self.copy_uids.setdefault((kind, name), {})
                uids.setdefault(
                    obj["metadata"]["uid"], (worker, obj["metadata"].get("creationTimestamp", ""))
                )
            holders = []
            for w in self.workers:
                copy = self.get(w, kind, name)
                if copy is None or not live(copy):
                    continue
                if kind == "workload" and not wlutil.is_admitted(copy):
                    continue  # upstream MultiKueue nominates copies on every worker; only one may admit
                holders.append(w)
            key = (kind, name)
            if len(holders) > 1 and key not in self._open_overlaps:
                overlap = Overlap(self.now(), kind, name, holders, self.on_lost_worker(holders))
                self._open_overlaps[key] = overlap
                self.overlaps.append(overlap)
            elif len(holders) <= 1 and key in self._open_overlaps:
                overlap = self._open_overlaps.pop(key)
                overlap.lasted = round(self.now() - overlap.at, 1)

        return handler

    def _manager_changed(self, obj: Obj) -> None:
        self.events += 1
        if obj.get("kind") != "Workload":
            return
        name, where = obj["metadata"]["name"], cluster_name(obj)
        check = next((c.get("state", "") for c in (obj.get("status") or {}).get("admissionChecks") or ()), "")
        history = self.history.setdefault(name, [])
        if not history or history[-1][1:] != (where, check):
            if where and (not history or not history[-1][1]):
                self.placements[name] = self.placements.get(name, 0) + 1
            history.append((self.now(), where, check))
        before = self.last_cluster.get(name, "")
        if where and before and where != before:
            self.moves.setdefault(name, []).append((before, where))
        if where:
            self.last_cluster[name] = where
        owner = owner_of(obj)
        clusters = {
            cluster_name(wl) for wl in self.store(MANAGER, "workload") if owner_of(wl) == owner and live(wl)
        } - {""}
        if len(clusters) > 1:
            self.splits.append((self.now(), owner, sorted(clusters)))


# -- processes ------------------------------------------------------------------------------------


def record_of(fleet: Fleet, cluster: str, component: str) -> dict:
    state = json.loads((fleet.run_dir / "state.json").read_text())
    for proc in state["processes"]:
        if proc["cluster"] == cluster and proc["component"] == component:
            return proc
    raise AssertionError(f"no {cluster}/{component} in {fleet.run_dir}/state.json")


def program_status(fleet: Fleet, cluster: str, component: str) -> dict:
    """What its supervisor writes: pid, restarts, state (docs/local-fleet.md, "Supervision")."""
    try:
        return json.loads(Path(record_of(fleet, cluster, component)["status"]).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def program_pid(fleet: Fleet, cluster: str, component: str) -> int | None:
    """The supervised program's current pid (None while in back-off)."""
    status = program_status(fleet, cluster, component)
    return status.get("pid") if status.get("state") == "running" else None


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def start_standby_manager(fleet: Fleet) -> str:
    """A second `python -m manager` with the first one's command and config, on new ports, under
    the supervisor and recorded in state.json (so `down` stops it). Returns its component name."""
    state = localfleet.State.load(fleet.run_dir)
    first = record_of(fleet, MANAGER, "manager")
    health = f"127.0.0.1:{localfleet.free_port()}"
    cmd = [
        a for a in first["cmd"] if not a.startswith(("--metrics-bind-address", "--health-probe-bind-address"))
    ]
    cmd += [
        f"--metrics-bind-address=127.0.0.1:{localfleet.free_port()}",
        f"--health-probe-bind-address={health}",
    ]
    state.start(MANAGER, "manager-standby", cmd, env=localfleet.project_env())
    return health


def shorten_manager_lease(fleet: Fleet) -> None:
    """Leader election of every manager replica started from now on (the restarted one and the
    standby): a Lease of 8 s instead of upstream's 15 s. A standby takes over only after it has seen
    the Lease unrenewed for a whole leaseDuration, polling every retryPeriod, so with 15 s a
    takeover takes 13-20 s after the leader dies (measured 16.4 s); with 8 s it fits in 15 s."""
    flag = next(a for a in record_of(fleet, MANAGER, "manager")["cmd"] if a.startswith("--config="))
    path = Path(flag.removeprefix("--config="))
    config = yaml.safe_load(path.read_text())
    config["leaderElection"] |= {"leaseDuration": "8s", "renewDeadline": "6s", "retryPeriod": "2s"}
    path.write_text(yaml.safe_dump(config))


async def until(what: str, check, within: float, interval: float = 0.5):
    deadline = time.monotonic() + within
    while True:
        try:
            found = await check()
        except (KubeClientError, TimeoutError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def lease_holder(kube: KubeClient, name: str) -> str:
    lease = await kube.get(api.LEASE, name, LEASE_NAMESPACE)
    return (lease.get("spec") or {}).get("holderIdentity") or ""


async def cluster_active(manager: KubeClient, worker: str) -> bool:
    mkc = await manager.get(api.MULTIKUEUE_CLUSTER, mk_cluster(worker))
    return condition_true(mkc, "Active") is not None


class Chaos:
    """Injects the faults and measures each recovery from the API."""

    def __init__(self, fleet: Fleet, kubes: dict[str, KubeClient], observer: Observer) -> None:
        self.fleet, self.kubes, self.observer = fleet, kubes, observer
        self.faults: list[FaultRecord] = []
        self.takeover: float | None = None

    def _kill(self, cluster: str, component: str, sig: signal.Signals) -> tuple[int, FaultRecord]:
        pid = program_pid(self.fleet, cluster, component)
        assert pid, f"{cluster}/{component} is not running"
        os.kill(pid, sig)
        restarts = program_status(self.fleet, cluster, component).get("restarts", 0)
        detail = {"pid": pid, "restarts_before": restarts}
        fault = FaultRecord(f"{sig.name} {component}", cluster, self.observer.now(), detail=detail)
        self.faults.append(fault)
        return pid, fault

    async def _restarted(self, cluster: str, component: str, old_pid: int, within: float) -> int:
        async def check():
            pid = program_pid(self.fleet, cluster, component)
            return pid if pid and pid != old_pid else None

        return await until(f"{cluster}/{component} restarted", check, within)

    async def kill_apiserver(self, worker: str) -> None:
        """SIGKILL; back when it answers and its MultiKueueCluster is Active. An outage longer than
        workerLostTimeout is a lost worker to the manager (it cannot tell a dead control plane from a
        dead cluster): it moves the worker's Workloads away, so, as for a pause, the episode ends
        when no copy left there from before is admitted for a Workload placed elsewhere."""
        pid, fault = self._kill(worker, "kube-apiserver", signal.SIGKILL)
        self.observer.lost[worker] = [fault.at, None]
        t = time.monotonic()
        await self._restarted(worker, "kube-apiserver", pid, 120)
        await until(f"{worker} answers", lambda: self.kubes[worker].list(api.WORKLOAD, NAMESPACE), 120)
        back = dt.datetime.now(dt.UTC).replace(microsecond=0)
        fault.detail["apiserver_back_after"] = round(time.monotonic() - t, 1)
        await until(f"{worker} Active", lambda: cluster_active(self.kubes[MANAGER], worker), 120)
        fault.recovered_after = round(time.monotonic() - t, 1)
        await self._stale_copies_gone(worker, back, fault)

    async def pause_apiserver(self, worker: str, seconds: float, until_moved: float = 0) -> None:
        """SIGSTOP for `seconds`; with `until_moved`, longer: until the manager has moved a Workload
        off the worker (at most that many seconds), which takes its watch inactivity timeout (60 s)
        plus workerLostTimeout."""
        pid, fault = self._kill(worker, "kube-apiserver", signal.SIGSTOP)
        self.observer.lost[worker] = [fault.at, None]
        t = time.monotonic()
        try:
            await asyncio.sleep(seconds)
            if until_moved:

                async def moved():
                    return self.moved_from(worker)

                with contextlib.suppress(AssertionError):  # not moved: SIGCONT anyway, and report it
                    await until(f"a Workload moved off {worker}", moved, until_moved - seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = dt.datetime.now(dt.UTC).replace(microsecond=0)
        fault.detail["paused_seconds"] = round(time.monotonic() - t, 1)
        fault.detail["moved_during_pause"] = self.moved_from(worker)
        t = time.monotonic()
        await until(f"{worker} Active again", lambda: cluster_active(self.kubes[MANAGER], worker), 180)
        fault.detail["active_after_sigcont"] = round(time.monotonic() - t, 1)
        await self._stale_copies_gone(worker, resumed, fault)
        fault.recovered_after = round(time.monotonic() - t, 1)

    async def _stale_copies_gone(self, worker: str, back: dt.datetime, fault: FaultRecord) -> None:
        """Ends `worker`'s lost episode once no Workload copy there that was created before it came
        `back` is admitted for a manager Workload placed elsewhere (or not placed). Copies created
        since are the steady submission's: the manager's choice among them (the MultiKueue race) is
        checked by the overlap records, not here."""
        t = time.monotonic()

        async def no_stale_copy():
            copies = await self.kubes[worker].list(api.WORKLOAD, NAMESPACE, label_selector=ORIGIN_SELECTOR)
            stale = [
                c["metadata"]["name"]
                for c in copies[0]
                if live(c)
                and wlutil.is_admitted(c)
                and timestamp(c["metadata"]["creationTimestamp"]) < back
                and cluster_name(self.observer.get(MANAGER, "workload", c["metadata"]["name"]) or {})
                != worker
            ]
            fault.detail["stale_copies"] = stale[:10]
            return not stale

        await until(f"no stale admitted copy on {worker}", no_stale_copy, GC_INTERVAL + 60, interval=1)
        self.observer.lost[worker][1] = self.observer.now()
        fault.detail["stale_copies_gone_after"] = round(time.monotonic() - t, 1)
        fault.detail["moved_workloads"] = self.moved_from(worker)

    def moved_from(self, worker: str) -> int:
        """Manager Workloads whose clusterName changed from `worker` to another."""
        return sum(1 for moves in self.observer.moves.values() if any(src == worker for src, _ in moves))

    async def kill_manager(self, component: str = "manager") -> None:
        """SIGKILL a manager replica; recovered when a running replica holds the Lease."""
        pid, fault = self._kill(MANAGER, component, signal.SIGKILL)
        t = time.monotonic()

        async def new_leader():
            holder = await lease_holder(self.kubes[MANAGER], MANAGER_LEASE)
            if holder.endswith(f"_{pid}"):
                return None
            for name in ("manager", "manager-standby"):
                with_pid = program_pid(self.fleet, MANAGER, name) if self._has(name) else None
                if with_pid and holder.endswith(f"_{with_pid}"):
                    return name
            return None

        fault.detail["new_leader"] = await until("a new manager leader", new_leader, 120, interval=0.25)
        fault.recovered_after = round(time.monotonic() - t, 1)

    def _has(self, component: str) -> bool:
        try:
            record_of(self.fleet, MANAGER, component)
        except AssertionError:
            return False
        return True

    async def leader_takeover(self) -> None:
        """Start a second manager replica, then SIGKILL whichever holds the Lease."""
        health = start_standby_manager(self.fleet)
        await until(
            "the standby manager ready", lambda: asyncio.to_thread(http_ok, f"http://{health}/readyz"), 90
        )

        async def leader_component():
            holder = await lease_holder(self.kubes[MANAGER], MANAGER_LEASE)
            for component in ("manager", "manager-standby"):
                if holder.endswith(f"_{program_pid(self.fleet, MANAGER, component)}"):
                    return component
            return None

        leader = await until("a manager replica holding the Lease", leader_component, 60)
        await self.kill_manager(leader)
        fault = self.faults[-1]
        fault.fault = "SIGKILL leader manager (standby running)"
        assert fault.detail["new_leader"] != leader
        self.takeover = fault.recovered_after

    async def kill_agent(self, worker: str) -> None:
        pid, fault = self._kill(worker, "worker-agent", signal.SIGKILL)
        t = time.monotonic()
        new_pid = await self._restarted(worker, "worker-agent", pid, 120)
        fault.detail["restarted_after"] = round(time.monotonic() - t, 1)

        async def leading():
            return (await lease_holder(self.kubes[worker], AGENT_LEASE)).endswith(f"_{new_pid}")

        await until(f"the restarted {worker} agent leading", leading, 120)
        fault.recovered_after = round(time.monotonic() - t, 1)

    def busiest_worker(self) -> str:
        """The worker running the most LWS copies now: pausing it makes the manager move them."""
        counts = {w: len(self.observer.store(w, "lws")) for w in self.fleet.workers}
        return max(self.fleet.workers[::-1], key=lambda w: counts[w])

    async def run(self, workers: list[str]) -> None:
        shorten_manager_lease(self.fleet)
        first = workers[0]
        if LONG:
            # One after another, each recovered before the next, so each figure is its own.
            await self.kill_apiserver(first)
            await self.kill_manager()
            lost = self.busiest_worker()
            await self.pause_apiserver(lost, LOST_SECONDS + 10, until_moved=180)
            await self.kill_manager()
            await self.kill_agent(next(w for w in workers if w != lost))
            await self.leader_takeover()
        else:
            # Overlapping, to fit in `make test`: faults on different clusters at the same time.
            # The pause (30 s) is shorter than the manager takes to call a worker lost, so nothing moves.
            await asyncio.gather(self.kill_apiserver(first), self.kill_manager())
            lost = self.busiest_worker()
            await asyncio.gather(
                self.pause_apiserver(lost, LOST_SECONDS + 10),
                self.leader_takeover(),
                self.kill_agent(next(w for w in workers if w != lost)),
            )


async def submit_all(manager: KubeClient, names: list[str], observer: Observer, submitted: dict) -> None:
    """Create every object at RATE per second; a failed create is retried (AlreadyExists is done)."""
    t0 = time.monotonic()
    for index, name in enumerate(names):
        delay = t0 + index / RATE - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        is_lws = name.startswith("chaos-l")
        body = lws_manifest(name, LWS_REPLICAS, LWS_SIZE) if is_lws else job_manifest(name)
        resource = api.LEADER_WORKER_SET if is_lws else api.JOB
        for attempt in range(30):
            try:
                await manager.create(resource, body, NAMESPACE)
                break
            except AlreadyExists:
                break
            except KubeClientError:
                await asyncio.sleep(min(5, 0.5 * 2**attempt))
        submitted[name] = observer.now()


def object_names(run_id: str) -> list[str]:
    return [
        f"chaos-l{run_id}-{i:04d}" if i % LWS_EVERY == LWS_EVERY - 1 else f"chaos-j{run_id}-{i:04d}"
        for i in range(WORKLOADS)
    ]


def describe(observer: Observer, names: list[str]) -> dict[str, Any]:
    """What the manager shows of each object: its Workloads' clusterName, check state and message,
    and the LWS readyReplicas or Job conditions."""
    found: dict[str, Any] = {}
    for name in names:
        kind = "lws" if name.startswith("chaos-l") else "job"
        obj = observer.get(MANAGER, kind, name) or {}
        status = obj.get("status") or {}
        workloads = [
            (
                wl["metadata"]["name"],
                cluster_name(wl),
                [
                    (s.get("state"), s.get("message"))
                    for s in (wl.get("status") or {}).get("admissionChecks") or ()
                ],
            )
            for wl in observer.store(MANAGER, "workload")
            if owner_of(wl) == name
        ]
        shown = (
            status.get("readyReplicas")
            if kind == "lws"
            else [c["type"] for c in status.get("conditions") or ()]
        )
        found[name] = {"status": shown, "workloads": workloads}
    return found


def write_dump(fleet: Fleet, target: Path, found: dict[str, Any]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / "objects.json").write_text(json.dumps(found, indent=1, default=str))
    for log in fleet.run_dir.glob("*/*.log"):
        (target / f"{log.parent.name}-{log.name}").write_bytes(log.read_bytes())


async def keep_for_inspection(fleet: Fleet, kubes: dict[str, KubeClient], observer: Observer) -> None:
    """On a failure: with CHAOS_DUMP=DIR, every Workload, Job and LWS of the run on every cluster
    (read from the clusters), the moves and overlaps seen, and the fleet's logs go to DIR; with
    CHAOS_HOLD=SECONDS, the fleet stays up that long for a look."""
    dump = os.environ.get("CHAOS_DUMP")
    if dump:
        found: dict[str, Any] = {"run_dir": str(fleet.run_dir)}
        for cluster in [MANAGER, *fleet.workers]:
            selector = None if cluster == MANAGER else ORIGIN_SELECTOR
            for kind, resource in COPY_KINDS.items():
                try:
                    items, _ = await kubes[cluster].list(resource, NAMESPACE, label_selector=selector)
                except (KubeClientError, TimeoutError) as exc:
                    items = [str(exc)]
                found[f"{cluster}/{kind}"] = items
        found["moves"] = observer.moves
        found["overlaps"] = [asdict(o) for o in observer.overlaps]
        await asyncio.to_thread(write_dump, fleet, Path(dump), found)
        print(f"\nchaos: the run's objects and the fleet's logs are in {dump}")
    hold = float(os.environ.get("CHAOS_HOLD", "0"))
    if hold > 0:
        print(f"\nchaos: holding the fleet {fleet.run_dir} up for {hold:.0f}s", flush=True)
        await asyncio.sleep(hold)


def not_done(observer: Observer, names: list[str]) -> list[str]:
    """Objects not yet finished (Job Complete, its Workload Finished) or ready (LWS all groups ready,
    every group Workload admitted, check Ready, one worker)."""
    by_owner: dict[str, list[Obj]] = {}
    for wl in observer.store(MANAGER, "workload"):
        by_owner.setdefault(owner_of(wl), []).append(wl)
    missing = []
    for name in names:
        workloads = by_owner.get(name, [])
        if name.startswith("chaos-j"):
            job = observer.get(MANAGER, "job", name)
            ok = condition_true(job, api.JOB_CONDITION_COMPLETE) and any(
                wlutil.is_finished(w) for w in workloads
            )
        else:
            lws = observer.get(MANAGER, "lws", name) or {}
            checks = [
                next(
                    (s for s in (w.get("status") or {}).get("admissionChecks") or () if s["name"] == CHECK),
                    {},
                )
                for w in workloads
            ]
            ok = (
                (lws.get("status") or {}).get("readyReplicas") == LWS_REPLICAS
                and len(workloads) == LWS_REPLICAS
                and all(wlutil.is_admitted(w) for w in workloads)
                and all(c.get("state") == api.CHECK_STATE_READY for c in checks)
                and len({cluster_name(w) for w in workloads}) == 1
            )
        if not ok:
            missing.append(name)
    return missing


async def orphans(kubes: dict[str, KubeClient], workers: list[str], observer: Observer) -> list[str]:
    """Copies on a worker (origin label) without a live, unfinished manager Workload admitted on that
    worker: read from each worker directly, not from the informers."""
    by_owner: dict[str, list[Obj]] = {}
    for wl in observer.store(MANAGER, "workload"):
        by_owner.setdefault(owner_of(wl), []).append(wl)
    found = []
    for worker in workers:
        for kind, resource in COPY_KINDS.items():
            items, _ = await kubes[worker].list(resource, NAMESPACE, label_selector=ORIGIN_SELECTOR)
            for copy in items:
                name = copy["metadata"]["name"]
                if kind == "workload":
                    owners = [observer.get(MANAGER, "workload", name)]
                else:
                    owners = by_owner.get(name, [])
                if not owners or not all(
                    w is not None and live(w) and not wlutil.is_finished(w) and cluster_name(w) == worker
                    for w in owners
                ):
                    found.append(f"{worker}/{kind}/{name}")
    return found


def copy_checks(observer: Observer, names: list[str]) -> dict[str, list]:
    """Per Job/LWS: copies (uids) beyond one per placement (each time its Workload got a
    clusterName: a Workload evicted and placed again, on the same worker or another, gets a new
    copy), and Job copies created after the manager's Job completed. Workloads placed more than once
    are listed with their history."""
    workload_of: dict[str, list[str]] = {}
    for wl in observer.store(MANAGER, "workload"):
        workload_of.setdefault(owner_of(wl), []).append(wl["metadata"]["name"])
    extra, late, replaced = [], [], []
    for name in names:
        kind = "lws" if name.startswith("chaos-l") else "job"
        uids = observer.copy_uids.get((kind, name), {})
        workloads = workload_of.get(name, [])
        placements = max((observer.placements.get(w, 0) for w in workloads), default=0)
        histories = {w: observer.history.get(w, []) for w in workloads}
        if placements > 1:
            replaced.append((name, placements, histories))
        if len(uids) > max(1, placements):
            extra.append((name, placements, sorted(uids.values()), histories))
        complete = condition_true(observer.get(MANAGER, "job", name), api.JOB_CONDITION_COMPLETE)
        if kind == "job" and complete:
            done_at = timestamp(complete["lastTransitionTime"])
            late += [(name, w, c) for w, c in uids.values() if c and timestamp(c) > done_at]
    return {"extra_copies": extra, "created_after_complete": late, "placed_again": replaced}


async def test_chaos(mk: Fleet):
    workers = mk.workers
    kubes = {
        cluster: await KubeClient.from_kubeconfig_file(
            mk.state["clusters"][cluster]["kubeconfig"], request_timeout=10, get_attempts=1
        )
        for cluster in [MANAGER, *workers]
    }
    run_id = secrets.token_hex(2)
    names = object_names(run_id)
    t0 = time.monotonic()
    observer = Observer(kubes, workers, t0)
    chaos = Chaos(mk, kubes, observer)
    submitted: dict[str, float] = {}
    report: dict[str, Any] = {"mode": "long" if LONG else "short", "objects": WORKLOADS, "rate": RATE}
    observer.start()
    try:
        await observer.wait_synced()
        observer.t0 = t0 = time.monotonic()
        submission = asyncio.create_task(submit_all(kubes[MANAGER], names, observer, submitted))
        await asyncio.sleep(2)
        await chaos.run(workers)
        report["faults_done_at"] = observer.now()
        await submission
        report["submitted_by"] = observer.now()

        async def all_done():
            return not not_done(observer, names)

        try:
            await until("every Job Complete and every LWS ready", all_done, RECOVERY, interval=1)
        except AssertionError:
            pytest.fail(f"not finished/ready: {describe(observer, not_done(observer, names)[:10])}")
        report["all_done_at"] = observer.now()
        done_at = time.monotonic()
        try:
            await until(
                "no orphan on any worker",
                lambda: orphans_gone(kubes, workers, observer),
                GC_INTERVAL + 30,
                interval=2,
            )
        except AssertionError:
            pytest.fail(
                f"orphans left {GC_INTERVAL + 30:.0f}s after done: {await orphans(kubes, workers, observer)}"
            )
        report["orphans_gone_after_done"] = round(time.monotonic() - done_at, 1)
        await asyncio.to_thread(assert_invariants, mk)
        checks = copy_checks(observer, names)

        workloads = [wl for wl in observer.store(MANAGER, "workload") if owner_of(wl) in set(names)]
        report |= {
            "workloads_checked": len(workloads),
            "jobs": sum(1 for n in names if n.startswith("chaos-j")),
            "lws": sum(1 for n in names if n.startswith("chaos-l")),
            "observed_events": observer.events,
            "faults": [asdict(f) for f in chaos.faults],
            "leader_takeover_seconds": chaos.takeover,
            "moved_workloads": sorted(observer.moves),
            "overlaps": [asdict(o) for o in observer.overlaps],
            "splits": observer.splits,
            **checks,
        }

        assert len(submitted) == WORKLOADS
        assert report["workloads_checked"] == report["jobs"] + report["lws"] * LWS_REPLICAS
        assert observer.splits == [], f"an LWS's group Workloads named two workers: {observer.splits}"
        # A Workload copy admitted by two workers at once, outside a lost-worker episode, is MultiKueue's
        # race by design (every worker gets a copy, the first admitted wins, the others are deleted): it
        # must end, and no Job or LWS may ever exist on two workers outside a lost-worker episode.
        runs_twice = [o for o in observer.overlaps if not o.on_lost_worker and o.kind != "workload"]
        assert runs_twice == [], f"a Job or LWS on two workers at once (no worker lost): {runs_twice}"
        unended = [o for o in observer.overlaps if o.lasted is None]
        assert unended == [], f"still on two workers at the end: {unended}"
        assert checks["extra_copies"] == [], f"more copies than placements: {checks['extra_copies']}"
        assert checks["created_after_complete"] == [], (
            f"re-created after completing: {checks['created_after_complete']}"
        )
        assert chaos.takeover is not None and chaos.takeover <= TAKEOVER_LIMIT, (
            f"takeover took {chaos.takeover}s"
        )
        assert len(chaos.faults) == (6 if LONG else 5)
        assert all(f.recovered_after is not None for f in chaos.faults), chaos.faults

        # Deleting everything on the manager leaves nothing on the workers.
        delete_started = time.monotonic()
        for name in names:
            resource = api.LEADER_WORKER_SET if name.startswith("chaos-l") else api.JOB
            try:
                await kubes[MANAGER].delete(resource, name, NAMESPACE, propagation_policy="Background")
            except NotFound:
                pass

        async def workers_empty():
            for worker in workers:
                for resource in COPY_KINDS.values():
                    items, _ = await kubes[worker].list(resource, NAMESPACE, label_selector=ORIGIN_SELECTOR)
                    if items:
                        return False
            return True

        await until("no copy left on any worker after deleting", workers_empty, GC_INTERVAL + 60, interval=2)
        report["workers_empty_after_delete"] = round(time.monotonic() - delete_started, 1)
    except (Exception, pytest.fail.Exception):
        await keep_for_inspection(mk, kubes, observer)
        raise
    finally:
        report.setdefault("faults", [asdict(f) for f in chaos.faults])
        report.setdefault("leader_takeover_seconds", chaos.takeover)
        await observer.stop()
        for kube in kubes.values():
            await kube.close()
        print("\nchaos report:", json.dumps(report, indent=1, default=str))
        if os.environ.get("CHAOS_REPORT"):
            text = json.dumps(report, indent=1, default=str)
            await asyncio.to_thread(Path(os.environ["CHAOS_REPORT"]).write_text, text)


async def orphans_gone(kubes: dict[str, KubeClient], workers: list[str], observer: Observer) -> bool:
    return not await orphans(kubes, workers, observer)
