"""The JobSet mix of `make bench-federation` and `make bench-compare` (`--jobsets N`; run after the
Jobs and the LWS mix, on the same fleet): N JobSets of the setup guide's shape (a `leader` Job of
one pod and a `workers` Job of `--jobset-workers` pods, 100m cpu a pod) submitted on the manager
cluster at a target rate, until each one's Workload is Admitted on the manager (its MultiKueue check
Ready: placed on a worker) and its JobSet there shows the worker's `Completed` condition (the end
mirrored back).

Per JobSet it records the submission (the create returned), the moment its Workload was seen
Admitted and the moment the manager's JobSet was seen Completed; it reports JobSets placed per
second (placed / (last placement - first submission)) and p50/p95/p99 of submitted -> Admitted and
submitted -> Completed on the manager."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.common import Obj, say
from bench.fleet import JOB_IMAGE, LABEL_BENCH_RUN, LABEL_QUEUE_NAME, LOCAL_QUEUE, NAMESPACE
from bench.mix_run import create_at_rate, creates_error, submission_rate, tear_down, wait_done
from bench.stats import distribution, fmt, fmt_dist

POD_CPU = "100m"
POD_MEMORY = "10Mi"


def jobset_object(name: str, run_id: str, workers: int) -> Obj:
    def replicated(rj: str, pods: int) -> Obj:
        container = {
            "name": "c",
            "image": JOB_IMAGE,
            "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}},
        }
        pod = {"restartPolicy": "Never", "containers": [container]}
        spec = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": {"spec": pod}}
        return {"name": rj, "replicas": 1, "template": {"spec": spec}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {LABEL_QUEUE_NAME: LOCAL_QUEUE, LABEL_BENCH_RUN: run_id},
        },
        "spec": {"replicatedJobs": [replicated("leader", 1), replicated("workers", workers)]},
    }


def _true(obj: Obj, ctype: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions)


@dataclass
class JobSetRecord:
    name: str
    submitted: float | None = None
    admitted: float | None = None  # its Workload seen Admitted on the manager
    completed: float | None = None  # the manager's JobSet seen Completed (mirrored)
    cluster: str = ""


class JobSetRecorder:
    """JobSets by name; the watches hand it the manager's Workloads and JobSets (times passed in)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.records = {n: JobSetRecord(n) for n in names}

    def submitted(self, name: str, now: float) -> None:
        self.records[name].submitted = now

    def observe_workload(self, wl: Obj, now: float) -> None:
        refs = wl.get("metadata", {}).get("ownerReferences") or ()
        owner = next((r.get("name") for r in refs if r.get("kind") == "JobSet"), None)
        record = self.records.get(owner or "")
        if record is None or record.admitted is not None or not _true(wl, "Admitted"):
            return
        record.admitted = now
        record.cluster = (wl.get("status") or {}).get("clusterName") or ""

    def observe_jobset(self, js: Obj, now: float) -> None:
        record = self.records.get(js.get("metadata", {}).get("name", ""))
        if record is not None and record.completed is None and _true(js, "Completed"):
            record.completed = now

    def count(self, attribute: str) -> int:
        return sum(1 for r in self.records.values() if getattr(r, attribute) is not None)


@dataclass
class JobSetMixResult:
    jobsets: int
    workers: int
    rate_target: float
    submitted: int = 0
    admitted: int = 0
    completed: int = 0
    placed_per_s: float | None = None
    submission_rate: float | None = None
    to_admitted: Any = None  # bench.stats Distributions
    to_completed: Any = None
    workers_used: dict[str, int] = field(default_factory=dict)
    timed_out: bool = False
    error: str | None = None


def summarize(recorder: JobSetRecorder, first_submit: float, workers: int, rate: float) -> JobSetMixResult:
    records = [r for r in recorder.records.values() if r.submitted is not None]
    result = JobSetMixResult(jobsets=len(recorder.records), workers=workers, rate_target=rate)
    result.submitted = len(records)
    admitted = [r for r in records if r.admitted is not None]
    completed = [r for r in records if r.completed is not None]
    result.admitted, result.completed = len(admitted), len(completed)
    if admitted:
        span = max(r.admitted for r in admitted) - first_submit  # type: ignore[type-var]
        result.placed_per_s = len(admitted) / span if span > 0 else None
    result.to_admitted = distribution([r.admitted - r.submitted for r in admitted])  # type: ignore[operator]
    result.to_completed = distribution([r.completed - r.submitted for r in completed])  # type: ignore[operator]
    for r in admitted:
        result.workers_used[r.cluster] = result.workers_used.get(r.cluster, 0) + 1
    return result


async def run_jobset_mix(
    manager_kubeconfig: str, *, count: int, workers: int, rate: float, timeout_s: float, cleanup: bool
) -> JobSetMixResult:
    from kube_runtime.client import KubeClient
    from kube_runtime.informer import Informer
    from kueue_domain import api

    run_id = secrets.token_hex(3)
    names = [f"js-{run_id}-{i:04d}" for i in range(count)]
    recorder = JobSetRecorder(names)
    now = time.monotonic
    client = await KubeClient.from_kubeconfig_file(manager_kubeconfig)
    watch_client = await KubeClient.from_kubeconfig_file(manager_kubeconfig)
    selector = f"{LABEL_BENCH_RUN}={run_id}"
    workloads = Informer(watch_client, api.WORKLOAD, namespace=NAMESPACE, name="bench-jobset-workloads")
    workloads.add_handler(
        on_add=lambda wl: recorder.observe_workload(wl, now()),
        on_update=lambda _old, wl: recorder.observe_workload(wl, now()),
    )
    jobsets = Informer(
        watch_client, api.JOB_SET, namespace=NAMESPACE, label_selector=selector, name="bench-js"
    )
    jobsets.add_handler(
        on_add=lambda js: recorder.observe_jobset(js, now()),
        on_update=lambda _old, js: recorder.observe_jobset(js, now()),
    )
    failures: list[BaseException] = []
    first_submit = now()
    try:
        for informer in (workloads, jobsets):
            informer.start()
        async with asyncio.timeout(60):
            for informer in (workloads, jobsets):
                await informer.wait_synced()
        say(f"JobSet mix: submitting {count} JobSets (a leader and {workers} workers each) at {rate:g}/s")

        async def create(name: str) -> None:
            await client.create(api.JOB_SET, jobset_object(name, run_id, workers), NAMESPACE)
            recorder.submitted(name, now())

        first_submit, submission_s = await create_at_rate(names, rate, create, failures)
        timed_out = await wait_done(
            lambda: recorder.count("completed") >= recorder.count("submitted"),
            lambda: (
                f"JobSet mix: {recorder.count('admitted')} admitted, {recorder.count('completed')}/"
                f"{recorder.count('submitted')} completed on the manager"
            ),
            timeout_s,
        )
        result = summarize(recorder, first_submit, workers, rate)
        result.timed_out = timed_out
        result.submission_rate = submission_rate(result.submitted, submission_s)
        result.error = creates_error(failures)
        return result
    finally:
        await tear_down(
            (workloads, jobsets),
            (client, watch_client),
            client if cleanup else None,
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets",
            selector,
        )


def format_jobset_mix(result: JobSetMixResult) -> str:
    lines = [
        f"== federation JobSet mix: {result.jobsets} JobSets (a leader and {result.workers} workers), "
        f"{result.rate_target:g} JobSets/s"
    ]
    if result.error:
        lines.append(f"   ERROR: {result.error}")
    if result.timed_out:
        lines.append(
            f"   TIMED OUT: {result.submitted - result.completed} JobSets not Completed on the manager"
        )
    lines += [
        f"   JobSets submitted             {result.submitted} at {fmt(result.submission_rate, '/s')}",
        f"   Admitted (placed) / Completed {result.admitted} / {result.completed} of {result.submitted}",
        f"   JobSets placed per second     {fmt(result.placed_per_s, '/s')}",
        f"   submitted -> Admitted    p50 / p95 / p99  {fmt_dist(result.to_admitted)}",
        f"   submitted -> Completed   p50 / p95 / p99  {fmt_dist(result.to_completed)}",
        f"   JobSets per worker            {dict(sorted(result.workers_used.items()))}",
    ]
    return "\n".join(lines)
