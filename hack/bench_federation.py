#!/usr/bin/env python3
"""Federation dispatch benchmark: batch/v1 Jobs submitted on the manager cluster until MultiKueue
has them Admitted, through a local fleet of real clusters (hack/localfleet.py).

It starts its own fleet (`localfleet.py --dir /dev/shm/kueue-federation-bench-fleet up --agents
--manager --setup-multikueue`, fake nodes sized so that each worker fits every Job at once) and always
tears it down, or uses a running one (--reuse-fleet DIR). Then:

  submit   N Jobs (1 pod, 100m cpu / 10Mi, suspend, queue user-queue in namespace default) at a
           target rate from a pool of async clients; the submitted time is when the create returned.
  watch    the manager's Workloads: submitted -> `Admitted=True` on the manager (client-side clock).
  read     the manager's /metrics before and after (dispatch counters, the per-stage histogram
           kueue_federation_multikueue_dispatch_stage_seconds, rest_client_requests_total by host:
           the manager cluster and each worker), the worker_agents' request counters, and /proc for
           the CPU seconds and peak RSS of the manager, every worker_agent and the fleet's other
           processes.

It prints dispatch throughput, p50/p95/p99 of submitted -> Admitted and of each dispatch stage,
API requests per Job, CPU and peak RSS against the targets (>= 100 Jobs/s; p99 under 2 s at 50
submissions/s; manager RSS under 300 MB with 10,000 Workloads, --scale-test 10000).

  .venv/bin/python hack/bench_federation.py [--jobs 1000] [--rate 50] [--json PATH]
  .venv/bin/python hack/bench_federation.py --scale-test 10000
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
            sys.exit("bench-federation: run `make venv` first (the project's .venv is missing or incomplete)")
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
import secrets  # noqa: E402
import signal  # noqa: E402
import ssl  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from collections.abc import Iterable, Mapping, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

from bench_lws_mix import format_lws_mix, run_lws_mix  # noqa: E402

LOCALFLEET_PATH = REPO / "hack" / "localfleet.py"
DEFAULT_RUN_DIR = Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / "kueue-federation-bench-fleet"
Obj = dict[str, Any]

# What every benchmark Job asks for, and where it goes (the objects of `localfleet setup-multikueue`).
JOB_CPU_MILLI = 100
JOB_MEMORY_MI = 10
JOB_IMAGE = "registry.k8s.io/pause:3.10"
NAMESPACE = "default"
LOCAL_QUEUE = "user-queue"
ADMISSION_CHECK = "sample-multikueue"
CLUSTER_QUEUE = "cluster-queue"
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
LABEL_BENCH_RUN = "kueue-federation.dev/bench-run"
KEEP_RUNNING_ANNOTATION = "kueue-federation.dev/keep-running"
# localfleet's state.json component names.
MANAGER_COMPONENT = "manager"
AGENT_COMPONENT = "worker-agent"
UPSTREAM_COMPONENT = "upstream-kueue"  # upstream Kueue's process (`up --upstream-kueue CLUSTER`)
UPSTREAM_COMPONENT_STATE = "upstreamKueue"  # its entry under clusters.<name> in state.json

# The manager's metrics (manager/metrics.py) and client-go's request counter.
METRIC_DISPATCHED = "multikueue_workloads_dispatched_total"
METRIC_ADMITTED = "multikueue_workloads_admitted_total"
METRIC_STAGE = "kueue_federation_multikueue_dispatch_stage_seconds"
METRIC_REQUESTS = "rest_client_requests_total"
METRIC_REQUESTS_BY_CLIENT = (
    "kueue_worker_agent_api_requests_total"  # client label: main, events, worker/<name>
)
STAGES = ("quota_reserved", "dispatched", "remote_admitted", "check_ready", "status_mirrored")

# The targets (issue: federation dispatch performance).
TARGET_THROUGHPUT_PER_S = 100.0
TARGET_P99_S = 2.0
TARGET_P99_AT_RATE = 50.0
TARGET_RSS_MB = 300.0  # decimal megabytes: 286.1 MiB
TARGET_RSS_WORKLOADS = 10_000
MIB = 1024 * 1024
# Kueue's clientConnection defaults (worker_agent/config.py), per API resource.
DEFAULT_CLIENT_QPS = 20.0
DEFAULT_CLIENT_BURST = 30


def say(msg: str) -> None:
    print(f"bench-federation: {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A failure with a message that says what went wrong and where to look."""


# ==============================================================================================
# Prometheus text, histograms and percentiles (pure)
# ==============================================================================================


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if match is None:
            if text[pos:].strip(" ,"):
                raise ValueError(f"bad label set {{{text}}}")
            break
        labels[match.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group(2))
        pos = match.end()
    return labels


def parse_prometheus_text(text: str) -> list[Sample]:
    """Every sample of a text exposition (version 0.0.4); comments and malformed lines are skipped."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            labels = _parse_labels(match.group(2) or "")
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append(Sample(match.group(1), labels, value))
    return samples


def _matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def metric_sum(samples: Iterable[Sample], name: str, **selector: str) -> float:
    """Sum of the samples of `name` whose labels include `selector` (0 when there are none)."""
    return sum(s.value for s in samples if s.name == name and _matches(s.labels, selector))


def metric_by_label(samples: Iterable[Sample], name: str, label: str, **selector: str) -> dict[str, float]:
    """Samples of `name` summed per value of `label`."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name == name and _matches(s.labels, selector):
            key = s.labels.get(label, "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def counter_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after - before per key; a key whose counter went down (the process restarted, a worker
    reconnected) counts from 0."""
    out = {}
    for key, value in after.items():
        previous = before.get(key, 0.0)
        out[key] = value - previous if value >= previous else value
    return out


Buckets = list[tuple[float, float]]  # (upper bound `le`, cumulative count), sorted by le


def histogram_buckets(samples: Iterable[Sample], name: str, **selector: str) -> Buckets:
    """The cumulative buckets of histogram `name` (its `_bucket` series), summed over the label sets
    that match `selector`."""
    by_le: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket" and _matches(s.labels, selector) and "le" in s.labels:
            le = float(s.labels["le"])
            by_le[le] = by_le.get(le, 0.0) + s.value
    return sorted(by_le.items())


def buckets_delta(before: Buckets, after: Buckets) -> Buckets:
    """The observations between two scrapes, bucket by bucket."""
    previous = dict(before)
    return [(le, max(0.0, count - previous.get(le, 0.0))) for le, count in after]


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """Prometheus's histogram_quantile: linear interpolation inside the bucket that holds rank q*n.
    The first bucket starts at 0; a rank in the +Inf bucket gives the largest finite bound. None
    without observations."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    if not buckets or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for index, (bound, count) in enumerate(buckets):
        if count >= rank and count > previous_count:
            if math.isinf(bound):
                return buckets[index - 1][0] if index > 0 else None
            if index == 0 and bound <= 0:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count
            )
        previous_bound, previous_count = bound, count
    return buckets[-2][0] if len(buckets) > 1 else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) of `values`, interpolated between closest ranks (numpy's default)."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Distribution:
    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


def distribution(values: Sequence[float]) -> Distribution:
    if not values:
        return Distribution()
    return Distribution(
        count=len(values),
        mean=sum(values) / len(values),
        p50=percentile(values, 0.5),
        p95=percentile(values, 0.95),
        p99=percentile(values, 0.99),
        max=max(values),
    )


def histogram_distribution(buckets: Buckets, total_seconds: float | None = None) -> Distribution:
    """Count, mean (from the histogram's _sum, when given) and estimated quantiles."""
    count = int(buckets[-1][1]) if buckets else 0
    if count == 0:
        return Distribution()
    return Distribution(
        count=count,
        mean=None if total_seconds is None else total_seconds / count,
        p50=histogram_quantile(0.5, buckets),
        p95=histogram_quantile(0.95, buckets),
        p99=histogram_quantile(0.99, buckets),
    )


# ==============================================================================================
# Fleet sizing (pure)
# ==============================================================================================


@dataclass(frozen=True)
class NodeSize:
    nodes: int
    cpu: str
    memory: str
    pods: str


def node_size(
    jobs: int, nodes: int = 4, cpu_milli: int = JOB_CPU_MILLI, memory_mi: int = JOB_MEMORY_MI
) -> NodeSize:
    """Fake nodes such that ONE worker fits all `jobs` at once (the manager may send them all to the
    same worker), with 10 % headroom and never below localfleet's defaults (8 CPU, 32Gi, 110 pods).
    setup-multikueue gives each worker's ClusterQueue its nodes' total and the manager's the sum."""
    if jobs < 1 or nodes < 1:
        raise ValueError("jobs and nodes must be at least 1")
    per_node = math.ceil(jobs * 1.1 / nodes)
    cpu = max(8, math.ceil(per_node * cpu_milli / 1000))
    memory_gi = max(32, math.ceil(per_node * memory_mi / 1024))
    pods = max(110, per_node + 10)
    return NodeSize(nodes, str(cpu), f"{memory_gi}Gi", str(pods))


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


@dataclass
class ProcessFigures:
    label: str  # cluster/component
    pid: int
    cpu_s: float | None = None  # user+sys during the run
    peak_rss_mib: float | None = None  # highest VmRSS sampled during the run
    rss_start_mib: float | None = None
    hwm_mib: float | None = None  # VmHWM at the end: the peak since the process started


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


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


def fmt_dist(d: Distribution, unit: str = "s", digits: int = 3) -> str:
    if not d.count:
        return "n/a (no observations)"
    return f"{fmt(d.p50, digits=digits)} / {fmt(d.p95, digits=digits)} / {fmt(d.p99, digits=digits)} {unit}"


def loads(values: Iterable[float]) -> str:
    return "/".join(f"{x:.2f}" for x in values)


def _limit_text(check: Check) -> str:
    return f"{'>=' if check.kind == 'min' else '<'} {check.limit:g} {check.unit}"


def table(rows: Sequence[tuple[str, str, str, str]], header: tuple[str, str, str, str]) -> str:
    """A plain-text table: columns padded to the widest cell, a rule under the header."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(4)]
    widths[3] = 0  # the last column is not padded
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * max(w, len(header[i])) for i, w in enumerate(widths)).rstrip())
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def result_rows(result: RunResult) -> list[tuple[str, str, str, str]]:
    by_name = {c.name: c for c in checks(result)}

    def target(name: str) -> tuple[str, str]:
        c = by_name[name]
        return _limit_text(c), c.status

    n = result.submitted
    rate = "as fast as possible" if result.rate_target == 0 else f"{result.rate_target:g}/s"
    rows: list[tuple[str, str, str, str]] = [
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


# ==============================================================================================
# /proc
# ==============================================================================================


def read_status_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a live process, in MiB ({} when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) / 1024
    return out


def read_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ProcessSampler:
    """CPU at start/stop and VmRSS every `interval` for the fleet's processes."""

    def __init__(self, processes: Sequence[tuple[str, int]], interval: float = 0.5) -> None:
        self.figures = {label: ProcessFigures(label, pid) for label, pid in processes}
        self.interval = interval
        self._cpu_start: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        for f in self.figures.values():
            rss = read_status_mib(f.pid).get("VmRSS")
            if rss is not None:
                f.peak_rss_mib = max(f.peak_rss_mib or 0.0, rss)

    def start(self) -> None:
        for label, f in self.figures.items():
            cpu = read_cpu_seconds(f.pid)
            if cpu is not None:
                self._cpu_start[label] = cpu
            f.rss_start_mib = read_status_mib(f.pid).get("VmRSS")
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="proc-sampler")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sample()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()
        for label, f in self.figures.items():
            cpu = read_cpu_seconds(f.pid)
            if cpu is not None and label in self._cpu_start:
                f.cpu_s = cpu - self._cpu_start[label]
            f.hwm_mib = read_status_mib(f.pid).get("VmHWM")

    def peak(self, label: str) -> float | None:
        f = self.figures.get(label)
        return f.peak_rss_mib if f else None


# ==============================================================================================
# The fleet (hack/localfleet.py)
# ==============================================================================================


class Fleet:
    """A fleet's state.json: processes, clusters, URLs. `start()` runs `localfleet up` in a private
    directory; `stop()` runs `down` there (only for a fleet this process started)."""

    def __init__(self, run_dir: Path, owned: bool) -> None:
        self.run_dir = run_dir
        self.owned = owned
        self.started = False
        self.state: Obj = {}

    def _localfleet(self, *args: str, check: bool = True) -> None:
        cmd = [sys.executable, str(LOCALFLEET_PATH), "--dir", str(self.run_dir), *args]
        res = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=sys.stderr)
        if check and res.returncode != 0:
            raise BenchError(
                f"`{' '.join(cmd[1:])}` failed (exit {res.returncode}); logs are in {self.run_dir}"
            )

    def start(
        self,
        workers: int,
        size: NodeSize,
        client_qps: float | None = None,
        client_burst: int | None = None,
        upstream_kueue: Sequence[str] = (),
        extra_up_args: Sequence[str] = (),
    ) -> None:
        """`upstream_kueue`: clusters that run upstream Kueue instead of ours (`up --upstream-kueue`);
        `extra_up_args`: more `localfleet up` flags (hack/bench_scale.py: --shared-etcd --light-workers)."""
        if self.run_dir.exists():
            raise BenchError(
                f"{self.run_dir} already exists: another benchmark may be running there (if not, "
                f"`python3 hack/localfleet.py --dir {self.run_dir} down` removes it)"
            )
        say(
            f"starting a fleet in {self.run_dir}: {workers} workers x {size.nodes} nodes of "
            f"{size.cpu} CPU / {size.memory} / {size.pods} pods"
        )
        self.started = True
        started = time.monotonic()
        self._localfleet(
            "up",
            "--agents",
            "--manager",
            "--setup-multikueue",
            "--no-smoke",
            "--workers",
            str(workers),
            "--nodes",
            str(size.nodes),
            "--node-cpu",
            size.cpu,
            "--node-memory",
            size.memory,
            "--node-pods",
            size.pods,
            *(["--client-qps", f"{client_qps:g}"] if client_qps is not None else []),
            *(["--client-burst", str(client_burst)] if client_burst is not None else []),
            *(arg for cluster in upstream_kueue for arg in ("--upstream-kueue", cluster)),
            *extra_up_args,
        )
        say(f"fleet up in {time.monotonic() - started:.0f}s")
        self.load()

    def load(self) -> None:
        try:
            self.state = json.loads((self.run_dir / "state.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BenchError(f"no fleet state in {self.run_dir}: {e}") from e
        if self.state.get("status") != "up":
            raise BenchError(f"the fleet in {self.run_dir} is {self.state.get('status')!r}, not up")
        manager = self.clusters.get("manager", {})
        if MANAGER_COMPONENT not in manager and UPSTREAM_COMPONENT_STATE not in manager:
            raise BenchError(
                f"the fleet in {self.run_dir} runs no manager: start it with `up --agents --manager`"
            )

    def save_logs(self, to: Path) -> None:
        """Our processes' logs (manager, worker_agents) outlive the run directory `down` removes."""
        if not self.state:  # `up` failed before state.json was read
            with contextlib.suppress(OSError, json.JSONDecodeError):
                self.state = json.loads((self.run_dir / "state.json").read_text())
        for p in self.state.get("processes") or ():
            if p.get("component") in (MANAGER_COMPONENT, AGENT_COMPONENT, UPSTREAM_COMPONENT):
                source = Path(p["log"])
                with contextlib.suppress(OSError):
                    (to / f"{p['cluster']}-{p['component']}.log").write_bytes(source.read_bytes())

    def stop(self, save_logs_to: Path | None = None) -> None:
        if self.owned and self.started:
            if save_logs_to is not None:
                self.save_logs(save_logs_to)
            say(f"tearing the fleet down ({self.run_dir})")
            self._localfleet("down", check=False)
            self.started = False

    def client_budget(self) -> str:
        """The manager's clientConnection (the agents get the same from localfleet)."""
        import yaml

        try:
            path = self.clusters["manager"][MANAGER_COMPONENT]["config"]
            client = (yaml.safe_load(Path(path).read_text()) or {}).get("clientConnection") or {}
        except (KeyError, OSError, yaml.YAMLError):
            return "unknown"
        qps, burst = client.get("qps"), client.get("burst")
        if qps is None and burst is None:
            return f"QPS {DEFAULT_CLIENT_QPS:g} / burst {DEFAULT_CLIENT_BURST} (Kueue's defaults)"
        return (
            f"QPS {qps if qps is not None else DEFAULT_CLIENT_QPS:g} / burst {burst or DEFAULT_CLIENT_BURST}"
        )

    @property
    def clusters(self) -> dict[str, Obj]:
        return self.state.get("clusters") or {}

    @property
    def workers(self) -> list[str]:
        return [name for name, c in self.clusters.items() if c.get("role") == "worker"]

    @property
    def manager_kubeconfig(self) -> str:
        return self.clusters["manager"]["kubeconfig"]

    @property
    def manager_metrics_url(self) -> str | None:
        """Our manager's /metrics (None when upstream Kueue runs the manager cluster)."""
        ours = self.clusters["manager"].get(MANAGER_COMPONENT)
        return ours["metrics"] if ours else None

    @property
    def manager_component(self) -> str:
        """The process in charge of MultiKueue on the manager cluster: ours or upstream's."""
        return MANAGER_COMPONENT if MANAGER_COMPONENT in self.clusters["manager"] else UPSTREAM_COMPONENT

    def agent_metrics_urls(self) -> dict[str, str]:
        return {name: c["agent"]["metrics"] for name, c in self.clusters.items() if "agent" in c}

    def metrics_token(self, cluster: str) -> str | None:
        """The bearer token the fleet's metrics reader scrapes that cluster's /metrics with
        (hack/localfleet.py writes it at `up`; our endpoints and upstream's are HTTPS and ask for one)."""
        path = self.clusters.get(cluster, {}).get("metricsToken")
        try:
            return Path(path).read_text().strip() if path else None
        except OSError:
            return None

    def host_of(self, cluster: str) -> str:
        """`127.0.0.1:<port>`: the host label rest_client_requests_total gives that apiserver."""
        return self.clusters[cluster]["server"].split("://", 1)[-1].rstrip("/")

    def processes(self) -> list[tuple[str, int]]:
        """Each program's pid (localfleet supervises them: the supervisor's status file has it)."""
        found = []
        for p in self.state.get("processes") or ():
            pid = p["pid"]
            if p.get("status"):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    pid = json.loads(Path(p["status"]).read_text())["pid"] or pid
            found.append((f"{p['cluster']}/{p['component']}", pid))
        return found

    def log_tail(self, cluster: str, component: str, lines: int = 30) -> str:
        path = self.run_dir / cluster / f"{component}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {path})"

    def dead_processes(self) -> list[str]:
        return [label for label, pid in self.processes() if read_cpu_seconds(pid) is None]


def scrape(url: str | None, save_to: Path | None = None, bearer_token: str | None = None) -> list[Sample]:
    """One /metrics read ([] without a URL or on failure), with `bearer_token` when given. An HTTPS
    endpoint on 127.0.0.1 (ours: self-signed; upstream Kueue's: the fleet CA's) is not verified."""
    if url is None:
        return []
    request = urllib.request.Request(url)
    context = None
    if bearer_token is not None:
        request.add_header("Authorization", f"Bearer {bearer_token}")
    if url.startswith("https://"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            text = resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        say(f"could not read {url}: {e}")
        return []
    if save_to is not None:
        save_to.write_text(text)
    return parse_prometheus_text(text)


# ==============================================================================================
# The run: submitter and watch
# ==============================================================================================


def job_object(name: str, run_id: str, *, keep_running: bool, managed_by: bool) -> Obj:
    template_meta: Obj = {"annotations": {KEEP_RUNNING_ANNOTATION: "true"}} if keep_running else {}
    spec: Obj = {
        "parallelism": 1,
        "completions": 1,
        "suspend": True,
        "template": {
            "metadata": template_meta,
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": JOB_IMAGE,
                        "resources": {
                            "requests": {"cpu": f"{JOB_CPU_MILLI}m", "memory": f"{JOB_MEMORY_MI}Mi"}
                        },
                    }
                ],
            },
        },
    }
    if managed_by:
        spec["managedBy"] = MANAGED_BY_MULTIKUEUE
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {LABEL_QUEUE_NAME: LOCAL_QUEUE, LABEL_BENCH_RUN: run_id},
        },
        "spec": spec,
    }


def job_names(run_id: str, count: int) -> list[str]:
    width = len(str(max(count - 1, 0)))
    return [f"fb-{run_id}-{i:0{width}d}" for i in range(count)]


def _condition_true(obj: Obj | None, ctype: str) -> bool:
    return any(
        c.get("type") == ctype and c.get("status") == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or ()
    )


class FederationRun:
    def __init__(self, fleet: Fleet, args: argparse.Namespace, mode: str, jobs: int, work_dir: Path) -> None:
        self.fleet = fleet
        self.args = args
        self.mode = mode
        self.jobs = jobs
        self.work_dir = work_dir
        self.run_id = secrets.token_hex(3)
        self.names = job_names(self.run_id, jobs)
        self.recorder = Recorder(self.names)
        self.warmup_name = f"fb-{self.run_id}-warmup"
        self.warmup = Recorder([self.warmup_name])
        self.explicit_managed_by = bool(args.set_managed_by)
        self.now = time.monotonic
        self.errors: list[str] = []
        self.first_submit: float | None = None

    # -- clients and the watch ---------------------------------------------------------------

    async def _open(self) -> None:
        from kube_runtime import api
        from kube_runtime.client import KubeClient
        from kube_runtime.informer import Informer

        path = self.fleet.manager_kubeconfig
        # No client-side rate limit: the submitter's pace is --rate, the watch is one stream.
        self.clients = [await KubeClient.from_kubeconfig_file(path) for _ in range(self.args.clients)]
        self.watch_client = await KubeClient.from_kubeconfig_file(path)
        self.informer = Informer(self.watch_client, api.WORKLOAD, namespace=NAMESPACE, name="bench-workloads")
        self.informer.add_handler(
            on_add=self._on_workload, on_update=lambda _old, new: self._on_workload(new)
        )
        self.informer.start()
        async with asyncio.timeout(60):
            await self.informer.wait_synced()

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self.informer.stop()
        for client in [*self.clients, self.watch_client]:
            with contextlib.suppress(Exception):
                await client.close()

    def _on_workload(self, wl: Obj) -> None:
        now = self.now()
        if self.recorder.observe_workload(wl, now) is None:
            self.warmup.observe_workload(wl, now)

    # -- readiness and warm-up ---------------------------------------------------------------

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        """The AdmissionCheck and every MultiKueueCluster Active on the manager cluster."""
        from kube_runtime import api
        from kube_runtime.client import KubeClientError

        client = self.clients[0]
        deadline = self.now() + timeout_s
        waiting = "?"
        while self.now() < deadline:
            try:
                check = await client.get(api.ADMISSION_CHECK, ADMISSION_CHECK)
                clusters, _ = await client.list(api.MULTIKUEUE_CLUSTER)
                cq = await client.get(api.CLUSTER_QUEUE, CLUSTER_QUEUE)
                inactive = [c["metadata"]["name"] for c in clusters if not _condition_true(c, "Active")]
                if not _condition_true(check, "Active"):
                    waiting = f"AdmissionCheck {ADMISSION_CHECK} Active"
                elif not clusters or inactive:
                    waiting = f"MultiKueueClusters Active ({', '.join(inactive) or 'none yet'})"
                elif not _condition_true(cq, "Active"):
                    waiting = f"ClusterQueue {CLUSTER_QUEUE} Active"
                else:
                    return
            except KubeClientError as e:
                waiting = f"the MultiKueue objects ({e})"
            await asyncio.sleep(0.5)
        raise BenchError(
            f"timed out after {timeout_s:.0f}s waiting for {waiting}; manager log tail:\n"
            f"{self.fleet.log_tail('manager', self.fleet.manager_component)}"
        )

    async def run_warmup(self, timeout_s: float = 120.0) -> None:
        """One Job through the whole path first: checks the setup and whether our webhook sets managedBy."""
        from kube_runtime import api

        body = job_object(
            self.warmup_name, self.run_id, keep_running=False, managed_by=self.explicit_managed_by
        )
        created = await self.clients[0].create(api.JOB, body)
        self.warmup.submitted(self.warmup_name, self.now(), created)
        rec = self.warmup.jobs[self.warmup_name]
        if not self.explicit_managed_by and rec.managed_by != MANAGED_BY_MULTIKUEUE:
            say(
                f"the webhook left spec.managedBy {rec.managed_by!r} on the warm-up Job: setting "
                f"{MANAGED_BY_MULTIKUEUE!r} explicitly from now on"
            )
            self.explicit_managed_by = True
            await self.clients[0].delete(
                api.JOB, self.warmup_name, NAMESPACE, propagation_policy="Background"
            )
            self.warmup = Recorder([self.warmup_name])
            body = job_object(self.warmup_name, self.run_id, keep_running=False, managed_by=True)
            await asyncio.sleep(1)
            created = await self.clients[0].create(api.JOB, body)
            self.warmup.submitted(self.warmup_name, self.now(), created)
        deadline = self.now() + timeout_s
        while not self.warmup.all_done():
            if self.now() > deadline:
                raise BenchError(
                    f"the warm-up Job {NAMESPACE}/{self.warmup_name} was not Admitted "
                    f"within {timeout_s:.0f}s; "
                    f"manager log tail:\n{self.fleet.log_tail('manager', self.fleet.manager_component)}"
                )
            await asyncio.sleep(0.1)
        rec = self.warmup.jobs[self.warmup_name]
        assert rec.submitted is not None
        say(
            f"warm-up Job Admitted {((rec.admitted or rec.finished or 0) - rec.submitted):.2f}s after "
            "its submission"
        )

    # -- the submitter -----------------------------------------------------------------------

    async def _create(self, index: int) -> None:
        from kube_runtime import api
        from kube_runtime.client import AlreadyExists, ConnectionLost

        name = self.names[index]
        body = job_object(
            name, self.run_id, keep_running=self.args.keep_running, managed_by=self.explicit_managed_by
        )
        client = self.clients[index % len(self.clients)]
        started = self.now()
        for attempt in range(1, 6):
            try:
                created = await client.create(api.JOB, body)
                break
            except AlreadyExists:
                if attempt == 1:
                    raise
                created = body  # an earlier attempt got through before its connection broke
                break
            except ConnectionLost:
                if attempt == 5:
                    raise
                await asyncio.sleep(0.2 * attempt)
        self.recorder.submitted(name, self.now(), created, started)

    async def submit(self, rate: float) -> tuple[float, float]:
        """Create every Job, the i-th at start + i/rate (rate 0: as fast as the in-flight limit
        allows). Returns (first submission start, last create returned)."""
        limit = asyncio.Semaphore(self.args.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []

        async def one(index: int) -> None:
            try:
                await self._create(index)
            except Exception as e:  # recorded; the run goes on without this Job
                failures.append(e)
            finally:
                limit.release()

        start = self.first_submit = self.now()
        for index in range(self.jobs):
            if rate > 0:
                delay = start + index / rate - self.now()
                if delay > 0:
                    await asyncio.sleep(delay)
            await limit.acquire()
            task = asyncio.get_running_loop().create_task(one(index))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
        if failures:
            self.errors.append(f"{len(failures)} creates failed, first: {failures[0]!r}")
            say(f"{len(failures)} Job creates failed; first: {failures[0]!r}")
        return start, self.now()

    # -- the whole run -----------------------------------------------------------------------

    def write_jobs_csv(self, path: Path, origin: float) -> None:
        """One line per Job: its times in seconds since the first submission started."""
        columns = ("create_started", "submitted", "workload_seen", "admitted", "finished")

        def cell(value: float | None) -> str:
            return "" if value is None else f"{value - origin:.3f}"

        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["job", *columns, "managed_by"])
            for rec in self.recorder.jobs.values():
                out.writerow([rec.name, *(cell(getattr(rec, c)) for c in columns), rec.managed_by or ""])

    async def cleanup_jobs(self) -> None:
        """On a reused fleet: delete this run's Jobs (their Workloads go with them)."""
        try:
            await self.clients[0].request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
                params={
                    "labelSelector": f"{LABEL_BENCH_RUN}={self.run_id}",
                    "propagationPolicy": "Background",
                },
                request_timeout=120,
            )
            say(f"deleted this run's Jobs (label {LABEL_BENCH_RUN}={self.run_id})")
        except Exception as e:
            say(f"could not delete this run's Jobs: {e!r}")

    def _progress(self, sampler: ProcessSampler, started: float) -> str:
        rss = sampler.peak(f"manager/{MANAGER_COMPONENT}")
        return (
            f"[{self.now() - started:6.1f}s] submitted {self.recorder.submitted_count:,}/{self.jobs:,}, "
            f"Admitted {self.recorder.admitted_count:,}, finished {self.recorder.finished_count:,}, "
            f"manager peak RSS {fmt(rss, 'MiB')}, load {os.getloadavg()[0]:.2f}"
        )

    async def run(self) -> RunResult:
        args = self.args
        rate = args.rate
        result = RunResult(
            mode=self.mode,
            jobs=self.jobs,
            rate_target=rate,
            clients=args.clients,
            concurrency=args.concurrency,
            keep_running=args.keep_running,
            client_budget=self.fleet.client_budget(),
        )
        cpu0 = time.process_time()
        sampler = ProcessSampler(self.fleet.processes(), interval=0.5)
        submit_task: asyncio.Task[tuple[float, float]] | None = None
        await self._open()
        try:
            await self.wait_ready()
            await self.run_warmup()
            result.managed_by = "explicit" if self.explicit_managed_by else "webhook"
            manager_url = self.fleet.manager_metrics_url
            agent_urls = self.fleet.agent_metrics_urls()
            manager_token = self.fleet.metrics_token("manager")
            before = await asyncio.to_thread(
                scrape, manager_url, self.work_dir / "manager.before.metrics.txt", manager_token
            )
            agents_before = {
                c: await asyncio.to_thread(
                    scrape, u, self.work_dir / f"{c}-agent.before.metrics.txt", self.fleet.metrics_token(c)
                )
                for c, u in agent_urls.items()
            }
            result.load_start = list(os.getloadavg())
            sampler.start()
            say(
                f"submitting {self.jobs:,} Jobs ({'unlimited rate' if rate == 0 else f'{rate:g}/s'}), "
                f"run {self.run_id}"
            )
            submit_task = asyncio.get_running_loop().create_task(self.submit(rate), name="submitter")
            started = self.now()
            next_progress = started + args.progress_every
            timeout_at: float | None = None
            next_liveness = started
            while True:
                if submit_task.done():
                    submit_task.result()  # a crash of the submitter itself ends the run
                    if timeout_at is None:
                        timeout_at = self.now() + args.timeout
                if submit_task.done() and self.recorder.done_count >= self.recorder.submitted_count:
                    break
                if timeout_at is not None and self.now() > timeout_at:
                    result.timed_out = True
                    say(f"timed out {args.timeout:.0f}s after the last submission")
                    break
                dead = self.fleet.dead_processes() if self.now() >= next_liveness else []
                next_liveness = max(next_liveness, self.now() + 1.0)
                if dead:
                    raise BenchError(
                        f"fleet processes exited: {', '.join(dead)}; manager log tail:\n"
                        f"{self.fleet.log_tail('manager', self.fleet.manager_component)}"
                    )
                if self.now() >= next_progress:
                    say(self._progress(sampler, started))
                    next_progress += args.progress_every
                await asyncio.sleep(0.1)
            say(self._progress(sampler, started))
            await sampler.stop()
            result.load_end = list(os.getloadavg())
            first_submit, last_submit = submit_task.result()
            after = await asyncio.to_thread(
                scrape, manager_url, self.work_dir / "manager.after.metrics.txt", manager_token
            )
            agents_after = {
                c: await asyncio.to_thread(
                    scrape, u, self.work_dir / f"{c}-agent.after.metrics.txt", self.fleet.metrics_token(c)
                )
                for c, u in agent_urls.items()
            }
            self._fill(result, before, after, agents_before, agents_after, sampler, first_submit, last_submit)
        except BenchError as e:
            result.error = str(e)
            say(f"run failed: {e}")
        finally:
            if submit_task is not None and not submit_task.done():
                submit_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await submit_task
            if self.first_submit is not None:
                with contextlib.suppress(OSError):
                    self.write_jobs_csv(self.work_dir / "jobs.csv", self.first_submit)
            if not self.fleet.owned and not args.keep_jobs:
                await self.cleanup_jobs()
            await self._close()
            result.harness_cpu_s = time.process_time() - cpu0
            if self.errors and not result.error:
                result.error = "; ".join(self.errors)
        return result

    def _fill(
        self,
        result: RunResult,
        before: list[Sample],
        after: list[Sample],
        agents_before: dict[str, list[Sample]],
        agents_after: dict[str, list[Sample]],
        sampler: ProcessSampler,
        first_submit: float,
        last_submit: float,
    ) -> None:
        records = list(self.recorder.jobs.values())
        result.submitted = self.recorder.submitted_count
        result.admitted = self.recorder.admitted_count
        result.finished = sum(1 for r in records if r.finished is not None)
        result.done_unadmitted = sum(1 for r in records if r.finished is not None and r.admitted is None)
        result.not_done = sum(1 for r in records if r.finished is None and r.admitted is None)
        result.submission_s = last_submit - first_submit
        if result.submission_s > 0:
            result.submission_rate = result.submitted / result.submission_s
        done = [t for r in records for t in (r.admitted or r.finished,) if t is not None]
        if done:
            result.run_s = max(done) - first_submit
        result.throughput_per_s = throughput(records)
        result.to_admitted = distribution(latencies(records, "admitted"))
        result.to_workload = distribution(latencies(records, "workload_seen"))
        result.create_call = distribution(latencies(records, "submitted", start="create_started"))
        for stage in STAGES:
            buckets = buckets_delta(
                histogram_buckets(before, METRIC_STAGE, stage=stage),
                histogram_buckets(after, METRIC_STAGE, stage=stage),
            )
            total = metric_sum(after, f"{METRIC_STAGE}_sum", stage=stage) - metric_sum(
                before, f"{METRIC_STAGE}_sum", stage=stage
            )
            result.stages[stage] = histogram_distribution(buckets, total)
        if after:
            result.dispatched_total = metric_sum(after, METRIC_DISPATCHED) - metric_sum(
                before, METRIC_DISPATCHED
            )
            result.admitted_total = metric_sum(after, METRIC_ADMITTED) - metric_sum(before, METRIC_ADMITTED)
            by_host = counter_delta(
                metric_by_label(before, METRIC_REQUESTS, "host"),
                metric_by_label(after, METRIC_REQUESTS, "host"),
            )
            result.manager_requests = by_host.get(self.fleet.host_of("manager"), 0.0)
            for worker in self.fleet.workers:
                host = self.fleet.host_of(worker)
                result.worker_requests[worker] = by_host.get(host)

            def by_resource(samples: list[Sample]) -> dict[str, float]:
                out: dict[str, float] = {}
                for s in samples:
                    if s.name == METRIC_REQUESTS_BY_CLIENT:
                        key = f"{s.labels.get('client')} {s.labels.get('method')} {s.labels.get('resource')}"
                        out[key] = out.get(key, 0.0) + s.value
                return out

            result.manager_requests_by_resource = {
                k: v for k, v in sorted(counter_delta(by_resource(before), by_resource(after)).items()) if v
            }
        for cluster, samples in agents_after.items():
            if samples:
                result.agent_requests[cluster] = metric_sum(samples, METRIC_REQUESTS) - metric_sum(
                    agents_before.get(cluster) or [], METRIC_REQUESTS
                )
        for label, figures in sampler.figures.items():
            cluster, _, component = label.partition("/")
            if component == MANAGER_COMPONENT:
                result.manager = figures
            elif component == AGENT_COMPONENT:
                result.agents[cluster] = figures
            else:
                result.others[label] = figures


# ==============================================================================================
# main
# ==============================================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_federation", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=1000, help="Jobs to submit (default 1000)")
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="submissions per second, 0 = as fast as possible (default 50; 0 with --scale-test)",
    )
    p.add_argument(
        "--scale-test",
        type=int,
        metavar="N",
        help=f"measure the manager's RSS with N Workloads on the manager (target: under "
        f"{TARGET_RSS_MB:g} MB at {TARGET_RSS_WORKLOADS:,})",
    )
    p.add_argument(
        "--clients", type=int, default=4, help="API clients the submitter spreads creates over (default 4)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=100,
        help="creates in flight at most (default 100: 50/s with 2 s per create on a busy machine)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait after the last submission (default 600; 3600 with --scale-test)",
    )
    p.add_argument(
        "--keep-running",
        action="store_true",
        help=f"annotate the pods {KEEP_RUNNING_ANNOTATION}: kwok never completes them",
    )
    p.add_argument(
        "--set-managed-by",
        action="store_true",
        help=f"set spec.managedBy {MANAGED_BY_MULTIKUEUE} in the Jobs instead of leaving it to our webhook",
    )
    p.add_argument(
        "--workers", type=int, default=2, help="worker clusters of the fleet it starts (default 2)"
    )
    p.add_argument(
        "--nodes", type=int, default=4, help="fake nodes per worker (default 4; sized to fit all Jobs)"
    )
    p.add_argument(
        "--reuse-fleet",
        metavar="DIR",
        help="use the running fleet in DIR (its Jobs of this run are deleted at the end)",
    )
    p.add_argument(
        "--keep-jobs", action="store_true", help="with --reuse-fleet: leave this run's Jobs in place"
    )
    p.add_argument(
        "--fleet-dir",
        default=str(DEFAULT_RUN_DIR),
        help=f"where to start the fleet (default {DEFAULT_RUN_DIR})",
    )
    p.add_argument(
        "--client-qps",
        type=float,
        help="clientConnection.qps of the agents and the manager of the fleet it starts, per API resource "
        f"(default: Kueue's {DEFAULT_CLIENT_QPS:g})",
    )
    p.add_argument(
        "--client-burst", type=int, help=f"clientConnection.burst (default: Kueue's {DEFAULT_CLIENT_BURST})"
    )
    p.add_argument(
        "--lws",
        type=int,
        default=200,
        help="LeaderWorkerSets of the LWS mix run after the Jobs (default 200; 0 skips it)",
    )
    p.add_argument("--lws-replicas", type=int, default=2, help="groups per LWS (default 2)")
    p.add_argument("--lws-size", type=int, default=3, help="pods per group (default 3)")
    p.add_argument("--lws-rate", type=float, default=10.0, help="LWS submitted per second (default 10)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument(
        "--work-dir", help="metrics scrapes (default /tmp/kueue-federation-bench/federation-<time>)"
    )
    p.add_argument("--progress-every", type=float, default=5.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.scale_test is not None and args.scale_test < 1:
        p.error("--scale-test needs a positive number of Workloads")
    if args.rate is None:
        args.rate = 0.0 if args.scale_test else 50.0
    if args.timeout is None:
        args.timeout = 3600.0 if args.scale_test else 600.0
    if args.rate < 0 or args.jobs < 1 or args.clients < 1 or args.concurrency < 1:
        p.error("--rate must be >= 0; --jobs, --clients and --concurrency >= 1")
    if args.lws < 0 or args.lws_replicas < 1 or args.lws_size < 1 or args.lws_rate <= 0:
        p.error("--lws must be >= 0; --lws-replicas, --lws-size and --lws-rate positive")
    if args.scale_test:
        args.lws = 0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kube_runtime.logging import setup_logging

    setup_logging("warning")
    # SIGTERM ends the run like Ctrl-C does, so the fleet is always torn down.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    mode = "scale-test" if args.scale_test else "dispatch"
    jobs = args.scale_test or args.jobs
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work_dir = Path(args.work_dir or f"/tmp/kueue-federation-bench/federation-{stamp}")
    work_dir.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(Path(args.reuse_fleet or args.fleet_dir), owned=args.reuse_fleet is None)
    result: RunResult | None = None
    lws_result = None
    try:
        if fleet.owned:
            pods = max(jobs, args.lws * args.lws_replicas * args.lws_size)
            fleet.start(args.workers, node_size(pods, args.nodes), args.client_qps, args.client_burst)
        else:
            fleet.load()
            say(f"using the running fleet in {fleet.run_dir}")
        say(f"machine load before the run: {loads(os.getloadavg())} on {os.cpu_count()} CPUs")
        result = asyncio.run(FederationRun(fleet, args, mode, jobs, work_dir).run())
        if args.lws and not result.error:
            lws_result = asyncio.run(
                run_lws_mix(
                    fleet.manager_kubeconfig,
                    count=args.lws,
                    replicas=args.lws_replicas,
                    size=args.lws_size,
                    rate=args.lws_rate,
                    timeout_s=args.timeout,
                    say=say,
                    distribution=distribution,
                    cleanup=not fleet.owned and not args.keep_jobs,
                )
            )
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except BenchError as e:
        say(f"error: {e}")
        return 1
    finally:
        fleet.stop(save_logs_to=work_dir)
    print(format_result(result), flush=True)
    if lws_result is not None:
        print(format_lws_mix(lws_result, fmt, fmt_dist), flush=True)
    if args.json:
        payload = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count()},
            "args": vars(args),
            "fleetDir": str(fleet.run_dir),
            "workDir": str(work_dir),
            "result": result.to_dict(),
            "lwsMix": asdict(lws_result) if lws_result is not None else None,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))
        say(f"results written to {args.json}")
    say(f"metrics scrapes and the manager's and agents' logs in {work_dir}")
    lws_failed = lws_result is not None and bool(
        lws_result.error or lws_result.timed_out or lws_result.splits
    )
    return 1 if result.error or result.timed_out or lws_failed else 0


if __name__ == "__main__":
    sys.exit(main())
