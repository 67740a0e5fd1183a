"""Side by side with upstream MultiKueue: the same workload mix through a fresh local fleet of
1 manager + N workers (default 3), one fleet at a time, in four arms (and two more on request):

  ours             our manager and worker_agents at our shipped client budget (20 qps / 30 burst
                   per API resource) and with our shipped dispatcher, least-loaded
  upstream         upstream Kueue (KUEUE_VERSION of hack/versions.env) on every cluster at its shipped
                   defaults: clientConnection 300 / 500 for its manager-local client, while its
                   MultiKueue worker clients get client-go's 5 / 10 per API resource (v0.19.2 has no
                   setting for them): the limit that binds it
  ours_lifted      ours with every client at the lifted budget (--lifted-qps / --lifted-burst,
                   default 300 / 500)
  upstream_tuned   upstream Kueue built with our patch hack/patches/kueue-<version>-multikueue-worker-
                   client-budget.patch, which gives its worker clients the clientConnection budget
                   (the effect of a later upstream change), every client at the same lifted budget
  ours_all_at_once (only with --engines) ours_lifted with upstream's AllAtOnce dispatcher instead of
                   our shipped least-loaded one, compared with upstream_tuned (ratios.all_at_once):
                   the same dispatcher on both sides
  ours_warning_events (only with --engines) ours_lifted whose processes write no Normal Event
                   (--event-types Warning), compared with upstream_tuned (ratios.warning_events):
                   what ours' own Events cost the fleet
  ours_asyncio     (only with --engines) ours_lifted with its processes on asyncio's own event
                   loop instead of uvloop's (--event-loop asyncio), compared with upstream_tuned
                   (ratios.asyncio)
  no_kueue         (only with --engines) the same fleet with no Kueue: the same Jobs and LWS created
                   straight on the workers (bench.compare_floor), the floor every other arm's CPU
                   and requests are also given above (above_floor, in the arms and the ratios)

Arms are interleaved (ours, upstream, ours_lifted, upstream_tuned, then again) `--repeat` times
(default 3). A repeat whose fleet fails to start is retried once, its logs kept, and reported as
failed. Every phase waits for all its Workloads (2 s per Workload, 300..1800 s), a Job seen
Finished without Admitted=True counts as admitted when first seen so, and an arm's figures are the
median over its complete repeats; a ratio is only taken between arms that completed every repeat.

Each repeat reuses bench.federation's parts (bench.fleet's fleet, the Job submitter and its watch of
the manager's Workloads, bench.procfs's sampling of every fleet process) and bench.lws_mix, and
measures: the steady rate (Workloads/s between 10 % and 90 % of the Jobs admitted) and the time to
admit them all; submitted -> Admitted (manager) and -> first pod Running (worker); the whole
fleet's CPU per Workload by kind of process (apiservers, etcd, controllers, kwok, Kueue) and the
rate the machine's CPUs could sustain at that cost; the manager cluster's Kueue memory (ours: the
manager and its agent; upstream: its one process); API requests per Workload from every
apiserver's `apiserver_request_total` (all, and those of kueue.x-k8s.io).

  .venv/bin/python -m bench.compare --jobs 200 --lws 40 --repeat 3 --json /tmp/compare.json
  .venv/bin/python -m bench.compare --jobs 200 --lws 40 --repeat 1 --engines ours_lifted,upstream_tuned
  .venv/bin/python -m bench.compare --jobs 200 --lws 40 --repeat 1 \
      --engines ours_lifted,ours_all_at_once,upstream_tuned
  .venv/bin/python -m bench.compare --jobs 200 --lws 40 --repeat 3 \
      --engines no_kueue,ours_lifted,upstream_tuned
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.common import SHM, BenchError, Obj, end_on_sigterm, say, set_prog, utc_now, write_json
from bench.compare_fair import (
    KUEUE_REQUESTS_API_FLOOR_PER_WL,
    KUEUE_REQUESTS_FLOOR_PER_WL,
    add_above_floor,
    admit_all,
    admitted_at,
    compare,
    fleet_cpu,
    fold,
    format_arms,
    format_comparisons,
)
from bench.compare_fair import steady_rate as steady
from bench.compare_floor import measure_no_kueue, stop_watches, wait_all
from bench.compare_summary import (
    DEFAULT_ENGINES,
    ENGINES,
    KUEUE_GROUP,
    LIFTED_BURST,
    LIFTED_QPS,
    Engine,
    engines,
    format_engine,
    jobset_figures,
    lws_skip_reason,
    phase_timeout,
    requests_by_cluster,
    summarize,
    workloads_of,
)
from bench.federation_result import RunResult, format_result
from bench.federation_run import FederationRun
from bench.fleet import (
    AGENT_COMPONENT,
    MANAGER_COMPONENT,
    NAMESPACE,
    UPSTREAM_COMPONENT,
    UPSTREAM_COMPONENT_STATE,
    Fleet,
    load_localfleet,
    node_size,
)
from bench.jobset_mix import format_jobset_mix, run_jobset_mix
from bench.lws_mix import format_lws_mix, run_lws_mix
from bench.procfs import ProcessSampler
from bench.prom import (
    APISERVER_REQUESTS,
    Sample,
    apiserver_metrics,
    apiserver_requests,
    apiserver_requests_by_kind,
    parse_prometheus_text,
    scrape,
)
from bench.stats import distribution, loads

IDLE_SECONDS = 10.0  # the fleet's CPU at rest is sampled this long before each run
DEFAULT_FLEET_DIR = SHM / "kueue-federation-bench-compare"
# Labels the Job and LWS controllers put on their pods (the worker's copy keeps the manager's name).
POD_LABEL_JOB = "batch.kubernetes.io/job-name"
POD_LABEL_LWS = "leaderworkerset.sigs.k8s.io/name"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=1000, help="batch/v1 Jobs (default 1000)")
    p.add_argument(
        "--lws", type=int, default=200, help="LeaderWorkerSets after the Jobs (default 200; 0: none)"
    )
    p.add_argument("--lws-replicas", type=int, default=2, help="groups per LWS (default 2)")
    p.add_argument("--lws-size", type=int, default=3, help="pods per group (default 3)")
    p.add_argument(
        "--rate", type=float, default=50.0, help="Jobs submitted per second (default 50; 0: unlimited)"
    )
    p.add_argument("--lws-rate", type=float, default=10.0, help="LWS submitted per second (default 10)")
    p.add_argument(
        "--jobsets", type=int, default=0, help="JobSets after the LWS mix (default 0: none; bench.jobset_mix)"
    )
    p.add_argument(
        "--jobset-workers", type=int, default=2, help="pods of each JobSet's workers Job (default 2)"
    )
    p.add_argument(
        "--jobset-rate", type=float, default=10.0, help="JobSets submitted per second (default 10)"
    )
    p.add_argument("--workers", type=int, default=3, help="worker clusters (default 3)")
    p.add_argument(
        "--nodes", type=int, default=4, help="fake nodes per worker (default 4, sized to fit the mix)"
    )
    p.add_argument(
        "--engines",
        default=",".join(DEFAULT_ENGINES),
        help=f"comma-separated runs, in order, among {', '.join(ENGINES)} "
        f"(default {','.join(DEFAULT_ENGINES)})",
    )
    p.add_argument(
        "--lifted-qps",
        type=float,
        default=LIFTED_QPS,
        help=f"clientConnection.qps of every client of ours_lifted and upstream_tuned ({LIFTED_QPS:g})",
    )
    p.add_argument(
        "--lifted-burst",
        type=int,
        default=LIFTED_BURST,
        help=f"clientConnection.burst of ours_lifted and upstream_tuned (default {LIFTED_BURST})",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs of each arm, interleaved (default 3)")
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait after each phase's submissions (default: 2 s per Workload of the phase, "
        "within 300..1800)",
    )
    p.add_argument(
        "--running-timeout",
        type=float,
        default=30.0,
        help="seconds to wait, after a phase is Admitted, for its pods Running on the workers (default 30)",
    )
    p.add_argument(
        "--fleet-dir", default=str(DEFAULT_FLEET_DIR), help=f"fleet directory prefix ({DEFAULT_FLEET_DIR})"
    )
    p.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    p.add_argument("--work-dir", help="scrapes and logs (default /tmp/kueue-federation-bench/compare-<time>)")
    args = p.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown or not args.engines or len(set(args.engines)) != len(args.engines):
        p.error(f"--engines takes distinct names among {', '.join(ENGINES)}; got {','.join(args.engines)}")
    if args.jobs < 1 or args.workers < 1 or args.nodes < 1 or args.repeat < 1:
        p.error("--jobs, --workers, --nodes and --repeat must be at least 1")
    if args.lws < 0 or args.lws_replicas < 1 or args.lws_size < 1 or args.lws_rate <= 0 or args.rate < 0:
        p.error("--lws and --rate must be >= 0; --lws-replicas, --lws-size and --lws-rate positive")
    if args.jobsets < 0 or args.jobset_workers < 1 or args.jobset_rate <= 0:
        p.error("--jobsets must be >= 0; --jobset-workers and --jobset-rate positive")
    return args


# ==============================================================================================
# The workers' pods
# ==============================================================================================


@dataclass
class RunningPods:
    """Pods seen Running (or already Succeeded) on the workers, by owner (Job or LWS name)."""

    first: dict[str, float] = field(default_factory=dict)  # owner -> first pod seen running
    count: dict[str, int] = field(default_factory=dict)  # owner -> pods seen running
    full: dict[str, float] = field(default_factory=dict)  # owner -> `expect` pods seen running
    seen: set[str] = field(default_factory=set)  # pod uids counted
    expect: dict[str, int] = field(default_factory=dict)  # owner -> pods it runs (LWS)
    succeeded: dict[str, float] = field(default_factory=dict)  # owner -> first pod seen Succeeded

    def observe(self, pod: Obj, now: float) -> None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        owner = labels.get(POD_LABEL_JOB) or labels.get("job-name") or labels.get(POD_LABEL_LWS)
        uid = meta.get("uid")
        phase = (pod.get("status") or {}).get("phase")
        if owner and phase == "Succeeded":
            self.succeeded.setdefault(owner, now)
        if not owner or not uid or uid in self.seen or phase not in ("Running", "Succeeded"):
            return
        self.seen.add(uid)
        self.first.setdefault(owner, now)
        self.count[owner] = self.count.get(owner, 0) + 1
        if owner not in self.full and self.count[owner] >= self.expect.get(owner, 1):
            self.full[owner] = now


def running_latencies(submitted: Mapping[str, float], reached: Mapping[str, float]) -> list[float]:
    return [max(0.0, reached[name] - t) for name, t in submitted.items() if name in reached]


# ==============================================================================================
# One engine's run
# ==============================================================================================


class CompareRun:
    def __init__(self, engine: Engine, args: argparse.Namespace, work_dir: Path) -> None:
        self.engine = engine
        self.args = args
        # One directory per run: the fleet's saved logs are named <cluster>-<component>.log.
        self.work_dir = work_dir / engine.name
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.fleet = Fleet(Path(f"{args.fleet_dir}-{engine.name}"), owned=True)
        self.pods = RunningPods()
        self.lws_submitted: dict[str, float] = {}
        self.lws_skipped: str | None = None
        self.idle_cpu_per_s = 0.0
        self.sampled_from = time.monotonic()
        self.sampled_s = 0.0

    def endpoints(self) -> dict[str, tuple[str, str | None]]:
        """Every Kueue process's /metrics: label cluster/component -> (url, bearer token). Ours and
        upstream's alike are HTTPS behind a TokenReview and a SubjectAccessReview: the token is the
        fleet's metrics reader's (hack/localfleet.py makes one per cluster)."""
        out: dict[str, tuple[str, str | None]] = {}
        for name, c in self.fleet.clusters.items():
            token = self.fleet.metrics_token(name)
            if MANAGER_COMPONENT in c:
                out[f"{name}/{MANAGER_COMPONENT}"] = (c[MANAGER_COMPONENT]["metrics"], token)
            if "agent" in c:
                out[f"{name}/{AGENT_COMPONENT}"] = (c["agent"]["metrics"], token)
            if UPSTREAM_COMPONENT_STATE in c:
                out[f"{name}/{UPSTREAM_COMPONENT}"] = (c[UPSTREAM_COMPONENT_STATE]["metrics"], token)
        return out

    async def scrape_all(self, tag: str) -> dict[str, list[Sample]]:
        out = {}
        for label, (url, token) in self.endpoints().items():
            save = self.work_dir / f"{self.engine.name}-{label.replace('/', '-')}.{tag}.metrics.txt"
            out[label] = await asyncio.to_thread(scrape, url, save, token)
            if not out[label]:
                say(f"no samples from {label} ({url})")
        return out

    async def scrape_apiservers(self, tag: str) -> dict[str, list[Sample]]:
        """Every cluster's kube-apiserver /metrics (kubectl get --raw, the admin kubeconfig)."""
        kubectl = load_localfleet().Binaries(self.fleet.state["versions"]).path("kubectl")
        out = {}
        for name, c in self.fleet.clusters.items():
            save = self.work_dir / f"{self.engine.name}-{name}-apiserver.{tag}.metrics.txt"
            text = await asyncio.to_thread(apiserver_metrics, kubectl, c["kubeconfig"], save)
            out[name] = [] if text is None else parse_prometheus_text(text)
        return out

    async def watch_pods(self) -> list[Any]:
        from kube_runtime.client import KubeClient
        from kube_runtime.informer import Informer
        from kueue_domain import api

        informers = []
        for worker in self.fleet.workers:
            client = await KubeClient.from_kubeconfig_file(self.fleet.clusters[worker]["kubeconfig"])
            informer = Informer(client, api.POD, namespace=NAMESPACE, name=f"bench-pods-{worker}")
            informer.add_handler(
                on_add=lambda pod: self.pods.observe(pod, time.monotonic()),
                on_update=lambda _old, pod: self.pods.observe(pod, time.monotonic()),
            )
            informer.start()
            informers.append((informer, client))
        async with asyncio.timeout(60):
            for informer, _ in informers:
                await informer.wait_synced()
        return informers

    async def wait_running(self, names: Sequence[str], reached: Mapping[str, float], what: str) -> None:
        await wait_all(names, reached, self.args.running_timeout, f"{what} Running on a worker")

    async def sample_idle(self) -> None:
        """The fleet's CPU at rest (controllers' resyncs, leases, kwok's heartbeats): a slower arm runs
        longer and pays more of it, so the report also gives the CPU above it."""
        idle = ProcessSampler(self.fleet.processes(), interval=IDLE_SECONDS)
        idle.start()
        await asyncio.sleep(IDLE_SECONDS)
        await idle.stop()
        self.idle_cpu_per_s = sum(f.cpu_s or 0.0 for f in idle.figures.values()) / IDLE_SECONDS

    async def measure(self) -> Obj:
        if not self.engine.kueue:
            return await measure_no_kueue(self)
        args = self.args
        informers = await self.watch_pods()
        await self.sample_idle()
        sampler = ProcessSampler(self.fleet.processes(), interval=0.5)
        try:
            before = await self.scrape_all("before")
            apiservers_before = await self.scrape_apiservers("before")
            sampler.start()
            self.sampled_from = time.monotonic()
            run, jobs_result = await self.run_jobs()
            lws_result = await self.run_lws(jobs_result)
            jobset_result = await self.run_jobsets(jobs_result)
            await sampler.stop()
            self.sampled_s = time.monotonic() - self.sampled_from
            after = await self.scrape_all("after")
            apiservers_after = await self.scrape_apiservers("after")
        finally:
            await stop_watches(informers)
        cluster_of_host = {self.fleet.host_of(c): c for c in self.fleet.clusters}
        job_submitted = {r.name: r.submitted for r in run.recorder.jobs.values() if r.submitted is not None}
        summary = summarize(
            self.engine,
            args,
            jobs_result,
            running_latencies(job_submitted, self.pods.first),
            lws_result,
            running_latencies(self.lws_submitted, self.pods.full),
            sampler.figures,
            apiserver_requests(apiservers_before, apiservers_after),
            apiserver_requests(apiservers_before, apiservers_after, KUEUE_GROUP),
            requests_by_cluster(before, after, cluster_of_host),
            apiserver_requests_by_kind(apiservers_before, apiservers_after),
        )
        summary["lws_skipped"] = self.lws_skipped
        summary.update(jobset_figures(jobset_result))
        summary.update(self.fair_figures(run, jobs_result, lws_result, sampler, summary))
        return summary

    async def run_jobs(self) -> tuple[FederationRun, RunResult]:
        """The Jobs phase, then its Jobs' pods Running on the workers (unless it timed out)."""
        args = self.args
        run_args = argparse.Namespace(
            rate=args.rate,
            clients=4,
            concurrency=100,
            keep_running=False,
            set_managed_by=False,
            timeout=phase_timeout(args, args.jobs),
            progress_every=5.0,
            keep_jobs=True,
        )
        run = FederationRun(self.fleet, run_args, "dispatch", args.jobs, self.work_dir)
        jobs_result = await run.run()
        print(format_result(jobs_result), flush=True)
        if not jobs_result.timed_out:
            await self.wait_running(run.names, self.pods.first, "Jobs")
        return run, jobs_result

    async def run_lws(self, jobs_result: RunResult) -> Any:
        """The LWS mix and its pods Running, unless `lws_skip_reason` skips it (then None)."""
        args = self.args
        self.lws_skipped = lws_skip_reason(args, jobs_result)
        if self.lws_skipped:
            say(f"LWS mix skipped: {self.lws_skipped}")
            return None

        def submitted(name: str, at: float) -> None:
            # Set before its pods can show up: an LWS counts as running with all of them.
            self.lws_submitted[name] = at
            self.pods.expect[name] = args.lws_replicas * args.lws_size

        lws_result = await run_lws_mix(
            self.fleet.manager_kubeconfig,
            count=args.lws,
            replicas=args.lws_replicas,
            size=args.lws_size,
            rate=args.lws_rate,
            timeout_s=phase_timeout(args, args.lws * args.lws_replicas),
            cleanup=False,
            on_submitted=submitted,
        )
        print(format_lws_mix(lws_result), flush=True)
        await self.wait_running(list(self.lws_submitted), self.pods.full, "LWS")
        return lws_result

    async def run_jobsets(self, jobs_result: RunResult) -> Any:
        """The JobSet mix when asked for and the Jobs phase went through (else None)."""
        args = self.args
        if not args.jobsets or jobs_result.error or jobs_result.timed_out:
            return None
        jobset_result = await run_jobset_mix(
            self.fleet.manager_kubeconfig,
            count=args.jobsets,
            workers=args.jobset_workers,
            rate=args.jobset_rate,
            timeout_s=phase_timeout(args, args.jobsets),
            cleanup=False,
        )
        print(format_jobset_mix(jobset_result), flush=True)
        return jobset_result

    def fair_figures(self, run: FederationRun, jobs: RunResult, lws: Any, sampler: Any, summary: Obj) -> Obj:
        """The figures the arms are compared by: a Job seen Finished first counts as admitted then;
        complete only if every Workload of every phase was admitted."""
        args = self.args
        records = [r for r in run.recorder.jobs.values() if r.submitted is not None]
        pairs = [(r.submitted, admitted_at(r.admitted, r.finished)) for r in records]
        admitted = [(s, t) for s, t in pairs if t is not None]
        times = [t for _, t in admitted]
        latencies = [t - submitted for submitted, t in admitted]
        dist = distribution(latencies)
        lws_complete = not args.lws or (
            lws is not None and not lws.timed_out and not lws.error and lws.placed >= args.lws
        )
        complete = bool(
            jobs is not None
            and not jobs.error
            and len(records) == args.jobs
            and len(times) == args.jobs
            and lws_complete
        )
        running = [self.pods.first[n] for n in run.names if n in self.pods.first]
        return {
            "complete": complete,
            "binding_limit": self.engine.binding_limit(),
            "jobs_admitted_or_finished": len(times),
            "throughput_wl_s": steady(times, args.jobs),
            "running_rate_wl_s": steady(running, args.jobs),
            "jobs_ended_seen": sum(1 for n in run.names if n in self.pods.succeeded),
            "throughput_first_to_last_wl_s": summary.get("throughput_wl_s"),
            "admit_all_s": admit_all([r.submitted for r in records], times, args.jobs),
            "p50_admitted_s": dist.p50,
            "p95_admitted_s": dist.p95,
            "p99_admitted_s": dist.p99,
            **self.fleet_figures(sampler, summary),
        }

    def fleet_figures(self, sampler: ProcessSampler, summary: Obj) -> Obj:
        """The whole fleet's CPU during the run (per Workload, by kind, above its rest) and the
        manager cluster's Kueue memory."""
        workloads = workloads_of(self.args)
        cpu = {label: f.cpu_s for label, f in sampler.figures.items()}
        fleet = fleet_cpu(cpu, workloads, os.cpu_count() or 1)
        above_idle = fleet["fleet_cpu_s"] - self.idle_cpu_per_s * self.sampled_s
        return {
            **fleet,
            "fleet_idle_cpu_per_s": self.idle_cpu_per_s,
            "fleet_cpu_ms_per_wl_above_idle": 1000.0 * above_idle / workloads,
            "fleet_cpu_s_by_process": dict(sorted(cpu.items())),
            "manager_cluster_rss_mib": summary.get("manager_peak_rss_mib"),
        }

    def run(self) -> Obj:
        args = self.args
        pods = max(
            args.jobs, args.lws * args.lws_replicas * args.lws_size, args.jobsets * (1 + args.jobset_workers)
        )
        try:
            self.fleet.start(
                args.workers,
                node_size(pods, args.nodes),
                self.engine.client_qps,
                self.engine.client_burst,
                upstream_kueue=self.engine.upstream_clusters,
                kueue=self.engine.kueue,
                extra_up_args=(
                    "--no-sample",
                    "--keep-on-failure",
                    *(["--upstream-kueue-lifted"] if self.engine.lifted_workers else []),
                    *(["--dispatcher", self.engine.dispatcher] if self.engine.dispatcher else []),
                    *(["--event-types", self.engine.event_types] if self.engine.event_types else []),
                    *(["--event-loop", self.engine.event_loop] if self.engine.event_loop else []),
                ),
            )
            say(f"{self.engine.name}: fleet up, machine load {loads(os.getloadavg())}")
            summary = asyncio.run(self.measure())
        except BaseException:
            self.fleet.stop(save_logs_to=self.work_dir, everything=True)  # every process's log
            raise
        self.fleet.stop(save_logs_to=self.work_dir)
        return summary


def run_arm(engine: Engine, args: argparse.Namespace, work_dir: Path, repeat: int) -> Obj | None:
    """One repeat of one arm, retried once when it fails to run; None when both attempts failed
    (their logs stay in the work directory)."""
    for attempt in (1, 2):
        tag = f"r{repeat}" + ("" if attempt == 1 else f"-retry{attempt - 1}")
        say(f"== {engine.name} repeat {repeat} ({engine.client_budget()})")
        t0 = time.monotonic()
        try:
            summary = CompareRun(engine, args, work_dir / tag).run()
        except BenchError as e:
            say(f"{engine.name} repeat {repeat} attempt {attempt} failed: {e} (logs in {work_dir / tag})")
            continue
        summary["wall_s"] = time.monotonic() - t0
        summary["repeat"] = repeat
        summary["attempt"] = attempt
        print(format_engine(summary), flush=True)
        return summary
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_prog("bench-compare")
    end_on_sigterm()
    work_dir = common.work_dir(args.work_dir, "compare-")
    chosen = engines(args)
    repeats: dict[str, list[Obj | None]] = {e.name: [] for e in chosen}
    started = time.monotonic()
    try:
        for repeat in range(1, args.repeat + 1):
            for engine in chosen:
                repeats[engine.name].append(run_arm(engine, args, work_dir, repeat))
                if args.json:  # kept after every repeat: a run stopped early still leaves its data
                    write_payload(args, repeats, work_dir, started, partial=True)
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    arms, table = write_payload(args, repeats, work_dir, started, partial=False)
    print(format_arms(arms), flush=True)
    print(format_comparisons(table), flush=True)
    say(f"scrapes and logs in {work_dir}")
    return 0 if all(a and a["completed"] for a in arms.values()) else 1


def write_payload(
    args: argparse.Namespace,
    repeats: dict[str, list[Obj | None]],
    work_dir: Path,
    started: float,
    partial: bool,
) -> tuple[dict[str, Obj | None], dict[str, Obj]]:
    """The arms folded from the repeats so far, their ratios, and (with --json) the file; `partial`:
    not every repeat has run yet (meta.partial)."""
    arms: dict[str, Obj | None] = {name: fold(runs) for name, runs in repeats.items()}
    for name, arm in arms.items():
        if arm:
            arm["engine"] = name
    add_above_floor(arms)
    table = compare(arms)
    if args.json:
        meta = {
            "date": utc_now(),
            "cpus": os.cpu_count(),
            "args": vars(args),
            "wall_s": time.monotonic() - started,
            "admitted": "Admitted=True seen on the manager, or Finished seen first (counted admitted then)",
            "throughput": "steady rate: Job Workloads admitted per second between 10 % and 90 % of them",
            "latency_to_running": "first pod (Job) / every pod (LWS) seen Running or Succeeded on its worker",
            "api_requests_source": f"{APISERVER_REQUESTS} of every cluster's kube-apiserver",
            "kueue_requests_floor_per_wl": KUEUE_REQUESTS_FLOOR_PER_WL,
            "kueue_requests_api_floor_per_wl": KUEUE_REQUESTS_API_FLOOR_PER_WL,
            "workDir": str(work_dir),
            "partial": partial,
        }
        payload: Obj = {name: arms.get(name) for name in ENGINES}
        payload["ratios"] = table
        payload["meta"] = meta
        write_json(args.json, payload)
    return arms, table


if __name__ == "__main__":
    sys.exit(main())
