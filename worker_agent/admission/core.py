"""What every part of the admission state shares: the clients, the clock, the cache (snapshot),
the queue manager, the scheduler over them, and the background tasks."""

from __future__ import annotations

import asyncio
from typing import Any

from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.events import EventRecorder
from kueue_domain import api, features
from kueue_domain.config import Configuration
from worker_agent.engine import QueueManager, Scheduler, SchedulerConfig, Snapshot
from worker_agent.engine.admissionfairsharing import AfsConfig, UsageLedger
from worker_agent.engine.cohortstats import cluster_queue_ancestors

Obj = dict[str, Any]


class AdmissionCore:
    """The shared state the other parts of `AdmissionState` read and write."""

    def _init_core(
        self,
        kube: KubeClient,
        config: Configuration,
        clock: Clock | None,
        metrics: Any,
        recorder: EventRecorder | None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock or Clock()
        self.metrics = metrics
        self.recorder = recorder
        self.requeuing_timestamp = (
            config.wait_for_pods_ready.requeuing.timestamp
            if config.wait_for_pods_ready
            else api.REQUEUING_TIMESTAMP_EVICTION
        )
        self.snapshot = Snapshot()
        afs = config.admission_fair_sharing_enabled
        # Admission Fair Sharing's LocalQueue usage (upstream's AfsUsageLedger), when enabled.
        self.afs_ledger: UsageLedger | None = (
            UsageLedger(AfsConfig(afs.half_life_seconds, afs.sampling_interval_seconds, afs.resource_weights))
            if afs is not None
            else None
        )
        self.queues = QueueManager(afs_ledger=self.afs_ledger)
        self.scheduler_config = SchedulerConfig(
            fair_sharing=config.fair_sharing is not None,
            fair_sharing_strategies=(
                config.fair_sharing.preemption_strategies
                if config.fair_sharing
                else SchedulerConfig().fair_sharing_strategies
            ),
            block_admission=bool(config.wait_for_pods_ready and config.wait_for_pods_ready.block_admission),
            partial_admission=config.features.enabled(features.PARTIAL_ADMISSION),
            prioritize_non_borrowing=config.features.enabled(features.FAIR_SHARING_PRIORITIZE_NON_BORROWING),
        )
        self.scheduler = Scheduler(self.snapshot, self.queues, self.scheduler_config)
        # Workloads the scheduler assumed whose admission write is not yet observed.
        self.assumed: set[str] = set()
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        # Admitted workloads whose PodsReady is not True (waitForPodsReady.blockAdmission).
        self.not_ready: set[str] = set()
        # With blockAdmission: workloads admitted by the scheduler whose admission is not yet seen
        # in the cache; they block the next cycle as not-ready workloads do.
        self._admitting: set[str] = set()

    def count_admitted_in_cohorts(self, wl: Obj, cq: str) -> None:
        """kueue_cohort_subtree_admitted_workloads_total: a Workload admitted in `cq` counts in its
        cohort and every ancestor, by the Workload's priority class."""
        if self.metrics is None:
            return
        cohorts = [c.name for c in cluster_queue_ancestors(self.snapshot, cq)]
        if cohorts:
            priority_class = (wl.get("spec") or {}).get("priorityClassName") or ""
            self.metrics.cohort_subtree_admitted(cohorts, priority_class)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
