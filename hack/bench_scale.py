#!/usr/bin/env python3
"""Scaling series of the federation manager: how its cost per Workload grows with workers and with
Workloads. Each configuration is one hack/bench_federation.py run (batch/v1 Jobs submitted on the
manager until they are Admitted there) through a fresh fleet of light clusters (`localfleet up
--shared-etcd --light-workers`: one etcd, workers without controllers, kwok or nodes: the worker_agent
admits the Workload copies, no pod runs).

The series: every --workers count at --base-workloads Workloads, and every --workloads count at
--base-workers workers (--grid: every pair). Per configuration it records throughput, p50/p95/p99 of
submitted -> Admitted, the manager's CPU seconds and peak RSS, API requests per Workload (the
manager's to the manager cluster and to the workers, the worker_agents' on the workers) and the
fleet's peak RSS; then it checks the targets (cost per Workload flat within 1.5x from 1k to 10k
Workloads and from 3 to 20 workers; manager RSS under 300 MB at 10k Workloads) and writes PNG plots.

  .venv/bin/python hack/bench_scale.py [--workers 1,3,10,20] [--workloads 1000,5000,10000]
  .venv/bin/python hack/bench_scale.py --from-json a.json --from-json b.json  # table and plots only
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))

import bench_federation as bf  # noqa: E402

if __name__ == "__main__":
    bf._bootstrap()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402

MAX_WORKERS = 20  # MultiKueueConfig.spec.clusters allows at most 20 clusters
DEFAULT_WORKERS = (1, 3, 10, 20)
DEFAULT_WORKLOADS = (1000, 5000, 10000)
DEFAULT_FLEET_PREFIX = (
    Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / "kueue-federation-bench-scale"
)
DEFAULT_PLOTS_DIR = REPO / "docs" / "img"
LIGHT_FLEET_ARGS = ("--shared-etcd", "--light-workers")
# Targets (issue 12): per-Workload cost flat within this factor over these ranges; manager RSS.
TARGET_FLAT_RATIO = 1.5
TARGET_WORKLOAD_RANGE = (1000, 10000)
TARGET_WORKER_RANGE = (3, 20)
PLOT_FILES = {
    "latency": "bench-scale-latency-cdf.png",
    "workers": "bench-scale-vs-workers.png",
    "workloads": "bench-scale-vs-workloads.png",
}


def say(msg: str) -> None:
    print(f"bench-scale: {msg}", file=sys.stderr, flush=True)


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
    workers: int, workloads: int, result: bf.RunResult, latencies: Sequence[float]
) -> SeriesPoint:
    """One configuration's figures from bench_federation's RunResult and the per-Job latencies."""
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
    mb = (largest.manager_peak_rss_mib or 0) * bf.MIB / 1e6
    verdict = "met" if mb < bf.TARGET_RSS_MB else "NOT met"
    if largest.submitted < bf.TARGET_RSS_WORKLOADS:
        return mb, (
            f"{verdict} at {largest.submitted:,} Workloads only; "
            f"the target is for {bf.TARGET_RSS_WORKLOADS:,}"
        )
    return mb, f"{verdict} at {largest.submitted:,} Workloads"


def _cell(value: float | None, digits: int = 1) -> str:
    return bf.fmt(value, digits=digits)


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
            f"{bf.loads(p.load_start[:1])} -> {bf.loads(p.load_end[:1])} |"
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
    lines.append(f"- manager peak RSS: {_cell(mb)} MB (< {bf.TARGET_RSS_MB:g} MB) {verdict}")
    return "\n".join(lines)


# ==============================================================================================
# Plots (matplotlib, installed by `make bench-scale`: the project's `bench` extra)
# ==============================================================================================


def _pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(
            "bench-scale: matplotlib is missing: `.venv/bin/pip install -e '.[bench]'` "
            "(`make bench-scale` does)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def configuration(p: SeriesPoint) -> str:
    return f"{p.workers} worker{'s' if p.workers != 1 else ''}, {p.workloads:,} Workloads"


def plot_latency_cdf(points: Sequence[SeriesPoint], path: Path) -> Path:
    """submitted -> Admitted, one CDF per configuration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for p in sorted(points, key=lambda p: (p.workloads, p.workers)):
        values = sorted(p.latencies_s)
        if not values:
            continue
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, fractions, where="post", label=configuration(p))
    ax.set_xlabel("submitted -> Admitted on the manager (s)")
    ax.set_ylabel("fraction of Workloads")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    ax.set_title("Latency distribution per configuration")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# What the scaling plots show: (title, [(label, value of a point)]).
PANELS: tuple[tuple[str, tuple[tuple[str, Callable[[SeriesPoint], float | None]], ...]], ...] = (
    ("manager CPU (ms per Workload)", (("manager", lambda p: p.manager_cpu_ms_per_workload),)),
    (
        "API calls per Workload",
        (
            ("manager -> manager cluster", lambda p: p.manager_api_per_workload),
            ("on the workers (manager + agents)", lambda p: p.worker_api_per_workload),
            ("the same, per worker", lambda p: p.worker_api_per_workload_per_worker),
        ),
    ),
    ("peak RSS (MiB)", (("manager", lambda p: p.manager_peak_rss_mib),)),
    (
        "submitted -> Admitted (s)",
        (("p50", lambda p: p.p50_s), ("p95", lambda p: p.p95_s), ("p99", lambda p: p.p99_s)),
    ),
)


def plot_scaling(points: Sequence[SeriesPoint], axis: str, fixed: int, path: Path) -> Path | None:
    """Per-Workload cost along one axis ("workers" or "workloads"); None when fewer than 2 points."""
    curve = along(points, axis, fixed)
    if len(curve) < 2:
        return None
    plt = _pyplot()
    xs = [getattr(p, axis) for p in curve]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (title, series) in zip(axes.flat, PANELS, strict=True):
        for label, value in series:
            pairs = [(x, value(p)) for x, p in zip(xs, curve, strict=True) if value(p) is not None]
            if pairs:
                ax.plot([x for x, _ in pairs], [y for _, y in pairs], marker="o", label=label)
        if title.startswith("peak RSS"):
            ax.axhline(bf.TARGET_RSS_MB * 1e6 / bf.MIB, color="red", linestyle="--", label="target 300 MB")
        ax.set_title(title, fontsize="medium")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:,}" for x in xs])
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    xlabel = "workers" if axis == "workers" else "Workloads"
    for ax in axes[1]:
        ax.set_xlabel(xlabel)
    where = f"{fixed:,} Workloads" if axis == "workers" else f"{fixed} workers"
    fig.suptitle(f"Federation manager cost vs {xlabel} ({where})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_plots(
    points: Sequence[SeriesPoint], plots_dir: Path, base_workers: int, base_workloads: int
) -> list[Path]:
    written = [plot_latency_cdf(points, plots_dir / PLOT_FILES["latency"])]
    for axis, fixed in (("workers", base_workloads), ("workloads", base_workers)):
        path = plot_scaling(points, axis, fixed, plots_dir / PLOT_FILES[axis])
        if path is not None:
            written.append(path)
    return written


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


# ==============================================================================================
# Running one configuration (bench_federation's fleet and run)
# ==============================================================================================


def manager_restarts(fleet: bf.Fleet) -> int:
    """How often the manager's supervisor restarted it (localfleet's status file), 0 if unknown."""
    for p in fleet.state.get("processes") or ():
        if p.get("component") == bf.MANAGER_COMPONENT and p.get("status"):
            try:
                return int(json.loads(Path(p["status"]).read_text()).get("restarts") or 0)
            except (OSError, ValueError):
                return 0
    return 0


def run_point(workers: int, workloads: int, args: argparse.Namespace, work_dir: Path) -> SeriesPoint:
    """A fresh fleet with `workers` light workers, `workloads` Jobs through it, the fleet torn down."""
    fed_args = bf.parse_args(
        [
            "--jobs",
            str(workloads),
            "--rate",
            f"{args.rate:g}",
            "--clients",
            str(args.clients),
            "--concurrency",
            str(args.concurrency),
            "--timeout",
            f"{args.timeout:g}",
            "--workers",
            str(workers),
            "--lws",
            "0",
        ]
    )
    fleet_dir = Path(f"{args.fleet_prefix}-w{workers}")
    fleet = bf.Fleet(fleet_dir, owned=True)
    up_args = () if args.full_fleet else LIGHT_FLEET_ARGS
    if args.dispatcher:
        up_args = (*up_args, "--dispatcher", args.dispatcher)
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        fleet.start(
            workers, bf.node_size(workloads), args.client_qps, args.client_burst, extra_up_args=up_args
        )
        run = bf.FederationRun(fleet, fed_args, "dispatch", workloads, work_dir)
        result = asyncio.run(run.run())
        latencies = bf.latencies(run.recorder.jobs.values())
        restarts = manager_restarts(fleet)
    except bf.BenchError as e:
        say(f"{workers} workers, {workloads:,} Workloads: {e}")
        return SeriesPoint(workers, workloads, error=str(e).splitlines()[0])
    finally:
        fleet.stop(save_logs_to=work_dir)
    (work_dir / "result.txt").write_text(bf.format_result(result) + "\n")
    point = point_from_result(workers, workloads, result, latencies)
    point.manager_restarts = restarts
    if restarts:
        say(f"the manager restarted {restarts}x during the run: its CPU and RSS are the first process's")
    return point


# ==============================================================================================
# main
# ==============================================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workers",
        type=int_list,
        default=list(DEFAULT_WORKERS),
        help=f"worker counts, comma-separated (default {','.join(map(str, DEFAULT_WORKERS))}; "
        f"at most {MAX_WORKERS})",
    )
    p.add_argument(
        "--workloads",
        type=int_list,
        default=list(DEFAULT_WORKLOADS),
        help="Workload counts, comma-separated, 5k = 5000 (default 1000,5000,10000)",
    )
    p.add_argument("--base-workers", type=int, help="workers of the Workloads curve (default: 3, if run)")
    p.add_argument(
        "--base-workloads", type=int, help="Workloads of the workers curve (default: the smallest count)"
    )
    p.add_argument("--grid", action="store_true", help="every (workers, Workloads) pair")
    p.add_argument(
        "--rate", type=float, default=0.0, help="submissions per second, 0 = as fast as possible (default)"
    )
    p.add_argument(
        "--dispatcher",
        choices=("AllAtOnce", "Incremental"),
        help="the manager's multiKueue.dispatcherName (default: unset, AllAtOnce): Incremental nominates "
        "3 workers at a time instead of every worker",
    )
    p.add_argument("--clients", type=int, default=4, help="API clients of the submitter (default 4)")
    p.add_argument("--concurrency", type=int, default=100, help="creates in flight at most (default 100)")
    p.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds to wait after the last submission (default 3600)",
    )
    p.add_argument("--client-qps", type=float, help="clientConnection.qps of the manager and agents")
    p.add_argument("--client-burst", type=int, help="clientConnection.burst of the manager and agents")
    p.add_argument(
        "--full-fleet",
        action="store_true",
        help="workers with controllers, kwok and nodes, one etcd per cluster (default: light clusters)",
    )
    p.add_argument(
        "--fleet-prefix",
        default=str(DEFAULT_FLEET_PREFIX),
        help=f"fleet directories are PREFIX-w<workers> (default {DEFAULT_FLEET_PREFIX})",
    )
    p.add_argument("--plots-dir", default=str(DEFAULT_PLOTS_DIR), help="where the PNGs go (default docs/img)")
    p.add_argument("--no-plots", action="store_true", help="only the table (no matplotlib needed)")
    p.add_argument(
        "--work-dir", help="per-run scrapes and logs (default /tmp/kueue-federation-bench/scale-<time>)"
    )
    p.add_argument("--json", metavar="PATH", help="the series as JSON (default WORK_DIR/series.json)")
    p.add_argument(
        "--from-json",
        metavar="PATH",
        action="append",
        help="no runs: the table and plots of saved series (repeatable: merged, later files win)",
    )
    args = p.parse_args(argv)
    if max(args.workers) > MAX_WORKERS:
        p.error(f"--workers: at most {MAX_WORKERS} (a MultiKueueConfig lists at most {MAX_WORKERS} clusters)")
    if args.rate < 0 or args.clients < 1 or args.concurrency < 1 or args.timeout <= 0:
        p.error("--rate must be >= 0; --clients, --concurrency and --timeout positive")
    if args.base_workers is None:
        args.base_workers = 3 if 3 in args.workers else args.workers[0]
    if args.base_workloads is None:
        args.base_workloads = min(args.workloads)
    return args


def report(points: Sequence[SeriesPoint], args: argparse.Namespace) -> str:
    return (
        f"== scaling series ({'full' if args.full_fleet else 'light'} fleet, "
        f"{'as fast as possible' if args.rate == 0 else f'{args.rate:g}/s'}, "
        f"{args.dispatcher or 'AllAtOnce'} dispatcher)\n"
        f"{series_table(points)}\n\ntargets:\n"
        f"{checks_text(points, args.base_workers, args.base_workloads)}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        loaded = [load_series(Path(path)) for path in args.from_json]
        points = merge_series(points for points, _ in loaded)
        dispatchers = {saved.get("dispatcher") or "AllAtOnce" for _, saved in loaded}
        args.dispatcher = dispatchers.pop() if len(dispatchers) == 1 else "mixed"
    else:
        from kube_runtime.logging import setup_logging

        setup_logging("warning")
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        work_dir = Path(args.work_dir or f"/tmp/kueue-federation-bench/scale-{stamp}")
        json_path = Path(args.json or work_dir / "series.json")
        plan = plan_series(args.workers, args.workloads, args.base_workers, args.base_workloads, args.grid)
        say(f"{len(plan)} runs: " + ", ".join(f"{w}w x {n:,}" for w, n in plan))
        points = []
        try:
            for workers, workloads in plan:
                say(f"== {workers} workers, {workloads:,} Workloads (load {bf.loads(os.getloadavg())})")
                point = run_point(workers, workloads, args, work_dir / f"w{workers}-n{workloads}")
                points.append(point)
                save_series(json_path, points, args)
        except KeyboardInterrupt:
            say("interrupted: the series so far is kept")
        save_series(json_path, points, args)
        say(f"series written to {json_path}")
    print(report(points, args), flush=True)
    if not args.no_plots:
        for path in write_plots(points, Path(args.plots_dir), args.base_workers, args.base_workloads):
            say(f"wrote {path}")
    return 0 if points and all(p.ok for p in points) else 1


if __name__ == "__main__":
    sys.exit(main())
