"""Federation dispatch benchmark: batch/v1 Jobs submitted on the manager cluster until MultiKueue
has them Admitted, through a local fleet of real clusters (localfleet/, started by bench.fleet).

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

  .venv/bin/python -m bench.federation [--jobs 1000] [--rate 50] [--json PATH]
  .venv/bin/python -m bench.federation --scale-test 10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import asdict
from pathlib import Path

from bench import common
from bench.common import SHM, BenchError, end_on_sigterm, say, set_prog, utc_now, write_json
from bench.federation_result import TARGET_RSS_MB, TARGET_RSS_WORKLOADS, RunResult, format_result
from bench.federation_run import KEEP_RUNNING_ANNOTATION, MANAGED_BY_MULTIKUEUE, FederationRun
from bench.fleet import DEFAULT_CLIENT_BURST, DEFAULT_CLIENT_QPS, Fleet, node_size
from bench.jobset_mix import format_jobset_mix, run_jobset_mix
from bench.lws_mix import format_lws_mix, run_lws_mix
from bench.stats import loads

DEFAULT_RUN_DIR = SHM / "kueue-federation-bench-fleet"


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
    p.add_argument(
        "--jobsets",
        type=int,
        default=0,
        help="JobSets of the JobSet mix run after the LWS mix (default 0: none; docs/jobset.md's shape)",
    )
    p.add_argument(
        "--jobset-workers", type=int, default=2, help="pods of each JobSet's workers Job (default 2)"
    )
    p.add_argument(
        "--jobset-rate", type=float, default=10.0, help="JobSets submitted per second (default 10)"
    )
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
    if args.jobsets < 0 or args.jobset_workers < 1 or args.jobset_rate <= 0:
        p.error("--jobsets must be >= 0; --jobset-workers and --jobset-rate positive")
    if args.scale_test:
        args.lws = 0
        args.jobsets = 0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_prog("bench-federation")
    end_on_sigterm()
    mode = "scale-test" if args.scale_test else "dispatch"
    jobs = args.scale_test or args.jobs
    work_dir = common.work_dir(args.work_dir, "federation-")
    fleet = Fleet(Path(args.reuse_fleet or args.fleet_dir), owned=args.reuse_fleet is None)
    result: RunResult | None = None
    lws_result = None
    jobset_result = None
    try:
        if fleet.owned:
            pods = max(
                jobs, args.lws * args.lws_replicas * args.lws_size, args.jobsets * (1 + args.jobset_workers)
            )
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
                    cleanup=not fleet.owned and not args.keep_jobs,
                )
            )
        if args.jobsets and not result.error:
            jobset_result = asyncio.run(
                run_jobset_mix(
                    fleet.manager_kubeconfig,
                    count=args.jobsets,
                    workers=args.jobset_workers,
                    rate=args.jobset_rate,
                    timeout_s=args.timeout,
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
        print(format_lws_mix(lws_result), flush=True)
    if jobset_result is not None:
        print(format_jobset_mix(jobset_result), flush=True)
    if args.json:
        payload = {
            "date": utc_now(),
            "machine": {"cpus": os.cpu_count()},
            "args": vars(args),
            "fleetDir": str(fleet.run_dir),
            "workDir": str(work_dir),
            "result": result.to_dict(),
            "lwsMix": asdict(lws_result) if lws_result is not None else None,
            "jobsetMix": asdict(jobset_result) if jobset_result is not None else None,
        }
        write_json(args.json, payload)
    say(f"metrics scrapes and the manager's and agents' logs in {work_dir}")
    lws_failed = lws_result is not None and bool(
        lws_result.error or lws_result.timed_out or lws_result.splits
    )
    jobset_failed = jobset_result is not None and bool(jobset_result.error or jobset_result.timed_out)
    return 1 if result.error or result.timed_out or lws_failed or jobset_failed else 0


if __name__ == "__main__":
    sys.exit(main())
