"""The job framework's pure parts: owner references and indexes, finished conditions, PodSet
matching and the PodsReady condition, the same for every kind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kueue_domain import api
from kueue_domain import workload as wlstatus
from kueue_domain.api import Resource
from worker_agent.integrations import framework

Obj = dict[str, Any]
INDEX_NAMESPACE = "namespace"  # objects of the kind by namespace
INDEX_PRIORITY_CLASS = "workloadPriorityClass"  # objects of the kind by their WorkloadPriorityClass label
INDEX_JOB_UID_LABEL = "batchJobUIDLabel"  # Workloads by their kueue.x-k8s.io/job-uid label


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


def by_creation(workloads: list[Obj]) -> list[Obj]:
    return sorted(
        workloads, key=lambda w: (w["metadata"].get("creationTimestamp", ""), w["metadata"]["name"])
    )
