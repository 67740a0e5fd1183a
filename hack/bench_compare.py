#!/usr/bin/env python3
"""Side by side with upstream MultiKueue: the same workload mix through a fresh local fleet of
1 manager + N workers (default 3), once per engine, one fleet at a time:

  ours             our manager and worker_agents (clientConnection: our defaults)
  upstream         upstream Kueue (KUEUE_VERSION of hack/versions.env) on every cluster, its
                   default clientConnection (v0.19: qps 300 / burst 500)
  upstream_tuned   the same with a larger client budget (default qps -1: client-side rate limiting
                   off, as upstream's Configuration API allows; --tuned-qps / --tuned-burst)

Each run reuses hack/bench_federation.py (the fleet, the Job submitter and its watch of the
manager's Workloads, /proc sampling) and hack/bench_lws_mix.py (the LeaderWorkerSet mix), and adds:

  - a watch of the pods on every worker: submitted -> the first pod of a Job Running (or already
    Succeeded) on its worker, and for an LWS -> all its pods Running there;
  - API requests per Workload from every apiserver's `apiserver_request_total` (the one source
    both engines share: upstream's `kueue` does not export client-go's rest_client_requests_total),
    all of them (Kueue's, and the Job controller's, scheduler's, kwok's and the harness's, which are
    the same work for both engines) and those of the group kueue.x-k8s.io (about only Kueue's);
    ours also counts its own requests by apiserver (rest_client_requests_total{host}, shown apart);
  - CPU seconds and peak RSS of every Kueue process, per cluster (/proc).

It prints a table per engine, then ours / upstream ratios; `--json FILE` writes
{"ours": {...}, "upstream": {...}, "upstream_tuned": {...}, "ratios": {...}, "meta": {...}}.

  .venv/bin/python hack/bench_compare.py [--jobs 1000] [--lws 200] [--engines ours,upstream,upstream_tuned]
  .venv/bin/python hack/bench_compare.py --jobs 200 --lws 40 --json /tmp/compare.json   # short form
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))
sys.path.insert(0, str(REPO))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Mapping, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import bench_federation as bf  # noqa: E402
from bench_lws_mix import format_lws_mix, run_lws_mix  # noqa: E402

Obj = dict[str, Any]

ENGINES = ("ours", "upstream", "upstream_tuned")
DEFAULT_FLEET_DIR = (
    Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / "kueue-federation-bench-compare"
)
KUEUE_COMPONENTS = (bf.MANAGER_COMPONENT, bf.AGENT_COMPONENT, bf.UPSTREAM_COMPONENT)
# Labels the Job and LWS controllers put on their pods (the worker's copy keeps the manager's name).
POD_LABEL_JOB = "batch.kubernetes.io/job-name"
POD_LABEL_LWS = "leaderworkerset.sigs.k8s.io/name"
APISERVER_REQUESTS = "apiserver_request_total"
KUEUE_GROUP = "kueue.x-k8s.io"
# Upstream v0.19's clientConnection defaults (apis/config/v1beta2/defaults.go).
UPSTREAM_DEFAULT_QPS = 300.0
UPSTREAM_DEFAULT_BURST = 500
# Figures divided ours / theirs; "higher" says which way is better.
RATIO_KEYS: dict[str, str] = {
    "throughput_wl_s": "higher",
    "lws_groups_per_s": "higher",
    "p99_admitted_s": "lower",
    "p99_running_s": "lower",
    "lws_p99_admitted_s": "lower",
    "lws_p99_running_s": "lower",
    "manager_cpu_s": "lower",
    "manager_peak_rss_mib": "lower",
    "workers_cpu_s": "lower",
    "workers_peak_rss_mib": "lower",
    "api_requests_per_wl": "lower",
    "api_requests_per_wl_manager": "lower",
    "api_requests_per_wl_workers": "lower",
    "api_requests_per_wl_kueue_group": "lower",
}


def say(msg: str) -> None:
    print(f"bench-compare: {msg}", file=sys.stderr, flush=True)


# ==============================================================================================
# Arguments, engines, summaries, ratios (pure)
# ==============================================================================================


@dataclass(frozen=True)
class Engine:
    name: str
    upstream_clusters: tuple[str, ...]  # clusters running upstream Kueue (all of them, or none)
    client_qps: float | None  # None: the engine's default
    client_burst: int | None

    def client_budget(self) -> str:
        if self.upstream_clusters:
            qps = UPSTREAM_DEFAULT_QPS if self.client_qps is None else self.client_qps
            burst = UPSTREAM_DEFAULT_BURST if self.client_burst is None else self.client_burst
            if qps < 0:
                return "qps unlimited (negative: client-side rate limiting off)"
            return f"qps {qps:g} / burst {burst}"
        qps = bf.DEFAULT_CLIENT_QPS if self.client_qps is None else self.client_qps
        burst = bf.DEFAULT_CLIENT_BURST if self.client_burst is None else self.client_burst
        return f"qps {qps:g} / burst {burst} per API resource"


def engines(args: argparse.Namespace) -> list[Engine]:
    """The runs `args.engines` asks for, in the order given."""
    every = ("manager", *(f"worker{i}" for i in range(1, args.workers + 1)))
    known = {
        "ours": Engine("ours", (), args.client_qps, args.client_burst),
        "upstream": Engine("upstream", every, None, None),
        "upstream_tuned": Engine("upstream_tuned", every, args.tuned_qps, args.tuned_burst),
    }
    return [known[name] for name in args.engines]


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
    p.add_argument("--workers", type=int, default=3, help="worker clusters (default 3)")
    p.add_argument(
        "--nodes", type=int, default=4, help="fake nodes per worker (default 4, sized to fit the mix)"
    )
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated runs, in order (default {','.join(ENGINES)})",
    )
    p.add_argument("--client-qps", type=float, help="clientConnection.qps of ours (default: our 20)")
    p.add_argument("--client-burst", type=int, help="clientConnection.burst of ours (default: our 30)")
    p.add_argument(
        "--tuned-qps",
        type=float,
        default=-1.0,
        help="clientConnection.qps of upstream_tuned (default -1: no client-side rate limit)",
    )
    p.add_argument("--tuned-burst", type=int, default=1000, help="clientConnection.burst of upstream_tuned")
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait after each phase's submissions (default: 0.5 s per Workload of the phase, "
        "within 60..600)",
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
    if args.jobs < 1 or args.workers < 1 or args.nodes < 1:
        p.error("--jobs, --workers and --nodes must be at least 1")
    if args.lws < 0 or args.lws_replicas < 1 or args.lws_size < 1 or args.lws_rate <= 0 or args.rate < 0:
        p.error("--lws and --rate must be >= 0; --lws-replicas, --lws-size and --lws-rate positive")
    return args


def phase_timeout(args: argparse.Namespace, workloads: int) -> float:
    """--timeout, or 0.5 s per Workload of the phase within 60..600 s: a stalled engine ends the
    run in bounded time (its unadmitted Workloads are reported) instead of holding the machine."""
    if args.timeout is not None:
        return args.timeout
    return min(600.0, max(60.0, 0.5 * workloads))


def lws_skip_reason(args: argparse.Namespace, jobs: bf.RunResult) -> str | None:
    """Why the LWS phase does not run after this Jobs phase (None: it runs). After a timed-out Jobs
    phase its LWS would queue behind the Jobs still being dispatched: no LWS figure, just a longer run."""
    if not args.lws:
        return "--lws 0"
    if jobs.error:
        return f"the Jobs phase failed ({jobs.error})"
    if jobs.timed_out:
        return f"{jobs.submitted - jobs.admitted:,} Jobs were still not Admitted at the Jobs phase's timeout"
    return None


def workloads_of(args: argparse.Namespace) -> int:
    """Workloads on the manager: one per Job, one per LWS group."""
    return args.jobs + args.lws * args.lws_replicas


def _sum(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _per(value: float | None, count: int) -> float | None:
    return None if value is None or count <= 0 else value / count


def requests_by_cluster(
    before: Mapping[str, Sequence[bf.Sample]],
    after: Mapping[str, Sequence[bf.Sample]],
    cluster_of_host: Mapping[str, str],
) -> dict[str, float]:
    """Requests every Kueue process sent between two scrapes, summed by the cluster whose apiserver
    received them (rest_client_requests_total's `host`). Keys of before/after: process labels."""
    out: dict[str, float] = {}
    for label, samples in after.items():
        delta = bf.counter_delta(
            bf.metric_by_label(before.get(label) or [], bf.METRIC_REQUESTS, "host"),
            bf.metric_by_label(samples, bf.METRIC_REQUESTS, "host"),
        )
        for host, count in delta.items():
            cluster = cluster_of_host.get(host, host)
            out[cluster] = out.get(cluster, 0.0) + count
    return out


def apiserver_requests(
    before: Mapping[str, Sequence[bf.Sample]],
    after: Mapping[str, Sequence[bf.Sample]],
    group: str | None = None,
) -> dict[str, float]:
    """Requests each cluster's apiserver served between two scrapes (apiserver_request_total, every
    verb and code), optionally only those of one API group. Keys: cluster names."""
    selector = {} if group is None else {"group": group}
    out = {}
    for cluster, samples in after.items():
        now = bf.metric_sum(samples, APISERVER_REQUESTS, **selector)
        then = bf.metric_sum(before.get(cluster) or [], APISERVER_REQUESTS, **selector)
        out[cluster] = now - then if now >= then else now
    return out


def summarize(
    engine: Engine,
    args: argparse.Namespace,
    jobs: bf.RunResult | None,
    job_running: Sequence[float],
    lws: Any,
    lws_running: Sequence[float],
    processes: Mapping[str, bf.ProcessFigures],
    requests: Mapping[str, float],
    kueue_group_requests: Mapping[str, float] | None = None,
    client_requests: Mapping[str, float] | None = None,
) -> Obj:
    """The figures of one engine's run (a JSON-ready dict). `requests`: every request each cluster's
    apiserver served; `kueue_group_requests`: those of kueue.x-k8s.io; `client_requests`: those our
    processes counted themselves, by destination cluster (upstream's cannot be read)."""
    workloads = workloads_of(args)
    to_admitted = jobs.to_admitted if jobs else bf.Distribution()
    running = bf.distribution(job_running)
    lws_admitted = (lws.to_placed if lws is not None else None) or bf.Distribution()
    lws_run = bf.distribution(lws_running)
    kueue = {
        label: {"cpu_s": f.cpu_s, "peak_rss_mib": f.peak_rss_mib, "pid": f.pid}
        for label, f in sorted(processes.items())
        if label.partition("/")[2] in KUEUE_COMPONENTS
    }

    def on(cluster_test: Callable[[str], bool], key: str) -> float | None:
        return _sum([v[key] for label, v in kueue.items() if cluster_test(label.partition("/")[0])])

    manager_requests = requests.get("manager")
    worker_requests = _sum([v for c, v in requests.items() if c.startswith("worker")])
    return {
        "engine": engine.name,
        "kueue": "ours" if not engine.upstream_clusters else "upstream",
        "client_budget": engine.client_budget(),
        "jobs": args.jobs,
        "lws": args.lws,
        "workloads": workloads,
        "jobs_submitted": jobs.submitted if jobs else 0,
        "jobs_admitted": jobs.admitted if jobs else 0,
        "jobs_running_seen": len(job_running),
        "lws_placed": lws.placed if lws is not None else 0,
        "lws_running_seen": len(lws_running),
        "timed_out": bool((jobs and jobs.timed_out) or (lws is not None and lws.timed_out)),
        "error": (jobs.error if jobs else None) or (lws.error if lws is not None else None),
        "throughput_wl_s": jobs.throughput_per_s if jobs else None,
        "p50_admitted_s": to_admitted.p50,
        "p95_admitted_s": to_admitted.p95,
        "p99_admitted_s": to_admitted.p99,
        "p50_running_s": running.p50,
        "p95_running_s": running.p95,
        "p99_running_s": running.p99,
        "lws_groups_per_s": lws.groups_per_s if lws is not None else None,
        "lws_p50_admitted_s": lws_admitted.p50,
        "lws_p95_admitted_s": lws_admitted.p95,
        "lws_p99_admitted_s": lws_admitted.p99,
        "lws_p50_running_s": lws_run.p50,
        "lws_p95_running_s": lws_run.p95,
        "lws_p99_running_s": lws_run.p99,
        "processes": kueue,
        "manager_cpu_s": on(lambda c: c == "manager", "cpu_s"),
        "manager_peak_rss_mib": on(lambda c: c == "manager", "peak_rss_mib"),
        "workers_cpu_s": on(lambda c: c != "manager", "cpu_s"),
        "workers_peak_rss_mib": on(lambda c: c != "manager", "peak_rss_mib"),
        "api_requests_source": f"{APISERVER_REQUESTS} of each cluster's kube-apiserver (all clients)",
        "api_requests": dict(sorted(requests.items())),
        "api_requests_kueue_group": dict(sorted((kueue_group_requests or {}).items())),
        "api_requests_per_wl_kueue_group": _per(_sum(list((kueue_group_requests or {}).values())), workloads),
        "kueue_client_requests": dict(sorted((client_requests or {}).items())),
        "api_requests_per_wl": _per(_sum([manager_requests, worker_requests]), workloads),
        "api_requests_per_wl_manager": _per(manager_requests, workloads),
        "api_requests_per_wl_workers": _per(worker_requests, workloads),
    }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def ratios(results: Mapping[str, Obj | None]) -> dict[str, dict[str, float | None]]:
    """ours / each upstream run, for every figure of RATIO_KEYS ({} without ours)."""
    ours = results.get("ours")
    if not ours:
        return {}
    out = {}
    for name in ("upstream", "upstream_tuned"):
        theirs = results.get(name)
        if theirs:
            out[f"ours/{name}"] = {key: ratio(ours.get(key), theirs.get(key)) for key in RATIO_KEYS}
    return out


def json_payload(results: Mapping[str, Obj | None], meta: Obj) -> Obj:
    """What --json writes: one entry per engine (null when not run), the ratios, the run's context."""
    payload: Obj = {name: results.get(name) for name in ENGINES}
    payload["ratios"] = ratios(results)
    payload["meta"] = meta
    return payload


def format_engine(summary: Obj) -> str:
    fmt, n = bf.fmt, summary["workloads"]

    def dist(prefix: str) -> str:
        values = [summary[f"{prefix.replace('*', q)}"] for q in ("p50", "p95", "p99")]
        if all(v is None for v in values):
            return "n/a"
        return " / ".join(fmt(v, digits=3) for v in values) + " s"

    rows = [
        (
            "Jobs submitted / Admitted / pods Running seen",
            " / ".join(f"{summary[k]:,}" for k in ("jobs_submitted", "jobs_admitted", "jobs_running_seen")),
        ),
        ("throughput, Job Workloads Admitted on the manager", fmt(summary["throughput_wl_s"], "/s")),
        ("Job submitted -> Admitted (manager) p50/p95/p99", dist("*_admitted_s")),
        ("Job submitted -> pod Running (worker) p50/p95/p99", dist("*_running_s")),
        (
            "LWS placed whole / all pods Running seen",
            f"{summary['lws_placed']} / {summary['lws_running_seen']}",
        ),
        ("LWS groups Admitted per second", fmt(summary["lws_groups_per_s"], "/s")),
        ("LWS submitted -> all groups Admitted p50/p95/p99", dist("lws_*_admitted_s")),
        ("LWS submitted -> all pods Running p50/p95/p99", dist("lws_*_running_s")),
    ]
    for label, p in summary["processes"].items():
        rows.append((f"{label}: CPU / peak RSS", f"{fmt(p['cpu_s'], 's')} / {fmt(p['peak_rss_mib'], 'MiB')}"))
    rows += [
        (
            "manager cluster Kueue: CPU / peak RSS (sum)",
            f"{fmt(summary['manager_cpu_s'], 's')} / {fmt(summary['manager_peak_rss_mib'], 'MiB')}",
        ),
        (
            "worker clusters Kueue: CPU / peak RSS (sum)",
            f"{fmt(summary['workers_cpu_s'], 's')} / {fmt(summary['workers_peak_rss_mib'], 'MiB')}",
        ),
    ]
    group = summary["api_requests_kueue_group"]
    for cluster, count in summary["api_requests"].items():
        rows.append(
            (
                f"{cluster} apiserver requests per Workload: all / {KUEUE_GROUP}",
                f"{fmt(_per(count, n), digits=2)} / {fmt(_per(group.get(cluster), n), digits=2)}",
            )
        )
    rows.append(
        (
            "apiserver requests per Workload, every cluster: all / " + KUEUE_GROUP,
            f"{fmt(summary['api_requests_per_wl'], digits=2)} / "
            f"{fmt(summary['api_requests_per_wl_kueue_group'], digits=2)}",
        )
    )
    for cluster, count in summary["kueue_client_requests"].items():
        rows.append(
            (f"our Kueue processes' own requests to {cluster} per Workload", fmt(_per(count, n), digits=2))
        )
    width = max(len(r[0]) for r in rows)
    lines = [
        f"== {summary['engine']}: {summary['kueue']} Kueue, client {summary['client_budget']}, "
        f"{n:,} Workloads"
    ]
    if summary["error"]:
        lines.append(f"   ERROR: {summary['error']}")
    if summary["timed_out"]:
        lines.append("   TIMED OUT: some Workloads were not seen Admitted")
    if summary.get("lws_skipped"):
        lines.append(f"   LWS mix skipped: {summary['lws_skipped']}")
    lines += [f"   {name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines)


def format_ratios(table: Mapping[str, Mapping[str, float | None]]) -> str:
    if not table:
        return "== ratios: n/a (ours and at least one upstream run are needed)"
    columns = list(table)
    lines = ["== ratios ours / upstream (throughput: higher is better for ours; the rest: lower is)"]
    width = max(len(k) for k in RATIO_KEYS)
    lines.append("   " + "figure".ljust(width) + "".join(f"  {c:>22}" for c in columns))
    for key in RATIO_KEYS:
        cells = "".join(f"  {bf.fmt(table[c].get(key), digits=2):>22}" for c in columns)
        lines.append(f"   {key.ljust(width)}{cells}")
    return "\n".join(lines)


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

    def observe(self, pod: Obj, now: float) -> None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        owner = labels.get(POD_LABEL_JOB) or labels.get("job-name") or labels.get(POD_LABEL_LWS)
        uid = meta.get("uid")
        phase = (pod.get("status") or {}).get("phase")
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
        self.fleet = bf.Fleet(Path(f"{args.fleet_dir}-{engine.name}"), owned=True)
        self.pods = RunningPods()
        self.lws_submitted: dict[str, float] = {}
        self.lws_skipped: str | None = None

    def endpoints(self) -> dict[str, tuple[str, str | None]]:
        """Every Kueue process's /metrics: label cluster/component -> (url, bearer token). Ours and
        upstream's alike are HTTPS behind a TokenReview and a SubjectAccessReview: the token is the
        fleet's metrics reader's (hack/localfleet.py makes one per cluster)."""
        out: dict[str, tuple[str, str | None]] = {}
        for name, c in self.fleet.clusters.items():
            token = self.fleet.metrics_token(name)
            if bf.MANAGER_COMPONENT in c:
                out[f"{name}/{bf.MANAGER_COMPONENT}"] = (c[bf.MANAGER_COMPONENT]["metrics"], token)
            if "agent" in c:
                out[f"{name}/{bf.AGENT_COMPONENT}"] = (c["agent"]["metrics"], token)
            if bf.UPSTREAM_COMPONENT_STATE in c:
                out[f"{name}/{bf.UPSTREAM_COMPONENT}"] = (c[bf.UPSTREAM_COMPONENT_STATE]["metrics"], token)
        return out

    async def scrape_all(self, tag: str) -> dict[str, list[bf.Sample]]:
        out = {}
        for label, (url, token) in self.endpoints().items():
            save = self.work_dir / f"{self.engine.name}-{label.replace('/', '-')}.{tag}.metrics.txt"
            out[label] = await asyncio.to_thread(bf.scrape, url, save, token)
            if not out[label]:
                say(f"no samples from {label} ({url})")
        return out

    async def scrape_apiservers(self, tag: str) -> dict[str, list[bf.Sample]]:
        """Every cluster's kube-apiserver /metrics (kubectl get --raw, the admin kubeconfig)."""
        import localfleet

        kubectl = str(localfleet.Binaries(self.fleet.state["versions"]).path("kubectl"))
        out = {}
        for name, c in self.fleet.clusters.items():
            cmd = [kubectl, "--kubeconfig", c["kubeconfig"], "get", "--raw", "/metrics"]
            res = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
            if res.returncode != 0:
                say(f"could not read {name}'s apiserver metrics: {res.stderr.strip()}")
                out[name] = []
                continue
            (self.work_dir / f"{self.engine.name}-{name}-apiserver.{tag}.metrics.txt").write_text(res.stdout)
            out[name] = bf.parse_prometheus_text(res.stdout)
        return out

    async def watch_pods(self) -> list[Any]:
        from kube_runtime import api
        from kube_runtime.client import KubeClient
        from kube_runtime.informer import Informer

        informers = []
        for worker in self.fleet.workers:
            client = await KubeClient.from_kubeconfig_file(self.fleet.clusters[worker]["kubeconfig"])
            informer = Informer(client, api.POD, namespace=bf.NAMESPACE, name=f"bench-pods-{worker}")
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
        deadline = time.monotonic() + self.args.running_timeout
        while time.monotonic() < deadline:
            missing = sum(1 for n in names if n not in reached)
            if not missing:
                return
            await asyncio.sleep(0.2)
        say(f"{what}: {sum(1 for n in names if n not in reached)} not seen Running on a worker in time")

    async def measure(self) -> Obj:
        args = self.args
        informers = await self.watch_pods()
        sampler = bf.ProcessSampler(self.fleet.processes(), interval=0.5)
        jobs_result: bf.RunResult | None = None
        lws_result = None
        try:
            before = await self.scrape_all("before")
            apiservers_before = await self.scrape_apiservers("before")
            sampler.start()
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
            run = bf.FederationRun(self.fleet, run_args, "dispatch", args.jobs, self.work_dir)
            jobs_result = await run.run()
            print(bf.format_result(jobs_result), flush=True)
            if not jobs_result.timed_out:
                await self.wait_running(run.names, self.pods.first, "Jobs")
            self.lws_skipped = lws_skip_reason(args, jobs_result)
            if self.lws_skipped:
                say(f"LWS mix skipped: {self.lws_skipped}")
            else:

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
                    say=say,
                    distribution=bf.distribution,
                    cleanup=False,
                    on_submitted=submitted,
                )
                print(format_lws_mix(lws_result, bf.fmt, bf.fmt_dist), flush=True)
                await self.wait_running(list(self.lws_submitted), self.pods.full, "LWS")
            await sampler.stop()
            after = await self.scrape_all("after")
            apiservers_after = await self.scrape_apiservers("after")
        finally:
            for informer, client in informers:
                with contextlib.suppress(Exception):
                    await informer.stop()
                with contextlib.suppress(Exception):
                    await client.close()
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
        )
        summary["lws_skipped"] = self.lws_skipped
        return summary

    def run(self) -> Obj:
        args = self.args
        pods = max(args.jobs, args.lws * args.lws_replicas * args.lws_size)
        try:
            self.fleet.start(
                args.workers,
                bf.node_size(pods, args.nodes),
                self.engine.client_qps,
                self.engine.client_burst,
                upstream_kueue=self.engine.upstream_clusters,
                extra_up_args=("--no-sample",),
            )
            say(f"{self.engine.name}: fleet up, machine load {bf.loads(os.getloadavg())}")
            return asyncio.run(self.measure())
        finally:
            self.fleet.stop(save_logs_to=self.work_dir)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bf._bootstrap()
    from kube_runtime.logging import setup_logging

    setup_logging("warning")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work_dir = Path(args.work_dir or f"/tmp/kueue-federation-bench/compare-{stamp}")
    work_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Obj | None] = {}
    failed = False
    started = time.monotonic()
    try:
        for engine in engines(args):
            say(f"== {engine.name} ({engine.client_budget()}), fleet {args.fleet_dir}-{engine.name}")
            t0 = time.monotonic()
            try:
                results[engine.name] = CompareRun(engine, args, work_dir).run()
                results[engine.name]["wall_s"] = time.monotonic() - t0
            except bf.BenchError as e:
                say(f"{engine.name}: {e}")
                results[engine.name] = None
                failed = True
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    for summary in results.values():
        if summary:
            print(format_engine(summary), flush=True)
            failed = failed or bool(summary["error"] or summary["timed_out"])
    print(format_ratios(ratios(results)), flush=True)
    if args.json:
        meta = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "args": vars(args),
            "wall_s": time.monotonic() - started,
            "latency_to_running": "first pod (Job) / every pod (LWS) seen Running or Succeeded on its worker",
            "api_requests_source": f"{APISERVER_REQUESTS} of every cluster's kube-apiserver",
            "workDir": str(work_dir),
        }
        Path(args.json).write_text(json.dumps(json_payload(results, meta), indent=2))
        say(f"results written to {args.json}")
    say(f"scrapes and logs in {work_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
