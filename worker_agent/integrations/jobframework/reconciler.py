"""The job framework's reconciler: `JobReconciler`, the declarations and hooks a kind gives, and the
one reconcile every kind runs."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from kube_runtime.client import NotFound
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer
from kube_runtime.labels import selector_matches
from kube_runtime.ownwrites import CACHE_LAG_RECHECK_SECONDS, OwnWrites
from kueue_domain import api, features, naming
from kueue_domain import workload as wlstatus
from kueue_domain.api import Resource
from worker_agent.integrations import framework
from worker_agent.integrations.jobframework.objects import (
    INDEX_JOB_UID_LABEL,
    INDEX_NAMESPACE,
    INDEX_PRIORITY_CLASS,
    Obj,
    by_creation,
    first_pod_priority_class,
    job_uid_label_index,
    labels_of,
    max_execution_seconds,
    namespace_index,
    owner_indexes,
    priority_class_index,
    workload_matches,
)
from worker_agent.integrations.jobframework.routing import EventRouting
from worker_agent.integrations.jobframework.workloads import WorkloadLookups

STOP_RECHECK_SECONDS = 2.0  # a stop waiting for the object's pods to go is looked at again after this


class JobReconciler(EventRouting, WorkloadLookups):
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
        return by_creation(self.state.workloads.by_index(self._index_owner_uid, obj["metadata"]["uid"]))

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
            return await self._retain_deactivated(obj, wl, evicted)
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

    async def _retain_deactivated(self, obj: Obj, wl: Obj, evicted: Obj) -> Result | None:
        """ObjectRetentionPolicies: a job whose Workload Kueue deactivated (inactive, Evicted with a
        `DeactivatedDueTo...` reason) is deleted, with its dependents, `afterDeactivatedByKueue`
        after that eviction; its Workload goes with it (owner reference)."""
        keep = self.config.workload_retention.after_deactivated_by_kueue_seconds
        if (
            keep is None
            or wlstatus.is_active(wl)
            or not evicted.get("reason", "").startswith(api.REASON_DEACTIVATED_DUE_TO_PREFIX)
        ):
            return None
        remaining = keep - wlstatus.seconds_since(evicted.get("lastTransitionTime"), self.agent.clock.now())
        if remaining > 0:
            return Result(requeue_after=remaining)
        meta = obj["metadata"]
        try:
            await self.kube.delete(
                self.resource, meta["name"], namespace=meta["namespace"], propagation_policy="Background"
            )
        except NotFound:
            return None
        if self.recorder is not None:
            await self.recorder.normal(
                self.typed(obj), api.EVENT_DELETED, api.EVENT_ACTION_DELETED, api.MSG_DELETED_DEACTIVATED_JOB
            )
        await self._remove_finalizer(wl)
        return None

    # -- starting --------------------------------------------------------------------------------

    async def _start(self, obj: Obj, wl: Obj) -> None:
        try:
            infos = framework.podset_infos(
                wl,
                self._flavors(),
                queue_labels=self.config.features.enabled(features.ASSIGN_QUEUE_LABELS_FOR_PODS),
            )
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
