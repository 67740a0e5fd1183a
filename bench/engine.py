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

  .venv/bin/python -m bench.engine [--scale 0.1] [--compare-upstream | --engine upstream]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench import common
from bench.common import SHM, BenchError, end_on_sigterm, say, set_prog, utc_now, write_json
from bench.engine_plan import OURS, UPSTREAM, BenchConfig, baseline_config
from bench.engine_procs import (
    agent_engine,
    ensure_minimalkueue,
    install_upstream_crds,
    kueue_version,
    minimalkueue_engine,
    scrape_metrics,
)
from bench.engine_report import format_comparison, format_result
from bench.engine_result import RANGESPEC, RunResult, rangespec_checks
from bench.engine_run import BenchRun
from bench.fleet import Cluster, kubectl_path, load_localfleet
from bench.prom import api_write_counts, apiserver_metrics


def apiserver_writes(kubeconfig: Path, save_to: Path) -> dict[str, int]:
    """The apiserver's write counters at the end of a run (kept whole in `save_to`); {} on failure."""
    text = apiserver_metrics(kubectl_path(), kubeconfig, save_to)
    return {} if text is None else api_write_counts(text)


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
    cluster = Cluster(run_root / engine, label)
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
        cluster.down(save_logs_to=work_dir)


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
    set_prog("bench-engine")
    end_on_sigterm()
    run_root = SHM / f"kueue-federation-bench-{os.getpid()}"  # one cluster directory per engine below
    try:
        config = baseline_config(args.scale, args.cohorts, args.queues_per_cohort)
        if args.build_upstream_only:
            ensure_minimalkueue(force=args.rebuild_upstream)
            return 0
        work_dir = common.work_dir(args.work_dir, "")
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
                "date": utc_now(),
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
            write_json(args.json, payload)
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
