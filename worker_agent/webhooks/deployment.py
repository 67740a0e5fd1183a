"""Deployment webhooks (upstream's deployment integration: a webhook and nothing else).

Defaulting hands a managed Deployment's pods to the pod integration, one Workload per pod: the pod
template gets the annotation `kueue.x-k8s.io/pod-suspending-parent: deployment` (so the pod webhook
gates its pods without queue checks), the label `kueue.x-k8s.io/managed: "true"` and the
Deployment's `queue-name` and `priority-class` labels. Validation keeps the queue name fixed once a
replica is ready (and never lets it be removed) and the priority class as for any job.
"""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, FieldError
from worker_agent.webhooks import common
from worker_agent.webhooks.common import QUEUE_NAME_PATH, Facts, Lookups

Obj = dict[str, Any]
GVK = api.DEPLOYMENT.gvk
ELASTIC_GATE = "ElasticJobsViaWorkloadSlices"


def default(deployment: Obj, namespace: str, config: Configuration, lookups: Lookups, facts: Facts) -> Obj:
    """The Deployment after Kueue's defaulting (a copy)."""
    deployment = copy.deepcopy(deployment)
    common.apply_default_local_queue(deployment, namespace, config, lookups, facts)
    common.apply_default_priority_class(deployment, config, lookups)
    if common.should_suspend(deployment, config, facts):
        template = deployment.setdefault("spec", {}).setdefault("template", {})
        common.set_annotation(template, api.ANNOTATION_POD_SUSPENDING_PARENT, api.FRAMEWORK_DEPLOYMENT)
        common.set_label(template, api.LABEL_MANAGED, api.VALUE_TRUE)
        queue, priority_class = common.queue_name(deployment), common.priority_class_name(deployment)
        if queue:
            common.set_label(template, api.LABEL_QUEUE_NAME, queue)
        if priority_class:
            common.set_label(template, api.LABEL_PRIORITY_CLASS, priority_class)
    return deployment


def _validate_common(deployment: Obj, config: Configuration) -> list[FieldError]:
    errors = common.validate_queue_name(deployment)
    if common.elastic_enabled(deployment) and common.gate(config, ELASTIC_GATE):
        errors.append(
            fields.forbidden(ANNOTATIONS.key(api.ANNOTATION_ELASTIC_JOB), api.msg_elastic_not_supported(GVK))
        )
    return errors


def validate_create(deployment: Obj, config: Configuration) -> list[FieldError]:
    return _validate_common(deployment, config)


def validate_update(old: Obj, new: Obj, config: Configuration) -> list[FieldError]:
    errors = _validate_common(new, config)
    suspended = int((old.get("status") or {}).get("readyReplicas") or 0) == 0
    if not suspended or not common.queue_name(new):
        errors += fields.immutable(common.queue_name(new), common.queue_name(old), QUEUE_NAME_PATH)
    errors += common.validate_priority_class_update(suspended, old, new)
    return errors
