"""JobSet adapter (jobset.x-k8s.io/v1alpha2; upstream's jobset_multikueue_adapter): the admitting
worker gets a copy of the manager's JobSet (metadata labels and annotations, the whole spec) with the
MultiKueue origin label and the prebuilt Workload name, and `spec.managedBy` cleared so that the
worker's JobSet controller runs it; the worker's whole JobSet status is mirrored onto the manager's
JobSet; the copy is deleted when the Workload finishes, is evicted or is garbage-collected."""

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


def job_set_finished(job_set: Obj) -> bool:
    """A `Completed` or `Failed` condition is True."""
    return any(
        c.get("type") in (api.JOB_SET_CONDITION_COMPLETED, api.JOB_SET_CONDITION_FAILED)
        and c.get("status") == "True"
        for c in (job_set.get("status") or {}).get("conditions") or ()
    )


def remote_job_set_copy(local: Obj, workload_name: str, origin: str) -> Obj:
    """What is created on the worker (CloneObjectMetaForCreation + the spec, managedBy cleared)."""
    meta = local["metadata"]
    spec = copy.deepcopy(local.get("spec") or {})
    spec.pop("managedBy", None)
    job_set: Obj = {
        "apiVersion": api.JOB_SET.api_version,
        "kind": api.JOB_SET.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": spec,
    }
    set_multikueue_meta(job_set, workload_name, origin)
    return job_set


def status_patch(local: Obj, remote_status: Obj) -> Obj | None:
    """The merge patch that gives the manager's JobSet the worker's status; None when equal."""
    local_status = local.get("status") or {}
    if local_status == remote_status:
        return None
    return {"status": merge_patch(local_status, remote_status)}


def released_status_patch(local: Obj) -> Obj | None:
    """Active and ready counts of every replicated Job set to 0: what the manager's JobSet reports
    once its copy runs nowhere. None when nothing is counted."""
    statuses = (local.get("status") or {}).get("replicatedJobsStatus") or []
    if not any(int(s.get("active") or 0) or int(s.get("ready") or 0) for s in statuses):
        return None
    return {"status": {"replicatedJobsStatus": [{**s, "active": 0, "ready": 0} for s in statuses]}}


class JobSetAdapter:
    resource = api.JOB_SET

    def __init__(self, local_kube: KubeClient, local_job_sets: Informer) -> None:
        self.local_kube = local_kube
        self.local_job_sets = local_job_sets

    def local_job_set(self, namespace: str, name: str) -> Obj | None:
        return self.local_job_sets.get(f"{namespace}/{name}")

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        job_set = self.local_job_set(namespace, name)
        if job_set is None:  # not in the cache yet (or being deleted): look again, do not reject
            raise LookupError(f"JobSet {namespace}/{name} not found on the manager cluster")
        managed_by = (job_set.get("spec") or {}).get("managedBy") or ""
        if managed_by == api.MANAGED_BY_MULTIKUEUE:
            return True, ""
        return False, api.expecting_managed_by_message(managed_by)

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        local = self.local_job_set(namespace, name)
        if local is None:
            raise LookupError(f"JobSet {namespace}/{name} not found on the manager cluster")
        remote_job_set = await remote_object(remote, api.JOB_SET, namespace, name)
        if remote_job_set is None:
            ended = remote.finished_gone(api.JOB_SET, namespace, name)
            if ended is not None:
                # It ran and finished, then the worker deleted it: its end is copied, never re-run.
                await self._mirror_status(local, ended.get("status") or {})
                return False
            await remote.kube.create(api.JOB_SET, remote_job_set_copy(local, workload_name, remote.origin))
            return False
        await self._mirror_status(local, remote_job_set.get("status") or {})
        return False

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        local = self.local_job_set(namespace, name)
        remote_job_set = await remote_object(remote, api.JOB_SET, namespace, name)
        if remote_job_set is None:
            remote_job_set = remote.finished_gone(api.JOB_SET, namespace, name)
        if local is None or remote_job_set is None or not owned_by(remote_job_set, remote.origin):
            return True
        if not job_set_finished(remote_job_set):
            return False
        await self._mirror_status(local, remote_job_set.get("status") or {})
        return True

    async def release_local(self, namespace: str, name: str) -> None:
        """The agent releases an evicted JobSet's quota once no Job of it is active; with its worker
        copy gone or unreachable, nothing would ever lower the counts mirrored last."""
        local = self.local_job_set(namespace, name)
        patch = released_status_patch(local) if local is not None else None
        if local is None or patch is None:
            return
        meta = local["metadata"]
        with contextlib.suppress(NotFound):
            await self.local_kube.patch_status_merge(api.JOB_SET, meta["name"], patch, meta["namespace"])

    async def _mirror_status(self, local: Obj, remote_status: Obj) -> None:
        patch = status_patch(local, remote_status)
        if patch is None:
            return
        meta = local["metadata"]
        await self.local_kube.patch_status_merge(api.JOB_SET, meta["name"], patch, meta["namespace"])

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None:
        await delete_if_owned(remote, api.JOB_SET, namespace, name, propagation="Background")

    @staticmethod
    def remote_cache_transform(remote_job_set: Obj) -> Obj:
        """What the manager keeps of a worker's JobSet: metadata, status and spec.suspend; the
        replicated Jobs' templates, most of the spec, are dropped."""
        job_set = compact(remote_job_set)
        spec = job_set.get("spec")
        if isinstance(spec, dict):
            spec.pop("replicatedJobs", None)
        return job_set

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        name = prebuilt_workload_name(remote_obj)
        return [f"{remote_obj['metadata']['namespace']}/{name}"] if name else []
