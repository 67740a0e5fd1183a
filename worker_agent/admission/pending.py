"""Pending conditions (QuotaReserved=False and its message) of the workloads a cycle did not
admit: written in the cycle when they changed, else deferred, coalesced and retried in the
background."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import structlog

from kube_runtime.client import KubeClientError, NotFound
from kube_runtime.ratelimit import HIGH, LOW
from kueue_domain import api
from kueue_domain import workload as wlstatus
from kueue_domain.resources import resource_list_to_api
from worker_agent.admission.core import Obj
from worker_agent.admission.informers import AdmissionInformers
from worker_agent.engine import WorkloadInfo
from worker_agent.engine.scheduler import CycleResult, Requeue

log = structlog.get_logger("worker_agent.admission")

PENDING_WRITE_ATTEMPTS = 5
PENDING_WRITE_RETRY_SECONDS = 0.2  # inadmissible requeues are batched
MAX_PARALLEL_PENDING_WRITES = 16
# With a client budget above MESSAGE_INTERVAL_ABOVE_QPS, a pending Workload's message (its numbers
# move as quota moves) is rewritten at most this often while its reason stays the same; a new
# reason is written at once. At Kueue's own budgets (its default 20 QPS, the 50 QPS of its
# performance harness) every changed message is written in the cycle, as Kueue writes it: the
# budget bounds those writes, and the cycle's pace is that of its writes. Held back at 50 QPS,
# they let cycles run ahead and fill freed quota with small Workloads that the large ones,
# released by the next inadmissible retry, then preempted (full baseline: median 89 evictions over
# seventeen runs with the interval, 14 over five without; docs/benchmarks.md).
PENDING_MESSAGE_MIN_INTERVAL_SECONDS = 3.0
MESSAGE_INTERVAL_ABOVE_QPS = 50.0


def resource_requests(info: WorkloadInfo) -> list[Obj]:
    """`status.resourceRequests` of a pending workload: each PodSet's computed requests (per pod x
    effective count, after LimitRange defaults, RuntimeClass overhead and transformations)."""
    return [{"name": ps.name, "resources": resource_list_to_api(ps.total)} for ps in info.podsets]


class PendingConditionWrites(AdmissionInformers):
    """Writes pending conditions, one writer per workload at a time; the newest decision wins."""

    def _init_pending_writes(self) -> None:
        # Last pending reason written per workload, to skip repeated identical writes.
        self._pending_written: dict[str, tuple[str, str]] = {}
        # When (monotonic) each workload's pending condition was last written by us.
        self._pending_written_at: dict[str, float] = {}
        self.pending_message_interval = (
            PENDING_MESSAGE_MIN_INTERVAL_SECONDS if self.config.qps > MESSAGE_INTERVAL_ABOVE_QPS else 0.0
        )
        # Pending-condition writes are serialized per workload; the newest decision wins, and the
        # base object is our own last write when the cache has not caught up with it yet.
        self._pending_latest: dict[str, Requeue] = {}
        self._pending_writers: set[str] = set()
        self._applied: dict[str, Obj] = {}
        # Pending-condition writes have their own slots: they wait in the LOW lane and must not
        # hold the slots admissions need.
        self._pending_limit = asyncio.Semaphore(MAX_PARALLEL_PENDING_WRITES)

    async def write_pending_conditions(self, result: CycleResult) -> None:
        """The cycle's pending conditions, written before the next cycle starts, one after the other,
        in the Workload writes' FIFO lane: Kueue's scheduler writes them inside its cycle
        (requeueAndUpdate), so its pace follows what the apiserver takes. A scheduler that cycles
        without waiting fills every free slot with the small Workloads that come first while the
        apiserver is still busy, and the larger ones that come next preempt them (measured in
        docs/benchmarks.md, "Earlier (2026-11-25, night)" and "Latest"). Only changed conditions
        are written; with a budget above 50 QPS a new message under the reason written last waits
        for the message interval in the background, coalesced, as does the retry of a failed
        write."""
        for decision in result.decisions:
            if not isinstance(decision, Requeue):
                continue
            decision = self._legacy_reason(decision)
            key = decision.workload_key
            if self._already_written(decision):
                continue
            if key in self._pending_writers or self._pending_message_wait(decision) > 0:
                self._defer_pending_write(decision)
            elif not await self._write_pending(decision, HIGH):
                self._queue_pending_write(decision)  # checked again: a deferred write may have landed

    def _legacy_reason(self, decision: Requeue) -> Requeue:
        legacy = wlstatus.unadmitted_reason(self.config.features, decision.reason, api.REASON_PENDING)
        return decision if legacy == decision.reason else dataclasses.replace(decision, reason=legacy)

    def _already_written(self, decision: Requeue) -> bool:
        """The Workload shows this condition already: a queued newer copy of it is dropped."""
        if self._pending_written.get(decision.workload_key) != (decision.reason, decision.message):
            return False
        self._pending_latest.pop(decision.workload_key, None)
        return True

    def _queue_pending_write(self, decision: Requeue) -> None:
        decision = self._legacy_reason(decision)
        if not self._already_written(decision):
            self._defer_pending_write(decision)

    def _defer_pending_write(self, decision: Requeue) -> None:
        """Hand a decision (reason already mapped, not yet written) to the background writer."""
        key = decision.workload_key
        self._pending_latest[key] = decision
        if key not in self._pending_writers:
            self._pending_writers.add(key)
            self._spawn(self._pending_writer(key))

    def _forget_pending_write(self, key: str) -> None:
        self._pending_written.pop(key, None)
        self._pending_written_at.pop(key, None)

    def _pending_message_wait(self, decision: Requeue) -> float:
        """Seconds to hold a pending write back: only a new message under the reason last written
        waits, until PENDING_MESSAGE_MIN_INTERVAL_SECONDS after that write."""
        key = decision.workload_key
        written = self._pending_written.get(key)
        written_at = self._pending_written_at.get(key)
        if written is None or written_at is None or written[0] != decision.reason:
            return 0.0
        return written_at + self.pending_message_interval - self.clock.monotonic()

    async def _pending_writer(self, key: str) -> None:
        failures = 0
        try:
            while key in self._pending_latest:
                decision = self._pending_latest.pop(key)
                hold = self._pending_message_wait(decision)
                if hold > 0:
                    # Coalesce: whatever decision is newest when the interval ends is written.
                    self._pending_latest.setdefault(key, decision)
                    await self.clock.sleep(hold)
                    continue
                if await self._write_pending(decision) or failures >= PENDING_WRITE_ATTEMPTS:
                    failures = 0
                    continue
                # A parked workload is not evaluated again until a flush: retry the write itself
                # (typically a conflict with a write our cache has not seen yet).
                failures += 1
                self._pending_latest.setdefault(key, decision)
                await self.clock.sleep(PENDING_WRITE_RETRY_SECONDS * failures)
        finally:
            self._pending_writers.discard(key)

    def _newest(self, key: str) -> Obj | None:
        """The cached Workload, or our own last write of it when that is newer."""
        cached = self.workloads.get(key)
        applied = self._applied.get(key)
        if cached is None or applied is None:
            return cached
        try:
            newer = int(applied["metadata"]["resourceVersion"]) > int(cached["metadata"]["resourceVersion"])
        except (KeyError, ValueError):
            return cached
        return applied if newer else cached

    async def _write_pending(self, decision: Requeue, lane: int = LOW) -> bool:
        """False when the write failed and may be retried.

        The cycle's own writes take the FIFO lane with admissions and evictions. The deferred ones
        (a coalesced message, a retry) are superseded by newer ones, so they wait in the rate
        limiter's LOW lane: with a saturated Workload budget, the writes that move work go first.
        The write is decided after that wait, from the freshest cache, and skipped if meanwhile the
        workload got a reservation or a newer decision."""
        key = decision.workload_key
        namespace = key.partition("/")[0]
        # The deferred writes' slots: the cycle's own writes must not wait behind them (a LOW
        # request holds its slot until there is spare budget, up to LOW_MAX_WAIT).
        slots = self._pending_limit if lane == LOW else contextlib.nullcontext()
        async with slots, self.kube.turn(api.WORKLOAD, namespace, lane):
            if self._pending_latest.get(key) not in (None, decision):
                return True  # a newer decision is queued: write that one instead
            base = self._newest(key)
            if base is None or wlstatus.has_quota_reservation(base) or key in self.snapshot.workloads:
                return True
            wl = wlstatus.status_working_copy(base)
            changed = wlstatus.set_pending_condition(wl, decision.reason, decision.message, self.clock.now())
            queued = self.queues.get(key)
            if queued is not None:
                changed |= wlstatus.set_resource_requests(wl, resource_requests(queued))
            if not changed:
                self._pending_written[key] = (decision.reason, decision.message)
                return True
            try:
                applied = await wlstatus.apply_admission_status(self.kube, wl, strict=True)
            except NotFound:
                return True
            except KubeClientError as exc:  # an error Status, or the apiserver unreachable
                log.debug("pending condition write failed", workload=key, error=str(exc))
                return False
        self._pending_written[key] = (decision.reason, decision.message)
        self._pending_written_at[key] = self.clock.monotonic()
        self._applied[key] = applied
        if self.recorder is not None:
            await self.recorder.warning(base, decision.reason, "Admission", decision.message)
        return True
