"""What RayJobs and RayClusters (KubeRay, ray.io/v1) share: a RayCluster spec's PodSets and pod
templates, and its checks (upstream's pkg/controller/jobs/raycluster common.go).

A RayCluster spec gives one PodSet `head` (count 1, the head group's pod template) and then one
per worker group, in order, named after its `groupName` with count replicas (1 when unset) x
numOfHosts. Containers KubeRay adds to the head pod at creation are counted in the head PodSet:
the autoscaler sidecar with in-tree autoscaling (its resources from autoscalerOptions, else
KubeRay's 500m / 512Mi), and with GCS fault tolerance (the `ray.io/ft-enabled: "true"`
annotation or gcsFaultToleranceOptions) the Ray container's requests raised to at least the
Redis cleanup Job's 200m / 256Mi.
"""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api, fields
from kueue_domain.fields import FieldError, Path
from kueue_domain.resources import parse_quantity
from worker_agent.integrations import framework
from worker_agent.integrations.jobframework import templated

Obj = dict[str, Any]

HEAD = "head"  # the head group's PodSet
MAX_POD_SETS = 18  # jobframework.MaxPodSets
KUBERAY_CONTROLLER = "ray.io/kuberay-operator"  # spec.managedBy of KubeRay's own controller
FT_ENABLED_ANNOTATION = "ray.io/ft-enabled"
AUTOSCALER_CONTAINER = "autoscaler"
AUTOSCALER_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}
REDIS_CLEANUP_REQUESTS = {"cpu": "200m", "memory": "256Mi"}
# RayCluster status.state
STATE_READY = "ready"
STATE_FAILED = "failed"


def worker_groups(cluster_spec: Obj) -> list[Obj]:
    return list(cluster_spec.get("workerGroupSpecs") or ())


def worker_count(group: Obj) -> int:
    """effectiveWorkerCount: replicas (1 when unset) x numOfHosts (when above 1)."""
    count = 1 if group.get("replicas") is None else int(group["replicas"])
    hosts = int(group.get("numOfHosts") or 1)
    return count * hosts if hosts > 1 else count


def expected_podsets_count(cluster_spec: Obj) -> int:
    return len(worker_groups(cluster_spec)) + 1


def autoscaling(cluster_spec: Obj) -> bool:
    return cluster_spec.get("enableInTreeAutoscaling") is True


def gcs_fault_tolerance(cluster_spec: Obj, annotations: dict[str, str]) -> bool:
    """IsGCSFaultToleranceEnabled."""
    return (annotations.get(FT_ENABLED_ANNOTATION) or "").lower() == "true" or bool(
        cluster_spec.get("gcsFaultToleranceOptions")
    )


def _keep_max(requests: Obj, floor: Obj) -> Obj:
    """MergeResourceListKeepMax: each of `floor`'s resources at least its value."""
    merged = dict(requests)
    for name, value in floor.items():
        if name not in merged or parse_quantity(str(merged[name])) < parse_quantity(value):
            merged[name] = value
    return merged


def head_podset(cluster_spec: Obj, annotations: dict[str, str]) -> Obj:
    head = (cluster_spec.get("headGroupSpec") or {}).get("template")
    template = framework.template_for_podset(head)
    containers = template["spec"].setdefault("containers", [])
    if gcs_fault_tolerance(cluster_spec, annotations) and containers:
        resources = containers[0].setdefault("resources", {})
        resources["requests"] = _keep_max(resources.get("requests") or {}, REDIS_CLEANUP_REQUESTS)
    if autoscaling(cluster_spec):
        options = cluster_spec.get("autoscalerOptions") or {}
        resources = copy.deepcopy(options.get("resources") or AUTOSCALER_RESOURCES)
        containers.append({"name": AUTOSCALER_CONTAINER, "resources": resources})
    return {"name": HEAD, "count": 1, "template": template}


def cluster_podsets(cluster_spec: Obj, annotations: dict[str, str]) -> list[Obj]:
    """BuildPodSets: `head`, then one PodSet per worker group."""
    podsets = [head_podset(cluster_spec, annotations)]
    for group in worker_groups(cluster_spec):
        podsets.append(
            {
                "name": group.get("groupName", ""),
                "count": worker_count(group),
                "template": framework.template_for_podset(group.get("template")),
            }
        )
    return podsets


def cluster_pod_templates(cluster_spec: Obj) -> list[tuple[str, Obj]]:
    """(PodSet name, the pod template inside `cluster_spec`) for the head and every worker group,
    the PodSets' order: what is started with the podset infos and restored from the Workload."""
    head = cluster_spec.setdefault("headGroupSpec", {}).setdefault("template", {})
    templates = [(HEAD, head)]
    for group in cluster_spec.get("workerGroupSpecs") or ():
        templates.append((group.get("groupName", ""), group.setdefault("template", {})))
    return templates


def pods_ready(cluster_status: Obj) -> bool:
    return cluster_status.get("state") == STATE_READY


# ------------------------------------------------------------------------------------------------
# Checks (the webhooks')


def too_many(path: Path, actual: int, maximum: int) -> FieldError:
    """field.TooMany."""
    return FieldError(str(path), "Too many", f"must have at most {maximum} items", actual)


def cluster_spec_errors(cluster_spec: Obj, path: Path, autoscaling_message: str) -> list[FieldError]:
    """A Kueue-managed RayCluster spec: no in-tree autoscaling (workload slices are not
    implemented here, so never as an elastic job either), at most MAX_POD_SETS PodSets, no worker
    group named `head`."""
    errors = []
    if autoscaling(cluster_spec):
        errors.append(fields.invalid(path.child("enableInTreeAutoscaling"), True, autoscaling_message))
    count = expected_podsets_count(cluster_spec)
    if count > MAX_POD_SETS:
        errors.append(too_many(path.child("workerGroupSpecs"), count, MAX_POD_SETS))
    for i, group in enumerate(worker_groups(cluster_spec)):
        if group.get("groupName") == HEAD:
            errors.append(
                fields.forbidden(
                    path.child("workerGroupSpecs").index(i).child("groupName"),
                    f"{api.go_quote(HEAD)} is reserved for the head group",
                )
            )
    return errors


class RayReconciler(templated.TemplatedReconciler):
    """What the KubeRay kinds declare alike: KubeRay's managedBy, no reclaimable pods (a Ray cluster
    keeps its pods until it is deleted or suspended)."""

    managed_by_default = KUBERAY_CONTROLLER

    def reclaimable_pods(self, obj: Obj, wl: Obj) -> list[Obj]:
        return []
