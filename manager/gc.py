"""Garbage collection on workers (multikueue-spec §3.2), every `gcInterval`: remote Workloads of
our origin whose manager Workload is gone (with their owner job, when it is ours), and, beyond
upstream, remote jobs (Jobs, LeaderWorkerSets) of our origin that none of their Workloads uses on
that worker any more: gone, or moved elsewhere while the worker was unreachable. Objects without our
origin label are never touched, so two managers with different origins can share a worker."""

from __future__ import annotations

import contextlib
from typing import Any

import structlog

from kube_runtime.client import NotFound
from kube_runtime.clock import Clock
from kube_runtime.informer import Informer, object_key
from kueue_domain import api
from manager.adapters.base import Adapter, delete_if_owned, owned_by, owner_gvk
from manager.clusters import Remotes
from manager.remote import RemoteClient

log = structlog.get_logger("manager.gc")

Obj = dict[str, Any]


class GarbageCollector:
    def __init__(
        self, workloads: Informer, remotes: Remotes, adapters: dict[str, Adapter], origin: str, clock: Clock
    ) -> None:
        self.workloads = workloads
        self.remotes = remotes
        self.adapters = adapters
        self.origin = origin
        self.clock = clock
        self.deleted_total = 0

    def _local_alive(self, key: str) -> bool:
        local = self.workloads.get(key)
        return local is not None and not local["metadata"].get("deletionTimestamp")

    def _belongs_on(self, client: RemoteClient, key: str) -> bool:
        """A job object on a worker is in use while one of its Workloads has a copy there or is
        placed there; otherwise it is stale (its Workloads are gone, or moved to another worker
        while this one was unreachable)."""
        if client.remote_workload(*key.split("/", 1)) is not None:
            return True
        local = self.workloads.get(key)
        return (
            local is not None
            and not local["metadata"].get("deletionTimestamp")
            and (local.get("status") or {}).get("clusterName") == client.name
        )

    async def run(self, interval: float) -> None:
        if interval <= 0:
            return
        while True:
            await self.clock.sleep(interval)
            for client in self.remotes.connected():
                try:
                    await self.collect(client)
                except Exception as exc:  # one worker's failure must not stop the loop
                    log.warning("garbage collection failed", cluster=client.name, error=str(exc))

    async def collect(self, client: RemoteClient) -> int:
        """One pass over one connected worker; returns how many objects it deleted."""
        deleted = 0
        for remote in client.remote_workloads():
            if not owned_by(remote, self.origin) or self._local_alive(object_key(remote)):
                continue
            meta = remote["metadata"]
            ref = next((r for r in meta.get("ownerReferences") or () if r.get("controller")), None)
            adapter = self.adapters.get(owner_gvk(ref)) if ref else None
            if adapter is not None and await delete_if_owned(
                client, adapter.resource, meta["namespace"], ref["name"], propagation="Background"
            ):
                deleted += 1
            with contextlib.suppress(NotFound):
                await client.kube.delete(api.WORKLOAD, meta["name"], meta["namespace"])
                deleted += 1
            log.info(
                "deleted an orphaned remote workload",
                cluster=client.name,
                namespace=meta["namespace"],
                name=meta["name"],
            )
        for adapter in self.adapters.values():
            cache = client.cache(adapter.resource)
            for job in cache.list() if cache is not None else ():
                keys = adapter.workload_keys_for(job)
                if not keys or any(self._belongs_on(client, k) for k in keys):
                    continue
                meta = job["metadata"]
                if await delete_if_owned(
                    client, adapter.resource, meta["namespace"], meta["name"], "Background"
                ):
                    deleted += 1
                    log.info(
                        "deleted an orphaned remote job", cluster=client.name, kind=adapter.resource.kind,
                        namespace=meta["namespace"], name=meta["name"],
                    )  # fmt: skip
        self.deleted_total += deleted
        return deleted
