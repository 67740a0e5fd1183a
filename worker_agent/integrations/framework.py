"""What every job integration shares (spec §4.1): Workload names, Workload bodies, priority
resolution, and the pod-set information injected at start and removed at stop. Pure functions.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from kube_runtime import api

Obj = dict[str, Any]

MAX_PREFIX_LENGTH = 247
HASH_LENGTH = 5


def workload_name(owner_name: str, owner_uid: str, kind: str, group: str, extra: str = "") -> str:
    """`<lower(kind)>-<ownerName>` (cut to 247 chars) + `-` + 5 hex of SHA-1(kind, group, name, uid)."""
    prefix = f"{kind.lower()}-{owner_name}"[:MAX_PREFIX_LENGTH]
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update("\n".join([kind, group, owner_name, owner_uid] + ([extra] if extra else [])).encode())
    return f"{prefix}-{digest.hexdigest()[:HASH_LENGTH]}"


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
    spec: Obj = {"queueName": queue_name, "podSets": podsets, **priority}
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
# Pod-set information (§4.1 Start/Stop)


def podset_infos(workload: Obj, flavors: Mapping[str, Obj]) -> dict[str, Obj]:
    """Per PodSet name: nodeSelector, tolerations, labels, count from the admission and Ready checks."""
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    cq = admission.get("clusterQueue", "")
    queue = (workload.get("spec") or {}).get("queueName", "")
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
        labels = {api.LABEL_PODSET: psa["name"], api.LABEL_LOCAL_QUEUE_NAME: queue}
        if cq and len(cq) <= 63:
            labels[api.LABEL_CLUSTER_QUEUE_NAME] = cq
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
    """A copy of `template` with the info's labels, annotations, nodeSelector and tolerations added."""
    result = copy.deepcopy(template)
    meta = result.setdefault("metadata", {})
    spec = result.setdefault("spec", {})
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


def restore_template(template: Obj, original: Obj) -> Obj:
    """The template with labels, annotations, nodeSelector, tolerations and gates taken from the
    Workload's copy (what the job looked like before it was started)."""
    result = copy.deepcopy(template)
    meta = result.setdefault("metadata", {})
    spec = result.setdefault("spec", {})
    original_meta = original.get("metadata") or {}
    original_spec = original.get("spec") or {}
    for key in ("labels", "annotations"):
        if original_meta.get(key):
            meta[key] = copy.deepcopy(original_meta[key])
        else:
            meta.pop(key, None)
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        if original_spec.get(key):
            spec[key] = copy.deepcopy(original_spec[key])
        else:
            spec.pop(key, None)
    return result
