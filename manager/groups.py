"""Workload groups (multikueue-spec §3.10): the Workloads of one multi-workload job (today a
LeaderWorkerSet, one Workload per group index) are placed on one worker. Members wait until all
exist; the primary (lowest index) is dispatched; once any member has `status.clusterName`, every
other member goes only there. The shared remote job object leaves a worker only with the last
member that was there."""

from __future__ import annotations

from typing import Any

from kube_runtime.informer import Informer, object_key
from kueue_domain import api

Obj = dict[str, Any]
INDEX_GROUP = "multikueueGroup"  # Workloads by "<namespace>/<owner GVK>/<owner name>"


class GroupConflict(Exception):
    """Members of one group are recorded on different workers."""


def group_key(wl: Obj) -> str | None:
    meta = wl.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    gvk, owner = annotations.get(api.ANNOTATION_JOB_OWNER_GVK), annotations.get(api.ANNOTATION_JOB_OWNER_NAME)
    return f"{meta.get('namespace', '')}/{gvk}/{owner}" if gvk and owner else None


def group_index(wl: Obj) -> tuple[str, ...]:
    key = group_key(wl)
    return (key,) if key else ()


def cluster_name(wl: Obj) -> str:
    return (wl.get("status") or {}).get("clusterName") or ""


class Groups:
    def __init__(self, workloads: Informer) -> None:
        self.workloads = workloads

    def members(self, wl: Obj) -> list[Obj]:
        """Every live member of `wl`'s group, `wl` excluded."""
        key = group_key(wl)
        if key is None:
            return []
        own = object_key(wl)
        return [
            m
            for m in self.workloads.by_index(INDEX_GROUP, key)
            if object_key(m) != own and not m["metadata"].get("deletionTimestamp")
        ]

    @staticmethod
    def assigned_cluster(others: list[Obj]) -> str:
        """The worker the other members were admitted on ("" when none was)."""
        assigned = ""
        for member in others:
            name = cluster_name(member)
            if name and assigned and name != assigned:
                raise GroupConflict(
                    f"component workloads assigned to different clusters: {api.go_quote(assigned)} and "
                    f"{api.go_quote(name)}"
                )
            assigned = assigned or name
        return assigned

    @staticmethod
    def is_primary(index: int, others: list[Obj], index_of: Any) -> bool:
        if index < 0:
            return False
        return all(not (0 <= index_of(m) < index) for m in others)
