"""Scaling series of the federation manager: how its cost per Workload grows with workers and with
Workloads. Each configuration is one bench.federation run (batch/v1 Jobs submitted on the
manager until they are Admitted there) through a fresh fleet of light clusters (`localfleet up
--shared-etcd --light-workers`: one etcd, workers without controllers, kwok or nodes: the worker_agent
admits the Workload copies, no pod runs).

The series: every --workers count at --base-workloads Workloads, and every --workloads count at
--base-workers workers (--grid: every pair). Per configuration it records throughput, p50/p95/p99 of
submitted -> Admitted, the manager's CPU seconds and peak RSS, API requests per Workload (the
manager's to the manager cluster and to the workers, the worker_agents' on the workers) and the
fleet's peak RSS; then it checks the targets (cost per Workload flat within 1.5x from 1k to 10k
Workloads and from 3 to 20 workers; manager RSS under 300 MB at 10k Workloads) and writes PNG plots.

  .venv/bin/python -m bench.scale [--workers 1,3,10,20] [--workloads 1000,5000,10000]
  .venv/bin/python -m bench.scale --from-json a.json --from-json b.json  # table and plots only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import common, federation
from bench.common import REPO, BenchError, end_on_sigterm, say, set_prog
from bench.federation_result import format_result, latencies
from bench.federation_run import FederationRun
from bench.fleet import MANAGER_COMPONENT, Fleet, node_size
from bench.plots import write_plots
from bench.scale_series import (
    DEFAULT_WORKERS,
    DEFAULT_WORKLOADS,
    MAX_WORKERS,
    SeriesPoint,
    checks_text,
    int_list,
    load_series,
    merge_series,
    plan_series,
    point_from_result,
    save_series,
    series_table,
)
from bench.stats import loads

DEFAULT_FLEET_PREFIX = common.SHM / "kueue-federation-bench-scale"
DEFAULT_PLOTS_DIR = REPO / "docs" / "img"
LIGHT_FLEET_ARGS = ("--shared-etcd", "--light-workers")

# ==============================================================================================
# Running one configuration (bench.federation's fleet and run)
# ==============================================================================================


def manager_restarts(fleet: Fleet) -> int:
    """How often the manager's supervisor restarted it (localfleet's status file), 0 if unknown."""
    for p in fleet.state.get("processes") or ():
        if p.get("component") == MANAGER_COMPONENT and p.get("status"):
            try:
                return int(json.loads(Path(p["status"]).read_text()).get("restarts") or 0)
            except (OSError, ValueError):
                return 0
    return 0


def run_point(workers: int, workloads: int, args: argparse.Namespace, work_dir: Path) -> SeriesPoint:
    """A fresh fleet with `workers` light workers, `workloads` Jobs through it, the fleet torn down."""
    fed_args = federation.parse_args(
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
    fleet = Fleet(fleet_dir, owned=True)
    up_args = () if args.full_fleet else LIGHT_FLEET_ARGS
    if args.dispatcher:
        up_args = (*up_args, "--dispatcher", args.dispatcher)
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        fleet.start(workers, node_size(workloads), args.client_qps, args.client_burst, extra_up_args=up_args)
        run = FederationRun(fleet, fed_args, "dispatch", workloads, work_dir)
        result = asyncio.run(run.run())
        to_admitted = latencies(run.recorder.jobs.values())
        restarts = manager_restarts(fleet)
    except BenchError as e:
        say(f"{workers} workers, {workloads:,} Workloads: {e}")
        return SeriesPoint(workers, workloads, error=str(e).splitlines()[0])
    finally:
        fleet.stop(save_logs_to=work_dir)
    (work_dir / "result.txt").write_text(format_result(result) + "\n")
    point = point_from_result(workers, workloads, result, to_admitted)
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
    set_prog("bench-scale")
    if args.from_json:
        loaded = [load_series(Path(path)) for path in args.from_json]
        points = merge_series(points for points, _ in loaded)
        dispatchers = {saved.get("dispatcher") or "AllAtOnce" for _, saved in loaded}
        args.dispatcher = dispatchers.pop() if len(dispatchers) == 1 else "mixed"
    else:
        end_on_sigterm()
        work_dir = common.work_dir(args.work_dir, "scale-")
        json_path = Path(args.json or work_dir / "series.json")
        plan = plan_series(args.workers, args.workloads, args.base_workers, args.base_workloads, args.grid)
        say(f"{len(plan)} runs: " + ", ".join(f"{w}w x {n:,}" for w, n in plan))
        points = []
        try:
            for workers, workloads in plan:
                say(f"== {workers} workers, {workloads:,} Workloads (load {loads(os.getloadavg())})")
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
