"""One scheduling cycle over one snapshot, returning decisions instead of writing them.

The cycle pops one head per active ClusterQueue, nominates (validation, flavor assignment,
preemption targets), orders the entries (classic or the fair-sharing tournament), then processes
them against the same snapshot so later entries see earlier ones' usage. Admitted workloads are
*assumed* into the snapshot (their usage stays counted, like Kueue's cache); every other usage
change of the cycle (reserved capacity, preempting and deferred entries) is undone at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kube_runtime.labels import selector_matches
from kueue_domain import api
from kueue_domain.resources import FlavorResource

from . import gang as gangs
from .admissionfairsharing import base_amounts
from .fairsharing import dominant_resource_share
from .flavorassigner import Assignment, Mode, assign_flavors
from .ordering import QueueManager
from .preemption import Preemptor, Target
from .snapshot import ClusterQueue, Cohort, QuotaNode, Snapshot, available
from .workloads import Admission, WorkloadInfo

# ------------------------------------------------------------------------------------------------
# Decisions


@dataclass(frozen=True)
class Admit:
    """Reserve quota: write `status.admission` and QuotaReserved=True (and Admitted when no checks)."""

    workload_key: str
    admission: dict[str, Any]


@dataclass(frozen=True)
class Preempt:
    """Evict a victim: Evicted=True/Preempted and Preempted=True/<reason> with `message`."""

    victim_key: str
    reason: str
    message: str
    preemptor_key: str = ""


@dataclass(frozen=True)
class Requeue:
    """Not admitted this cycle: QuotaReserved=False with `reason` and `message`."""

    workload_key: str
    reason: str
    message: str
    requeue_reason: str = api.REQUEUE_GENERIC


Decision = Admit | Preempt | Requeue


@dataclass
class CycleResult:
    decisions: list[Decision] = field(default_factory=list)
    heads: int = 0

    @property
    def admitted(self) -> list[Admit]:
        return [d for d in self.decisions if isinstance(d, Admit)]

    @property
    def preempted(self) -> list[Preempt]:
        return [d for d in self.decisions if isinstance(d, Preempt)]

    @property
    def requeued(self) -> list[Requeue]:
        return [d for d in self.decisions if isinstance(d, Requeue)]

    def progressed(self) -> bool:
        """Whether the next cycle should start immediately."""
        return any(isinstance(d, Admit | Preempt) for d in self.decisions)


@dataclass(frozen=True)
class SchedulerConfig:
    fair_sharing: bool = False
    fair_sharing_strategies: tuple[str, ...] = (
        api.FAIR_SHARING_LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        api.FAIR_SHARING_LESS_THAN_INITIAL_SHARE,
    )
    quota_check_strategy: str = api.QUOTA_CHECK_BLOCK_UNDECLARED
    partial_admission: bool = True
    # waitForPodsReady.blockAdmission: at most one admission per cycle (the caller does not start a
    # cycle while an admitted workload is not ready).
    block_admission: bool = False
    # FairSharingPrioritizeNonBorrowing (on upstream): in the fair-sharing tournament a workload
    # whose subtree does not borrow on the flavors it requests goes before one whose subtree does,
    # at every level, before the shares are compared.
    prioritize_non_borrowing: bool = True


class _CycleVictims:
    """The victims chosen so far in a cycle, with their usage summed per ClusterQueue, per quota
    tree: a node's usage depends only on its ClusterQueues' usage, not on the order of changes, so
    a fit check takes the sums out instead of every victim one by one."""

    def __init__(self, cluster_queues: Mapping[str, ClusterQueue]) -> None:
        self.cluster_queues = cluster_queues
        self.workloads: dict[str, WorkloadInfo] = {}
        self.freed: dict[QuotaNode, dict[ClusterQueue, dict[FlavorResource, int]]] = {}

    def add(self, victim: WorkloadInfo) -> None:
        self.workloads[victim.key] = victim
        victim_cq = self.cluster_queues.get(victim.cluster_queue)
        if victim_cq is None:
            return
        amounts = self.freed.setdefault(victim_cq.root(), {}).setdefault(victim_cq, {})
        for fr, val in victim.usage.items():
            amounts[fr] = amounts.get(fr, 0) + val


@dataclass
class _Entry:
    wl: WorkloadInfo
    cq: ClusterQueue | None
    assignment: Assignment | None = None
    targets: list[Target] = field(default_factory=list)
    reason: str = ""  # QuotaReserved reason when not admitted
    message: str = ""
    requeue_reason: str = api.REQUEUE_FAILED_AFTER_NOMINATION
    admitted: bool = False
    gang: gangs.Gang | None = None  # a MultiKueue group admitted as one (engine/gang.py)


# ------------------------------------------------------------------------------------------------
# The scheduler


class Scheduler:
    """Runs cycles over a long-lived snapshot and queue manager."""

    def __init__(
        self, snapshot: Snapshot, queues: QueueManager, config: SchedulerConfig | None = None
    ) -> None:
        self.snapshot = snapshot
        self.queues = queues
        self.config = config or SchedulerConfig()
        self.preemptor = Preemptor(
            snapshot,
            fair_sharing=self.config.fair_sharing,
            fair_sharing_strategies=self.config.fair_sharing_strategies,
            afs_ledger=queues.afs_ledger,
        )
        # Expectations: victims whose preemption was issued but not yet observed (keyed by workload key).
        self.preemptions_in_flight: set[str] = set()
        self.cycle = 0
        # The last cycle's nominations (workload key -> the WorkloadInfo, its tree's generation,
        # the assignment and the preemption targets). A head that waits (for its victims, or because
        # it was skipped) is popped again every cycle; while neither the workload nor any workload
        # of its quota tree changed, flavor assignment and the preemption search give the same
        # result, so it is reused instead of recomputed. Only results computed without a resumed
        # flavor scan (last_assignment None) are kept.
        self._nominations: dict[str, tuple[WorkloadInfo, int, Assignment, list[Target]]] = {}
        self._next_nominations: dict[str, tuple[WorkloadInfo, int, Assignment, list[Target]]] = {}
        self.nominations_reused = 0
        self.now = 0.0  # the current cycle's time

    def observe_removed(self, key: str) -> None:
        """The victim's reservation is gone (or the workload is deleted): forget the expectation."""
        self.preemptions_in_flight.discard(key)

    # -- the cycle -------------------------------------------------------------------------------

    def schedule(
        self,
        now: float = 0.0,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> CycleResult:
        """One cycle. `namespace_labels` maps namespace -> labels; when given, a missing namespace is
        Misconfigured. Without it every namespace is treated as having no labels."""
        self.cycle += 1
        self.now = now
        snapshot = self.snapshot
        active = [name for name, cq in snapshot.cluster_queues.items() if cq.active]
        heads = self.queues.heads(active)
        result = CycleResult(heads=len(heads))
        entries: list[_Entry] = []
        rejected: list[_Entry] = []
        for wl in heads:
            entry = self._nominate(wl, namespace_labels)
            if entry is None:
                continue
            (entries if entry.assignment is not None else rejected).append(entry)

        self._nominations, self._next_nominations = self._next_nominations, {}
        ordered = self._order(entries)
        cycle_victims = _CycleVictims(snapshot.cluster_queues)
        cycle_local: list[tuple[ClusterQueue, dict[FlavorResource, int]]] = []
        for entry in ordered:
            self._process(entry, cycle_victims, cycle_local, result)

        for cq, usage in reversed(cycle_local):
            cq.remove_usage(usage)

        for entry in rejected + [e for e in ordered if not e.admitted]:
            reason = entry.reason or api.REASON_PENDING_EVALUATION
            result.decisions.append(Requeue(entry.wl.key, reason, entry.message, entry.requeue_reason))
            for other in entry.gang.workloads if entry.gang is not None else ():
                if other.key != entry.wl.key:  # the rest of the group stays queued where it is
                    result.decisions.append(Requeue(other.key, reason, entry.message, entry.requeue_reason))
            self.queues.requeue(entry.wl, entry.requeue_reason, now)
        return result

    def _nominate(self, wl: WorkloadInfo, namespace_labels) -> _Entry | None:
        snapshot = self.snapshot
        if wl.key in snapshot.workloads:
            self.queues.admitted(wl.key)
            return None  # already holds quota
        cq = snapshot.cluster_queues.get(wl.cluster_queue)
        entry = _Entry(wl, cq)
        entry.requeue_reason = api.REQUEUE_GENERIC
        if wl.has_failed_checks():
            entry.reason, entry.message = api.REASON_PENDING_EVALUATION, api.MSG_FAILED_ADMISSION_CHECKS
            return entry
        if cq is None:
            entry.reason, entry.message = (
                api.REASON_MISCONFIGURED,
                api.cluster_queue_not_found(wl.cluster_queue),
            )
            return entry
        if not cq.active:
            entry.reason, entry.message = api.REASON_SUSPENDED, api.cluster_queue_inactive(cq.name)
            return entry
        if namespace_labels is not None and wl.namespace not in namespace_labels:
            entry.reason = api.REASON_MISCONFIGURED
            entry.message = f"workload namespace {api.go_quote(wl.namespace)} does not exist"
            return entry
        labels = (namespace_labels or {}).get(wl.namespace, {})
        if not selector_matches(cq.namespace_selector, labels):
            entry.reason, entry.message = api.REASON_MISCONFIGURED, api.MSG_NAMESPACE_MISMATCH
            entry.requeue_reason = api.REQUEUE_NAMESPACE_MISMATCH
            return entry

        group = gangs.resolve(wl, snapshot, self.queues)
        if isinstance(group, str):
            entry.reason, entry.message = api.REASON_PENDING, group
            return entry
        if group is not None:
            entry.gang = group
            entry.assignment, entry.targets = self._assign(group.combined, cq, None)
            entry.requeue_reason = api.REQUEUE_FAILED_AFTER_NOMINATION
            return entry

        generation = cq.root().tree_generation
        memo = self._nominations.get(wl.key)
        if memo is not None and memo[0] is wl and memo[1] == generation and wl.last_assignment is None:
            assignment, targets = memo[2], memo[3]
            self.nominations_reused += 1
        else:
            fresh_scan = wl.last_assignment is None
            assignment, targets = self._assign(wl, cq, None)
            if (
                self.config.partial_admission
                and not _fits_or_preempts(assignment, targets)
                and any(ps.min_count is not None for ps in wl.podsets)
            ):
                partial = self._partial_admission(wl, cq)
                if partial is not None:
                    assignment, targets = partial
            if not fresh_scan:
                memo = None
            else:
                memo = (wl, generation, assignment, targets)
        if memo is not None:
            self._next_nominations[wl.key] = memo
        wl.last_assignment = assignment.last_state
        entry.assignment = assignment
        entry.targets = targets
        entry.requeue_reason = api.REQUEUE_FAILED_AFTER_NOMINATION
        return entry

    def _assign(
        self, wl: WorkloadInfo, cq: ClusterQueue, counts: Sequence[int] | None
    ) -> tuple[Assignment, list[Target]]:
        with self.preemptor.snapshot_unchanged():
            assignment = assign_flavors(
                wl,
                cq,
                self.snapshot.flavors,
                oracle=self.preemptor.oracle,
                fair_sharing=self.config.fair_sharing,
                quota_check_strategy=self.config.quota_check_strategy,
                counts=counts,
                cycle=self.cycle,
            )
            targets: list[Target] = []
            if assignment.representative_mode() == Mode.PREEMPT:
                targets = self.preemptor.get_targets(wl, assignment, cq)
        return assignment, targets

    def _partial_admission(
        self, wl: WorkloadInfo, cq: ClusterQueue
    ) -> tuple[Assignment, list[Target]] | None:
        """Binary search for the largest counts (>= minCount) that fit or can preempt."""
        deltas = [ps.count - ps.min_count if ps.min_count is not None else 0 for ps in wl.podsets]
        total_delta = sum(deltas)
        if total_delta <= 0:
            return None
        best = None
        lo, hi = 1, total_delta
        while lo <= hi:
            mid = (lo + hi) // 2
            counts = [ps.count - (d * mid) // total_delta for ps, d in zip(wl.podsets, deltas, strict=True)]
            assignment, targets = self._assign(wl, cq, counts)
            if _fits_or_preempts(assignment, targets):
                best = (assignment, targets)
                hi = mid - 1
            else:
                lo = mid + 1
        return best

    # -- ordering --------------------------------------------------------------------------------

    def _order(self, entries: list[_Entry]) -> list[_Entry]:
        if not self.config.fair_sharing:
            return sorted(
                entries,
                key=lambda e: (e.assignment.borrowing, -e.wl.priority, e.wl.order_time),  # type: ignore[union-attr]
            )
        return self._fair_order(entries)

    def _fair_order(self, entries: list[_Entry]) -> list[_Entry]:
        """The fair-sharing tournament. Re-evaluated after each pick, since shares change."""
        remaining = list(entries)
        order: list[_Entry] = []
        while remaining:
            entry = remaining[0]
            assert entry.cq is not None
            root = entry.cq.root()
            if not isinstance(root, Cohort):
                order.append(entry)
                remaining.remove(entry)
                continue
            in_tree = [e for e in remaining if e.cq is not None and e.cq.root() is root]
            ranks = {id(e): self._path_ranks(e) for e in in_tree}
            winner = self._tournament(root, in_tree, ranks)
            order.append(winner)
            remaining.remove(winner)
        return order

    def _path_ranks(self, entry: _Entry) -> dict[int, tuple]:
        """Per node on the entry's path: (borrowing?, DRS) with the entry's usage simulated;
        borrowing? is whether the node borrows on a (flavor, resource) the entry requests (always 0
        with FairSharingPrioritizeNonBorrowing off)."""
        cq = entry.cq
        assert cq is not None and entry.assignment is not None
        usage = entry.assignment.usage
        cq.add_usage(usage)
        ranks: dict[int, tuple] = {}
        node: QuotaNode | None = cq
        requested = [fr for fr, amount in usage.items() if amount > 0]
        non_borrowing_first = self.config.prioritize_non_borrowing
        while node is not None and node.parent is not None:
            borrowing = non_borrowing_first and any(node.is_borrowing(fr) for fr in requested)
            ranks[id(node)] = (1 if borrowing else 0, dominant_resource_share(node))
            node = node.parent
        cq.remove_usage(usage)
        return ranks

    def _tournament(
        self, cohort: Cohort, entries: list[_Entry], ranks: Mapping[int, Mapping[int, tuple]]
    ) -> _Entry:
        contenders: list[tuple[_Entry, QuotaNode]] = []
        for child in cohort.child_cohorts:
            sub = [e for e in entries if _under(e.cq, child)]
            if sub:
                contenders.append((self._tournament(child, sub, ranks), child))
        for e in entries:
            if e.cq is not None and e.cq.parent is cohort:
                contenders.append((e, e.cq))

        def key(item: tuple[_Entry, QuotaNode]) -> tuple:
            e, node = item
            borrowing, share = ranks[id(e)].get(id(node), (0, None))
            return (borrowing, share, -e.wl.priority, e.wl.order_time)

        return min(contenders, key=key)[0]

    # -- processing ------------------------------------------------------------------------------

    def _process(
        self,
        entry: _Entry,
        cycle_victims: _CycleVictims,
        cycle_local: list[tuple[ClusterQueue, dict[FlavorResource, int]]],
        result: CycleResult,
    ) -> None:
        wl, cq, assignment = entry.wl, entry.cq, entry.assignment
        assert cq is not None and assignment is not None
        mode = assignment.representative_mode()
        entry.message = assignment.message()
        if entry.gang is not None and entry.message:
            entry.message = api.group_does_not_fit_message(len(entry.gang.workloads), entry.message)
        if mode == Mode.NO_FIT:
            entry.requeue_reason = api.REQUEUE_NO_FIT
            entry.reason = assignment.no_fit_reason or api.REASON_WAITING_FOR_QUOTA
            return
        if mode == Mode.PREEMPT and not entry.targets:
            entry.requeue_reason = api.REQUEUE_PREEMPTION_NO_CANDIDATES
            entry.reason = api.REASON_WAITING_FOR_QUOTA
            if cq.preemption.reclaim_within_cohort != api.PREEMPTION_ANY:
                reserved = _capacity_to_reserve(cq, assignment)
                if reserved:
                    cq.add_usage(reserved)
                    cycle_local.append((cq, reserved))
            return

        target_keys = {t.workload.key for t in entry.targets}
        if target_keys & cycle_victims.workloads.keys():
            wl.last_assignment = None  # skipped or deferred: the next cycle rescans every flavor
            if mode == Mode.FIT or self._fits_without(cq, assignment.usage, cycle_victims):
                # Recomputed against the already-chosen victims: DeferredFit.
                entry.requeue_reason = api.REQUEUE_PENDING_PREEMPTION
                entry.reason = api.REASON_WAITING_FOR_PREEMPTED_WORKLOADS
                usage = dict(assignment.usage)
                cq.add_usage(usage)
                cycle_local.append((cq, usage))
                return
            entry.reason, entry.message = api.REASON_WAITING_FOR_QUOTA, api.MSG_OVERLAPPING_PREEMPTION_TARGETS
            return
        targets = [t.workload for t in entry.targets]
        if not self._fits_without(cq, assignment.usage, cycle_victims, targets):
            wl.last_assignment = None
            entry.reason, entry.message = api.REASON_WAITING_FOR_QUOTA, api.MSG_NO_LONGER_FITS
            return

        for t in entry.targets:
            cycle_victims.add(t.workload)
        if mode == Mode.PREEMPT:
            self._issue_preemptions(entry, result)
            usage = dict(assignment.usage)
            cq.add_usage(usage)
            cycle_local.append((cq, usage))
            return

        if self.config.block_admission and any(isinstance(d, Admit) for d in result.decisions):
            # Another workload was admitted in this cycle and is not ready yet.
            entry.reason, entry.message = api.REASON_WAITING_FOR_PODS_READY, api.MSG_WAITING_FOR_PODS_READY
            return

        # Fit: assume.
        admission = assignment.to_admission(cq.name)
        entry.admitted = True
        if entry.gang is not None:
            for member in entry.gang.workloads:
                self._assume(member, gangs.own_admission(admission, member), result)
                self._push_entry_penalty(member, cq)
            return
        self._assume(wl, admission, result)
        self._push_entry_penalty(wl, cq)

    def _push_entry_penalty(self, wl: WorkloadInfo, cq: ClusterQueue) -> None:
        """Admission Fair Sharing: an admission in a UsageBasedAdmissionFairSharing ClusterQueue
        adds its requests times the sampling alpha to its LocalQueue's usage at once, until the
        Workload is Admitted and the penalty is folded into the consumed usage."""
        ledger = self.queues.afs_ledger
        if ledger is None or cq.admission_mode != api.ADMISSION_MODE_USAGE_BASED:
            return
        requests: dict[str, int] = {}
        for ps in wl.podsets:
            for name, amount in ps.total.items():
                requests[name] = requests.get(name, 0) + amount
        if self.config.quota_check_strategy == api.QUOTA_CHECK_IGNORE_UNDECLARED:
            requests = {name: v for name, v in requests.items() if name in cq.rg_by_resource}
        ledger.push_penalty(f"{wl.namespace}/{wl.queue_name}", wl.key, base_amounts(requests), self.now)

    def _issue_preemptions(self, entry: _Entry, result: CycleResult) -> None:
        """The preemptor's evictions of its victims not yet being evicted (the caller holds its usage)."""
        wl, cq = entry.wl, entry.cq
        assert cq is not None
        # The preemptor waits for its victims on this flavor: its next cycles must not resume the
        # scan after it (Kueue clears LastAssignment once preemptions are issued).
        wl.last_assignment = None
        issued = 0
        for t in entry.targets:
            victim = t.workload
            issued += 1
            if victim.evicted or victim.key in self.preemptions_in_flight:
                continue  # already in progress
            self.preemptions_in_flight.add(victim.key)
            victim_cq = self.snapshot.cluster_queues.get(victim.cluster_queue)
            message = api.preempted_message(
                wl.uid,
                wl.job_uid,
                t.reason,
                cq.path_from_root(),
                victim_cq.path_from_root() if victim_cq else f"/{victim.cluster_queue}",
            )
            result.decisions.append(Preempt(victim.key, t.reason, message, wl.key))
        entry.requeue_reason = api.REQUEUE_PENDING_PREEMPTION
        entry.reason = api.REASON_WAITING_FOR_PREEMPTED_WORKLOADS
        entry.message = entry.message + api.pending_preemption_suffix(issued)

    def _assume(self, wl: WorkloadInfo, admission: Admission, result: CycleResult) -> None:
        wl.set_admission(admission)
        wl.last_assignment = None
        self.snapshot.add_workload(wl)
        self.queues.admitted(wl.key)
        result.decisions.append(Admit(wl.key, admission.to_api()))

    def _fits_without(
        self,
        cq: ClusterQueue,
        usage: Mapping[FlavorResource, int],
        cycle_victims: _CycleVictims,
        targets: Sequence[WorkloadInfo] = (),
    ) -> bool:
        """Whether `usage` fits in cq once the cycle's victims and `targets` are gone. cq can only
        use capacity of its own tree: only victims of that tree, and only the (flavor, resource)
        pairs cq asks for, are taken out."""
        root = cq.root()
        freed = {
            victim_cq: {fr: val for fr, val in amounts.items() if fr in usage}
            for victim_cq, amounts in cycle_victims.freed.get(root, {}).items()
        }
        cluster_queues = self.snapshot.cluster_queues
        for victim in targets:
            victim_cq = cluster_queues.get(victim.cluster_queue)
            if victim_cq is None or victim_cq.root() is not root:
                continue
            amounts = freed.get(victim_cq)
            if amounts is None:
                amounts = freed[victim_cq] = {}
            for fr, val in victim.usage.items():
                if fr in usage:
                    amounts[fr] = amounts.get(fr, 0) + val
        for victim_cq, amounts in freed.items():
            victim_cq.remove_usage(amounts)
        try:
            return cq.fits(usage)
        finally:
            for victim_cq, amounts in freed.items():
                victim_cq.add_usage(amounts)


def _under(cq: ClusterQueue | None, cohort: Cohort) -> bool:
    node = cq.parent if cq is not None else None
    while node is not None:
        if node is cohort:
            return True
        node = node.parent
    return False


def _fits_or_preempts(assignment: Assignment, targets: list[Target]) -> bool:
    mode = assignment.representative_mode()
    return mode == Mode.FIT or (mode == Mode.PREEMPT and bool(targets))


def _capacity_to_reserve(cq: ClusterQueue, assignment: Assignment) -> dict[FlavorResource, int]:
    """Capacity a Preempt entry without candidates holds for this cycle."""
    reserved: dict[FlavorResource, int] = {}
    for fr, request in assignment.usage.items():
        usage = cq.usage.get(fr, 0)
        quota = cq.quota_for(fr)
        if assignment.borrowing > 0:
            if quota.borrowing_limit is None:
                amount = request
            else:
                amount = min(request, quota.nominal + quota.borrowing_limit - usage)
        else:
            amount = max(0, min(request, quota.nominal - usage))
        amount = min(max(0, amount), available(cq, fr))
        if amount > 0:
            reserved[fr] = amount
    return reserved


def run_until_idle(
    scheduler: Scheduler,
    max_cycles: int = 10_000,
    now: float = 0.0,
    on_cycle: Callable[[CycleResult], None] | None = None,
) -> list[CycleResult]:
    """Run cycles until one pops no head (a test and benchmark helper)."""
    results = []
    for _ in range(max_cycles):
        result = scheduler.schedule(now)
        results.append(result)
        if on_cycle is not None:
            on_cycle(result)
        if result.heads == 0:
            break
    return results
