"""Pending workloads per ClusterQueue: the heap and the requeue rules of Kueue's queue manager.

Each ClusterQueue has an active heap (priority desc, queue-order timestamp asc, UID), an
inadmissible map for parked workloads and an inflight slot. The heap is lazy: updates push a new
entry and stale ones are skipped on pop, so every operation is O(log n).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable

from kueue_domain import api

from .admissionfairsharing import UsageLedger
from .snapshot import Snapshot
from .workloads import WorkloadInfo

# Kueue's inadmissible requeuer (pkg/cache/queue/inadmissible_workloads.go, requeueBatchPeriod):
# a flush request is delivered this long after the first request of its scope.
REQUEUE_BATCH_SECONDS = 1.0
# requeueLongBatchPeriod, with the SchedulerLongRequeueInterval gate on.
REQUEUE_LONG_BATCH_SECONDS = 10.0


def queue_order_key(wl: WorkloadInfo) -> tuple:
    """Heap order: higher priority, then earlier queue-order timestamp, then UID."""
    return (-wl.priority, wl.order_time, wl.uid or wl.key)


def local_queue_key(wl: WorkloadInfo) -> str:
    return f"{wl.namespace}/{wl.queue_name}"


def backoff_expired(wl: WorkloadInfo, now: float) -> bool:
    """Requeued=False or a future requeueAt keeps a workload out of the heap."""
    if wl.requeued_false:
        return False
    return wl.requeue_at is None or wl.requeue_at <= now


def _compacted(heap: list[tuple[tuple, int, str]], seqs: dict[str, int], live: int) -> list:
    """A lazy heap without its stale entries (whose seq is no longer the key's), once they make
    up two thirds of it: updates and removals leave entries behind, and they must not pile up."""
    if len(heap) > 64 and len(heap) > 3 * live:
        heap = [e for e in heap if seqs.get(e[2]) == e[1]]
        heapq.heapify(heap)
    return heap


class ClusterQueuePending:
    """The pending workloads of one ClusterQueue."""

    def __init__(self, name: str, strategy: str = api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO) -> None:
        self.name = name
        self.strategy = strategy
        self._heap: list[tuple[tuple, int, str]] = []
        self._entry_seq: dict[str, int] = {}
        self.items: dict[str, WorkloadInfo] = {}
        self.inadmissible: dict[str, WorkloadInfo] = {}
        self.inflight: WorkloadInfo | None = None
        self.preemptor_key: str | None = None
        self._flushed_since_pop = False
        self._moved_hashes: dict[tuple, str] = {}
        self._by_hash: dict[tuple, set[str]] = {}
        self._seq = itertools.count()
        # Parked workloads are also in one of two lazy heaps: `_parked` (waiting for the next flush)
        # and `_released` (a flush happened since they were parked). A flush only turns the first
        # into the second; each released workload is checked (backoff, namespace, equivalence)
        # and moved to the active heap when it would be next in order. So a flush costs O(1) instead
        # of a heap push per parked workload, and frequent flushes stay cheap.
        self._parked: list[tuple[tuple, int, str]] = []
        self._released: list[tuple[tuple, int, str]] = []
        self._parked_seq: dict[str, int] = {}
        self._released_keys: set[str] = set()
        self._flush_now = 0.0
        self._flush_filter = None
        # Admission Fair Sharing (a UsageBasedAdmissionFairSharing ClusterQueue): the LocalQueue's
        # usage comes first in the order; the heaps are sorted again when a usage changed.
        self.ledger: UsageLedger | None = None
        self._ledger_version = -1

    def _key(self, wl: WorkloadInfo) -> tuple:
        if self.ledger is None:
            return queue_order_key(wl)
        return (self.ledger.usage(local_queue_key(wl)), *queue_order_key(wl))

    def set_ledger(self, ledger: UsageLedger | None) -> None:
        """Order by LocalQueue usage (Admission Fair Sharing) with `ledger`, or not with None."""
        if ledger is not self.ledger:
            self.ledger = ledger
            self._resort()

    def _resort(self) -> None:
        """Every heap again with current keys (stale entries dropped)."""
        self._ledger_version = self.ledger.version if self.ledger is not None else -1

        def rebuilt(heap: list, seqs: dict[str, int], items: dict[str, WorkloadInfo]) -> list:
            out = [(self._key(items[k]), seq, k) for _, seq, k in heap if seqs.get(k) == seq and k in items]
            heapq.heapify(out)
            return out

        self._heap = rebuilt(self._heap, self._entry_seq, self.items)
        self._parked = rebuilt(self._parked, self._parked_seq, self.inadmissible)
        self._released = rebuilt(self._released, self._parked_seq, self.inadmissible)

    def _usage_current(self) -> None:
        if self.ledger is not None and self.ledger.version != self._ledger_version:
            self._resort()

    @property
    def best_effort(self) -> bool:
        return self.strategy != api.QUEUEING_STRATEGY_STRICT_FIFO

    def __len__(self) -> int:
        return len(self.items)

    def pending(self) -> int:
        """`status.pendingWorkloads`: heap plus inadmissible (plus the inflight head)."""
        return len(self.items) + len(self.inadmissible) + (1 if self.inflight is not None else 0)

    def inadmissible_count(self) -> int:
        """Parked workloads no flush has released yet (released ones count as active)."""
        return len(self.inadmissible) - len(self._released_keys)

    # -- heap primitives -------------------------------------------------------------------------

    def _heap_push(self, wl: WorkloadInfo) -> None:
        seq = next(self._seq)
        self._entry_seq[wl.key] = seq
        self.items[wl.key] = wl
        heapq.heappush(self._heap, (self._key(wl), seq, wl.key))
        if self.best_effort:
            self._by_hash.setdefault(wl.scheduling_hash(), set()).add(wl.key)

    def _heap_remove(self, key: str) -> WorkloadInfo | None:
        wl = self.items.pop(key, None)
        if wl is None:
            return None
        self._entry_seq.pop(key, None)
        if self.best_effort:
            keys = self._by_hash.get(wl.scheduling_hash())
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_hash[wl.scheduling_hash()]
        self._heap = _compacted(self._heap, self._entry_seq, len(self.items))
        return wl

    def _park(self, wl: WorkloadInfo) -> None:
        self._unpark(wl.key)
        seq = next(self._seq)
        self.inadmissible[wl.key] = wl
        self._parked_seq[wl.key] = seq
        heapq.heappush(self._parked, (self._key(wl), seq, wl.key))
        released = len(self._released_keys)
        self._parked = _compacted(self._parked, self._parked_seq, len(self.inadmissible) - released)
        self._released = _compacted(self._released, self._parked_seq, released)

    def _unpark(self, key: str) -> WorkloadInfo | None:
        """Take `key` out of the parked set (its heap entry goes stale)."""
        self._parked_seq.pop(key, None)
        self._released_keys.discard(key)
        return self.inadmissible.pop(key, None)

    def _top(self, heap: list[tuple[tuple, int, str]], seqs: dict[str, int]) -> tuple | None:
        while heap:
            entry = heap[0]
            if seqs.get(entry[2]) == entry[1]:
                return entry
            heapq.heappop(heap)
        return None

    def _release_next(self) -> bool:
        """Move the first released workload to the active heap if it comes before the heap's head.
        A released workload that must still wait (backoff, namespace, an equivalent one failed since)
        is parked again until the next flush. Returns whether something changed."""
        released = self._top(self._released, self._parked_seq)
        if released is None:
            return False
        head = self._top(self._heap, self._entry_seq)
        if head is not None and head[:2] < released[:2]:
            return False
        heapq.heappop(self._released)
        key = released[2]
        wl = self._unpark(key)
        if wl is None:
            return True
        waits = not backoff_expired(wl, self._flush_now) or (
            self._flush_filter is not None and not self._flush_filter(wl)
        )
        if waits or (self.best_effort and wl.scheduling_hash() in self._moved_hashes):
            self._park(wl)
        else:
            self._heap_push(wl)
        return True

    def _sort_first(self) -> str | None:
        self._usage_current()
        sticky = self.best_effort and self.preemptor_key in self.items
        if sticky and self.ledger is None:
            return self.preemptor_key
        while self._release_next():
            pass
        head = self._top(self._heap, self._entry_seq)
        if sticky and head is not None:
            # With Admission Fair Sharing the LocalQueue's usage comes before the pending preemptor.
            preemptor = self.items[self.preemptor_key]  # type: ignore[index]
            if self._key(preemptor)[0] <= head[0][0]:
                return self.preemptor_key
        return head[2] if head is not None else None

    # -- operations ------------------------------------------------------------------------------

    def push_or_update(self, wl: WorkloadInfo, now: float = 0.0) -> None:
        """A workload added or updated by an event (Kueue's PushOrUpdate)."""
        if self.inflight is not None and self.inflight.key == wl.key:
            self.inflight = wl
            return
        self._unpark(wl.key)
        if wl.key not in self.items and not backoff_expired(wl, now):
            self._park(wl)
            return
        if self.best_effort and wl.key not in self.items and wl.scheduling_hash() in self._moved_hashes:
            self._park(wl)
            return
        if wl.key in self.items:
            self._heap_remove(wl.key)
        self._heap_push(wl)

    def update_parked(self, wl: WorkloadInfo) -> bool:
        """Part of Kueue's PushOrUpdate: a parked workload updated without a change that could make it
        admissible keeps its place among the parked ones, with the new copy. False when not parked."""
        if wl.key not in self.inadmissible:
            return False
        self.inadmissible[wl.key] = wl
        return True

    def delete(self, key: str) -> None:
        self._heap_remove(key)
        self._unpark(key)
        if self.inflight is not None and self.inflight.key == key:
            self.inflight = None
        if self.preemptor_key == key:
            self.preemptor_key = None

    def peek(self) -> WorkloadInfo | None:
        key = self._sort_first()
        return self.items[key] if key is not None else None

    def pop(self) -> WorkloadInfo | None:
        key = self._sort_first()
        if key is None:
            return None
        wl = self._heap_remove(key)
        self.inflight = wl
        self._flushed_since_pop = False
        return wl

    def requeue_if_not_present(self, wl: WorkloadInfo, reason: str, now: float = 0.0) -> bool:
        """Put back a head the scheduler did not admit. Returns True when it went to the heap."""
        if self.inflight is not None and self.inflight.key == wl.key:
            self.inflight = None
        if wl.key in self.items or wl.key in self.inadmissible:
            return wl.key in self.items or wl.key in self._released_keys
        if reason in (api.REQUEUE_PENDING_PREEMPTION, api.REQUEUE_PENDING_MIGRATION):
            self.preemptor_key = wl.key
        if self.best_effort:
            immediate = reason in api.IMMEDIATE_BEST_EFFORT_REASONS
        else:
            immediate = reason != api.REQUEUE_NAMESPACE_MISMATCH
        expired = backoff_expired(wl, now)
        if not immediate and expired:
            pending_flavors = wl.last_assignment is not None and wl.last_assignment.pending_flavors()
            immediate = self._flushed_since_pop or pending_flavors
        if immediate and expired:
            self._heap_push(wl)
            return True
        self._park(wl)
        if self.best_effort and reason in (api.REQUEUE_NO_FIT, api.REQUEUE_PREEMPTION_NO_CANDIDATES):
            self._bulk_move(wl, reason)
        return False

    def _bulk_move(self, wl: WorkloadInfo, reason: str) -> None:
        """Park every heap workload equivalent to a failed head (SchedulingEquivalenceHashing)."""
        h = wl.scheduling_hash()
        self._moved_hashes[h] = reason
        for key in list(self._by_hash.get(h, ())):
            moved = self._heap_remove(key)
            if moved is not None:
                self._park(moved)
        # Released workloads with this hash are parked again when their turn comes (_release_next).

    def no_fit_reason(self, key: str) -> str | None:
        """The requeue reason of an equivalent workload that failed, if `key` was parked for it
        (Kueue's GetNoFitReason: SchedulingEquivalenceHashing)."""
        wl = self.inadmissible.get(key)
        if wl is None or not self.best_effort or key in self._released_keys:
            return None
        return self._moved_hashes.get(wl.scheduling_hash())

    def snapshot(self) -> list[WorkloadInfo]:
        """Every pending workload of this ClusterQueue in queue order, as Kueue's ClusterQueue.Snapshot
        gives them to the visibility API: the heap, the parked (inadmissible) workloads and the head
        in flight, sorted together by the heap's order (a pending preemptor first, as `_sort_first`
        pops it). Parked workloads are not behind the heap: they take the place their priority and
        timestamp give them."""
        pending = list(self.items.values()) + list(self.inadmissible.values())
        if self.inflight is not None and self.inflight.key not in self.items:
            pending.append(self.inflight)
        sticky = self.preemptor_key if self.best_effort and self.preemptor_key in self.items else None
        if self.ledger is not None:
            pending.sort(key=lambda wl: (self._key(wl)[0], wl.key != sticky, queue_order_key(wl)))
        else:
            pending.sort(key=lambda wl: (wl.key != sticky, queue_order_key(wl)))
        return pending

    def get(self, key: str) -> WorkloadInfo | None:
        if self.inflight is not None and self.inflight.key == key:
            return self.inflight
        return self.items.get(key) or self.inadmissible.get(key)

    def flush_inadmissible(self, now: float = 0.0, namespace_matches=None) -> int:
        """Inadmissible flush: every parked workload goes back to the heap if its backoff has expired
        at `now` and `namespace_matches` accepts it. Lazily (see `_release_next`): returns how many
        parked workloads were released for that check."""
        self._moved_hashes.clear()
        self._flushed_since_pop = True
        self._flush_now, self._flush_filter = now, namespace_matches
        if self._released:
            self._released.extend(self._parked)
            heapq.heapify(self._released)
        else:
            self._released = self._parked
        self._parked = []
        self._released_keys.update(self._parked_seq)
        return len(self._released_keys)


class QueueManager:
    """All ClusterQueues' pending structures, with the pop-one-head-per-CQ step of a scheduling cycle."""

    def __init__(self, afs_ledger: UsageLedger | None = None) -> None:
        self.queues: dict[str, ClusterQueuePending] = {}
        self._where: dict[str, str] = {}
        # Admission Fair Sharing (gate on and `admissionFairSharing` configured): the LocalQueues'
        # usage, read by the ClusterQueues whose admission mode is UsageBasedAdmissionFairSharing.
        self.afs_ledger = afs_ledger

    def ensure(
        self, cq_name: str, strategy: str | None = None, usage_based: bool | None = None
    ) -> ClusterQueuePending:
        """The pending structure of a CQ; `strategy` (when given) sets its queueing strategy. Pushes
        and requeues pass none, so they never reset a StrictFIFO queue to the default. `usage_based`
        (when given) says whether it orders by LocalQueue usage (Admission Fair Sharing)."""
        queue = self.queues.get(cq_name)
        if queue is None:
            queue = self.queues[cq_name] = ClusterQueuePending(
                cq_name, strategy or api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO
            )
        elif strategy is not None:
            queue.strategy = strategy
        if usage_based is not None:
            queue.set_ledger(self.afs_ledger if usage_based else None)
        return queue

    def push(self, wl: WorkloadInfo, now: float = 0.0) -> None:
        old = self._where.get(wl.key)
        if old is not None and old != wl.cluster_queue:
            self.queues[old].delete(wl.key)
        self._where[wl.key] = wl.cluster_queue
        self.ensure(wl.cluster_queue).push_or_update(wl, now)

    def update_parked(self, wl: WorkloadInfo) -> bool:
        """`ClusterQueuePending.update_parked` in `wl`'s ClusterQueue (False if it moved elsewhere)."""
        if self._where.get(wl.key) != wl.cluster_queue:
            return False
        return self.queues[wl.cluster_queue].update_parked(wl)

    def delete(self, key: str) -> None:
        cq = self._where.pop(key, None)
        if cq is not None:
            self.queues[cq].delete(key)

    def heads(self, active: Iterable[str] | None = None) -> list[WorkloadInfo]:
        """Pop exactly one workload from every (active) ClusterQueue."""
        names = self.queues.keys() if active is None else active
        heads = []
        for name in names:
            queue = self.queues.get(name)
            if queue is None:
                continue
            wl = queue.pop()
            if wl is not None:
                heads.append(wl)
        return heads

    def requeue(self, wl: WorkloadInfo, reason: str, now: float = 0.0) -> bool:
        return self.ensure(wl.cluster_queue).requeue_if_not_present(wl, reason, now)

    def admitted(self, key: str) -> None:
        """The workload left the queues because it now holds quota."""
        cq = self._where.pop(key, None)
        if cq is not None:
            self.queues[cq].delete(key)

    def flush(self, cq_names: Iterable[str], now: float = 0.0, namespace_matches=None) -> int:
        return sum(
            self.queues[name].flush_inadmissible(now, namespace_matches)
            for name in cq_names
            if name in self.queues
        )

    def pending(self) -> int:
        return sum(q.pending() for q in self.queues.values())

    def get(self, key: str) -> WorkloadInfo | None:
        """The queued WorkloadInfo of `key` (heap, parked or in flight), if any."""
        cq = self._where.get(key)
        return self.queues[cq].get(key) if cq is not None else None

    def no_fit_reason(self, key: str) -> str | None:
        cq = self._where.get(key)
        return self.queues[cq].no_fit_reason(key) if cq is not None else None


def requeue_scope(snapshot: Snapshot, cq_name: str) -> str:
    """What one flush request covers: a ClusterQueue without a cohort flushes itself, one in a
    cohort flushes its whole tree, so requests are batched per root cohort."""
    cq = snapshot.cluster_queues.get(cq_name)
    if cq is None or cq.parent is None:
        return f"ClusterQueue/{cq_name}"
    return f"Cohort/{cq.root().name}"


class RequeueBatcher:
    """Batches inadmissible flush requests as Kueue's requeuer does (a delaying work queue of
    requeue requests): the first request for a scope opens a window of `period` seconds; requests
    for that scope until the window is taken join it and do not postpone it. A change that may let
    parked workloads fit (a workload finishing or evicted, a quota change) therefore retries them
    once, `period` after the first such change, however many follow."""

    def __init__(self, period: float = REQUEUE_BATCH_SECONDS) -> None:
        self.period = period
        self._due: dict[str, float] = {}
        self._names: dict[str, set[str]] = {}

    def request(self, scope: str, cq_name: str, now: float) -> float | None:
        """Record a request; returns the window's deadline when this request opened it (the caller
        then takes the scope at that time), None when it joined an open window."""
        self._names.setdefault(scope, set()).add(cq_name)
        if scope in self._due:
            return None
        due = self._due[scope] = now + self.period
        return due

    def due_at(self, scope: str) -> float | None:
        return self._due.get(scope)

    def take(self, scope: str) -> set[str]:
        """Close the scope's window: the ClusterQueues whose parked workloads to flush now."""
        self._due.pop(scope, None)
        return self._names.pop(scope, set())

    def take_due(self, now: float) -> set[str]:
        """Close every window whose deadline has passed; their ClusterQueues."""
        names: set[str] = set()
        for scope in [s for s, due in self._due.items() if due <= now]:
            names |= self.take(scope)
        return names

    def pending(self) -> int:
        return len(self._due)
