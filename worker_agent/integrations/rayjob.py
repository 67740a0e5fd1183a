"""RayJobs (ray.io/v1, integration `ray.io/rayjob`): one Workload `rayjob-<name>-<hash5>` per managed
RayJob, with the PodSets of its `rayClusterSpec` (`head`, then one per worker group) and, in the
K8sJobMode submission mode (the default), a last PodSet `submitter` (count 1) for the Job KubeRay
runs `ray job submit` in: `spec.submitterPodTemplate`, else KubeRay's default submitter pod (one
container `ray-job-submitter`, the head's image, 500m / 200Mi requested). In SidecarMode that
container runs in the head pod, so the head PodSet counts it.

The RayJob starts (`spec.suspend: false`, each PodSet's info merged into its pod template; the
submitter's written to `spec.submitterPodTemplate`, the default one when there was none) when its
Workload is Admitted and is stopped (suspended, templates restored) when it is evicted; the
reservation is released once KubeRay reports it `Suspended`. It finishes its Workload when its
jobDeploymentStatus is `Complete` or `Failed` (succeeded when the Ray job SUCCEEDED, with the
status message). Its pods are ready when its RayCluster is `ready`. A RayJob that runs on an
existing cluster (`spec.clusterSelector`) is not Kueue's (upstream's Skip).

The RayCluster and the submitter Job of a managed RayJob are covered by its Workload
(`manages_child`); on the manager a RayJob managed by MultiKueue shows its worker copy's status
(manager/adapters/rayjob.py).
"""

from __future__ import annotations

from typing import Any

from kueue_domain import api
from worker_agent.integrations import framework, ray

Obj = dict[str, Any]
SUBMITTER = "submitter"  # the submitter Job's PodSet
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}
K8S_JOB_MODE, SIDECAR_MODE = "K8sJobMode", "SidecarMode"
FINISHED = ("Complete", "Failed")  # jobDeploymentStatus
NOT_RUNNING = ("", "Suspended")  # ... when nothing runs ("" is New)


def _spec(ray_job: Obj) -> Obj:
    return ray_job.get("spec") or {}


def submission_mode(ray_job: Obj) -> str:
    return _spec(ray_job).get("submissionMode") or K8S_JOB_MODE  # the CRD's default


def default_submitter_template(ray_job: Obj) -> Obj:
    """KubeRay's default submitter pod, with the head's image."""
    head = ((_spec(ray_job).get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template") or {}
    containers = (head.get("spec") or {}).get("containers") or [{}]
    container = {
        "name": SUBMITTER_CONTAINER,
        "image": containers[0].get("image", ""),
        "resources": SUBMITTER_RESOURCES,
    }
    return {"spec": {"containers": [container], "restartPolicy": "Never"}}


def submitter_template(ray_job: Obj) -> Obj:
    return _spec(ray_job).get("submitterPodTemplate") or default_submitter_template(ray_job)


def podsets(ray_job: Obj) -> list[Obj]:
    meta = ray_job.get("metadata") or {}
    result = ray.cluster_podsets(_spec(ray_job).get("rayClusterSpec") or {}, meta.get("annotations") or {})
    mode = submission_mode(ray_job)
    if mode == SIDECAR_MODE:
        sidecar = {"name": SUBMITTER_CONTAINER, "resources": SUBMITTER_RESOURCES}
        result[0]["template"]["spec"].setdefault("containers", []).append(sidecar)
    if mode == K8S_JOB_MODE:
        template = framework.template_for_podset(submitter_template(ray_job))
        result.append({"name": SUBMITTER, "count": 1, "template": template})
    return result


def pod_templates(ray_job: Obj) -> list[tuple[str, Obj]]:
    """The cluster spec's templates, then the submitter's (`spec.submitterPodTemplate`, set to the
    default one when missing: what a start writes)."""
    spec = ray_job.setdefault("spec", {})
    templates = ray.cluster_pod_templates(spec.setdefault("rayClusterSpec", {}))
    if submission_mode(ray_job) == K8S_JOB_MODE:
        if not spec.get("submitterPodTemplate"):
            spec["submitterPodTemplate"] = default_submitter_template(ray_job)
        templates.append((SUBMITTER, spec["submitterPodTemplate"]))
    return templates


def status(ray_job: Obj) -> Obj:
    return ray_job.get("status") or {}


def is_active(ray_job: Obj) -> bool:
    return status(ray_job).get("jobDeploymentStatus", "") not in NOT_RUNNING


def finished(ray_job: Obj) -> tuple[bool, bool, str]:
    s = status(ray_job)
    return s.get("jobDeploymentStatus") in FINISHED, s.get("jobStatus") == "SUCCEEDED", s.get("message", "")


def pods_ready(ray_job: Obj) -> bool:
    return ray.pods_ready(status(ray_job).get("rayClusterStatus") or {})


def on_existing_cluster(ray_job: Obj) -> bool:
    """Skip: a RayJob of an existing RayCluster (clusterSelector) is not Kueue's."""
    return bool(_spec(ray_job).get("clusterSelector"))


class RayJobIntegration(ray.RayReconciler):
    """The RayCluster and submitter Job of a managed RayJob are left to its Workload (`manages_child`,
    asked by the RayCluster and batch/v1 Job integrations)."""

    name = api.FRAMEWORK_RAY_JOB
    resource = api.RAY_JOB
    index_prefix = "rayJob"

    podsets = staticmethod(podsets)
    pod_templates = staticmethod(pod_templates)
    is_active = staticmethod(is_active)
    finished = staticmethod(finished)
    pods_ready = staticmethod(pods_ready)

    def ready(self, key: str, ray_job: Obj) -> bool:
        return not on_existing_cluster(ray_job)
