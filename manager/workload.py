"""One reconcile per manager Workload that carries a MultiKueue admission check (multikueue-spec
§3.4), in upstream's order: clean up when it has no quota or is finished, mirror a remote
Finished, turn a remote eviction into Retry, replace out-of-sync copies, let the first admitted
copy win (the job is created there, the check becomes Ready), keep it Ready through a short
worker loss, and otherwise nominate workers and keep their copies in sync."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from kube_runtime.client import Conflict, KubeClient
from kube_runtime.clock import Clock
from kube_runtime.controller import Result
from kube_runtime.events import EventRecorder
from kube_runtime.informer import Informer, object_key
from kube_runtime.ownwrites import CACHE_LAG_RECHECK_SECONDS, OwnWrites
from kueue_domain import api
from kueue_domain import workload as wlutil
from manager.adapters.base import Adapter, owner_gvk
from manager.admissioncheck import AdmissionCheckController
from manager.clusters import Remotes
from manager.copies import (
    DispatchError,
    Group,
    best_match,
    only_priority_differs,
    priority_patch,
    remote_spec_out_of_sync,
)
from manager.copy_writes import RemoteCopies
from manager.dispatch.all_at_once import AllAtOnceDispatcher
from manager.dispatch.base import Dispatcher, KeepNominations
from manager.groups import GroupConflict, Groups, cluster_name
from manager.metrics import ManagerMetrics
from manager.placement import Placement
from manager.remote import RemoteClient
from manager.workload_finish import FinishMirror
from manager.workload_status import WorkloadStatus

log = structlog.get_logger("manager.workload")

Obj = dict[str, Any]

# How long a copy gone from a reachable worker may wait for the news of its job (still in that
# worker's watch cache) before it counts as lost: a job's end and deletion come in on a watch of
# their own, which may be behind the copy's.
COPY_GONE_WAIT = 3.0


class WorkloadReconciler:
    def __init__(
        self,
        kube: KubeClient,
        *,
        workloads: Informer,
        checks: Informer,
        ac_controller: AdmissionCheckController,
        remotes: Remotes,
        adapters: dict[str, Adapter],
        recorder: EventRecorder,
        metrics: ManagerMetrics,
        clock: Clock,
        origin: str,
        worker_lost_timeout: float,
        dispatcher: Dispatcher | None = None,
        all_at_once: bool = True,
        enqueue: Callable[[str], None] | None = None,
        status: WorkloadStatus | None = None,
    ) -> None:
        """`dispatcher`: which workers get copies; without one, AllAtOnce (or, with `all_at_once`
        false, the nominations as they stand). `status`: the writes to the manager's Workloads, when
        a dispatcher shares them (manager/dispatch/incremental.py)."""
        self.kube = kube
        self.workloads = workloads
        self.checks = checks
        self.ac_controller = ac_controller
        self.remotes = remotes
        self.adapters = adapters
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        self.origin = origin
        self.worker_lost_timeout = worker_lost_timeout
        self.dispatcher = dispatcher or (AllAtOnceDispatcher() if all_at_once else KeepNominations())
        self.groups = Groups(workloads)
        # Re-runs a sibling's reconcile (group members react to each other's placement).
        self.enqueue = enqueue or (lambda _key: None)
        # Deleted Workloads, kept until their remote objects are gone (§2.3).
        self.deleted: dict[str, Obj] = {}
        # Workload key -> (owner GVK, owner name), kept while the Workload is tracked: a finished
        # Workload may lose its owner reference before its copies are cleaned up.
        self._owners: dict[str, tuple[str, str]] = {}
        # Workload key -> when its copy was first seen gone while its job was still in the
        # worker's cache (_copy_gone_wait).
        self._copy_gone_since: dict[str, float] = {}
        if status is None:
            own_writes = OwnWrites(clock=clock.monotonic)
            status = WorkloadStatus(
                kube, checks, clock, own_writes, external_nominations=self.dispatcher.external
            )
        self.status = status
        # The manager cluster's Workload versions our status writes replaced, until the watch shows them.
        self._own_writes = status.own_writes
        self.copies = RemoteCopies(
            workloads=workloads, deleted=self.deleted, groups=self.groups, metrics=metrics, clock=clock,
            origin=origin,
        )  # fmt: skip
        self.finish = FinishMirror(
            status, recorder=recorder, metrics=metrics, clock=clock, forget=self.forget
        )
        self.placement = Placement(
            status, self.copies, groups=self.groups, dispatcher=self.dispatcher, recorder=recorder,
            metrics=metrics, clock=clock, origin=origin,
        )  # fmt: skip

    def remember_deleted(self, wl: Obj) -> None:
        self.deleted[object_key(wl)] = wl

    # -- lookups -----------------------------------------------------------------------------

    def multikueue_check(self, wl: Obj) -> tuple[Obj, Obj] | None:
        """(AdmissionCheck, its state on `wl`) for the first check state whose check is ours."""
        return self.status.multikueue_check(wl)

    def forget(self, key: str) -> None:
        self.metrics.forget(key)
        self._owners.pop(key, None)
        self.finish.forget(key)
        self._copy_gone_since.pop(key, None)
        self._own_writes.forget(key)
        self.dispatcher.forget(key)

    def resolve_adapter(self, wl: Obj) -> tuple[Adapter | None, str, str]:
        """(adapter, owner name, owner GVK) from the job-owner annotations, else the controller
        owner reference, else the first owner reference."""
        meta = wl["metadata"]
        annotations = meta.get("annotations") or {}
        gvk = annotations.get(api.ANNOTATION_JOB_OWNER_GVK, "")
        owner_name = annotations.get(api.ANNOTATION_JOB_OWNER_NAME, "")
        if gvk in self.adapters and owner_name:
            return self.adapters[gvk], owner_name, gvk
        refs = meta.get("ownerReferences") or []
        ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        key = object_key(wl)
        if ref is None:
            # Its job deleted, the Workload loses its owner reference as it is finished: the owner seen
            # before still names what to clean up on the workers.
            gvk, owner_name = self._owners.get(key, ("", ""))
            return self.adapters.get(gvk), owner_name, gvk
        gvk = owner_gvk(ref)
        if gvk in self.adapters:
            self._owners[key] = (gvk, ref.get("name", ""))
        return self.adapters.get(gvk), ref.get("name", ""), gvk

    def read_group(self, wl: Obj, check: Obj) -> Group:
        group = Group()
        meta = wl["metadata"]
        for cluster in self.ac_controller.config_clusters(check) or ():
            client = self.remotes.available(cluster)
            if client is None:
                group.unavailable.append(cluster)
                continue
            group.available[cluster] = client
            group.remotes[cluster] = client.remote_workload(meta["namespace"], meta["name"])
        return group

    # -- the reconcile -----------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        wl = self.workloads.get(key)
        if wl is not None and self._own_writes.lagging(key, wl):
            # The cache still holds a version our last write replaced: that write's watch event
            # brings the Workload back; a write from this copy would only be refused (409).
            return Result(requeue_after=CACHE_LAG_RECHECK_SECONDS)
        deleted = wl is None or bool(wl["metadata"].get("deletionTimestamp"))
        if wl is None:
            wl = self.deleted.get(key)
            if wl is None:
                self.finish.forget(key)
                self._copy_gone_since.pop(key, None)
                return None
        found = self.multikueue_check(wl)
        if found is None or found[1].get("state") == api.CHECK_STATE_REJECTED:
            self.deleted.pop(key, None)
            self.forget(key)
            return None
        check, state = found
        adapter, owner_name, gvk = self.resolve_adapter(wl)
        if adapter is None and wlutil.is_finished(wl):
            self.forget(key)  # finished, its owner gone before this manager saw it: nothing to run or mirror
            return None
        if adapter is None:
            message = api.no_adapter_for_owner_message(gvk) if gvk else api.MSG_NO_ADAPTER
            await self.status.update_check_state(wl, state, api.CHECK_STATE_REJECTED, message)
            return None
        namespace = wl["metadata"]["namespace"]
        if not deleted:
            try:
                managed, reason = adapter.is_managed(namespace, owner_name)
            except LookupError:
                if wlutil.has_quota_reservation(wl) and not wlutil.is_finished(wl):
                    raise
                managed, reason = True, ""  # its job is gone: only clean-up is left to do
            if not managed:
                message = api.owner_not_managed_message(reason)
                await self.status.update_check_state(wl, state, api.CHECK_STATE_REJECTED, message)
                return None
        group = self.read_group(wl, check)
        if deleted:
            for client in group.available.values():
                await self.copies.remove_remote_objects(
                    client, adapter, namespace, owner_name, wl["metadata"]["name"]
                )
            if group.unavailable:
                # Kept until the unreachable workers are back: their replayed copies bring us here again.
                return Result(requeue_after=self.worker_lost_timeout)
            self.deleted.pop(key, None)
            self.forget(key)
            return None
        return await self.reconcile_group(wl, state, adapter, owner_name, group)

    async def reconcile_group(
        self, wl: Obj, state: Obj, adapter: Adapter, owner_name: str, group: Group
    ) -> Result | None:
        # 1. Nothing runs for this Workload here any more: nothing may run remotely either.
        if wlutil.is_finished(wl) or not wlutil.has_quota_reservation(wl):
            return await self._without_quota(wl, state, adapter, owner_name, group)

        # 2. A remote copy finished: finish here too (or re-dispatch when it fell out of sync). A
        # copy that finished and then left its worker (with its job) counts: that run is over.
        finished = self.finish.finished_copy(wl, adapter, owner_name, group)
        if finished is not None:
            return await self.finish.mirror(wl, state, adapter, owner_name, group, finished)

        # 3. Evicted on its worker: Retry, so that the manager evicts and requeues it.
        evicted = best_match(group.remotes, api.WORKLOAD_EVICTED)
        if evicted is not None:
            handled, result = await self._evicted_on_worker(wl, state, adapter, owner_name, group, evicted[0])
            if handled:
                return result

        # 4. Copies whose spec no longer matches ours are replaced (priority is patched in place).
        await self._replace_out_of_sync(wl, adapter, owner_name, group)

        # 5. The first admitted copy wins (in a group: the primary's; the others follow it).
        recorded = (wl.get("status") or {}).get("clusterName")
        candidates = self._winner_candidates(wl, adapter, group) if not recorded else group.remotes
        admitting = best_match(candidates, api.WORKLOAD_ADMITTED, prefer=recorded)
        if admitting is None and state.get("state") == api.CHECK_STATE_READY:
            return await self._admitting_remote_missing(wl, state, adapter, owner_name, group)
        if admitting is not None:
            return await self._sync_admitting_remote(wl, state, adapter, owner_name, group, admitting[0])

        # 6. Nothing admitted yet: nominate workers and keep copies on exactly those.
        return await self.placement.place(wl, state, adapter, owner_name, group)

    async def _without_quota(
        self, wl: Obj, state: Obj, adapter: Adapter, owner_name: str, group: Group
    ) -> Result | None:
        namespace, name = wl["metadata"]["namespace"], wl["metadata"]["name"]
        errors = []
        for client in group.available.values():
            try:
                await self.copies.remove_remote_objects(client, adapter, namespace, owner_name, name)
            except Exception as exc:
                errors.append(f"cluster {client.name}: {exc}")
        if errors:
            raise DispatchError("; ".join(errors))
        later = Result(requeue_after=self.worker_lost_timeout) if group.unavailable else None
        if wlutil.is_finished(wl):
            self.forget(object_key(wl))
            return later
        if not group.unavailable:
            # Its quota is released and no reachable worker runs it: a running state mirrored
            # last (a count raised after the release) would stand on the job for good.
            await adapter.release_local(namespace, owner_name)
        if state.get("state") == api.CHECK_STATE_RETRY:
            # Retry asks for an eviction; without quota there is nothing left to evict, and a
            # Retry check would keep the Workload inadmissible: it may try again.
            await self.status.update_check_state(
                wl, state, api.CHECK_STATE_PENDING, api.MSG_RETRY_WITHOUT_QUOTA
            )
        return later

    async def _evicted_on_worker(
        self, wl: Obj, state: Obj, adapter: Adapter, owner_name: str, group: Group, cluster: str
    ) -> tuple[bool, Result | None]:
        """(whether the reconcile ends here, its result) for a copy evicted on `cluster`."""
        namespace, name = wl["metadata"]["namespace"], wl["metadata"]["name"]
        if wlutil.is_evicted(wl):
            client = group.available[cluster]
            if await self.copies.sync_job(client, adapter, namespace, owner_name, name):
                return True, Result(requeue_after=api.DEFERRED_SYNC_REQUEUE_AFTER)
            return True, None
        if state.get("state") != api.CHECK_STATE_READY:
            return False, None
        message = api.evicted_on_worker_message((wl.get("status") or {}).get("clusterName", ""))
        await self.status.write_state(
            wl, state, api.CHECK_STATE_RETRY, message, keep_time=False, drop_nominations=False
        )
        self.recorder.record(wl, "Normal", api.EVENT_MULTIKUEUE, api.EVENT_MULTIKUEUE, message)
        await self.retry_group(wl, cluster, api.group_member_left_message(name, cluster))
        return True, None

    async def _replace_out_of_sync(self, wl: Obj, adapter: Adapter, owner_name: str, group: Group) -> None:
        namespace, name = wl["metadata"]["namespace"], wl["metadata"]["name"]
        for cluster, remote in list(group.remotes.items()):
            if remote is None or not remote_spec_out_of_sync(wl, remote):
                continue
            client = group.available[cluster]
            if only_priority_differs(wl, remote):
                await client.kube.patch_merge(api.WORKLOAD, name, {"spec": priority_patch(wl)}, namespace)
                continue
            await self.copies.remove_remote_objects(client, adapter, namespace, owner_name, name)
            group.remotes[cluster] = None

    def _winner_candidates(self, wl: Obj, adapter: Adapter, group: Group) -> dict[str, Obj | None]:
        """The copies that may decide where `wl` runs. A group's members are dispatched with its
        primary (and admitted with it on our workers): the primary's first admitted copy decides,
        and every other member takes the worker its group was placed on, never one of its own."""
        if not getattr(adapter, "multi_workload", False):
            return group.remotes
        others = self.groups.members(wl)
        try:
            assigned = self.groups.assigned_cluster(others)
        except GroupConflict as exc:
            raise DispatchError(str(exc)) from exc
        if assigned:
            return {assigned: group.remotes.get(assigned)}
        if self.groups.is_primary(adapter.workload_index(wl), others, adapter.workload_index):
            return group.remotes
        return {}

    def _copy_gone_wait(self, wl: Obj, adapter: Adapter, owner_name: str, client: RemoteClient) -> float:
        """Seconds left to wait before a copy gone from its reachable worker counts as lost, while
        that worker's job is still in its watch cache: the job's own watch may be behind the
        copy's (a job that completed and was deleted at once takes its copy along, and its end,
        which finishes the Workload in step 2, may come in after the copy's deletion)."""
        key = object_key(wl)
        if client.cached(adapter.resource, wl["metadata"]["namespace"], owner_name) is None:
            self._copy_gone_since.pop(key, None)
            return 0.0
        since = self._copy_gone_since.setdefault(key, self.clock.monotonic())
        left = COPY_GONE_WAIT - (self.clock.monotonic() - since)
        if left <= 0:
            self._copy_gone_since.pop(key, None)
        return max(left, 0.0)

    async def _admitting_remote_missing(
        self, wl: Obj, state: Obj, adapter: Adapter, owner_name: str, group: Group
    ) -> Result | None:
        admitting = (wl.get("status") or {}).get("clusterName", "")
        if admitting and admitting in group.unavailable:
            lost_since = self.remotes.lost_since(admitting, self.clock.now())
            remaining = self.worker_lost_timeout - (self.clock.now() - lost_since).total_seconds()
            if remaining > 0:
                return Result(requeue_after=remaining)
            message = api.MSG_ADMITTING_REMOTE_LOST
        elif not admitting:
            message = api.MSG_READY_WITHOUT_CLUSTER
        else:
            wait = self._copy_gone_wait(wl, adapter, owner_name, group.available[admitting])
            if wait > 0:
                return Result(requeue_after=wait)
            message = api.MSG_ADMITTING_REMOTE_GONE
        await self.status.update_check_state(wl, state, api.CHECK_STATE_RETRY, message)
        if admitting:
            await self.retry_group(
                wl, admitting, api.group_member_left_message(wl["metadata"]["name"], admitting)
            )
        return None

    async def _sync_admitting_remote(
        self, wl: Obj, state: Obj, adapter: Adapter, owner_name: str, group: Group, cluster: str
    ) -> Result:
        meta = wl["metadata"]
        namespace, name, key = meta["namespace"], meta["name"], object_key(wl)
        client = group.available[cluster]
        self.metrics.stage(key, "remote_admitted")
        status = wl.get("status") or {}
        if wlutil.has_quota_reservation(wl) and wlutil.is_evicted(wl):
            await self.copies.remove_other_copies(wl, adapter, owner_name, group, cluster)
            await self.copies.deactivate_remote(client, wl, group.remotes[cluster])
            return Result(requeue_after=self.worker_lost_timeout)
        became_ready = False
        if state.get("state") not in (api.CHECK_STATE_RETRY, api.CHECK_STATE_REJECTED):
            message = api.admitted_on_worker_message(cluster)
            current = status.get("clusterName")
            if current and current != cluster:
                raise DispatchError(
                    f"attempting to change immutable ClusterName from {api.go_quote(current)} to "
                    f"{api.go_quote(cluster)}"
                )
            became_ready = state.get("state") != api.CHECK_STATE_READY
            # Asked afresh: once the winner is recorded below, a foreign object would block it for good.
            if not current and await self.copies.name_taken(
                client, adapter, namespace, owner_name, fresh=True
            ):
                # Taken after the copy went out: that copy goes, and the next dispatch excludes
                # this worker (step 6).
                await self.copies.remove_remote_objects(client, adapter, namespace, owner_name, name)
                return Result(requeue=True)
            if (
                became_ready
                or state.get("message") != message
                or not current
                or status.get("nominatedClusterNames")
            ):
                # The winner is recorded first: this write fails on a stale copy of the Workload (one
                # that does not show a winner recorded meanwhile), before anything is deleted.
                await self.status.mark_ready(wl, state, cluster, message, became_ready)
        await self.copies.remove_other_copies(wl, adapter, owner_name, group, cluster)
        deferred = await self.copies.sync_job(client, adapter, namespace, owner_name, name)
        if became_ready:
            self.enqueue_siblings(wl)
            self.recorder.record(wl, "Normal", api.EVENT_MULTIKUEUE, api.EVENT_MULTIKUEUE, message)
            self.metrics.admitted((status.get("admission") or {}).get("clusterQueue", ""), cluster)
            self.metrics.stage(key, "check_ready")
        if not deferred and state.get("state") == api.CHECK_STATE_READY:
            self.metrics.stage(key, "status_mirrored")
        return Result(requeue_after=api.DEFERRED_SYNC_REQUEUE_AFTER if deferred else self.worker_lost_timeout)

    def enqueue_siblings(self, wl: Obj) -> None:
        for member in self.groups.members(wl):
            self.enqueue(object_key(member))

    async def retry_group(self, wl: Obj, cluster: str, message: str) -> None:
        """Beyond upstream: when one member must leave its worker, the whole group leaves with it
        (members of one job never run on two workers)."""
        for member in self.groups.members(wl):
            found = self.multikueue_check(member)
            if found is None or cluster_name(member) != cluster:
                continue
            if found[1].get("state") == api.CHECK_STATE_READY:
                try:
                    await self.status.update_check_state(member, found[1], api.CHECK_STATE_RETRY, message)
                except Conflict:
                    self.enqueue(object_key(member))  # it changed meanwhile: its own reconcile decides
