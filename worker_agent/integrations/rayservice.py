"""RayServices (ray.io/v1, integration `ray.io/rayservice`): one Workload `rayservice-<name>-<hash5>`
per managed RayService, with the PodSets of its `rayClusterConfig` (worker_agent.integrations.ray:
`head`, then one per worker group).

A RayService suspends by its cluster's field, `spec.rayClusterConfig.suspend`. It starts (that
field false, the assigned flavors' nodeSelector and tolerations merged into the head's and each
worker group's pod template) when its Workload is Admitted and is stopped (suspended, templates
restored) when it is evicted. It is active, and its pods ready, while its `Ready` condition is True;
it never finishes by itself (upstream's Finished is always false): its Workload goes with it.

The RayClusters KubeRay makes for a managed RayService are covered by its Workload
(`manages_child`); on the manager a RayService managed by MultiKueue shows its worker copy's status
(manager/adapters/rayservice.py).
"""

from __future__ import annotations

from typing import Any

from kueue_domain import api
from worker_agent.integrations import ray

Obj = dict[str, Any]
CLUSTER_CONFIG = "rayClusterConfig"  # spec.rayClusterConfig: the RayCluster spec it runs
CONDITION_READY = "Ready"


def cluster_spec(ray_service: Obj) -> Obj:
    return (ray_service.get("spec") or {}).get(CLUSTER_CONFIG) or {}


def podsets(ray_service: Obj) -> list[Obj]:
    annotations = (ray_service.get("metadata") or {}).get("annotations") or {}
    return ray.cluster_podsets(cluster_spec(ray_service), annotations)


def pod_templates(ray_service: Obj) -> list[tuple[str, Obj]]:
    return ray.cluster_pod_templates(ray_service.setdefault("spec", {}).setdefault(CLUSTER_CONFIG, {}))


def ready(ray_service: Obj) -> bool:
    conditions = (ray_service.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == CONDITION_READY and c.get("status") == api.CONDITION_TRUE for c in conditions)


def finished(ray_service: Obj) -> tuple[bool, bool, str]:
    return False, False, "Running"


class RayServiceIntegration(ray.RayReconciler):
    name = api.FRAMEWORK_RAY_SERVICE
    resource = api.RAY_SERVICE
    index_prefix = "rayService"
    suspend_path = ("spec", CLUSTER_CONFIG, "suspend")

    podsets = staticmethod(podsets)
    pod_templates = staticmethod(pod_templates)
    is_active = staticmethod(ready)
    finished = staticmethod(finished)
    pods_ready = staticmethod(ready)
