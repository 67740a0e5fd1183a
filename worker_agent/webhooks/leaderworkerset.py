"""LeaderWorkerSet webhooks.

Defaulting stamps the pod templates of a managed LWS so that the pod webhook gates its pods
without queue checks and the pod-group integration treats each group as a serving group: the
templates get the LWS's `queue-name` and `priority-class` labels and the annotations
`kueue.x-k8s.io/pod-suspending-parent: leaderworkerset.x-k8s.io/leaderworkerset` and
`kueue.x-k8s.io/pod-group-serving: "true"`.
"""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api, features, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, FieldError, Path
from worker_agent.webhooks import common, pod
from worker_agent.webhooks.common import QUEUE_NAME_PATH, Facts, Lookups

Obj = dict[str, Any]
GVK = api.LEADER_WORKER_SET.gvk
TEMPLATE_PATH = Path("spec", "leaderWorkerTemplate")
LEADER_PATH = TEMPLATE_PATH.child("leaderTemplate")
WORKER_PATH = TEMPLATE_PATH.child("workerTemplate")


def _lwt(lws: Obj) -> Obj:
    return (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}


def _ready_replicas(lws: Obj) -> int:
    return int((lws.get("status") or {}).get("readyReplicas") or 0)


def _stamp_template(template: Obj, queue: str, priority_class: str) -> None:
    if queue:
        common.set_label(template, api.LABEL_QUEUE_NAME, queue)
    if priority_class:
        common.set_label(template, api.LABEL_PRIORITY_CLASS, priority_class)
    common.set_annotation(
        template, api.ANNOTATION_POD_SUSPENDING_PARENT, api.POD_SUSPENDING_PARENT_LEADER_WORKER_SET
    )
    common.set_annotation(template, api.ANNOTATION_POD_GROUP_SERVING, api.VALUE_TRUE)


def default(lws: Obj, namespace: str, config: Configuration, lookups: Lookups, facts: Facts) -> Obj:
    """The LWS after Kueue's defaulting (a copy)."""
    lws = copy.deepcopy(lws)
    common.apply_default_local_queue(lws, namespace, config, lookups, facts)
    common.apply_default_priority_class(lws, config, lookups)
    if common.should_suspend(lws, config, facts):
        lwt = lws.setdefault("spec", {}).setdefault("leaderWorkerTemplate", {})
        queue, priority_class = common.queue_name(lws), common.priority_class_name(lws)
        if lwt.get("leaderTemplate") is not None:
            _stamp_template(lwt["leaderTemplate"], queue, priority_class)
        _stamp_template(lwt.setdefault("workerTemplate", {}), queue, priority_class)
    return lws


# ------------------------------------------------------------------------------------------------
# Validation


def _validate_common(lws: Obj) -> list[FieldError]:
    errors = common.validate_queue_name(lws)
    replicas = (lws.get("spec") or {}).get("replicas")
    if replicas is not None and not 0 <= replicas <= api.LWS_MAX_REPLICAS:
        errors.append(
            fields.invalid(
                Path("spec", "replicas"), replicas, api.msg_inclusive_range(0, api.LWS_MAX_REPLICAS)
            )
        )
    if api.ANNOTATION_ELASTIC_JOB in common.annotations_of(lws):
        errors.append(
            fields.forbidden(ANNOTATIONS.key(api.ANNOTATION_ELASTIC_JOB), api.msg_elastic_not_supported(GVK))
        )
    return errors


def validate_create(lws: Obj) -> list[FieldError]:
    return _validate_common(lws)


def _shape_changes(new: Any, old: Any, path: Path) -> list[FieldError]:
    if isinstance(new, dict) and isinstance(old, dict):
        errors: list[FieldError] = []
        for key in sorted(set(new) | set(old)):
            errors += _shape_changes(new.get(key), old.get(key), path.child(key))
        return errors
    if (
        isinstance(new, list)
        and isinstance(old, list)
        and len(new) == len(old)
        and all(isinstance(x, dict) for x in new + old)
    ):
        return [
            e
            for i, (n, o) in enumerate(zip(new, old, strict=True))
            for e in _shape_changes(n, o, path.index(i))
        ]
    return fields.immutable(new, old, path)


def _validate_template_unchanged(new: Obj | None, old: Obj | None, path: Path) -> list[FieldError]:
    if new is None or old is None:
        return fields.immutable(new, old, path)
    new_shape = pod.spec_shape(new.get("spec") or {})
    old_shape = pod.spec_shape(old.get("spec") or {})
    return _shape_changes(new_shape, old_shape, path.child("spec"))


def validate_update(old: Obj, new: Obj, config: Configuration, facts: Facts) -> list[FieldError]:
    errors = _validate_common(new)
    # The queue name is fixed once a group runs, and cannot be removed.
    if _ready_replicas(old) > 0 or not common.queue_name(new):
        errors += fields.immutable(common.queue_name(new), common.queue_name(old), QUEUE_NAME_PATH)
    errors += common.validate_priority_class_update(_ready_replicas(old) == 0, old, new)
    if common.should_suspend(new, config, facts):
        new_lwt, old_lwt = _lwt(new), _lwt(old)
        errors += _validate_template_unchanged(
            new_lwt.get("leaderTemplate"), old_lwt.get("leaderTemplate"), LEADER_PATH
        )
        errors += _validate_template_unchanged(
            new_lwt.get("workerTemplate") or {}, old_lwt.get("workerTemplate") or {}, WORKER_PATH
        )
        if common.gate(config, features.LWS_IMMUTABLE_GROUP_SIZE):
            errors += fields.immutable(
                new_lwt.get("size", 1), old_lwt.get("size", 1), TEMPLATE_PATH.child("size")
            )
    return errors
