"""The admission and eviction writes of the scheduler's decisions, in decision order."""

from __future__ import annotations

import asyncio
import time

import structlog

from kube_runtime.client import KubeClientError, NotFound
from kube_runtime.ratelimit import HIGH
from kueue_domain import api
from kueue_domain import workload as wlstatus
from worker_agent.admission.afs import AdmissionFairSharingEvents
from worker_agent.engine.scheduler import Admit, Preempt
from worker_agent.engine.workloads import holds_quota

log = structlog.get_logger("worker_agent.admission")

MAX_PARALLEL_PREEMPTIONS = 8
# Admission and eviction writes in flight at most; the rest wait their turn in decision order.
DECISION_WRITE_SLOTS = 32


class DecisionWrites(AdmissionFairSharingEvents):
    """Writes an admission (quota reservation, admission checks) or an eviction, with its metrics
    and Events. Reads the pending writes (_forget_pending_write) of `AdmissionState`."""

    def _init_decision_writes(self) -> None:
        # Admissions and evictions share these slots (asyncio's Semaphore serves waiters in order),
        # so their writes reach the client limiter in the order the scheduler decided them, as
        # Kueue's do. An eviction that jumped the admissions queued before it would land while
        # short victims are still finishing, and evict work that was about to complete.
        self._write_limit = asyncio.Semaphore(DECISION_WRITE_SLOTS)
        self._preempt_limit = asyncio.Semaphore(MAX_PARALLEL_PREEMPTIONS)

    async def _write_admission(self, decision: Admit) -> None:
        key = decision.workload_key
        started = time.monotonic()
        cached = self.workloads.get(key)
        ok = gone = False
        if cached is not None:
            now = self.clock.now()
            wl = wlstatus.status_working_copy(cached)
            cq_obj = self.cluster_queues.get(decision.admission.get("clusterQueue", ""))
            if cq_obj is not None:
                required = wlstatus.required_admission_checks(cq_obj["spec"], decision.admission)
                wlstatus.sync_admission_checks(wl, required, now)
            wlstatus.set_quota_reservation(wl, decision.admission, now)
            try:
                async with self._write_limit:
                    await wlstatus.apply_admission_status(self.kube, wl)
                ok = True
            except NotFound:
                gone = True  # deleted meanwhile: its delete event is on the way, do not retry it
            except KubeClientError as exc:  # an error Status, or the apiserver unreachable
                log.info("admission write failed; requeueing", workload=key, error=str(exc))
        elapsed = time.monotonic() - started
        if not ok or not wlstatus.all_checks_ready(wl):
            # Not admitted (the write failed, or it waits for admission checks): no longer blocking.
            if key in self._admitting:
                self._admitting.discard(key)
                self.wake.set()
        if not ok:
            self.assumed.discard(key)
            if cached is not None:
                self._afs_workload_gone(cached)
            info = self.snapshot.remove_workload(key)
            if self.metrics is not None:
                self.metrics.admission_attempt("inadmissible", elapsed)
            current = self.workloads.get(key)
            if not gone and info is not None and current is not None and wlstatus.is_admissible(current):
                self.queues.requeue(info, api.REQUEUE_FAILED_AFTER_NOMINATION, self.clock.now().timestamp())
                self.wake.set()
            return
        self._forget_pending_write(key)
        cq = decision.admission.get("clusterQueue", "")
        created = (cached.get("metadata") or {}).get("creationTimestamp")
        wait = wlstatus.seconds_since(created, self.clock.now())
        if self.metrics is not None:
            self.metrics.admission_attempt("success", elapsed)
            self.metrics.quota_reserved(cq, wait)
        if self.recorder is not None:
            await self.recorder.normal(
                cached, api.EVENT_QUOTA_RESERVED, "Admission", api.quota_reserved_event_message(cq, wait)
            )
            if wlstatus.all_checks_ready(wl):
                if self.metrics is not None:
                    self.metrics.admitted(cq, wait)
                    self.count_admitted_in_cohorts(cached, cq)
                await self.recorder.normal(
                    cached, api.EVENT_ADMITTED, "Admission", api.admitted_event_message(cq, 0)
                )

    async def _write_preemption(self, decision: Preempt) -> None:
        key = decision.victim_key
        namespace = key.partition("/")[0]
        try:
            # The victim is read again after the wait for a rate-limit token: short workloads often
            # finish while the eviction waits, and a write for them would only come back 409.
            async with self._write_limit, self._preempt_limit, self.kube.turn(api.WORKLOAD, namespace, HIGH):
                cached = self.workloads.get(key)
                if cached is None or not holds_quota(cached):
                    self.scheduler.observe_removed(key)
                    return
                now = self.clock.now()
                wl = wlstatus.status_working_copy(cached)
                wlstatus.set_evicted(wl, api.REASON_PREEMPTED, decision.message, now)
                wlstatus.set_preempted(wl, decision.reason, decision.message, now)
                # Strict: a victim that finished meanwhile (our cache lags) must not be marked evicted.
                await wlstatus.apply_admission_status(self.kube, wl, strict=True)
        except KubeClientError as exc:  # an error Status, or the apiserver unreachable
            log.info("preemption write failed; will retry", workload=key, error=str(exc))
            self.scheduler.observe_removed(key)
            return
        victim_cq = self.cluster_queue_for(cached) or ""
        if self.metrics is not None:
            preemptor = self.workloads.get(decision.preemptor_key)
            self.metrics.preempted(self.cluster_queue_for(preemptor) if preemptor else "", decision.reason)
            self.metrics.evicted(victim_cq, api.REASON_PREEMPTED, "")
        if self.recorder is not None:
            await self.recorder.normal(cached, api.EVENT_PREEMPTED, "Preemption", decision.message)
            await self.recorder.normal(
                cached, api.evicted_due_to_event(api.REASON_PREEMPTED), "Eviction", decision.message
            )
            preemptor = self.workloads.get(decision.preemptor_key)
            if preemptor is not None:
                await self.recorder.normal(
                    preemptor,
                    api.EVENT_PREEMPTED_WORKLOAD,
                    "Preemption",
                    f"Preempted workload {key}",
                )
