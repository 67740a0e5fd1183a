"""Workload groups admitted as one (beyond upstream Kueue, which admits each Workload alone).

The MultiKueue manager dispatches all group Workloads of a LeaderWorkerSet to a worker together
and marks their copies: the primary's copy names the other members
(`kueue-federation.dev/multikueue-group-members`), each member's copy names its primary
(`kueue-federation.dev/multikueue-group-primary`). On the worker:

- a member is not admitted on its own while its primary holds no quota here (afterwards, as when
  the LWS is scaled up, it is admitted like any other Workload);
- whichever Workload of the group reaches the head of the queue, the group is admitted only when
  the primary and all of its members are queued in the same ClusterQueue, and then as one: their
  requests are added up PodSet by PodSet, flavors are assigned and preemption targets searched
  once, for the whole group, and each Workload gets the admission of its own PodSets on the
  chosen flavors.

So a worker admits the whole group or none of it, and a group too large for a worker stays
pending there with a message about the group's total. Workloads without these annotations (every
Workload that is not a MultiKueue group copy) are scheduled exactly as upstream does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from kueue_domain import api

from .ordering import QueueManager
from .snapshot import Snapshot
from .workloads import Admission, PodSetAssignment, WorkloadInfo, podset_shape


@dataclass
class Gang:
    primary: WorkloadInfo
    members: list[WorkloadInfo]  # the queued members admitted together with the primary
    combined: WorkloadInfo  # the primary with every member's pods added, used for assignment

    @property
    def workloads(self) -> list[WorkloadInfo]:
        return [self.primary, *self.members]


def resolve(head: WorkloadInfo, snapshot: Snapshot, queues: QueueManager) -> Gang | str | None:
    """The group a queue head belongs to: a Gang to admit as one, a message when it must wait (its
    primary or some members are not queued yet), or None when the head is admitted on its own (no
    group, its primary already holds quota, or PodSets that differ between members)."""
    if head.group_primary:
        primary_key = f"{head.namespace}/{head.group_primary}"
        if primary_key in snapshot.workloads:
            return None
        primary = queues.get(primary_key)
        if primary is None or primary.cluster_queue != head.cluster_queue:
            return api.waiting_for_group_primary_message(head.group_primary)
        return _gather(primary, snapshot, queues)
    if head.group_members:
        return _gather(head, snapshot, queues)
    return None


def _gather(primary: WorkloadInfo, snapshot: Snapshot, queues: QueueManager) -> Gang | str | None:
    pending: list[WorkloadInfo] = []
    missing: list[str] = []
    for name in primary.group_members:
        key = f"{primary.namespace}/{name}"
        if key in snapshot.workloads:
            continue
        queued = queues.get(key)
        if queued is None or queued.cluster_queue != primary.cluster_queue:
            missing.append(name)
        else:
            pending.append(queued)
    if missing:
        return api.waiting_for_group_members_message(missing)
    if not pending:
        return None
    combined = combine(primary, pending)
    return Gang(primary, pending, combined) if combined is not None else None


def combine(primary: WorkloadInfo, members: Iterable[WorkloadInfo]) -> WorkloadInfo | None:
    """The primary with the members' pod counts added; None when a member's PodSets differ in
    name, per-pod requests or placement constraints (then no common flavor choice exists)."""
    shape = [podset_shape(ps) for ps in primary.podsets]
    counts = [ps.count for ps in primary.podsets]
    for member in members:
        if [podset_shape(ps) for ps in member.podsets] != shape:
            return None
        for i, ps in enumerate(member.podsets):
            counts[i] += ps.count
    podsets = [
        dataclasses.replace(ps, count=count, min_count=None, spec_count=None)
        for ps, count in zip(primary.podsets, counts, strict=True)
    ]
    return dataclasses.replace(primary, podsets=podsets, last_assignment=None, usage={}, _hash=None)


def own_admission(group_admission: Admission, wl: WorkloadInfo) -> Admission:
    """The part of the group's admission that belongs to `wl`: its PodSets on the group's flavors."""
    flavors = {psa.name: psa.flavors for psa in group_admission.podset_assignments}
    assignments = []
    for ps in wl.podsets:
        chosen = flavors.get(ps.name, {})
        usage = {resource: ps.per_pod.get(resource, 0) * ps.count for resource in chosen}
        assignments.append(PodSetAssignment(ps.name, dict(chosen), usage, ps.count))
    return Admission(group_admission.cluster_queue, assignments)
