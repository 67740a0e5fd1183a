"""The admission state of one cluster and the scheduling loop.

`AdmissionState` keeps Kueue's two in-memory structures up to date from informer events: the
cache (a `Snapshot` of quota and of every workload holding quota) and the queue manager (pending
workloads per ClusterQueue). The scheduling loop runs engine cycles over them and writes each
decision back with one status apply; the engine itself never does I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import orjson
import structlog

from kube_runtime import api, features
from kube_runtime.client import KubeClient, KubeClientError, NotFound
from kube_runtime.clock import Clock
from kube_runtime.events import EventRecorder
from kube_runtime.informer import Informer, object_key
from kube_runtime.labels import selector_matches
from kube_runtime.ratelimit import HIGH, LOW
from kueue_domain import workload as wlstatus
from kueue_domain.config import Configuration
from kueue_domain.resources import resource_list_to_api
from worker_agent.engine import (
    REQUEUE_BATCH_SECONDS,
    REQUEUE_LONG_BATCH_SECONDS,
    LimitRangeDefaults,
    QueueManager,
    RequeueBatcher,
    Scheduler,
    SchedulerConfig,
    Snapshot,
    WorkloadInfo,
    requeue_scope,
)
from worker_agent.engine.scheduler import Admit, CycleResult, Preempt, Requeue
from worker_agent.engine.snapshot import holds_quota

log = structlog.get_logger("worker_agent.admission")

Obj = dict[str, Any]

PENDING_WRITE_ATTEMPTS = 5
PENDING_WRITE_RETRY_SECONDS = 0.2  # inadmissible requeues are batched
MAX_PARALLEL_PREEMPTIONS = 8
# Admission and eviction writes in flight at most; the rest wait their turn in decision order.
DECISION_WRITE_SLOTS = 32
MAX_PARALLEL_PENDING_WRITES = 16
# With a client budget above MESSAGE_INTERVAL_ABOVE_QPS, a pending Workload's message (its numbers
# move as quota moves) is rewritten at most this often while its reason stays the same; a new
# reason is written at once. At Kueue's own budgets (its default 20 QPS, the 50 QPS of its
# performance harness) every changed message is written in the cycle, as Kueue writes it: the
# budget bounds those writes, and the cycle's pace is that of its writes. Held back at 50 QPS,
# they let cycles run ahead and fill freed quota with small Workloads that the large ones,
# released by the next inadmissible retry, then preempted (full baseline: median 89 evictions over
# seventeen runs with the interval, 14 over five without; docs/benchmarks.md).
PENDING_MESSAGE_MIN_INTERVAL_SECONDS = 3.0
MESSAGE_INTERVAL_ABOVE_QPS = 50.0
CYCLE_BACKOFF_INITIAL = 0.001
CYCLE_BACKOFF_MAX = 0.010

INDEX_QUEUE = "queue"  # workloads by "<namespace>/<queueName>"
INDEX_NAMESPACE = "namespace"
INDEX_CLUSTER_QUEUE = "clusterQueue"  # local queues by spec.clusterQueue
INDEX_PRIORITY_CLASS = "priorityClass"  # workloads by WorkloadPriorityClass name


def _queue_index(obj: Obj) -> tuple[str, ...]:
    queue = (obj.get("spec") or {}).get("queueName")
    return (f"{obj['metadata'].get('namespace', '')}/{queue}",) if queue else ()


def _namespace_index(obj: Obj) -> tuple[str, ...]:
    return (obj["metadata"].get("namespace", ""),)


def _lq_cluster_queue_index(obj: Obj) -> tuple[str, ...]:
    cq = (obj.get("spec") or {}).get("clusterQueue")
    return (cq,) if cq else ()


def _priority_class_index(obj: Obj) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if spec.get("priorityClassSource") == api.PRIORITY_CLASS_SOURCE_WORKLOAD and spec.get(
        "priorityClassName"
    ):
        return (spec["priorityClassName"],)
    return ()


def cluster_queue_active_state(
    cq: Obj, flavors: Iterable[str], checks: dict[str, Obj]
) -> tuple[bool, str, str]:
    """(active, reason, message) of a ClusterQueue's Active condition."""
    if (cq.get("metadata") or {}).get("deletionTimestamp"):
        return False, api.CQ_REASON_TERMINATING, api.CQ_MSG_TERMINATING
    spec = cq.get("spec") or {}
    known_flavors = set(flavors)
    reasons: list[str] = []
    clauses: list[str] = []
    if (spec.get("stopPolicy") or api.STOP_POLICY_NONE) != api.STOP_POLICY_NONE:
        reasons.append(api.CQ_REASON_STOPPED)
        clauses.append(api.CQ_CLAUSE_STOPPED)
    missing_flavors: list[str] = []
    for rg in spec.get("resourceGroups") or ():
        for flavor in rg.get("flavors") or ():
            if flavor["name"] not in known_flavors and flavor["name"] not in missing_flavors:
                missing_flavors.append(flavor["name"])
    if missing_flavors:
        reasons.append(api.CQ_REASON_FLAVOR_NOT_FOUND)
        clauses.append(api.cq_clause_missing_flavors(missing_flavors))
    names = list(spec.get("admissionChecks") or ())
    for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ():
        if rule["name"] not in names:
            names.append(rule["name"])
    missing_checks = [n for n in names if n not in checks]
    if missing_checks:
        reasons.append(api.CQ_REASON_ADMISSION_CHECK_NOT_FOUND)
        clauses.append(api.cq_clause_missing_admission_checks(missing_checks))
    inactive = [
        n
        for n in names
        if n in checks and not wlstatus.is_status_condition_true_in(checks[n], api.CONDITION_ACTIVE)
    ]
    if inactive:
        reasons.append(api.CQ_REASON_ADMISSION_CHECK_INACTIVE)
        clauses.append(api.cq_clause_inactive_admission_checks(inactive))
    multikueue = [
        n
        for n in names
        if n in checks
        and (checks[n].get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME
    ]
    if len(multikueue) > 1:
        reasons.append(api.CQ_REASON_MULTIPLE_MULTIKUEUE_ADMISSION_CHECKS)
        clauses.append(api.cq_clause_multiple_multikueue_checks(multikueue))
    if not reasons:
        return True, api.CQ_REASON_READY, api.CQ_MSG_READY
    return False, reasons[0], api.cq_inactive_message(clauses)


def spec_changed(old: Obj, new: Obj) -> bool:
    """Whether an update touched what the engine reads of a queue or flavor object: its spec or
    its deletion. Status updates (mostly our own status writes) are ignored."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    return old.get("spec") != new.get("spec") or old_meta.get("deletionTimestamp") != new_meta.get(
        "deletionTimestamp"
    )


def on_spec_change(handler: Callable[[Obj], Any]) -> Callable[[Obj, Obj], None]:
    """An informer update handler that calls `handler(new)` only when `spec_changed`."""

    def on_update(old: Obj, new: Obj) -> None:
        if spec_changed(old, new):
            handler(new)

    return on_update


def resource_requests(info: WorkloadInfo) -> list[Obj]:
    """`status.resourceRequests` of a pending workload: each PodSet's computed requests (per pod x
    effective count, after LimitRange defaults, RuntimeClass overhead and transformations)."""
    return [{"name": ps.name, "resources": resource_list_to_api(ps.total)} for ps in info.podsets]


class AdmissionState:
    """Informers, the cache (snapshot) and the queue manager of one cluster."""

    def __init__(
        self,
        kube: KubeClient,
        config: Configuration,
        clock: Clock | None = None,
        metrics: Any = None,
        recorder: EventRecorder | None = None,
        decision_log: TextIO | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        # `--decision-log`: one JSON line per scheduling cycle and per inadmissible flush.
        self.decision_log = decision_log
        self.clock = clock or Clock()
        self.metrics = metrics
        self.recorder = recorder
        self.requeuing_timestamp = (
            config.wait_for_pods_ready.requeuing.timestamp
            if config.wait_for_pods_ready
            else api.REQUEUING_TIMESTAMP_EVICTION
        )
        self.flavors = Informer(kube, api.RESOURCE_FLAVOR)
        self.cluster_queues = Informer(kube, api.CLUSTER_QUEUE)
        self.local_queues = Informer(kube, api.LOCAL_QUEUE)
        self.cohorts = Informer(kube, api.COHORT)
        self.workloads = Informer(kube, api.WORKLOAD)
        self.admission_checks = Informer(kube, api.ADMISSION_CHECK)
        self.namespaces = Informer(kube, api.NAMESPACE)
        self.limit_ranges = Informer(kube, api.LIMIT_RANGE)
        self.runtime_classes = Informer(kube, api.RUNTIME_CLASS)
        self.priority_classes = Informer(kube, api.WORKLOAD_PRIORITY_CLASS)
        self.workloads.add_index(INDEX_QUEUE, _queue_index)
        self.workloads.add_index(INDEX_NAMESPACE, _namespace_index)
        self.workloads.add_index(INDEX_PRIORITY_CLASS, _priority_class_index)
        self.local_queues.add_index(INDEX_CLUSTER_QUEUE, _lq_cluster_queue_index)
        self.limit_ranges.add_index(INDEX_NAMESPACE, _namespace_index)

        self.snapshot = Snapshot()
        self.queues = QueueManager()
        self.scheduler_config = SchedulerConfig(
            fair_sharing=config.fair_sharing is not None,
            fair_sharing_strategies=(
                config.fair_sharing.preemption_strategies
                if config.fair_sharing
                else SchedulerConfig().fair_sharing_strategies
            ),
            block_admission=bool(config.wait_for_pods_ready and config.wait_for_pods_ready.block_admission),
            partial_admission=config.features.enabled(features.PARTIAL_ADMISSION),
        )
        self.scheduler = Scheduler(self.snapshot, self.queues, self.scheduler_config)
        self.structure_dirty = True
        self.cq_states: dict[str, tuple[bool, str, str]] = {}
        # Workloads the scheduler assumed whose admission write is not yet observed.
        self.assumed: set[str] = set()
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self._overheads: dict[str, Obj] | None = None
        self.wake = asyncio.Event()
        # Inadmissible flushes, batched per cohort tree as upstream's requeuer does (engine/ordering.py).
        long_interval = config.features.enabled(features.SCHEDULER_LONG_REQUEUE_INTERVAL)
        self.requeuer = RequeueBatcher(REQUEUE_LONG_BATCH_SECONDS if long_interval else REQUEUE_BATCH_SECONDS)
        # Listeners told which CQ / LQ keys changed (status controllers).
        self.on_cluster_queue_changed: list[Callable[[str], None]] = []
        self.on_local_queue_changed: list[Callable[[str], None]] = []
        self.on_workload_changed: list[Callable[[str], None]] = []
        # Last pending reason written per workload, to skip repeated identical writes.
        self._pending_written: dict[str, tuple[str, str]] = {}
        # When (monotonic) each workload's pending condition was last written by us.
        self._pending_written_at: dict[str, float] = {}
        self.pending_message_interval = (
            PENDING_MESSAGE_MIN_INTERVAL_SECONDS if config.qps > MESSAGE_INTERVAL_ABOVE_QPS else 0.0
        )
        # Pending-condition writes are serialized per workload; the newest decision wins, and the
        # base object is our own last write when the cache has not caught up with it yet.
        self._pending_latest: dict[str, Requeue] = {}
        self._pending_writers: set[str] = set()
        self._applied: dict[str, Obj] = {}
        # Pending workloads' computed requests by UID (see workload_info), and a counter bumped
        # when a LimitRange or RuntimeClass changes.
        self._requests_memo: dict[str, tuple[tuple, list[Any]]] = {}
        self._requests_generation = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        # Admissions and evictions share these slots (asyncio's Semaphore serves waiters in order),
        # so their writes reach the client limiter in the order the scheduler decided them, as
        # Kueue's do. An eviction that jumped the admissions queued before it would land while
        # short victims are still finishing, and evict work that was about to complete.
        self._write_limit = asyncio.Semaphore(DECISION_WRITE_SLOTS)
        self._preempt_limit = asyncio.Semaphore(MAX_PARALLEL_PREEMPTIONS)
        # Pending-condition writes have their own slots: they wait in the LOW lane and must not
        # hold the slots admissions need.
        self._pending_limit = asyncio.Semaphore(MAX_PARALLEL_PENDING_WRITES)
        # Admitted workloads whose PodsReady is not True (waitForPodsReady.blockAdmission).
        self.not_ready: set[str] = set()
        # With blockAdmission: workloads admitted by the scheduler whose admission is not yet seen
        # in the cache; they block the next cycle as not-ready workloads do.
        self._admitting: set[str] = set()
        self._blocked_written: set[str] = set()
        # Workloads whose Admitted=True the workload controller is writing (noted before the
        # write): that write's watch event is not an admission by another writer.
        self._own_admissions: set[str] = set()
        self.decisions_total = 0
        self.cycles_total = 0
        self.engine_cpu_seconds = 0.0
        self._wire_handlers()

    # ---------------------------------------------------------------------------------------------
    # Informers

    @property
    def informers(self) -> list[Informer]:
        return [
            self.flavors,
            self.cluster_queues,
            self.local_queues,
            self.cohorts,
            self.admission_checks,
            self.namespaces,
            self.limit_ranges,
            self.runtime_classes,
            self.priority_classes,
            self.workloads,
        ]

    def start_informers(self) -> None:
        for informer in self.informers:
            informer.start()

    async def wait_synced(self) -> None:
        for informer in self.informers:
            await informer.wait_synced()

    async def stop(self) -> None:
        for informer in self.informers:
            await informer.stop()
        for task in list(self._tasks):
            task.cancel()

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

    def _notify_cq(self, name: str) -> None:
        for fn in self.on_cluster_queue_changed:
            fn(name)

    def _notify_lq(self, key: str) -> None:
        for fn in self.on_local_queue_changed:
            fn(key)

    def _notify_wl(self, key: str) -> None:
        for fn in self.on_workload_changed:
            fn(key)

    # -- local queues and namespaces -------------------------------------------------------------

    def _on_local_queue(self, obj: Obj) -> None:
        key = object_key(obj)
        for wl in self.workloads.by_index(INDEX_QUEUE, key):
            self._route_workload(None, wl)
            self._notify_wl(object_key(wl))
        cq = (obj.get("spec") or {}).get("clusterQueue")
        if cq:
            self._notify_cq(cq)
        self._notify_lq(key)

    def _on_local_queue_deleted(self, obj: Obj) -> None:
        key = object_key(obj)
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

    # -- workloads -------------------------------------------------------------------------------

    def cluster_queue_for(self, wl: Obj) -> str | None:
        """The ClusterQueue of a workload: from its admission, else through its LocalQueue."""
        admission = (wl.get("status") or {}).get("admission")
        if admission and admission.get("clusterQueue"):
            return admission["clusterQueue"]
        lq = self.local_queue_for(wl)
        if lq is None:
            return None
        return (lq.get("spec") or {}).get("clusterQueue")

    def local_queue_for(self, wl: Obj) -> Obj | None:
        queue = (wl.get("spec") or {}).get("queueName")
        if not queue:
            return None
        return self.local_queues.get_object(queue, wl["metadata"].get("namespace"))

    def limit_range_defaults(self, namespace: str) -> LimitRangeDefaults | None:
        ranges = self.limit_ranges.by_index(INDEX_NAMESPACE, namespace)
        return LimitRangeDefaults.summarize(ranges) if ranges else None

    def runtime_class_overheads(self) -> dict[str, Obj]:
        """RuntimeClass name -> pod overhead, rebuilt only when a RuntimeClass changes."""
        if self._overheads is None:
            self._overheads = {
                rc["metadata"]["name"]: (rc.get("overhead") or {}).get("podFixed") or {}
                for rc in self.runtime_classes.list()
            }
        return self._overheads

    def workload_info(self, wl: Obj, cluster_queue: str) -> WorkloadInfo:
        meta = wl["metadata"]
        status = wl.get("status") or {}
        memo_key = None
        podsets = None
        namespace = meta.get("namespace", "")
        if status.get("admission"):
            self._requests_memo.pop(meta.get("uid", ""), None)  # admitted: usage from the admission
        else:
            # A pending workload's requests depend on its spec (generation), reclaimable pods, the
            # namespace's LimitRanges and the RuntimeClasses: reuse them while none of these changed.
            reclaimable = tuple((r.get("name"), r.get("count")) for r in status.get("reclaimablePods") or ())
            memo_key = (meta.get("generation"), reclaimable, self._requests_generation)
            memo = self._requests_memo.get(meta.get("uid", ""))
            if memo is not None and memo[0] == memo_key:
                podsets = memo[1]
        info = WorkloadInfo.from_dict(
            wl,
            cluster_queue=cluster_queue,
            config=self.config.requests,
            limit_ranges=None if podsets is not None else self.limit_range_defaults(namespace),
            runtime_class_overheads=self.runtime_class_overheads() or None,
            requeuing_timestamp=self.requeuing_timestamp,
            pending_podsets=podsets,
        )
        if memo_key is not None and podsets is None:
            self._requests_memo[meta.get("uid", "")] = (memo_key, info.podsets)
        return info

    def _on_workload(self, old: Obj | None, new: Obj) -> None:
        self._route_workload(old, new)
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

    # -- inadmissible flush (batched) --------------------------------------------------------------

    def request_flush(self, cq_names: Iterable[str]) -> None:
        """Retry the parked workloads of these ClusterQueues' cohort trees, once per batch window:
        `REQUEUE_BATCH_SECONDS` after the window's first request, as upstream does."""
        now = self.clock.monotonic()
        for name in cq_names:
            if not name:
                continue
            scope = requeue_scope(self.snapshot, name)
            if self.requeuer.request(scope, name, now) is None:
                continue  # joins the scope's open window
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # not running (tests building state): flush at once
                self.flush_now(self.requeuer.take(scope))
                continue
            self._spawn(self._flush_later(scope))

    async def _flush_later(self, scope: str) -> None:
        try:
            await self.clock.sleep(self.requeuer.period)
        finally:
            names = self.requeuer.take(scope)
        self.flush_now(names)

    def flush_now(self, names: Iterable[str]) -> int:
        scope: set[str] = set()
        for name in names:
            scope |= self.cohort_tree_members(name)
        now = self.clock.now().timestamp()
        if self.decision_log is not None:
            self._write_decision_log({"flush": sorted(scope)}, now)

        def namespace_matches(info: WorkloadInfo) -> bool:
            cq = self.snapshot.cluster_queues.get(info.cluster_queue)
            if cq is None:
                return True
            return selector_matches(cq.namespace_selector, self.namespace_labels.get(info.namespace, {}))

        moved = self.queues.flush(scope, now, namespace_matches)
        if moved:
            self.wake.set()
        return moved

    def cohort_tree_members(self, cq_name: str) -> set[str]:
        """The CQ itself, or every CQ under the root of its cohort tree."""
        cq = self.snapshot.cluster_queues.get(cq_name)
        if cq is None or cq.parent is None:
            return {cq_name}
        root = cq.parent
        while root.parent is not None:
            root = root.parent
        return {c.name for c in root.cluster_queues()}

    # ---------------------------------------------------------------------------------------------
    # Snapshot structure

    def rebuild(self) -> None:
        """Rebuild quota trees after a ClusterQueue, Cohort, ResourceFlavor or AdmissionCheck change."""
        self.structure_dirty = False
        checks = {ac["metadata"]["name"]: ac for ac in self.admission_checks.list()}
        flavor_names = self.flavors.store.keys()
        cq_objs = self.cluster_queues.list()
        snapshot = Snapshot.from_objects(
            cluster_queues=cq_objs,
            resource_flavors=self.flavors.list(),
            cohorts=self.cohorts.list(),
            workloads=list(self.snapshot.workloads.values()),
            requeuing_timestamp=self.requeuing_timestamp,
        )
        states = {}
        for obj in cq_objs:
            name = obj["metadata"]["name"]
            state = cluster_queue_active_state(obj, flavor_names, checks)
            states[name] = state
            if name in snapshot.cluster_queues:
                snapshot.cluster_queues[name].active = state[0]
            self.queues.ensure(
                name,
                (obj.get("spec") or {}).get("queueingStrategy") or api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO,
            )
        changed = {n for n in set(states) | set(self.cq_states) if states.get(n) != self.cq_states.get(n)}
        self.cq_states = states
        in_flight = self.scheduler.preemptions_in_flight
        cycle = self.scheduler.cycle
        self.snapshot = snapshot
        self.scheduler = Scheduler(snapshot, self.queues, self.scheduler_config)
        self.scheduler.preemptions_in_flight = in_flight
        self.scheduler.cycle = cycle
        for name in changed:
            self._notify_cq(name)
            for lq in self.local_queues.by_index(INDEX_CLUSTER_QUEUE, name):
                self._notify_lq(object_key(lq))
                for wl in self.workloads.by_index(INDEX_QUEUE, object_key(lq)):
                    self._notify_wl(object_key(wl))

    def cluster_queue_active(self, name: str) -> bool:
        if self.structure_dirty:
            self.rebuild()
        state = self.cq_states.get(name)
        return bool(state and state[0])

    # ---------------------------------------------------------------------------------------------
    # The scheduling loop

    async def run_scheduler(self) -> None:
        """Cycle until cancelled (leader only): immediately after progress, else backing off to 10 ms."""
        backoff = CYCLE_BACKOFF_INITIAL
        while True:
            if self.structure_dirty:
                self.rebuild()
            self.wake.clear()
            if self.admission_blocked():
                self._report_blocked()
                await self.wake.wait()
                continue
            self._blocked_written.clear()
            result = self.schedule_once()
            if result.heads == 0:
                await self.wake.wait()
                backoff = CYCLE_BACKOFF_INITIAL
                continue
            if self.decision_log is not None:
                self._log_cycle(result)
            evictions = self.apply_decisions(result)
            # As Kueue's scheduler issues its preemptions inside the cycle and waits for them,
            # the next cycle starts only when this one's evictions are written.
            if evictions:
                await asyncio.wait(evictions)
            await self.write_pending_conditions(result)
            if result.progressed():
                backoff = CYCLE_BACKOFF_INITIAL
                await asyncio.sleep(0)
                continue
            # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that arrives
            # as the wait ends, and the loop then never stops (the agent's shutdown hung on it).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self.wake.wait()
            backoff = min(backoff * 2, CYCLE_BACKOFF_MAX)

    def _log_cycle(self, result: CycleResult) -> None:
        """The cycle's decisions as one JSON line (`--decision-log`), for a look at why it did what it did."""
        record = {
            "heads": result.heads,
            "admit": [d.workload_key for d in result.admitted],
            "preempt": [[d.victim_key, d.preemptor_key, d.reason] for d in result.preempted],
            "pending": [[d.workload_key, d.reason, d.message] for d in result.requeued],
        }
        self._write_decision_log(record, self.clock.now().timestamp())

    def _write_decision_log(self, record: dict[str, Any], now: float) -> None:
        """One line: `t` (wall clock, ms precision) first, then `record`."""
        assert self.decision_log is not None
        try:
            self.decision_log.write(orjson.dumps({"t": round(now, 3), **record}).decode() + "\n")
        except (OSError, ValueError) as exc:  # a full disk or a closed file: stop tracing, keep scheduling
            log.warning("decision log write failed; tracing stops", error=str(exc))
            self.decision_log = None

    def admission_blocked(self) -> bool:
        """waitForPodsReady.blockAdmission: no new admission until every admitted workload is ready."""
        wfpr = self.config.wait_for_pods_ready
        return bool(wfpr and wfpr.block_admission and (self.not_ready or self._admitting))

    def _report_blocked(self) -> None:
        """Each ClusterQueue head shows why it waits: QuotaReserved=False/WaitingForPodsReady."""
        for queue in self.queues.queues.values():
            head = queue.peek()
            if head is None or head.key in self._blocked_written:
                continue
            self._blocked_written.add(head.key)
            self._queue_pending_write(
                Requeue(head.key, api.REASON_WAITING_FOR_PODS_READY, api.MSG_WAITING_FOR_PODS_READY)
            )
        if len(self._blocked_written) > 10_000:
            self._blocked_written.clear()

    def schedule_once(self) -> CycleResult:
        started = time.process_time()
        result = self.scheduler.schedule(self.clock.now().timestamp(), self.namespace_labels)
        cpu = time.process_time() - started
        self.cycles_total += 1
        self.decisions_total += result.heads
        self.engine_cpu_seconds += cpu
        if self.metrics is not None:
            self.metrics.scheduling_cycle(result.heads, cpu)
        return result

    def apply_decisions(self, result: CycleResult) -> list[asyncio.Task[None]]:
        """Start the cycle's admission and eviction writes; return the eviction writes' tasks.

        Admissions are written in the background, as Kueue's are (its admission routine). Kueue's
        cycle waits for its evictions (IssuePreemptions) and then for its pending conditions; the
        caller does both before it starts the next cycle."""
        evictions: list[asyncio.Task[None]] = []
        for decision in result.decisions:
            if isinstance(decision, Admit):
                self.assumed.add(decision.workload_key)
                if self.scheduler_config.block_admission:
                    self._admitting.add(decision.workload_key)
                self._spawn(self._write_admission(decision))
            elif isinstance(decision, Preempt):
                evictions.append(self._spawn(self._write_preemption(decision)))
            # Requeue decisions: written by write_pending_conditions, before the next cycle.
        return evictions

    async def write_pending_conditions(self, result: CycleResult) -> None:
        """The cycle's pending conditions, written before the next cycle starts, one after the other,
        in the Workload writes' FIFO lane: Kueue's scheduler writes them inside its cycle
        (requeueAndUpdate), so its pace follows what the apiserver takes. A scheduler that cycles
        without waiting fills every free slot with the small Workloads that come first while the
        apiserver is still busy, and the larger ones that come next preempt them (measured in
        docs/benchmarks.md, "Earlier (2026-11-25, night)" and "Latest"). Only changed conditions
        are written; with a budget above 50 QPS a new message under the reason written last waits
        for the message interval in the background, coalesced, as does the retry of a failed
        write."""
        for decision in result.decisions:
            if not isinstance(decision, Requeue):
                continue
            decision = self._legacy_reason(decision)
            key = decision.workload_key
            if self._already_written(decision):
                continue
            if key in self._pending_writers or self._pending_message_wait(decision) > 0:
                self._defer_pending_write(decision)
            elif not await self._write_pending(decision, HIGH):
                self._queue_pending_write(decision)  # checked again: a deferred write may have landed

    def _legacy_reason(self, decision: Requeue) -> Requeue:
        legacy = wlstatus.unadmitted_reason(self.config.features, decision.reason, api.REASON_PENDING)
        return decision if legacy == decision.reason else dataclasses.replace(decision, reason=legacy)

    def _already_written(self, decision: Requeue) -> bool:
        """The Workload shows this condition already: a queued newer copy of it is dropped."""
        if self._pending_written.get(decision.workload_key) != (decision.reason, decision.message):
            return False
        self._pending_latest.pop(decision.workload_key, None)
        return True

    def _queue_pending_write(self, decision: Requeue) -> None:
        decision = self._legacy_reason(decision)
        if not self._already_written(decision):
            self._defer_pending_write(decision)

    def _defer_pending_write(self, decision: Requeue) -> None:
        """Hand a decision (reason already mapped, not yet written) to the background writer."""
        key = decision.workload_key
        self._pending_latest[key] = decision
        if key not in self._pending_writers:
            self._pending_writers.add(key)
            self._spawn(self._pending_writer(key))

    def _forget_pending_write(self, key: str) -> None:
        self._pending_written.pop(key, None)
        self._pending_written_at.pop(key, None)

    def _pending_message_wait(self, decision: Requeue) -> float:
        """Seconds to hold a pending write back: only a new message under the reason last written
        waits, until PENDING_MESSAGE_MIN_INTERVAL_SECONDS after that write."""
        key = decision.workload_key
        written = self._pending_written.get(key)
        written_at = self._pending_written_at.get(key)
        if written is None or written_at is None or written[0] != decision.reason:
            return 0.0
        return written_at + self.pending_message_interval - self.clock.monotonic()

    async def _pending_writer(self, key: str) -> None:
        failures = 0
        try:
            while key in self._pending_latest:
                decision = self._pending_latest.pop(key)
                hold = self._pending_message_wait(decision)
                if hold > 0:
                    # Coalesce: whatever decision is newest when the interval ends is written.
                    self._pending_latest.setdefault(key, decision)
                    await self.clock.sleep(hold)
                    continue
                if await self._write_pending(decision) or failures >= PENDING_WRITE_ATTEMPTS:
                    failures = 0
                    continue
                # A parked workload is not evaluated again until a flush: retry the write itself
                # (typically a conflict with a write our cache has not seen yet).
                failures += 1
                self._pending_latest.setdefault(key, decision)
                await self.clock.sleep(PENDING_WRITE_RETRY_SECONDS * failures)
        finally:
            self._pending_writers.discard(key)

    def _newest(self, key: str) -> Obj | None:
        """The cached Workload, or our own last write of it when that is newer."""
        cached = self.workloads.get(key)
        applied = self._applied.get(key)
        if cached is None or applied is None:
            return cached
        try:
            newer = int(applied["metadata"]["resourceVersion"]) > int(cached["metadata"]["resourceVersion"])
        except (KeyError, ValueError):
            return cached
        return applied if newer else cached

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _write_admission(self, decision: Admit) -> None:
        key = decision.workload_key
        started = time.monotonic()
        cached = self.workloads.get(key)
        ok = gone = False
        if cached is not None:
            now = self.clock.now()
            wl = wlstatus.status_working_copy(cached)
            cq_obj = self.cluster_queues.get(decision.admission.get("clusterQueue", ""))
            if cq_obj is not None:
                required = wlstatus.required_admission_checks(cq_obj["spec"], decision.admission)
                wlstatus.sync_admission_checks(wl, required, now)
            wlstatus.set_quota_reservation(wl, decision.admission, now)
            try:
                async with self._write_limit:
                    await wlstatus.apply_admission_status(self.kube, wl)
                ok = True
            except NotFound:
                gone = True  # deleted meanwhile: its delete event is on the way, do not retry it
            except KubeClientError as exc:  # an error Status, or the apiserver unreachable
                log.info("admission write failed; requeueing", workload=key, error=str(exc))
        elapsed = time.monotonic() - started
        if not ok or not wlstatus.all_checks_ready(wl):
            # Not admitted (the write failed, or it waits for admission checks): no longer blocking.
            if key in self._admitting:
                self._admitting.discard(key)
                self.wake.set()
        if not ok:
            self.assumed.discard(key)
            info = self.snapshot.remove_workload(key)
            if self.metrics is not None:
                self.metrics.admission_attempt("inadmissible", elapsed)
            current = self.workloads.get(key)
            if not gone and info is not None and current is not None and wlstatus.is_admissible(current):
                self.queues.requeue(info, api.REQUEUE_FAILED_AFTER_NOMINATION, self.clock.now().timestamp())
                self.wake.set()
            return
        self._forget_pending_write(key)
        cq = decision.admission.get("clusterQueue", "")
        created = (cached.get("metadata") or {}).get("creationTimestamp")
        wait = wlstatus.seconds_since(created, self.clock.now())
        if self.metrics is not None:
            self.metrics.admission_attempt("success", elapsed)
            self.metrics.quota_reserved(cq, wait)
        if self.recorder is not None:
            await self.recorder.normal(
                cached, api.EVENT_QUOTA_RESERVED, "Admission", api.quota_reserved_event_message(cq, wait)
            )
            if wlstatus.all_checks_ready(wl):
                if self.metrics is not None:
                    self.metrics.admitted(cq, wait)
                await self.recorder.normal(
                    cached, api.EVENT_ADMITTED, "Admission", api.admitted_event_message(cq, 0)
                )

    async def _write_preemption(self, decision: Preempt) -> None:
        key = decision.victim_key
        namespace = key.partition("/")[0]
        try:
            # The victim is read again after the wait for a rate-limit token: short workloads often
            # finish while the eviction waits, and a write for them would only come back 409.
            async with self._write_limit, self._preempt_limit, self.kube.turn(api.WORKLOAD, namespace, HIGH):
                cached = self.workloads.get(key)
                if cached is None or not holds_quota(cached):
                    self.scheduler.observe_removed(key)
                    return
                now = self.clock.now()
                wl = wlstatus.status_working_copy(cached)
                wlstatus.set_evicted(wl, api.REASON_PREEMPTED, decision.message, now)
                wlstatus.set_preempted(wl, decision.reason, decision.message, now)
                # Strict: a victim that finished meanwhile (our cache lags) must not be marked evicted.
                await wlstatus.apply_admission_status(self.kube, wl, strict=True)
        except KubeClientError as exc:  # an error Status, or the apiserver unreachable
            log.info("preemption write failed; will retry", workload=key, error=str(exc))
            self.scheduler.observe_removed(key)
            return
        victim_cq = self.cluster_queue_for(cached) or ""
        if self.metrics is not None:
            preemptor = self.workloads.get(decision.preemptor_key)
            self.metrics.preempted(self.cluster_queue_for(preemptor) if preemptor else "", decision.reason)
            self.metrics.evicted(victim_cq, api.REASON_PREEMPTED, "")
        if self.recorder is not None:
            await self.recorder.normal(cached, api.EVENT_PREEMPTED, "Preemption", decision.message)
            await self.recorder.normal(
                cached, api.evicted_due_to_event(api.REASON_PREEMPTED), "Eviction", decision.message
            )
            preemptor = self.workloads.get(decision.preemptor_key)
            if preemptor is not None:
                await self.recorder.normal(
                    preemptor,
                    api.EVENT_PREEMPTED_WORKLOAD,
                    "Preemption",
                    f"Preempted workload {key}",
                )

    async def _write_pending(self, decision: Requeue, lane: int = LOW) -> bool:
        """False when the write failed and may be retried.

        The cycle's own writes take the FIFO lane with admissions and evictions. The deferred ones
        (a coalesced message, a retry) are superseded by newer ones, so they wait in the rate
        limiter's LOW lane: with a saturated Workload budget, the writes that move work go first.
        The write is decided after that wait, from the freshest cache, and skipped if meanwhile the
        workload got a reservation or a newer decision."""
        key = decision.workload_key
        namespace = key.partition("/")[0]
        # The deferred writes' slots: the cycle's own writes must not wait behind them (a LOW
        # request holds its slot until there is spare budget, up to LOW_MAX_WAIT).
        slots = self._pending_limit if lane == LOW else contextlib.nullcontext()
        async with slots, self.kube.turn(api.WORKLOAD, namespace, lane):
            if self._pending_latest.get(key) not in (None, decision):
                return True  # a newer decision is queued: write that one instead
            base = self._newest(key)
            if base is None or wlstatus.has_quota_reservation(base) or key in self.snapshot.workloads:
                return True
            wl = wlstatus.status_working_copy(base)
            changed = wlstatus.set_pending_condition(wl, decision.reason, decision.message, self.clock.now())
            queued = self.queues.get(key)
            if queued is not None:
                changed |= wlstatus.set_resource_requests(wl, resource_requests(queued))
            if not changed:
                self._pending_written[key] = (decision.reason, decision.message)
                return True
            try:
                applied = await wlstatus.apply_admission_status(self.kube, wl, strict=True)
            except NotFound:
                return True
            except KubeClientError as exc:  # an error Status, or the apiserver unreachable
                log.debug("pending condition write failed", workload=key, error=str(exc))
                return False
        self._pending_written[key] = (decision.reason, decision.message)
        self._pending_written_at[key] = self.clock.monotonic()
        self._applied[key] = applied
        if self.recorder is not None:
            await self.recorder.warning(base, decision.reason, "Admission", decision.message)
        return True
