"""Event routing: informer events into the cache (workloads holding quota), into the queues
(pending workloads), or out of both, and the listeners told what changed."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kube_runtime.informer import object_key
from kueue_domain import api
from kueue_domain import workload as wlstatus
from worker_agent.admission.afs import AdmissionFairSharingEvents
from worker_agent.admission.core import Obj
from worker_agent.admission.informers import (
    INDEX_CLUSTER_QUEUE,
    INDEX_NAMESPACE,
    INDEX_QUEUE,
    on_spec_change,
)
from worker_agent.engine.workloads import holds_quota


class EventRouting(AdmissionFairSharingEvents):
    """The informers' handlers. Reads the flush (request_flush), the structure (structure_dirty)
    and the pending writes (_forget_pending_write, _applied) of `AdmissionState`."""

    def _init_routing(self) -> None:
        # Workloads whose Admitted=True the workload controller is writing (noted before the
        # write): that write's watch event is not an admission by another writer.
        self._own_admissions: set[str] = set()

    def _wire_handlers(self) -> None:
        def structural(*_args: Any) -> None:
            self.structure_dirty = True
            self.wake.set()

        def cq_changed(obj: Obj, *_rest: Any) -> None:
            structural()
            name = obj["metadata"]["name"]
            self.request_flush([name])
            self._notify_cq(name)
            for lq in self.local_queues.by_index(INDEX_CLUSTER_QUEUE, name):
                self._notify_lq(object_key(lq))

        for informer in (self.flavors, self.cohorts):
            informer.add_handler(
                on_add=lambda obj: self._structural_with_all(),
                on_update=on_spec_change(lambda obj: self._structural_with_all()),
                on_delete=lambda obj: self._structural_with_all(),
            )
        # An AdmissionCheck's status (its Active condition) decides whether ClusterQueues are active.
        self.admission_checks.add_handler(
            on_add=lambda obj: self._structural_with_all(),
            on_update=lambda old, new: self._structural_with_all(),
            on_delete=lambda obj: self._structural_with_all(),
        )
        self.cluster_queues.add_handler(
            on_add=cq_changed, on_update=on_spec_change(cq_changed), on_delete=cq_changed
        )
        self.local_queues.add_handler(
            on_add=self._on_local_queue,
            on_update=on_spec_change(self._on_local_queue),
            on_delete=self._on_local_queue_deleted,
        )
        self.workloads.add_handler(
            on_add=lambda obj: self._on_workload(None, obj),
            on_update=self._on_workload,
            on_delete=self._on_workload_deleted,
        )
        self.namespaces.add_handler(
            on_add=self._on_namespace,
            on_update=lambda old, new: self._on_namespace(new, old),
            on_delete=lambda obj: self.namespace_labels.pop(obj["metadata"]["name"], None),
        )
        self.limit_ranges.add_handler(
            on_add=lambda obj: self._requeue_namespace(obj["metadata"]["namespace"]),
            on_update=lambda old, new: self._requeue_namespace(new["metadata"]["namespace"]),
            on_delete=lambda obj: self._requeue_namespace(obj["metadata"]["namespace"]),
        )
        self.runtime_classes.add_handler(
            on_add=lambda obj: self._runtime_classes_changed(),
            on_update=lambda old, new: self._runtime_classes_changed(),
            on_delete=lambda obj: self._runtime_classes_changed(),
        )

    def _structural_with_all(self) -> None:
        self.structure_dirty = True
        self.request_flush(self.cluster_queues.store.keys())
        for name in self.cluster_queues.store.keys():
            self._notify_cq(name)
        self.wake.set()

    def _on_local_queue(self, obj: Obj) -> None:
        key = object_key(obj)
        self._afs_local_queue(obj)
        for wl in self.workloads.by_index(INDEX_QUEUE, key):
            self._route_workload(None, wl)
            self._notify_wl(object_key(wl))
        cq = (obj.get("spec") or {}).get("clusterQueue")
        if cq:
            self._notify_cq(cq)
        self._notify_lq(key)

    def _on_local_queue_deleted(self, obj: Obj) -> None:
        key = object_key(obj)
        self._afs_local_queue(obj, deleted=True)
        for wl in self.workloads.by_index(INDEX_QUEUE, key):
            if not holds_quota(wl):
                self.queues.delete(object_key(wl))
            self._notify_wl(object_key(wl))
        cq = (obj.get("spec") or {}).get("clusterQueue")
        if cq:
            self._notify_cq(cq)
        self._notify_lq(key)

    def _on_namespace(self, obj: Obj, old: Obj | None = None) -> None:
        name = obj["metadata"]["name"]
        labels = dict((obj.get("metadata") or {}).get("labels") or {})
        previous = self.namespace_labels.get(name)
        self.namespace_labels[name] = labels
        if previous != labels:
            self.request_flush(self.cluster_queues.store.keys())

    def _requeue_namespace(self, namespace: str) -> None:
        self._requests_generation += 1
        for wl in self.workloads.by_index(INDEX_NAMESPACE, namespace):
            self._route_workload(None, wl)

    def _runtime_classes_changed(self) -> None:
        self._overheads = None
        self._requests_generation += 1
        self._requeue_all_pending()

    def _requeue_all_pending(self) -> None:
        for wl in self.workloads.list():
            if not holds_quota(wl):
                self._route_workload(None, wl)

    def _on_workload(self, old: Obj | None, new: Obj) -> None:
        self._route_workload(old, new)
        self._afs_workload(old, new)
        self._admitted_elsewhere(old, new)
        key = object_key(new)
        self._notify_wl(key)
        for obj in (old, new):
            if obj is None:
                continue
            cq = self.cluster_queue_for(obj)
            if cq:
                self._notify_cq(cq)
            queue = (obj.get("spec") or {}).get("queueName")
            if queue:
                self._notify_lq(f"{obj['metadata']['namespace']}/{queue}")

    def _on_workload_deleted(self, obj: Obj) -> None:
        key = object_key(obj)
        self._requests_memo.pop(obj["metadata"].get("uid", ""), None)
        info = self.snapshot.remove_workload(key)
        self.assumed.discard(key)
        self._admitting.discard(key)
        if key in self.not_ready:
            self.not_ready.discard(key)
            self.wake.set()
        self.queues.delete(key)
        self.scheduler.observe_removed(key)
        self._forget_pending_write(key)
        self._applied.pop(key, None)
        self._own_admissions.discard(key)
        self._afs_workload_gone(obj)
        cq = info.cluster_queue if info is not None else self.cluster_queue_for(obj)
        if cq:
            self.request_flush([cq])
            self._notify_cq(cq)
        queue = (obj.get("spec") or {}).get("queueName")
        if queue:
            self._notify_lq(f"{obj['metadata']['namespace']}/{queue}")

    def note_own_admission(self, key: str) -> None:
        self._own_admissions.add(key)

    def drop_own_admission(self, key: str) -> None:
        self._own_admissions.discard(key)

    def _admitted_elsewhere(self, old: Obj | None, new: Obj) -> None:
        """A Workload holding quota became Admitted in a write that is not ours: the MultiKueue
        manager sets its check Ready and Admitted in one write (upstream's manager cluster takes
        a second one, from its workload controller). The Admitted Event and metrics are this
        cluster's, as if the workload controller had written it."""
        if old is None or not wlstatus.is_admitted(new) or wlstatus.is_admitted(old):
            return
        key = object_key(new)
        if key in self._own_admissions:
            self._own_admissions.discard(key)
            return
        if not wlstatus.has_quota_reservation(old):
            return  # the scheduler's own admission (no checks): announced where it was written
        self._spawn(self.announce_admitted(new, self.cluster_queue_for(new) or "", self.clock.now()))

    async def announce_admitted(self, wl: Obj, cq: str, now: dt.datetime) -> None:
        """The admitted metrics and the Admitted Event of a Workload that holds quota and whose
        checks became Ready (the scheduler announces its own admissions)."""
        if self.metrics is not None:
            self.metrics.admitted(cq, wlstatus.seconds_since(wl["metadata"].get("creationTimestamp"), now))
            self.count_admitted_in_cohorts(wl, cq)
        if self.recorder is not None:
            reserved = wlstatus.condition(wl, api.WORKLOAD_QUOTA_RESERVED) or {}
            wait = wlstatus.seconds_since(reserved.get("lastTransitionTime"), now)
            note = api.admitted_event_message(cq, wait)
            await self.recorder.event(wl, api.EVENT_NORMAL, api.EVENT_ADMITTED, "Reconcile", note)

    def _route_workload(self, old: Obj | None, new: Obj) -> None:
        """Event routing: into the cache, into the queues, or out of both."""
        key = object_key(new)
        now = self.clock.now().timestamp()
        if (
            holds_quota(new)
            and wlstatus.is_admitted(new)
            and not wlstatus.is_true(new, api.WORKLOAD_PODS_READY)
        ):
            self.not_ready.add(key)
        elif key in self.not_ready:
            self.not_ready.discard(key)
            self.wake.set()
        if key in self._admitting and (holds_quota(new) or not wlstatus.is_admissible(new)):
            self._admitting.discard(key)
            self.wake.set()
        if holds_quota(new):
            self.assumed.discard(key)
            cq = self.cluster_queue_for(new) or ""
            info = self.workload_info(new, cq)
            previous = self.snapshot.workloads.get(key)
            self.snapshot.add_workload(info)
            self.queues.delete(key)
            self._forget_pending_write(key)
            self._applied.pop(key, None)
            if previous is not None and (previous.usage != info.usage or previous.priority != info.priority):
                # Reclaimable pods released quota, or a lower priority made it preemptible: the
                # parked workloads try again (Kueue's workload controller on PriorityChanged).
                self.request_flush([cq])
            return
        if key in self.snapshot.workloads:
            gone = not wlstatus.is_active(new) or wlstatus.is_finished(new)
            old_reserved = old is not None and holds_quota(old)
            if key not in self.assumed or gone or old_reserved:
                info = self.snapshot.remove_workload(key)
                self.assumed.discard(key)
                self.scheduler.observe_removed(key)
                if info is not None:
                    self.request_flush([info.cluster_queue])
                    self.wake.set()
            else:
                return  # a stale pending event for a workload the scheduler just assumed
        if not wlstatus.is_admissible(new):
            self.queues.delete(key)
            if not wlstatus.is_active(new) or wlstatus.is_finished(new):
                self.scheduler.observe_removed(key)
            return
        cq = self.cluster_queue_for(new)
        if cq is None:
            self.queues.delete(key)
            return
        strategy = self._strategy(cq)
        self.queues.ensure(cq, strategy)
        info = self.workload_info(new, cq)
        unchanged = old is not None and not wlstatus.may_become_admissible(old, new)
        if unchanged and self.queues.update_parked(info):
            return  # e.g. our own pending-condition write: it stays parked until a flush, as in Kueue
        self.queues.push(info, now)
        self.wake.set()

    def _strategy(self, cq_name: str) -> str:
        cq = self.cluster_queues.get(cq_name)
        spec = (cq or {}).get("spec") or {}
        return spec.get("queueingStrategy") or api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO
