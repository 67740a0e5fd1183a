"""A workload as the engine sees it: its requests, priority, queue order and admission, read from a
Workload object (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from kueue_domain import api
from kueue_domain import resources as res
from kueue_domain.resources import FlavorResource, RequestConfig

from .requests import (
    LimitRangeDefaults,
    PodSetRequests,
    admitted_podset_requests,
    podset_requests,
)


def parse_time(value: str | float | int | None) -> float:
    """RFC 3339 timestamp (or epoch seconds) to epoch seconds; missing means 0."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == ctype:
            return cond
    return None


def queue_order_time(
    obj: Mapping[str, Any], requeuing_timestamp: str = api.REQUEUING_TIMESTAMP_EVICTION
) -> float:
    """The queue-order timestamp (PrioritySortingWithinCohort on)."""
    evicted = _condition(obj, api.WORKLOAD_EVICTED)
    if evicted is not None and evicted.get("status") == api.CONDITION_TRUE:
        reason = evicted.get("reason")
        if (
            requeuing_timestamp == api.REQUEUING_TIMESTAMP_EVICTION
            and reason == api.REASON_PODS_READY_TIMEOUT
        ) or reason == api.REASON_ADMISSION_CHECK:
            return parse_time(evicted.get("lastTransitionTime"))
    return parse_time((obj.get("metadata") or {}).get("creationTimestamp"))


@dataclass
class PodSetAssignment:
    """One `status.admission.podSetAssignments[]` entry, in engine units."""

    name: str
    flavors: dict[str, str]
    resource_usage: res.ResourceList
    count: int

    def to_api(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flavors": dict(sorted(self.flavors.items())),
            "resourceUsage": res.resource_list_to_api(self.resource_usage),
            "count": self.count,
        }


@dataclass
class Admission:
    cluster_queue: str
    podset_assignments: list[PodSetAssignment]

    def to_api(self) -> dict[str, Any]:
        return {
            "clusterQueue": self.cluster_queue,
            "podSetAssignments": [psa.to_api() for psa in self.podset_assignments],
        }


@dataclass
class LastAssignment:
    """Flavor scan progress kept between cycles."""

    tried_flavor_idx: list[dict[str, int]]
    cluster_queue_generation: int
    cycle: int

    def next_flavor_to_try(self, podset_index: int, resource: str) -> int:
        if podset_index >= len(self.tried_flavor_idx):
            return 0
        idx = self.tried_flavor_idx[podset_index].get(resource, -1)
        return idx + 1

    def pending_flavors(self) -> bool:
        return any(idx != -1 for per_ps in self.tried_flavor_idx for idx in per_ps.values())


def podset_shape(ps: PodSetRequests) -> tuple:
    """What a PodSet asks for apart from its count: name, per-pod requests, placement constraints."""
    return (
        ps.name,
        tuple(sorted(ps.per_pod.items())),
        tuple(sorted(ps.node_selector.items())),
        repr(ps.tolerations),
        repr(ps.affinity_terms),
    )


@dataclass(eq=False)
class WorkloadInfo:
    """What the engine knows about one Workload."""

    namespace: str
    name: str
    cluster_queue: str
    podsets: list[PodSetRequests]
    priority: int = 0
    uid: str = ""
    queue_name: str = ""
    creation_time: float = 0.0
    order_time: float = 0.0
    admission: Admission | None = None
    quota_reserved_time: float = 0.0
    evicted: bool = False
    job_uid: str = ""
    admission_check_states: dict[str, str] = field(default_factory=dict)
    requeue_at: float | None = None
    requeued_false: bool = False
    last_assignment: LastAssignment | None = None
    # MultiKueue group copies (engine/gang.py): a member names its primary, the primary its members.
    group_primary: str = ""
    group_members: tuple[str, ...] = ()
    # Usage per (flavor, resource) while holding quota.
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    _hash: tuple | None = None

    @cached_property
    def key(self) -> str:
        # Read many times per cycle (queues, victims, nominations); namespace and name never change.
        return f"{self.namespace}/{self.name}"

    def scheduling_hash(self) -> tuple:
        """Equivalence key: priority plus, per PodSet, name, count, requests, minCount and shape."""
        if self._hash is None:
            self._hash = (
                self.priority,
                tuple((ps.count, ps.min_count, podset_shape(ps)) for ps in self.podsets),
            )
        return self._hash

    def has_failed_checks(self) -> bool:
        if not self.admission_check_states:
            return False
        return any(
            s in (api.CHECK_STATE_RETRY, api.CHECK_STATE_REJECTED)
            for s in self.admission_check_states.values()
        )

    def set_admission(self, admission: Admission) -> None:
        """Record an admission and derive the usage it holds."""
        self.admission = admission
        self.cluster_queue = admission.cluster_queue
        self.usage = {}
        for psa in admission.podset_assignments:
            for rname, amount in psa.resource_usage.items():
                flavor = psa.flavors.get(rname)
                if flavor is None or amount == 0:
                    continue
                fr = (flavor, rname)
                self.usage[fr] = self.usage.get(fr, 0) + amount

    @classmethod
    def from_dict(
        cls,
        obj: Mapping[str, Any],
        *,
        cluster_queue: str | None = None,
        config: RequestConfig | None = None,
        limit_ranges: LimitRangeDefaults | None = None,
        runtime_class_overheads: Mapping[str, Mapping[str, Any]] | None = None,
        requeuing_timestamp: str = api.REQUEUING_TIMESTAMP_EVICTION,
        pending_podsets: list[PodSetRequests] | None = None,
    ) -> WorkloadInfo:
        """Build from a Workload API dict; admitted usage comes from status.admission.

        `pending_podsets`, if given, are the requests computed earlier for the same spec, limit
        ranges and overheads (request computation is most of the cost of an informer event)."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        reclaimable = {r["name"]: int(r.get("count", 0)) for r in status.get("reclaimablePods") or ()}
        spec_podsets = {ps.get("name") or api.DEFAULT_PODSET_NAME: ps for ps in spec.get("podSets") or ()}
        admission_obj = status.get("admission")
        admission: Admission | None = None
        if admission_obj:
            podsets = [
                admitted_podset_requests(
                    psa, spec_podsets.get(psa.get("name")), reclaimable.get(psa.get("name"), 0)
                )
                for psa in admission_obj.get("podSetAssignments") or ()
            ]
            admission = Admission(
                admission_obj.get("clusterQueue", ""),
                [PodSetAssignment(ps.name, dict(ps.flavors or {}), ps.total, ps.count) for ps in podsets],
            )
            cluster_queue = cluster_queue or admission.cluster_queue
        elif pending_podsets is not None:
            podsets = pending_podsets
        else:
            podsets = _pending_podset_requests(
                spec_podsets, reclaimable, config, limit_ranges, runtime_class_overheads
            )
        reserved = _condition(obj, api.WORKLOAD_QUOTA_RESERVED)
        evicted = _condition(obj, api.WORKLOAD_EVICTED)
        requeued = _condition(obj, api.WORKLOAD_REQUEUED)
        requeue_state = status.get("requeueState") or {}
        info = cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            cluster_queue=cluster_queue or "",
            podsets=podsets,
            priority=int(spec.get("priority") or 0),
            queue_name=spec.get("queueName", ""),
            creation_time=parse_time(meta.get("creationTimestamp")),
            order_time=queue_order_time(obj, requeuing_timestamp),
            quota_reserved_time=parse_time(reserved.get("lastTransitionTime")) if reserved else 0.0,
            evicted=bool(evicted and evicted.get("status") == api.CONDITION_TRUE),
            job_uid=(meta.get("labels") or {}).get(api.LABEL_JOB_UID, ""),
            admission_check_states={
                c["name"]: c.get("state", "") for c in status.get("admissionChecks") or ()
            },
            requeue_at=parse_time(requeue_state["requeueAt"]) if requeue_state.get("requeueAt") else None,
            requeued_false=bool(requeued and requeued.get("status") == api.CONDITION_FALSE),
        )
        annotations = meta.get("annotations") or {}
        if annotations.get(api.ANNOTATION_MULTIKUEUE_GROUP_PRIMARY):
            info.group_primary = annotations[api.ANNOTATION_MULTIKUEUE_GROUP_PRIMARY]
        elif annotations.get(api.ANNOTATION_MULTIKUEUE_GROUP_MEMBERS):
            members = annotations[api.ANNOTATION_MULTIKUEUE_GROUP_MEMBERS].split(",")
            info.group_members = tuple(m for m in members if m)
        if admission is not None:
            info.set_admission(admission)
        return info


def _pending_podset_requests(
    spec_podsets: Mapping[str, Mapping[str, Any]],
    reclaimable: Mapping[str, int],
    config: RequestConfig | None,
    limit_ranges: LimitRangeDefaults | None,
    runtime_class_overheads: Mapping[str, Mapping[str, Any]] | None,
) -> list[PodSetRequests]:
    """A pending workload's requests per PodSet, after LimitRange defaults and RuntimeClass overhead."""
    overheads = runtime_class_overheads or {}
    podsets = []
    for name, ps in spec_podsets.items():
        rc = ((ps.get("template") or {}).get("spec") or {}).get("runtimeClassName")
        podsets.append(
            podset_requests(
                ps,
                reclaimable=reclaimable.get(name, 0),
                limit_ranges=limit_ranges,
                runtime_class_overhead=overheads.get(rc) if rc else None,
                config=config,
            )
        )
    return podsets


def holds_quota(obj: Mapping[str, Any]) -> bool:
    """A workload in the cache: reserved (admission set), not finished, not deactivated."""
    if not (obj.get("status") or {}).get("admission"):
        return False
    if (obj.get("spec") or {}).get("active") is False:
        return False
    finished = _condition(obj, api.WORKLOAD_FINISHED)
    return not (finished and finished.get("status") == api.CONDITION_TRUE)
