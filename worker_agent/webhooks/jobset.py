"""JobSet (jobset.x-k8s.io/v1alpha2) webhooks: defaulting on create, validation on create/update.

Defaulting, in upstream's order: the namespace's default LocalQueue, the default
WorkloadPriorityClass, `spec.suspend: true` for a JobSet Kueue will manage, and
`spec.managedBy: kueue.x-k8s.io/multikueue` when the JobSet's LocalQueue feeds a ClusterQueue with a
MultiKueue AdmissionCheck (only over no managedBy or the JobSet controller's own value).

Validation is the jobframework's, as for batch/v1 Jobs: queue name, prebuilt Workload name (supported
for JobSets), maximum execution time, elastic jobs (not supported for JobSets), and on update the
label rules that depend on the JobSet being suspended. Upstream's only `spec.replicatedJobs[i]` field
errors come from Topology-Aware Scheduling requests, which this project does not implement (nor does
its Job webhook).
"""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api, features, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, FieldError
from worker_agent.webhooks import common
from worker_agent.webhooks.common import Facts, Lookups

Obj = dict[str, Any]
GVK = api.JOB_SET.gvk
ELASTIC_GATE = "ElasticJobsViaWorkloadSlices"


def _spec(job_set: Obj) -> Obj:
    return job_set.get("spec") or {}


def is_suspended(job_set: Obj) -> bool:
    return _spec(job_set).get("suspend") is True


def default(job_set: Obj, namespace: str, config: Configuration, lookups: Lookups, facts: Facts) -> Obj:
    """The JobSet after Kueue's defaulting (a copy; the input is left alone)."""
    job_set = copy.deepcopy(job_set)
    common.apply_default_local_queue(job_set, namespace, config, lookups, facts)
    common.apply_default_priority_class(job_set, config, lookups)
    if common.should_suspend(job_set, config, facts) and not is_suspended(job_set):
        job_set.setdefault("spec", {})["suspend"] = True
    apply_default_managed_by(job_set, namespace, config, lookups)
    return job_set


def apply_default_managed_by(job_set: Obj, namespace: str, config: Configuration, lookups: Lookups) -> None:
    """CanDefaultManagedBy: MultiKueue on, and managedBy unset or the JobSet controller's."""
    managed_by = _spec(job_set).get("managedBy")
    if managed_by not in (None, api.JOB_SET_MANAGED_BY_DEFAULT) or not common.gate(
        config, features.MULTIKUEUE
    ):
        return
    queue = common.queue_name(job_set)
    if queue and lookups.synced() and lookups.multikueue_cluster_queue(namespace, queue):
        job_set.setdefault("spec", {})["managedBy"] = api.MULTIKUEUE_CONTROLLER_NAME


# ------------------------------------------------------------------------------------------------
# Validation


def _validate_elastic(job_set: Obj, config: Configuration) -> list[FieldError]:
    if common.elastic_enabled(job_set) and common.gate(config, ELASTIC_GATE):
        return [
            fields.forbidden(ANNOTATIONS.key(api.ANNOTATION_ELASTIC_JOB), api.msg_elastic_not_supported(GVK))
        ]
    return []


def validate_create(job_set: Obj, config: Configuration) -> list[FieldError]:
    return fields.joined(common.validate_job_on_create(job_set, GVK), _validate_elastic(job_set, config))


def validate_update(
    old: Obj, new: Obj, namespace: str, lookups: Lookups, config: Configuration
) -> list[FieldError]:
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
    return errors + validate_create(new, config)
