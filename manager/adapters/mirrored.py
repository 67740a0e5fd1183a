"""The contract of a job kind whose `spec.managedBy` hands it to MultiKueue and whose whole status is
mirrored back (upstream's JobSet and TrainJob adapters): the admitting worker gets a copy made by
`remote_copy`, the manager's object gets the worker's status, the copy goes when the Workload
finishes, is evicted or is garbage-collected. A kind says only what differs: its resource, its copy,
when it is finished, its per-Job status list and the spec fields its worker cache drops."""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any

from kube_runtime.client import KubeClient, NotFound
from kube_runtime.informer import Informer, compact
from kueue_domain import api
from kueue_domain.naming import prebuilt_workload_name
from manager.adapters.base import (
    clone_for_creation,
    create_remote,
    delete_if_owned,
    just_created,
    owned_by,
    remote_object,
    remote_or_finished_gone,
)
from manager.adapters.job import merge_patch

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]


def status_patch(local: Obj, remote_status: Obj) -> Obj | None:
    """The merge patch that gives the manager's object the worker's status; None when equal."""
    local_status = local.get("status") or {}
    if local_status == remote_status:
        return None
    return {"status": merge_patch(local_status, remote_status)}


def zeroed_jobs_status_patch(local: Obj, field: str) -> Obj | None:
    """Active and ready counts of every entry of `status.<field>` set to 0: what the manager's object
    reports once its copy runs nowhere. None when nothing is counted."""
    statuses = (local.get("status") or {}).get(field) or []
    if not any(int(s.get("active") or 0) or int(s.get("ready") or 0) for s in statuses):
        return None
    return {"status": {field: [{**s, "active": 0, "ready": 0} for s in statuses]}}


def spec_copy(resource: api.Resource, local: Obj, workload_name: str, origin: str) -> Obj:
    """What is created on the worker for a kind copied as it is: the whole spec, managedBy cleared
    so that the worker's own controller runs it (clone_for_creation does the rest)."""
    spec = copy.deepcopy(local.get("spec") or {})
    spec.pop("managedBy", None)
    return clone_for_creation(resource, local, spec, workload_name, origin)


class MirroredStatusAdapter:
    resource: api.Resource
    jobs_status_field: str  # the per-Job status list whose active/ready counts an eviction zeroes
    cached_spec_drops: tuple[str, ...] = ()  # spec fields the worker cache does not keep

    def __init__(self, local_kube: KubeClient, local_objects: Informer) -> None:
        self.local_kube = local_kube
        self.local_objects = local_objects

    @staticmethod
    def remote_copy(local: Obj, workload_name: str, origin: str) -> Obj:
        raise NotImplementedError

    @staticmethod
    def finished(obj: Obj) -> bool:
        raise NotImplementedError

    def local_object(self, namespace: str, name: str) -> Obj | None:
        return self.local_objects.get(f"{namespace}/{name}")

    def _missing(self, namespace: str, name: str) -> LookupError:
        return LookupError(f"{self.resource.kind} {namespace}/{name} not found on the manager cluster")

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        obj = self.local_object(namespace, name)
        if obj is None:  # not in the cache yet (or being deleted): look again, do not reject
            raise self._missing(namespace, name)
        managed_by = self.managed_by(obj)
        if managed_by == api.MANAGED_BY_MULTIKUEUE:
            return True, ""
        return False, self.not_managed_message(managed_by)

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        local = self.local_object(namespace, name)
        if local is None:
            raise self._missing(namespace, name)
        remote_obj = await remote_object(remote, self.resource, namespace, name)
        if remote_obj is None:
            ended = remote.finished_gone(self.resource, namespace, name)
            if ended is not None:
                # It ran and finished, then the worker deleted it: its end is copied, never re-run.
                await self._mirror_status(local, ended.get("status") or {})
                return False
            await create_remote(remote, self.resource, self.remote_copy(local, workload_name, remote.origin))
            return False
        if just_created(remote, self.resource, remote_obj):
            return True
        await self._mirror_status(local, remote_obj.get("status") or {})
        return False

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        local = self.local_object(namespace, name)
        remote_obj = await remote_or_finished_gone(remote, self.resource, namespace, name)
        if local is None or remote_obj is None or not owned_by(remote_obj, remote.origin):
            return True
        if not self.finished(remote_obj):
            return False
        await self._mirror_status(local, remote_obj.get("status") or {})
        return True

    async def release_local(self, namespace: str, name: str) -> None:
        """The agent releases an evicted object's quota once no Job of it is active; with its worker
        copy gone or unreachable, nothing would ever lower the counts mirrored last."""
        local = self.local_object(namespace, name)
        patch = self.released_status_patch(local) if local is not None else None
        if local is None or patch is None:
            return
        meta = local["metadata"]
        with contextlib.suppress(NotFound):
            await self.local_kube.patch_status_merge(self.resource, meta["name"], patch, meta["namespace"])

    def released_status_patch(self, local: Obj) -> Obj | None:
        """The status patch of an object whose copy runs nowhere (None: nothing to lower)."""
        return zeroed_jobs_status_patch(local, self.jobs_status_field)

    def managed_by(self, obj: Obj) -> str:
        return (obj.get("spec") or {}).get("managedBy") or ""

    def not_managed_message(self, managed_by: str) -> str:
        return api.expecting_managed_by_message(managed_by)

    async def _mirror_status(self, local: Obj, remote_status: Obj) -> None:
        patch = status_patch(local, remote_status)
        if patch is None:
            return
        meta = local["metadata"]
        await self.local_kube.patch_status_merge(self.resource, meta["name"], patch, meta["namespace"])

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None:
        await delete_if_owned(remote, self.resource, namespace, name, propagation="Background")

    @classmethod
    def remote_cache_transform(cls, remote_obj: Obj) -> Obj:
        """What the manager keeps of a worker's object: metadata, status and the spec without
        `cached_spec_drops` (templates and settings it never reads)."""
        kept = compact(remote_obj)
        spec = kept.get("spec")
        if isinstance(spec, dict):
            for key in cls.cached_spec_drops:
                spec.pop(key, None)
        return kept

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        name = prebuilt_workload_name(remote_obj)
        return [f"{remote_obj['metadata']['namespace']}/{name}"] if name else []
