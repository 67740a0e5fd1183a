"""LeaderWorkerSet adapter (multikueue-spec §3.7, §4): one remote LWS per manager LWS, shared by
the Workloads of all its groups, created on the worker that admits the group.

Beyond upstream: the remote LWS follows the manager's spec in place (a replica change patches
`spec.replicas`, a template change updates the spec so the worker's LWS controller rolls it out;
the remote UID is kept), and the worker's LWS status is mirrored onto the manager's LWS, with the
worker's name in an annotation, so that `kubectl get lws` on the manager tells the truth."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import TYPE_CHECKING, Any

from kube_runtime.client import AlreadyExists, KubeClient, NotFound
from kube_runtime.clock import Clock
from kube_runtime.informer import Informer, object_key
from kueue_domain import api
from kueue_domain.naming import group_workload_name
from manager.adapters.base import delete_if_owned, owned_by, remote_object, waited

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]

# Ours: the worker a manager LWS runs on, on the manager's LWS (there is no upstream equivalent).
ANNOTATION_WORKER_CLUSTER = "kueue-federation.dev/multikueue-cluster"
# Ours, on the remote LWS: which manager spec it was last written from.
ANNOTATION_SPEC_HASH = "kueue-federation.dev/manager-spec-hash"
# The LWS status fields the worker's LWS controller maintains.
MIRRORED_STATUS_FIELDS = ("replicas", "readyReplicas", "updatedReplicas", "conditions", "hpaPodSelector")


def replicas(lws: Obj | None) -> int:
    value = ((lws or {}).get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def remote_lws_copy(local: Obj, origin: str) -> Obj:
    meta = local["metadata"]
    labels = dict(meta.get("labels") or {})
    labels[api.LABEL_MULTIKUEUE_ORIGIN] = origin
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != ANNOTATION_WORKER_CLUSTER}
    annotations[api.ANNOTATION_MULTIKUEUE_ORIGIN_UID] = meta["uid"]
    annotations[ANNOTATION_SPEC_HASH] = spec_hash(local)
    return {
        "apiVersion": api.LEADER_WORKER_SET.api_version,
        "kind": api.LEADER_WORKER_SET.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": copy.deepcopy(local.get("spec") or {}),
    }


def spec_hash(lws: Obj) -> str:
    """Of the manager's spec: the remote copy records the one it was last written from, because the
    worker's webhooks default fields, so comparing the specs themselves would never settle."""
    text = json.dumps(lws.get("spec") or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class LeaderWorkerSetAdapter:
    resource = api.LEADER_WORKER_SET
    multi_workload = True

    def __init__(self, local_kube: KubeClient, local_lws: Informer, clock: Clock | None = None) -> None:
        self.local_kube = local_kube
        self.local_lws = local_lws
        self.clock = clock or Clock()
        # LWS key -> when a status change not yet copied was first seen (base.waited), oldest first:
        # the worker's LWS controller moves its status several times as the groups come up.
        self._status_since: dict[str, float] = {}

    def local_object(self, namespace: str, name: str) -> Obj | None:
        return self.local_lws.get(f"{namespace}/{name}")

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        return True, ""  # LWS has no managedBy: always Kueue's (as upstream)

    def expected_count(self, namespace: str, name: str) -> int | None:
        """How many member Workloads the group has: spec.replicas (None when the LWS is gone)."""
        lws = self.local_object(namespace, name)
        return replicas(lws) if lws is not None else None

    @staticmethod
    def workload_index(wl: Obj) -> int:
        value = ((wl.get("metadata") or {}).get("annotations") or {}).get(
            api.ANNOTATION_COMPONENT_WORKLOAD_INDEX
        )
        try:
            index = int(value) if value is not None else -1
        except ValueError:
            return -1
        return index if index >= 0 else -1

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        local = self.local_object(namespace, name)
        if local is None:
            raise LookupError(f"LeaderWorkerSet {namespace}/{name} not found on the manager cluster")
        remote_lws = await remote_object(remote, api.LEADER_WORKER_SET, namespace, name)
        if remote_lws is None:
            try:
                await remote.kube.create(api.LEADER_WORKER_SET, remote_lws_copy(local, remote.origin))
            except AlreadyExists:
                pass  # another member of the group created it first
            await self._mark_worker(local, remote.name)
            return False
        if (remote_lws["metadata"].get("annotations") or {}).get(ANNOTATION_SPEC_HASH) != spec_hash(local):
            # In place, never a re-creation: the worker's LWS controller scales or rolls it out.
            updated = copy.deepcopy(remote_lws)
            updated["spec"] = copy.deepcopy(local.get("spec") or {})
            updated["metadata"].setdefault("annotations", {})[ANNOTATION_SPEC_HASH] = spec_hash(local)
            await remote.kube.replace(api.LEADER_WORKER_SET, updated)
        return not await self._mirror_status(local, remote_lws, remote.name)

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        """An LWS does not finish: its last status is copied as it is."""
        local = self.local_object(namespace, name)
        remote_lws = await remote_object(remote, api.LEADER_WORKER_SET, namespace, name)
        if local is not None and remote_lws is not None and owned_by(remote_lws, remote.origin):
            await self._mirror_status(local, remote_lws, remote.name, wait=False)
        return True

    async def release_local(self, namespace: str, name: str) -> None:
        """Nothing to drop: the manager's agent evicts a group Workload by its pods, and the
        manager cluster runs none."""

    async def _mark_worker(self, local: Obj, cluster: str) -> None:
        if ((local["metadata"].get("annotations") or {}).get(ANNOTATION_WORKER_CLUSTER)) == cluster:
            return
        meta = local["metadata"]
        patch = {"metadata": {"annotations": {ANNOTATION_WORKER_CLUSTER: cluster}}}
        await self.local_kube.patch_merge(api.LEADER_WORKER_SET, meta["name"], patch, meta["namespace"])

    async def _mirror_status(self, local: Obj, remote_lws: Obj, cluster: str, *, wait: bool = True) -> bool:
        """Copy the worker's LWS status; False while a change waits to have stood for
        base.MIRROR_MIN_INTERVAL_SECONDS (`wait`: the changes of one moment go as one write)."""
        await self._mark_worker(local, cluster)
        local_status, remote_status = local.get("status") or {}, remote_lws.get("status") or {}
        patch = {
            key: remote_status.get(key)
            for key in MIRRORED_STATUS_FIELDS
            if local_status.get(key) != remote_status.get(key)
        }
        meta = local["metadata"]
        key = object_key(local)
        if not patch:
            self._status_since.pop(key, None)
            return True
        if wait and not waited(self._status_since, key, self.clock.monotonic()):
            return False
        await self.local_kube.patch_status_merge(
            api.LEADER_WORKER_SET, meta["name"], {"status": patch}, meta["namespace"]
        )
        self._status_since.pop(key, None)
        return True

    async def clear_worker(self, namespace: str, name: str) -> None:
        """The group left its worker: the manager's LWS no longer shows that worker's status."""
        local = self.local_object(namespace, name)
        if local is None or not (local["metadata"].get("annotations") or {}).get(ANNOTATION_WORKER_CLUSTER):
            return
        try:
            await self.local_kube.patch_merge(
                api.LEADER_WORKER_SET,
                name,
                {"metadata": {"annotations": {ANNOTATION_WORKER_CLUSTER: None}}},
                namespace,
            )
        except NotFound:
            return

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None:
        await delete_if_owned(remote, api.LEADER_WORKER_SET, namespace, name)

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        """Every group's Workload key, computed from the manager LWS UID the copy carries."""
        meta = remote_obj["metadata"]
        if not (meta.get("annotations") or {}).get(api.ANNOTATION_MULTIKUEUE_ORIGIN_UID):
            return []
        count = replicas(remote_obj)
        if not 0 <= count <= api.LWS_MAX_REPLICAS:
            return []
        return [f"{meta['namespace']}/{group_workload_name(remote_obj, i)}" for i in range(count)]
