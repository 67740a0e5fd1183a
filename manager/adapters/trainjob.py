"""TrainJob adapter (trainer.kubeflow.org/v1alpha1; upstream's trainjob_multikueue_adapter): the
admitting worker gets a copy of the manager's TrainJob (metadata labels and annotations, the whole
spec) with the MultiKueue origin label and the prebuilt Workload name, `spec.managedBy` cleared so
that the worker's Trainer controller runs it, and the Kueue runtime patch removed so that the
worker's webhook adds its own; the worker's whole TrainJob status is mirrored onto the manager's
TrainJob; the copy is deleted when the Workload finishes, is evicted or is garbage-collected."""

from __future__ import annotations

import copy
from typing import Any

from kueue_domain import api
from manager.adapters.base import clone_for_creation
from manager.adapters.mirrored import MirroredStatusAdapter, zeroed_jobs_status_patch
from manager.adapters.mirrored import status_patch as status_patch  # the mirror's patch, named here too

Obj = dict[str, Any]


def train_job_finished(train_job: Obj) -> bool:
    """A `Complete` or `Failed` condition is True."""
    return any(
        c.get("type") in (api.TRAIN_JOB_CONDITION_COMPLETE, api.TRAIN_JOB_CONDITION_FAILED)
        and c.get("status") == "True"
        for c in (train_job.get("status") or {}).get("conditions") or ()
    )


def remote_train_job_copy(local: Obj, workload_name: str, origin: str) -> Obj:
    """What is created on the worker (CloneObjectMetaForCreation + the spec, managedBy cleared, the
    runtime patch of manager `kueue.x-k8s.io/manager` removed)."""
    spec = copy.deepcopy(local.get("spec") or {})
    spec.pop("managedBy", None)
    patches = [
        p for p in spec.get("runtimePatches") or () if p.get("manager") != api.TRAIN_JOB_RUNTIME_PATCH_MANAGER
    ]
    if patches:
        spec["runtimePatches"] = patches
    else:
        spec.pop("runtimePatches", None)
    return clone_for_creation(api.TRAIN_JOB, local, spec, workload_name, origin)


def released_status_patch(local: Obj) -> Obj | None:
    """Active and ready counts of every `jobsStatus` entry set to 0; None when nothing is counted."""
    return zeroed_jobs_status_patch(local, "jobsStatus")


class TrainJobAdapter(MirroredStatusAdapter):
    resource = api.TRAIN_JOB
    jobs_status_field = "jobsStatus"
    cached_spec_drops = ("runtimePatches", "trainer", "initializer")
    remote_copy = staticmethod(remote_train_job_copy)
    finished = staticmethod(train_job_finished)

    def local_train_job(self, namespace: str, name: str) -> Obj | None:
        return self.local_object(namespace, name)
