"""bench.compare's pure parts: the engines (ours, upstream, upstream tuned) and their client budgets,
one engine's summary (throughput, latencies to Admitted and to Running, CPU and RSS of the Kueue
processes, API requests per Workload), the ours / upstream ratios and their tables."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.common import Obj
from bench.federation_result import RunResult
from bench.federation_run import METRIC_REQUESTS
from bench.fleet import DEFAULT_CLIENT_BURST, DEFAULT_CLIENT_QPS, KUEUE_COMPONENTS
from bench.procfs import ProcessFigures
from bench.prom import APISERVER_REQUESTS, Sample, counter_delta, metric_by_label
from bench.stats import Distribution, distribution, fmt, per, total

# Each side at its shipped client budget, then every client of both at one equal lifted budget
# (upstream_tuned: upstream built with our worker-client patch, hack/patches/). Each side runs its
# shipped dispatcher: ours least-loaded (deploy/manager/config.yaml), upstream AllAtOnce.
# ours_all_at_once (only with --engines): ours_lifted with upstream's AllAtOnce, like for like.
# no_kueue (only with --engines, bench.compare_floor): the same mix straight on the workers, no Kueue.
# ours_warning_events (only with --engines): ours_lifted writing no Normal Events (--event-types
# Warning): what ours' own Events cost the fleet. ours_asyncio (only with --engines): ours_lifted
# with its processes on asyncio's own event loop instead of uvloop's (--event-loop asyncio).
ENGINES = (
    "ours",
    "upstream",
    "ours_lifted",
    "upstream_tuned",
    "ours_all_at_once",
    "no_kueue",
    "ours_warning_events",
    "ours_asyncio",
)
# The arms a run has without --engines: the four of the fair comparison.
DEFAULT_ENGINES = ENGINES[:4]
# Our shipped Configuration's dispatcher (deploy/manager/config.yaml, the Helm chart), by localfleet's name.
SHIPPED_DISPATCHER = "LeastLoaded"
# The lifted budget's default: upstream's own clientConnection default, for every client of both.
LIFTED_QPS = 300.0
LIFTED_BURST = 500
KUEUE_GROUP = "kueue.x-k8s.io"
# Upstream v0.19's clientConnection defaults (apis/config/v1beta2/defaults.go).
UPSTREAM_DEFAULT_QPS = 300.0
UPSTREAM_DEFAULT_BURST = 500


# ==============================================================================================
# Engines, summaries, ratios (pure)
# ==============================================================================================


@dataclass(frozen=True)
class Engine:
    name: str
    upstream_clusters: tuple[str, ...]  # clusters running upstream Kueue (all of them, or none)
    client_qps: float | None  # None: the engine's default
    client_burst: int | None
    lifted_workers: bool = False  # upstream built with our worker-client patch
    dispatcher: str | None = None  # our manager's dispatcher (localfleet's name); None: AllAtOnce
    kueue: bool = True  # False: no Kueue on the fleet, the mix created straight on the workers
    event_types: str | None = None  # our processes' --event-types; None: both types
    event_loop: str | None = None  # our processes' --event-loop; None: their default

    def client_budget(self) -> str:
        if not self.kueue:
            return "none (no Kueue)"
        if self.upstream_clusters:
            qps = UPSTREAM_DEFAULT_QPS if self.client_qps is None else self.client_qps
            burst = UPSTREAM_DEFAULT_BURST if self.client_burst is None else self.client_burst
            local = "qps unlimited" if qps < 0 else f"qps {qps:g} / burst {burst}"
            if self.lifted_workers:
                return f"{local}, worker clients too (patched build, per API resource)"
            return f"{local} (manager-local client); worker clients client-go's 5 / 10 per API resource"
        qps = DEFAULT_CLIENT_QPS if self.client_qps is None else self.client_qps
        burst = DEFAULT_CLIENT_BURST if self.client_burst is None else self.client_burst
        return f"qps {qps:g} / burst {burst} per API resource, every client"

    def binding_limit(self) -> str:
        """The limit expected to bind first (the runs' request rates and CPU figures say whether it did)."""
        if self.name == "upstream":
            return (
                "client-go's 5 qps / 10 burst per API resource of each MultiKueue worker client "
                "(v0.19.2 has no setting for them)"
            )
        if not self.kueue:
            return "no Kueue (the mix created straight on the workers): the machine's CPU"
        if self.name == "ours":
            return f"our client budget, {DEFAULT_CLIENT_QPS:g} qps / {DEFAULT_CLIENT_BURST} burst per kind"
        return "no client budget (lifted above the run's request rate): the machine's CPU"


def engines(args: argparse.Namespace) -> list[Engine]:
    """The runs `args.engines` asks for, in the order given."""
    every = ("manager", *(f"worker{i}" for i in range(1, args.workers + 1)))
    lifted = Engine("ours_lifted", (), args.lifted_qps, args.lifted_burst, dispatcher=SHIPPED_DISPATCHER)
    known = {
        "ours": Engine("ours", (), None, None, dispatcher=SHIPPED_DISPATCHER),
        "upstream": Engine("upstream", every, None, None),
        "ours_lifted": lifted,
        "upstream_tuned": Engine(
            "upstream_tuned", every, args.lifted_qps, args.lifted_burst, lifted_workers=True
        ),
        "ours_all_at_once": replace(lifted, name="ours_all_at_once", dispatcher="AllAtOnce"),
        "no_kueue": Engine("no_kueue", (), None, None, kueue=False),
        "ours_warning_events": replace(lifted, name="ours_warning_events", event_types="Warning"),
        "ours_asyncio": replace(lifted, name="ours_asyncio", event_loop="asyncio"),
    }
    return [known[name] for name in args.engines]


def phase_timeout(args: argparse.Namespace, workloads: int) -> float:
    """--timeout, or 2 s per Workload of the phase within 300..1800 s: sized for the slowest arm
    (upstream at its defaults admits about 2 Workloads/s here) so that every arm runs to completion,
    yet a stalled engine still ends in bounded time (and is reported as truncated)."""
    if args.timeout is not None:
        return args.timeout
    return min(1800.0, max(300.0, 2.0 * workloads))


def lws_skip_reason(args: argparse.Namespace, jobs: RunResult) -> str | None:
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


def requests_by_cluster(
    before: Mapping[str, Sequence[Sample]],
    after: Mapping[str, Sequence[Sample]],
    cluster_of_host: Mapping[str, str],
) -> dict[str, float]:
    """Requests every Kueue process sent between two scrapes, summed by the cluster whose apiserver
    received them (rest_client_requests_total's `host`). Keys of before/after: process labels."""
    out: dict[str, float] = {}
    for label, samples in after.items():
        delta = counter_delta(
            metric_by_label(before.get(label) or [], METRIC_REQUESTS, "host"),
            metric_by_label(samples, METRIC_REQUESTS, "host"),
        )
        for host, count in delta.items():
            cluster = cluster_of_host.get(host, host)
            out[cluster] = out.get(cluster, 0.0) + count
    return out


def summarize(
    engine: Engine,
    args: argparse.Namespace,
    jobs: RunResult | None,
    job_running: Sequence[float],
    lws: Any,
    lws_running: Sequence[float],
    processes: Mapping[str, ProcessFigures],
    requests: Mapping[str, float],
    kueue_group_requests: Mapping[str, float] | None = None,
    client_requests: Mapping[str, float] | None = None,
    requests_by_kind: Mapping[str, float] | None = None,
) -> Obj:
    """The figures of one engine's run (a JSON-ready dict). `requests`: every request each cluster's
    apiserver served; `kueue_group_requests`: those of kueue.x-k8s.io; `client_requests`: those our
    processes counted themselves, by destination cluster (upstream's cannot be read);
    `requests_by_kind`: every cluster's apiserver requests by `<VERB> <group>/<resource>`."""
    workloads = workloads_of(args)
    to_admitted = jobs.to_admitted if jobs else Distribution()
    running = distribution(job_running)
    lws_admitted = (lws.to_placed if lws is not None else None) or Distribution()
    lws_run = distribution(lws_running)
    kueue = {
        label: {"cpu_s": f.cpu_s, "peak_rss_mib": f.peak_rss_mib, "pid": f.pid}
        for label, f in sorted(processes.items())
        if label.partition("/")[2] in KUEUE_COMPONENTS
    }

    def on(cluster_test: Callable[[str], bool], key: str) -> float | None:
        return total([v[key] for label, v in kueue.items() if cluster_test(label.partition("/")[0])])

    manager_requests = requests.get("manager")
    worker_requests = total([v for c, v in requests.items() if c.startswith("worker")])
    return {
        "engine": engine.name,
        "kueue": ("ours" if not engine.upstream_clusters else "upstream") if engine.kueue else "none",
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
        "api_requests_per_wl_kueue_group": per(total(list((kueue_group_requests or {}).values())), workloads),
        "kueue_client_requests": dict(sorted((client_requests or {}).items())),
        "api_requests_per_wl": per(total([manager_requests, worker_requests]), workloads),
        "api_requests_per_wl_manager": per(manager_requests, workloads),
        "api_requests_per_wl_workers": per(worker_requests, workloads),
        "api_requests_per_wl_by_kind": {
            kind: per(count, workloads) for kind, count in sorted((requests_by_kind or {}).items()) if count
        },
    }


def jobset_figures(result: Any) -> Obj:
    """The JobSet mix's figures of one engine's summary (None when it did not run)."""
    if result is None:
        return {"jobsets_placed": 0, "jobsets_per_s": None, "jobset_p99_admitted_s": None}
    return {
        "jobsets_placed": result.admitted,
        "jobsets_completed": result.completed,
        "jobsets_per_s": result.placed_per_s,
        "jobset_p50_admitted_s": (result.to_admitted or Distribution()).p50,
        "jobset_p99_admitted_s": (result.to_admitted or Distribution()).p99,
        "jobset_p99_completed_s": (result.to_completed or Distribution()).p99,
        "jobset_timed_out": result.timed_out,
        "jobset_error": result.error,
    }


def _dist(summary: Obj, prefix: str) -> str:
    """p50 / p95 / p99 of the figures named `prefix` with `*` for the quantile."""
    values = [summary[f"{prefix.replace('*', q)}"] for q in ("p50", "p95", "p99")]
    if all(v is None for v in values):
        return "n/a"
    return " / ".join(fmt(v, digits=3) for v in values) + " s"


def _latency_rows(summary: Obj) -> list[tuple[str, str]]:
    """The rows of the Jobs', the LWS' and the JobSets' counts, rates and latencies."""
    rows = [
        (
            "Jobs submitted / Admitted / pods Running seen",
            " / ".join(f"{summary[k]:,}" for k in ("jobs_submitted", "jobs_admitted", "jobs_running_seen")),
        ),
        ("Jobs whose pod was seen Succeeded by the end of the run", f"{summary.get('jobs_ended_seen', 0):,}"),
        ("steady rate, Job Workloads admitted /s (10 % -> 90 %)", fmt(summary["throughput_wl_s"], "/s")),
        (
            "steady rate, Jobs with a pod Running /s (10 % -> 90 %)",
            fmt(summary.get("running_rate_wl_s"), "/s"),
        ),
        ("all Jobs admitted after (first submission -> last)", fmt(summary.get("admit_all_s"), "s")),
        ("Job submitted -> Admitted (manager) p50/p95/p99", _dist(summary, "*_admitted_s")),
        ("Job submitted -> pod Running (worker) p50/p95/p99", _dist(summary, "*_running_s")),
        (
            "LWS placed whole / all pods Running seen",
            f"{summary['lws_placed']} / {summary['lws_running_seen']}",
        ),
        ("LWS groups Admitted per second", fmt(summary["lws_groups_per_s"], "/s")),
        ("LWS submitted -> all groups Admitted p50/p95/p99", _dist(summary, "lws_*_admitted_s")),
        ("LWS submitted -> all pods Running p50/p95/p99", _dist(summary, "lws_*_running_s")),
    ]
    if summary.get("jobsets_placed"):
        rows += [
            (
                "JobSets Admitted / Completed on the manager",
                f"{summary['jobsets_placed']} / {summary.get('jobsets_completed', 0)}",
            ),
            ("JobSets Admitted per second", fmt(summary["jobsets_per_s"], "/s")),
            (
                "JobSet submitted -> Admitted p50/p99, -> Completed p99",
                " / ".join(
                    fmt(summary.get(k), digits=3)
                    for k in ("jobset_p50_admitted_s", "jobset_p99_admitted_s", "jobset_p99_completed_s")
                )
                + " s",
            ),
        ]
    return rows


def _cost_rows(summary: Obj) -> list[tuple[str, str]]:
    """The rows of the fleet's CPU per Workload and each process' CPU and memory."""
    rows: list[tuple[str, str]] = []
    if summary.get("fleet_cpu_ms_per_wl") is not None:
        kinds = summary.get("fleet_cpu_ms_per_wl_by_kind") or {}
        rows += [
            (
                "whole fleet CPU per Workload (above its rest)",
                f"{fmt(summary['fleet_cpu_ms_per_wl'], 'ms')} "
                f"({fmt(summary.get('fleet_cpu_ms_per_wl_above_idle'), 'ms')})",
            ),
            ("  by kind, ms per Workload", ", ".join(f"{k} {fmt(v)}" for k, v in kinds.items())),
            ("  this machine's CPU ceiling at that cost", fmt(summary.get("cpu_ceiling_wl_s"), "/s")),
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
    return rows


def _request_rows(summary: Obj) -> list[tuple[str, str]]:
    """The rows of apiserver requests per Workload, by cluster and in all."""
    n = summary["workloads"]
    rows = []
    group = summary["api_requests_kueue_group"]
    for cluster, count in summary["api_requests"].items():
        rows.append(
            (
                f"{cluster} apiserver requests per Workload: all / {KUEUE_GROUP}",
                f"{fmt(per(count, n), digits=2)} / {fmt(per(group.get(cluster), n), digits=2)}",
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
            (f"our Kueue processes' own requests to {cluster} per Workload", fmt(per(count, n), digits=2))
        )
    return rows


def _engine_header(summary: Obj) -> list[str]:
    """The title line of one engine's summary and its warnings."""
    lines = [
        f"== {summary['engine']}: {summary['kueue']} Kueue, client {summary['client_budget']}, "
        f"{summary['workloads']:,} Workloads"
    ]
    if summary["kueue"] == "none":
        lines.append(
            "   no Kueue: the Jobs and LWS were created straight on the workers, nothing is admitted; "
            "the figures to read are pods Running, CPU and requests"
        )
    if summary["error"]:
        lines.append(f"   ERROR: {summary['error']}")
    if summary["timed_out"]:
        lines.append("   TIMED OUT: some Workloads were not seen Admitted")
    if summary.get("complete") is False:
        lines.append("   TRUNCATED: not every Workload was admitted; this repeat gives no figure")
    if summary.get("lws_skipped"):
        lines.append(f"   LWS mix skipped: {summary['lws_skipped']}")
    return lines


def format_engine(summary: Obj) -> str:
    rows = _latency_rows(summary) + _cost_rows(summary) + _request_rows(summary)
    width = max(len(r[0]) for r in rows)
    lines = _engine_header(summary)
    lines += [f"   {name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines)
