"""TrainJob (trainer.kubeflow.org/v1alpha1) webhooks: defaulting on create, validation on create/update.

Defaulting is the job framework's (managedBy over unset or the Trainer controller's own value;
upstream defaults managedBy before suspend, which gives the same object: neither reads the other),
then the runtime patch of manager `kueue.x-k8s.io/manager` that the integration writes podset info
into (upstream appends it on every create; here only when the TrainJob has none yet).

Validation is the jobframework's, as for batch/v1 Jobs and JobSets: queue name, prebuilt Workload
name, maximum execution time, and on update the label rules that depend on the TrainJob being
suspended. Upstream's other errors come from Topology-Aware Scheduling requests, which this project
does not implement.
"""

from __future__ import annotations

from typing import Any

from kueue_domain import api
from kueue_domain.fields import FieldError
from worker_agent.integrations.trainjob import kueue_runtime_patch, new_kueue_runtime_patch
from worker_agent.webhooks.common import Lookups
from worker_agent.webhooks.jobframework import JobWebhook

Obj = dict[str, Any]
GVK = api.TRAIN_JOB.gvk


def add_kueue_runtime_patch(train_job: Obj) -> None:
    """The runtime patch the integration writes podset info into, when the TrainJob has none yet."""
    if kueue_runtime_patch(train_job) is None:
        train_job.setdefault("spec", {}).setdefault("runtimePatches", []).append(new_kueue_runtime_patch())


WEBHOOK = JobWebhook(GVK, api.TRAIN_JOB_MANAGED_BY_DEFAULT, own_defaults=add_kueue_runtime_patch)
default = WEBHOOK.default


def validate_create(train_job: Obj) -> list[FieldError]:
    return WEBHOOK.validate_create(train_job, None)


def validate_update(old: Obj, new: Obj, namespace: str, lookups: Lookups) -> list[FieldError]:
    return WEBHOOK.validate_update(old, new, namespace, lookups, None)
