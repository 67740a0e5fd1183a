"""RayCluster adapter (ray.io/v1; upstream's ray multikueue adapter for RayClusters): the admitting
worker gets a copy of the manager's RayCluster (metadata labels and annotations, the whole spec)
with the MultiKueue origin label and the prebuilt Workload name, and `spec.managedBy` cleared so
that the worker's KubeRay operator runs it; the worker's whole RayCluster status (state,
readyWorkerReplicas, head, conditions, ...) is mirrored onto the manager's RayCluster; the copy is
deleted when the Workload is evicted, is garbage-collected or the RayCluster is deleted. A
RayCluster never finishes by itself (upstream's Finished is always false)."""

from __future__ import annotations

import functools
from typing import Any

from kueue_domain import api
from manager.adapters.mirrored import MirroredStatusAdapter, spec_copy

Obj = dict[str, Any]
STATE_READY = "ready"


def ray_cluster_finished(ray_cluster: Obj) -> bool:
    return False


remote_ray_cluster_copy = functools.partial(spec_copy, api.RAY_CLUSTER)  # (local, workload_name, origin)


class RayClusterAdapter(MirroredStatusAdapter):
    resource = api.RAY_CLUSTER
    jobs_status_field = ""
    cached_spec_drops = ("headGroupSpec", "workerGroupSpecs", "autoscalerOptions")
    remote_copy = staticmethod(remote_ray_cluster_copy)
    finished = staticmethod(ray_cluster_finished)

    def released_status_patch(self, local: Obj) -> Obj | None:
        """A RayCluster counts as active while its state is `ready`: with its copy gone, the
        manager's shows `suspended`, as the worker's would once stopped."""
        if (local.get("status") or {}).get("state") != STATE_READY:
            return None
        return {"status": {"state": "suspended"}}
