"""The adapter contract (multikueue-spec §3.7): one adapter per job kind creates the job on the
admitting worker, mirrors its status back, deletes it, and says whether the manager's object is
handed to MultiKueue. Adapters that watch their kind on workers map remote objects to the keys
of local Workloads."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

from kube_runtime.client import NotFound
from kueue_domain import api

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]

# A worker's status changes within moments of each other (a pod started, then ready; replicas ready
# one by one): an adapter copies a change that only moves a run on once it has stood this long
# since first seen, so the changes of one moment go as one write on the manager cluster. Upstream
# batches every worker event for 1 s, which coalesces them the same way.
MIRROR_MIN_INTERVAL_SECONDS = 1.0
# How long the tables of `waited` keep an object that left without being seen again.
FORGET_AFTER_SECONDS = 60.0


def owner_gvk(ref: Obj) -> str:
    """Go's GroupVersionKind.String() of an owner reference: `batch/v1, Kind=Job`, `/v1, Kind=Pod`
    (the key adapters are found by)."""
    api_version = ref.get("apiVersion") or ""
    group_version = api_version if "/" in api_version else f"/{api_version}"
    return f"{group_version}, Kind={ref.get('kind')}"


def waited(since: dict[str, float], key: str, now: float) -> bool:
    """Whether what `key` waits for was first seen at least MIRROR_MIN_INTERVAL_SECONDS ago (the
    first call starts the wait; the caller drops the key once it wrote). `since` keeps insertion
    order, so entries of objects that left unseen are dropped oldest first once
    FORGET_AFTER_SECONDS old."""
    first = since.setdefault(key, now)
    while since:
        oldest = next(iter(since))
        if now - since[oldest] < FORGET_AFTER_SECONDS or oldest == key:
            break
        del since[oldest]
    return now - first >= MIRROR_MIN_INTERVAL_SECONDS


class OwnershipError(Exception):
    """A remote object with our name exists but was not created by this manager."""


class Adapter(Protocol):
    """An adapter may also define `remote_cache_transform(obj) -> obj`: what the manager's watch
    caches keep of a worker's object of this kind (default: kube_runtime.informer.compact);
    `multi_workload = True` (several Workloads per job, placed together) and
    `finished_by_local_integration = True` (the manager cluster's job integration finishes the
    Workload from the end `sync_finished` copied; the manager writes Finished only as a fallback)."""

    resource: api.Resource

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        """(True, "") when MultiKueue may run the manager's job remotely, else (False, why)."""
        ...

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        """Create the job on `remote` if missing, otherwise mirror its status to the local job.
        True means "status deliberately not copied yet: look again soon"."""
        ...

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        """Copy the end of the run to the local job, from the worker's job or, when the worker
        deleted it, from its last state seen; never create it: that run is over. False while the
        worker's job is there but not seen finished yet (the copy's watch ran ahead of the job's)."""
        ...

    async def release_local(self, namespace: str, name: str) -> None:
        """The job runs on no worker we can see (its copy is gone, or its worker unreachable, and
        the manager evicted its Workload): drop whatever mirrored state would keep the eviction
        waiting for the job to stop."""
        ...

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None: ...

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        """Local Workload keys (`namespace/name`) a remote object of this kind belongs to."""
        ...


def set_multikueue_meta(obj: Obj, workload_name: str, origin: str) -> None:
    """SetMultiKueueMeta: the origin label and the prebuilt workload name (an annotation, as with
    upstream's default WorkloadIdentifierAnnotations gate)."""
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {})[api.LABEL_MULTIKUEUE_ORIGIN] = origin
    if workload_name:
        meta.setdefault("annotations", {})[api.ANNOTATION_PREBUILT_WORKLOAD_NAME] = workload_name


def clone_for_creation(resource: api.Resource, local: Obj, spec: Obj, workload_name: str, origin: str) -> Obj:
    """The worker's copy of `local` (CloneObjectMetaForCreation: name, namespace, labels and
    annotations) with `spec`, the origin label and the prebuilt Workload name (SetMultiKueueMeta)."""
    meta = local["metadata"]
    obj: Obj = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": spec,
    }
    set_multikueue_meta(obj, workload_name, origin)
    return obj


def owned_by(obj: Obj, origin: str) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(api.LABEL_MULTIKUEUE_ORIGIN) == origin


async def remote_object(
    remote: RemoteClient, resource: api.Resource, namespace: str, name: str
) -> Obj | None:
    """From the worker's watch cache when this kind is watched there (objects of our origin),
    else one GET."""
    cached = remote.cache(resource)
    if cached is not None:
        obj = cached.get(f"{namespace}/{name}")
        return obj if obj is not None else remote.created_unseen(resource, namespace, name)
    try:
        return await remote.kube.get(resource, name, namespace)
    except NotFound:
        return None


async def remote_or_finished_gone(
    remote: RemoteClient, resource: api.Resource, namespace: str, name: str
) -> Obj | None:
    """The worker's object, or the last state of ours seen finished before the worker deleted it."""
    obj = await remote_object(remote, resource, namespace, name)
    return obj if obj is not None else remote.finished_gone(resource, namespace, name)


async def foreign_object(
    remote: RemoteClient, resource: api.Resource, namespace: str, name: str, *, fresh: bool = False
) -> Obj | None:
    """The worker's object of this name when this manager did not create it. One GET (the watch
    caches hold only objects of our origin, so they cannot see a foreign one), unless one found
    none a few seconds ago (`remote.no_foreign_object_seen`) and `fresh` is not asked for."""
    if not fresh and remote.no_foreign_object_seen(resource, namespace, name):
        return None
    try:
        obj = await remote.kube.get(resource, name, namespace)
    except NotFound:
        remote.remember_no_foreign_object(resource, namespace, name)
        return None
    if owned_by(obj, remote.origin):
        remote.remember_no_foreign_object(resource, namespace, name)
        return None
    remote.forget_no_foreign_object(resource, namespace, name)
    return obj


def check_ownership(obj: Obj | None, resource: api.Resource, origin: str) -> None:
    """ValidateRemoteObjectOwnership: missing is fine, a foreign object is an error."""
    if not origin:
        raise OwnershipError("multikueue origin is empty")
    if obj is None or owned_by(obj, origin):
        return
    meta = obj.get("metadata") or {}
    raise OwnershipError(
        f"remote object is not owned by MultiKueue: expected "
        f"{api.go_quote(api.LABEL_MULTIKUEUE_ORIGIN)}={api.go_quote(origin)} on "
        f"{resource.kind} {meta.get('namespace')}/{meta.get('name')}"
    )


async def delete_if_owned(
    remote: RemoteClient, resource: api.Resource, namespace: str, name: str, propagation: str | None = None
) -> bool:
    """DeleteRemoteObjectIfOwned: skip silently when missing or of another origin."""
    obj = await remote_object(remote, resource, namespace, name)
    if obj is None or not owned_by(obj, remote.origin):
        return False
    with contextlib.suppress(NotFound):
        await remote.kube.delete(resource, name, namespace, propagation_policy=propagation)
    remote.forget_created(resource, namespace, name)
    return True


def just_created(remote: RemoteClient, resource: api.Resource, obj: Obj) -> bool:
    """Whether `obj` is what this manager created moments ago, not yet shown by the worker's watch:
    nothing to copy from it yet (its status is the worker's to fill); its watch event comes back."""
    meta = obj.get("metadata") or {}
    return obj is remote.created_unseen(resource, meta.get("namespace", ""), meta.get("name", ""))


async def create_remote(remote: RemoteClient, resource: api.Resource, body: Obj) -> Obj:
    """Create a job object on the worker; it counts as there (remote_object) until the watch shows
    it, so that a reconcile running again meanwhile does not create it twice."""
    created = await remote.kube.create(resource, body)
    remote.remember_created(resource, created)
    return created
