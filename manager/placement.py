"""Step 6 of a manager Workload's reconcile (multikueue-spec §3.4.4): nothing is admitted yet, so
the dispatcher nominates workers and copies are kept on exactly those; a group's members go with
their primary (§3.10); workers where a foreign object holds the job's name get no copy; and when
no worker admits the Workload for a while, its check message says why."""

from __future__ import annotations

from typing import Any

from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition
from kube_runtime.controller import Result
from kube_runtime.events import EventRecorder
from kube_runtime.informer import object_key
from kueue_domain import api
from kueue_domain import workload as wlutil
from manager.adapters.base import Adapter
from manager.copies import DispatchError, Group, remote_copy
from manager.copy_writes import RemoteCopies
from manager.dispatch.base import Dispatcher
from manager.groups import GroupConflict, Groups
from manager.metrics import ManagerMetrics
from manager.workload_status import WorkloadStatus

Obj = dict[str, Any]

# Copies younger than this are not explained yet: most are admitted within it.
PENDING_EXPLANATION_DELAY = 5.0

# How often a Workload that every worker refuses for a name conflict looks again.
NAME_CONFLICT_RECHECK = 30.0


class Placement:
    def __init__(
        self,
        status: WorkloadStatus,
        copies: RemoteCopies,
        *,
        groups: Groups,
        dispatcher: Dispatcher,
        recorder: EventRecorder,
        metrics: ManagerMetrics,
        clock: Clock,
        origin: str,
    ) -> None:
        self.status = status
        self.copies = copies
        self.groups = groups
        self.dispatcher = dispatcher
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        self.origin = origin

    async def place(
        self, wl: Obj, state: Obj, adapter: Adapter, owner_name: str, group: Group
    ) -> Result | None:
        """Not while an eviction is in progress: upstream reads an unset clusterName as "eviction
        done", but the eviction clears it at once, while the old quota is still held (until released
        and reserved again, Evicted stays True). A copy dispatched then would be admitted only to be
        deactivated (step 5), and its job created and deleted on that worker."""
        if wlutil.is_evicted(wl):
            await self._release_evicted(wl, adapter, owner_name, group)
            return None
        if state.get("state") != api.CHECK_STATE_PENDING or (wl.get("status") or {}).get("clusterName"):
            return None
        namespace = wl["metadata"]["namespace"]
        conflicts = await self._name_conflicts(wl, adapter, namespace, owner_name, group)
        if conflicts and len(conflicts) == len(group.available):
            await self._report_conflicts(wl, state, conflicts)
            return Result(requeue_after=NAME_CONFLICT_RECHECK)  # a foreign object's deletion sends no event
        wait = await self.nominate_and_synchronize(wl, adapter, owner_name, group, excluded=set(conflicts))
        result = await self._explain_pending(wl, state, group)
        later = result.requeue_after if result is not None else None
        if wait is not None and (later is None or wait < later):
            return Result(requeue_after=wait)  # the least-loaded worker's round ends
        return result

    async def _release_evicted(self, wl: Obj, adapter: Adapter, owner_name: str, group: Group) -> None:
        """An eviction the manager started completes only once the manager's job has stopped. No
        copy is admitted or being evicted on a reachable worker (both are handled above): the
        copy is gone or its worker unreachable, so nothing will mirror a stop; whatever is left of
        the job on reachable workers goes, and the local job drops its mirrored running state.
        The Workload is dispatched again once its quota is released and reserved anew."""
        meta = wl["metadata"]
        for client in group.available.values():
            await self.copies.remove_remote_objects(
                client, adapter, meta["namespace"], owner_name, meta["name"]
            )
        await adapter.release_local(meta["namespace"], owner_name)

    async def _name_conflicts(
        self, wl: Obj, adapter: Adapter, namespace: str, owner_name: str, group: Group
    ) -> dict[str, str]:
        """{worker: why} for the workers without a copy yet that hold a job object of this name
        which this manager did not create: a copy admitted there could never run (its job would
        be refused), and the foreign object is never adopted, changed or deleted. Under a
        dispatcher that nominates (Incremental, least-loaded, external) only the nominated workers
        are asked: the others get no copy anyway."""
        conflicts = {}
        status = wl.get("status") or {}
        nominated = None if self.dispatcher.every_worker else set(status.get("nominatedClusterNames") or ())
        for cluster, client in sorted(group.available.items()):
            if nominated is not None and cluster not in nominated:
                continue
            if group.remotes.get(cluster) is None:
                if not await client.serves_kind(adapter.resource):
                    conflicts[cluster] = api.kind_not_served_message(adapter.resource, cluster)
                elif await self.copies.name_taken(client, adapter, namespace, owner_name):
                    kind = adapter.resource.kind
                    conflicts[cluster] = api.name_conflict_message(kind, namespace, owner_name, cluster)
        return conflicts

    async def _report_conflicts(self, wl: Obj, state: Obj, conflicts: dict[str, str]) -> None:
        """No worker is left: the check says why (it stays Pending: removing the foreign objects or
        adding a worker lets it go out), with a Warning event when that changes."""
        message = wlutil.truncate_message("; ".join(conflicts.values()))
        if state.get("message") == message:
            return
        await self.status.write_state(
            wl, state, api.CHECK_STATE_PENDING, message, keep_time=True, drop_nominations=True
        )
        self.recorder.record(
            wl, "Warning", api.EVENT_MULTIKUEUE_DISPATCH_FAILED, api.EVENT_ACTION_DISPATCH, message
        )

    async def _explain_pending(self, wl: Obj, state: Obj, group: Group) -> Result | None:
        """Beyond upstream (which leaves the message empty): when no worker admits a Workload for
        a while, its check message says why, in the workers' own words."""
        copies = sorted((c, r) for c, r in group.remotes.items() if r is not None)
        if not copies:
            return None
        now = self.clock.now()
        youngest = min(wlutil.seconds_since(r["metadata"].get("creationTimestamp"), now) for _, r in copies)
        if youngest < PENDING_EXPLANATION_DELAY:
            return Result(requeue_after=PENDING_EXPLANATION_DELAY - youngest)
        reasons = []
        for cluster, remote in copies:
            reserved = find_status_condition(
                (remote.get("status") or {}).get("conditions"), api.WORKLOAD_QUOTA_RESERVED
            )
            if reserved is not None and reserved.get("status") == "False" and reserved.get("message"):
                reasons.append((cluster, reserved["message"]))
        if not reasons:
            return None
        message = wlutil.truncate_message(api.not_admitted_by_workers_message(reasons))
        if state.get("message") != message:
            await self.status.write_state(
                wl, state, api.CHECK_STATE_PENDING, message, keep_time=True, drop_nominations=False
            )
        return None

    async def nominate_and_synchronize(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group, excluded: set[str] | None = None
    ) -> float | None:
        """`excluded`: workers that get no copy of this Workload (a foreign object holds its job's
        name there). Returns when to look again (the least-loaded dispatcher's round), or None."""
        excluded = excluded or set()
        if not self.status.others_ready(wl):
            return None  # other checks first (§3.4.4 step 2); their change brings us back
        self.metrics.stage(object_key(wl), "quota_reserved")
        members: list[Obj] = []
        if getattr(adapter, "multi_workload", False):
            allowed = await self._group_allows_dispatch(wl, adapter, owner_name, group)
            if allowed is None:
                return None
            members = allowed
        current = list((wl.get("status") or {}).get("nominatedClusterNames") or ())
        everyone = [c for c in group.available if c not in excluded]
        nominated, wait = self.dispatcher.nominate(object_key(wl), current, everyone, group.remotes)
        if set(nominated) != set(current):
            await self.status.set_nominated(wl, nominated)
        await self._synchronize(wl, adapter, owner_name, group, nominated, excluded, members)
        return wait

    async def _synchronize(
        self,
        wl: Obj,
        adapter: Adapter,
        owner_name: str,
        group: Group,
        nominated: list[str],
        excluded: set[str],
        members: list[Obj],
    ) -> None:
        """Copies on the nominated workers (a group's members' first), none on the others."""
        errors = [
            f"cluster {name}: no remote client for nominated cluster"
            for name in nominated
            if name not in group.available
        ]
        meta = wl["metadata"]
        member_names = [m["metadata"]["name"] for m in members]
        created = []
        for cluster, client in group.available.items():
            remote = group.remotes.get(cluster)
            if cluster in excluded:
                continue
            if cluster in nominated and members:
                # The members' copies go first: the worker admits the group once the primary's arrives.
                try:
                    await self.copies.create_member_copies(client, wl, members)
                except Exception as exc:
                    errors.append(f"cluster {cluster}: {exc}")
                    continue
            if cluster in nominated and remote is None:
                try:
                    body = remote_copy(wl, self.origin, group_members=member_names)
                    if await self.copies.create_copy(client, wl, body):
                        created.append(cluster)
                except Exception as exc:
                    errors.append(f"cluster {cluster}: {exc}")
            elif cluster not in nominated and remote is not None:
                await self.copies.remove_remote_objects(
                    client, adapter, meta["namespace"], owner_name, meta["name"]
                )
        self._report_dispatch(wl, created, errors)

    def _report_dispatch(self, wl: Obj, created: list[str], errors: list[str]) -> None:
        if created:
            self.metrics.stage(object_key(wl), "dispatched")
            self.recorder.record(
                wl, "Normal", api.EVENT_MULTIKUEUE_DISPATCHED, api.EVENT_ACTION_DISPATCH,
                f"Dispatched to worker clusters: {api.go_list(sorted(created))}",
            )  # fmt: skip
        if errors:
            # Usually something the user can fix (the namespace or LocalQueue missing on a worker).
            self.recorder.record(
                wl, "Warning", api.EVENT_MULTIKUEUE_DISPATCH_FAILED, api.EVENT_ACTION_DISPATCH,
                f"Cannot create the workload on every nominated worker: {'; '.join(errors)}",
            )  # fmt: skip
            raise DispatchError("; ".join(errors))

    async def _group_allows_dispatch(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group
    ) -> list[Obj] | None:
        """§3.10: the members to dispatch with `wl` when it is the primary of a complete group none
        of whose members is placed, else None; a member of a placed group is synchronised to that
        worker here. Beyond upstream, the primary also waits until every member holds quota on this
        cluster, because its members' copies are dispatched with its own."""
        meta = wl["metadata"]
        others = self.groups.members(wl)
        expected = adapter.expected_count(meta["namespace"], owner_name)
        if expected is None or len(others) + 1 < expected:
            return None  # members still being created; each new member re-runs its siblings
        try:
            assigned = self.groups.assigned_cluster(others)
        except GroupConflict as exc:
            raise DispatchError(str(exc)) from exc
        if assigned:
            if assigned not in group.available:
                raise DispatchError(f"assigned worker cluster {api.go_quote(assigned)} is not available")
            if assigned not in ((wl.get("status") or {}).get("nominatedClusterNames") or ()):
                await self.status.set_nominated(wl, [assigned])
            await self.copies.sync_to_single_cluster(wl, adapter, owner_name, group, assigned)
            return None
        if not self.groups.is_primary(adapter.workload_index(wl), others, adapter.workload_index):
            return None
        if not all(wlutil.has_quota_reservation(m) and not wlutil.is_finished(m) for m in others):
            return None  # a member's quota reservation re-runs its siblings
        return others
