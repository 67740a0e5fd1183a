"""JobSet adapter (jobset.x-k8s.io/v1alpha2; upstream's jobset_multikueue_adapter): the admitting
worker gets a copy of the manager's JobSet (metadata labels and annotations, the whole spec) with the
MultiKueue origin label and the prebuilt Workload name, and `spec.managedBy` cleared so that the
worker's JobSet controller runs it; the worker's whole JobSet status is mirrored onto the manager's
JobSet; the copy is deleted when the Workload finishes, is evicted or is garbage-collected."""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api
from manager.adapters.base import clone_for_creation
from manager.adapters.mirrored import MirroredStatusAdapter, zeroed_jobs_status_patch
from manager.adapters.mirrored import status_patch as status_patch  # the mirror's patch, named here too

Obj = dict[str, Any]


def job_set_finished(job_set: Obj) -> bool:
    """A `Completed` or `Failed` condition is True."""
    return any(
        c.get("type") in (api.JOB_SET_CONDITION_COMPLETED, api.JOB_SET_CONDITION_FAILED)
        and c.get("status") == "True"
        for c in (job_set.get("status") or {}).get("conditions") or ()
    )


def remote_job_set_copy(local: Obj, workload_name: str, origin: str) -> Obj:
    """What is created on the worker (CloneObjectMetaForCreation + the spec, managedBy cleared)."""
    spec = copy.deepcopy(local.get("spec") or {})
    spec.pop("managedBy", None)
    return clone_for_creation(api.JOB_SET, local, spec, workload_name, origin)


def released_status_patch(local: Obj) -> Obj | None:
    """Active and ready counts of every `replicatedJobsStatus` entry set to 0; None when none."""
    return zeroed_jobs_status_patch(local, "replicatedJobsStatus")


class JobSetAdapter(MirroredStatusAdapter):
    resource = api.JOB_SET
    jobs_status_field = "replicatedJobsStatus"
    cached_spec_drops = ("replicatedJobs",)
    remote_copy = staticmethod(remote_job_set_copy)
    finished = staticmethod(job_set_finished)

    def local_job_set(self, namespace: str, name: str) -> Obj | None:
        return self.local_object(namespace, name)
