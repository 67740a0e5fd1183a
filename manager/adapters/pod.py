"""Plain pod and pod group adapter (v1 Pod; upstream's pod_multikueue_adapter). A single pod's
Workload and a pod group's Workload are both owned by Pods: the adapter is reached with one pod's
name and works on that pod, or on every pod of its group (`kueue.x-k8s.io/pod-group-name`).

- The admitting worker gets a copy of each pod: name, namespace, labels, annotations and the whole
  spec (still carrying the `kueue.x-k8s.io/admission` scheduling gate, which the worker's agent
  lifts once it admits the prebuilt Workload), with the MultiKueue origin label and the prebuilt
  Workload name.
- The manager's pods stay gated for good (the manager-side agent never ungates a pod whose Workload
  carries the MultiKueue check): each gets its worker copy's whole status, except that the local
  `PodScheduled` condition (False, `SchedulingGated`) is kept while the worker's pod is not
  scheduled yet, so that the manager cluster's autoscaler never takes it for an unschedulable pod.
  Once the worker's pod is scheduled, its `PodScheduled=True` is copied too.
- The copies are deleted when the Workload finishes, is evicted or is garbage-collected; a group's
  copies are found by group name among the worker's pods of our origin, and by the names of the
  manager's pods of that group (a copy whose manager pod is gone is still deleted)."""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any

from kube_runtime.client import AlreadyExists, KubeClient, NotFound
from kube_runtime.conditions import find_status_condition
from kube_runtime.informer import Informer, compact
from kueue_domain import api
from kueue_domain.naming import prebuilt_workload_name
from manager.adapters.base import (
    delete_if_owned,
    foreign_object,
    owned_by,
    remote_object,
    remote_or_finished_gone,
    set_multikueue_meta,
)
from manager.adapters.job import merge_patch

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]

# The manager-cluster pods the adapter reads: those the pod webhook marked as Kueue's.
MANAGED_SELECTOR = f"{api.LABEL_MANAGED}={api.VALUE_TRUE}"
INDEX_POD_GROUP = "podGroup"  # "<namespace>/<group name>"
POD_SCHEDULED = "PodScheduled"
TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_group_name(pod: Obj) -> str:
    """GetPodGroupName: the group label, else the annotation; "" for a single pod."""
    meta = pod.get("metadata") or {}
    return (meta.get("labels") or {}).get(api.LABEL_POD_GROUP_NAME) or (meta.get("annotations") or {}).get(
        api.ANNOTATION_POD_GROUP_NAME, ""
    )


def group_index(pod: Obj) -> tuple[str, ...]:
    group = pod_group_name(pod)
    return (f"{pod['metadata'].get('namespace', '')}/{group}",) if group else ()


def is_gated(pod: Obj) -> bool:
    return any(
        g.get("name") == api.SCHEDULING_GATE_ADMISSION
        for g in (pod.get("spec") or {}).get("schedulingGates") or ()
    )


def pod_finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def remote_pod_copy(local: Obj, workload_name: str, origin: str) -> Obj:
    """What is created on the worker (CloneObjectMetaForCreation + the whole spec)."""
    meta = local["metadata"]
    pod: Obj = {
        "apiVersion": api.POD.api_version,
        "kind": api.POD.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": copy.deepcopy(local.get("spec") or {}),
    }
    set_multikueue_meta(pod, workload_name, origin)
    return pod


def mirrored_pod_status(local: Obj, remote_status: Obj) -> Obj:
    """The worker pod's status as the manager's pod takes it: whole, but while the manager's pod is
    gated and the worker's pod not scheduled yet, the local PodScheduled condition stays (and the
    local `qosClass`, which the apiserver never lets change)."""
    status = copy.deepcopy(remote_status)
    local_qos = (local.get("status") or {}).get("qosClass")
    if local_qos:
        status["qosClass"] = local_qos  # immutable; equal anyway, the spec being the same
    conditions = status.get("conditions") or []
    local_scheduled = find_status_condition((local.get("status") or {}).get("conditions"), POD_SCHEDULED)
    remote_scheduled = find_status_condition(conditions, POD_SCHEDULED)
    scheduled = remote_scheduled is not None and remote_scheduled.get("status") == "True"
    if is_gated(local) and local_scheduled is not None and not scheduled:
        if remote_scheduled is None:
            status["conditions"] = [*conditions, copy.deepcopy(local_scheduled)]
        else:  # in place, as upstream's setPodCondition
            status["conditions"] = [
                copy.deepcopy(local_scheduled) if c.get("type") == POD_SCHEDULED else c for c in conditions
            ]
    return status


def ran_for(remote_pod: Obj, local: Obj, workload_name: str) -> bool:
    """Whether a worker's pod (one that ended and left) was the copy of this manager pod: made for
    this Workload, and after the manager's pod was created (pod names are reused: a new pod of the
    same name must run, not take the last run's end)."""
    remote_meta, local_meta = remote_pod.get("metadata") or {}, local.get("metadata") or {}
    if prebuilt_workload_name(remote_pod) != workload_name:
        return False
    # RFC 3339 in UTC with 1 s resolution: the strings compare as the times do.
    return (remote_meta.get("creationTimestamp") or "") >= (local_meta.get("creationTimestamp") or "")


class PodAdapter:
    resource = api.POD

    def __init__(self, local_kube: KubeClient, local_pods: Informer) -> None:
        self.local_kube = local_kube
        self.local_pods = local_pods

    def local_pod(self, namespace: str, name: str) -> Obj | None:
        return self.local_pods.get(f"{namespace}/{name}")

    def members(self, pod: Obj) -> list[Obj]:
        """The pod alone, or every manager pod of its group."""
        group = pod_group_name(pod)
        if not group:
            return [pod]
        return self.local_pods.by_index(INDEX_POD_GROUP, f"{pod['metadata']['namespace']}/{group}")

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        return True, ""  # a pod has no managedBy: always Kueue's (as upstream)

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        local = self.local_pod(namespace, name)
        if local is None:
            raise LookupError(f"Pod {namespace}/{name} not found on the manager cluster")
        for pod in self.members(local):
            await self._sync_pod(remote, pod, workload_name)
        return False

    async def _sync_pod(self, remote: RemoteClient, local: Obj, workload_name: str) -> None:
        meta = local["metadata"]
        remote_pod = await remote_object(remote, api.POD, meta["namespace"], meta["name"])
        if remote_pod is None:
            ended = remote.finished_gone(api.POD, meta["namespace"], meta["name"])
            if ended is not None and ran_for(ended, local, workload_name):
                # It ran and ended, then the worker deleted it: its end is copied, never re-run.
                await self._mirror_status(local, ended.get("status") or {})
                return
            if meta.get("deletionTimestamp"):
                return  # going away here: nothing to start there
            try:
                await remote.kube.create(api.POD, remote_pod_copy(local, workload_name, remote.origin))
            except AlreadyExists:
                # Ours, created by a reconcile the worker's watch has not reported yet: fine. A
                # foreign pod of that name is an error (the reconciler names it).
                found = await foreign_object(remote, api.POD, meta["namespace"], meta["name"], fresh=True)
                if found is not None:
                    raise
            return
        if meta.get("deletionTimestamp") or not owned_by(remote_pod, remote.origin):
            return  # a terminating local pod is left as it is (as upstream)
        await self._mirror_status(local, remote_pod.get("status") or {})

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        local = self.local_pod(namespace, name)
        if local is None:
            return True
        done = True
        for pod in self.members(local):
            meta = pod["metadata"]
            remote_pod = await remote_or_finished_gone(remote, api.POD, meta["namespace"], meta["name"])
            if remote_pod is None or not owned_by(remote_pod, remote.origin):
                continue
            if not pod_finished(remote_pod):
                done = False
                continue
            if not meta.get("deletionTimestamp"):
                await self._mirror_status(pod, remote_pod.get("status") or {})
        return done

    async def release_local(self, namespace: str, name: str) -> None:
        """Nothing to drop: the manager's agent evicts a pod Workload by deleting its ungated pods,
        and the manager's pods are never ungated."""

    async def _mirror_status(self, local: Obj, remote_status: Obj) -> None:
        local_status = local.get("status") or {}
        wanted = mirrored_pod_status(local, remote_status)
        if local_status == wanted:
            return
        meta = local["metadata"]
        patch = {"status": merge_patch(local_status, wanted)}
        with contextlib.suppress(NotFound):
            await self.local_kube.patch_status_merge(api.POD, meta["name"], patch, meta["namespace"])

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None:
        """The pod's copy, or every copy of its group: those of the manager's pods of the group and
        the worker's pods of our origin that carry the group's name."""
        names = {name}
        remote_pod = await remote_object(remote, api.POD, namespace, name)
        local = self.local_pod(namespace, name)
        group = pod_group_name(remote_pod or local or {})
        if group:
            key = f"{namespace}/{group}"
            names.update(p["metadata"]["name"] for p in self.local_pods.by_index(INDEX_POD_GROUP, key))
            cache = remote.cache(api.POD)
            for pod in cache.list() if cache is not None else ():
                if pod["metadata"].get("namespace") == namespace and pod_group_name(pod) == group:
                    names.add(pod["metadata"]["name"])
        for pod_name in sorted(names):
            await delete_if_owned(remote, api.POD, namespace, pod_name)

    @staticmethod
    def remote_cache_transform(remote_pod: Obj) -> Obj:
        """What the manager keeps of a worker's pod: metadata and status (mirrored), the spec's node
        and gates only (the containers, most of a pod, are never read)."""
        pod = compact(remote_pod)
        spec = pod.get("spec")
        if isinstance(spec, dict):
            pod["spec"] = {k: spec[k] for k in ("nodeName", "schedulingGates") if k in spec}
        return pod

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        name = prebuilt_workload_name(remote_obj)
        return [f"{remote_obj['metadata']['namespace']}/{name}"] if name else []
