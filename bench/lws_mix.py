"""The LeaderWorkerSet mix of `make bench-federation` (bench.federation runs it after the Jobs, on
the same fleet; bench.compare too): N LeaderWorkerSets (default 200, replicas 2, size 3, 100m cpu a pod)
submitted on the manager cluster at a target rate, until every group's Workload is Admitted on
the manager (its MultiKueue check Ready, so the group was placed on a worker).

Per LWS it records the submission (the create returned) and the moment its last group was seen
Admitted; it reports groups placed per second (groups / (last placement - first submission)),
p50/p95/p99 of submitted -> all groups Admitted, and the LWS whose groups named two workers
(must be none)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.common import Obj, say
from bench.fleet import JOB_IMAGE, LABEL_BENCH_RUN, LABEL_QUEUE_NAME, LOCAL_QUEUE, NAMESPACE
from bench.mix_run import create_at_rate, creates_error, submission_rate, tear_down, wait_done
from bench.stats import distribution, fmt, fmt_dist

ANNOTATION_OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
POD_CPU = "100m"
POD_MEMORY = "10Mi"


def lws_object(name: str, run_id: str, replicas: int, size: int) -> Obj:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": JOB_IMAGE,
                    "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}},
                }
            ]
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {LABEL_QUEUE_NAME: LOCAL_QUEUE, LABEL_BENCH_RUN: run_id},
        },
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}},
    }


@dataclass
class LwsRecord:
    name: str
    groups: int
    submitted: float | None = None
    placed: float | None = None  # every group's Workload seen Admitted
    admitted: dict[str, str] = field(default_factory=dict)  # Workload name -> its clusterName

    @property
    def split(self) -> bool:
        return len({c for c in self.admitted.values() if c}) > 1


class LwsRecorder:
    """LWS by name; the watch hands it the manager's Workloads (times passed in: testable)."""

    def __init__(self, names: Iterable[str], groups: int) -> None:
        self.records = {n: LwsRecord(n, groups) for n in names}
        self.splits: set[str] = set()

    def submitted(self, name: str, now: float) -> None:
        self.records[name].submitted = now

    def observe_workload(self, wl: Obj, now: float) -> None:
        owner = ((wl.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_OWNER_NAME)
        record = self.records.get(owner or "")
        if record is None:
            return
        status = wl.get("status") or {}
        admitted = any(
            c.get("type") == "Admitted" and c.get("status") == "True" for c in status.get("conditions") or ()
        )
        if not admitted:
            return
        record.admitted[wl["metadata"]["name"]] = status.get("clusterName") or ""
        if record.split:
            self.splits.add(record.name)
        if record.placed is None and len(record.admitted) >= record.groups:
            record.placed = now

    @property
    def placed_count(self) -> int:
        return sum(1 for r in self.records.values() if r.placed is not None)

    @property
    def submitted_count(self) -> int:
        return sum(1 for r in self.records.values() if r.submitted is not None)


@dataclass
class LwsMixResult:
    lws: int
    replicas: int
    size: int
    rate_target: float
    submitted: int = 0
    placed: int = 0
    groups_placed: int = 0
    groups_per_s: float | None = None
    submission_rate: float | None = None  # LWS/s achieved
    to_placed: Any = None  # a bench.stats Distribution
    splits: list[str] = field(default_factory=list)
    workers_used: dict[str, int] = field(default_factory=dict)  # worker -> LWS placed there
    timed_out: bool = False
    error: str | None = None


def summarize(recorder: LwsRecorder, first_submit: float) -> LwsMixResult:
    records = list(recorder.records.values())
    some = records[0] if records else LwsRecord("", 0)
    result = LwsMixResult(lws=len(records), replicas=some.groups, size=0, rate_target=0.0)
    result.submitted = recorder.submitted_count
    placed = [r for r in records if r.placed is not None and r.submitted is not None]
    result.placed = len(placed)
    result.groups_placed = sum(len(r.admitted) for r in records)
    if placed:
        span = max(r.placed for r in placed) - first_submit  # type: ignore[type-var]
        result.groups_per_s = result.groups_placed / span if span > 0 else None
    result.to_placed = distribution([r.placed - r.submitted for r in placed])  # type: ignore[operator]
    result.splits = sorted(recorder.splits)
    for r in placed:
        clusters = {c for c in r.admitted.values() if c}
        if len(clusters) == 1:
            worker = clusters.pop()
            result.workers_used[worker] = result.workers_used.get(worker, 0) + 1
    return result


async def run_lws_mix(
    manager_kubeconfig: str,
    *,
    count: int,
    replicas: int,
    size: int,
    rate: float,
    timeout_s: float,
    cleanup: bool,
    on_submitted: Callable[[str, float], None] | None = None,
) -> LwsMixResult:
    """`on_submitted(name, monotonic time)` is called as each create returns (bench.compare times
    the worker's pods from it)."""
    from kube_runtime.client import KubeClient
    from kube_runtime.informer import Informer
    from kueue_domain import api

    run_id = secrets.token_hex(3)
    names = [f"lb-{run_id}-{i:04d}" for i in range(count)]
    recorder = LwsRecorder(names, replicas)
    now = time.monotonic
    client = await KubeClient.from_kubeconfig_file(manager_kubeconfig)
    watch_client = await KubeClient.from_kubeconfig_file(manager_kubeconfig)
    informer = Informer(watch_client, api.WORKLOAD, namespace=NAMESPACE, name="bench-lws-workloads")
    informer.add_handler(
        on_add=lambda wl: recorder.observe_workload(wl, now()),
        on_update=lambda _old, wl: recorder.observe_workload(wl, now()),
    )
    informer.start()
    failures: list[BaseException] = []
    first_submit = now()
    try:
        async with asyncio.timeout(60):
            await informer.wait_synced()
        say(f"LWS mix: submitting {count} LeaderWorkerSets (replicas {replicas}, size {size}) at {rate:g}/s")

        async def create(name: str) -> None:
            body = lws_object(name, run_id, replicas, size)
            await client.create(api.LEADER_WORKER_SET, body, NAMESPACE)
            recorder.submitted(name, now())
            if on_submitted is not None:
                on_submitted(name, recorder.records[name].submitted)

        first_submit, submission_s = await create_at_rate(names, rate, create, failures)
        timed_out = await wait_done(
            lambda: recorder.placed_count >= recorder.submitted_count,
            lambda: f"LWS mix: {recorder.placed_count}/{recorder.submitted_count} placed whole",
            timeout_s,
        )
        result = summarize(recorder, first_submit)
        result.size, result.rate_target, result.timed_out = size, rate, timed_out
        result.submission_rate = submission_rate(result.submitted, submission_s)
        result.error = creates_error(failures)
        return result
    finally:
        await tear_down(
            (informer,),
            (client, watch_client),
            client if cleanup else None,
            f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NAMESPACE}/leaderworkersets",
            f"{LABEL_BENCH_RUN}={run_id}",
        )


def format_lws_mix(result: LwsMixResult) -> str:
    lines = [
        f"== federation LWS mix: {result.lws} LeaderWorkerSets x {result.replicas} groups of "
        f"{result.size} pods, {result.rate_target:g} LWS/s",
    ]
    if result.error:
        lines.append(f"   ERROR: {result.error}")
    if result.timed_out:
        lines.append(f"   TIMED OUT: {result.submitted - result.placed} LWS not placed whole")
    lines += [
        f"   LWS submitted                 {result.submitted} at {fmt(result.submission_rate, '/s')}",
        f"   LWS placed whole              {result.placed}/{result.submitted}",
        f"   groups placed per second      {fmt(result.groups_per_s, '/s')}",
        f"   submitted -> all groups Admitted p50 / p95 / p99  {fmt_dist(result.to_placed)}",
        f"   LWS split over two workers    {len(result.splits)} {' '.join(result.splits)}".rstrip(),
        f"   LWS per worker                {dict(sorted(result.workers_used.items()))}",
    ]
    return "\n".join(lines)
