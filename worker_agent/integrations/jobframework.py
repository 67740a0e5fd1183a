"""One reconciler for every job kind (upstream's pkg/controller/jobframework): a kind is a subclass of
`JobReconciler` that declares its resource, framework name and controller, and implements the
small per-kind hooks (`podsets`, `is_suspended`, `is_active`, `finished`, `pods_ready`,
`reclaimable_pods`, `run`, `stop`); everything else (owner lookups and indexes, the queue-name and
namespace rules, managedBy, the MultiKueue check, creating or adopting the Workload, the
equivalence check, finish, eviction, owner-gone and WorkloadPriorityClass) is here, once.

A managed object gets one Workload `<kind>-<name>-<hash5>`; it is started (`run`, with the
assigned flavors' node selectors and tolerations) when the Workload is Admitted, stopped (`stop`,
templates restored from the Workload) when it is evicted, and finishes the Workload when it ends.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from typing import Any

from kube_runtime import api
from kube_runtime.api import Resource
from kube_runtime.client import Conflict, NotFound
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kube_runtime.labels import selector_matches
from kube_runtime.ownwrites import CACHE_LAG_RECHECK_SECONDS, OwnWrites
from kueue_domain import naming
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework

Obj = dict[str, Any]
STOP_RECHECK_SECONDS = 2.0  # a stop waiting for the object's pods to go is looked at again after this
INDEX_NAMESPACE = "namespace"  # objects of the kind by namespace
INDEX_PRIORITY_CLASS = "workloadPriorityClass"  # objects of the kind by their WorkloadPriorityClass label
INDEX_JOB_UID_LABEL = "batchJobUIDLabel"  # Workloads by their kueue.x-k8s.io/job-uid label


# ------------------------------------------------------------------------------------------------
# Pure parts


def labels_of(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations_of(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def controlling_owner(resource: Resource, wl: Obj) -> Obj | None:
    """The Workload's controller owner reference when it is an object of `resource`."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or ():
        if (
            ref.get("controller")
            and ref.get("kind") == resource.kind
            and ref.get("apiVersion") == resource.api_version
        ):
            return ref
    return None


def controller_ref_of_kind(resource: Resource, obj: Obj) -> Obj | None:
    """The object's controller owner reference when it is of `resource`'s group and kind (any
    version): how a child (a JobSet's Jobs, a TrainJob's JobSet) finds its parent."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            group = (ref.get("apiVersion") or "").rpartition("/")[0]
            return ref if (group, ref.get("kind")) == (resource.group, resource.kind) else None
    return None


def owner_indexes(
    resource: Resource,
) -> tuple[Callable[[Obj], tuple[str, ...]], Callable[[Obj], tuple[str, ...]]]:
    """(Workloads by their controlling owner's UID, Workloads by its "<namespace>/<name>")."""

    def by_uid(wl: Obj) -> tuple[str, ...]:
        ref = controlling_owner(resource, wl)
        return (ref["uid"],) if ref and ref.get("uid") else ()

    def by_key(wl: Obj) -> tuple[str, ...]:
        ref = controlling_owner(resource, wl)
        return (f"{wl['metadata'].get('namespace', '')}/{ref['name']}",) if ref and ref.get("name") else ()

    return by_uid, by_key


def job_uid_label_index(wl: Obj) -> tuple[str, ...]:
    uid = labels_of(wl).get(api.LABEL_JOB_UID)
    return (uid,) if uid else ()


def namespace_index(obj: Obj) -> tuple[str, ...]:
    return (obj["metadata"].get("namespace", ""),)


def priority_class_index(obj: Obj) -> tuple[str, ...]:
    name = labels_of(obj).get(api.LABEL_PRIORITY_CLASS)
    return (name,) if name else ()


def max_execution_seconds(obj: Obj) -> int | None:
    value = labels_of(obj).get(api.LABEL_MAX_EXEC_TIME_SECONDS)
    if value and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def condition_finished(obj: Obj, succeeded_type: str, failed_type: str) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the object's `succeeded_type`, then `failed_type`,
    condition being True."""
    conditions = (obj.get("status") or {}).get("conditions") or ()
    for ctype, succeeded in ((succeeded_type, True), (failed_type, False)):
        for c in conditions:
            if c.get("type") == ctype and c.get("status") == api.CONDITION_TRUE:
                return True, succeeded, c.get("message") or ""
    return False, False, ""


def workload_matches(
    podsets: list[Obj],
    suspended: bool,
    max_exec: int | None,
    wl: Obj,
    flavors: Mapping[str, Obj],
    compare_names: bool = True,
) -> bool:
    """Does the Workload describe a job with these PodSets? A running job is compared with the
    PodSets as started (podset info merged), tolerations ignored once admitted."""
    spec = wl.get("spec") or {}
    if spec.get("maximumExecutionTimeSeconds") != max_exec:
        return False
    if compare_names and [p["name"] for p in podsets] != [p.get("name") for p in spec.get("podSets") or ()]:
        return False
    admitted = wlstatus.is_admitted(wl)
    running = framework.expected_running_podsets(wl, flavors)
    if running is not None:
        if framework.podsets_equivalent(podsets, running, ignore_tolerations=admitted):
            return True
        if not suspended:
            return False
    return framework.podsets_equivalent(podsets, spec.get("podSets") or [], ignore_tolerations=admitted)


def pods_ready_condition(ready: bool, wl: Obj) -> tuple[str, str, str]:
    """(status, reason, message) of the Workload's PodsReady condition, the job's pods `ready` or not."""
    previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
    previous_reason = (previous or {}).get("reason")
    if not wlstatus.is_admitted(wl):
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START
    if ready:
        recovering = previous_reason in (api.REASON_WAIT_FOR_RECOVERY, api.REASON_RECOVERED)
        reason = api.REASON_RECOVERED if recovering else api.REASON_STARTED
        return api.CONDITION_TRUE, reason, api.MSG_PODS_READY
    if (previous or {}).get(
        "status"
    ) == api.CONDITION_TRUE or previous_reason == api.REASON_WAIT_FOR_RECOVERY:
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_RECOVERY, api.MSG_WAIT_FOR_RECOVERY
    return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START


def first_pod_priority_class(podsets: list[Obj]) -> str | None:
    """The first PodSet template's priorityClassName, in PodSet order."""
    for podset in podsets:
        name = ((podset.get("template") or {}).get("spec") or {}).get("priorityClassName")
        if name:
            return name
    return None


def _by_creation(workloads: list[Obj]) -> list[Obj]:
    return sorted(
        workloads, key=lambda w: (w["metadata"].get("creationTimestamp", ""), w["metadata"]["name"])
    )


# ------------------------------------------------------------------------------------------------
# The reconciler


class JobReconciler(framework.WorkloadWrites):
    """The generic job reconciler. A kind declares the class attributes below and implements the
    hooks; the constructor builds its informer, indexes and controller."""

    # -- declarations ----------------------------------------------------------------------------
    name: str  # the framework name (`batch/job`, `jobset.x-k8s.io/jobset`, ...)
    resource: Resource
    index_prefix: str  # Workload index names: `<prefix>OwnerUID`, `<prefix>OwnerKey`
    managed_by_default: str  # spec.managedBy of the kind's own controller
    concurrency: int = 3
    requires_crd: bool = True  # wait until the server serves the kind (a CRD)
    compare_podset_names: bool = True  # equivalence also compares the PodSets' names
    # Workloads the garbage collector orphaned (owner reference gone, job-uid label kept) are found
    # by the deleted owner's UID, and an owner being deleted counts as gone.
    follows_gc_orphans: bool = False
    # An unreserved Workload of a suspended job that no longer matches is rewritten, not deleted.
    updates_mismatching_workload: bool = False
    finished_event_on_release: bool = False  # FinishedWorkload event when a finished Workload is let go

    # -- hooks (per kind) ------------------------------------------------------------------------

    def podsets(self, obj: Obj) -> list[Obj]:
        raise NotImplementedError

    def is_suspended(self, obj: Obj) -> bool:
        return (obj.get("spec") or {}).get("suspend") is True

    def is_active(self, obj: Obj) -> bool:
        raise NotImplementedError

    def finished(self, obj: Obj) -> tuple[bool, bool, str]:
        raise NotImplementedError

    def pods_ready(self, obj: Obj) -> bool:
        raise NotImplementedError

    def reclaimable_pods(self, obj: Obj, wl: Obj) -> list[Obj]:
        raise NotImplementedError

    def managed_by(self, obj: Obj) -> str:
        return (obj.get("spec") or {}).get("managedBy") or self.managed_by_default

    def pod_priority_class(self, obj: Obj, podsets: list[Obj]) -> str | None:
        """The pod PriorityClass name the Workload's priority falls back to (`podsets`: the new
        Workload's, or the matching Workload's when its class label changed)."""
        return first_pod_priority_class(podsets)

    def pod_priority_classes(self) -> dict[str, Obj]:
        """PriorityClasses by name that a pod priority class name resolves against."""
        return {}

    def watch_more(self) -> list[Informer]:
        """Informers the kind reads besides its own objects (built here, registered with them)."""
        return []

    def ready(self, key: str, obj: Obj) -> bool:
        """Whether the kind can derive the object's PodSets now (else the reconcile ends quietly)."""
        return True

    async def run(self, obj: Obj, wl: Obj, infos: Mapping[str, Obj]) -> bool:
        """RunWithPodSetsInfo: unsuspend with the podset infos. Raises PodSetInfoConflict before
        writing anything when the infos do not fit. True when it started the object."""
        raise NotImplementedError

    async def stop(self, obj: Obj, wl: Obj | None, message: str) -> bool:
        """Suspend and RestorePodSetsInfo (from `wl`'s PodSets); the Stopped event with `message`
        when it suspended. False while the stop waits for the pods to go (looked at again soon)."""
        raise NotImplementedError

    async def may_release(self, obj: Obj) -> bool:
        """After an eviction's stop: whether the quota may be released (nothing runs any more)."""
        return not await self._still_active(obj)

    async def on_pending(self, key: str, obj: Obj, wl: Obj) -> None:
        """A suspended object whose Workload is not admitted yet, each reconcile."""

    # -- setup -----------------------------------------------------------------------------------

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.kube = agent.kube
        self.state = agent.state
        self.config = agent.config
        self.recorder = agent.recorder
        # The informer is named after the resource (jobs, jobsets), the controller after the kind.
        self.objects = Informer(self.kube, self.resource, name=self.resource.plural)
        self.objects.add_index(INDEX_NAMESPACE, namespace_index)
        self.objects.add_index(INDEX_PRIORITY_CLASS, priority_class_index)
        self._index_owner_uid = f"{self.index_prefix}OwnerUID"
        self._index_owner_key = f"{self.index_prefix}OwnerKey"
        by_uid, by_key = owner_indexes(self.resource)
        self.state.workloads.add_index(self._index_owner_uid, by_uid)
        self.state.workloads.add_index(self._index_owner_key, by_key)
        if self.follows_gc_orphans:
            self.state.workloads.add_index(INDEX_JOB_UID_LABEL, job_uid_label_index)
        self.controller = Controller(
            self.resource.kind.lower(), self.reconcile, concurrency=self.concurrency, clock=agent.clock
        )
        self._admission_check_messages: dict[str, str] = {}
        # UIDs of deleted owners by key (follows_gc_orphans).
        self._gone_uids: dict[str, str] = {}
        # Versions our own writes replaced, until the watch shows the write (no second start from a
        # stale copy).
        self._own_writes = OwnWrites()
        self._route_events()
        agent.register(
            informers=[self.objects, *self.watch_more()],
            controllers=[self.controller],
            on_leading=self._enqueue_all,
            requires=self.resource if self.requires_crd else None,
        )

    def _route_events(self) -> None:
        self.objects.add_handler(
            on_add=self._enqueue_object,
            on_update=lambda old, new: self._enqueue_object(new),
            on_delete=self._on_object_deleted,
        )
        self.state.workloads.add_handler(
            on_add=self._enqueue_for_workload,
            on_update=self._on_workload_updated,
            on_delete=self._enqueue_for_workload,
        )
        self.state.local_queues.add_handler(on_add=self._enqueue_for_local_queue)
        self.state.namespaces.add_handler(
            on_add=self._enqueue_namespace_object,
            on_update=lambda old, new: self._enqueue_namespace_object(new),
        )
        self.state.priority_classes.add_handler(on_add=self._enqueue_for_priority_class)

    # -- event routing ---------------------------------------------------------------------------

    def controlling(self, wl: Obj) -> Obj | None:
        return controlling_owner(self.resource, wl)

    def _enqueue_object(self, obj: Obj) -> None:
        self.controller.enqueue(object_key(obj))

    def _on_object_deleted(self, obj: Obj) -> None:
        key = object_key(obj)
        if self.follows_gc_orphans and obj["metadata"].get("uid"):
            self._gone_uids[key] = obj["metadata"]["uid"]
        self.controller.enqueue(key)

    def _on_workload_updated(self, old: Obj, new: Obj) -> None:
        previous, current = self.controlling(old), self.controlling(new)
        if self.follows_gc_orphans and previous is not None and current is None:
            key = f"{new['metadata'].get('namespace', '')}/{previous['name']}"
            self._gone_uids[key] = previous["uid"]
            self.controller.enqueue(key)
        self._enqueue_for_workload(new)

    def _enqueue_for_workload(self, wl: Obj) -> None:
        ref = self.controlling(wl)
        if ref is not None and ref.get("name"):
            self.controller.enqueue(f"{wl['metadata'].get('namespace', '')}/{ref['name']}")

    def _enqueue_namespace(self, namespace: str) -> None:
        for key in self.objects.store.index_keys(INDEX_NAMESPACE, namespace):
            self.controller.enqueue(key)

    def _enqueue_namespace_object(self, ns: Obj) -> None:
        self._enqueue_namespace(ns["metadata"]["name"])

    def _enqueue_for_local_queue(self, lq: Obj) -> None:
        if lq["metadata"]["name"] == api.DEFAULT_NAME:
            self._enqueue_namespace(lq["metadata"].get("namespace", ""))

    def _enqueue_for_priority_class(self, wpc: Obj) -> None:
        for key in self.objects.store.index_keys(INDEX_PRIORITY_CLASS, wpc["metadata"]["name"]):
            self.controller.enqueue(key)

    def _enqueue_all(self) -> None:
        for key in self.objects.store.keys():
            self.controller.enqueue(key)
        for key in self.state.workloads.store.index_values(self._index_owner_key):
            self.controller.enqueue(key)

    # -- parents and children --------------------------------------------------------------------

    def manages_child(self, child: Obj) -> bool | None:
        """Whether `child` belongs to an object of this kind that Kueue manages
        (FindAncestorJobManagedByKueue: its controller has a queue name, or any with
        manageJobsWithoutQueueName; else the walk goes on to that object's parent). None when the
        parent is not in the cache yet: ask again later."""
        ref = controller_ref_of_kind(self.resource, child)
        if ref is None:
            return False
        parent = self.objects.get(f"{child['metadata'].get('namespace', '')}/{ref.get('name')}")
        if parent is None:
            return None  # not seen yet, or gone (its children go too): upstream retries as well
        if parent["metadata"].get("uid") != ref.get("uid"):
            return False  # a stale reference: the walk stops, the child is a top-level one
        if labels_of(parent).get(api.LABEL_QUEUE_NAME) or self.config.manage_jobs_without_queue_name:
            return True
        return self._parent_managed(parent)

    def _parent_managed(self, obj: Obj) -> bool | None:
        """Whether another enabled integration manages the object's parent (`manages_child`);
        None: not known yet."""
        integrations = getattr(getattr(self, "agent", None), "integrations", ())
        verdicts = [
            i.manages_child(obj) for i in integrations if i is not self and hasattr(i, "manages_child")
        ]
        return True if True in verdicts else None if None in verdicts else False

    # -- reads -----------------------------------------------------------------------------------

    def typed(self, obj: Obj) -> Obj:
        return {**obj, "apiVersion": self.resource.api_version, "kind": self.resource.kind}

    def workload_name(self, obj: Obj) -> str:
        """GetWorkloadNameForOwnerWithGVK with the kind's GVK."""
        meta = obj["metadata"]
        return naming.workload_name(meta["name"], meta["uid"], self.resource.kind, self.resource.group)

    def equivalent(self, obj: Obj, wl: Obj, flavors: Mapping[str, Obj]) -> bool:
        return workload_matches(
            self.podsets(obj),
            self.is_suspended(obj),
            max_execution_seconds(obj),
            wl,
            flavors,
            compare_names=self.compare_podset_names,
        )

    def _flavors(self) -> dict[str, Obj]:
        return {f["metadata"]["name"]: f for f in self.state.flavors.list()}

    def _namespace_managed(self, namespace: str) -> bool:
        return selector_matches(
            self.config.managed_jobs_namespace_selector, self.state.namespace_labels.get(namespace, {})
        )

    def _queue_name(self, obj: Obj, owned: list[Obj]) -> str | None:
        """The LocalQueue the object goes to; None when it is not managed."""
        label = labels_of(obj).get(api.LABEL_QUEUE_NAME)
        if label:
            return label
        if owned:
            return (owned[0].get("spec") or {}).get("queueName") or ""
        namespace = obj["metadata"].get("namespace", "")
        # What the defaulting webhook does at creation; an object already running is left alone.
        if (
            self.is_suspended(obj)
            and self.state.local_queues.get(f"{namespace}/{api.DEFAULT_NAME}") is not None
        ):
            return api.DEFAULT_NAME
        if self.config.manage_jobs_without_queue_name:
            return ""
        return None

    def _owned_workloads(self, obj: Obj) -> list[Obj]:
        return _by_creation(self.state.workloads.by_index(self._index_owner_uid, obj["metadata"]["uid"]))

    def _held_back(self, obj: Obj, wl: Obj) -> bool:
        """An object of a MultiKueue ClusterQueue (or Workload) that its own controller would run
        here is never started. One managed by MultiKueue is unsuspended, as upstream does: its
        controller leaves it alone, so it only shows the worker's status."""
        if self.managed_by(obj) == api.MULTIKUEUE_CONTROLLER_NAME:
            return False
        names = {c.get("name") for c in wlstatus.check_states(wl)}
        cq_name = self.state.cluster_queue_for(wl)
        cq = self.state.cluster_queues.get(cq_name) if cq_name else None
        if cq is not None:
            spec = cq.get("spec") or {}
            names.update(spec.get("admissionChecks") or ())
            for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ():
                names.add(rule.get("name"))
        for name in names:
            check = self.state.admission_checks.get(name) if name else None
            if check and (check.get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME:
                return True
        return False

    async def _still_active(self, obj: Obj, count_running: bool = True) -> bool:
        """Active pods, read from the API: the cache may lag behind the stop just written. With
        `count_running`, an object found unsuspended counts as active too."""
        if self.is_active(obj):
            return True
        meta = obj["metadata"]
        try:
            fresh = await self.kube.get(self.resource, meta["name"], namespace=meta["namespace"])
        except NotFound:
            return False
        return self.is_active(fresh) or (count_running and not self.is_suspended(fresh))

    # -- reconcile -------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        obj = self.objects.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            self._admission_check_messages.pop(key, None)
            self._own_writes.forget(key)
            live_uid = None if obj is None or self.follows_gc_orphans else obj["metadata"]["uid"]
            await self._release_orphans(key, live_uid)
            return None
        if self._own_writes.lagging(key, obj):
            return Result(requeue_after=CACHE_LAG_RECHECK_SECONDS)  # the watch has not shown our write
        # Workloads of an earlier object of the same name lost their owner.
        await self._release_orphans(key, obj["metadata"]["uid"])
        queue = self._managed_queue(key, obj)
        if queue is None or isinstance(queue, Result):
            return queue
        prebuilt = naming.prebuilt_workload_name(obj) or None
        if prebuilt:
            wl = await self._prebuilt_workload(obj, prebuilt)
        else:
            wl, retry = await self._ensure_one_workload(obj, self._owned_workloads(obj), queue)
            if retry:
                return Result(requeue=True)
        if wl is None or wlstatus.is_finished(wl) or wl["metadata"].get("deletionTimestamp"):
            return await self._without_live_workload(obj, wl, queue, prebuilt)
        return await self._with_workload(key, obj, wl, queue)

    def _managed_queue(self, key: str, obj: Obj) -> str | Result | None:
        """The queue of a managed top-level object; None when it is not one of those, a Result when
        that is not known yet."""
        if not self._namespace_managed(key.partition("/")[0]):
            return None
        if self.managed_by(obj) not in (self.managed_by_default, api.MULTIKUEUE_CONTROLLER_NAME):
            return None  # run by another controller
        parent_managed = self._parent_managed(obj)
        if parent_managed is None:
            return Result(requeue=True)  # its parent is not in the cache yet
        if parent_managed:
            return None  # not a top-level job: its parent's Workload covers it (e.g. a JobSet's Jobs)
        queue = self._queue_name(obj, self._owned_workloads(obj))
        if queue is None or not self.ready(key, obj):
            return None
        return queue

    async def _without_live_workload(
        self, obj: Obj, wl: Obj | None, queue: str, prebuilt: str | None
    ) -> Result | None:
        # 1. Workload finished: let it go.
        if wl is not None and wlstatus.is_finished(wl):
            if api.FINALIZER_RESOURCE_IN_USE in (wl["metadata"].get("finalizers") or ()):
                if self.finished_event_on_release:
                    meta = wl["metadata"]
                    message = api.finished_workload_event_message(meta["namespace"], meta["name"])
                    await self._event(obj, api.EVENT_FINISHED_WORKLOAD, message)
                await self._remove_finalizer(wl)
            return None
        # 2. Workload being deleted: stop the object and let the Workload go.
        if wl is not None:
            if not await self.stop(obj, wl, api.MSG_WORKLOAD_DELETED):
                return Result(requeue_after=STOP_RECHECK_SECONDS)  # the templates are restored from it
            await self._remove_finalizer(wl)
            return None
        # 3. Finished without a Workload, or no Workload yet.
        if self.finished(obj)[0]:
            return None
        if prebuilt:
            await self.stop(obj, None, api.MSG_MISSING_PREBUILT_WORKLOAD)
        elif not self.is_active(obj):
            await self._create_workload(obj, queue)
        return None

    async def _with_workload(self, key: str, obj: Obj, wl: Obj, queue: str) -> Result | None:
        # 3. Finished: finish the Workload.
        done, succeeded, message = self.finished(obj)
        if done:
            await self._finish_workload(
                wl, api.REASON_SUCCEEDED if succeeded else api.REASON_FAILED, message, obj
            )
            return None
        # 4. Pods that will not run again.
        wl = await self._sync_reclaimable_pods(obj, wl)
        # 5. PodsReady.
        if self.config.wait_for_pods_ready is not None:
            wl = await self._sync_pods_ready(obj, wl)
        # 6. Evicted: stop, then release the quota once nothing runs.
        evicted = wlstatus.condition(wl, api.WORKLOAD_EVICTED)
        if evicted is not None and evicted.get("status") == api.CONDITION_TRUE:
            if not await self.stop(obj, wl, evicted.get("message", "")):
                return Result(requeue_after=STOP_RECHECK_SECONDS)
            if wlstatus.has_quota_reservation(wl) and await self.may_release(obj):
                current = wlstatus.working_copy(wl)
                if wlstatus.clear_reservation_after_eviction(
                    current, self.agent.clock.now(), self.config.features
                ):
                    await self._apply_admission_status(current)
            return None
        # 7. Suspended: start when admitted, else keep the Workload's queue in step.
        if self.is_suspended(obj):
            if wlstatus.is_admitted(wl):
                if not self._held_back(obj, wl):
                    await self._start(obj, wl)
                return None
            await self.on_pending(key, obj, wl)
            if (wl.get("spec") or {}).get("queueName", "") != queue and not wlstatus.has_quota_reservation(
                wl
            ):
                with contextlib.suppress(NotFound):
                    await self.kube.patch_merge(
                        api.WORKLOAD,
                        wl["metadata"]["name"],
                        {"spec": {"queueName": queue or None}},
                        namespace=wl["metadata"]["namespace"],
                    )
            return None
        # 8. Running without admission.
        if not wlstatus.is_admitted(wl) and not await self.stop(obj, wl, api.MSG_NOT_ADMITTED):
            return Result(requeue_after=STOP_RECHECK_SECONDS)
        return None

    # -- Workload lookup, creation and clean-up ------------------------------------------------

    async def _ensure_one_workload(self, obj: Obj, owned: list[Obj], queue: str) -> tuple[Obj | None, bool]:
        """(the matching Workload, retry): rewrites an unreserved mismatching Workload of a
        suspended object (updates_mismatching_workload), stops a running object without a match and
        deletes the other Workloads."""
        flavors = self._flavors()
        match = next((wl for wl in owned if self.equivalent(obj, wl, flavors)), None)
        others = [wl for wl in owned if wl is not match]
        to_update = None
        if (
            self.updates_mismatching_workload
            and match is None
            and others
            and self.is_suspended(obj)
            and not wlstatus.has_quota_reservation(others[0])
        ):
            to_update, others = others[0], others[1:]
        if match is None and not self.is_suspended(obj) and not self.finished(obj)[0]:
            previous = others[0] if len(others) == 1 else None
            message = api.MSG_NO_MATCHING_WORKLOAD if previous is not None else api.MSG_MISSING_WORKLOAD
            await self.stop(obj, previous, message)
        if await self._delete_workloads(obj, others):
            return None, True
        if to_update is not None:
            return await self._update_workload_to_match(obj, to_update, queue), False
        if match is not None:
            # A changed priority-class label: the Workload takes the new class and value. The label
            # as it is decides whether it changed (a default class created later is not taken up).
            podsets = (match.get("spec") or {}).get("podSets") or []
            match, ok = await self._follow_priority_label(
                obj,
                match,
                labels_of(obj).get(api.LABEL_PRIORITY_CLASS) or "",
                lambda: self._priority(obj, podsets),
            )
            if not ok:
                return None, True
        return match, False

    async def _delete_workloads(self, obj: Obj, workloads: list[Obj]) -> int:
        """Deletes Workloads that do not match the object; how many it deleted."""
        deleted = 0
        for wl in workloads:
            meta = wl["metadata"]
            await self._remove_finalizer(wl)
            try:
                await self.kube.delete(api.WORKLOAD, meta["name"], namespace=meta["namespace"])
            except NotFound:
                continue
            deleted += 1
            await self._event(
                obj,
                api.EVENT_DELETED_WORKLOAD,
                api.deleted_not_matching_workload_message(meta["namespace"], meta["name"]),
            )
        return deleted

    async def _update_workload_to_match(self, obj: Obj, wl: Obj, queue: str) -> Obj | None:
        body, _ = self._workload_body(obj, queue)
        if body is None:
            return None
        updated = copy.deepcopy(wl)
        spec = body["spec"]
        if (wl.get("spec") or {}).get("active") is False:
            spec["active"] = False
        updated["spec"] = spec
        try:
            result = await self.kube.replace(api.WORKLOAD, updated)
        except (NotFound, Conflict):
            return None
        meta = wl["metadata"]
        await self._event(
            obj,
            api.EVENT_UPDATED_WORKLOAD,
            api.updated_not_matching_workload_message(meta["namespace"], meta["name"]),
        )
        return result

    async def _prebuilt_workload(self, obj: Obj, name: str) -> Obj | None:
        """A Workload created for the object beforehand (e.g. by MultiKueue): adopted, or None."""
        return await self._adopt_prebuilt(
            obj,
            name,
            framework.owner_reference(self.typed(obj)),
            lambda wl: self.equivalent(obj, wl, self._flavors()),
        )

    def _priority_label(self, obj: Obj) -> str:
        """The object's `kueue.x-k8s.io/priority-class`, or the default WorkloadPriorityClass the
        defaulting webhook gives an object without one."""
        name = labels_of(obj).get(api.LABEL_PRIORITY_CLASS) or ""
        if not name and self.state.priority_classes.get(api.DEFAULT_NAME) is not None:
            name = api.DEFAULT_NAME
        return name

    def _priority(self, obj: Obj, podsets: list[Obj]) -> tuple[Obj, str | None]:
        """(the Workload's priority fields, None) or ({}, error) when its priority class is missing."""
        labels = {api.LABEL_PRIORITY_CLASS: self._priority_label(obj)}
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        pod_class = self.pod_priority_class(obj, podsets)
        return framework.priority_for(labels, wpcs, pod_class, self.pod_priority_classes())

    def _workload_body(self, obj: Obj, queue: str) -> tuple[Obj | None, str | None]:
        """(the Workload for the object, None) or (None, error) when its priority class is missing."""
        podsets = self.podsets(obj)
        priority, error = self._priority(obj, podsets)
        if error:
            return None, error
        return framework.new_workload(
            self.typed(obj),
            self.workload_name(obj),
            podsets,
            queue,
            priority=priority,
            label_keys_to_copy=self.config.label_keys_to_copy,
        ), None

    async def _create_workload(self, obj: Obj, queue: str) -> None:
        body, error = self._workload_body(obj, queue)
        if body is None:
            await self._event(obj, api.EVENT_WORKLOAD_PRIORITY_CLASS_NOT_FOUND, error or "", warning=True)
            return
        meta = body["metadata"]
        try:
            await self.kube.create(api.WORKLOAD, body, namespace=meta["namespace"])
        except Conflict:
            return  # already there; the informer has not seen it yet
        await self._event(
            obj,
            api.EVENT_CREATED_WORKLOAD,
            api.created_workload_event_message(meta["namespace"], meta["name"]),
        )

    async def _release_orphans(self, key: str, live_uid: str | None) -> None:
        """Finish and let go the Workloads of deleted objects named `key` (not those of the live one)."""
        orphans = self._workloads_of_gone_owner(key, live_uid)
        for wl in orphans:
            await self._finish_orphan(wl)
        if not any(api.FINALIZER_RESOURCE_IN_USE in (w["metadata"].get("finalizers") or ()) for w in orphans):
            self._gone_uids.pop(key, None)  # nothing left to release

    def _workloads_of_gone_owner(self, key: str, live_uid: str | None) -> list[Obj]:
        """Workloads of a deleted object named `key`, still referring to it. With follows_gc_orphans
        also those the garbage collector orphaned, labelled with its UID; and, with a live object of
        that name (`live_uid`), only those of an object seen deleted: the object cache may be behind
        the Workload cache."""
        by_key = self.state.workloads.by_index(self._index_owner_key, key)
        if not self.follows_gc_orphans:
            return [wl for wl in by_key if (self.controlling(wl) or {}).get("uid") != live_uid]
        gone_uid = self._gone_uids.get(key)
        found = [
            wl
            for wl in by_key
            if (uid := self.controlling(wl)["uid"]) != live_uid and (live_uid is None or uid == gone_uid)
        ]
        if gone_uid:
            namespace = key.partition("/")[0]
            found += [
                wl
                for wl in self.state.workloads.by_index(INDEX_JOB_UID_LABEL, gone_uid)
                if self.controlling(wl) is None and wl["metadata"].get("namespace") == namespace
            ]
        return found

    # -- Workload status -------------------------------------------------------------------------

    async def _sync_reclaimable_pods(self, obj: Obj, wl: Obj) -> Obj:
        desired = self.reclaimable_pods(obj, wl)
        current = [
            {"name": r.get("name"), "count": int(r.get("count") or 0)}
            for r in (wl.get("status") or {}).get("reclaimablePods") or ()
        ]
        if sorted(desired, key=lambda r: r["name"]) == sorted(current, key=lambda r: r["name"] or ""):
            return wl
        return await self._apply_status(wl, {"reclaimablePods": desired}, api.FIELD_MANAGER_RECLAIMABLE_PODS)

    async def _sync_pods_ready(self, obj: Obj, wl: Obj) -> Obj:
        wanted = pods_ready_condition(self.pods_ready(obj), wl)
        previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
        if (
            previous is not None
            and (previous.get("status"), previous.get("reason"), previous.get("message")) == wanted
        ):
            return wl
        current = wlstatus.working_copy(wl)
        wlstatus.set_condition(current, api.WORKLOAD_PODS_READY, *wanted, self.agent.clock.now())
        condition = wlstatus.condition(current, api.WORKLOAD_PODS_READY)
        return await self._apply_status(wl, {"conditions": [condition]}, api.FIELD_MANAGER_PODS_READY)

    # -- starting --------------------------------------------------------------------------------

    async def _start(self, obj: Obj, wl: Obj) -> None:
        try:
            infos = framework.podset_infos(wl, self._flavors())
            started = await self.run(obj, wl, infos)
        except framework.PodSetInfoConflict as exc:
            # Permanent: the object can never start with this admission.
            current = wlstatus.working_copy(wl)
            wlstatus.set_condition(
                current,
                api.WORKLOAD_FINISHED,
                api.CONDITION_TRUE,
                api.REASON_FAILED_TO_START,
                str(exc),
                self.agent.clock.now(),
            )
            await self._apply_admission_status(current)
            return
        if started:
            cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
            await self._event(obj, api.EVENT_STARTED, api.started_event_message(cq))

    async def _event(self, obj: Obj, reason: str, note: str, warning: bool = False) -> None:
        if self.recorder is None:
            return
        regarding = self.typed(obj)
        if warning:
            await self.recorder.warning(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
        else:
            await self.recorder.normal(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
