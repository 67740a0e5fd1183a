"""bench.federation's records and result (pure): each Job's times, throughput and latencies, the
run's figures against the targets, and the printed table."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from bench.common import Obj
from bench.procfs import ProcessFigures
from bench.stats import Distribution, fmt, fmt_dist, loads, table

MIB = 1024 * 1024

STAGES = ("quota_reserved", "dispatched", "remote_admitted", "check_ready", "status_mirrored")

# The targets (issue: federation dispatch performance).
TARGET_THROUGHPUT_PER_S = 100.0
TARGET_P99_S = 2.0
TARGET_P99_AT_RATE = 50.0
TARGET_RSS_MB = 300.0  # decimal megabytes: 286.1 MiB
TARGET_RSS_WORKLOADS = 10_000


# ==============================================================================================
# What one run records, and the summary (pure)
# ==============================================================================================


@dataclass
class JobRecord:
    name: str
    create_started: float | None = None
    submitted: float | None = None  # the create call returned (monotonic clock)
    workload_seen: float | None = None  # the watch saw its Workload
    admitted: float | None = None  # the watch saw Admitted=True on the manager
    finished: float | None = None
    managed_by: str | None = None  # spec.managedBy in the create response


class Recorder:
    """Jobs by name; the watch hands it Workloads (times are passed in, so it is testable)."""

    def __init__(self, job_names: Iterable[str]) -> None:
        self.jobs = {name: JobRecord(name) for name in job_names}
        self.admitted_count = 0
        self.done_count = 0

    def submitted(self, name: str, now: float, created: Obj, started: float | None = None) -> None:
        rec = self.jobs[name]
        rec.create_started = started
        rec.submitted = now
        rec.managed_by = (created.get("spec") or {}).get("managedBy")

    def observe_workload(self, wl: Obj, now: float) -> JobRecord | None:
        name = job_owner_name(wl)
        rec = self.jobs.get(name) if name else None
        if rec is None:
            return None
        was_done = rec.admitted is not None or rec.finished is not None
        if rec.workload_seen is None:
            rec.workload_seen = now
        conditions = {
            c.get("type"): c.get("status") for c in (wl.get("status") or {}).get("conditions") or ()
        }
        if rec.admitted is None and conditions.get("Admitted") == "True":
            rec.admitted = now
            self.admitted_count += 1
        if rec.finished is None and conditions.get("Finished") == "True":
            rec.finished = now
        if not was_done and (rec.admitted is not None or rec.finished is not None):
            self.done_count += 1
        return rec

    @property
    def submitted_count(self) -> int:
        return sum(1 for r in self.jobs.values() if r.submitted is not None)

    @property
    def finished_count(self) -> int:
        return sum(1 for r in self.jobs.values() if r.finished is not None)

    def all_done(self) -> bool:
        """Every Job's Workload was seen Admitted (or Finished, if its admission was not seen)."""
        return self.done_count >= len(self.jobs)


def job_owner_name(wl: Obj) -> str | None:
    """The name of the batch/v1 Job that owns a Workload."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return ref.get("name")
    return None


def throughput(records: Iterable[JobRecord]) -> float | None:
    """Workloads Admitted per second: admitted count / (last admitted - first submitted)."""
    recs = list(records)
    submitted = [r.submitted for r in recs if r.submitted is not None]
    admitted = [r.admitted for r in recs if r.admitted is not None]
    if not submitted or not admitted:
        return None
    span = max(admitted) - min(submitted)
    return len(admitted) / span if span > 0 else None


def latencies(records: Iterable[JobRecord], end: str = "admitted", start: str = "submitted") -> list[float]:
    """`start` -> `end` (JobRecord time fields) in seconds, for Jobs that have both."""
    out = []
    for r in records:
        begin, stop = getattr(r, start), getattr(r, end)
        if begin is not None and stop is not None:
            out.append(max(0.0, stop - begin))
    return out


@dataclass(frozen=True)
class Check:
    name: str
    value: float | None
    limit: float
    kind: str  # "min" (value >= limit) or "max" (value < limit)
    unit: str
    applies: bool = True
    note: str = ""

    @property
    def met(self) -> bool:
        if self.value is None:
            return False
        return self.value >= self.limit if self.kind == "min" else self.value < self.limit

    @property
    def status(self) -> str:
        verdict = "met" if self.met else "NOT met"
        return verdict if self.applies else f"reference only ({verdict}): {self.note}"


@dataclass
class RunResult:
    mode: str  # "dispatch" or "scale-test"
    jobs: int
    rate_target: float  # jobs/s, 0 = as fast as possible
    clients: int
    concurrency: int
    keep_running: bool
    managed_by: str = ""  # "webhook" (our defaulting webhook set it) or "explicit"
    client_budget: str = ""  # the manager's and agents' clientConnection
    submitted: int = 0
    admitted: int = 0
    finished: int = 0  # Workloads seen Finished (kwok completes pods 1-6 s after they start)
    done_unadmitted: int = 0  # seen Finished without their Admitted=True being seen
    not_done: int = 0
    timed_out: bool = False
    submission_s: float | None = None
    submission_rate: float | None = None
    run_s: float | None = None  # first submitted -> last Job done
    throughput_per_s: float | None = None
    to_admitted: Distribution = field(default_factory=Distribution)
    to_workload: Distribution = field(default_factory=Distribution)
    create_call: Distribution = field(default_factory=Distribution)  # the create request's round trip
    stages: dict[str, Distribution] = field(default_factory=dict)
    dispatched_total: float | None = None  # multikueue_workloads_dispatched_total delta (copies)
    admitted_total: float | None = None  # multikueue_workloads_admitted_total delta
    manager_requests: float | None = None  # to the manager cluster's apiserver
    worker_requests: dict[str, float | None] = field(default_factory=dict)  # worker -> requests
    manager_requests_by_resource: dict[str, float] = field(default_factory=dict)  # client method resource
    agent_requests: dict[str, float] = field(default_factory=dict)  # cluster -> the agent's requests
    manager: ProcessFigures | None = None
    agents: dict[str, ProcessFigures] = field(default_factory=dict)
    others: dict[str, ProcessFigures] = field(default_factory=dict)
    harness_cpu_s: float | None = None
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)
    cpus: int = field(default_factory=lambda: os.cpu_count() or 0)
    error: str | None = None

    def per_job(self, value: float | None) -> float | None:
        return None if value is None or not self.submitted else value / self.submitted

    @property
    def fleet_cpu_s(self) -> float | None:
        """CPU of every fleet process (apiservers, etcd, controllers, kwok, agents, manager) in the run."""
        processes = [*([self.manager] if self.manager else []), *self.agents.values(), *self.others.values()]
        values = [p.cpu_s for p in processes if p.cpu_s is not None]
        return sum(values) if values else None

    @property
    def cpu_bound_jobs_per_s(self) -> float | None:
        """Jobs/s this machine's CPUs could carry at the fleet's CPU cost per Job, if nothing else ran."""
        per_job = self.per_job(self.fleet_cpu_s)
        return self.cpus / per_job if per_job else None

    def to_dict(self) -> Obj:
        out = asdict(self)
        out["fleet_cpu_s"] = self.fleet_cpu_s
        out["cpu_bound_jobs_per_s"] = self.cpu_bound_jobs_per_s
        out["checks"] = [{**asdict(c), "met": c.met} for c in checks(self)]
        return out


def checks(result: RunResult) -> list[Check]:
    rate = result.rate_target
    rows = [
        Check(
            "dispatch throughput",
            result.throughput_per_s,
            TARGET_THROUGHPUT_PER_S,
            "min",
            "Jobs/s",
            applies=rate == 0 or rate >= TARGET_THROUGHPUT_PER_S,
            note=f"submissions capped at {rate:g}/s; run with --rate 0",
        ),
        Check(
            "p99 submitted -> Admitted",
            result.to_admitted.p99,
            TARGET_P99_S,
            "max",
            "s",
            applies=rate == TARGET_P99_AT_RATE,
            note=f"the target is for {TARGET_P99_AT_RATE:g} submissions/s",
        ),
    ]
    rss = result.manager.peak_rss_mib if result.manager else None
    rows.append(
        Check(
            "manager peak RSS",
            None if rss is None else rss * MIB / 1e6,
            TARGET_RSS_MB,
            "max",
            "MB",
            applies=result.submitted >= TARGET_RSS_WORKLOADS,
            note=f"the target is for {TARGET_RSS_WORKLOADS:,} Workloads (--scale-test)",
        )
    )
    return rows


# ==============================================================================================
# Reporting (pure)
# ==============================================================================================


def _limit_text(check: Check) -> str:
    return f"{'>=' if check.kind == 'min' else '<'} {check.limit:g} {check.unit}"


Row = tuple[str, str, str, str]  # what, value, target, its status
Target = Callable[[str], tuple[str, str]]


def _dispatch_rows(result: RunResult, target: Target) -> list[Row]:
    """The rows of the submission, the dispatch, its latencies stage by stage and its counters."""
    n = result.submitted
    rate = "as fast as possible" if result.rate_target == 0 else f"{result.rate_target:g}/s"
    rows: list[Row] = [
        (
            "Jobs submitted / admitted seen / finished seen",
            f"{n:,} / {result.admitted:,} / {result.finished:,}",
            "",
            "",
        ),
        (
            f"submission (target {rate})",
            f"{fmt(result.submission_s, 's')}, {fmt(result.submission_rate, 'Jobs/s')}",
            "",
            "",
        ),
        (
            "dispatch throughput (Admitted on the manager)",
            fmt(result.throughput_per_s, "Jobs/s"),
            *target("dispatch throughput"),
        ),
        (
            "submitted -> Admitted p50 / p95 / p99",
            fmt_dist(result.to_admitted),
            *target("p99 submitted -> Admitted"),
        ),
        (
            "submitted -> Admitted mean / max",
            f"{fmt(result.to_admitted.mean, digits=3)} / {fmt(result.to_admitted.max, 's', 3)}",
            "",
            "",
        ),
        ("submitted -> Workload seen p50 / p95 / p99", fmt_dist(result.to_workload), "", ""),
        ("Job create call p50 / p95 / p99", fmt_dist(result.create_call), "", ""),
    ]
    for stage in STAGES:
        d = result.stages.get(stage) or Distribution()
        # The first stage only marks the start: its series never gets observations.
        value = "(the start mark: no observations)" if stage == STAGES[0] and not d.count else fmt_dist(d)
        rows.append((f"stage {stage} p50 / p95 / p99 (n={d.count:,})", value, "", ""))
    rows.append(
        (
            "Workload copies dispatched / checks Ready (counters)",
            f"{fmt(result.dispatched_total, digits=0)} / {fmt(result.admitted_total, digits=0)}",
            "",
            "",
        )
    )
    return rows


def _request_rows(result: RunResult) -> list[Row]:
    """The rows of the API requests per Job, by cluster and by process."""
    rows: list[Row] = []
    rows.append(
        (
            "manager API requests per Job: manager cluster",
            fmt(result.per_job(result.manager_requests), digits=2),
            "",
            "",
        )
    )
    for worker, count in sorted(result.worker_requests.items()):
        value = (
            "n/a (the manager does not count them)" if count is None else fmt(result.per_job(count), digits=2)
        )
        rows.append((f"manager API requests per Job: {worker}", value, "", ""))
    for cluster, count in sorted(result.agent_requests.items()):
        rows.append(
            (f"worker_agent API requests per Job: {cluster}", fmt(result.per_job(count), digits=2), "", "")
        )
    return rows


def _cpu_rows(result: RunResult, target: Target) -> list[Row]:
    """The rows of the processes' CPU and memory, the fleet's and the machine's load."""
    rows: list[Row] = []
    if result.manager is not None:
        m = result.manager
        cpu_ms = None if m.cpu_s is None else m.cpu_s * 1000
        rows.append(
            (
                "manager CPU (user+sys)",
                f"{fmt(m.cpu_s, 's')} ({fmt(result.per_job(cpu_ms), 'ms/Job', 2)})",
                "",
                "",
            )
        )
        rows.append(
            (
                "manager peak RSS (VmRSS every 0.5 s)",
                f"{fmt(m.peak_rss_mib, 'MiB')} (start {fmt(m.rss_start_mib, 'MiB')}, "
                f"VmHWM {fmt(m.hwm_mib, 'MiB')})",
                *target("manager peak RSS"),
            )
        )
    for cluster, a in sorted(result.agents.items()):
        rows.append(
            (
                f"worker_agent {cluster}: CPU / peak RSS",
                f"{fmt(a.cpu_s, 's')} / {fmt(a.peak_rss_mib, 'MiB')}",
                "",
                "",
            )
        )
    if result.others:
        for other in sorted(result.others.values(), key=lambda p: -(p.cpu_s or 0))[:3]:
            rows.append((f"{other.label} CPU (one of the busiest)", fmt(other.cpu_s, "s"), "", ""))
    fleet_ms = None if result.fleet_cpu_s is None else result.fleet_cpu_s * 1000
    rows.append(
        (
            "fleet CPU, all processes (per Job)",
            f"{fmt(result.fleet_cpu_s, 's')} ({fmt(result.per_job(fleet_ms), 'ms/Job', 0)})",
            "",
            "",
        )
    )
    rows.append(
        (
            f"-> Jobs/s {result.cpus} CPUs could carry at that cost",
            fmt(result.cpu_bound_jobs_per_s, "Jobs/s"),
            "",
            "",
        )
    )
    rows.append(("harness CPU (submitter + watch)", fmt(result.harness_cpu_s, "s"), "", ""))
    rows.append(
        (
            "load average 1/5/15 min, start -> end",
            f"{loads(result.load_start)} -> {loads(result.load_end)} on {result.cpus} CPUs",
            "",
            "",
        )
    )
    return rows


def result_rows(result: RunResult) -> list[Row]:
    by_name = {c.name: c for c in checks(result)}

    def target(name: str) -> tuple[str, str]:
        c = by_name[name]
        return _limit_text(c), c.status

    return _dispatch_rows(result, target) + _request_rows(result) + _cpu_rows(result, target)


def format_result(result: RunResult) -> str:
    title = (
        f"== federation {result.mode}: {result.jobs:,} Jobs, "
        f"{'rate unlimited' if result.rate_target == 0 else f'{result.rate_target:g} Jobs/s'}, "
        f"{result.clients} clients x {result.concurrency} in flight, "
        f"spec.managedBy by {result.managed_by or '?'}"
    )
    lines = [title, f"   client budget of the manager and the worker_agents: {result.client_budget or '?'}"]
    if result.error:
        lines.append(f"   ERROR: {result.error}")
    if result.timed_out:
        lines.append(f"   TIMED OUT: {result.not_done:,} Jobs not seen Admitted")
    lines.append(table(result_rows(result), ("figure", "value", "target", "status")))
    return "\n".join(lines)
