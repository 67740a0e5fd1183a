"""One reconcile per manager Workload that carries a MultiKueue admission check (multikueue-spec
§3.4), in upstream's order: clean up when it has no quota or is finished, mirror a remote
Finished, turn a remote eviction into Retry, replace out-of-sync copies, let the first admitted
copy win (the job is created there, the check becomes Ready), keep it Ready through a short
worker loss, and otherwise nominate workers and keep their copies in sync."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from kube_runtime import api
from kube_runtime.client import AlreadyExists, Conflict, KubeClient, NotFound
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition, format_time
from kube_runtime.controller import Result
from kube_runtime.events import EventRecorder
from kube_runtime.informer import Informer, compact, object_key
from kube_runtime.ownwrites import CACHE_LAG_RECHECK_SECONDS, OwnWrites
from kueue_domain import workload as wlutil
from manager.adapters.base import (
    Adapter,
    OwnershipError,
    check_ownership,
    create_remote,
    foreign_object,
    remote_object,
)
from manager.admissioncheck import AdmissionCheckController, is_multikueue_check
from manager.clusters import Remotes
from manager.dispatch.least_loaded import LeastLoadedChoice
from manager.groups import GroupConflict, Groups, cluster_name
from manager.metrics import ManagerMetrics
from manager.remote import RemoteClient, job_end_condition

log = structlog.get_logger("manager.workload")

Obj = dict[str, Any]


class DispatchError(Exception):
    """Errors collected over several workers; the reconcile is retried with backoff."""


def owner_gvk(ref: Obj) -> str:
    """Go's GroupVersionKind.String() of an owner reference: `batch/v1, Kind=Job`, `/v1, Kind=Pod`."""
    api_version = ref.get("apiVersion") or ""
    group_version = api_version if "/" in api_version else f"/{api_version}"
    return f"{group_version}, Kind={ref.get('kind')}"


def best_match(
    remotes: dict[str, Obj | None], condition_type: str, prefer: str | None = None
) -> tuple[str, Obj] | None:
    """The worker whose copy has `condition_type` True since the earliest time (§3.4.2). `prefer`
    (the clusterName already recorded, which is immutable) wins while its copy has it: times have
    1 s resolution, and a copy admitted as early elsewhere may be seen only after the choice."""
    best: tuple[str, str, Obj] | None = None
    for cluster, remote in sorted(remotes.items()):
        if remote is None:
            continue
        condition = find_status_condition((remote.get("status") or {}).get("conditions"), condition_type)
        if condition is None or condition.get("status") != "True":
            continue
        if cluster == prefer:
            return cluster, condition
        since = condition.get("lastTransitionTime") or ""
        if best is None or since < best[1]:
            best = (cluster, since, condition)
    return (best[0], best[2]) if best else None


def without_empty(value: object) -> object:
    """`value` with every empty string, null, empty list and empty map dropped from its maps, at any
    depth: what a typed (Go) comparison sees. A worker that stores v1beta2 and serves v1beta1 through
    conversion drops such fields (priorityClassSource: "") from the copy it returns."""
    if isinstance(value, dict):
        pruned = {k: without_empty(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ("", None, [], {})}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


def remote_spec_out_of_sync(local: Obj, remote: Obj) -> bool:
    """isRemoteSpecOutOfSync: the specs differ, preemption gates and empty fields aside. `remote` may
    be a cached copy whose spec was reduced to its digest (remote_workload_cache_transform)."""
    return _priority_part(local) != _priority_part(remote) or _rest_digest(local) != _rest_digest(remote)


# Copies younger than this are not explained yet: most are admitted within it.
PENDING_EXPLANATION_DELAY = 5.0

# How long a finished copy's Workload waits for the end of its job to reach the manager's job.
FINISHED_SYNC_WAIT = 30.0

# A Job's end copied to the manager's Job: the manager cluster's job integration finishes the
# Workload from it, within moments; the manager writes Finished itself only if that has not
# happened this long after the worker's copy finished (an agent down, or no Job integration there).
LOCAL_FINISH_WAIT = 5.0
# How long a copy gone from a reachable worker may wait for the news of its job (still in that
# worker's watch cache) before it counts as lost: a job's end and deletion come in on a watch of
# their own, which may be behind the copy's.
COPY_GONE_WAIT = 3.0

# How often a Workload that every worker refuses for a name conflict looks again.
NAME_CONFLICT_RECHECK = 30.0

PRIORITY_FIELDS = ("priorityClassName", "priorityClassSource", "priority")
# In a cached remote copy, the digest of its spec without the priority fields and preemption gates.
SPEC_DIGEST_KEY = "kueue-federation.dev/specDigest"
_NOT_COMPARED = {*PRIORITY_FIELDS, "preemptionGates", SPEC_DIGEST_KEY}


def _priority_part(wl: Obj) -> object:
    spec = wl.get("spec") or {}
    return without_empty({k: spec[k] for k in PRIORITY_FIELDS if k in spec})


def _rest_digest(wl: Obj) -> str:
    spec = wl.get("spec") or {}
    digest = spec.get(SPEC_DIGEST_KEY)
    if digest:
        return str(digest)
    rest = without_empty({k: v for k, v in spec.items() if k not in _NOT_COMPARED})
    return hashlib.blake2b(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def remote_workload_cache_transform(remote: Obj) -> Obj:
    """What the manager keeps of a worker's Workload copy: metadata and status whole, but of the spec
    only the priority fields and a digest of the rest, which is all the sync check compares. The
    pod templates were most of a cached copy (multikueue-spec §3.4.6 compares the whole spec)."""
    kept = compact(remote)
    spec = kept.get("spec")
    if isinstance(spec, dict):
        reduced = {k: spec[k] for k in PRIORITY_FIELDS if k in spec}
        reduced[SPEC_DIGEST_KEY] = _rest_digest(kept)
        kept["spec"] = reduced
    return kept


def only_priority_differs(local: Obj, remote: Obj) -> bool:
    """A priority change of a copy whose priority comes from a WorkloadPriorityClass (the job's
    `kueue.x-k8s.io/priority-class` label changed, or the class's value) is patched into the copy,
    not re-dispatched (upstream's PriorityChanged(local, remote)); a Workload whose priority comes
    from a pod PriorityClass never changes it."""
    local_source = (local.get("spec") or {}).get("priorityClassSource")
    remote_source = (remote.get("spec") or {}).get("priorityClassSource")
    if local_source == api.PRIORITY_CLASS_SOURCE_POD or remote_source != api.PRIORITY_CLASS_SOURCE_WORKLOAD:
        return False
    return _rest_digest(local) == _rest_digest(remote)


def priority_patch(local: Obj) -> Obj:
    """The copy's `spec` merge patch that gives it the manager Workload's class and priority."""
    spec = local.get("spec") or {}
    return {k: spec.get(k) for k in PRIORITY_FIELDS}


def remote_copy(
    local: Obj, origin: str, group_primary: str = "", group_members: list[str] | None = None
) -> Obj:
    """cloneForCreate (§3.4.6): name, namespace, labels (job-uid dropped, origin added),
    annotations, the spec; no owners, finalizers or status. Beyond upstream, a group's copies name
    their primary or members, so that our workers admit the group as one (engine/gang.py)."""
    meta = local["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != api.LABEL_JOB_UID}
    labels[api.LABEL_MULTIKUEUE_ORIGIN] = origin
    copy_meta: Obj = {"name": meta["name"], "namespace": meta["namespace"], "labels": labels}
    annotations = dict(meta.get("annotations") or {})
    if group_primary:
        annotations[api.ANNOTATION_MULTIKUEUE_GROUP_PRIMARY] = group_primary
    if group_members:
        annotations[api.ANNOTATION_MULTIKUEUE_GROUP_MEMBERS] = ",".join(sorted(group_members))
    if annotations:
        copy_meta["annotations"] = annotations
    return {
        "apiVersion": api.WORKLOAD.api_version,
        "kind": api.WORKLOAD.kind,
        "metadata": copy_meta,
        "spec": copy.deepcopy(local.get("spec") or {}),
    }


@dataclass
class Group:
    """What one reconcile knows about the workers of a Workload's MultiKueueConfig."""

    available: dict[str, RemoteClient] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    remotes: dict[str, Obj | None] = field(default_factory=dict)


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
        all_at_once: bool,
        external_nominations: bool = False,
        enqueue: Callable[[str], None] | None = None,
        least_loaded: LeastLoadedChoice | None = None,
    ) -> None:
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
        self.all_at_once = all_at_once
        # An external dispatcher owns nominatedClusterNames under its own field manager: our apply
        # cannot drop them, and clusterName may not be set beside them (the CRD's rule).
        self.external_nominations = external_nominations
        # Our least-loaded dispatcher: one copy where there is room, chosen here as AllAtOnce's are.
        self.least_loaded = least_loaded
        self.groups = Groups(workloads)
        # Re-runs a sibling's reconcile (group members react to each other's placement).
        self.enqueue = enqueue or (lambda _key: None)
        # Deleted Workloads, kept until their remote objects are gone (§2.3).
        self.deleted: dict[str, Obj] = {}
        # Workload key -> (owner GVK, owner name), kept while the Workload is tracked: a finished
        # Workload may lose its owner reference before its copies are cleaned up.
        self._owners: dict[str, tuple[str, str]] = {}
        # Workload key -> when (monotonic) the manager began to leave its Finished to the manager
        # cluster's job integration (LOCAL_FINISH_WAIT).
        self._local_finish_since: dict[str, float] = {}
        # Workload key -> when its copy was first seen gone while its job was still in the
        # worker's cache (_copy_gone_wait).
        self._copy_gone_since: dict[str, float] = {}
        # The manager cluster's Workload versions our status writes replaced, until the watch shows them.
        self._own_writes = OwnWrites(clock=clock.monotonic)

    def remember_deleted(self, wl: Obj) -> None:
        self.deleted[object_key(wl)] = wl

    # -- lookups -----------------------------------------------------------------------------

    def multikueue_check(self, wl: Obj) -> tuple[Obj, Obj] | None:
        """(AdmissionCheck, its state on `wl`) for the first check state whose check is ours."""
        for state in (wl.get("status") or {}).get("admissionChecks") or ():
            check = self.checks.get(state.get("name", ""))
            if is_multikueue_check(check):
                return check, state
        return None

    def forget(self, key: str) -> None:
        self.metrics.forget(key)
        self._owners.pop(key, None)
        self._local_finish_since.pop(key, None)
        self._copy_gone_since.pop(key, None)
        self._own_writes.forget(key)
        if self.least_loaded is not None:
            self.least_loaded.forget(key)

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
                self._local_finish_since.pop(key, None)
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
            await self.update_check_state(wl, state, api.CHECK_STATE_REJECTED, message)
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
                await self.update_check_state(wl, state, api.CHECK_STATE_REJECTED, message)
                return None
        group = self.read_group(wl, check)
        if deleted:
            for client in group.available.values():
                await self.remove_remote_objects(
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
        meta = wl["metadata"]
        namespace, name, key = meta["namespace"], meta["name"], object_key(wl)
        # 1. Nothing runs for this Workload here any more: nothing may run remotely either.
        if wlutil.is_finished(wl) or not wlutil.has_quota_reservation(wl):
            errors = []
            for client in group.available.values():
                try:
                    await self.remove_remote_objects(client, adapter, namespace, owner_name, name)
                except Exception as exc:
                    errors.append(f"cluster {client.name}: {exc}")
            if errors:
                raise DispatchError("; ".join(errors))
            later = Result(requeue_after=self.worker_lost_timeout) if group.unavailable else None
            if wlutil.is_finished(wl):
                self.forget(key)
                return later
            if not group.unavailable:
                # Its quota is released and no reachable worker runs it: a running state mirrored
                # last (a count raised after the release) would stand on the job for good.
                await adapter.release_local(namespace, owner_name)
            if state.get("state") == api.CHECK_STATE_RETRY:
                # Retry asks for an eviction; without quota there is nothing left to evict, and a
                # Retry check would keep the Workload inadmissible: it may try again.
                await self.update_check_state(wl, state, api.CHECK_STATE_PENDING, api.MSG_RETRY_WITHOUT_QUOTA)
            return later

        # 2. A remote copy finished: finish here too (or re-dispatch when it fell out of sync). A
        # copy that finished and then left its worker (with its job) counts: that run is over.
        kept = {c: r for c, r in group.remotes.items() if not group.available[c].withdrawn(r)}
        finished = best_match(kept, api.WORKLOAD_FINISHED) or self._finished_and_gone(
            wl, adapter, owner_name, group
        )
        if finished is not None:
            cluster, condition = finished
            if condition.get("reason") == api.REASON_OUT_OF_SYNC:
                if state.get("state") != api.CHECK_STATE_READY:
                    return None
                message = api.remote_out_of_sync_message(cluster)
                await self.update_check_state(wl, state, api.CHECK_STATE_RETRY, message)
                self.recorder.record(
                    wl, "Warning", api.EVENT_MULTIKUEUE, api.EVENT_MULTIKUEUE,
                    api.acs_update_message(message, api.CHECK_STATE_READY),
                )  # fmt: skip
                return None
            synced = await adapter.sync_finished(group.available[cluster], namespace, owner_name)
            if synced:
                # A job that ended before any progress was copied: its end is the first status copied.
                self.metrics.stage(key, "status_mirrored")
            waited = wlutil.seconds_since(condition.get("lastTransitionTime"), self.clock.now())
            if not synced and waited < FINISHED_SYNC_WAIT:
                # The Workload finishes once its job's end is copied: finished, it is never synced again.
                return Result(requeue_after=api.DEFERRED_SYNC_REQUEUE_AFTER)
            if synced and getattr(adapter, "finished_by_local_integration", False):
                # Two writers of the same condition within moments (upstream has both) cost a write
                # and, more often than not, a 409 on the finalizer removal that follows.
                since = self._local_finish_since.setdefault(key, self.clock.monotonic())
                left = LOCAL_FINISH_WAIT - (self.clock.monotonic() - since)
                if left > 0:
                    return Result(requeue_after=left)
            reason, message = condition.get("reason", ""), condition.get("message", "")
            await self._apply_finished(wl, reason, message)
            self.forget(key)
            return None

        # 3. Evicted on its worker: Retry, so that the manager evicts and requeues it.
        evicted = best_match(group.remotes, api.WORKLOAD_EVICTED)
        if evicted is not None:
            cluster, _ = evicted
            if wlutil.is_evicted(wl):
                client = group.available[cluster]
                if await self.sync_job(client, adapter, namespace, owner_name, name):
                    return Result(requeue_after=api.DEFERRED_SYNC_REQUEUE_AFTER)
                return None
            if state.get("state") == api.CHECK_STATE_READY:
                message = api.evicted_on_worker_message((wl.get("status") or {}).get("clusterName", ""))
                updated = wlutil.working_copy(wl)
                self._set_state(updated, state["name"], api.CHECK_STATE_RETRY, message)
                await self._apply_status(wl, updated)
                self.recorder.record(wl, "Normal", api.EVENT_MULTIKUEUE, api.EVENT_MULTIKUEUE, message)
                await self.retry_group(wl, cluster, api.group_member_left_message(name, cluster))
                return None

        # 4. Copies whose spec no longer matches ours are replaced (priority is patched in place).
        for cluster, remote in list(group.remotes.items()):
            if remote is None or not remote_spec_out_of_sync(wl, remote):
                continue
            client = group.available[cluster]
            if only_priority_differs(wl, remote):
                await client.kube.patch_merge(api.WORKLOAD, name, {"spec": priority_patch(wl)}, namespace)
                continue
            await self.remove_remote_objects(client, adapter, namespace, owner_name, name)
            group.remotes[cluster] = None

        # 5. The first admitted copy wins (in a group: the primary's; the others follow it).
        recorded = (wl.get("status") or {}).get("clusterName")
        candidates = self._winner_candidates(wl, adapter, group) if not recorded else group.remotes
        admitting = best_match(candidates, api.WORKLOAD_ADMITTED, prefer=recorded)
        if admitting is None and state.get("state") == api.CHECK_STATE_READY:
            return await self._admitting_remote_missing(wl, state, adapter, owner_name, group)
        if admitting is not None:
            return await self._sync_admitting_remote(wl, state, adapter, owner_name, group, admitting[0])

        # 6. Nothing admitted yet: nominate workers and keep copies on exactly those. Not while an
        # eviction is in progress: upstream reads an unset clusterName as "eviction done", but the
        # eviction clears it at once, while the old quota is still held (until released and
        # reserved again, Evicted stays True). A copy dispatched then would be admitted only to be
        # deactivated (step 5), and its job created and deleted on that worker.
        if wlutil.is_evicted(wl):
            await self._release_evicted(wl, adapter, owner_name, group)
            return None
        if state.get("state") != api.CHECK_STATE_PENDING or (wl.get("status") or {}).get("clusterName"):
            return None
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

    def _finished_and_gone(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group
    ) -> tuple[str, Obj] | None:
        """(worker, Finished condition) of a copy seen finished that is no longer there; or, when
        the copy left the worker it was admitted on unfinished, of that worker's job seen ended
        before it went (a job deleted at once as it completed takes the copy it owns along, before
        the worker finishes it): that run is over, and must not be dispatched again."""
        meta = wl["metadata"]
        for cluster, client in sorted(group.available.items()):
            if group.remotes.get(cluster) is None:
                gone = client.finished_gone(api.WORKLOAD, meta["namespace"], meta["name"])
                condition = find_status_condition(
                    ((gone or {}).get("status") or {}).get("conditions"), api.WORKLOAD_FINISHED
                )
                if condition is not None:
                    return cluster, condition
        admitted_on = (wl.get("status") or {}).get("clusterName")
        client = group.available.get(admitted_on or "")
        if client is None or group.remotes.get(admitted_on) is not None:
            return None
        ended = client.finished_gone(adapter.resource, meta["namespace"], owner_name)
        if ended is None:  # its end is in, its deletion not yet
            ended = client.cached(adapter.resource, meta["namespace"], owner_name)
        condition = job_end_condition(adapter.resource, ended) if ended is not None else None
        return (admitted_on, condition) if condition is not None else None

    async def _release_evicted(self, wl: Obj, adapter: Adapter, owner_name: str, group: Group) -> None:
        """An eviction the manager started completes only once the manager's job has stopped. No
        copy is admitted or being evicted on a reachable worker (both are handled above): the
        copy is gone or its worker unreachable, so nothing will mirror a stop; whatever is left of
        the job on reachable workers goes, and the local job drops its mirrored running state.
        The Workload is dispatched again once its quota is released and reserved anew."""
        meta = wl["metadata"]
        for client in group.available.values():
            await self.remove_remote_objects(client, adapter, meta["namespace"], owner_name, meta["name"])
        await adapter.release_local(meta["namespace"], owner_name)

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
        nominated = None if self.all_at_once else set(status.get("nominatedClusterNames") or ())
        for cluster, client in sorted(group.available.items()):
            if nominated is not None and cluster not in nominated:
                continue
            if group.remotes.get(cluster) is None:
                if not await client.serves_kind(adapter.resource):
                    conflicts[cluster] = api.kind_not_served_message(adapter.resource, cluster)
                elif await self._name_taken(client, adapter, namespace, owner_name):
                    kind = adapter.resource.kind
                    conflicts[cluster] = api.name_conflict_message(kind, namespace, owner_name, cluster)
        return conflicts

    async def _report_conflicts(self, wl: Obj, state: Obj, conflicts: dict[str, str]) -> None:
        """No worker is left: the check says why (it stays Pending: removing the foreign objects or
        adding a worker lets it go out), with a Warning event when that changes."""
        message = wlutil.truncate_message("; ".join(conflicts.values()))
        if state.get("message") == message:
            return
        updated = wlutil.working_copy(wl)
        self._set_state(updated, state["name"], api.CHECK_STATE_PENDING, message, keep_time=True)
        if (updated.get("status") or {}).get("nominatedClusterNames") and not self.external_nominations:
            updated["status"].pop("nominatedClusterNames")
        await self._apply_status(wl, updated)
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
            updated = wlutil.working_copy(wl)
            self._set_state(updated, state["name"], api.CHECK_STATE_PENDING, message, keep_time=True)
            await self._apply_status(wl, updated)
        return None

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
        await self.update_check_state(wl, state, api.CHECK_STATE_RETRY, message)
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
            await self._remove_other_copies(wl, adapter, owner_name, group, cluster)
            await self._deactivate_remote(client, wl, group.remotes[cluster])
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
            if not current and await self._name_taken(client, adapter, namespace, owner_name, fresh=True):
                # Taken after the copy went out: that copy goes, and the next dispatch excludes
                # this worker (step 6).
                await self.remove_remote_objects(client, adapter, namespace, owner_name, name)
                return Result(requeue=True)
            if (
                became_ready
                or state.get("message") != message
                or not current
                or status.get("nominatedClusterNames")
            ):
                # The winner is recorded first: this write fails on a stale copy of the Workload (one
                # that does not show a winner recorded meanwhile), before anything is deleted.
                await self._mark_ready(wl, state, cluster, message, became_ready)
        await self._remove_other_copies(wl, adapter, owner_name, group, cluster)
        deferred = await self.sync_job(client, adapter, namespace, owner_name, name)
        if became_ready:
            self.enqueue_siblings(wl)
            self.recorder.record(wl, "Normal", api.EVENT_MULTIKUEUE, api.EVENT_MULTIKUEUE, message)
            self.metrics.admitted((status.get("admission") or {}).get("clusterQueue", ""), cluster)
            self.metrics.stage(key, "check_ready")
        if not deferred and state.get("state") == api.CHECK_STATE_READY:
            self.metrics.stage(key, "status_mirrored")
        return Result(requeue_after=api.DEFERRED_SYNC_REQUEUE_AFTER if deferred else self.worker_lost_timeout)

    async def _remove_other_copies(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group, cluster: str
    ) -> None:
        meta = wl["metadata"]
        for other, remote in group.remotes.items():
            if other != cluster and remote is not None:
                await self.remove_remote_objects(
                    group.available[other], adapter, meta["namespace"], owner_name, meta["name"]
                )

    async def _mark_ready(self, wl: Obj, state: Obj, cluster: str, message: str, became_ready: bool) -> None:
        """One admission-status apply: the check Ready, clusterName set, nominations cleared, and
        Admitted when every other check is Ready too (upstream's manager cluster writes that in a
        second write, from its workload controller; the manager cluster's worker_agent still
        records the Admitted Event and metrics when it sees it)."""
        base = wl
        if self.external_nominations and (wl.get("status") or {}).get("nominatedClusterNames"):
            meta = wl["metadata"]
            base = await self.kube.patch_status_merge(
                api.WORKLOAD, meta["name"], {"status": {"nominatedClusterNames": None}}, meta["namespace"]
            )
        updated = wlutil.working_copy(base)
        self._set_state(updated, state["name"], api.CHECK_STATE_READY, message, keep_time=not became_ready)
        updated["status"]["clusterName"] = cluster
        updated["status"].pop("nominatedClusterNames", None)
        if not wlutil.is_evicted(updated):
            wlutil.sync_admitted_condition(updated, self.clock.now())
        if base is not wl:
            self._own_writes.wrote(object_key(wl), wl, base)
        await self._apply_status(base, updated)

    async def _deactivate_remote(self, client: RemoteClient, wl: Obj, remote: Obj | None) -> None:
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

    async def nominate_and_synchronize(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group, excluded: set[str] | None = None
    ) -> float | None:
        """`excluded`: workers that get no copy of this Workload (a foreign object holds its job's
        name there). Returns when to look again (the least-loaded dispatcher's round), or None."""
        excluded = excluded or set()
        status = wl.get("status") or {}
        others = [
            s
            for s in status.get("admissionChecks") or ()
            if not is_multikueue_check(self.checks.get(s.get("name", "")))
        ]
        if any(s.get("state") != api.CHECK_STATE_READY for s in others):
            return None  # other checks first (§3.4.4 step 2); their change brings us back
        self.metrics.stage(object_key(wl), "quota_reserved")
        members: list[Obj] = []
        if getattr(adapter, "multi_workload", False):
            allowed = await self._group_allows_dispatch(wl, adapter, owner_name, group)
            if allowed is None:
                return None
            members = allowed
        current = list(status.get("nominatedClusterNames") or ())
        wait = None
        if self.all_at_once:
            nominated = sorted(set(group.available) - excluded)
        elif self.least_loaded is not None:
            everyone = [c for c in group.available if c not in excluded]
            nominated, wait = self.least_loaded.nominate(object_key(wl), current, everyone, group.remotes)
        else:
            nominated = current
        if set(nominated) != set(current):
            await self.set_nominated(wl, nominated)
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
                    await self._create_member_copies(client, wl, members)
                except Exception as exc:
                    errors.append(f"cluster {cluster}: {exc}")
                    continue
            if cluster in nominated and remote is None:
                try:
                    body = remote_copy(wl, self.origin, group_members=member_names)
                    if await self._create_copy(client, wl, body):
                        created.append(cluster)
                except Exception as exc:
                    errors.append(f"cluster {cluster}: {exc}")
            elif cluster not in nominated and remote is not None:
                await self.remove_remote_objects(client, adapter, meta["namespace"], owner_name, meta["name"])
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
        return wait

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
                await self.set_nominated(wl, [assigned])
            await self._sync_to_single_cluster(wl, adapter, owner_name, group, assigned)
            return None
        if not self.groups.is_primary(adapter.workload_index(wl), others, adapter.workload_index):
            return None
        if not all(wlutil.has_quota_reservation(m) and not wlutil.is_finished(m) for m in others):
            return None  # a member's quota reservation re-runs its siblings
        return others

    async def _create_member_copies(self, client: RemoteClient, primary: Obj, members: list[Obj]) -> None:
        primary_name = primary["metadata"]["name"]
        for member in members:
            meta = member["metadata"]
            if client.remote_workload(meta["namespace"], meta["name"]) is None:
                await self._create_copy(
                    client, member, remote_copy(member, self.origin, group_primary=primary_name)
                )

    async def _create_copy(self, client: RemoteClient, wl: Obj, body: Obj) -> bool:
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

    async def _sync_to_single_cluster(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group, cluster: str
    ) -> None:
        if group.remotes.get(cluster) is None:
            await self._create_copy(group.available[cluster], wl, remote_copy(wl, self.origin))
        await self._remove_other_copies(wl, adapter, owner_name, group, cluster)

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
                    await self.update_check_state(member, found[1], api.CHECK_STATE_RETRY, message)
                except Conflict:
                    self.enqueue(object_key(member))  # it changed meanwhile: its own reconcile decides

    async def _apply_finished(self, wl: Obj, reason: str, message: str) -> None:
        """Finished=True, as upstream writes it: a forced apply of that one condition under a field
        manager of its own, without resourceVersion. The worker_agent's Job integration finishes the
        same Workload when the mirrored Job ends, within moments; a strict apply of the whole status
        here met its write with a 409 about once per Workload."""
        updated = wlutil.status_working_copy(wl)
        wlutil.set_condition(updated, api.WORKLOAD_FINISHED, "True", reason, message, self.clock.now())
        body = wlutil.status_apply_body(
            wl, {"conditions": [wlutil.condition(updated, api.WORKLOAD_FINISHED)]}
        )
        await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_MULTIKUEUE_FINISH, force=True)

    async def _name_taken(
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

    # -- writes ------------------------------------------------------------------------------

    async def set_nominated(self, wl: Obj, nominated: list[str]) -> None:
        updated = wlutil.working_copy(wl)
        updated.setdefault("status", {})["nominatedClusterNames"] = nominated
        await self._apply_status(wl, updated)

    async def _apply_status(self, wl: Obj, updated: Obj) -> Obj:
        """The admission-status apply of `updated`, made from `wl` (the cached copy), which fails
        with Conflict if `wl` is stale. Until the watch shows the write, reconciles of this Workload
        wait for it instead of writing again from the replaced version (`OwnWrites`)."""
        written = await wlutil.apply_admission_status(self.kube, updated, strict=True)
        self._own_writes.wrote(object_key(wl), wl, written)
        return written

    def _set_state(self, wl: Obj, check_name: str, state: str, message: str, keep_time: bool = False) -> None:
        for entry in wl["status"].get("admissionChecks") or ():
            if entry.get("name") == check_name:
                entry["state"] = state
                entry["message"] = wlutil.truncate_message(message)
                if not keep_time:
                    entry["lastTransitionTime"] = format_time(self.clock.now())

    async def update_check_state(self, wl: Obj, state: Obj, new_state: str, message: str) -> None:
        """updateACS (§2.4): only our check state, under our own field manager, with the old state."""
        body = {
            "apiVersion": api.WORKLOAD.api_version,
            "kind": api.WORKLOAD.kind,
            "metadata": {"name": wl["metadata"]["name"], "namespace": wl["metadata"]["namespace"]},
            "status": {
                "admissionChecks": [
                    {
                        "name": state["name"],
                        "state": new_state,
                        "lastTransitionTime": format_time(self.clock.now()),
                        "message": wlutil.truncate_message(
                            api.acs_update_message(message, state.get("state", ""))
                        ),
                    }
                ]
            },
        }
        version = wl["metadata"].get("resourceVersion")
        if version:
            # Strict: a Retry written over a stale copy (one that misses an eviction meanwhile, which
            # reset the check to Pending and released the quota) would leave the Workload
            # inadmissible for good; the conflict makes us read it again instead.
            body["metadata"]["resourceVersion"] = version
        try:
            await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_MULTIKUEUE, force=True)
        except NotFound:
            return

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
