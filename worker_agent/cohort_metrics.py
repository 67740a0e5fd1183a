"""Kueue's cohort metrics, reported from the snapshot as upstream's cache reports them.

- `kueue_cohort_subtree_quota` and `kueue_cohort_subtree_resource_reservations`, per (flavor,
  resource), for a cohort and every ancestor whenever one of its ClusterQueues or the cohort
  changes; a series is removed when its value drops to zero and when the cohort is gone.
- `kueue_cohort_subtree_admitted_active_workloads`: admitted workloads of the subtree, from the
  first time a workload holds quota in it.
- `kueue_cohort_subtree_admitted_workloads_total` is counted where a workload is admitted
  (`Metrics.cohort_subtree_admitted` over `engine.cohortstats.cluster_queue_ancestors`).
- `kueue_cohort_info` and `kueue_cluster_queue_info` (MetricsForCohorts): every cohort and
  ClusterQueue with its parent and root, refreshed whenever the hierarchy changes.

A ClusterQueue's change reports its cohort's path to the root; a rebuilt snapshot (a ClusterQueue,
Cohort or flavor changed) reports every cohort and drops the series of cohorts that are gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kueue_domain.resources import FlavorResource
from worker_agent.engine import cohortstats
from worker_agent.engine.snapshot import ClusterQueue, Cohort, Snapshot
from worker_agent.metrics import CLUSTER_QUEUE, CLUSTER_QUEUE_INFO, COHORT, COHORT_INFO, Metrics


class CohortMetrics:
    """What was last reported per cohort, so that stale series are removed."""

    def __init__(self, metrics: Metrics, admitted: Callable[[ClusterQueue], int]) -> None:
        """`admitted(cq)`: how many of the ClusterQueue's quota holders are admitted."""
        self.metrics = metrics
        self.admitted = admitted
        self._snapshot: Snapshot | None = None  # the one the last full report read
        self._role = metrics.replica_role
        self._subtree: dict[str, set[FlavorResource]] = {}  # cohort -> (flavor, resource) series
        self._active: set[str] = set()  # cohorts with an admitted-active series
        self._lineage = cohortstats.Lineage({}, {})

    # -- what the controllers call ----------------------------------------------------------

    def cluster_queue_changed(self, snapshot: Snapshot, cq_name: str) -> None:
        """A ClusterQueue's usage, workloads or spec changed (or it is gone)."""
        if not self._full_if_rebuilt(snapshot):
            self._report(cohortstats.cluster_queue_ancestors(snapshot, cq_name))

    def cohort_changed(self, snapshot: Snapshot, name: str) -> None:
        """A Cohort object was added or changed."""
        if not self._full_if_rebuilt(snapshot):
            self._report(cohortstats.ancestors(snapshot, name))

    def cohort_deleted(self, snapshot: Snapshot, name: str) -> None:
        """A Cohort object was deleted: its series go (its admitted counter too, as upstream's),
        those of its ancestors are reported again; if ClusterQueues still name it, it lives on
        as an implicit cohort and is reported afresh."""
        self._forget(name)
        self._full(snapshot)

    # -- reporting ---------------------------------------------------------------------------

    def _full_if_rebuilt(self, snapshot: Snapshot) -> bool:
        if self.metrics.replica_role != self._role:
            # The Metrics dropped the old role's gauges: nothing of ours is exported any more.
            self._role = self.metrics.replica_role
            self._subtree, self._active = {}, set()
            self._lineage = cohortstats.Lineage({}, {})
            self._snapshot = None
        if snapshot is self._snapshot:
            return False
        self._full(snapshot)
        return True

    def _full(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        stats = self._report(snapshot.cohorts.values())
        for name in set(self._subtree) | self._active | set(self._lineage.cohorts):
            if name not in stats:
                self._forget(name)
        if self.metrics.cohort_info:
            self._report_lineage(cohortstats.lineage(snapshot))

    def _report(self, cohorts: Iterable[Cohort]) -> dict[str, cohortstats.SubtreeStats]:
        stats = cohortstats.subtree_stats(cohorts, self.admitted)
        for name, st in stats.items():
            reported = self._subtree.get(name, set())
            current = set(st.flavor_resources())
            for flavor, resource in sorted(reported - current):
                self.metrics.report_cohort_subtree(name, flavor, resource, 0, 0)
            kept = set()
            for fr in sorted(current):
                quota, reservations = st.quota.get(fr, 0), st.reservations.get(fr, 0)
                self.metrics.report_cohort_subtree(name, fr[0], fr[1], quota, reservations)
                if quota > 0 or reservations > 0:
                    kept.add(fr)
            self._subtree[name] = kept
            if st.reserving or name in self._active:
                self.metrics.report_cohort_subtree_admitted_active(name, st.admitted)
                self._active.add(name)
        return stats

    def _report_lineage(self, lineage: cohortstats.Lineage) -> None:
        old = self._lineage
        for name in set(old.cohorts) - set(lineage.cohorts):
            self.metrics.remove_series(COHORT_INFO, {COHORT: name})
        for name, (parent, root) in lineage.cohorts.items():
            if old.cohorts.get(name) != (parent, root):
                self.metrics.report_cohort_info(name, parent, root)
        for name in set(old.cluster_queues) - set(lineage.cluster_queues):
            self.metrics.remove_series(CLUSTER_QUEUE_INFO, {CLUSTER_QUEUE: name})
        for name, (parent, root) in lineage.cluster_queues.items():
            if old.cluster_queues.get(name) != (parent, root):
                self.metrics.report_cluster_queue_info(name, parent, root)
        self._lineage = lineage

    def _forget(self, name: str) -> None:
        self.metrics.clear_cohort(name)
        self._subtree.pop(name, None)
        self._active.discard(name)
        cohorts = {k: v for k, v in self._lineage.cohorts.items() if k != name}
        self._lineage = cohortstats.Lineage(cohorts, self._lineage.cluster_queues)


__all__ = ["CohortMetrics"]
