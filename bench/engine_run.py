"""bench.engine's generator and runner (asyncio, our kube_runtime client and informers): create the
baseline's objects on their schedule, finish admitted Workloads after their runtime and clear the
reservation of evicted ones, as a job integration would."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import BenchError, Obj, cancel, condition_true, find_condition, say
from bench.engine_plan import (
    EVICTION_CLEARED_MESSAGE,
    EVICTION_CLEARED_REASON,
    FINISHED_MESSAGE,
    FINISHED_REASON,
    LABEL_RUNNING_MS,
    NO_RESERVATION_MESSAGE,
    NO_RESERVATION_REASON,
    RUNNER_FIELD_MANAGER,
    ApiShape,
    BenchConfig,
    QueuePlan,
    WorkloadClass,
    cluster_queue_object,
    local_queue_object,
    namespace_object,
    plan_queues,
    resource_flavor_object,
    workload_object,
)
from bench.engine_procs import EngineProcess
from bench.engine_result import Recorder, RunResult, finish_result, parse_time

# ==============================================================================================
# Generator and runner (asyncio, our kube_runtime client and informers)
# ==============================================================================================


class BenchRun:
    """One run: generator, runner and recorder against one cluster and one engine process."""

    def __init__(
        self,
        shape: ApiShape,
        config: BenchConfig,
        kubeconfig: Path,
        engine: EngineProcess,
        *,
        timeout_s: float,
        qps: float = 1000,
        burst: int = 2000,
        progress_every_s: float = 15.0,
        metrics_reader: Callable[[], dict[str, float]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shape = shape
        self.config = config
        self.kubeconfig = kubeconfig
        self.engine = engine
        self.timeout_s = timeout_s
        self.qps = qps
        self.burst = burst
        self.progress_every_s = progress_every_s
        self.metrics_reader = metrics_reader
        self.now = clock
        self.recorder = Recorder()
        self.queues = plan_queues(config)
        self.created = 0
        self.generation_done = asyncio.Event()
        self.generation_started = 0.0
        self.generation_ended: float | None = None
        self.admitted_since: dict[str, float] = {}

    # -- setup -------------------------------------------------------------------------------

    async def _open(self) -> None:
        from kube_runtime.client import KubeClient
        from kube_runtime.controller import Controller
        from kube_runtime.informer import Informer

        path = str(self.kubeconfig)
        # Upstream's runner gives the generator and the runner's manager a client each.
        self.gen_client = await KubeClient.from_kubeconfig_file(path, qps=self.qps, burst=self.burst)
        self.run_client = await KubeClient.from_kubeconfig_file(path, qps=self.qps, burst=self.burst)
        self.wl_informer = Informer(self.run_client, self.shape.workloads, name="bench-workloads")
        self.cq_informer = Informer(self.run_client, self.shape.cluster_queues, name="bench-clusterqueues")
        self.controller = Controller("bench-runner", self.reconcile, concurrency=5)
        self.wl_informer.add_handler(
            on_add=self._on_workload, on_update=lambda _old, new: self._on_workload(new)
        )
        self.cq_informer.add_handler(
            on_add=self._on_cluster_queue, on_update=lambda _old, new: self._on_cluster_queue(new)
        )
        self.wl_informer.start()
        self.cq_informer.start()
        self.controller.start()
        async with asyncio.timeout(60):
            await self.wl_informer.wait_synced()
            await self.cq_informer.wait_synced()

    async def _close(self) -> None:
        for step in (self.controller.stop, self.wl_informer.stop, self.cq_informer.stop):
            with contextlib.suppress(Exception):
                await step()
        await self.gen_client.close()
        await self.run_client.close()

    # -- event handlers (keep them short) ----------------------------------------------------

    def _on_workload(self, obj: Obj) -> None:
        now = self.now()
        rec = self.recorder.observe_workload(obj, now)
        uid = (obj.get("metadata") or {}).get("uid", rec.key)
        if rec.admitted:
            self.admitted_since.setdefault(uid, now)
        else:
            self.admitted_since.pop(uid, None)
        # Upstream's runner filters events the same way: only admitted, unfinished workloads need it.
        if rec.admitted and not rec.finished:
            self.controller.enqueue(rec.key)

    def _on_cluster_queue(self, obj: Obj) -> None:
        self.recorder.observe_cluster_queue(obj, self.now())

    # -- the runner's reconcile --------------------------------------------------------------

    async def reconcile(self, key: str) -> Any:
        from kube_runtime.client import Conflict, NotFound
        from kube_runtime.controller import Result

        wl = self.wl_informer.get(key)
        if wl is None:
            return None
        meta, status = wl["metadata"], wl.get("status") or {}
        try:
            admitted = find_condition(wl, "Admitted")
            if admitted is None or admitted.get("status") != "True" or condition_true(wl, "Finished"):
                return None
            if condition_true(wl, "Evicted") and status.get("admission"):
                await self._clear_reservation(wl)
                return None
            since = self.admitted_since.get(meta.get("uid", key)) or parse_time(
                admitted.get("lastTransitionTime")
            )
            runtime_s = int((meta.get("labels") or {}).get(LABEL_RUNNING_MS, "0")) / 1000
            remaining = runtime_s - (self.now() - (since or self.now()))
            if remaining > 0:
                return Result(requeue_after=remaining)
            await self._finish(wl)
        except NotFound:
            return None
        except Conflict:
            # The informer brings the newer version (and enqueues it); look again shortly.
            return Result(requeue_after=0.05)
        return None

    async def _finish(self, wl: Obj) -> None:
        await mark_finished(self.run_client, self.shape, wl)

    async def _clear_reservation(self, wl: Obj) -> None:
        await clear_reservation(self.run_client, self.shape, wl)

    # -- the generator -----------------------------------------------------------------------

    async def _create(self, resource: Any, obj: Obj, attempts: int = 5) -> Obj:
        from kube_runtime.client import AlreadyExists, ConnectionLost

        for attempt in range(1, attempts + 1):
            try:
                return await self.gen_client.create(resource, obj)
            except AlreadyExists:
                if attempt == 1:
                    raise
                return obj  # an earlier attempt got through before its connection broke
            except ConnectionLost:
                if attempt == attempts:
                    raise
                await asyncio.sleep(0.2 * attempt)
        raise AssertionError("unreachable")

    async def _generate_set(self, queue: QueuePlan, set_index: int, cls: WorkloadClass) -> None:
        interval = cls.interval_ms / 1000
        for serial in range(cls.count):
            await asyncio.sleep(interval)  # upstream waits first, then creates, one at a time
            obj = workload_object(self.shape, queue, cls, set_index, serial)
            created = await self._create(self.shape.workloads, obj)
            self.recorder.created(f"{queue.name}/{obj['metadata']['name']}", cls.name, self.now(), created)
            self.created += 1

    async def _generate_queue(self, queue: QueuePlan) -> None:
        from kueue_domain import api

        await self._create(self.shape.cluster_queues, cluster_queue_object(self.shape, self.config, queue))
        await self._create(api.NAMESPACE, namespace_object(queue))
        await self._create(self.shape.local_queues, local_queue_object(self.shape, queue))
        await asyncio.gather(
            *(self._generate_set(queue, i, cls) for i, cls in enumerate(self.config.classes))
        )

    async def generate(self) -> None:
        self.generation_started = self.now()
        try:
            await self._create(self.shape.resource_flavors, resource_flavor_object(self.shape, self.config))
            await asyncio.gather(*(self._generate_queue(q) for q in self.queues))
            self.generation_ended = self.now()
            say(
                f"generation done: {self.created:,} workloads in "
                f"{self.generation_ended - self.generation_started:.1f}s"
            )
        finally:
            self.generation_done.set()

    # -- the whole run -----------------------------------------------------------------------

    def is_done(self) -> bool:
        return (
            self.generation_done.is_set()
            and self.recorder.queues_idle(q.name for q in self.queues)
            and self.recorder.finished_count() >= self.created
        )

    def progress_line(self) -> str:
        cqs = self.recorder.cluster_queues.values()
        rss = self.engine.peak_rss_mib
        return (
            f"[{self.now() - self.engine.started_at:6.1f}s] created {self.created:,}/"
            f"{self.config.total_workloads:,}, admissions {self.recorder.admissions_count():,}, finished "
            f"{self.recorder.finished_count():,}, CQ pending {sum(c.pending for c in cqs):,}, reserving "
            f"{sum(c.reserving for c in cqs):,}, {self.engine.name} peak RSS "
            f"{'n/a' if rss is None else f'{rss:.0f} MiB'}"
        )

    async def run(self, engine_label: str, scale: float) -> RunResult:
        result = RunResult(engine_label, scale, len(self.queues), self.config.total_workloads)
        cpu0 = time.process_time()
        await self._open()
        metrics: dict[str, float] = {}
        wall: float | None = None
        end_time: float | None = None
        gen_task: asyncio.Task[None] | None = None
        # Upstream's runner is Go; ours paces Python's collector as our processes do, so that the
        # runner does not stop for a full collection and then report a pile of Finished at once.
        from kube_runtime.gcpacer import GcPacer

        pacer = asyncio.create_task(GcPacer().run(), name="gc-pacer")
        try:
            result.load_avg_start = os.getloadavg()[0]
            self.engine.start()
            gen_task = asyncio.create_task(self.generate(), name="generator")
            deadline = self.engine.started_at + self.timeout_s
            next_progress = self.now() + self.progress_every_s
            while True:
                self.engine.sample()
                if gen_task.done() and gen_task.exception() is not None:
                    raise BenchError(f"the generator failed: {gen_task.exception()!r}")
                if not self.engine.alive():
                    code = self.engine.proc.returncode if self.engine.proc else "?"
                    raise BenchError(
                        f"{self.engine.name} exited (code {code}); last lines of {self.engine.log_path}:\n"
                        f"{self.engine.log_tail()}"
                    )
                if self.is_done():
                    wall = self.now() - self.engine.started_at
                    break
                if self.now() >= deadline:
                    result.timed_out = True
                    wall = self.now() - self.engine.started_at
                    say(f"timed out after {self.timeout_s:.0f}s")
                    break
                if self.now() >= next_progress:
                    say(self.progress_line())
                    next_progress += self.progress_every_s
                await asyncio.sleep(0.25)
            end_time = self.now()
            say(self.progress_line())
            result.load_avg_end = os.getloadavg()[0]
            self.engine.sample()
            if self.metrics_reader is not None:
                metrics = await asyncio.to_thread(self.metrics_reader)
        except BenchError as e:
            result.error = str(e)
            say(f"run failed: {e}")
        finally:
            await cancel(pacer)
            await cancel(gen_task)
            await asyncio.to_thread(self.engine.stop)
            await self._close()
            result.workloads_created = self.created
            if self.generation_ended is not None:
                result.generation_s = self.generation_ended - self.generation_started
            result.peak_rss_mib = self.engine.peak_rss_mib
            result.harness_cpu_s = time.process_time() - cpu0
            finish_result(
                result,
                self.recorder,
                wall_s=wall,
                engine_cpu_s=self.engine.cpu_s,
                end_time=end_time,
                metrics=metrics,
            )
        return result

    def write_eviction_csv(self, path: Path, start: float) -> None:
        """Every Evicted transition: when (s after the engine started), which, why, and how long the
        runner had seen the victim Admitted (empty: its admission had not reached the runner)."""
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["s after start", "key", "class", "reason", "s seen admitted", "message"])
            for e in self.recorder.evictions:
                held = "" if e.held_s is None else f"{e.held_s:.3f}"
                w.writerow([f"{e.time - start:.3f}", e.key, e.cls, e.reason, held, e.message])

    def write_timeline_csv(self, path: Path, start: float) -> None:
        """Every Workload transition the runner saw, in order: created, admitted, evicted, released
        (quota gone without finishing), finished; times in s after the engine started."""
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["s after start", "key", "event"])
            for t, key, what in self.recorder.timeline:
                w.writerow([f"{t - start:.3f}", key, what])

    def write_workload_csv(self, path: Path) -> None:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                [
                    "key",
                    "class",
                    "ms to admitted (runner)",
                    "ms to admitted (API)",
                    "ms to finished",
                    "evictions",
                    "watch events",
                ]
            )
            for r in self.recorder.workloads.values():
                api_ms = (
                    round((r.admitted_api - r.created_api) * 1000)
                    if r.admitted_api is not None and r.created_api is not None
                    else ""
                )
                w.writerow(
                    [
                        r.key,
                        r.cls,
                        "" if r.admitted_obs is None else round((r.admitted_obs - r.start_obs) * 1000),
                        api_ms,
                        "" if r.finished_obs is None else round((r.finished_obs - r.start_obs) * 1000),
                        r.evictions,
                        r.updates,
                    ]
                )


async def mark_finished(client: Any, shape: ApiShape, wl: Obj) -> None:
    """What a job integration does when its job completes: Finished=True (upstream runner's texts)."""
    meta = wl["metadata"]
    body = {
        "apiVersion": shape.api_version,
        "kind": "Workload",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": {
            "conditions": [
                {
                    "type": "Finished",
                    "status": "True",
                    "reason": FINISHED_REASON,
                    "message": FINISHED_MESSAGE,
                    "lastTransitionTime": rfc3339_now(),
                    "observedGeneration": meta.get("generation", 1),
                }
            ]
        },
    }
    await client.apply_status(shape.workloads, body, RUNNER_FIELD_MANAGER, force=True)


async def clear_reservation(client: Any, shape: ApiShape, wl: Obj) -> None:
    """What a job integration does once an evicted job stopped: drop the reservation."""
    meta = wl["metadata"]
    now = rfc3339_now()
    conditions = [dict(c) for c in (wl.get("status") or {}).get("conditions") or []]
    set_condition(
        conditions, "QuotaReserved", "False", EVICTION_CLEARED_REASON, EVICTION_CLEARED_MESSAGE, now, meta
    )
    set_condition(conditions, "Admitted", "False", NO_RESERVATION_REASON, NO_RESERVATION_MESSAGE, now, meta)
    patch = {
        "metadata": {"resourceVersion": meta["resourceVersion"]},
        "status": {"admission": None, "conditions": conditions},
    }
    await client.patch_status_merge(
        shape.workloads,
        meta["name"],
        patch,
        namespace=meta["namespace"],
        field_manager=RUNNER_FIELD_MANAGER,
    )


def rfc3339_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[Obj], ctype: str, status: str, reason: str, message: str, now: str, meta: Obj
) -> None:
    """meta.SetStatusCondition: lastTransitionTime changes only when the status does."""
    for cond in conditions:
        if cond.get("type") == ctype:
            if cond.get("status") != status:
                cond["lastTransitionTime"] = now
            cond.update(
                status=status, reason=reason, message=message, observedGeneration=meta.get("generation", 1)
            )
            return
    conditions.append(
        {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": meta.get("generation", 1),
        }
    )
