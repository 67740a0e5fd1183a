"""RayJob adapter (ray.io/v1; upstream's ray multikueue adapter for RayJobs): the admitting worker
gets a copy of the manager's RayJob (metadata labels and annotations, the whole spec) with the
MultiKueue origin label and the prebuilt Workload name, and `spec.managedBy` cleared so that the
worker's KubeRay operator runs it; the worker's whole RayJob status (jobDeploymentStatus,
jobStatus, rayClusterStatus, ...) is mirrored onto the manager's RayJob; the copy is deleted when
the Workload finishes, is evicted or is garbage-collected."""

from __future__ import annotations

import functools
from typing import Any

from kueue_domain import api
from manager.adapters.mirrored import MirroredStatusAdapter, spec_copy

Obj = dict[str, Any]
FINISHED = ("Complete", "Failed")  # jobDeploymentStatus of a RayJob that ended
NOT_RUNNING = ("", "Suspended")  # ... of one that runs nothing (IsActive false; "" is New)


def ray_job_finished(ray_job: Obj) -> bool:
    return (ray_job.get("status") or {}).get("jobDeploymentStatus") in FINISHED


remote_ray_job_copy = functools.partial(spec_copy, api.RAY_JOB)  # (local, workload_name, origin)


class RayJobAdapter(MirroredStatusAdapter):
    resource = api.RAY_JOB
    jobs_status_field = ""
    cached_spec_drops = ("rayClusterSpec", "submitterPodTemplate", "runtimeEnvYAML")
    remote_copy = staticmethod(remote_ray_job_copy)
    finished = staticmethod(ray_job_finished)

    def released_status_patch(self, local: Obj) -> Obj | None:
        """A RayJob counts as active until its jobDeploymentStatus says it runs nothing: with its
        copy gone, the manager's shows `Suspended`, as the worker's would once stopped."""
        status = local.get("status") or {}
        if status.get("jobDeploymentStatus", "") in (*NOT_RUNNING, *FINISHED):
            return None
        return {"status": {"jobDeploymentStatus": "Suspended"}}
