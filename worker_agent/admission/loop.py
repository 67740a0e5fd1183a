"""The scheduling loop: engine cycles over the cache and the queues, each cycle's decisions handed
to the writers before the next one starts."""

from __future__ import annotations

import asyncio
import contextlib
import time

from kueue_domain import api
from worker_agent.admission.core import AdmissionCore
from worker_agent.admission.decision_log import DecisionLog
from worker_agent.engine.scheduler import Admit, CycleResult, Preempt, Requeue

CYCLE_BACKOFF_INITIAL = 0.001
CYCLE_BACKOFF_MAX = 0.010


class SchedulingLoop(AdmissionCore):
    """Cycles until cancelled. Reads the structure (rebuild), the decision writes
    (_write_admission, _write_preemption) and the pending writes of `AdmissionState`."""

    decision_log: DecisionLog

    def _init_loop(self) -> None:
        self._blocked_written: set[str] = set()
        self.decisions_total = 0
        self.cycles_total = 0
        self.engine_cpu_seconds = 0.0

    async def run_scheduler(self) -> None:
        """Cycle until cancelled (leader only): immediately after progress, else backing off to 10 ms."""
        backoff = CYCLE_BACKOFF_INITIAL
        while True:
            if self.structure_dirty:
                self.rebuild()
            self.wake.clear()
            if self.admission_blocked():
                self._report_blocked()
                await self.wake.wait()
                continue
            self._blocked_written.clear()
            result = self.schedule_once()
            if result.heads == 0:
                await self.wake.wait()
                backoff = CYCLE_BACKOFF_INITIAL
                continue
            if self.decision_log.enabled:
                self._log_cycle(result)
            evictions = self.apply_decisions(result)
            # As Kueue's scheduler issues its preemptions inside the cycle and waits for them,
            # the next cycle starts only when this one's evictions are written.
            if evictions:
                await asyncio.wait(evictions)
            await self.write_pending_conditions(result)
            if result.progressed():
                backoff = CYCLE_BACKOFF_INITIAL
                await asyncio.sleep(0)
                continue
            # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that arrives
            # as the wait ends, and the loop then never stops (the agent's shutdown hung on it).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self.wake.wait()
            backoff = min(backoff * 2, CYCLE_BACKOFF_MAX)

    def _log_cycle(self, result: CycleResult) -> None:
        """The cycle's decisions as one JSON line (`--decision-log`), for a look at why it did what it did."""
        self.decision_log.cycle(result, self.clock.now().timestamp())

    def admission_blocked(self) -> bool:
        """waitForPodsReady.blockAdmission: no new admission until every admitted workload is ready."""
        wfpr = self.config.wait_for_pods_ready
        return bool(wfpr and wfpr.block_admission and (self.not_ready or self._admitting))

    def _report_blocked(self) -> None:
        """Each ClusterQueue head shows why it waits: QuotaReserved=False/WaitingForPodsReady."""
        for queue in self.queues.queues.values():
            head = queue.peek()
            if head is None or head.key in self._blocked_written:
                continue
            self._blocked_written.add(head.key)
            self._queue_pending_write(
                Requeue(head.key, api.REASON_WAITING_FOR_PODS_READY, api.MSG_WAITING_FOR_PODS_READY)
            )
        if len(self._blocked_written) > 10_000:
            self._blocked_written.clear()

    def schedule_once(self) -> CycleResult:
        started = time.process_time()
        result = self.scheduler.schedule(self.clock.now().timestamp(), self.namespace_labels)
        cpu = time.process_time() - started
        self.cycles_total += 1
        self.decisions_total += result.heads
        self.engine_cpu_seconds += cpu
        if self.metrics is not None:
            self.metrics.scheduling_cycle(result.heads, cpu)
        return result

    def apply_decisions(self, result: CycleResult) -> list[asyncio.Task[None]]:
        """Start the cycle's admission and eviction writes; return the eviction writes' tasks.

        Admissions are written in the background, as Kueue's are (its admission routine). Kueue's
        cycle waits for its evictions (IssuePreemptions) and then for its pending conditions; the
        caller does both before it starts the next cycle."""
        evictions: list[asyncio.Task[None]] = []
        for decision in result.decisions:
            if isinstance(decision, Admit):
                self.assumed.add(decision.workload_key)
                if self.scheduler_config.block_admission:
                    self._admitting.add(decision.workload_key)
                self._spawn(self._write_admission(decision))
            elif isinstance(decision, Preempt):
                evictions.append(self._spawn(self._write_preemption(decision)))
            # Requeue decisions: written by write_pending_conditions, before the next cycle.
        return evictions
