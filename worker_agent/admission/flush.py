"""Inadmissible flushes: parked workloads retried per cohort tree, batched as upstream's requeuer
batches them (engine/ordering.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kube_runtime.labels import selector_matches
from kueue_domain import features
from worker_agent.admission.core import AdmissionCore
from worker_agent.admission.decision_log import DecisionLog
from worker_agent.engine import (
    REQUEUE_BATCH_SECONDS,
    REQUEUE_LONG_BATCH_SECONDS,
    RequeueBatcher,
    WorkloadInfo,
    requeue_scope,
)


class InadmissibleFlush(AdmissionCore):
    """Retries the parked workloads of ClusterQueues' cohort trees, once per batch window."""

    decision_log: DecisionLog

    def _init_flush(self) -> None:
        # Inadmissible flushes, batched per cohort tree as upstream's requeuer does (engine/ordering.py).
        long_interval = self.config.features.enabled(features.SCHEDULER_LONG_REQUEUE_INTERVAL)
        self.requeuer = RequeueBatcher(REQUEUE_LONG_BATCH_SECONDS if long_interval else REQUEUE_BATCH_SECONDS)

    def request_flush(self, cq_names: Iterable[str]) -> None:
        """Retry the parked workloads of these ClusterQueues' cohort trees, once per batch window:
        `REQUEUE_BATCH_SECONDS` after the window's first request, as upstream does."""
        now = self.clock.monotonic()
        for name in cq_names:
            if not name:
                continue
            scope = requeue_scope(self.snapshot, name)
            if self.requeuer.request(scope, name, now) is None:
                continue  # joins the scope's open window
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # not running (tests building state): flush at once
                self.flush_now(self.requeuer.take(scope))
                continue
            self._spawn(self._flush_later(scope))

    async def _flush_later(self, scope: str) -> None:
        try:
            await self.clock.sleep(self.requeuer.period)
        finally:
            names = self.requeuer.take(scope)
        self.flush_now(names)

    def flush_now(self, names: Iterable[str]) -> int:
        scope: set[str] = set()
        for name in names:
            scope |= self.cohort_tree_members(name)
        now = self.clock.now().timestamp()
        self.decision_log.flush(scope, now)

        def namespace_matches(info: WorkloadInfo) -> bool:
            cq = self.snapshot.cluster_queues.get(info.cluster_queue)
            if cq is None:
                return True
            return selector_matches(cq.namespace_selector, self.namespace_labels.get(info.namespace, {}))

        moved = self.queues.flush(scope, now, namespace_matches)
        if moved:
            self.wake.set()
        return moved

    def cohort_tree_members(self, cq_name: str) -> set[str]:
        """The CQ itself, or every CQ under the root of its cohort tree."""
        cq = self.snapshot.cluster_queues.get(cq_name)
        if cq is None or cq.parent is None:
            return {cq_name}
        root = cq.parent
        while root.parent is not None:
            root = root.parent
        return {c.name for c in root.cluster_queues()}
