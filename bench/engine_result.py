"""bench.engine's recording and summary: what the runner observes (its own clock and the API's
timestamps), per-class and per-ClusterQueue figures, the run's result and upstream's rangespec checks."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.common import Obj, condition_true, find_condition
from bench.engine_plan import LABEL_CLASS
from bench.stats import average

# Upstream's configs/baseline/rangespec.yaml (v0.19.2).
RANGESPEC = {
    "max_wall_ms": 425_000,
    "min_cq_usage_pct": {"cq": 50.0},
    "max_avg_time_to_admission_ms": {"large": 23_000, "medium": 90_000, "small": 260_000},
}

# Our agent's Prometheus counters for engine CPU per scheduling decision (read at the end, if present).
METRIC_DECISIONS = "kueue_worker_agent_scheduling_decisions_total"
METRIC_ENGINE_CPU = "kueue_worker_agent_engine_cpu_seconds_total"


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
            avg_time_to_admission_obs_ms=average(obs),
            avg_time_to_admission_api_ms=average(api_values),
            avg_time_to_finish_obs_ms=average(finish),
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
