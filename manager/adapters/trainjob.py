"""TrainJob adapter (trainer.kubeflow.org/v1alpha1; upstream's trainjob_multikueue_adapter): the
admitting worker gets a copy of the manager's TrainJob (metadata labels and annotations, the whole
spec) with the MultiKueue origin label and the prebuilt Workload name, `spec.managedBy` cleared so
that the worker's Trainer controller runs it, and the Kueue runtime patch removed so that the
worker's webhook adds its own; the worker's whole TrainJob status is mirrored onto the manager's
TrainJob; the copy is deleted when the Workload finishes, is evicted or is garbage-collected."""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any

from kube_runtime import api
from kube_runtime.client import KubeClient, NotFound
from kube_runtime.informer import Informer, compact
from kueue_domain.naming import prebuilt_workload_name
from manager.adapters.base import (
    delete_if_owned,
    owned_by,
    remote_object,
    set_multikueue_meta,
)
from manager.adapters.job import merge_patch

if TYPE_CHECKING:
    from manager.remote import RemoteClient

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
    meta = local["metadata"]
    spec = copy.deepcopy(local.get("spec") or {})
    spec.pop("managedBy", None)
    patches = [
        p for p in spec.get("runtimePatches") or () if p.get("manager") != api.TRAIN_JOB_RUNTIME_PATCH_MANAGER
    ]
    if patches:
        spec["runtimePatches"] = patches
    else:
        spec.pop("runtimePatches", None)
    train_job: Obj = {
        "apiVersion": api.TRAIN_JOB.api_version,
        "kind": api.TRAIN_JOB.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": spec,
    }
    set_multikueue_meta(train_job, workload_name, origin)
    return train_job


def status_patch(local: Obj, remote_status: Obj) -> Obj | None:
    """The merge patch that gives the manager's TrainJob the worker's status; None when equal."""
    local_status = local.get("status") or {}
    if local_status == remote_status:
        return None
    return {"status": merge_patch(local_status, remote_status)}


def released_status_patch(local: Obj) -> Obj | None:
    """Active and ready counts of every Job set to 0: what the manager's TrainJob reports once its
    copy runs nowhere. None when nothing is counted."""
    statuses = (local.get("status") or {}).get("jobsStatus") or []
    if not any(int(s.get("active") or 0) or int(s.get("ready") or 0) for s in statuses):
        return None
    return {"status": {"jobsStatus": [{**s, "active": 0, "ready": 0} for s in statuses]}}


class TrainJobAdapter:
    resource = api.TRAIN_JOB

    def __init__(self, local_kube: KubeClient, local_train_jobs: Informer) -> None:
        self.local_kube = local_kube
        self.local_train_jobs = local_train_jobs

    def local_train_job(self, namespace: str, name: str) -> Obj | None:
        return self.local_train_jobs.get(f"{namespace}/{name}")

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        train_job = self.local_train_job(namespace, name)
        if train_job is None:  # not in the cache yet (or being deleted): look again, do not reject
            raise LookupError(f"TrainJob {namespace}/{name} not found on the manager cluster")
        managed_by = (train_job.get("spec") or {}).get("managedBy") or ""
        if managed_by == api.MANAGED_BY_MULTIKUEUE:
            return True, ""
        return False, api.expecting_managed_by_message(managed_by)

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        local = self.local_train_job(namespace, name)
        if local is None:
            raise LookupError(f"TrainJob {namespace}/{name} not found on the manager cluster")
        remote_train_job = await remote_object(remote, api.TRAIN_JOB, namespace, name)
        if remote_train_job is None:
            ended = remote.finished_gone(api.TRAIN_JOB, namespace, name)
            if ended is not None:
                # It ran and finished, then the worker deleted it: its end is copied, never re-run.
                await self._mirror_status(local, ended.get("status") or {})
                return False
            await remote.kube.create(
                api.TRAIN_JOB, remote_train_job_copy(local, workload_name, remote.origin)
            )
            return False
        await self._mirror_status(local, remote_train_job.get("status") or {})
        return False

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        local = self.local_train_job(namespace, name)
        remote_train_job = await remote_object(remote, api.TRAIN_JOB, namespace, name)
        if remote_train_job is None:
            remote_train_job = remote.finished_gone(api.TRAIN_JOB, namespace, name)
        if local is None or remote_train_job is None or not owned_by(remote_train_job, remote.origin):
            return True
        if not train_job_finished(remote_train_job):
            return False
        await self._mirror_status(local, remote_train_job.get("status") or {})
        return True

    async def release_local(self, namespace: str, name: str) -> None:
        """The agent releases an evicted TrainJob's quota once no Job of it is active; with its
        worker copy gone or unreachable, nothing would ever lower the counts mirrored last."""
        local = self.local_train_job(namespace, name)
        patch = released_status_patch(local) if local is not None else None
        if local is None or patch is None:
            return
        meta = local["metadata"]
        with contextlib.suppress(NotFound):
            await self.local_kube.patch_status_merge(api.TRAIN_JOB, meta["name"], patch, meta["namespace"])

    async def _mirror_status(self, local: Obj, remote_status: Obj) -> None:
        patch = status_patch(local, remote_status)
        if patch is None:
            return
        meta = local["metadata"]
        await self.local_kube.patch_status_merge(api.TRAIN_JOB, meta["name"], patch, meta["namespace"])

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None:
        await delete_if_owned(remote, api.TRAIN_JOB, namespace, name, propagation="Background")

    @staticmethod
    def remote_cache_transform(remote_train_job: Obj) -> Obj:
        """What the manager keeps of a worker's TrainJob: metadata, status and a few spec fields;
        the runtime patches, trainer and initializer settings are dropped."""
        train_job = compact(remote_train_job)
        spec = train_job.get("spec")
        if isinstance(spec, dict):
            for key in ("runtimePatches", "trainer", "initializer"):
                spec.pop(key, None)
        return train_job

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        name = prebuilt_workload_name(remote_obj)
        return [f"{remote_obj['metadata']['namespace']}/{name}"] if name else []
