"""Pod webhooks: Kueue-managed pods are created gated.

A pod is managed when its namespace matches `managedJobsNamespaceSelector`, no ancestor is managed
by Kueue, and it has a queue name (possibly the namespace's default) or manageJobsWithoutQueueName
is on. Managed pods get the label `kueue.x-k8s.io/managed: "true"`, the finalizer
`kueue.x-k8s.io/managed`, the scheduling gate `kueue.x-k8s.io/admission` and the role-hash
annotation. Pods of a parent that suspends them itself (LeaderWorkerSet stamps
`kueue.x-k8s.io/pod-suspending-parent` on its templates) get only the gate and the role hash; the
parent's integration labels them later.

The topology gate (`kueue.x-k8s.io/topology`, TAS) is not added: Topology-Aware Scheduling is out
of scope here and nothing would remove it.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from kueue_domain import api, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, LABELS, FieldError
from kueue_domain.naming import prebuilt_workload_name
from worker_agent.webhooks import common
from worker_agent.webhooks.common import Facts, Lookups
from worker_agent.webhooks.review import go_json

Obj = dict[str, Any]
GVK = api.POD.gvk
TOTAL_COUNT_PATH = ANNOTATIONS.key(api.ANNOTATION_POD_GROUP_TOTAL_COUNT)
MANAGED_LABEL_PATH = LABELS.key(api.LABEL_MANAGED)
RETRIABLE_PATH = ANNOTATIONS.key(api.ANNOTATION_RETRIABLE_IN_GROUP)


def is_gated(pod: Obj) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return any(g.get("name") == api.SCHEDULING_GATE_ADMISSION for g in gates)


def suspended_by_parent(pod: Obj) -> bool:
    return api.ANNOTATION_POD_SUSPENDING_PARENT in common.annotations_of(pod)


def group_name(pod: Obj) -> str:
    return common.annotations_of(pod).get(api.ANNOTATION_POD_GROUP_NAME) or common.labels_of(pod).get(
        api.LABEL_POD_GROUP_NAME, ""
    )


def _group_name_path(pod: Obj) -> fields.Path:
    if api.ANNOTATION_POD_GROUP_NAME in common.annotations_of(pod):
        return ANNOTATIONS.key(api.ANNOTATION_POD_GROUP_NAME)
    return LABELS.key(api.LABEL_POD_GROUP_NAME)


# ------------------------------------------------------------------------------------------------
# Role hash: the PodSet a pod belongs to in a pod group


def _sorted_map(value: Any) -> Any:
    """A Go map marshals with sorted keys; a nil map as null."""
    if not isinstance(value, dict):
        return value
    return {k: value[k] for k in sorted(value)}


def _containers_shape(containers: list[Obj] | None) -> list[Obj] | None:
    if not containers:
        return None
    return [
        {
            "ports": c.get("ports") or None,
            "resources": {"requests": _sorted_map((c.get("resources") or {}).get("requests")) or None},
        }
        for c in containers
    ]


def spec_shape(spec: Obj) -> Obj:
    """The scheduling-relevant part of a pod spec (Kueue's `SpecShape`), keys in Go map order."""
    shape: Obj = {
        "affinity": spec.get("affinity"),
        "containers": _containers_shape(spec.get("containers")),
        "initContainers": _containers_shape(spec.get("initContainers")),
        "nodeSelector": _sorted_map(spec.get("nodeSelector")),
        "overhead": _sorted_map(spec.get("overhead")),
        "priority": spec.get("priority"),
        "resourceClaims": spec.get("resourceClaims") or None,
        "runtimeClassName": spec.get("runtimeClassName"),
        "tolerations": spec.get("tolerations") or None,
        "topologySpreadConstraints": spec.get("topologySpreadConstraints") or None,
    }
    # Pod-level resources only count when set, so older hashes stay stable.
    if spec.get("resources") is not None:
        shape["resources"] = _sorted_map((spec.get("resources") or {}).get("requests")) or None
    return {k: shape[k] for k in sorted(shape)}


def role_hash(spec: Obj) -> str:
    """First 8 hex digits of SHA-256 over `{"spec": <shape>}` as Go's json.Marshal writes it."""
    return hashlib.sha256(go_json({"spec": spec_shape(spec)}).encode()).hexdigest()[:8]


# ------------------------------------------------------------------------------------------------
# Defaulting


def default(pod: Obj, namespace: str, config: Configuration, lookups: Lookups, facts: Facts) -> Obj:
    """The pod after Kueue's defaulting (a copy)."""
    pod = copy.deepcopy(pod)
    by_parent = suspended_by_parent(pod)
    managed = False
    if not by_parent:
        if not common.namespace_managed(config, facts) or facts.managed_ancestor:
            return pod
        common.apply_default_local_queue(pod, namespace, config, lookups, facts, check_owner=False)
        common.apply_default_priority_class(pod, config, lookups)
        managed = bool(common.queue_name(pod)) or config.manage_jobs_without_queue_name
        if managed:
            common.set_label(pod, api.LABEL_MANAGED, api.VALUE_TRUE)
    if managed or by_parent:
        meta = pod.setdefault("metadata", {})
        if not by_parent and api.FINALIZER_MANAGED not in (meta.get("finalizers") or ()):
            meta["finalizers"] = [*(meta.get("finalizers") or ()), api.FINALIZER_MANAGED]
        spec = pod.setdefault("spec", {})
        if not is_gated(pod):
            spec["schedulingGates"] = [
                *(spec.get("schedulingGates") or ()),
                {"name": api.SCHEDULING_GATE_ADMISSION},
            ]
        common.set_annotation(pod, api.ANNOTATION_ROLE_HASH, role_hash(spec))
    return pod


# ------------------------------------------------------------------------------------------------
# Validation


def _validate_managed_label(pod: Obj) -> list[FieldError]:
    value = common.labels_of(pod).get(api.LABEL_MANAGED)
    if value is not None and value != api.VALUE_TRUE:
        return [fields.forbidden(MANAGED_LABEL_PATH, api.MSG_MANAGED_LABEL_VALUE)]
    return []


def _validate_group_metadata(pod: Obj) -> list[FieldError]:
    annotations = common.annotations_of(pod)
    total = annotations.get(api.ANNOTATION_POD_GROUP_TOTAL_COUNT)
    both = api.msg_group_metadata_both(api.ANNOTATION_POD_GROUP_TOTAL_COUNT, api.LABEL_POD_GROUP_NAME)
    errors: list[FieldError] = []
    name = group_name(pod)
    if not name:
        if total is not None:
            return [fields.required(_group_name_path(pod), both)]
    else:
        path = _group_name_path(pod)
        problems = fields.dns1123_subdomain_errors(name)
        if problems:
            errors.append(fields.invalid(path, name, ",".join(problems)))
        if total is None:
            return [*errors, fields.required(TOTAL_COUNT_PATH, both)]
    if total is not None and name:
        try:
            count = fields.atoi(total)
        except fields.GoParseError as exc:
            return [*errors, fields.invalid(TOTAL_COUNT_PATH, total, str(exc))]
        if count < 1:
            message = api.msg_group_total_count_not_positive(api.ANNOTATION_POD_GROUP_TOTAL_COUNT, total)
            return [*errors, fields.invalid(TOTAL_COUNT_PATH, total, message)]
    return errors


def _validate_prebuilt_matches_group(pod: Obj) -> list[FieldError]:
    prebuilt, name = prebuilt_workload_name(pod), group_name(pod)
    if prebuilt and name and prebuilt != name:
        path = LABELS.key(api.LABEL_PREBUILT_WORKLOAD_NAME)
        return [fields.invalid(path, str(path), api.MSG_PREBUILT_NOT_GROUP)]
    return []


def _validate_common(pod: Obj) -> list[FieldError]:
    return fields.joined(
        _validate_managed_label(pod), _validate_group_metadata(pod), _validate_prebuilt_matches_group(pod)
    )


def _unretriable(pod: Obj) -> bool:
    return common.annotations_of(pod).get(api.ANNOTATION_RETRIABLE_IN_GROUP) == api.VALUE_FALSE


def warnings(pod: Obj, config: Configuration) -> list[str]:
    if common.labels_of(pod).get(api.LABEL_MANAGED) == api.VALUE_TRUE and common.owner_kind_managed(
        pod, config
    ):
        return [api.warning_pod_managed_label_with_managed_owner()]
    return []


def validate_create(pod: Obj) -> list[FieldError]:
    return fields.joined(common.validate_job_on_create(pod, GVK), _validate_common(pod))


def validate_update(old: Obj, new: Obj, namespace: str, lookups: Lookups) -> list[FieldError]:
    errors = common.validate_job_on_update(
        old,
        new,
        old_suspended=is_gated(old),
        new_suspended=is_gated(new),
        namespace=namespace,
        lookups=lookups,
        gvk=GVK,
    )
    errors += _validate_common(new)
    if group_name(new) and _unretriable(old) and not _unretriable(new):
        errors.append(fields.forbidden(RETRIABLE_PATH, api.MSG_UNRETRIABLE_GROUP))
    if group_name(old):
        errors += fields.immutable(group_name(new), group_name(old), _group_name_path(old))
    return errors
