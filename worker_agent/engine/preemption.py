"""Preemption targets: classic and fair sharing, plus the flavor assigner's preemption oracle.

Every search simulates victims' removal on the snapshot's usage and restores it before returning.
"""

from __future__ import annotations

import contextlib
import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from kueue_domain import api
from kueue_domain.resources import FlavorResource

from .admissionfairsharing import UsageLedger
from .fairsharing import Share, dominant_resource_share
from .flavorassigner import Assignment, PreemptionMode
from .snapshot import (
    ClusterQueue,
    Cohort,
    QuotaNode,
    Snapshot,
    available,
    borrowing_level,
    is_within_nominal,
    quantities_fit_in_quota,
)
from .workloads import WorkloadInfo

# Candidate variants (classic).
WITHIN_CQ = "WithinCQ"
HIERARCHICAL_RECLAIM = "HierarchicalReclaim"
RECLAIM_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"
RECLAIM_WHILE_BORROWING = "ReclaimWhileBorrowing"

_VARIANT_REASON = {
    WITHIN_CQ: api.REASON_IN_CLUSTER_QUEUE,
    HIERARCHICAL_RECLAIM: api.REASON_IN_COHORT_RECLAMATION,
    RECLAIM_WITHOUT_BORROWING: api.REASON_IN_COHORT_RECLAMATION,
    RECLAIM_WHILE_BORROWING: api.REASON_IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass
class Target:
    """A workload to preempt and the Preempted reason."""

    workload: WorkloadInfo
    reason: str


@dataclass
class _Candidate:
    wl: WorkloadInfo
    variant: str
    lca: Cohort | None = None


def policy_allows(policy: str, preemptor: WorkloadInfo, candidate: WorkloadInfo) -> bool:
    """Whether `policy` lets the preemptor preempt the candidate, on effective priorities."""
    if policy == api.PREEMPTION_ANY:
        return True
    if policy == api.PREEMPTION_LOWER_PRIORITY:
        return candidate.priority < preemptor.priority
    if policy == api.PREEMPTION_LOWER_OR_NEWER_EQUAL_PRIORITY:
        return candidate.priority < preemptor.priority or (
            candidate.priority == preemptor.priority and preemptor.order_time < candidate.order_time
        )
    return False


def uses_resources(wl: WorkloadInfo, frs: Iterable[FlavorResource]) -> bool:
    # A plain loop: this runs for every admitted workload of every candidate ClusterQueue.
    usage = wl.usage
    for fr in frs:
        if usage.get(fr, 0) > 0:
            return True
    return False


def candidate_order_key(preemptor_cq: str):
    """Candidate order: evicted first, other CQs first, lower priority, most recently reserved, UID."""

    def key(wl: WorkloadInfo) -> tuple:
        return (
            0 if wl.evicted else 1,
            1 if wl.cluster_queue == preemptor_cq else 0,
            wl.priority,
            -wl.quota_reserved_time,
            wl.uid or wl.key,
        )

    return key


def candidate_sort_key(preemptor_cq: str, usage_of: Callable[[WorkloadInfo], float | None] | None):
    """`candidate_order_key` as a sort key, with upstream's Admission Fair Sharing criterion
    between the ClusterQueue criterion and the priority: of two workloads of one ClusterQueue in
    different LocalQueues, each with a usage (a UsageBasedAdmissionFairSharing ClusterQueue), the
    one whose LocalQueue has the higher usage goes first (pkg/scheduler/preemption/common)."""
    base = candidate_order_key(preemptor_cq)
    if usage_of is None:
        return base

    def compare(a: WorkloadInfo, b: WorkloadInfo) -> int:
        ka, kb = base(a), base(b)
        if ka[:2] != kb[:2]:
            return -1 if ka[:2] < kb[:2] else 1
        if a.cluster_queue == b.cluster_queue and a.queue_name != b.queue_name:
            ua, ub = usage_of(a), usage_of(b)
            if ua is not None and ub is not None and ua != ub:
                return -1 if ua > ub else 1
        return (ka[2:] > kb[2:]) - (ka[2:] < kb[2:])

    return functools.cmp_to_key(compare)


class _Simulation:
    """Remove workloads' usage from the snapshot and put it back."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.removed: list[WorkloadInfo] = []

    def remove(self, wl: WorkloadInfo) -> None:
        cq = self.snapshot.cluster_queues.get(wl.cluster_queue)
        if cq is not None:
            cq.remove_usage(wl.usage)
        self.removed.append(wl)

    def put_back(self, wl: WorkloadInfo) -> None:
        cq = self.snapshot.cluster_queues.get(wl.cluster_queue)
        if cq is not None:
            cq.add_usage(wl.usage)
        self.removed.remove(wl)

    def restore(self) -> None:
        for wl in reversed(self.removed):
            cq = self.snapshot.cluster_queues.get(wl.cluster_queue)
            if cq is not None:
                cq.add_usage(wl.usage)
        self.removed.clear()


class Preemptor:
    def __init__(
        self,
        snapshot: Snapshot,
        *,
        fair_sharing: bool = False,
        fair_sharing_strategies: Sequence[str] = (
            api.FAIR_SHARING_LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
            api.FAIR_SHARING_LESS_THAN_INITIAL_SHARE,
        ),
        afs_ledger: UsageLedger | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.afs_ledger = afs_ledger
        self.fair_sharing = fair_sharing
        self.strategies = tuple(fair_sharing_strategies)
        # Searches of the current `snapshot_unchanged` block, by (workload, ClusterQueue, requests).
        self._searches: dict[tuple, list[Target]] | None = None

    def _afs_usage_of(self) -> Callable[[WorkloadInfo], float | None] | None:
        """A workload's LocalQueue usage when its ClusterQueue is UsageBasedAdmissionFairSharing."""
        ledger = self.afs_ledger
        if ledger is None:
            return None

        def usage_of(wl: WorkloadInfo) -> float | None:
            cq = self.snapshot.cluster_queues.get(wl.cluster_queue)
            if cq is None or cq.admission_mode != api.ADMISSION_MODE_USAGE_BASED:
                return None
            return ledger.usage(f"{wl.namespace}/{wl.queue_name}")

        return usage_of

    # -- public ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot_unchanged(self) -> Iterator[None]:
        """While the caller does not change the snapshot, a repeated search returns the earlier
        result: the flavor assigner's oracle and `get_targets` ask the same question for a
        workload of one PodSet and resource."""
        self._searches = {}
        try:
            yield
        finally:
            self._searches = None

    def get_targets(self, wl: WorkloadInfo, assignment: Assignment, cq: ClusterQueue) -> list[Target]:
        frs = assignment.frs_needing_preemption()
        if not frs:
            return []
        requests = {fr: assignment.usage.get(fr, 0) for fr in frs}
        return self._targets(wl, cq, requests, assignment.usage)

    def oracle(
        self, cq: ClusterQueue, wl: WorkloadInfo, fr: FlavorResource, quantity: int
    ) -> tuple[PreemptionMode, int]:
        """SimulatePreemption for the flavor assigner: NO_CANDIDATES, PREEMPT or RECLAIM, and the
        borrowing level once the victims are gone."""
        targets = self._targets(wl, cq, {fr: quantity}, {fr: quantity})
        if not targets:
            return PreemptionMode.NO_CANDIDATES, 0
        sim = _Simulation(self.snapshot)
        for t in targets:
            sim.remove(t.workload)
        borrow_after, _ = borrowing_level(cq, fr, quantity)
        sim.restore()
        if any(t.workload.cluster_queue == cq.name for t in targets):
            return PreemptionMode.PREEMPT, borrow_after
        return PreemptionMode.RECLAIM, borrow_after

    def _targets(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueue,
        requests: Mapping[FlavorResource, int],
        usage: Mapping[FlavorResource, int],
    ) -> list[Target]:
        searches = self._searches
        if searches is not None:
            key = (id(wl), id(cq), tuple(requests.items()))
            found = searches.get(key)
            if found is not None:
                return list(found)
        if self.fair_sharing:
            targets = self._fair_targets(wl, cq, requests)
        else:
            targets = self._classic_targets(wl, cq, requests)
        if searches is not None:
            searches[key] = list(targets)
        return targets

    # -- classic ---------------------------------------------------------------------------------

    def _classify(
        self, wl: WorkloadInfo, cq: ClusterQueue, candidate: WorkloadInfo, advantage: bool
    ) -> str | None:
        if candidate.cluster_queue == cq.name:
            if not policy_allows(cq.preemption.within_cluster_queue, wl, candidate):
                return None
            return WITHIN_CQ
        if not policy_allows(cq.preemption.reclaim_within_cohort, wl, candidate):
            return None
        if advantage:
            return HIERARCHICAL_RECLAIM
        policy = cq.preemption
        if policy.borrow_within_cohort == api.PREEMPTION_NEVER:
            return RECLAIM_WITHOUT_BORROWING
        if candidate.priority >= wl.priority or (
            policy.max_priority_threshold is not None and candidate.priority > policy.max_priority_threshold
        ):
            return RECLAIM_WITHOUT_BORROWING
        return RECLAIM_WHILE_BORROWING

    def _from_cq(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueue,
        source: ClusterQueue,
        frs,
        lca: Cohort | None,
        advantage: bool,
    ) -> list[_Candidate]:
        out = []
        for candidate in source.workloads.values():
            if candidate.key == wl.key or not uses_resources(candidate, frs):
                continue
            variant = self._classify(wl, cq, candidate, advantage)
            if variant is not None:
                out.append(_Candidate(candidate, variant, lca))
        return out

    def _collect_subtree(
        self, wl, cq, current: Cohort, subtree_root: Cohort, skip: QuotaNode | None, advantage, frs, out
    ) -> None:
        for child in current.child_cohorts:
            if child is skip or is_within_nominal(child, frs):
                continue
            self._collect_subtree(wl, cq, child, subtree_root, skip, advantage, frs, out)
        for child_cq in current.child_cqs:
            if child_cq is cq:
                continue
            if not is_within_nominal(child_cq, frs):
                out.extend(self._from_cq(wl, cq, child_cq, frs, subtree_root, advantage))

    def _classic_targets(
        self, wl: WorkloadInfo, cq: ClusterQueue, requests: Mapping[FlavorResource, int]
    ) -> list[Target]:
        frs = set(requests)
        same: list[_Candidate] = []
        if cq.preemption.within_cluster_queue != api.PREEMPTION_NEVER:
            same = self._from_cq(wl, cq, cq, frs, None, False)
        hierarchy: list[_Candidate] = []
        priority: list[_Candidate] = []
        if cq.parent is not None and cq.preemption.reclaim_within_cohort != api.PREEMPTION_NEVER:
            advantage, remaining = quantities_fit_in_quota(cq, requests)
            previous: Cohort | None = None
            for root in cq.path_parent_to_root():
                self._collect_subtree(
                    wl, cq, root, root, previous, advantage, frs, hierarchy if advantage else priority
                )
                fits, remaining = quantities_fit_in_quota(root, remaining)
                advantage = advantage or fits
                previous = root
        if not (same or hierarchy or priority):
            return []
        key = candidate_sort_key(cq.name, self._afs_usage_of())
        for group in (hierarchy, priority, same):
            group.sort(key=lambda c: key(c.wl))
        candidates = [c for group in (hierarchy, priority, same) for c in group if c.wl.evicted] + [
            c for group in (hierarchy, priority, same) for c in group if not c.wl.evicted
        ]
        bwc_forbidden = cq.preemption.borrow_within_cohort == api.PREEMPTION_NEVER
        under_nominal = all(cq.usage.get(fr, 0) < cq.quota_for(fr).nominal for fr in frs)
        if not (hierarchy or priority) or (bwc_forbidden and not under_nominal):
            attempts = (True,)
        elif bwc_forbidden and not hierarchy:
            attempts = (False, True)
        else:
            attempts = (True, False)
        for allow_borrowing in attempts:
            targets = self._minimal_preemptions(cq, requests, candidates, allow_borrowing)
            if targets:
                return targets
        return []

    def _fits(self, cq: ClusterQueue, requests: Mapping[FlavorResource, int], allow_borrowing: bool) -> bool:
        for fr, val in requests.items():
            if not allow_borrowing and cq.borrowing_with(fr, val):
                return False
            if val > available(cq, fr):
                return False
        return True

    def _minimal_preemptions(
        self,
        cq: ClusterQueue,
        requests: Mapping[FlavorResource, int],
        candidates: list[_Candidate],
        allow_borrowing: bool,
    ) -> list[Target]:
        frs = set(requests)
        sim = _Simulation(self.snapshot)
        chosen: list[_Candidate] = []
        try:
            for cand in candidates:
                if allow_borrowing and cand.variant == RECLAIM_WITHOUT_BORROWING:
                    continue
                if cand.wl.cluster_queue != cq.name and self._source_within_nominal(cand, frs):
                    continue
                sim.remove(cand.wl)
                chosen.append(cand)
                if self._fits(cq, requests, allow_borrowing):
                    for i in range(len(chosen) - 2, -1, -1):
                        sim.put_back(chosen[i].wl)
                        if self._fits(cq, requests, allow_borrowing):
                            del chosen[i]
                        else:
                            sim.remove(chosen[i].wl)
                    return [Target(c.wl, _VARIANT_REASON[c.variant]) for c in chosen]
            return []
        finally:
            sim.restore()

    def _source_within_nominal(self, cand: _Candidate, frs) -> bool:
        node: QuotaNode | None = self.snapshot.cluster_queues.get(cand.wl.cluster_queue)
        while node is not None and node is not cand.lca:
            if is_within_nominal(node, frs):
                return True
            node = node.parent
        return False

    # -- fair sharing ----------------------------------------------------------------------------

    def _fair_targets(
        self, wl: WorkloadInfo, cq: ClusterQueue, requests: Mapping[FlavorResource, int]
    ) -> list[Target]:
        frs = set(requests)
        root = cq.root()
        by_cq = self._fair_candidates(wl, cq, root, frs)
        if not by_cq:
            return []

        sim = _Simulation(self.snapshot)
        cq.add_usage(requests)  # the preemptor's usage counts in the shares
        targets: list[Target] = []
        retry: dict[str, deque[WorkloadInfo]] = {}
        try:

            def fits() -> bool:
                cq.remove_usage(requests)
                ok = self._fits(cq, requests, True)
                cq.add_usage(requests)
                return ok

            strategy = self.strategies[0]
            done = False
            while not done:
                target_cq = self._next_target_cq(cq, root, by_cq, frs)
                if target_cq is None:
                    break
                queue = by_cq[target_cq.name]
                cand = queue.popleft()
                if not queue:
                    del by_cq[target_cq.name]
                if target_cq is cq:
                    sim.remove(cand)
                    targets.append(Target(cand, api.REASON_IN_CLUSTER_QUEUE))
                elif is_within_nominal(cq, frs):
                    sim.remove(cand)
                    targets.append(Target(cand, api.REASON_IN_COHORT_RECLAMATION))
                else:
                    preemptor_node, target_node = _almost_lcas(cq, target_cq)
                    preemptor_share = dominant_resource_share(preemptor_node)
                    target_old = dominant_resource_share(target_node)
                    if preemptor_share.infinite and not target_old.infinite:
                        retry.setdefault(target_cq.name, deque()).append(cand)
                        retry[target_cq.name].extend(by_cq.pop(target_cq.name, ()))
                        continue
                    sim.remove(cand)
                    target_new = dominant_resource_share(target_node)
                    if _strategy_passes(strategy, preemptor_share, target_old, target_new):
                        targets.append(Target(cand, api.REASON_IN_COHORT_FAIR_SHARING))
                    else:
                        sim.put_back(cand)
                        retry.setdefault(target_cq.name, deque()).append(cand)
                        continue
                done = fits()

            if not done and len(self.strategies) > 1 and retry:
                for target_cq in self._retry_order(cq, retry):
                    cand = retry[target_cq.name][0]
                    preemptor_node, target_node = _almost_lcas(cq, target_cq)
                    if dominant_resource_share(preemptor_node) < dominant_resource_share(target_node):
                        sim.remove(cand)
                        targets.append(Target(cand, api.REASON_IN_COHORT_FAIR_SHARING))
                        if fits():
                            done = True
                            break
            if not done:
                return []
            # Minimize, allowing borrowing, as in classic.
            for i in range(len(targets) - 2, -1, -1):
                sim.put_back(targets[i].workload)
                if fits():
                    del targets[i]
                else:
                    sim.remove(targets[i].workload)
            return targets
        finally:
            cq.remove_usage(requests)
            sim.restore()

    def _fair_candidates(
        self, wl: WorkloadInfo, cq: ClusterQueue, root: QuotaNode, frs: set[FlavorResource]
    ) -> dict[str, deque[WorkloadInfo]]:
        """The candidates per ClusterQueue, each in candidate order: the preemptor's own, then those
        of the cohort's borrowing ClusterQueues."""
        by_cq: dict[str, deque[WorkloadInfo]] = {}
        key = candidate_sort_key(cq.name, self._afs_usage_of())
        if cq.preemption.within_cluster_queue != api.PREEMPTION_NEVER:
            own = [
                c
                for c in cq.workloads.values()
                if c.key != wl.key
                and uses_resources(c, frs)
                and policy_allows(cq.preemption.within_cluster_queue, wl, c)
            ]
            if own:
                by_cq[cq.name] = deque(sorted(own, key=key))
        if cq.preemption.reclaim_within_cohort != api.PREEMPTION_NEVER and isinstance(root, Cohort):
            for other in root.cluster_queues():
                if other is cq or not any(other.is_borrowing(fr) for fr in frs):
                    continue
                found = [
                    c
                    for c in other.workloads.values()
                    if uses_resources(c, frs) and policy_allows(cq.preemption.reclaim_within_cohort, wl, c)
                ]
                if found:
                    by_cq[other.name] = deque(sorted(found, key=key))
        return by_cq

    def _next_target_cq(
        self, cq: ClusterQueue, root: QuotaNode, by_cq: Mapping[str, deque], frs
    ) -> ClusterQueue | None:
        """Descend from the root into the child with the highest DRS."""
        if not isinstance(root, Cohort):
            return cq if cq.name in by_cq else None
        preemptor_path = set(id(n) for n in cq.path_parent_to_root())
        key = candidate_order_key(cq.name)
        node: Cohort = root
        while True:
            best: tuple | None = None
            best_node: QuotaNode | None = None
            for child in node.child_cohorts:
                if not self._has_candidates(child, by_cq):
                    continue
                if id(child) not in preemptor_path and not any(child.is_borrowing(fr) for fr in frs):
                    continue
                rank = (dominant_resource_share(child), 1, ())
                if best is None or rank > best:
                    best, best_node = rank, child
            for child_cq in node.child_cqs:
                if child_cq.name not in by_cq:
                    continue
                if child_cq is not cq and not any(child_cq.is_borrowing(fr) for fr in frs):
                    continue
                first = by_cq[child_cq.name][0]
                # Higher rank wins; between CQs the better first candidate wins the tie.
                neg_key = tuple(-x if isinstance(x, int | float) else x for x in key(first)[:4])
                rank = (dominant_resource_share(child_cq), 0, neg_key)
                if best is None or rank > best:
                    best, best_node = rank, child_cq
            if best_node is None:
                return None
            if isinstance(best_node, ClusterQueue):
                return best_node
            node = best_node  # type: ignore[assignment]

    def _has_candidates(self, cohort: Cohort, by_cq: Mapping[str, deque]) -> bool:
        return any(c.name in by_cq for c in cohort.cluster_queues())

    def _retry_order(self, cq: ClusterQueue, retry: Mapping[str, deque]) -> list[ClusterQueue]:
        cqs = [self.snapshot.cluster_queues[name] for name in retry if name in self.snapshot.cluster_queues]
        cqs.sort(key=lambda c: dominant_resource_share(_almost_lcas(cq, c)[1]), reverse=True)
        return cqs


def _strategy_passes(strategy: str, preemptor_new: Share, target_old: Share, target_new: Share) -> bool:
    if strategy == api.FAIR_SHARING_LESS_THAN_INITIAL_SHARE:
        return preemptor_new < target_old
    return preemptor_new <= target_new


def _almost_lcas(a: QuotaNode, b: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
    """The children of the least common ancestor on a's and b's paths."""
    a_path = [a, *a.path_parent_to_root()]
    b_path = [b, *b.path_parent_to_root()]
    b_ids = {id(n): i for i, n in enumerate(b_path)}
    for i, node in enumerate(a_path):
        j = b_ids.get(id(node))
        if j is not None:
            return a_path[max(i - 1, 0)], b_path[max(j - 1, 0)]
    return a_path[-1], b_path[-1]
