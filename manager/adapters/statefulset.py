"""StatefulSet adapter (apps/v1; upstream's statefulset_multikueue_adapter): the admitting worker gets
a copy of the manager's StatefulSet (metadata labels and annotations, the whole spec) with the
MultiKueue origin label, the prebuilt Workload name and the manager's StatefulSet UID
(`kueue.x-k8s.io/multikueue-origin-uid`, from which the worker names the pod group as the manager
did). Nothing is mirrored back, as upstream: a StatefulSet has no managedBy, so the manager's own
StatefulSet controller owns its status (its pods stay gated there). The copy is deleted when the
Workload finishes, is evicted or is garbage-collected."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from kube_runtime.informer import Informer, compact
from kueue_domain import api
from kueue_domain.naming import prebuilt_workload_name
from manager.adapters.base import delete_if_owned, remote_object, set_multikueue_meta

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]


def remote_statefulset_copy(local: Obj, workload_name: str, origin: str) -> Obj:
    meta = local["metadata"]
    sts: Obj = {
        "apiVersion": api.STATEFUL_SET.api_version,
        "kind": api.STATEFUL_SET.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": copy.deepcopy(local.get("spec") or {}),
    }
    set_multikueue_meta(sts, workload_name, origin)
    sts["metadata"]["annotations"][api.ANNOTATION_MULTIKUEUE_ORIGIN_UID] = meta["uid"]
    return sts


class StatefulSetAdapter:
    resource = api.STATEFUL_SET

    def __init__(self, local_statefulsets: Informer) -> None:
        self.local_statefulsets = local_statefulsets

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        return True, ""  # no managedBy: always Kueue's (as upstream)

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        local = self.local_statefulsets.get(f"{namespace}/{name}")
        if local is None:
            raise LookupError(f"StatefulSet {namespace}/{name} not found on the manager cluster")
        if await remote_object(remote, api.STATEFUL_SET, namespace, name) is None:
            await remote.kube.create(
                api.STATEFUL_SET, remote_statefulset_copy(local, workload_name, remote.origin)
            )
        return False

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        return True  # nothing is mirrored

    async def release_local(self, namespace: str, name: str) -> None:
        """Nothing to drop: the manager's pods are never ungated."""

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None:
        await delete_if_owned(remote, api.STATEFUL_SET, namespace, name, propagation="Background")

    @staticmethod
    def remote_cache_transform(remote_obj: Obj) -> Obj:
        """Metadata and status; the spec's template, most of it, is never read."""
        kept = compact(remote_obj)
        spec = kept.get("spec")
        if isinstance(spec, dict):
            spec.pop("template", None)
            spec.pop("volumeClaimTemplates", None)
        return kept

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        name = prebuilt_workload_name(remote_obj)
        return [f"{remote_obj['metadata']['namespace']}/{name}"] if name else []
