#!/usr/bin/env python3
"""End-to-end admission benchmark (issue 3): Kueue's scheduler "baseline" through a real kube-apiserver.

It reproduces Kueue's performance harness (test/performance/scheduler) against a fresh local
cluster started with hack/localfleet.py (a manager cluster only: etcd, kube-apiserver,
kube-controller-manager, our CRDs):

  generator  one ResourceFlavor `rf`, 5 cohorts x 6 ClusterQueues (cpu nominal 20, borrowingLimit
             100, reclaimWithinCohort Any, withinClusterQueue LowerPriority), a Namespace and a
             LocalQueue per ClusterQueue, and per ClusterQueue 350 small / 100 medium / 50 large bare
             Workloads, each class created one every 100 / 500 / 1200 ms, concurrently.
  runner     watches Workloads: an Admitted one gets Finished=True (reason ByTest) after its runtime;
             an Evicted one that still has status.admission gets its reservation cleared, as a job
             integration would. Client QPS 1000, burst 2000, like upstream's in-cluster runner.
  engine     our worker_agent (`python -m worker_agent`), or with --compare-upstream / --engine
             upstream Kueue v0.19.2's own `minimalkueue`, built from the Go module, on a second
             fresh cluster with upstream's CRDs.

The run ends when generation is done, every ClusterQueue reports no pending and no reserving
workloads and every generated workload was seen Finished, or at --timeout. It prints the wall time
(engine process start to done, like upstream's cmd.wallMs), admissions per second, time to admission
per class, ClusterQueue usage, the engine's peak RSS and CPU, and upstream's rangespec thresholds.

  .venv/bin/python hack/bench_engine.py [--scale 0.1] [--compare-upstream | --engine upstream]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _bootstrap() -> None:
    """Re-exec with the project's .venv when the project's modules are not importable."""
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("kube_runtime", "yaml", "aiohttp")):
        venv_python = REPO / ".venv" / "bin" / "python"
        if Path(sys.executable).resolve() == venv_python.resolve() or not venv_python.exists():
            sys.exit("bench-engine: run `make venv` first (the project's .venv is missing or incomplete)")
        os.execv(str(venv_python), [str(venv_python), *sys.argv])


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    _bootstrap()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import csv  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

LOCALFLEET_PATH = REPO / "hack" / "localfleet.py"
Obj = dict[str, Any]

# Upstream harness strings (test/performance/scheduler/runner): labels, the runner's condition texts.
LABEL_CLASS = "kueue.x-k8s.io/performance-scheduler-class"
LABEL_RUNNING_MS = "kueue.x-k8s.io/performance-scheduler-running-ms"
LABEL_CLEANUP = "kueue.x-k8s.io/performance-scheduler-cleanup"
RUNNER_FIELD_MANAGER = "kueue-perf-runner"
FINISHED_REASON = "ByTest"
FINISHED_MESSAGE = "By test runner"
EVICTION_CLEARED_REASON = "Pending"
EVICTION_CLEARED_MESSAGE = "Evicted by the test runner"
NO_RESERVATION_REASON = "NoReservation"
NO_RESERVATION_MESSAGE = "The workload has no reservation"
GROUP = "kueue.x-k8s.io"

# Upstream's configs/baseline/rangespec.yaml (v0.19.2).
RANGESPEC = {
    "max_wall_ms": 425_000,
    "min_cq_usage_pct": {"cq": 50.0},
    "max_avg_time_to_admission_ms": {"large": 23_000, "medium": 90_000, "small": 260_000},
}

# Our agent's Prometheus counters for engine CPU per scheduling decision (read at the end, if present).
METRIC_DECISIONS = "kueue_worker_agent_scheduling_decisions_total"
METRIC_ENGINE_CPU = "kueue_worker_agent_engine_cpu_seconds_total"


def say(msg: str) -> None:
    print(f"bench-engine: {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A failure with a message that says what went wrong and where to look."""


# ==============================================================================================
# The generator's configuration (upstream's generator.yaml, baseline) and the objects it creates
# ==============================================================================================


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    count: int  # per ClusterQueue
    interval_ms: int
    cpu: int
    runtime_ms: int
    priority: int


@dataclass(frozen=True)
class BenchConfig:
    cohorts: int = 5
    queues_per_cohort: int = 6
    queue_class: str = "cq"
    cohort_class: str = "cohort"
    nominal_cpu: int = 20
    borrowing_limit_cpu: int = 100
    reclaim_within_cohort: str = "Any"
    within_cluster_queue: str = "LowerPriority"
    flavor: str = "rf"
    classes: tuple[WorkloadClass, ...] = (
        WorkloadClass("small", 350, 100, 1, 200, 50),
        WorkloadClass("medium", 100, 500, 5, 500, 100),
        WorkloadClass("large", 50, 1200, 20, 1000, 200),
    )

    @property
    def cluster_queue_count(self) -> int:
        return self.cohorts * self.queues_per_cohort

    @property
    def workloads_per_queue(self) -> int:
        return sum(c.count for c in self.classes)

    @property
    def total_workloads(self) -> int:
        return self.cluster_queue_count * self.workloads_per_queue

    @property
    def is_full_baseline(self) -> bool:
        return self == BenchConfig()


def scaled_count(count: int, scale: float) -> int:
    """At least one workload per set, so every class is measured at any scale."""
    return max(1, round(count * scale))


def baseline_config(scale: float = 1.0, cohorts: int = 5, queues_per_cohort: int = 6) -> BenchConfig:
    if scale <= 0:
        raise ValueError("--scale must be greater than 0")
    if cohorts < 1 or queues_per_cohort < 1:
        raise ValueError("--cohorts and --queues-per-cohort must be at least 1")
    base = BenchConfig()
    classes = tuple(
        WorkloadClass(c.name, scaled_count(c.count, scale), c.interval_ms, c.cpu, c.runtime_ms, c.priority)
        for c in base.classes
    )
    return BenchConfig(cohorts=cohorts, queues_per_cohort=queues_per_cohort, classes=classes)


@dataclass(frozen=True)
class ApiShape:
    """Our CRDs serve v1beta1; upstream's CRDs store v1beta2 and convert nothing without the webhook."""

    version: str

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    @property
    def cohort_field(self) -> str:
        return "cohort" if self.version == "v1beta1" else "cohortName"

    def resource(self, plural: str, kind: str, namespaced: bool) -> Any:
        from kube_runtime.api import Resource

        return Resource(GROUP, self.version, plural, kind, namespaced)

    @property
    def workloads(self) -> Any:
        return self.resource("workloads", "Workload", True)

    @property
    def cluster_queues(self) -> Any:
        return self.resource("clusterqueues", "ClusterQueue", False)

    @property
    def local_queues(self) -> Any:
        return self.resource("localqueues", "LocalQueue", True)

    @property
    def resource_flavors(self) -> Any:
        return self.resource("resourceflavors", "ResourceFlavor", False)


OURS = ApiShape("v1beta1")
UPSTREAM = ApiShape("v1beta2")


@dataclass(frozen=True)
class QueuePlan:
    name: str  # ClusterQueue, its Namespace and its LocalQueue share it
    cohort: str


def plan_queues(config: BenchConfig) -> list[QueuePlan]:
    """Upstream's names: `<queue class>-<queue set index>-<index>-<cohort>`, cohort `<class>-<index>`."""
    plans = []
    for k in range(config.cohorts):
        cohort = f"{config.cohort_class}-{k}"
        for i in range(config.queues_per_cohort):
            plans.append(QueuePlan(f"{config.queue_class}-0-{i}-{cohort}", cohort))
    return plans


def workload_name(cls: WorkloadClass, set_index: int, serial: int) -> str:
    """Upstream's `<class>-<workload set index>-<serial>-<template index>` (one template per set here)."""
    return f"{cls.name}-{set_index}-{serial}-0"


def resource_flavor_object(shape: ApiShape, config: BenchConfig) -> Obj:
    return {
        "apiVersion": shape.api_version,
        "kind": "ResourceFlavor",
        "metadata": {"name": config.flavor, "labels": {LABEL_CLEANUP: "true"}},
        "spec": {},
    }


def cluster_queue_object(shape: ApiShape, config: BenchConfig, queue: QueuePlan) -> Obj:
    return {
        "apiVersion": shape.api_version,
        "kind": "ClusterQueue",
        "metadata": {
            "name": queue.name,
            "labels": {LABEL_CLASS: config.queue_class, LABEL_CLEANUP: "true"},
        },
        "spec": {
            shape.cohort_field: queue.cohort,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": config.flavor,
                            "resources": [
                                {
                                    "name": "cpu",
                                    "nominalQuota": str(config.nominal_cpu),
                                    "borrowingLimit": str(config.borrowing_limit_cpu),
                                }
                            ],
                        }
                    ],
                }
            ],
            "preemption": {
                "reclaimWithinCohort": config.reclaim_within_cohort,
                "withinClusterQueue": config.within_cluster_queue,
            },
        },
    }


def namespace_object(queue: QueuePlan) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": queue.name, "labels": {LABEL_CLEANUP: "true"}},
    }


def local_queue_object(shape: ApiShape, queue: QueuePlan) -> Obj:
    return {
        "apiVersion": shape.api_version,
        "kind": "LocalQueue",
        "metadata": {"name": queue.name, "namespace": queue.name},
        "spec": {"clusterQueue": queue.name},
    }


def workload_object(
    shape: ApiShape, queue: QueuePlan, cls: WorkloadClass, set_index: int, serial: int
) -> Obj:
    """A bare Workload like upstream's MakeWorkload(...).Queue().Label().Priority().Request(cpu)."""
    return {
        "apiVersion": shape.api_version,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(cls, set_index, serial),
            "namespace": queue.name,
            "labels": {LABEL_RUNNING_MS: str(cls.runtime_ms), LABEL_CLASS: cls.name},
        },
        "spec": {
            "queueName": queue.name,
            "priority": cls.priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cls.cpu)}}}],
                        }
                    },
                }
            ],
        },
    }


def plan_objects(shape: ApiShape, config: BenchConfig) -> dict[str, list[Obj]]:
    """Every object one run creates, by kind (the generator creates them lazily, in this shape)."""
    queues = plan_queues(config)
    return {
        "ResourceFlavor": [resource_flavor_object(shape, config)],
        "ClusterQueue": [cluster_queue_object(shape, config, q) for q in queues],
        "Namespace": [namespace_object(q) for q in queues],
        "LocalQueue": [local_queue_object(shape, q) for q in queues],
        "Workload": [
            workload_object(shape, q, cls, set_index, serial)
            for q in queues
            for set_index, cls in enumerate(config.classes)
            for serial in range(cls.count)
        ],
    }


def demand_cpu_seconds(config: BenchConfig) -> float:
    """cpu x runtime of one ClusterQueue's workloads (baseline: 70 + 250 + 1,000 = 1,320 cpu*s)."""
    return sum(c.count * c.cpu * c.runtime_ms / 1000 for c in config.classes)


# ==============================================================================================
# Recording: what the runner observes, with its own clock and with the API's timestamps
# ==============================================================================================

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {
    None: 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def quantity_milli(value: Any) -> int:
    """A Kubernetes quantity in thousandths (`20` -> 20000, `1500m` -> 1500), rounded up like MilliValue."""
    if value is None or value == "":
        return 0
    if isinstance(value, int | float):
        return math.ceil(value * 1000)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    return math.ceil(float(match.group(1)) * _SUFFIX[match.group(2)] * 1000 - 1e-9)


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (`2026-11-23T09:10:00Z`) to epoch seconds; None if absent."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def find_condition(obj: Obj, ctype: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def condition_true(obj: Obj, ctype: str) -> bool:
    cond = find_condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


@dataclass
class WorkloadRecord:
    key: str
    cls: str
    first_seen: float
    created_obs: float | None = None  # the generator's create call returned
    created_api: float | None = None  # metadata.creationTimestamp (1 s resolution)
    admitted_obs: float | None = None  # the runner saw Admitted=True (the last admission)
    admitted_api: float | None = None  # Admitted lastTransitionTime (1 s resolution)
    finished_obs: float | None = None
    evictions: int = 0
    admissions: int = 0
    admitted: bool = False
    evicted: bool = False
    finished: bool = False
    cpu_milli: int = 0  # what the workload asks for (all pods)
    updates: int = 0  # watch events seen for it (every write anyone made to it)
    held_s: float = 0.0  # time seen admitted and not finished, summed over admissions
    holding_since: float | None = None

    def held_until(self, end: float) -> float:
        return self.held_s + (max(0.0, end - self.holding_since) if self.holding_since is not None else 0.0)

    @property
    def start_obs(self) -> float:
        """The earliest sign of the object: the create call returning, or the first watch event."""
        return self.first_seen if self.created_obs is None else min(self.created_obs, self.first_seen)


@dataclass
class CQRecord:
    name: str
    cls: str
    nominal_milli: int
    first_time: float
    last_time: float
    last_usage_milli: int = 0
    used_milli_seconds: float = 0.0
    max_usage_milli: int = 0
    pending: int = 0
    reserving: int = 0
    admitted: int = 0
    active: bool = False


def _first_flavor_total(entries: list[Obj] | None) -> int:
    """`status.flavorsUsage[0].resources[0].total`, as upstream's recorder reads it."""
    if not entries:
        return 0
    resources = entries[0].get("resources") or []
    return quantity_milli(resources[0].get("total")) if resources else 0


def workload_cpu_milli(obj: Obj) -> int:
    """cpu requested by all pods of a Workload (count x the containers' requests)."""
    total = 0
    for podset in (obj.get("spec") or {}).get("podSets") or []:
        pod_spec = (podset.get("template") or {}).get("spec") or {}
        per_pod = sum(
            quantity_milli(((c.get("resources") or {}).get("requests") or {}).get("cpu"))
            for c in pod_spec.get("containers") or []
        )
        total += int(podset.get("count", 1)) * per_pod
    return total


def _first_nominal(cq: Obj) -> int:
    try:
        return quantity_milli(cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"])
    except (KeyError, IndexError, TypeError):
        return 0


@dataclass
class EvictionRecord:
    """One Evicted False->True transition as the runner saw it."""

    time: float
    key: str
    cls: str
    reason: str  # the Preempted condition's reason (InClusterQueue, InCohortReclamation, ...) or Evicted's
    held_s: float | None  # how long the runner had seen it Admitted; None: its admission was never seen
    message: str


class Recorder:
    """Workload and ClusterQueue state as seen by the runner; pure (times are passed in)."""

    def __init__(self) -> None:
        self.workloads: dict[str, WorkloadRecord] = {}
        self.evictions: list[EvictionRecord] = []
        self.cluster_queues: dict[str, CQRecord] = {}
        self.cq_events = 0
        # (time, key, what): created, admitted, evicted, released (quota gone, not finished), finished
        self.timeline: list[tuple[float, str, str]] = []

    def created(self, key: str, cls: str, now: float, obj: Obj | None = None) -> None:
        rec = self._workload(key, cls, now)
        if rec.created_obs is None:
            self.timeline.append((now, key, "created"))
        rec.created_obs = now if rec.created_obs is None else min(rec.created_obs, now)
        if obj is not None and rec.created_api is None:
            rec.created_api = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))

    def _workload(self, key: str, cls: str, now: float) -> WorkloadRecord:
        rec = self.workloads.get(key)
        if rec is None:
            rec = self.workloads[key] = WorkloadRecord(key, cls, first_seen=now)
        return rec

    def observe_workload(self, obj: Obj, now: float) -> WorkloadRecord:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        rec = self._workload(key, (meta.get("labels") or {}).get(LABEL_CLASS, ""), now)
        if rec.created_api is None:
            rec.created_api = parse_time(meta.get("creationTimestamp"))
        admitted_cond = find_condition(obj, "Admitted")
        admitted = admitted_cond is not None and admitted_cond.get("status") == "True"
        evicted = condition_true(obj, "Evicted")
        finished = condition_true(obj, "Finished")
        rec.updates += 1
        if admitted and not rec.admitted:
            rec.admitted_obs = now
            rec.admissions += 1
            self.timeline.append((now, key, "admitted"))
        elif rec.admitted and not admitted and not finished:
            self.timeline.append((now, key, "released"))
        if admitted and admitted_cond is not None:
            rec.admitted_api = parse_time(admitted_cond.get("lastTransitionTime"))
        if evicted and not rec.evicted:
            rec.evictions += 1
            cond = find_condition(obj, "Preempted") or find_condition(obj, "Evicted") or {}
            held = None if rec.holding_since is None else now - rec.holding_since
            self.evictions.append(
                EvictionRecord(now, key, rec.cls, cond.get("reason", ""), held, cond.get("message", ""))
            )
            self.timeline.append((now, key, "evicted"))
        if finished and not rec.finished:
            rec.finished_obs = now
            self.timeline.append((now, key, "finished"))
        holding = admitted and not finished
        if holding and rec.holding_since is None:
            rec.holding_since = now
        elif not holding and rec.holding_since is not None:
            rec.held_s += max(0.0, now - rec.holding_since)
            rec.holding_since = None
        if not rec.cpu_milli:
            rec.cpu_milli = workload_cpu_milli(obj)
        rec.admitted, rec.evicted, rec.finished = admitted, evicted, finished
        return rec

    def observe_cluster_queue(self, obj: Obj, now: float) -> CQRecord:
        """Integrates admitted cpu over time between events, like upstream's recordCQEvent."""
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        name = meta.get("name", "")
        self.cq_events += 1
        usage = _first_flavor_total(status.get("flavorsUsage"))
        rec = self.cluster_queues.get(name)
        if rec is None:
            rec = self.cluster_queues[name] = CQRecord(
                name, (meta.get("labels") or {}).get(LABEL_CLASS, ""), _first_nominal(obj), now, now
            )
        else:
            rec.used_milli_seconds += rec.last_usage_milli * max(0.0, now - rec.last_time)
            rec.last_time = now
            rec.nominal_milli = _first_nominal(obj)
        rec.last_usage_milli = usage
        rec.max_usage_milli = max(rec.max_usage_milli, usage)
        rec.pending = int(status.get("pendingWorkloads") or 0)
        rec.reserving = int(status.get("reservingWorkloads") or 0)
        rec.admitted = int(status.get("admittedWorkloads") or 0)
        rec.active = condition_true(obj, "Active")
        return rec

    # -- progress and the end condition ------------------------------------------------------

    def finished_count(self) -> int:
        return sum(1 for r in self.workloads.values() if r.finished)

    def admissions_count(self) -> int:
        return sum(r.admissions for r in self.workloads.values())

    def queues_idle(self, expected: Iterable[str]) -> bool:
        """Every expected ClusterQueue was seen and reports no pending and no reserving workloads."""
        for name in expected:
            rec = self.cluster_queues.get(name)
            if rec is None or rec.pending or rec.reserving:
                return False
        return True


# ==============================================================================================
# Summary math
# ==============================================================================================


@dataclass
class ClassSummary:
    name: str
    count: int
    admitted: int
    avg_time_to_admission_obs_ms: float | None  # generator's create -> runner saw Admitted=True
    avg_time_to_admission_api_ms: float | None  # creationTimestamp -> Admitted lastTransitionTime
    avg_time_to_finish_obs_ms: float | None
    evictions: int


def _avg(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_classes(workloads: Iterable[WorkloadRecord]) -> dict[str, ClassSummary]:
    by_class: dict[str, list[WorkloadRecord]] = {}
    for rec in workloads:
        by_class.setdefault(rec.cls, []).append(rec)
    out = {}
    for name, recs in sorted(by_class.items()):
        admitted = [r for r in recs if r.admitted_obs is not None]
        obs = [max(0.0, r.admitted_obs - r.start_obs) * 1000 for r in admitted if r.admitted_obs is not None]
        api_values = [
            max(0.0, r.admitted_api - r.created_api) * 1000
            for r in recs
            if r.admitted_api is not None and r.created_api is not None
        ]
        finish = [max(0.0, r.finished_obs - r.start_obs) * 1000 for r in recs if r.finished_obs is not None]
        out[name] = ClassSummary(
            name=name,
            count=len(recs),
            admitted=len(admitted),
            avg_time_to_admission_obs_ms=_avg(obs),
            avg_time_to_admission_api_ms=_avg(api_values),
            avg_time_to_finish_obs_ms=_avg(finish),
            evictions=sum(r.evictions for r in recs),
        )
    return out


def cq_usage_pct(cluster_queues: Iterable[CQRecord]) -> dict[str, float]:
    """Per ClusterQueue class: integral of admitted cpu / (sum of nominal x (last - first CQ event))."""
    groups: dict[str, list[CQRecord]] = {}
    for rec in cluster_queues:
        groups.setdefault(rec.cls, []).append(rec)
    out = {}
    for cls, recs in sorted(groups.items()):
        window = max(r.last_time for r in recs) - min(r.first_time for r in recs)
        nominal = sum(r.nominal_milli for r in recs)
        used = sum(r.used_milli_seconds for r in recs)
        out[cls] = 100.0 * used / (nominal * window) if window > 0 and nominal > 0 else 0.0
    return out


def workload_usage_pct(
    workloads: Iterable[WorkloadRecord], cluster_queues: Iterable[CQRecord], end: float
) -> float | None:
    """Usage from the runner's own view: cpu x time seen admitted, over all nominal quota, from the first
    ClusterQueue event to `end`. Independent of how often the engine writes ClusterQueue status."""
    queues = list(cluster_queues)
    if not queues:
        return None
    window = end - min(q.first_time for q in queues)
    nominal = sum(q.nominal_milli for q in queues)
    if window <= 0 or nominal <= 0:
        return None
    used = sum(w.cpu_milli * w.held_until(end) for w in workloads)
    return 100.0 * used / (nominal * window)


@dataclass
class RunResult:
    engine: str
    scale: float
    cluster_queues: int
    workloads_planned: int
    workloads_created: int = 0
    workloads_finished: int = 0
    admissions: int = 0
    wall_s: float | None = None
    timed_out: bool = False
    generation_s: float | None = None
    admissions_per_s: float | None = None
    classes: dict[str, ClassSummary] = field(default_factory=dict)
    cq_usage_pct: dict[str, float] = field(default_factory=dict)  # from ClusterQueue status, as upstream
    workload_usage_pct: float | None = None  # from the runner's observed admissions, all ClusterQueues
    cq_status_events: int = 0
    peak_rss_mib: float | None = None
    engine_cpu_s: float | None = None  # user + sys of the engine process
    process_cpu_per_admission_ms: float | None = None
    scheduling_decisions: float | None = None
    engine_cpu_per_decision_ms: float | None = None  # from the agent's own counters, if exposed
    harness_cpu_s: float | None = None
    # Write requests the apiserver served during the run, all clients (engine, runner, generator),
    # by `<verb> <resource>[/<subresource>]`, from its apiserver_request_total.
    api_writes: dict[str, int] = field(default_factory=dict)
    # 1-minute load average of the machine when the engine started and at the end (others' work shows here).
    load_avg_start: float | None = None
    load_avg_end: float | None = None
    error: str | None = None

    def to_dict(self) -> Obj:
        return asdict(self)


def finish_result(
    result: RunResult,
    recorder: Recorder,
    *,
    wall_s: float | None,
    engine_cpu_s: float | None,
    end_time: float | None = None,
    metrics: dict[str, float] | None = None,
) -> RunResult:
    """Fill the derived figures of `result` from the recorder and the engine's counters."""
    result.wall_s = wall_s
    result.workloads_finished = recorder.finished_count()
    result.admissions = recorder.admissions_count()
    result.classes = summarize_classes(recorder.workloads.values())
    result.cq_usage_pct = cq_usage_pct(recorder.cluster_queues.values())
    result.cq_status_events = recorder.cq_events
    if end_time is not None:
        result.workload_usage_pct = workload_usage_pct(
            recorder.workloads.values(), recorder.cluster_queues.values(), end_time
        )
    if wall_s:
        result.admissions_per_s = result.admissions / wall_s
    result.engine_cpu_s = engine_cpu_s
    if engine_cpu_s is not None and result.admissions:
        result.process_cpu_per_admission_ms = engine_cpu_s / result.admissions * 1000
    metrics = metrics or {}
    decisions, cpu = metrics.get(METRIC_DECISIONS), metrics.get(METRIC_ENGINE_CPU)
    result.scheduling_decisions = decisions
    if decisions and cpu is not None:
        result.engine_cpu_per_decision_ms = cpu / decisions * 1000
    return result


@dataclass(frozen=True)
class Check:
    metric: str
    value: float | None
    limit: float
    kind: str  # "max" (value <= limit) or "min" (value >= limit)
    unit: str

    @property
    def passed(self) -> bool:
        if self.value is None:
            return False
        return self.value <= self.limit if self.kind == "max" else self.value >= self.limit


def rangespec_checks(result: RunResult) -> list[Check]:
    """Upstream's baseline rangespec, in seconds for times (it is written in milliseconds)."""
    checks = [
        Check(
            "wall time",
            None if result.timed_out or result.wall_s is None else result.wall_s,
            RANGESPEC["max_wall_ms"] / 1000,
            "max",
            "s",
        )
    ]
    for cls, limit_ms in RANGESPEC["max_avg_time_to_admission_ms"].items():
        summary = result.classes.get(cls)
        value = summary.avg_time_to_admission_obs_ms if summary else None
        checks.append(
            Check(
                f"avg time to admission, {cls}",
                None if value is None else value / 1000,
                limit_ms / 1000,
                "max",
                "s",
            )
        )
    for cls, minimum in RANGESPEC["min_cq_usage_pct"].items():
        checks.append(
            Check(
                f"ClusterQueue usage, class {cls} (CQ status)",
                result.cq_usage_pct.get(cls),
                minimum,
                "min",
                "%",
            )
        )
    return checks


# ==============================================================================================
# Reporting
# ==============================================================================================


def _fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


def _limit(check: Check) -> str:
    return f"{'<=' if check.kind == 'max' else '>='} {check.limit:g} {check.unit}"


def _rows(result: RunResult) -> list[tuple[str, str]]:
    rows = [
        (
            "wall time (engine start -> done)",
            _fmt(result.wall_s, "s") + (" TIMEOUT" if result.timed_out else ""),
        ),
        ("workloads created / finished", f"{result.workloads_created:,} / {result.workloads_finished:,}"),
        ("admissions (incl. re-admissions)", f"{result.admissions:,}"),
        ("admissions per second", _fmt(result.admissions_per_s, "/s", 2)),
    ]
    for name in ("small", "medium", "large", *sorted(set(result.classes) - {"small", "medium", "large"})):
        c = result.classes.get(name)
        if c is None:
            continue
        rows.append(
            (
                f"avg time to admission, {name} (runner)",
                _fmt(
                    None if c.avg_time_to_admission_obs_ms is None else c.avg_time_to_admission_obs_ms / 1000,
                    "s",
                ),
            )
        )
        rows.append(
            (
                f"avg time to admission, {name} (API timestamps)",
                _fmt(
                    None if c.avg_time_to_admission_api_ms is None else c.avg_time_to_admission_api_ms / 1000,
                    "s",
                ),
            )
        )
        rows.append((f"  {name}: admitted / count, evictions", f"{c.admitted}/{c.count}, {c.evictions}"))
    for cls, pct in result.cq_usage_pct.items():
        rows.append((f"ClusterQueue usage, class {cls} (CQ status)", _fmt(pct, "%")))
    rows.append(("ClusterQueue usage, all (runner-seen admissions)", _fmt(result.workload_usage_pct, "%")))
    rows.append(("ClusterQueue status events seen", f"{result.cq_status_events:,}"))
    rows += [
        ("engine peak RSS (VmHWM)", _fmt(result.peak_rss_mib, "MiB")),
        ("engine CPU (user+sys)", _fmt(result.engine_cpu_s, "s")),
        ("engine process CPU per admission", _fmt(result.process_cpu_per_admission_ms, "ms", 2)),
        ("engine CPU per scheduling decision", _fmt(result.engine_cpu_per_decision_ms, "ms", 3)),
        ("harness (generator + runner) CPU", _fmt(result.harness_cpu_s, "s")),
        *(
            (f"apiserver writes, {key} (all clients)", f"{n:,}")
            for key, n in sorted(result.api_writes.items())
            if key.split(" ", 1)[1].startswith(("workloads", "clusterqueues", "localqueues", "events"))
        ),
        (
            "machine load average (1 min), start / end",
            f"{_fmt(result.load_avg_start, digits=2)} / {_fmt(result.load_avg_end, digits=2)} "
            f"on {os.cpu_count()} CPUs",
        ),
    ]
    return rows


def format_result(result: RunResult) -> str:
    lines = [
        f"== {result.engine}: {result.workloads_planned:,} workloads in "
        f"{result.cluster_queues} ClusterQueues (scale {result.scale:g})"
    ]
    if result.error:
        lines.append(f"   ERROR: {result.error}")
    if result.timed_out:
        lines.append(
            "   TIMED OUT: the averages below cover only the workloads admitted before the timeout "
            "(see admitted / count)"
        )
    width = max(len(k) for k, _ in _rows(result))
    for key, value in _rows(result):
        lines.append(f"   {key:<{width}}  {value}")
    lines.append("")
    lines.append(format_checks(result))
    return "\n".join(lines)


def format_checks(result: RunResult) -> str:
    checks = rangespec_checks(result)
    full = result.scale == 1.0 and result.cluster_queues == 30
    head = "   upstream rangespec (configs/baseline, v0.19.2)"
    if not full:
        head += ": reference only, the thresholds are for the full run (--scale 1, 30 ClusterQueues)"
    lines = [head]
    width = max(len(c.metric) for c in checks)
    for c in checks:
        digits = 1
        lines.append(
            f"   {c.metric:<{width}}  {_fmt(c.value, c.unit, digits):>12}  {_limit(c):>12}  "
            f"{'PASS' if c.passed else 'FAIL'}"
        )
    return "\n".join(lines)


def ratio(ours: float | None, upstream: float | None) -> float | None:
    if ours is None or upstream is None or upstream == 0:
        return None
    return ours / upstream


def format_comparison(ours: RunResult, upstream: RunResult) -> str:
    pairs: list[tuple[str, float | None, float | None, str, bool]] = [
        ("wall time", ours.wall_s, upstream.wall_s, "s", True),
        ("admissions per second", ours.admissions_per_s, upstream.admissions_per_s, "/s", False),
    ]
    for name in ("small", "medium", "large"):
        o, u = ours.classes.get(name), upstream.classes.get(name)
        pairs.append(
            (
                f"avg time to admission, {name} (runner)",
                None
                if o is None or o.avg_time_to_admission_obs_ms is None
                else o.avg_time_to_admission_obs_ms / 1000,
                None
                if u is None or u.avg_time_to_admission_obs_ms is None
                else u.avg_time_to_admission_obs_ms / 1000,
                "s",
                True,
            )
        )
    for cls in sorted(set(ours.cq_usage_pct) | set(upstream.cq_usage_pct)):
        pairs.append(
            (
                f"ClusterQueue usage, class {cls} (CQ status)",
                ours.cq_usage_pct.get(cls),
                upstream.cq_usage_pct.get(cls),
                "%",
                False,
            )
        )
    pairs.append(
        ("ClusterQueue usage (runner-seen)", ours.workload_usage_pct, upstream.workload_usage_pct, "%", False)
    )
    pairs += [
        ("engine peak RSS", ours.peak_rss_mib, upstream.peak_rss_mib, "MiB", False),
        ("engine CPU (user+sys)", ours.engine_cpu_s, upstream.engine_cpu_s, "s", False),
        (
            "process CPU per admission",
            ours.process_cpu_per_admission_ms,
            upstream.process_cpu_per_admission_ms,
            "ms",
            False,
        ),
    ]
    width = max(len(p[0]) for p in pairs)
    lines = [f"== side by side (ours = worker_agent, upstream = minimalkueue), scale {ours.scale:g}"]
    lines.append(f"   {'metric':<{width}}  {'ours':>14}  {'upstream':>14}  {'ours/upstream':>13}")
    for name, o, u, unit, _ in pairs:
        r = ratio(o, u)
        o_text, u_text, r_text = _fmt(o, unit), _fmt(u, unit), _fmt(r, "x", 2)
        if name == "wall time":  # a timed-out run's wall time is a lower bound
            o_text = (">" if ours.timed_out else "") + o_text
            u_text = (">" if upstream.timed_out else "") + u_text
            r_text = ("" if not ours.timed_out or upstream.timed_out else ">") + r_text
        lines.append(f"   {name:<{width}}  {o_text:>14}  {u_text:>14}  {r_text:>13}")
    for result in (ours, upstream):
        if result.timed_out:
            lines.append(
                f"   {result.engine} timed out: {result.workloads_finished:,} of "
                f"{result.workloads_planned:,} finished; its averages cover only those admitted in time"
            )
    return "\n".join(lines)


# ==============================================================================================
# Prometheus text and /proc
# ==============================================================================================


def parse_prometheus_counters(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum of every sample of each named metric (all label sets); names absent from the text are left out."""
    wanted = set(names)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, rest = line.partition("{") if "{" in line.split(" ", 1)[0] else line.partition(" ")
        name = name_part.strip()
        if name not in wanted:
            continue
        value_text = rest.rsplit("}", 1)[-1] if "}" in rest else rest
        fields = value_text.split()
        if not fields:
            continue
        try:
            out[name] = out.get(name, 0.0) + float(fields[0])
        except ValueError:
            continue
    return out


WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def api_write_counts(text: str) -> dict[str, int]:
    """`apiserver_request_total` write samples summed by `<verb> <resource>[/<subresource>]`."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        if labels.get("verb") not in WRITE_VERBS:
            continue
        key = f"{labels['verb']} {labels.get('resource', '')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        try:
            out[key] = out.get(key, 0) + int(float(value))
        except ValueError:
            continue
    return out


def apiserver_writes(kubeconfig: Path, save_to: Path) -> dict[str, int]:
    """The apiserver's write counters at the end of a run (kept whole in `save_to`); {} on failure."""
    lf = load_localfleet()
    kubectl = lf.Kubectl(lf.Binaries(lf.read_versions()).path("kubectl"), str(kubeconfig))
    res = kubectl("get", "--raw", "/metrics", check=False, timeout=30)
    if res.returncode != 0:
        say(f"could not read the apiserver's /metrics: {res.stderr.strip()}")
        return {}
    with contextlib.suppress(OSError):
        save_to.write_text(res.stdout)
    return api_write_counts(res.stdout)


def read_peak_rss_mib(pid: int) -> float | None:
    """VmHWM (the peak RSS) of a live process, VmRSS if the kernel does not report it."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmHWM", values.get("VmRSS"))


def read_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# ==============================================================================================
# The cluster (hack/localfleet.py) and the engine processes
# ==============================================================================================


def load_localfleet() -> Any:
    """The localfleet package (the repository root is on sys.path: this script puts it there)."""
    import localfleet

    return localfleet


class BenchCluster:
    """One fresh manager-only cluster (`localfleet up --workers 0`), always torn down by `down()`."""

    def __init__(self, run_dir: Path, label: str, extra_up_args: list[str] | None = None) -> None:
        self.run_dir = run_dir
        self.label = label
        self.extra_up_args = list(extra_up_args or ())
        self.started = False

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "manager" / "admin.kubeconfig"

    def state_cluster(self) -> dict:
        """The cluster's entry in localfleet's state (its metrics reader's token file among others)."""
        try:
            return json.loads((self.run_dir / "state.json").read_text())["clusters"]["manager"]
        except (OSError, ValueError, KeyError):
            return {}

    def _localfleet(self, *args: str, check: bool = True) -> None:
        cmd = [sys.executable, str(LOCALFLEET_PATH), "--dir", str(self.run_dir), *args]
        res = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL)
        if check and res.returncode != 0:
            raise BenchError(
                f"`{' '.join(cmd[1:])}` failed (exit {res.returncode}); component logs are in {self.run_dir}"
            )

    def up(self) -> None:
        if self.run_dir.exists():
            raise BenchError(f"{self.run_dir} already exists: another benchmark may be running there")
        say(f"starting a fresh cluster for {self.label} in {self.run_dir}")
        self.started = True
        self._localfleet("up", "--workers", "0", "--no-smoke", *self.extra_up_args)
        if not self.kubeconfig.is_file():
            raise BenchError(f"localfleet did not write {self.kubeconfig}")

    def down(self) -> None:
        if self.started:
            say(f"stopping the {self.label} cluster ({self.run_dir})")
            self._localfleet("down", check=False)
            self.started = False


class EngineProcess:
    """The admission engine under test, in its own process group; wall time starts at spawn."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.peak_rss_mib: float | None = None
        self.cpu_s: float | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=REPO,
                env={**os.environ, **(self.env or {})},
            )
        self.started_at = time.time()
        say(f"started {self.name} (pid {self.proc.pid}, log {self.log_path})")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def sample(self) -> None:
        """Keep the peak RSS and the CPU time; call while the process runs (and just before stopping)."""
        if not self.alive():
            return
        rss = read_peak_rss_mib(self.pid)
        if rss is not None:
            self.peak_rss_mib = max(self.peak_rss_mib or 0.0, rss)
        cpu = read_cpu_seconds(self.pid)
        if cpu is not None:
            self.cpu_s = cpu

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group we started, SIGKILL after `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.sample()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            say(f"{self.name} still running {timeout:.0f}s after SIGTERM, sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def write_agent_config(
    path: Path,
    metrics_port: int,
    health_port: int,
    qps: float = 50,
    burst: int = 100,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """minimalkueue's settings in our Configuration: QPS 50/burst 100 (unless told otherwise), its
    group concurrency, no election; `extra_config` fields (e.g. fairSharing) on top."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "leaderElection": {"leaderElect": False},
        "webhook": {"port": 0},
        "clientConnection": {"qps": qps, "burst": burst},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "controller": {
            "groupKindConcurrency": {
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        **(extra_config or {}),
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def agent_engine(
    work_dir: Path,
    kubeconfig: Path,
    qps: float = 50,
    burst: int = 100,
    extra_config: dict[str, Any] | None = None,
    decision_log: Path | None = None,
) -> tuple[EngineProcess, int]:
    if not (REPO / "worker_agent" / "__main__.py").is_file():
        raise BenchError("worker_agent/__main__.py does not exist yet: the agent's entry point is needed")
    lf = load_localfleet()
    metrics_port, health_port = lf.free_port(), lf.free_port()
    config = write_agent_config(
        work_dir / "agent-config.yaml", metrics_port, health_port, qps, burst, extra_config
    )
    venv_python = REPO / ".venv" / "bin" / "python"
    python = str(venv_python if venv_python.exists() else Path(sys.executable))
    cmd = [
        python,
        "-m",
        "worker_agent",
        "--kubeconfig",
        str(kubeconfig),
        "--config",
        str(config),
        "--metrics-bind-address",
        f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address",
        f"127.0.0.1:{health_port}",
        "--visibility-bind-address",
        "0",  # no visibility API (it would listen on :8082): the benchmark measures admission only
    ]
    if decision_log is not None:
        cmd += ["--decision-log", str(decision_log)]
    return EngineProcess("worker_agent", cmd, work_dir / "worker_agent.log"), metrics_port


def scrape_metrics(port: int, save_to: Path | None = None, token: str | None = None) -> dict[str, float]:
    """The agent's engine counters; the whole exposition is kept in `save_to` (API requests by
    resource and code, queue gauges) for a look after the run. Its /metrics is HTTPS (self-signed)
    behind a TokenReview and a SubjectAccessReview: `token` is the cluster's metrics reader's."""
    status, text = load_localfleet().read_metrics(f"https://127.0.0.1:{port}/metrics", token, timeout=5)
    if status != 200:
        say(f"could not read /metrics on port {port}: {status or 'unreachable'} {text.strip()[:200]}")
        return {}
    if save_to is not None:
        save_to.write_text(text)
    return parse_prometheus_counters(text, (METRIC_DECISIONS, METRIC_ENGINE_CPU))


# ==============================================================================================
# Upstream Kueue: build minimalkueue from the Go module, install its CRDs
# ==============================================================================================


def kueue_version() -> str:
    return load_localfleet().read_versions()["KUEUE_VERSION"]


def upstream_dir(version: str) -> Path:
    return load_localfleet().CACHE / "bin" / f"kueue-{version}"


def ensure_minimalkueue(force: bool = False) -> tuple[Path, Path]:
    """`minimalkueue` (upstream's harness manager) and upstream's CRDs, cached by version."""
    lf = load_localfleet()
    version = kueue_version()
    out_dir = upstream_dir(version)
    binary, crds = out_dir / "minimalkueue", out_dir / "crds"
    if not force and binary.is_file() and any(crds.glob("*.yaml")):
        say(f"minimalkueue {version} cached at {binary}")
        return binary, crds
    say(
        f"building upstream Kueue {version} minimalkueue from the Go module "
        "(first time: about 3 min on 2 cores)"
    )
    builder = lf.Builder(lf.Binaries(lf.read_versions()))
    try:
        builder.check_go()
    except lf.FleetError as e:
        raise BenchError(f"cannot build upstream Kueue's minimalkueue: {e}") from e
    out_dir.mkdir(parents=True, exist_ok=True)
    if force and binary.exists():
        binary.unlink()
    if not binary.is_file():
        # The wrapper module lands in ~/.cache/kueue-federation/build/kueue-<version>.
        builder.go_build_module(
            f"build minimalkueue {version}",
            "sigs.k8s.io/kueue",
            version,
            "sigs.k8s.io/kueue/test/performance/scheduler/minimalkueue",
            f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}",
            binary,
        )
    src = builder.module_dir(f"sigs.k8s.io/kueue@{version}")
    crds.mkdir(exist_ok=True)
    for crd in sorted((src / "config" / "components" / "crd" / "bases").glob("*.yaml")):
        shutil.copyfile(crd, crds / crd.name)
        (crds / crd.name).chmod(0o644)
    if not any(crds.glob("*.yaml")):
        raise BenchError(f"no CRDs under config/components/crd/bases of sigs.k8s.io/kueue@{version}")
    say(f"minimalkueue {version} built in {builder.elapsed()}: {binary}")
    return binary, crds


def install_upstream_crds(cluster: BenchCluster, crds: Path) -> None:
    """Replace our v1beta1 CRDs with upstream's (v1beta2 storage, v1beta1 served, no conversion webhook)."""
    lf = load_localfleet()
    kubectl = lf.Kubectl(lf.Binaries(lf.read_versions()).path("kubectl"), str(cluster.kubeconfig))
    ours = [n for n in kubectl("get", "crd", "-o", "name").stdout.split() if n.endswith(f".{GROUP}")]
    if ours:
        # A CRD deleted while its storage is still initializing keeps its cleanup finalizer ("could not
        # list instances: storage is (re)initializing") for minutes: wait until every kind lists first.
        kinds = [n.split("/", 1)[1] for n in ours]
        lf.wait_for(
            "our Kueue CRDs to serve lists",
            lambda: all(kubectl("get", k, "-A", "-o", "name", check=False).returncode == 0 for k in kinds),
            60,
            interval=0.5,
        )
        kubectl("delete", "--wait=true", "--timeout=90s", *ours, timeout=120)
    kubectl("create", "-f", str(crds), timeout=300)
    names = [f"crd/{yaml.safe_load(p.read_text())['metadata']['name']}" for p in sorted(crds.glob("*.yaml"))]
    kubectl("wait", "--for=condition=Established", "--timeout=120s", *names)
    storage = kubectl(
        "get", f"crd/workloads.{GROUP}", "-o", "jsonpath={.spec.versions[?(@.storage==true)].name}"
    ).stdout.strip()
    if storage != "v1beta2":
        raise BenchError(f"upstream Workload CRD stores {storage!r}, expected v1beta2")
    say(f"installed upstream's {len(names)} CRDs (storage v1beta2)")


def minimalkueue_engine(work_dir: Path, kubeconfig: Path, binary: Path, verbosity: int = 0) -> EngineProcess:
    """Upstream's harness binary; `verbosity` > 0 turns on its scheduler's V(n) logs (zap level -n)."""
    cmd = [str(binary), "--kubeconfig", str(kubeconfig)]
    if verbosity > 0:
        cmd.append(f"--zap-log-level={verbosity}")
    return EngineProcess("minimalkueue", cmd, work_dir / "minimalkueue.log")


# ==============================================================================================
# Generator and runner (asyncio, our kube_runtime client and informers)
# ==============================================================================================


class BenchRun:
    """One run: generator, runner and recorder against one cluster and one engine process."""

    def __init__(
        self,
        shape: ApiShape,
        config: BenchConfig,
        kubeconfig: Path,
        engine: EngineProcess,
        *,
        timeout_s: float,
        qps: float = 1000,
        burst: int = 2000,
        progress_every_s: float = 15.0,
        metrics_reader: Callable[[], dict[str, float]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shape = shape
        self.config = config
        self.kubeconfig = kubeconfig
        self.engine = engine
        self.timeout_s = timeout_s
        self.qps = qps
        self.burst = burst
        self.progress_every_s = progress_every_s
        self.metrics_reader = metrics_reader
        self.now = clock
        self.recorder = Recorder()
        self.queues = plan_queues(config)
        self.created = 0
        self.generation_done = asyncio.Event()
        self.generation_started = 0.0
        self.generation_ended: float | None = None
        self.admitted_since: dict[str, float] = {}

    # -- setup -------------------------------------------------------------------------------

    async def _open(self) -> None:
        from kube_runtime.client import KubeClient
        from kube_runtime.controller import Controller
        from kube_runtime.informer import Informer

        path = str(self.kubeconfig)
        # Upstream's runner gives the generator and the runner's manager a client each.
        self.gen_client = await KubeClient.from_kubeconfig_file(path, qps=self.qps, burst=self.burst)
        self.run_client = await KubeClient.from_kubeconfig_file(path, qps=self.qps, burst=self.burst)
        self.wl_informer = Informer(self.run_client, self.shape.workloads, name="bench-workloads")
        self.cq_informer = Informer(self.run_client, self.shape.cluster_queues, name="bench-clusterqueues")
        self.controller = Controller("bench-runner", self.reconcile, concurrency=5)
        self.wl_informer.add_handler(
            on_add=self._on_workload, on_update=lambda _old, new: self._on_workload(new)
        )
        self.cq_informer.add_handler(
            on_add=self._on_cluster_queue, on_update=lambda _old, new: self._on_cluster_queue(new)
        )
        self.wl_informer.start()
        self.cq_informer.start()
        self.controller.start()
        async with asyncio.timeout(60):
            await self.wl_informer.wait_synced()
            await self.cq_informer.wait_synced()

    async def _close(self) -> None:
        for step in (self.controller.stop, self.wl_informer.stop, self.cq_informer.stop):
            with contextlib.suppress(Exception):
                await step()
        await self.gen_client.close()
        await self.run_client.close()

    # -- event handlers (keep them short) ----------------------------------------------------

    def _on_workload(self, obj: Obj) -> None:
        now = self.now()
        rec = self.recorder.observe_workload(obj, now)
        uid = (obj.get("metadata") or {}).get("uid", rec.key)
        if rec.admitted:
            self.admitted_since.setdefault(uid, now)
        else:
            self.admitted_since.pop(uid, None)
        # Upstream's runner filters events the same way: only admitted, unfinished workloads need it.
        if rec.admitted and not rec.finished:
            self.controller.enqueue(rec.key)

    def _on_cluster_queue(self, obj: Obj) -> None:
        self.recorder.observe_cluster_queue(obj, self.now())

    # -- the runner's reconcile --------------------------------------------------------------

    async def reconcile(self, key: str) -> Any:
        from kube_runtime.client import Conflict, NotFound
        from kube_runtime.controller import Result

        wl = self.wl_informer.get(key)
        if wl is None:
            return None
        meta, status = wl["metadata"], wl.get("status") or {}
        try:
            admitted = find_condition(wl, "Admitted")
            if admitted is None or admitted.get("status") != "True" or condition_true(wl, "Finished"):
                return None
            if condition_true(wl, "Evicted") and status.get("admission"):
                await self._clear_reservation(wl)
                return None
            since = self.admitted_since.get(meta.get("uid", key)) or parse_time(
                admitted.get("lastTransitionTime")
            )
            runtime_s = int((meta.get("labels") or {}).get(LABEL_RUNNING_MS, "0")) / 1000
            remaining = runtime_s - (self.now() - (since or self.now()))
            if remaining > 0:
                return Result(requeue_after=remaining)
            await self._finish(wl)
        except NotFound:
            return None
        except Conflict:
            # The informer brings the newer version (and enqueues it); look again shortly.
            return Result(requeue_after=0.05)
        return None

    async def _finish(self, wl: Obj) -> None:
        await mark_finished(self.run_client, self.shape, wl)

    async def _clear_reservation(self, wl: Obj) -> None:
        await clear_reservation(self.run_client, self.shape, wl)

    # -- the generator -----------------------------------------------------------------------

    async def _create(self, resource: Any, obj: Obj, attempts: int = 5) -> Obj:
        from kube_runtime.client import AlreadyExists, ConnectionLost

        for attempt in range(1, attempts + 1):
            try:
                return await self.gen_client.create(resource, obj)
            except AlreadyExists:
                if attempt == 1:
                    raise
                return obj  # an earlier attempt got through before its connection broke
            except ConnectionLost:
                if attempt == attempts:
                    raise
                await asyncio.sleep(0.2 * attempt)
        raise AssertionError("unreachable")

    async def _generate_set(self, queue: QueuePlan, set_index: int, cls: WorkloadClass) -> None:
        interval = cls.interval_ms / 1000
        for serial in range(cls.count):
            await asyncio.sleep(interval)  # upstream waits first, then creates, one at a time
            obj = workload_object(self.shape, queue, cls, set_index, serial)
            created = await self._create(self.shape.workloads, obj)
            self.recorder.created(f"{queue.name}/{obj['metadata']['name']}", cls.name, self.now(), created)
            self.created += 1

    async def _generate_queue(self, queue: QueuePlan) -> None:
        from kube_runtime import api

        await self._create(self.shape.cluster_queues, cluster_queue_object(self.shape, self.config, queue))
        await self._create(api.NAMESPACE, namespace_object(queue))
        await self._create(self.shape.local_queues, local_queue_object(self.shape, queue))
        await asyncio.gather(
            *(self._generate_set(queue, i, cls) for i, cls in enumerate(self.config.classes))
        )

    async def generate(self) -> None:
        self.generation_started = self.now()
        try:
            await self._create(self.shape.resource_flavors, resource_flavor_object(self.shape, self.config))
            await asyncio.gather(*(self._generate_queue(q) for q in self.queues))
            self.generation_ended = self.now()
            say(
                f"generation done: {self.created:,} workloads in "
                f"{self.generation_ended - self.generation_started:.1f}s"
            )
        finally:
            self.generation_done.set()

    # -- the whole run -----------------------------------------------------------------------

    def is_done(self) -> bool:
        return (
            self.generation_done.is_set()
            and self.recorder.queues_idle(q.name for q in self.queues)
            and self.recorder.finished_count() >= self.created
        )

    def progress_line(self) -> str:
        cqs = self.recorder.cluster_queues.values()
        rss = self.engine.peak_rss_mib
        return (
            f"[{self.now() - self.engine.started_at:6.1f}s] created {self.created:,}/"
            f"{self.config.total_workloads:,}, admissions {self.recorder.admissions_count():,}, finished "
            f"{self.recorder.finished_count():,}, CQ pending {sum(c.pending for c in cqs):,}, reserving "
            f"{sum(c.reserving for c in cqs):,}, {self.engine.name} peak RSS "
            f"{'n/a' if rss is None else f'{rss:.0f} MiB'}"
        )

    async def run(self, engine_label: str, scale: float) -> RunResult:
        result = RunResult(engine_label, scale, len(self.queues), self.config.total_workloads)
        cpu0 = time.process_time()
        await self._open()
        metrics: dict[str, float] = {}
        wall: float | None = None
        end_time: float | None = None
        gen_task: asyncio.Task[None] | None = None
        # Upstream's runner is Go; ours paces Python's collector as our processes do, so that the
        # runner does not stop for a full collection and then report a pile of Finished at once.
        from kube_runtime.gcpacer import GcPacer

        pacer = asyncio.create_task(GcPacer().run(), name="gc-pacer")
        try:
            result.load_avg_start = os.getloadavg()[0]
            self.engine.start()
            gen_task = asyncio.create_task(self.generate(), name="generator")
            deadline = self.engine.started_at + self.timeout_s
            next_progress = self.now() + self.progress_every_s
            while True:
                self.engine.sample()
                if gen_task.done() and gen_task.exception() is not None:
                    raise BenchError(f"the generator failed: {gen_task.exception()!r}")
                if not self.engine.alive():
                    code = self.engine.proc.returncode if self.engine.proc else "?"
                    raise BenchError(
                        f"{self.engine.name} exited (code {code}); last lines of {self.engine.log_path}:\n"
                        f"{self.engine.log_tail()}"
                    )
                if self.is_done():
                    wall = self.now() - self.engine.started_at
                    break
                if self.now() >= deadline:
                    result.timed_out = True
                    wall = self.now() - self.engine.started_at
                    say(f"timed out after {self.timeout_s:.0f}s")
                    break
                if self.now() >= next_progress:
                    say(self.progress_line())
                    next_progress += self.progress_every_s
                await asyncio.sleep(0.25)
            end_time = self.now()
            say(self.progress_line())
            result.load_avg_end = os.getloadavg()[0]
            self.engine.sample()
            if self.metrics_reader is not None:
                metrics = await asyncio.to_thread(self.metrics_reader)
        except BenchError as e:
            result.error = str(e)
            say(f"run failed: {e}")
        finally:
            pacer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pacer
            if gen_task is not None and not gen_task.done():
                gen_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await gen_task
            await asyncio.to_thread(self.engine.stop)
            await self._close()
            result.workloads_created = self.created
            if self.generation_ended is not None:
                result.generation_s = self.generation_ended - self.generation_started
            result.peak_rss_mib = self.engine.peak_rss_mib
            result.harness_cpu_s = time.process_time() - cpu0
            finish_result(
                result,
                self.recorder,
                wall_s=wall,
                engine_cpu_s=self.engine.cpu_s,
                end_time=end_time,
                metrics=metrics,
            )
        return result

    def write_eviction_csv(self, path: Path, start: float) -> None:
        """Every Evicted transition: when (s after the engine started), which, why, and how long the
        runner had seen the victim Admitted (empty: its admission had not reached the runner)."""
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["s after start", "key", "class", "reason", "s seen admitted", "message"])
            for e in self.recorder.evictions:
                held = "" if e.held_s is None else f"{e.held_s:.3f}"
                w.writerow([f"{e.time - start:.3f}", e.key, e.cls, e.reason, held, e.message])

    def write_timeline_csv(self, path: Path, start: float) -> None:
        """Every Workload transition the runner saw, in order: created, admitted, evicted, released
        (quota gone without finishing), finished; times in s after the engine started."""
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["s after start", "key", "event"])
            for t, key, what in self.recorder.timeline:
                w.writerow([f"{t - start:.3f}", key, what])

    def write_workload_csv(self, path: Path) -> None:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                [
                    "key",
                    "class",
                    "ms to admitted (runner)",
                    "ms to admitted (API)",
                    "ms to finished",
                    "evictions",
                    "watch events",
                ]
            )
            for r in self.recorder.workloads.values():
                api_ms = (
                    round((r.admitted_api - r.created_api) * 1000)
                    if r.admitted_api is not None and r.created_api is not None
                    else ""
                )
                w.writerow(
                    [
                        r.key,
                        r.cls,
                        "" if r.admitted_obs is None else round((r.admitted_obs - r.start_obs) * 1000),
                        api_ms,
                        "" if r.finished_obs is None else round((r.finished_obs - r.start_obs) * 1000),
                        r.evictions,
                        r.updates,
                    ]
                )


async def mark_finished(client: Any, shape: ApiShape, wl: Obj) -> None:
    """What a job integration does when its job completes: Finished=True (upstream runner's texts)."""
    meta = wl["metadata"]
    body = {
        "apiVersion": shape.api_version,
        "kind": "Workload",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": {
            "conditions": [
                {
                    "type": "Finished",
                    "status": "True",
                    "reason": FINISHED_REASON,
                    "message": FINISHED_MESSAGE,
                    "lastTransitionTime": rfc3339_now(),
                    "observedGeneration": meta.get("generation", 1),
                }
            ]
        },
    }
    await client.apply_status(shape.workloads, body, RUNNER_FIELD_MANAGER, force=True)


async def clear_reservation(client: Any, shape: ApiShape, wl: Obj) -> None:
    """What a job integration does once an evicted job stopped: drop the reservation."""
    meta = wl["metadata"]
    now = rfc3339_now()
    conditions = [dict(c) for c in (wl.get("status") or {}).get("conditions") or []]
    set_condition(
        conditions, "QuotaReserved", "False", EVICTION_CLEARED_REASON, EVICTION_CLEARED_MESSAGE, now, meta
    )
    set_condition(conditions, "Admitted", "False", NO_RESERVATION_REASON, NO_RESERVATION_MESSAGE, now, meta)
    patch = {
        "metadata": {"resourceVersion": meta["resourceVersion"]},
        "status": {"admission": None, "conditions": conditions},
    }
    await client.patch_status_merge(
        shape.workloads,
        meta["name"],
        patch,
        namespace=meta["namespace"],
        field_manager=RUNNER_FIELD_MANAGER,
    )


def rfc3339_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[Obj], ctype: str, status: str, reason: str, message: str, now: str, meta: Obj
) -> None:
    """meta.SetStatusCondition: lastTransitionTime changes only when the status does."""
    for cond in conditions:
        if cond.get("type") == ctype:
            if cond.get("status") != status:
                cond["lastTransitionTime"] = now
            cond.update(
                status=status, reason=reason, message=message, observedGeneration=meta.get("generation", 1)
            )
            return
    conditions.append(
        {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": meta.get("generation", 1),
        }
    )


# ==============================================================================================
# main
# ==============================================================================================


def run_one(
    engine: str, args: argparse.Namespace, config: BenchConfig, work_dir: Path, run_root: Path
) -> RunResult:
    """Start a fresh cluster, run the engine against the generator and runner, tear everything down."""
    label = "ours (worker_agent)" if engine == "ours" else f"upstream (minimalkueue {kueue_version()})"
    if engine == "ours" and (args.agent_qps, args.agent_burst) != (50, 100):
        label += f" with client QPS {args.agent_qps:g}/burst {args.agent_burst} (upstream: 50/100)"
    binary = crds = None
    if engine == "upstream":
        binary, crds = ensure_minimalkueue(force=args.rebuild_upstream)
    cluster = BenchCluster(run_root / engine, label)
    try:
        cluster.up()
        if engine == "upstream":
            assert binary is not None and crds is not None
            install_upstream_crds(cluster, crds)
            proc = minimalkueue_engine(work_dir, cluster.kubeconfig, binary, args.upstream_verbosity)
            shape, metrics_reader = UPSTREAM, None
        else:
            proc, metrics_port = agent_engine(
                work_dir,
                cluster.kubeconfig,
                args.agent_qps,
                args.agent_burst,
                decision_log=work_dir / "decisions-ours.jsonl" if args.decision_log else None,
            )
            shape = OURS

            token = load_localfleet().cluster_metrics_token(cluster.state_cluster())

            def metrics_reader() -> dict[str, float]:
                return scrape_metrics(metrics_port, work_dir / "worker_agent.metrics.txt", token)

        bench = BenchRun(
            shape,
            config,
            cluster.kubeconfig,
            proc,
            timeout_s=args.timeout,
            qps=args.runner_qps,
            burst=args.runner_burst,
            metrics_reader=metrics_reader,
        )
        say(
            f"running {label}: {config.total_workloads:,} workloads, "
            f"{config.cluster_queue_count} ClusterQueues, timeout {args.timeout:.0f}s"
        )
        try:
            result = asyncio.run(bench.run(label, args.scale))
        finally:
            with contextlib.suppress(OSError):
                bench.write_workload_csv(work_dir / f"workloads-{engine}.csv")
                bench.write_eviction_csv(work_dir / f"evictions-{engine}.csv", proc.started_at)
                bench.write_timeline_csv(work_dir / f"timeline-{engine}.csv", proc.started_at)
            metrics_file = work_dir / f"apiserver-{engine}.metrics.txt"
            result.api_writes = apiserver_writes(cluster.kubeconfig, metrics_file)
        return result
    finally:
        cluster.down()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_engine", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--scale", type=float, default=1.0, help="fraction of each workload set (default 1: 15,000)"
    )
    p.add_argument("--cohorts", type=int, default=5)
    p.add_argument("--queues-per-cohort", type=int, default=6)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds from engine start (default 600)")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--compare-upstream",
        action="store_true",
        help="also run upstream Kueue's minimalkueue on a second fresh cluster and compare",
    )
    group.add_argument("--engine", choices=("ours", "upstream"), default="ours", help="which engine to run")
    p.add_argument("--rebuild-upstream", action="store_true", help="rebuild minimalkueue even if cached")
    p.add_argument("--build-upstream-only", action="store_true", help="build minimalkueue and exit")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument(
        "--work-dir",
        help="logs, agent config, per-workload CSVs (default /tmp/kueue-federation-bench/<time>)",
    )
    p.add_argument(
        "--agent-qps",
        type=float,
        default=50,
        help="our agent's clientConnection.qps (default 50, minimalkueue's; per API resource in both)",
    )
    p.add_argument(
        "--agent-burst", type=int, default=100, help="our agent's clientConnection.burst (default 100)"
    )
    p.add_argument(
        "--decision-log",
        action="store_true",
        help="our agent writes every scheduling cycle's decisions to decisions-ours.jsonl in the work dir",
    )
    p.add_argument(
        "--upstream-verbosity",
        type=int,
        default=0,
        metavar="N",
        help="minimalkueue logs at V(N) (its --zap-log-level=N) to minimalkueue.log; 2 gives each "
        "scheduling cycle's heads and durations (default 0: errors only, as upstream's harness)",
    )
    p.add_argument("--runner-qps", type=float, default=1000)
    p.add_argument("--runner-burst", type=int, default=2000)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kube_runtime.logging import setup_logging

    setup_logging("warning")
    # SIGTERM ends the run like Ctrl-C does, so the clusters and the engine are always torn down.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    run_root = shm / f"kueue-federation-bench-{os.getpid()}"  # one cluster directory per engine below
    try:
        config = baseline_config(args.scale, args.cohorts, args.queues_per_cohort)
        if args.build_upstream_only:
            ensure_minimalkueue(force=args.rebuild_upstream)
            return 0
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        work_dir = Path(args.work_dir or f"/tmp/kueue-federation-bench/{stamp}")
        work_dir.mkdir(parents=True, exist_ok=True)
        engines = ["ours", "upstream"] if args.compare_upstream else [args.engine]
        results: dict[str, RunResult] = {}
        failed = False
        for engine in engines:
            try:
                results[engine] = run_one(engine, args, config, work_dir, run_root)
                failed = failed or results[engine].error is not None or results[engine].timed_out
            except (BenchError, subprocess.SubprocessError, OSError) as e:
                say(f"{engine}: error: {e}")
                failed = True
            except Exception as e:
                lf = sys.modules.get("localfleet")
                if lf is None or not isinstance(e, lf.FleetError):
                    raise
                say(f"{engine}: error: {e}")
                failed = True
            print(
                format_result(results[engine]) if engine in results else f"== {engine}: no result", flush=True
            )
            print(flush=True)
        if "ours" in results and "upstream" in results:
            print(format_comparison(results["ours"], results["upstream"]), flush=True)
        if args.json:
            payload = {
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "machine": {"cpus": os.cpu_count()},
                "config": {**asdict(config), "total_workloads": config.total_workloads, "scale": args.scale},
                "rangespec": RANGESPEC,
                "results": {k: v.to_dict() for k, v in results.items()},
                "checks": {
                    k: [{**asdict(c), "passed": c.passed} for c in rangespec_checks(v)]
                    for k, v in results.items()
                },
                "workDir": str(work_dir),
            }
            Path(args.json).write_text(json.dumps(payload, indent=2))
            say(f"results written to {args.json}")
        say(f"logs and per-workload CSVs in {work_dir}")
        return 1 if failed or not results else 0
    except KeyboardInterrupt:
        say("interrupted; clusters and engine processes were stopped")
        return 130
    except (BenchError, ValueError) as e:
        say(f"error: {e}")
        return 1
    except Exception as e:
        lf = sys.modules.get("localfleet")
        if lf is not None and isinstance(e, lf.FleetError):
            say(f"error: {e}")
            return 1
        raise
    finally:
        with contextlib.suppress(OSError):
            run_root.rmdir()


if __name__ == "__main__":
    sys.exit(main())
