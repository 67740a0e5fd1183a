"""RayClusters (ray.io/v1, integration `ray.io/raycluster`): one Workload `raycluster-<name>-<hash5>`
per managed RayCluster, with the PodSets of its spec (worker_agent.integrations.ray: `head`, then
one per worker group).

The RayCluster starts (`spec.suspend: false`, the assigned flavors' nodeSelector and tolerations
merged into the head's and each worker group's pod template) when its Workload is Admitted and is
stopped (suspended, templates restored from the Workload) when it is evicted; the reservation is
released once its state is no longer `ready` (KubeRay deletes a suspended cluster's pods). A
RayCluster never finishes by itself (upstream's Finished is always false): its Workload goes with
it. Its pods are ready when its state is `ready`.

A RayCluster made by a RayJob that Kueue manages is not a top-level job: the RayJob's Workload
covers it (the RayJob integration's `manages_child`). One with `spec.managedBy` other than
KubeRay's or MultiKueue's is left alone; one managed by MultiKueue runs on a worker and shows its
status here (manager/adapters/raycluster.py).
"""

from __future__ import annotations

from typing import Any

from kueue_domain import api
from worker_agent.integrations import ray

Obj = dict[str, Any]


def _spec(ray_cluster: Obj) -> Obj:
    return ray_cluster.setdefault("spec", {})


def podsets(ray_cluster: Obj) -> list[Obj]:
    meta = ray_cluster.get("metadata") or {}
    return ray.cluster_podsets(ray_cluster.get("spec") or {}, meta.get("annotations") or {})


def pod_templates(ray_cluster: Obj) -> list[tuple[str, Obj]]:
    return ray.cluster_pod_templates(_spec(ray_cluster))


def status(ray_cluster: Obj) -> Obj:
    return ray_cluster.get("status") or {}


def is_active(ray_cluster: Obj) -> bool:
    return status(ray_cluster).get("state") == ray.STATE_READY


def finished(ray_cluster: Obj) -> tuple[bool, bool, str]:
    return False, status(ray_cluster).get("state") != ray.STATE_FAILED, status(ray_cluster).get("reason", "")


def pods_ready(ray_cluster: Obj) -> bool:
    return ray.pods_ready(status(ray_cluster))


class RayClusterIntegration(ray.RayReconciler):
    name = api.FRAMEWORK_RAY_CLUSTER
    resource = api.RAY_CLUSTER
    index_prefix = "rayCluster"

    podsets = staticmethod(podsets)
    pod_templates = staticmethod(pod_templates)
    is_active = staticmethod(is_active)
    finished = staticmethod(finished)
    pods_ready = staticmethod(pods_ready)
