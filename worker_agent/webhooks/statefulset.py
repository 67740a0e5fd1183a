"""StatefulSet webhooks (upstream's statefulset integration).

Defaulting stamps a managed StatefulSet's pod template with `kueue.x-k8s.io/pod-suspending-parent:
statefulset`, so that the pod webhook gates its pods without queue checks; a StatefulSet whose
template another framework (a LeaderWorkerSet) already stamped is left alone. Each pod the
StatefulSet controller creates is then made a member of the StatefulSet's one pod group
(`stamp_pod`, upstream's statefulset pod reconciler, applied here as the pod is created): the
managed label, the queue and priority-class labels, the group name and the prebuilt Workload name
(`statefulset-<name>-<hash>`, from the StatefulSet's UID, or on a MultiKueue worker from the
manager's, `kueue.x-k8s.io/multikueue-origin-uid`), the total count (`spec.replicas`), a serving
group with fast admission, and the role `main`.
"""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api, fields, naming
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, FieldError, Path
from worker_agent.webhooks import common, pod
from worker_agent.webhooks.common import QUEUE_NAME_PATH, Facts, Lookups

Obj = dict[str, Any]
GVK = api.STATEFUL_SET.gvk
FRAMEWORK = "statefulset"
ELASTIC_GATE = "ElasticJobsViaWorkloadSlices"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REPLICAS_PATH = Path("spec", "replicas")
POD_SPEC_PATH = Path("spec", "template", "spec")


def _template(sts: Obj) -> Obj:
    return (sts.get("spec") or {}).get("template") or {}


def managed_by_another_framework(sts: Obj) -> bool:
    parent = ((_template(sts).get("metadata") or {}).get("annotations") or {}).get(
        api.ANNOTATION_POD_SUSPENDING_PARENT
    )
    return parent is not None and parent != FRAMEWORK


def replicas(sts: Obj) -> int:
    value = (sts.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def owner_uid(sts: Obj) -> str:
    """GetOwnerUID: on a MultiKueue worker, the manager's StatefulSet UID the copy carries."""
    meta = sts["metadata"]
    if (meta.get("labels") or {}).get(api.LABEL_MULTIKUEUE_ORIGIN):
        return (meta.get("annotations") or {}).get(api.ANNOTATION_MULTIKUEUE_ORIGIN_UID) or meta.get(
            "uid", ""
        )
    return meta.get("uid", "")


def workload_name(sts: Obj) -> str:
    return naming.workload_name(sts["metadata"]["name"], owner_uid(sts), api.STATEFUL_SET.kind, "apps")


def default(sts: Obj, namespace: str, config: Configuration, lookups: Lookups, facts: Facts) -> Obj:
    """The StatefulSet after Kueue's defaulting (a copy)."""
    if managed_by_another_framework(sts):
        return sts
    sts = copy.deepcopy(sts)
    common.apply_default_local_queue(sts, namespace, config, lookups, facts)
    common.apply_default_priority_class(sts, config, lookups)
    if common.should_suspend(sts, config, facts):
        template = sts.setdefault("spec", {}).setdefault("template", {})
        common.set_annotation(template, api.ANNOTATION_POD_SUSPENDING_PARENT, FRAMEWORK)
    return sts


def stamp_pod(pod_obj: Obj, sts: Obj, config: Configuration) -> Obj:
    """The pod made a member of its StatefulSet's pod group (a copy); unchanged when the
    StatefulSet is not Kueue's."""
    queue = common.queue_name(sts)
    name = workload_name(sts)
    out = copy.deepcopy(pod_obj)
    if pod.group_name(out) == name:
        if queue:
            common.set_label(out, api.LABEL_QUEUE_NAME, queue)
        return out
    if not queue and not config.manage_jobs_without_queue_name:
        return out
    common.set_label(out, api.LABEL_MANAGED, api.VALUE_TRUE)
    if queue:
        common.set_label(out, api.LABEL_QUEUE_NAME, queue)
    priority_class = common.priority_class_name(sts)
    if priority_class:
        common.set_label(out, api.LABEL_PRIORITY_CLASS, priority_class)
    common.set_annotation(out, api.ANNOTATION_PREBUILT_WORKLOAD_NAME, name)
    common.set_annotation(out, api.ANNOTATION_POD_GROUP_NAME, name)
    common.set_annotation(out, api.ANNOTATION_POD_GROUP_TOTAL_COUNT, str(replicas(sts)))
    common.set_annotation(out, api.ANNOTATION_POD_GROUP_FAST_ADMISSION, api.VALUE_TRUE)
    common.set_annotation(out, api.ANNOTATION_POD_GROUP_SERVING, api.VALUE_TRUE)
    common.set_annotation(out, api.ANNOTATION_POD_GROUP_POD_INDEX_LABEL, POD_INDEX_LABEL)
    common.set_annotation(out, api.ANNOTATION_ROLE_HASH, api.ROLE_MAIN)
    return out


# ------------------------------------------------------------------------------------------------
# Validation


def _validate_common(sts: Obj, config: Configuration) -> list[FieldError]:
    errors = common.validate_queue_name(sts)
    if common.elastic_enabled(sts) and common.gate(config, ELASTIC_GATE):
        errors.append(
            fields.forbidden(ANNOTATIONS.key(api.ANNOTATION_ELASTIC_JOB), api.msg_elastic_not_supported(GVK))
        )
    return errors


def validate_create(sts: Obj, config: Configuration) -> list[FieldError]:
    if managed_by_another_framework(sts):
        return []
    return _validate_common(sts, config)


def validate_update(old: Obj, new: Obj, config: Configuration, facts: Facts) -> list[FieldError]:
    if managed_by_another_framework(new):
        return []
    errors = _validate_common(new, config)
    suspended = int((old.get("status") or {}).get("readyReplicas") or 0) == 0
    if not suspended or not common.queue_name(new):
        errors += fields.immutable(common.queue_name(new), common.queue_name(old), QUEUE_NAME_PATH)
    errors += common.validate_priority_class_update(suspended, old, new)
    if common.should_suspend(new, config, facts):
        new_shape = pod.spec_shape(_template(new).get("spec") or {})
        old_shape = pod.spec_shape(_template(old).get("spec") or {})
        errors += fields.immutable(new_shape, old_shape, POD_SPEC_PATH)
        if replicas(new) != 0 and replicas(old) != 0:
            errors += fields.immutable(replicas(new), replicas(old), REPLICAS_PATH)
        if replicas(old) == 0 and replicas(new) > 0:
            if int((new.get("status") or {}).get("replicas") or 0) > 0:
                errors.append(fields.forbidden(REPLICAS_PATH, api.MSG_STS_SCALE_DOWN_IN_PROGRESS))
            elif facts.earlier_workload_on_hold is False:
                errors.append(fields.forbidden(REPLICAS_PATH, api.MSG_STS_WORKLOAD_STILL_DELETED))
    return errors


def scales_up_from_zero(old: Obj, new: Obj) -> bool:
    """An update the webhook checks against the Workload of the earlier scale-down."""
    return (
        replicas(old) == 0 and replicas(new) > 0 and not int((new.get("status") or {}).get("replicas") or 0)
    )
