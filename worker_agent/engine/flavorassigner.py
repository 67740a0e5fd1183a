"""Flavor assignment: pick one flavor per (PodSet, resource group) of a ClusterQueue.

Flavors are scanned in order; each is checked for eligibility (exists, taints tolerated, node
labels compatible with nodeSelector / required node affinity) and quota fit, then ranked by
(preemption mode, borrowing level) under the CQ's flavorFungibility.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kueue_domain import api
from kueue_domain import resources as res
from kueue_domain.resources import FlavorResource

from .requests import PodSetRequests
from .snapshot import ClusterQueue, ResourceFlavor, ResourceQuota, Toleration, borrowing_level
from .workloads import Admission, LastAssignment, PodSetAssignment, WorkloadInfo


class Mode(IntEnum):
    """FlavorAssignmentMode, ordered from least to most preferred."""

    NO_FIT = 0
    PREEMPT = 1
    DEFERRED_FIT = 2
    FIT = 3


class PreemptionMode(IntEnum):
    """The flavor assigner's granular mode (least to most preferred)."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4

    def assignment_mode(self) -> Mode:
        if self == PreemptionMode.NO_FIT:
            return Mode.NO_FIT
        if self == PreemptionMode.FIT:
            return Mode.FIT
        return Mode.PREEMPT


# What the preemption oracle answers for one (flavor, resource) and quantity.
PreemptionPossibility = PreemptionMode  # NO_CANDIDATES, PREEMPT or RECLAIM
Oracle = Callable[[ClusterQueue, WorkloadInfo, FlavorResource, int], tuple[PreemptionMode, int]]

_SEVERITY = {
    api.REASON_NO_MATCHING_FLAVOR: 4,
    api.REASON_EXCEEDS_MAX_QUOTA: 3,
    api.REASON_WAITING_FOR_QUOTA: 2,
    api.REASON_TOPOLOGY_PLACEMENT_FAILED: 1,
}


def most_severe_reason(a: str, b: str) -> str:
    return a if _SEVERITY.get(a, 0) >= _SEVERITY.get(b, 0) else b


@dataclass(frozen=True)
class GranularMode:
    preemption_mode: PreemptionMode
    borrowing_level: int

    def needs_preemption(self) -> bool:
        return self.preemption_mode in (PreemptionMode.PREEMPT, PreemptionMode.RECLAIM)


WORST = GranularMode(PreemptionMode.NO_FIT, 1 << 62)
BEST = GranularMode(PreemptionMode.FIT, 0)


def is_preferred(a: GranularMode, b: GranularMode, preference: str | None) -> bool:
    """Whether mode a beats mode b under the CQ's flavorFungibility.preference."""
    if a.preemption_mode == PreemptionMode.NO_FIT:
        return False
    if b.preemption_mode == PreemptionMode.NO_FIT:
        return True
    a_none = a.preemption_mode == PreemptionMode.NO_CANDIDATES
    b_none = b.preemption_mode == PreemptionMode.NO_CANDIDATES
    if a_none != b_none:
        return not a_none
    if preference == api.FLAVOR_FUNGIBILITY_PREEMPTION_OVER_BORROWING:
        if a.borrowing_level != b.borrowing_level:
            return a.borrowing_level < b.borrowing_level
        return a.preemption_mode > b.preemption_mode
    if a.preemption_mode != b.preemption_mode:
        return a.preemption_mode > b.preemption_mode
    return a.borrowing_level < b.borrowing_level


def should_try_next_flavor(mode: GranularMode, when_can_borrow: str, when_can_preempt: str) -> bool:
    if mode.preemption_mode in (PreemptionMode.NO_FIT, PreemptionMode.NO_CANDIDATES):
        return True
    if mode.needs_preemption() and when_can_preempt == api.FLAVOR_FUNGIBILITY_TRY_NEXT_FLAVOR:
        return True
    return mode.borrowing_level > 0 and when_can_borrow == api.FLAVOR_FUNGIBILITY_TRY_NEXT_FLAVOR


# ------------------------------------------------------------------------------------------------
# Results


@dataclass
class FlavorChoice:
    name: str
    mode: Mode
    borrow: int = 0
    tried_flavor_idx: int = -1


@dataclass
class FlavorAttempt:
    flavor: str
    mode: Mode
    no_fit_reason: str = ""


@dataclass
class PodSetFlavors:
    """The flavors chosen for one PodSet, with the reasons why they are not a plain fit."""

    name: str
    count: int
    requests: res.ResourceList  # PodSet totals, incl. the `pods` resource when the CQ covers it
    flavors: dict[str, FlavorChoice] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    no_fit_reason: str = ""
    attempts: list[FlavorAttempt] = field(default_factory=list)

    def is_fit(self) -> bool:
        return not self.reasons

    def representative_mode(self) -> Mode:
        if not self.reasons:
            return Mode.FIT
        if not self.flavors:
            return Mode.NO_FIT
        return min(choice.mode for choice in self.flavors.values())

    def message(self) -> str:
        return ", ".join(sorted(self.reasons))

    def to_assignment(self) -> PodSetAssignment:
        return PodSetAssignment(
            name=self.name,
            flavors={r: choice.name for r, choice in self.flavors.items()},
            resource_usage={r: self.requests.get(r, 0) for r in self.flavors},
            count=self.count,
        )


@dataclass
class Assignment:
    podsets: list[PodSetFlavors]
    borrowing: int = 0
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    no_fit_reason: str = ""
    last_state: LastAssignment | None = None
    _mode: Mode | None = None

    def representative_mode(self) -> Mode:
        if not self.podsets:
            return Mode.NO_FIT
        if self._mode is None:
            self._mode = min(ps.representative_mode() for ps in self.podsets)
        return self._mode

    def set_representative_mode(self, mode: Mode) -> None:
        self._mode = mode
        for ps in self.podsets:
            for choice in ps.flavors.values():
                choice.mode = mode

    def message(self) -> str:
        return "; ".join(
            api.couldnt_assign_flavors(ps.name, ps.message()) for ps in self.podsets if not ps.is_fit()
        )

    def frs_needing_preemption(self) -> set[FlavorResource]:
        return {
            (choice.name, rname)
            for ps in self.podsets
            for rname, choice in ps.flavors.items()
            if choice.mode == Mode.PREEMPT
        }

    def to_admission(self, cluster_queue: str) -> Admission:
        return Admission(cluster_queue, [ps.to_assignment() for ps in self.podsets])

    def _append(self, ps: PodSetFlavors) -> None:
        self.podsets.append(ps)
        self._mode = None
        for rname, choice in ps.flavors.items():
            self.borrowing = max(self.borrowing, choice.borrow)
            fr = (choice.name, rname)
            amount = ps.requests.get(rname, 0)
            if amount:
                self.usage[fr] = self.usage.get(fr, 0) + amount
        if self.last_state is not None:
            self.last_state.tried_flavor_idx.append({r: c.tried_flavor_idx for r, c in ps.flavors.items()})

    def _resolve_no_fit_reason(self, cq: ClusterQueue) -> None:
        if self.representative_mode() != Mode.NO_FIT:
            return
        overall = ""
        for ps in self.podsets:
            if ps.representative_mode() != Mode.NO_FIT:
                continue
            if not ps.attempts:
                overall = most_severe_reason(overall, api.REASON_NO_MATCHING_FLAVOR)
                continue
            per_group: dict[int, str] = {}
            for i, attempt in enumerate(ps.attempts):
                if attempt.mode != Mode.NO_FIT:
                    continue
                groups = [gi for gi, rg in enumerate(cq.resource_groups) if attempt.flavor in rg.flavors] or [
                    -1 - i
                ]
                for gi in groups:
                    existing = per_group.get(gi)
                    if existing is None or _SEVERITY.get(attempt.no_fit_reason, 0) < _SEVERITY.get(
                        existing, 0
                    ):
                        per_group[gi] = attempt.no_fit_reason
            reason = ps.no_fit_reason
            for r in per_group.values():
                reason = most_severe_reason(reason, r)
            overall = most_severe_reason(overall, reason)
        self.no_fit_reason = overall


# ------------------------------------------------------------------------------------------------
# Eligibility


def _match_expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expr.get("key", "")
    op = expr.get("operator")
    values = expr.get("values") or ()
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            label_value, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return label_value > bound if op == "Gt" else label_value < bound
    return False


def flavor_matches_node_affinity(ps: PodSetRequests, flavor: ResourceFlavor) -> bool:
    """nodeSelector and required node affinity, restricted to keys this flavor's nodeLabels define."""
    labels = flavor.node_labels
    for key, value in ps.node_selector.items():
        if key in labels and labels[key] != value:
            return False
    if not ps.affinity_terms:
        return True
    terms: list[list[Mapping[str, Any]]] = []
    for term in ps.affinity_terms:
        kept = [e for e in term if e.get("key") in labels]
        if not kept:
            # An emptied term matches every flavor; terms are ORed.
            return True
        terms.append(kept)
    return any(all(_match_expression(e, labels) for e in term) for term in terms)


def untolerated_taint(ps: PodSetRequests, flavor: ResourceFlavor) -> str | None:
    """The first NoSchedule/NoExecute taint of the flavor that neither the pod nor the flavor tolerates."""
    if not flavor.node_taints:
        return None
    tolerations = [Toleration.from_dict(t) for t in ps.tolerations] + list(flavor.tolerations)
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint.go_string()
    return None


def check_flavor(ps: PodSetRequests, flavor_name: str, flavors: Mapping[str, ResourceFlavor]) -> str | None:
    """Why this flavor is not eligible for the PodSet, or None."""
    flavor = flavors.get(flavor_name)
    if flavor is None:
        return api.flavor_not_found(flavor_name)
    taint = untolerated_taint(ps, flavor)
    if taint is not None:
        return api.untolerated_taint(taint, flavor_name)
    if not flavor_matches_node_affinity(ps, flavor):
        return api.flavor_doesnt_match_node_affinity(flavor_name)
    return None


# ------------------------------------------------------------------------------------------------
# The assigner


def _no_candidates_oracle(
    cq: ClusterQueue, wl: WorkloadInfo, fr: FlavorResource, val: int
) -> tuple[PreemptionMode, int]:
    return PreemptionMode.NO_CANDIDATES, 0


class FlavorAssigner:
    def __init__(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueue,
        flavors: Mapping[str, ResourceFlavor],
        *,
        oracle: Oracle | None = None,
        fair_sharing: bool = False,
        quota_check_strategy: str = api.QUOTA_CHECK_BLOCK_UNDECLARED,
        cycle: int = 0,
    ) -> None:
        self.wl = wl
        self.cq = cq
        self.flavors = flavors
        self.oracle = oracle or _no_candidates_oracle
        self.fair_sharing = fair_sharing
        self.ignore_undeclared = quota_check_strategy == api.QUOTA_CHECK_IGNORE_UNDECLARED
        self.cycle = cycle
        last = wl.last_assignment
        if (
            last is not None
            and last.cluster_queue_generation < cq.allocatable_generation
            and last.cycle < cycle - 1
        ):
            last = None
        self.last = last

    def assign(self, counts: Sequence[int] | None = None) -> Assignment:
        cq = self.cq
        assignment = Assignment(
            podsets=[], last_state=LastAssignment([], cq.allocatable_generation, self.cycle)
        )
        covers_pods = res.PODS in cq.rg_by_resource
        for index, ps in enumerate(self.wl.podsets):
            count = ps.count if counts is None else counts[index]
            requests = ps.scaled_to(count)
            if covers_pods:
                requests[res.PODS] = count
            psf = PodSetFlavors(name=ps.name, count=count, requests=requests)
            if ps.flavors:
                # Already fixed (second pass of an admitted workload).
                for rname, fname in ps.flavors.items():
                    psf.flavors[rname] = FlavorChoice(fname, Mode.FIT)
            failed = False
            for rname, qty in requests.items():
                if rname not in cq.rg_by_resource and (qty == 0 or self.ignore_undeclared):
                    continue
                if rname in psf.flavors:
                    continue  # assigned together with its resource group
                chosen, reasons, no_fit_reason = self._find_flavor(
                    index, ps, requests, rname, assignment.usage, psf
                )
                if not chosen:
                    psf.flavors = {}
                    psf.reasons = reasons
                    psf.no_fit_reason = no_fit_reason
                    failed = True
                    break
                psf.flavors.update(chosen)
                psf.reasons.extend(reasons)
            assignment._append(psf)
            if failed:
                assignment._resolve_no_fit_reason(cq)
                return assignment
        assignment._resolve_no_fit_reason(cq)
        return assignment

    def _find_flavor(
        self,
        podset_index: int,
        ps: PodSetRequests,
        requests: Mapping[str, int],
        rname: str,
        assignment_usage: Mapping[FlavorResource, int],
        psf: PodSetFlavors,
    ) -> tuple[dict[str, FlavorChoice] | None, list[str], str]:
        cq = self.cq
        rg = cq.rg_by_resource.get(rname)
        if rg is None:
            return None, [api.resource_unavailable(rname)], api.REASON_NO_MATCHING_FLAVOR
        group_requests = {r: requests[r] for r in rg.covered_resources if r in requests}
        fungibility = cq.flavor_fungibility
        reasons: list[str] = []
        best: dict[str, FlavorChoice] | None = None
        best_mode = WORST
        start = self.last.next_flavor_to_try(podset_index, rname) if self.last is not None else 0
        if start >= len(rg.flavors):
            start = 0
        attempted = -1
        for idx in range(start, len(rg.flavors)):
            attempted = idx
            fname = rg.flavors[idx]
            ineligible = check_flavor(ps, fname, self.flavors)
            if ineligible is not None:
                reasons.append(ineligible)
                psf.attempts.append(FlavorAttempt(fname, Mode.NO_FIT, api.REASON_NO_MATCHING_FLAVOR))
                continue
            choices: dict[str, FlavorChoice] = {}
            mode = BEST
            flavor_no_fit = ""
            for res_name, val in group_requests.items():
                fr = (fname, res_name)
                pmode, borrow, fit_reasons, no_fit = self._fits_resource_quota(
                    fr, assignment_usage.get(fr, 0), val, cq.quota_for(fr)
                )
                reasons.extend(fit_reasons)
                flavor_no_fit = most_severe_reason(flavor_no_fit, no_fit)
                candidate = GranularMode(pmode, borrow)
                if is_preferred(mode, candidate, fungibility.preference):
                    mode = candidate
                if mode.preemption_mode == PreemptionMode.NO_FIT:
                    continue
                choices[res_name] = FlavorChoice(fname, pmode.assignment_mode(), borrow)
            psf.attempts.append(FlavorAttempt(fname, mode.preemption_mode.assignment_mode(), flavor_no_fit))
            if not should_try_next_flavor(mode, fungibility.when_can_borrow, fungibility.when_can_preempt):
                best, best_mode = choices, mode
                break
            if is_preferred(mode, best_mode, fungibility.preference):
                best, best_mode = choices, mode
        if best:
            tried = -1 if attempted == len(rg.flavors) - 1 else attempted
            for choice in best.values():
                choice.tried_flavor_idx = tried
        if best_mode.preemption_mode == PreemptionMode.FIT:
            return best, [], ""
        return best, reasons, ""

    def _fits_resource_quota(
        self, fr: FlavorResource, assumed: int, request: int, quota: ResourceQuota
    ) -> tuple[PreemptionMode, int, list[str], str]:
        cq = self.cq
        rname, fname = fr[1], fr[0]
        available = cq.available(fr)
        max_capacity = cq.potential_available(fr)
        val = assumed + request
        if val > max_capacity:
            reason = api.insufficient_quota(
                rname,
                fname,
                res.format_amount(rname, assumed),
                res.format_amount(rname, request),
                res.format_amount(rname, max_capacity),
            )
            return PreemptionMode.NO_FIT, 0, [reason], api.REASON_EXCEEDS_MAX_QUOTA
        borrow, may_reclaim_in_hierarchy = borrowing_level(cq, fr, val)
        if val <= available:
            return PreemptionMode.FIT, borrow, [], ""
        reasons = [api.insufficient_unused_quota(rname, fname, res.format_amount(rname, val - available))]
        if quota.nominal >= val or may_reclaim_in_hierarchy or self._can_preempt_while_borrowing():
            possibility, borrow_after = self.oracle(cq, self.wl, fr, val)
            no_fit = "" if possibility != PreemptionMode.NO_FIT else api.REASON_WAITING_FOR_QUOTA
            return possibility, borrow_after, reasons, no_fit
        return PreemptionMode.NO_FIT, borrow, reasons, api.REASON_WAITING_FOR_QUOTA

    def _can_preempt_while_borrowing(self) -> bool:
        policy = self.cq.preemption
        return policy.borrow_within_cohort != api.PREEMPTION_NEVER or (
            self.fair_sharing and policy.reclaim_within_cohort != api.PREEMPTION_NEVER
        )


def assign_flavors(
    wl: WorkloadInfo,
    cq: ClusterQueue,
    flavors: Mapping[str, ResourceFlavor],
    *,
    oracle: Oracle | None = None,
    fair_sharing: bool = False,
    quota_check_strategy: str = api.QUOTA_CHECK_BLOCK_UNDECLARED,
    counts: Sequence[int] | None = None,
    cycle: int = 0,
) -> Assignment:
    """Assign flavors to every PodSet of `wl` in `cq` (counts override the PodSet counts)."""
    return FlavorAssigner(
        wl,
        cq,
        flavors,
        oracle=oracle,
        fair_sharing=fair_sharing,
        quota_check_strategy=quota_check_strategy,
        cycle=cycle,
    ).assign(counts)
