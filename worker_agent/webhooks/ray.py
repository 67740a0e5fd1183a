"""RayJob and RayCluster (ray.io/v1) webhooks: the job framework's defaulting (managedBy over unset
or KubeRay's own `ray.io/kuberay-operator`), and upstream's checks of a Kueue-managed one (a
queue name, or manageJobsWithoutQueueName), before the jobframework's create checks.

RayJob: no `clusterSelector` together with a `rayClusterSpec`; a `rayClusterSpec` when there is no
`clusterSelector` (a RayJob with only a clusterSelector runs on an existing cluster, which Kueue
does not manage); `shutdownAfterJobFinishes: true`; then the cluster spec's checks. RayCluster: the
cluster spec's checks (localfleet-independent, worker_agent.integrations.ray). In-tree autoscaling
is refused: upstream allows it only for an elastic job (workload slices), not implemented here.

On update the checks run only for a Kueue-managed object, or one that was
(ShouldValidateRayOrSparkJobOnUpdate, with ValidateRayAndSparkJobUpdates on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kueue_domain import api, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import FieldError, Path
from worker_agent.integrations import ray
from worker_agent.webhooks import common
from worker_agent.webhooks.common import Lookups
from worker_agent.webhooks.jobframework import JobWebhook

Obj = dict[str, Any]
SPEC = Path("spec")
VALIDATE_UPDATES_GATE = "ValidateRayAndSparkJobUpdates"
MSG_EXISTING_CLUSTER = "a kueue managed job should not use an existing cluster"
MSG_CLUSTER_SPEC_REQUIRED = "rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector"
MSG_SHUTDOWN = "a kueue managed job should delete the cluster after finishing"
MSG_RAY_JOB_AUTOSCALING = "a kueue managed job should only use autoscaling when workload slicing is enabled"
MSG_RAY_CLUSTER_AUTOSCALING = (
    "a kueue-managed RayCluster can use autoscaling only as an elastic job: enable the "
    'ElasticJobsViaWorkloadSlices feature gate and set the "kueue.x-k8s.io/elastic-job": "true" annotation'
)


def kueue_managed(obj: Obj, config: Configuration | None) -> bool:
    return bool(common.queue_name(obj)) or bool(config and config.manage_jobs_without_queue_name)


def ray_job_errors(ray_job: Obj) -> tuple[list[FieldError], bool]:
    """(errors, whether the jobframework's checks follow): upstream returns early, without them,
    for a RayJob on an existing cluster and for one without a cluster spec."""
    spec = ray_job.get("spec") or {}
    selector, cluster_spec = spec.get("clusterSelector") or {}, spec.get("rayClusterSpec")
    if selector and cluster_spec is not None:
        return [fields.invalid(SPEC.child("clusterSelector"), selector, MSG_EXISTING_CLUSTER)], False
    if selector:
        return [], False
    if cluster_spec is None:
        return [fields.required(SPEC.child("rayClusterSpec"), MSG_CLUSTER_SPEC_REQUIRED)], False
    errors = []
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    if not shutdown:
        errors.append(fields.invalid(SPEC.child("shutdownAfterJobFinishes"), shutdown, MSG_SHUTDOWN))
    path = SPEC.child("rayClusterSpec")
    return errors + ray.cluster_spec_errors(cluster_spec, path, MSG_RAY_JOB_AUTOSCALING), True


def ray_cluster_errors(ray_cluster: Obj) -> tuple[list[FieldError], bool]:
    return ray.cluster_spec_errors(ray_cluster.get("spec") or {}, SPEC, MSG_RAY_CLUSTER_AUTOSCALING), True


def ray_service_errors(ray_service: Obj) -> tuple[list[FieldError], bool]:
    """Its cluster's checks, at upstream's path (the Go field's name, `rayClusterSpec`)."""
    cluster_spec = (ray_service.get("spec") or {}).get("rayClusterConfig") or {}
    return ray.cluster_spec_errors(cluster_spec, SPEC.child("rayClusterSpec"), MSG_RAY_JOB_AUTOSCALING), True


def ray_service_suspended(ray_service: Obj) -> bool:
    return ((ray_service.get("spec") or {}).get("rayClusterConfig") or {}).get("suspend") is True


def _no_errors(obj: Obj) -> tuple[list[FieldError], bool]:
    return [], True


@dataclass(frozen=True)
class RayWebhook(JobWebhook):
    """The kind's checks come first, then the jobframework's, as upstream orders them."""

    kind_errors: Any = _no_errors  # Callable[[Obj], tuple[list[FieldError], bool]]

    def validate_create(self, obj: Obj, config: Configuration | None) -> list[FieldError]:
        own, go_on = self.kind_errors(obj) if kueue_managed(obj, config) else ([], True)
        return own + common.validate_job_on_create(obj, self.gvk) if go_on else own

    def validate_update(
        self, old: Obj, new: Obj, namespace: str, lookups: Lookups, config: Configuration | None
    ) -> list[FieldError]:
        was_managed = bool(common.queue_name(old)) and (
            config is None or common.gate(config, VALIDATE_UPDATES_GATE)
        )
        if not kueue_managed(new, config) and not was_managed:
            return []
        return self.validate_job_on_update(old, new, namespace, lookups) + self.validate_create(new, config)


RAY_JOB_WEBHOOK = RayWebhook(api.RAY_JOB.gvk, ray.KUBERAY_CONTROLLER, kind_errors=ray_job_errors)
RAY_CLUSTER_WEBHOOK = RayWebhook(api.RAY_CLUSTER.gvk, ray.KUBERAY_CONTROLLER, kind_errors=ray_cluster_errors)
RAY_SERVICE_WEBHOOK = RayWebhook(
    api.RAY_SERVICE.gvk,
    ray.KUBERAY_CONTROLLER,
    is_suspended=ray_service_suspended,
    suspend_path=("spec", "rayClusterConfig", "suspend"),
    kind_errors=ray_service_errors,
)
