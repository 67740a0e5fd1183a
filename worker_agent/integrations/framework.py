"""What every job integration shares: Workload bodies, priority resolution, and
the pod-set information injected at start and removed at stop. Pure functions.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from kube_runtime.apply import set_finalizer
from kube_runtime.client import ApiError, NotFound
from kube_runtime.conditions import parse_time
from kueue_domain import api
from kueue_domain import workload as wlstatus
from kueue_domain.resources import QuantityError, parse_quantity

log = structlog.get_logger("worker_agent.integrations")

Obj = dict[str, Any]


def owner_reference(owner: Obj, controller: bool = True) -> Obj:
    meta = owner["metadata"]
    ref: Obj = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }
    if controller:
        ref["controller"] = True
    return ref


def priority_for(
    labels: Mapping[str, str],
    wpcs: Mapping[str, Obj],
    pod_priority_class: str | None,
    priority_classes: Mapping[str, Obj],
) -> tuple[Obj, str | None]:
    """(spec fields, error): the WPC label, else the pod PriorityClass, else the global default."""
    wpc_name = labels.get(api.LABEL_PRIORITY_CLASS)
    if wpc_name:
        wpc = wpcs.get(wpc_name)
        if wpc is None:
            return {}, f"workloadPriorityClass {wpc_name!r} not found"
        return {
            "priorityClassName": wpc_name,
            "priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD,
            "priority": int(wpc.get("value") or 0),
        }, None
    if pod_priority_class:
        pc = priority_classes.get(pod_priority_class)
        if pc is not None:
            return {
                "priorityClassName": pod_priority_class,
                "priorityClassSource": api.PRIORITY_CLASS_SOURCE_POD,
                "priority": int(pc.get("value") or 0),
            }, None
    defaults = [pc for pc in priority_classes.values() if pc.get("globalDefault")]
    if defaults:
        pc = min(defaults, key=lambda p: int(p.get("value") or 0))
        return {
            "priorityClassName": pc["metadata"]["name"],
            "priorityClassSource": api.PRIORITY_CLASS_SOURCE_POD,
            "priority": int(pc.get("value") or 0),
        }, None
    return {"priority": 0}, None


def record_creation_latency(metrics: Any, job: Obj, created: Obj) -> None:
    """kueue_workload_creation_latency_seconds (MetricForWorkloadCreationLatency): the Workload we
    just created (`created`, as the API server returned it) against its job's creationTimestamp,
    by the job's kind. As upstream: only for a job at generation 1 or below (a job updated since
    its creation would time the update, not the creation)."""
    if metrics is None or not getattr(metrics, "workload_creation_latency", False):
        return
    meta = job.get("metadata") or {}
    if int(meta.get("generation") or 0) > 1:
        return
    job_created = meta.get("creationTimestamp")
    wl_created = (created.get("metadata") or {}).get("creationTimestamp")
    if not job_created or not wl_created:
        return
    latency = (parse_time(wl_created) - parse_time(job_created)).total_seconds()
    metrics.workload_created(job.get("kind") or "", latency)


PRIORITY_SPEC_FIELDS = ("priorityClassName", "priorityClassSource", "priority")


def workload_priority_class_name(wl: Obj) -> str:
    """The name of the class a Workload's priority comes from ('' without one)."""
    return (wl.get("spec") or {}).get("priorityClassName") or ""


def priority_follows_label(wl: Obj, label_class: str) -> bool:
    """Whether a job's `kueue.x-k8s.io/priority-class` label (`label_class`, '' without one) must be
    re-resolved into its Workload (Kueue's UpdateWorkloadPriority): the Workload's class name
    differs from the label's, and the Workload may follow the label at all. A Workload whose
    priority comes from a pod PriorityClass does not; neither does one that reserved quota without
    any class, since the API refuses to add a class to it then."""
    spec = wl.get("spec") or {}
    name = workload_priority_class_name(wl)
    if not name:
        if _has_quota_reservation(wl):
            return False
    elif spec.get("priorityClassSource") != api.PRIORITY_CLASS_SOURCE_WORKLOAD:
        return False
    return name != label_class


def priority_patch(wl: Obj, resolved: Obj) -> Obj | None:
    """The `spec` merge patch that gives `wl` the resolved priority (from `priority_for`), or None
    when its class and value are those already."""
    spec = wl.get("spec") or {}
    patch = {key: resolved.get(key) for key in PRIORITY_SPEC_FIELDS}
    patch["priority"] = int(patch["priority"] or 0)
    current = {key: spec.get(key) for key in PRIORITY_SPEC_FIELDS}
    current["priority"] = int(current["priority"] or 0) if current["priority"] is not None else None
    if current == patch:
        return None
    return patch


async def follow_priority_label(
    kube: Any,
    wl: Obj,
    label_class: str,
    resolve: Callable[[], tuple[Obj, str | None]],
) -> tuple[Obj | None, bool]:
    """Kueue's UpdateWorkloadPriority for one Workload: when its class no longer is the job's
    `kueue.x-k8s.io/priority-class` (`priority_follows_label`), the priority is resolved again
    (`resolve()`, as at creation) and written with the Workload's resourceVersion.

    (the written Workload or None when nothing was written, ok): not ok when the class cannot be
    resolved or the write failed (a newer Workload, or the API refused it); the caller retries."""
    if not priority_follows_label(wl, label_class):
        return None, True
    resolved, error = resolve()
    meta = wl["metadata"]
    if error:
        log.info("workload priority not updated", workload=f"{meta['namespace']}/{meta['name']}", error=error)
        return None, False
    patch = priority_patch(wl, resolved)
    if patch is None:
        return None, True
    body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": patch}
    try:
        return await kube.patch_merge(api.WORKLOAD, meta["name"], body, namespace=meta["namespace"]), True
    except NotFound:
        return None, True
    except ApiError as exc:
        log.info(
            "workload priority not updated", workload=f"{meta['namespace']}/{meta['name']}", error=str(exc)
        )
        return None, False


async def finish_orphaned(kube: Any, wl: Obj, now: Any, finish: bool) -> bool:
    """A Workload whose owner is gone: with `finish` (FinishOrphanedWorkloads), finished with
    OwnerNotFound (releasing its quota) unless finished or being deleted already; then its
    resource-in-use finalizer removed. False if it vanished meanwhile (nothing left to do)."""
    if finish and not wl["metadata"].get("deletionTimestamp") and not wlstatus.is_finished(wl):
        current = wlstatus.working_copy(wl)
        wlstatus.set_condition(
            current,
            api.WORKLOAD_FINISHED,
            api.CONDITION_TRUE,
            api.REASON_OWNER_NOT_FOUND,
            api.MSG_OWNER_NOT_FOUND,
            now,
        )
        try:
            wl = await wlstatus.apply_admission_status(kube, current, strict=True) or wl
        except NotFound:
            return False
    try:
        await set_finalizer(kube, api.WORKLOAD, wl, api.FINALIZER_RESOURCE_IN_USE, present=False)
    except NotFound:
        return False
    return True


def new_workload(
    owner: Obj,
    name: str,
    podsets: list[Obj],
    queue_name: str,
    *,
    priority: Obj,
    label_keys_to_copy: Iterable[str] = (),
    controller_owner: bool = True,
    annotations: Obj | None = None,
) -> Obj:
    meta = owner["metadata"]
    owner_labels = meta.get("labels") or {}
    labels = {k: owner_labels[k] for k in label_keys_to_copy if k in owner_labels}
    if len(meta["uid"]) <= 63:
        labels[api.LABEL_JOB_UID] = meta["uid"]
    wl_annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(api.ANNOTATION_PROVREQ_PREFIX)
    }
    gated_by = (meta.get("annotations") or {}).get(api.ANNOTATION_ADMISSION_GATED_BY)
    if gated_by:
        wl_annotations[api.ANNOTATION_ADMISSION_GATED_BY] = gated_by
    wl_annotations.update(annotations or {})
    spec: Obj = {"podSets": podsets, **priority}
    if queue_name:  # queueName is optional; an empty string would fail the CRD's pattern
        spec["queueName"] = queue_name
    max_exec = owner_labels.get(api.LABEL_MAX_EXEC_TIME_SECONDS)
    if max_exec and max_exec.isdigit() and int(max_exec) > 0:
        spec["maximumExecutionTimeSeconds"] = int(max_exec)
    metadata: Obj = {
        "name": name,
        "namespace": meta["namespace"],
        "labels": labels,
        "finalizers": [api.FINALIZER_RESOURCE_IN_USE],
        "ownerReferences": [owner_reference(owner, controller=controller_owner)],
    }
    if wl_annotations:
        metadata["annotations"] = wl_annotations
    return {"apiVersion": api.API_VERSION, "kind": "Workload", "metadata": metadata, "spec": spec}


# ------------------------------------------------------------------------------------------------
# Pod-set information (job start and stop)


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def podset_infos(workload: Obj, flavors: Mapping[str, Obj], queue_labels: bool = True) -> dict[str, Obj]:
    """Per PodSet name: nodeSelector, tolerations, labels, count from the admission and Ready checks.
    `queue_labels` (AssignQueueLabelsForPods): the pods get `kueue.x-k8s.io/local-queue-name` and,
    when the ClusterQueue's name is a valid DNS-1123 label, `kueue.x-k8s.io/cluster-queue-name`."""
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    cq = admission.get("clusterQueue", "")
    queue = (workload.get("spec") or {}).get("queueName", "")
    # A Workload dispatched here by a MultiKueue manager marks its pods.
    wl_labels = (workload.get("metadata") or {}).get("labels") or {}
    multikueue_copy = bool(wl_labels.get(api.LABEL_MULTIKUEUE_ORIGIN))
    infos: dict[str, Obj] = {}
    for psa in admission.get("podSetAssignments") or ():
        node_selector: dict[str, str] = {}
        tolerations: list[Obj] = []
        for flavor_name in dict.fromkeys((psa.get("flavors") or {}).values()):
            spec = (flavors.get(flavor_name) or {}).get("spec") or {}
            node_selector.update(spec.get("nodeLabels") or {})
            for toleration in spec.get("tolerations") or ():
                if toleration not in tolerations:
                    tolerations.append(toleration)
        labels = {api.LABEL_PODSET: psa["name"]}
        if queue_labels:
            labels[api.LABEL_LOCAL_QUEUE_NAME] = queue
            if _DNS1123_LABEL.fullmatch(cq):
                labels[api.LABEL_CLUSTER_QUEUE_NAME] = cq
        if multikueue_copy:
            labels[api.LABEL_MULTIKUEUE_WORKER_WORKLOAD_POD] = api.VALUE_TRUE
        infos[psa["name"]] = {
            "name": psa["name"],
            "count": psa.get("count"),
            "nodeSelector": node_selector,
            "tolerations": tolerations,
            "labels": labels,
            "annotations": {},
        }
    for check in status.get("admissionChecks") or ():
        if check.get("state") != api.CHECK_STATE_READY:
            continue
        for update in check.get("podSetUpdates") or ():
            info = infos.get(update.get("name"))
            if info is None:
                continue
            for key in ("labels", "annotations", "nodeSelector"):
                for k, v in (update.get(key) or {}).items():
                    if info[key].get(k, v) != v:
                        raise PodSetInfoConflict(
                            f"conflict for {key} {k!r} in podSetUpdates of {check['name']}"
                        )
                    info[key][k] = v
            for toleration in update.get("tolerations") or ():
                if toleration not in info["tolerations"]:
                    info["tolerations"].append(toleration)
    return infos


class PodSetInfoConflict(Exception):
    """A podSetUpdates key conflicts with another: the Workload is Finished/FailedToStart."""


def merge_into_template(template: Obj, info: Obj) -> Obj:
    """`template` with the info's labels, annotations, nodeSelector and tolerations added. Copy on
    write: the result's metadata and spec are new dicts and what the merge changes is new, the rest
    (containers, volumes, ...) is shared with `template`; callers merge into a copy of their own or
    only read the result."""
    result = dict(template)
    meta = result["metadata"] = dict(result.get("metadata") or {})
    spec = result["spec"] = dict(result.get("spec") or {})
    for key, target in (("labels", meta), ("annotations", meta), ("nodeSelector", spec)):
        values = info.get(key) or {}
        if not values:
            continue
        current = dict(target.get(key) or {})
        for k, v in values.items():
            if k in current and current[k] != v and key != "labels":
                raise PodSetInfoConflict(f"conflict for {key} {k!r}: {current[k]!r} != {v!r}")
            current[k] = v
        target[key] = current
    tolerations = list(spec.get("tolerations") or ())
    for toleration in info.get("tolerations") or ():
        if toleration not in tolerations:
            tolerations.append(toleration)
    if tolerations:
        spec["tolerations"] = tolerations
    return result


def restore_template(template: Obj, original: Obj, keep_label_keys: Iterable[str] = ()) -> Obj:
    """The template with labels, annotations, nodeSelector, tolerations and gates taken from the
    Workload's copy (what the job looked like before it was started). `keep_label_keys` keeps the
    template's own values of labels the Workload copy leaves out (e.g. a Job's selector labels)."""
    result = copy.deepcopy(template)
    meta = result.setdefault("metadata", {})
    spec = result.setdefault("spec", {})
    original_meta = original.get("metadata") or {}
    original_spec = original.get("spec") or {}
    kept_labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in set(keep_label_keys)}
    for key in ("labels", "annotations"):
        if original_meta.get(key):
            meta[key] = copy.deepcopy(original_meta[key])
        else:
            meta.pop(key, None)
    if kept_labels:
        meta["labels"] = {**(meta.get("labels") or {}), **kept_labels}
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        if original_spec.get(key):
            spec[key] = copy.deepcopy(original_spec[key])
        else:
            spec.pop(key, None)
    return result


# ------------------------------------------------------------------------------------------------
# PodSet building and equivalence


def template_for_podset(template: Obj | None, drop_label_keys: Iterable[str] = ()) -> Obj:
    """A pod template as a Workload PodSet keeps it: metadata reduced to labels and annotations
    (minus `drop_label_keys`), duplicate env vars removed (the last one wins)."""
    template = template or {}
    meta = template.get("metadata") or {}
    dropped = set(drop_label_keys)
    result: Obj = {}
    kept_meta: Obj = {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in dropped}
    if labels:
        kept_meta["labels"] = labels
    if meta.get("annotations"):
        kept_meta["annotations"] = dict(meta["annotations"])
    if kept_meta:
        result["metadata"] = kept_meta
    result["spec"] = dedupe_env_vars(template.get("spec") or {})
    return result


def dedupe_env_vars(pod_spec: Obj) -> Obj:
    """A copy of `pod_spec` where each container keeps only the last env var of every name."""
    result = copy.deepcopy(pod_spec)
    for key in ("initContainers", "containers"):
        for container in result.get(key) or ():
            env = container.get("env")
            if not env:
                continue
            last = {item.get("name"): i for i, item in enumerate(env)}
            container["env"] = [item for i, item in enumerate(env) if last[item.get("name")] == i]
    return result


def _quantities(resource_list: Mapping[str, Any] | None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in (resource_list or {}).items():
        try:
            result[name] = parse_quantity(value)
        except QuantityError:
            result[name] = value
    return result


def _container_resources_equal(a: list[Obj], b: list[Obj]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        rx, ry = x.get("resources") or {}, y.get("resources") or {}
        for key in ("requests", "limits"):
            if _quantities(rx.get(key)) != _quantities(ry.get(key)):
                return False
        if (rx.get("claims") or []) != (ry.get("claims") or []):
            return False
    return True


def podsets_equivalent(
    job_podsets: list[Obj], wl_podsets: list[Obj], ignore_tolerations: bool = False
) -> bool:
    """Kueue's PodSet equality: same length and, pairwise, count, minCount, tolerations (unless
    ignored) and the containers' resources. Other template fields do not matter for scheduling."""
    if len(job_podsets) != len(wl_podsets):
        return False
    for a, b in zip(job_podsets, wl_podsets, strict=True):
        if int(a.get("count", 1)) != int(b.get("count", 1)):
            return False
        if a.get("minCount") != b.get("minCount"):
            return False
        spec_a = (a.get("template") or {}).get("spec") or {}
        spec_b = (b.get("template") or {}).get("spec") or {}
        if not ignore_tolerations and (spec_a.get("tolerations") or []) != (spec_b.get("tolerations") or []):
            return False
        for key in ("initContainers", "containers"):
            if not _container_resources_equal(spec_a.get(key) or [], spec_b.get(key) or []):
                return False
    return True


def expected_running_podsets(workload: Obj, flavors: Mapping[str, Obj]) -> list[Obj] | None:
    """The Workload's PodSets as its job runs them: podset info merged into the templates and, for
    partially admitted PodSets, the admitted count. None without a reservation or on a mismatch."""
    if not _has_quota_reservation(workload):
        return None
    try:
        infos = podset_infos(workload, flavors)
    except PodSetInfoConflict:
        return None
    result = []
    for podset in (workload.get("spec") or {}).get("podSets") or ():
        info = infos.get(podset.get("name", api.DEFAULT_PODSET_NAME))
        if info is None:
            return None
        running = dict(podset)  # read only: compared, never written
        try:
            running["template"] = merge_into_template(podset.get("template") or {}, info)
        except PodSetInfoConflict:
            return None
        if podset.get("minCount") is not None and info.get("count") is not None:
            running["count"] = info["count"]
        result.append(running)
    return result


def _has_quota_reservation(workload: Obj) -> bool:
    for c in (workload.get("status") or {}).get("conditions") or ():
        if c.get("type") == api.WORKLOAD_QUOTA_RESERVED:
            return c.get("status") == api.CONDITION_TRUE
    return False


class WorkloadWrites:
    """The Workload writes every job integration makes the same way. Needs `self.kube`, `self.agent`
    (for its clock) and `self._event(owner, reason, note)`."""

    kube: Any
    agent: Any

    async def _event(self, owner: Obj, reason: str, note: str, warning: bool = False) -> None:
        raise NotImplementedError

    async def _follow_priority_label(
        self, owner: Obj, wl: Obj, label_class: str, resolve: Callable[[], tuple[Obj, str | None]]
    ) -> tuple[Obj, bool]:
        """`follow_priority_label`, with the owner's `UpdatedWorkload` event when written.
        (the Workload as it is now, ok)."""
        written, ok = await follow_priority_label(self.kube, wl, label_class, resolve)
        if written is None:
            return wl, ok
        meta = wl["metadata"]
        await self._event(
            owner,
            api.EVENT_UPDATED_WORKLOAD,
            api.updated_workload_priority_message(meta["namespace"], meta["name"]),
        )
        return written, True

    async def _finish_orphan(self, wl: Obj) -> None:
        """A Workload whose owner is gone: finished (OwnerNotFound, releasing its quota), then let go."""
        await finish_orphaned(self.kube, wl, self.agent.clock.now(), finish=True)

    async def _adopt_prebuilt(
        self, owner: Obj, name: str, owner_ref: Obj, in_sync: Callable[[Obj], bool]
    ) -> Obj | None:
        """A Workload created for `owner` beforehand (by MultiKueue, `name` from its
        prebuilt-workload annotation): adopted (`owner_ref`, the controller reference, and the
        job-uid label); marked Finished/OutOfSync when it does not describe the owner (`in_sync`).
        None when it is not there, is controlled by something else, or is out of sync."""
        namespace = owner["metadata"]["namespace"]
        wl = self.agent.state.workloads.get(f"{namespace}/{name}")
        if wl is None:
            return None
        uid = owner["metadata"]["uid"]
        refs = wl["metadata"].get("ownerReferences") or ()
        if not any(r.get("controller") and r.get("uid") == uid for r in refs):
            if any(r.get("controller") for r in refs):
                return None  # controlled by something else
            labels = dict(wl["metadata"].get("labels") or {})
            if len(uid) <= 63:
                labels.setdefault(api.LABEL_JOB_UID, uid)
            meta = {"ownerReferences": [*refs, owner_ref], "labels": labels}
            meta["resourceVersion"] = wl["metadata"]["resourceVersion"]
            try:
                wl = await self.kube.patch_merge(api.WORKLOAD, name, {"metadata": meta}, namespace=namespace)
            except NotFound:
                return None
            # A Conflict (the manager wrote the Workload meanwhile) propagates: the controller retries
            # with backoff. Returning None would stop the owner until an event came for it, and none
            # does: the Workload's events reach the owner through the reference not yet written.
        if not wlstatus.is_finished(wl) and not in_sync(wl):
            current = wlstatus.working_copy(wl)
            wlstatus.set_condition(
                current,
                api.WORKLOAD_FINISHED,
                api.CONDITION_TRUE,
                api.REASON_OUT_OF_SYNC,
                api.MSG_PREBUILT_WORKLOAD_OUT_OF_SYNC,
                self.agent.clock.now(),
            )
            await self._apply_admission_status(current)
            return None
        return wl

    async def _remove_finalizer(self, wl: Obj) -> None:
        # Strict (RemoveFinalizersWithStrictPatch): fails on a stale copy and is retried.
        await set_finalizer(self.kube, api.WORKLOAD, wl, api.FINALIZER_RESOURCE_IN_USE, present=False)

    async def _apply_admission_status(self, wl: Obj) -> Obj | None:
        try:
            return await wlstatus.apply_admission_status(self.kube, wl, strict=True)
        except NotFound:
            return None

    async def _finish_workload(self, wl: Obj, reason: str, message: str, owner: Obj) -> None:
        """Finished=True from the job's end, as upstream's job reconciler writes it: that one
        condition applied under `kueue-job-controller-Finished`, without resourceVersion. Forced
        (upstream's is not), so that it never fails on the same condition the MultiKueue manager
        copied from the worker a moment before."""
        current = wlstatus.status_working_copy(wl)
        if not wlstatus.set_condition(
            current, api.WORKLOAD_FINISHED, api.CONDITION_TRUE, reason, message, self.agent.clock.now()
        ):
            return
        body = wlstatus.status_apply_body(
            wl, {"conditions": [wlstatus.condition(current, api.WORKLOAD_FINISHED)]}
        )
        try:
            await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_JOB_FINISHED, force=True)
        except NotFound:
            return
        meta = wl["metadata"]
        await self._event(
            owner,
            api.EVENT_FINISHED_WORKLOAD,
            api.finished_workload_event_message(meta["namespace"], meta["name"]),
        )

    async def _apply_status(self, wl: Obj, status: Obj, field_manager: str) -> Obj:
        body = wlstatus.status_apply_body(wl, status)
        try:
            return await self.kube.apply_status(api.WORKLOAD, body, field_manager, force=True)
        except NotFound:
            return wl
