"""What Kueue reports about each cohort of a snapshot (its cohort metrics): the subtree quota and
the subtree reservations per (flavor, resource) of a cohort and of every ancestor, the workloads
of its subtree, and where each cohort and ClusterQueue sits in its hierarchy.

Subtree quota is the cohort's `subtree_quota` (its own nominal quota plus what its children can
lend it, lending limits applied); subtree reservations are the usage of every ClusterQueue of the
subtree added up, as upstream's cache does. A cohort in a cycle has neither. Pure: reads a
Snapshot, changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kueue_domain.resources import FlavorResource

from .snapshot import ClusterQueue, Cohort, Snapshot


def in_cycle(cohort: Cohort) -> bool:
    """A cohort whose chain of parents loops: the snapshot leaves it unlinked."""
    return cohort.parent is None and cohort.parent_name is not None


def path_self_to_root(cohort: Cohort) -> Iterator[Cohort]:
    node: Cohort | None = cohort
    while node is not None:
        yield node
        node = node.parent


@dataclass
class SubtreeStats:
    """One cohort's subtree: quota and reservations per (flavor, resource), and its workloads."""

    quota: dict[FlavorResource, int] = field(default_factory=dict)
    reservations: dict[FlavorResource, int] = field(default_factory=dict)
    reserving: int = 0  # workloads holding quota in a ClusterQueue of the subtree
    admitted: int = 0  # of them, those admitted

    def flavor_resources(self) -> list[FlavorResource]:
        return sorted(set(self.quota) | set(self.reservations))


class _SubtreeTotals:
    """Reservations and workload counts of subtrees, each summed once per computation."""

    def __init__(self, admitted: Callable[[ClusterQueue], int]) -> None:
        self.admitted = admitted
        self.memo: dict[str, tuple[dict[FlavorResource, int], int, int]] = {}

    def of(self, cohort: Cohort) -> tuple[dict[FlavorResource, int], int, int]:
        found = self.memo.get(cohort.name)
        if found is not None:
            return found
        reservations: dict[FlavorResource, int] = {}
        reserving = admitted = 0
        for cq in cohort.child_cqs:
            _accumulate(reservations, cq.usage)
            reserving += len(cq.workloads)
            admitted += self.admitted(cq)
        for child in cohort.child_cohorts:
            child_reservations, child_reserving, child_admitted = self.of(child)
            _accumulate(reservations, child_reservations)
            reserving += child_reserving
            admitted += child_admitted
        self.memo[cohort.name] = (reservations, reserving, admitted)
        return self.memo[cohort.name]


def _accumulate(total: dict[FlavorResource, int], more: dict[FlavorResource, int]) -> None:
    for fr, val in more.items():
        total[fr] = total.get(fr, 0) + val


def subtree_stats(
    cohorts: Iterable[Cohort], admitted: Callable[[ClusterQueue], int] = lambda cq: 0
) -> dict[str, SubtreeStats]:
    """SubtreeStats of each cohort given (none for a cohort in a cycle). `admitted(cq)`: how many
    of the ClusterQueue's quota holders are admitted."""
    totals = _SubtreeTotals(admitted)
    out: dict[str, SubtreeStats] = {}
    for cohort in cohorts:
        if in_cycle(cohort) or cohort.name in out:
            continue
        reservations, reserving, admitted_count = totals.of(cohort)
        out[cohort.name] = SubtreeStats(
            quota=dict(cohort.subtree_quota),
            reservations=dict(reservations),
            reserving=reserving,
            admitted=admitted_count,
        )
    return out


def ancestors(snapshot: Snapshot, cohort_name: str | None) -> list[Cohort]:
    """The cohort named and every ancestor up to its root; none when it is unknown or in a cycle."""
    cohort = snapshot.cohorts.get(cohort_name or "")
    if cohort is None or in_cycle(cohort):
        return []
    return list(path_self_to_root(cohort))


def cluster_queue_ancestors(snapshot: Snapshot, cq_name: str) -> list[Cohort]:
    """The cohorts above a ClusterQueue, its own cohort first (what a workload it admits counts in)."""
    cq = snapshot.cluster_queues.get(cq_name)
    if cq is None or cq.parent is None:
        return []
    return list(path_self_to_root(cq.parent))


@dataclass(frozen=True)
class Lineage:
    """Upstream's info metrics: cohort -> (parent, root) and ClusterQueue -> (parent, root); a
    root cohort has parent "" and is its own root, a ClusterQueue without a cohort (or in a cycle)
    has ("", "")."""

    cohorts: dict[str, tuple[str, str]]
    cluster_queues: dict[str, tuple[str, str]]


def lineage(snapshot: Snapshot) -> Lineage:
    cohorts: dict[str, tuple[str, str]] = {}
    for cohort in snapshot.cohorts.values():
        if in_cycle(cohort):
            continue
        parent = cohort.parent.name if cohort.parent is not None else ""
        cohorts[cohort.name] = (parent, cohort.root().name)
    cqs: dict[str, tuple[str, str]] = {}
    for cq in snapshot.cluster_queues.values():
        cqs[cq.name] = (cq.parent.name, cq.parent.root().name) if cq.parent is not None else ("", "")
    for name in snapshot.excluded_cluster_queues:
        cqs[name] = ("", "")
    return Lineage(cohorts, cqs)


__all__ = [
    "Lineage",
    "SubtreeStats",
    "ancestors",
    "cluster_queue_ancestors",
    "in_cycle",
    "lineage",
    "path_self_to_root",
    "subtree_stats",
]
