"""TrainJob (trainer.kubeflow.org/v1alpha1) webhooks: defaulting on create, validation on create/update.

Defaulting, in upstream's order: the namespace's default LocalQueue, the default
WorkloadPriorityClass, `spec.managedBy: kueue.x-k8s.io/multikueue` when the TrainJob's LocalQueue
feeds a ClusterQueue with a MultiKueue AdmissionCheck (only over no managedBy or the Trainer
controller's own value, CanDefaultManagedBy), `spec.suspend: true` for a TrainJob Kueue will manage,
and the runtime patch of manager `kueue.x-k8s.io/manager` that the integration writes podset info
into (upstream appends it on every create; here only when the TrainJob has none yet).

Validation is the jobframework's, as for batch/v1 Jobs and JobSets: queue name, prebuilt Workload
name, maximum execution time, and on update the label rules that depend on the TrainJob being
suspended. Upstream's other errors come from Topology-Aware Scheduling requests, which this project
does not implement.
"""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api, features
from kueue_domain.config import Configuration
from kueue_domain.fields import FieldError
from worker_agent.integrations.trainjob import kueue_runtime_patch, new_kueue_runtime_patch
from worker_agent.webhooks import common
from worker_agent.webhooks.common import Facts, Lookups

Obj = dict[str, Any]
GVK = api.TRAIN_JOB.gvk


def _spec(train_job: Obj) -> Obj:
    return train_job.get("spec") or {}


def is_suspended(train_job: Obj) -> bool:
    return _spec(train_job).get("suspend") is True


def default(train_job: Obj, namespace: str, config: Configuration, lookups: Lookups, facts: Facts) -> Obj:
    """The TrainJob after Kueue's defaulting (a copy; the input is left alone)."""
    train_job = copy.deepcopy(train_job)
    common.apply_default_local_queue(train_job, namespace, config, lookups, facts)
    common.apply_default_priority_class(train_job, config, lookups)
    apply_default_managed_by(train_job, namespace, config, lookups)
    if common.should_suspend(train_job, config, facts) and not is_suspended(train_job):
        train_job.setdefault("spec", {})["suspend"] = True
    if kueue_runtime_patch(train_job) is None:
        train_job.setdefault("spec", {}).setdefault("runtimePatches", []).append(new_kueue_runtime_patch())
    return train_job


def apply_default_managed_by(train_job: Obj, namespace: str, config: Configuration, lookups: Lookups) -> None:
    """CanDefaultManagedBy: MultiKueue on, and managedBy unset or the Trainer controller's."""
    managed_by = _spec(train_job).get("managedBy")
    if managed_by not in (None, api.TRAIN_JOB_MANAGED_BY_DEFAULT) or not common.gate(
        config, features.MULTIKUEUE
    ):
        return
    queue = common.queue_name(train_job)
    if queue and lookups.synced() and lookups.multikueue_cluster_queue(namespace, queue):
        train_job.setdefault("spec", {})["managedBy"] = api.MULTIKUEUE_CONTROLLER_NAME


def validate_create(train_job: Obj) -> list[FieldError]:
    return common.validate_job_on_create(train_job, GVK)


def validate_update(old: Obj, new: Obj, namespace: str, lookups: Lookups) -> list[FieldError]:
    """ValidateJobOnUpdate first, then everything ValidateCreate checks, as upstream orders them."""
    errors = common.validate_job_on_update(
        old,
        new,
        old_suspended=is_suspended(old),
        new_suspended=is_suspended(new),
        namespace=namespace,
        lookups=lookups,
        gvk=GVK,
    )
    return errors + validate_create(new)
