"""The in-memory model the scheduler works on, and the quota arithmetic of ClusterQueues and cohorts.

One `Snapshot` holds ResourceFlavors, ClusterQueues, Cohorts (flat v1beta1 cohorts named by
`spec.cohort`, plus optional Cohort objects with `parentName` and their own quota) and every
workload holding quota. Usage is kept per node and per (flavor, resource) and updated
incrementally, so a decision never costs time proportional to the number of workloads.
A workload itself (`WorkloadInfo`, its requests and admission) is in workloads.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kueue_domain import api
from kueue_domain import resources as res
from kueue_domain.resources import FlavorResource

from .workloads import WorkloadInfo, holds_quota

# ------------------------------------------------------------------------------------------------
# ResourceFlavor


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def go_string(self) -> str:
        """How Go's `%s` prints a corev1.Taint value in Kueue's messages: `{key value effect <nil>}`."""
        return f"{{{self.key} {self.value} {self.effect} <nil>}}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Toleration:
        return cls(
            key=obj.get("key") or "",
            operator=obj.get("operator") or "",
            value=obj.get("value") or "",
            effect=obj.get("effect") or "",
        )

    def tolerates(self, taint: Taint) -> bool:
        """corev1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass
class ResourceFlavor:
    name: str
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> ResourceFlavor:
        spec = obj.get("spec") or {}
        return cls(
            name=obj["metadata"]["name"],
            node_labels=dict(spec.get("nodeLabels") or {}),
            node_taints=tuple(
                Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
                for t in spec.get("nodeTaints") or ()
            ),
            tolerations=tuple(Toleration.from_dict(t) for t in spec.get("tolerations") or ()),
        )


# ------------------------------------------------------------------------------------------------
# Quota nodes


@dataclass(frozen=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class ResourceGroup:
    covered_resources: tuple[str, ...]
    flavors: tuple[str, ...]


class QuotaNode:
    """A ClusterQueue or a Cohort: quotas, subtree quota, local quota and usage per (flavor, resource)."""

    is_cohort = False

    def __init__(self, name: str, quotas: dict[FlavorResource, ResourceQuota], fair_weight: Fraction) -> None:
        self.name = name
        self.quotas = quotas
        self.fair_weight = fair_weight
        self.parent: Cohort | None = None
        self.subtree_quota: dict[FlavorResource, int] = {}
        self.local_quota: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        # On a root node: bumped whenever a workload of its tree is added or removed (not by the
        # scheduler's temporary usage changes), so that results computed from the tree can be reused
        # while it is unchanged.
        self.tree_generation = 0

    def has_parent(self) -> bool:
        return self.parent is not None

    def path_parent_to_root(self) -> Iterator[Cohort]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> QuotaNode:
        node: QuotaNode = self
        while node.parent is not None:
            node = node.parent
        return node

    def path_from_root(self) -> str:
        """`/<root>/.../<name>` as in the Preempted message."""
        names = [self.name, *(c.name for c in self.path_parent_to_root())]
        return "/" + "/".join(reversed(names))

    def _compute_local_quota(self) -> None:
        self.local_quota = {}
        for fr, subtree in self.subtree_quota.items():
            quota = self.quotas.get(fr)
            if quota is not None and quota.lending_limit is not None:
                self.local_quota[fr] = max(0, subtree - quota.lending_limit)

    def borrowing_with(self, fr: FlavorResource, val: int) -> bool:
        return self.usage.get(fr, 0) + val > self.subtree_quota.get(fr, 0)

    def is_borrowing(self, fr: FlavorResource) -> bool:
        return self.usage.get(fr, 0) > self.subtree_quota.get(fr, 0)


class Cohort(QuotaNode):
    is_cohort = True

    def __init__(self, name: str, quotas: dict[FlavorResource, ResourceQuota], fair_weight: Fraction) -> None:
        super().__init__(name, quotas, fair_weight)
        self.parent_name: str | None = None
        self.child_cqs: list[ClusterQueue] = []
        self.child_cohorts: list[Cohort] = []

    def height(self) -> int:
        """Distance to the furthest leaf; a cohort with only CQ children has height 1."""
        h = min(len(self.child_cqs) + len(self.child_cohorts), 1)
        for child in self.child_cohorts:
            h = max(h, child.height() + 1)
        return h

    def children(self) -> Iterator[QuotaNode]:
        yield from self.child_cohorts
        yield from self.child_cqs

    def cluster_queues(self) -> Iterator[ClusterQueue]:
        """Every CQ of this subtree."""
        yield from self.child_cqs
        for child in self.child_cohorts:
            yield from child.cluster_queues()


def local_available(node: QuotaNode, fr: FlavorResource) -> int:
    return max(0, node.local_quota.get(fr, 0) - node.usage.get(fr, 0))


def available(node: QuotaNode, fr: FlavorResource) -> int:
    """Capacity this node can still use for fr, counting what its ancestors lend (clamped at 0)."""
    return max(0, _available(node, fr))


def _available(node: QuotaNode, fr: FlavorResource) -> int:
    parent = node.parent
    if parent is None:
        return node.subtree_quota.get(fr, 0) - node.usage.get(fr, 0)
    local_quota = node.local_quota.get(fr, 0)
    usage = node.usage.get(fr, 0)
    from_parent = max(0, _available(parent, fr))
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        stored_in_parent = node.subtree_quota.get(fr, 0) - local_quota
        used_in_parent = max(0, usage - local_quota)
        from_parent = min(from_parent, stored_in_parent - used_in_parent + quota.borrowing_limit)
    return max(0, local_quota - usage) + from_parent


def potential_available(node: QuotaNode, fr: FlavorResource) -> int:
    """The largest request for fr that could ever fit in this node."""
    if node.parent is None:
        return node.subtree_quota.get(fr, 0)
    avail = node.local_quota.get(fr, 0) + potential_available(node.parent, fr)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        avail = min(avail, node.subtree_quota.get(fr, 0) + quota.borrowing_limit)
    return avail


def add_usage(node: QuotaNode, fr: FlavorResource, val: int) -> None:
    """Add usage; the part beyond the node's local available capacity bubbles up to the parent."""
    while True:
        local_avail = local_available(node, fr)
        node.usage[fr] = node.usage.get(fr, 0) + val
        if node.parent is None or val <= local_avail:
            return
        val -= local_avail
        node = node.parent


def remove_usage(node: QuotaNode, fr: FlavorResource, val: int) -> None:
    while True:
        usage = node.usage.get(fr, 0)
        stored_in_parent = usage - node.local_quota.get(fr, 0)
        node.usage[fr] = usage - val
        if stored_in_parent <= 0 or node.parent is None:
            return
        val = min(val, stored_in_parent)
        node = node.parent


def borrowing_level(cq: ClusterQueue, fr: FlavorResource, val: int) -> tuple[int, bool]:
    """Height of the lowest subtree that fits `val` more of fr, and whether it is below the root."""
    if cq.parent is None or not cq.borrowing_with(fr, val):
        return 0, cq.parent is not None
    remaining = val - local_available(cq, fr)
    node: Cohort | None = None
    for node in cq.path_parent_to_root():
        if not node.borrowing_with(fr, remaining):
            return node.height(), node.parent is not None
        remaining -= local_available(node, fr)
    assert node is not None
    return node.height(), node.parent is not None


def is_within_nominal(node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    for fr in frs:
        if node.usage.get(fr, 0) > node.subtree_quota.get(fr, 0):
            return False
    return True


def quantities_fit_in_quota(
    node: QuotaNode, requests: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Whether requests fit in the node's own subtree quota, and what remains to find above it."""
    fits = True
    remaining: dict[FlavorResource, int] = {}
    for fr, val in requests.items():
        if node.usage.get(fr, 0) + val > node.subtree_quota.get(fr, 0):
            fits = False
        remaining[fr] = max(0, val - local_available(node, fr))
    return fits, remaining


# ------------------------------------------------------------------------------------------------
# ClusterQueue


@dataclass(frozen=True)
class FlavorFungibility:
    when_can_borrow: str = api.FLAVOR_FUNGIBILITY_MAY_STOP_SEARCH
    when_can_preempt: str = api.FLAVOR_FUNGIBILITY_TRY_NEXT_FLAVOR
    preference: str | None = None

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | None) -> FlavorFungibility:
        obj = obj or {}

        def norm(value: str | None, default: str) -> str:
            if not value:
                return default
            if value in (api.FLAVOR_FUNGIBILITY_BORROW, api.FLAVOR_FUNGIBILITY_PREEMPT):
                return api.FLAVOR_FUNGIBILITY_MAY_STOP_SEARCH
            return value

        return cls(
            when_can_borrow=norm(obj.get("whenCanBorrow"), api.FLAVOR_FUNGIBILITY_MAY_STOP_SEARCH),
            when_can_preempt=norm(obj.get("whenCanPreempt"), api.FLAVOR_FUNGIBILITY_TRY_NEXT_FLAVOR),
            preference=obj.get("preference"),
        )


@dataclass(frozen=True)
class PreemptionPolicy:
    reclaim_within_cohort: str = api.PREEMPTION_NEVER
    within_cluster_queue: str = api.PREEMPTION_NEVER
    borrow_within_cohort: str = api.PREEMPTION_NEVER
    max_priority_threshold: int | None = None

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any] | None) -> PreemptionPolicy:
        obj = obj or {}
        bwc = obj.get("borrowWithinCohort") or {}
        threshold = bwc.get("maxPriorityThreshold")
        return cls(
            reclaim_within_cohort=obj.get("reclaimWithinCohort") or api.PREEMPTION_NEVER,
            within_cluster_queue=obj.get("withinClusterQueue") or api.PREEMPTION_NEVER,
            borrow_within_cohort=bwc.get("policy") or api.PREEMPTION_NEVER,
            max_priority_threshold=int(threshold) if threshold is not None else None,
        )


def _parse_resource_groups(
    groups: Sequence[Mapping[str, Any]] | None,
) -> tuple[tuple[ResourceGroup, ...], dict[FlavorResource, ResourceQuota]]:
    resource_groups = []
    quotas: dict[FlavorResource, ResourceQuota] = {}
    for group in groups or ():
        flavors = []
        for flavor in group.get("flavors") or ():
            flavors.append(flavor["name"])
            for quota in flavor.get("resources") or ():
                rname = quota["name"]
                bl = quota.get("borrowingLimit")
                ll = quota.get("lendingLimit")
                quotas[(flavor["name"], rname)] = ResourceQuota(
                    nominal=res.quantity_amount(rname, quota.get("nominalQuota", 0)),
                    borrowing_limit=res.quantity_amount(rname, bl) if bl is not None else None,
                    lending_limit=res.quantity_amount(rname, ll) if ll is not None else None,
                )
        resource_groups.append(ResourceGroup(tuple(group.get("coveredResources") or ()), tuple(flavors)))
    return tuple(resource_groups), quotas


def _fair_weight(spec: Mapping[str, Any]) -> Fraction:
    weight = (spec.get("fairSharing") or {}).get("weight")
    return res.parse_quantity(weight) if weight is not None else Fraction(1)


class ClusterQueue(QuotaNode):
    def __init__(
        self,
        name: str,
        resource_groups: tuple[ResourceGroup, ...],
        quotas: dict[FlavorResource, ResourceQuota],
        *,
        cohort_name: str | None = None,
        queueing_strategy: str = api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO,
        namespace_selector: Mapping[str, Any] | None = None,
        flavor_fungibility: FlavorFungibility | None = None,
        preemption: PreemptionPolicy | None = None,
        admission_checks: tuple[tuple[str, tuple[str, ...]], ...] = (),
        stop_policy: str = api.STOP_POLICY_NONE,
        fair_weight: Fraction = Fraction(1),
        admission_mode: str = "",
    ) -> None:
        super().__init__(name, quotas, fair_weight)
        # spec.admissionScope.admissionMode (UsageBasedAdmissionFairSharing or NoAdmissionFairSharing).
        self.admission_mode = admission_mode
        self.resource_groups = resource_groups
        self.rg_by_resource: dict[str, ResourceGroup] = {
            rname: rg for rg in resource_groups for rname in rg.covered_resources
        }
        self.cohort_name = cohort_name or None
        self.queueing_strategy = queueing_strategy
        self.namespace_selector = namespace_selector
        self.flavor_fungibility = flavor_fungibility or FlavorFungibility()
        self.preemption = preemption or PreemptionPolicy()
        self.admission_checks = admission_checks
        self.stop_policy = stop_policy
        self.active = stop_policy == api.STOP_POLICY_NONE
        self.workloads: dict[str, WorkloadInfo] = {}
        # Bumped whenever quota changes or a workload leaves (flavor scan progress is then stale).
        self.allocatable_generation = 1
        for fr, quota in quotas.items():
            self.subtree_quota[fr] = quota.nominal
        self._compute_local_quota()

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> ClusterQueue:
        spec = obj.get("spec") or {}
        groups, quotas = _parse_resource_groups(spec.get("resourceGroups"))
        checks: list[tuple[str, tuple[str, ...]]] = [(name, ()) for name in spec.get("admissionChecks") or ()]
        for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ():
            checks.append((rule["name"], tuple(rule.get("onFlavors") or ())))
        return cls(
            obj["metadata"]["name"],
            groups,
            quotas,
            cohort_name=spec.get("cohort") or spec.get("cohortName"),
            queueing_strategy=spec.get("queueingStrategy") or api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO,
            namespace_selector=spec.get("namespaceSelector"),
            flavor_fungibility=FlavorFungibility.from_dict(spec.get("flavorFungibility")),
            preemption=PreemptionPolicy.from_dict(spec.get("preemption")),
            admission_checks=tuple(checks),
            stop_policy=spec.get("stopPolicy") or api.STOP_POLICY_NONE,
            fair_weight=_fair_weight(spec),
            admission_mode=(spec.get("admissionScope") or {}).get("admissionMode") or "",
        )

    def quota_for(self, fr: FlavorResource) -> ResourceQuota:
        return self.quotas.get(fr) or ResourceQuota(0)

    def available(self, fr: FlavorResource) -> int:
        return available(self, fr)

    def potential_available(self, fr: FlavorResource) -> int:
        return potential_available(self, fr)

    def flavor_names(self) -> list[str]:
        return [f for rg in self.resource_groups for f in rg.flavors]

    def fits(self, usage: Mapping[FlavorResource, int]) -> bool:
        return all(val <= available(self, fr) for fr, val in usage.items())

    def add_usage(self, usage: Mapping[FlavorResource, int]) -> None:
        for fr, val in usage.items():
            add_usage(self, fr, val)

    def remove_usage(self, usage: Mapping[FlavorResource, int]) -> None:
        for fr, val in usage.items():
            remove_usage(self, fr, val)


# ------------------------------------------------------------------------------------------------
# Snapshot


class Snapshot:
    """ResourceFlavors, ClusterQueues, Cohorts and the workloads holding quota."""

    def __init__(self) -> None:
        self.flavors: dict[str, ResourceFlavor] = {}
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.cohorts: dict[str, Cohort] = {}
        # CQs excluded because their cohort chain has a cycle.
        self.excluded_cluster_queues: set[str] = set()
        self.workloads: dict[str, WorkloadInfo] = {}

    @classmethod
    def from_objects(
        cls,
        *,
        cluster_queues: Iterable[Mapping[str, Any]],
        resource_flavors: Iterable[Mapping[str, Any]] = (),
        cohorts: Iterable[Mapping[str, Any]] = (),
        workloads: Iterable[Mapping[str, Any] | WorkloadInfo] = (),
        requeuing_timestamp: str = api.REQUEUING_TIMESTAMP_EVICTION,
    ) -> Snapshot:
        """Build from API dicts. `workloads` may hold any Workloads; only quota holders are added."""
        snap = cls()
        for rf in resource_flavors:
            flavor = ResourceFlavor.from_dict(rf)
            snap.flavors[flavor.name] = flavor
        cqs = [ClusterQueue.from_dict(cq) for cq in cluster_queues]
        cohort_objs = list(cohorts)
        snap._build_tree(cqs, cohort_objs)
        for wl in workloads:
            if isinstance(wl, WorkloadInfo):
                info = wl
            else:
                if not holds_quota(wl):
                    continue
                info = WorkloadInfo.from_dict(wl, requeuing_timestamp=requeuing_timestamp)
            snap.add_workload(info)
        return snap

    def _build_tree(self, cqs: list[ClusterQueue], cohort_objs: list[Mapping[str, Any]]) -> None:
        for obj in cohort_objs:
            spec = obj.get("spec") or {}
            _, quotas = _parse_resource_groups(spec.get("resourceGroups"))
            cohort = Cohort(obj["metadata"]["name"], quotas, _fair_weight(spec))
            cohort.parent_name = spec.get("parentName") or None
            self.cohorts[cohort.name] = cohort

        def ensure(name: str) -> Cohort:
            if name not in self.cohorts:
                self.cohorts[name] = Cohort(name, {}, Fraction(1))  # implicit cohort: no quota
            return self.cohorts[name]

        for cohort in list(self.cohorts.values()):
            if cohort.parent_name:
                ensure(cohort.parent_name)
        for cq in cqs:
            if cq.cohort_name:
                ensure(cq.cohort_name)

        cyclic: set[str] = set()
        for cohort in self.cohorts.values():
            seen = {cohort.name}
            node = cohort
            while node.parent_name:
                if node.parent_name in seen:
                    cyclic |= seen
                    break
                seen.add(node.parent_name)
                node = self.cohorts[node.parent_name]
        for cohort in self.cohorts.values():
            if cohort.parent_name and cohort.name not in cyclic:
                parent = self.cohorts[cohort.parent_name]
                cohort.parent = parent
                parent.child_cohorts.append(cohort)
        for cq in cqs:
            if cq.cohort_name:
                if cq.cohort_name in cyclic:
                    self.excluded_cluster_queues.add(cq.name)
                    continue
                cohort = self.cohorts[cq.cohort_name]
                cq.parent = cohort
                cohort.child_cqs.append(cq)
            self.cluster_queues[cq.name] = cq
        for cohort in self.cohorts.values():
            if cohort.parent is None and cohort.name not in cyclic:
                _compute_subtree(cohort)

    # -- workloads -------------------------------------------------------------------------------

    def add_workload(self, info: WorkloadInfo) -> None:
        """Count a quota-holding workload (assume / cache add)."""
        cq = self.cluster_queues.get(info.cluster_queue)
        if info.key in self.workloads:
            self.remove_workload(info.key)
        self.workloads[info.key] = info
        if cq is None:
            return
        cq.workloads[info.key] = info
        cq.add_usage(info.usage)
        cq.root().tree_generation += 1

    def remove_workload(self, key: str) -> WorkloadInfo | None:
        info = self.workloads.pop(key, None)
        if info is None:
            return None
        cq = self.cluster_queues.get(info.cluster_queue)
        if cq is not None and cq.workloads.pop(key, None) is not None:
            cq.remove_usage(info.usage)
            cq.allocatable_generation += 1
            cq.root().tree_generation += 1
        return info

    def flavor_usage(self, cq_name: str) -> dict[FlavorResource, int]:
        cq = self.cluster_queues[cq_name]
        return {fr: cq.usage.get(fr, 0) for fr in cq.quotas}

    def root_cohorts(self) -> list[Cohort]:
        return [c for c in self.cohorts.values() if c.parent is None]


def _compute_subtree(node: QuotaNode) -> None:
    """SubtreeQuota and localQuota bottom-up."""
    if isinstance(node, Cohort):
        subtree = {fr: q.nominal for fr, q in node.quotas.items()}
        for child in node.children():
            _compute_subtree(child)
            for fr, val in child.subtree_quota.items():
                subtree[fr] = subtree.get(fr, 0) + val - child.local_quota.get(fr, 0)
        node.subtree_quota = subtree
    node._compute_local_quota()
