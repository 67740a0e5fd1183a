"""bench.scale's series (pure): its configurations, one point per run, the per-Workload costs along
each axis against the targets (flat within 1.5x; manager RSS), its table, and its JSON file."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.common import REPO
from bench.federation_result import MIB, TARGET_RSS_MB, TARGET_RSS_WORKLOADS, RunResult
from bench.stats import fmt, loads

MAX_WORKERS = 20  # MultiKueueConfig.spec.clusters allows at most 20 clusters
DEFAULT_WORKERS = (1, 3, 10, 20)
DEFAULT_WORKLOADS = (1000, 5000, 10000)
# Targets (issue 12): per-Workload cost flat within this factor over these ranges; manager RSS.
TARGET_FLAT_RATIO = 1.5
TARGET_WORKLOAD_RANGE = (1000, 10000)
TARGET_WORKER_RANGE = (3, 20)
PLOT_FILES = {
    "latency": "bench-scale-latency-cdf.png",
    "workers": "bench-scale-vs-workers.png",
    "workloads": "bench-scale-vs-workloads.png",
}


# ==============================================================================================
# The series: its configurations and one point per run (pure)
# ==============================================================================================


def int_list(text: str) -> list[int]:
    """`1,3,10` -> [1, 3, 10]: positive, no repeats, in the given order; `5k` means 5000."""
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        scale = 1000 if part.endswith("k") else 1
        try:
            value = int(part.removesuffix("k")) * scale
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a whole number") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{part!r}: must be at least 1")
        if value not in values:
            values.append(value)
    if not values:
        raise argparse.ArgumentTypeError("no values given")
    return values


def plan_series(
    workers: Sequence[int], workloads: Sequence[int], base_workers: int, base_workloads: int, grid: bool
) -> list[tuple[int, int]]:
    """(workers, Workloads) to run, cheapest first: every worker count at `base_workloads` and every
    Workload count at `base_workers`, or every pair with `grid`."""
    if grid:
        pairs = {(w, n) for w in workers for n in workloads}
    else:
        pairs = {(w, base_workloads) for w in workers} | {(base_workers, n) for n in workloads}
    return sorted(pairs, key=lambda p: (p[1], p[0]))


@dataclass
class SeriesPoint:
    workers: int
    workloads: int  # Jobs asked for
    submitted: int = 0
    admitted: int = 0
    timed_out: bool = False
    error: str | None = None
    throughput_per_s: float | None = None
    p50_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    manager_cpu_s: float | None = None
    manager_peak_rss_mib: float | None = None
    manager_requests: float | None = None  # the manager's requests to the manager cluster
    manager_to_workers_requests: float | None = None  # the manager's requests to every worker
    worker_agents_requests: float | None = None  # the worker_agents' on the workers, all together
    fleet_cpu_s: float | None = None
    fleet_peak_rss_mib: float | None = None  # sum of each fleet process's peak RSS
    apiserver_peak_rss_mib: float | None = None  # the largest kube-apiserver
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)  # submitted -> Admitted, every Workload
    # The manager's restarts during the run (its supervisor's count): its CPU and RSS figures then
    # cover only the process that ran first.
    manager_restarts: int = 0

    def per_workload(self, value: float | None, scale: float = 1.0) -> float | None:
        return None if value is None or not self.submitted else value * scale / self.submitted

    @property
    def manager_cpu_ms_per_workload(self) -> float | None:
        return self.per_workload(self.manager_cpu_s, 1000)

    @property
    def manager_api_per_workload(self) -> float | None:
        return self.per_workload(self.manager_requests)

    @property
    def worker_api_per_workload(self) -> float | None:
        """API calls on the worker clusters per Workload: the manager's plus the worker_agents'."""
        parts = [v for v in (self.manager_to_workers_requests, self.worker_agents_requests) if v is not None]
        return self.per_workload(sum(parts)) if parts else None

    @property
    def worker_api_per_workload_per_worker(self) -> float | None:
        """The same per worker: every worker gets a copy of every Workload (AllAtOnce dispatch)."""
        total = self.worker_api_per_workload
        return None if total is None else total / self.workers

    @property
    def ok(self) -> bool:
        return not self.error and not self.timed_out and self.submitted > 0


def point_from_result(
    workers: int, workloads: int, result: RunResult, latencies: Sequence[float]
) -> SeriesPoint:
    """One configuration's figures from bench.federation's RunResult and the per-Job latencies."""
    agents_on_workers = [v for c, v in result.agent_requests.items() if c != "manager"]
    to_workers = [v for v in result.worker_requests.values() if v is not None]
    every = [
        *([result.manager] if result.manager else []),
        *result.agents.values(),
        *result.others.values(),
    ]
    rss = [p.peak_rss_mib for p in every if p.peak_rss_mib is not None]
    apiservers = [
        p.peak_rss_mib
        for p in result.others.values()
        if p.label.endswith("/kube-apiserver") and p.peak_rss_mib is not None
    ]
    return SeriesPoint(
        workers=workers,
        workloads=workloads,
        submitted=result.submitted,
        admitted=result.admitted,
        timed_out=result.timed_out,
        error=result.error,
        throughput_per_s=result.throughput_per_s,
        p50_s=result.to_admitted.p50,
        p95_s=result.to_admitted.p95,
        p99_s=result.to_admitted.p99,
        manager_cpu_s=result.manager.cpu_s if result.manager else None,
        manager_peak_rss_mib=result.manager.peak_rss_mib if result.manager else None,
        manager_requests=result.manager_requests,
        manager_to_workers_requests=sum(to_workers) if to_workers else None,
        worker_agents_requests=sum(agents_on_workers) if agents_on_workers else None,
        fleet_cpu_s=result.fleet_cpu_s,
        fleet_peak_rss_mib=sum(rss) if rss else None,
        apiserver_peak_rss_mib=max(apiservers) if apiservers else None,
        load_start=list(result.load_start),
        load_end=list(result.load_end),
        latencies_s=[round(v, 4) for v in latencies],
    )


# ==============================================================================================
# Aggregation and the targets (pure)
# ==============================================================================================

# The per-Workload costs that must stay flat: (label, SeriesPoint attribute, unit).
COSTS = (
    ("manager CPU", "manager_cpu_ms_per_workload", "ms/Workload"),
    ("manager API calls, manager cluster", "manager_api_per_workload", "calls/Workload"),
    ("API calls on the workers", "worker_api_per_workload", "calls/Workload"),
    ("API calls on each worker", "worker_api_per_workload_per_worker", "calls/Workload"),
)


def along(points: Iterable[SeriesPoint], axis: str, fixed: int) -> list[SeriesPoint]:
    """The successful points of one curve, sorted: axis "workers" at `fixed` Workloads, or axis
    "workloads" at `fixed` workers."""
    other = "workloads" if axis == "workers" else "workers"
    chosen = [p for p in points if p.ok and getattr(p, other) == fixed]
    return sorted(chosen, key=lambda p: getattr(p, axis))


@dataclass(frozen=True)
class Flatness:
    cost: str
    axis: str
    fixed: int
    low: int | None  # the axis values the ratio spans
    high: int | None
    ratio: float | None  # cost at `high` / cost at `low`
    covers_target: bool  # the measured span includes the target range

    @property
    def met(self) -> bool:
        return self.ratio is not None and self.covers_target and self.ratio <= TARGET_FLAT_RATIO

    @property
    def status(self) -> str:
        if self.ratio is None:
            return "not measured (fewer than 2 points)"
        verdict = "within" if self.ratio <= TARGET_FLAT_RATIO else "NOT within"
        if not self.covers_target:
            return f"{verdict} {TARGET_FLAT_RATIO:g}x over the part measured; target range not run"
        return f"{verdict} {TARGET_FLAT_RATIO:g}x: {'met' if self.met else 'NOT met'}"


def flatness(points: Iterable[SeriesPoint], axis: str, fixed: int, attribute: str, label: str) -> Flatness:
    """How much one per-Workload cost grows over the target range of `axis` (or what of it was run)."""
    target_low, target_high = TARGET_WORKER_RANGE if axis == "workers" else TARGET_WORKLOAD_RANGE
    curve = [p for p in along(points, axis, fixed) if getattr(p, attribute) is not None]
    inside = [p for p in curve if target_low <= getattr(p, axis) <= target_high]
    if len(inside) < 2:
        return Flatness(label, axis, fixed, None, None, None, False)
    low, high = inside[0], inside[-1]
    base = getattr(low, attribute)
    ratio = getattr(high, attribute) / base if base else None
    covers = getattr(low, axis) <= target_low and getattr(high, axis) >= target_high
    return Flatness(label, axis, fixed, getattr(low, axis), getattr(high, axis), ratio, covers)


def flatness_checks(points: Sequence[SeriesPoint], base_workers: int, base_workloads: int) -> list[Flatness]:
    out = []
    for label, attribute, _unit in COSTS:
        out.append(flatness(points, "workloads", base_workers, attribute, label))
        out.append(flatness(points, "workers", base_workloads, attribute, label))
    return out


def rss_check(points: Iterable[SeriesPoint]) -> tuple[float | None, str]:
    """The manager's peak RSS (MB) at the largest Workload count run, and the verdict for the target."""
    runs = [p for p in points if p.ok and p.manager_peak_rss_mib is not None]
    if not runs:
        return None, "not measured"
    largest = max(runs, key=lambda p: (p.submitted, p.manager_peak_rss_mib or 0))
    mb = (largest.manager_peak_rss_mib or 0) * MIB / 1e6
    verdict = "met" if mb < TARGET_RSS_MB else "NOT met"
    if largest.submitted < TARGET_RSS_WORKLOADS:
        return mb, (
            f"{verdict} at {largest.submitted:,} Workloads only; the target is for {TARGET_RSS_WORKLOADS:,}"
        )
    return mb, f"{verdict} at {largest.submitted:,} Workloads"


def _cell(value: float | None, digits: int = 1) -> str:
    return fmt(value, digits=digits)


def series_table(points: Sequence[SeriesPoint]) -> str:
    """A Markdown table, one row per configuration."""
    header = (
        "| workers | Workloads | admitted | Workloads/s | p50 / p95 / p99 s | manager CPU ms/WL | "
        "manager peak RSS MiB | API/WL manager cluster | API/WL workers | fleet peak RSS MiB | "
        "load start -> end |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for p in sorted(points, key=lambda p: (p.workloads, p.workers)):
        status = "" if p.ok else (" (timed out)" if p.timed_out else f" (error: {p.error})")
        if p.manager_restarts:
            status += f" (manager restarted {p.manager_restarts}x)"
        lines.append(
            f"| {p.workers} | {p.workloads:,} | {p.admitted:,}{status} | {_cell(p.throughput_per_s)} | "
            f"{_cell(p.p50_s)} / {_cell(p.p95_s)} / {_cell(p.p99_s)} | "
            f"{_cell(p.manager_cpu_ms_per_workload)} | "
            f"{_cell(p.manager_peak_rss_mib, 0)} | {_cell(p.manager_api_per_workload, 2)} | "
            f"{_cell(p.worker_api_per_workload, 2)} | {_cell(p.fleet_peak_rss_mib, 0)} | "
            f"{loads(p.load_start[:1])} -> {loads(p.load_end[:1])} |"
        )
    return "\n".join(lines)


def checks_text(points: Sequence[SeriesPoint], base_workers: int, base_workloads: int) -> str:
    lines = []
    for f in flatness_checks(points, base_workers, base_workloads):
        where = (
            f"{f.fixed} workers, Workloads" if f.axis == "workloads" else f"{f.fixed:,} Workloads, workers"
        )
        span = "" if f.low is None else f" {f.low:,} -> {f.high:,}"
        ratio = "" if f.ratio is None else f" x{f.ratio:.2f}"
        lines.append(f"- {f.cost} ({where}{span}):{ratio} {f.status}")
    mb, verdict = rss_check(points)
    lines.append(f"- manager peak RSS: {_cell(mb)} MB (< {TARGET_RSS_MB:g} MB) {verdict}")
    return "\n".join(lines)


def load_series(path: Path) -> tuple[list[SeriesPoint], dict]:
    payload = json.loads(path.read_text())
    return [SeriesPoint(**p) for p in payload["points"]], payload.get("args") or {}


def merge_series(series: Iterable[Sequence[SeriesPoint]]) -> list[SeriesPoint]:
    """Points of several saved series; a configuration run again replaces the earlier one."""
    merged: dict[tuple[int, int], SeriesPoint] = {}
    for points in series:
        for p in points:
            merged[(p.workers, p.workloads)] = p
    return sorted(merged.values(), key=lambda p: (p.workloads, p.workers))


# Where this machine put the run: never saved, the series goes into docs/ (see portable_args).
MACHINE_PATH_ARGS = ("from_json", "fleet_prefix", "work_dir", "json")


def portable_args(args: argparse.Namespace) -> dict:
    """The run's arguments without paths of this machine: a plots directory inside the repository
    is kept relative to it, any other path is left out."""
    saved = {k: v for k, v in vars(args).items() if k not in MACHINE_PATH_ARGS}
    plots = saved.pop("plots_dir", None)
    if plots is not None and Path(plots).resolve().is_relative_to(REPO):
        saved["plots_dir"] = str(Path(plots).resolve().relative_to(REPO))
    return saved


def save_series(path: Path, points: Sequence[SeriesPoint], args: argparse.Namespace) -> None:
    payload = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count()},
        "args": portable_args(args),
        "points": [asdict(p) for p in points],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1))
