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

from typing import Any

from kueue_domain import api, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, FieldError
from worker_agent.webhooks import common
from worker_agent.webhooks.jobframework import JobWebhook

Obj = dict[str, Any]
GVK = api.JOB_SET.gvk
ELASTIC_GATE = "ElasticJobsViaWorkloadSlices"


# ------------------------------------------------------------------------------------------------
# Validation


def _validate_elastic(job_set: Obj, config: Configuration) -> list[FieldError]:
    if common.elastic_enabled(job_set) and common.gate(config, ELASTIC_GATE):
        return [
            fields.forbidden(ANNOTATIONS.key(api.ANNOTATION_ELASTIC_JOB), api.msg_elastic_not_supported(GVK))
        ]
    return []


WEBHOOK = JobWebhook(GVK, api.JOB_SET_MANAGED_BY_DEFAULT, create_checks=_validate_elastic)
default = WEBHOOK.default
validate_create = WEBHOOK.validate_create
validate_update = WEBHOOK.validate_update
