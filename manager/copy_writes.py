"""The writes on workers for a manager Workload: its copies created and deleted, its job created
or mirrored on the admitting worker, and the deactivation of a copy the manager evicted
(multikueue-spec §3.4.5, §3.4.6)."""

from __future__ import annotations

from typing import Any

from kube_runtime.client import AlreadyExists, NotFound
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition
from kube_runtime.informer import Informer
from kueue_domain import api
from kueue_domain import workload as wlutil
from manager.adapters.base import (
    Adapter,
    OwnershipError,
    check_ownership,
    create_remote,
    foreign_object,
    remote_object,
)
from manager.copies import Group, remote_copy
from manager.groups import Groups, cluster_name
from manager.metrics import ManagerMetrics
from manager.remote import RemoteClient

Obj = dict[str, Any]


class RemoteCopies:
    def __init__(
        self,
        *,
        workloads: Informer,
        deleted: dict[str, Obj],
        groups: Groups,
        metrics: ManagerMetrics,
        clock: Clock,
        origin: str,
    ) -> None:
        self.workloads = workloads
        # The reconciler's deleted Workloads, kept until their remote objects are gone (§2.3).
        self.deleted = deleted
        self.groups = groups
        self.metrics = metrics
        self.clock = clock
        self.origin = origin

    async def create_copy(self, client: RemoteClient, wl: Obj, body: Obj) -> bool:
        """Create a Workload copy on a worker; False when it exists already, or when this manager
        created it moments ago and the worker's watch has not shown it yet (a reconcile running
        again meanwhile would only be answered AlreadyExists)."""
        meta = body["metadata"]
        if client.created_unseen(api.WORKLOAD, meta["namespace"], meta["name"]) is not None:
            return False
        try:
            await create_remote(client, api.WORKLOAD, body)
        except AlreadyExists:
            return False
        cluster_queue = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        self.metrics.dispatched(cluster_queue, client.name)
        return True

    async def create_member_copies(self, client: RemoteClient, primary: Obj, members: list[Obj]) -> None:
        primary_name = primary["metadata"]["name"]
        for member in members:
            meta = member["metadata"]
            if client.remote_workload(meta["namespace"], meta["name"]) is None:
                await self.create_copy(
                    client, member, remote_copy(member, self.origin, group_primary=primary_name)
                )

    async def sync_to_single_cluster(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group, cluster: str
    ) -> None:
        if group.remotes.get(cluster) is None:
            await self.create_copy(group.available[cluster], wl, remote_copy(wl, self.origin))
        await self.remove_other_copies(wl, adapter, owner_name, group, cluster)

    async def remove_other_copies(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group, cluster: str
    ) -> None:
        meta = wl["metadata"]
        for other, remote in group.remotes.items():
            if other != cluster and remote is not None:
                await self.remove_remote_objects(
                    group.available[other], adapter, meta["namespace"], owner_name, meta["name"]
                )

    async def name_taken(
        self, client: RemoteClient, adapter: Adapter, namespace: str, owner_name: str, fresh: bool = False
    ) -> bool:
        """Whether a foreign object holds the job's name on the worker (one GET, made only when our
        own job is not there; unless `fresh`, not again within seconds of one that found none)."""
        if not owner_name or await remote_object(client, adapter.resource, namespace, owner_name) is not None:
            return False
        found = await foreign_object(client, adapter.resource, namespace, owner_name, fresh=fresh)
        return found is not None

    async def sync_job(
        self, client: RemoteClient, adapter: Adapter, namespace: str, owner_name: str, workload_name: str
    ) -> bool:
        """Create or mirror the job on the admitting worker, unless a foreign object holds its name."""
        remote_job = await remote_object(client, adapter.resource, namespace, owner_name)
        check_ownership(remote_job, adapter.resource, self.origin)
        try:
            return await adapter.sync_job(client, namespace, owner_name, workload_name)
        except AlreadyExists:
            # Our caches see only objects of our origin: name the foreign one instead of a bare 409.
            # No foreign one: ours, created by an earlier reconcile that the worker's watch has not
            # shown yet (or gone since): its watch event brings us back; no error, no backoff.
            if await foreign_object(client, adapter.resource, namespace, owner_name, fresh=True) is None:
                return True
            kind = adapter.resource.kind
            raise OwnershipError(
                api.name_conflict_message(kind, namespace, owner_name, client.name)
            ) from None

    async def deactivate_remote(self, client: RemoteClient, wl: Obj, remote: Obj | None) -> None:
        """The manager evicted a Workload that still runs remotely: ask the worker to evict it."""
        if remote is None:
            return
        evicted = (
            find_status_condition((wl.get("status") or {}).get("conditions"), api.WORKLOAD_EVICTED) or {}
        )
        message = api.evicted_on_manager_message(evicted.get("message", ""))
        updated = wlutil.working_copy(remote)
        changed = wlutil.set_deactivation_target(
            updated, api.REASON_EVICTED_ON_MANAGER_CLUSTER, message, self.clock.now()
        )
        if changed:
            await wlutil.apply_admission_status(client.kube, updated)

    def _group_stays(
        self, client: RemoteClient, adapter: Adapter, namespace: str, workload_name: str
    ) -> bool:
        """The shared job object stays while another member is placed on, or has a copy on, that
        worker: a pending, evicted or deleted member never takes it from the others."""
        if not getattr(adapter, "multi_workload", False):
            return False
        wl = self.workloads.get(f"{namespace}/{workload_name}") or self.deleted.get(
            f"{namespace}/{workload_name}"
        )
        if wl is None:
            return False
        return any(
            cluster_name(m) == client.name
            or client.remote_workload(namespace, m["metadata"]["name"]) is not None
            for m in self.groups.members(wl)
        )

    async def remove_remote_objects(
        self, client: RemoteClient, adapter: Adapter, namespace: str, owner_name: str, workload_name: str
    ) -> None:
        """§3.4.5: the job object first (even when the Workload copy is already gone), then the
        copy, after dropping its resource-in-use finalizer. The copy is withdrawn first: the worker
        finishes it (OwnerNotFound) as its job goes, and that end must not be taken for the run's.

        A finished copy of a single-Workload job goes first instead: its run is over, so nothing
        on the worker reacts to it going, and the worker's garbage collector, which deletes the
        copy with the job it is owned by (a GET and a DELETE racing ours), finds nothing left."""
        multi_workload = getattr(adapter, "multi_workload", False)
        remote = client.remote_workload(namespace, workload_name)
        if remote is not None:
            client.withdraw(remote)
            if wlutil.is_finished(remote) and not multi_workload:
                await self._delete_copy(client, remote, namespace, workload_name)
                if owner_name:
                    await adapter.delete_remote(client, namespace, owner_name)
                return
        if owner_name and not self._group_stays(client, adapter, namespace, workload_name):
            await adapter.delete_remote(client, namespace, owner_name)
            if multi_workload:
                await adapter.clear_worker(namespace, owner_name)
        remote = client.remote_workload(namespace, workload_name)
        if remote is not None:
            await self._delete_copy(client, remote, namespace, workload_name)

    @staticmethod
    async def _delete_copy(client: RemoteClient, remote: Obj, namespace: str, workload_name: str) -> None:
        try:
            finalizers = remote["metadata"].get("finalizers") or []
            if api.FINALIZER_RESOURCE_IN_USE in finalizers:
                kept = [f for f in finalizers if f != api.FINALIZER_RESOURCE_IN_USE]
                await client.kube.patch_merge(
                    api.WORKLOAD,
                    workload_name,
                    {
                        "metadata": {
                            "finalizers": kept or None,
                            "resourceVersion": remote["metadata"]["resourceVersion"],
                        }
                    },
                    namespace,
                )
            await client.kube.delete(api.WORKLOAD, workload_name, namespace)
        except NotFound:
            return
        finally:
            client.forget_created(api.WORKLOAD, namespace, workload_name)
