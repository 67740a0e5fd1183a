"""The job framework's Workload side: finding the one Workload that matches an object (deleting or
rewriting the others), creating it with its priority, releasing the Workloads of owners that are
gone, and the status fields a job writes (reclaimable pods, PodsReady)."""

from __future__ import annotations

import copy
from typing import Any

from kube_runtime.client import Conflict, NotFound
from kueue_domain import api
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework
from worker_agent.integrations.jobframework.objects import (
    INDEX_JOB_UID_LABEL,
    labels_of,
    pods_ready_condition,
)

Obj = dict[str, Any]


class WorkloadLookups(framework.WorkloadWrites):
    """Mixin of JobReconciler; uses its hooks (podsets, equivalent, stop, ...) and caches."""

    agent: Any
    state: Any
    config: Any
    follows_gc_orphans: bool
    updates_mismatching_workload: bool
    _gone_uids: dict[str, str]
    _index_owner_key: str

    # -- Workload lookup, creation and clean-up ------------------------------------------------

    async def _ensure_one_workload(self, obj: Obj, owned: list[Obj], queue: str) -> tuple[Obj | None, bool]:
        """(the matching Workload, retry): rewrites an unreserved mismatching Workload of a
        suspended object (updates_mismatching_workload), stops a running object without a match and
        deletes the other Workloads."""
        flavors = self._flavors()
        match = next((wl for wl in owned if self.equivalent(obj, wl, flavors)), None)
        others = [wl for wl in owned if wl is not match]
        to_update = None
        if (
            self.updates_mismatching_workload
            and match is None
            and others
            and self.is_suspended(obj)
            and not wlstatus.has_quota_reservation(others[0])
        ):
            to_update, others = others[0], others[1:]
        if match is None and not self.is_suspended(obj) and not self.finished(obj)[0]:
            previous = others[0] if len(others) == 1 else None
            message = api.MSG_NO_MATCHING_WORKLOAD if previous is not None else api.MSG_MISSING_WORKLOAD
            await self.stop(obj, previous, message)
        if await self._delete_workloads(obj, others):
            return None, True
        if to_update is not None:
            return await self._update_workload_to_match(obj, to_update, queue), False
        if match is not None:
            # A changed priority-class label: the Workload takes the new class and value. The label
            # as it is decides whether it changed (a default class created later is not taken up).
            podsets = (match.get("spec") or {}).get("podSets") or []
            match, ok = await self._follow_priority_label(
                obj,
                match,
                labels_of(obj).get(api.LABEL_PRIORITY_CLASS) or "",
                lambda: self._priority(obj, podsets),
            )
            if not ok:
                return None, True
        return match, False

    async def _delete_workloads(self, obj: Obj, workloads: list[Obj]) -> int:
        """Deletes Workloads that do not match the object; how many it deleted."""
        deleted = 0
        for wl in workloads:
            meta = wl["metadata"]
            await self._remove_finalizer(wl)
            try:
                await self.kube.delete(api.WORKLOAD, meta["name"], namespace=meta["namespace"])
            except NotFound:
                continue
            deleted += 1
            await self._event(
                obj,
                api.EVENT_DELETED_WORKLOAD,
                api.deleted_not_matching_workload_message(meta["namespace"], meta["name"]),
            )
        return deleted

    async def _update_workload_to_match(self, obj: Obj, wl: Obj, queue: str) -> Obj | None:
        body, _ = self._workload_body(obj, queue)
        if body is None:
            return None
        updated = copy.deepcopy(wl)
        spec = body["spec"]
        if (wl.get("spec") or {}).get("active") is False:
            spec["active"] = False
        updated["spec"] = spec
        try:
            result = await self.kube.replace(api.WORKLOAD, updated)
        except (NotFound, Conflict):
            return None
        meta = wl["metadata"]
        await self._event(
            obj,
            api.EVENT_UPDATED_WORKLOAD,
            api.updated_not_matching_workload_message(meta["namespace"], meta["name"]),
        )
        return result

    async def _prebuilt_workload(self, obj: Obj, name: str) -> Obj | None:
        """A Workload created for the object beforehand (e.g. by MultiKueue): adopted, or None."""
        return await self._adopt_prebuilt(
            obj,
            name,
            framework.owner_reference(self.typed(obj)),
            lambda wl: self.equivalent(obj, wl, self._flavors()),
        )

    def _priority_label(self, obj: Obj) -> str:
        """The object's `kueue.x-k8s.io/priority-class`, or the default WorkloadPriorityClass the
        defaulting webhook gives an object without one."""
        name = labels_of(obj).get(api.LABEL_PRIORITY_CLASS) or ""
        if not name and self.state.priority_classes.get(api.DEFAULT_NAME) is not None:
            name = api.DEFAULT_NAME
        return name

    def _priority(self, obj: Obj, podsets: list[Obj]) -> tuple[Obj, str | None]:
        """(the Workload's priority fields, None) or ({}, error) when its priority class is missing."""
        labels = {api.LABEL_PRIORITY_CLASS: self._priority_label(obj)}
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        pod_class = self.pod_priority_class(obj, podsets)
        return framework.priority_for(labels, wpcs, pod_class, self.pod_priority_classes())

    def _workload_body(self, obj: Obj, queue: str) -> tuple[Obj | None, str | None]:
        """(the Workload for the object, None) or (None, error) when its priority class is missing."""
        podsets = self.podsets(obj)
        priority, error = self._priority(obj, podsets)
        if error:
            return None, error
        return framework.new_workload(
            self.typed(obj),
            self.workload_name(obj),
            podsets,
            queue,
            priority=priority,
            label_keys_to_copy=self.config.label_keys_to_copy,
        ), None

    async def _create_workload(self, obj: Obj, queue: str) -> None:
        body, error = self._workload_body(obj, queue)
        if body is None:
            await self._event(obj, api.EVENT_WORKLOAD_PRIORITY_CLASS_NOT_FOUND, error or "", warning=True)
            return
        meta = body["metadata"]
        try:
            created = await self.kube.create(api.WORKLOAD, body, namespace=meta["namespace"])
        except Conflict:
            return  # already there; the informer has not seen it yet
        framework.record_creation_latency(getattr(self.agent, "metrics", None), self.typed(obj), created)
        await self._event(
            obj,
            api.EVENT_CREATED_WORKLOAD,
            api.created_workload_event_message(meta["namespace"], meta["name"]),
        )

    async def _release_orphans(self, key: str, live_uid: str | None) -> None:
        """Finish and let go the Workloads of deleted objects named `key` (not those of the live one)."""
        orphans = self._workloads_of_gone_owner(key, live_uid)
        for wl in orphans:
            await self._finish_orphan(wl)
        if not any(api.FINALIZER_RESOURCE_IN_USE in (w["metadata"].get("finalizers") or ()) for w in orphans):
            self._gone_uids.pop(key, None)  # nothing left to release

    def _workloads_of_gone_owner(self, key: str, live_uid: str | None) -> list[Obj]:
        """Workloads of a deleted object named `key`, still referring to it. With follows_gc_orphans
        also those the garbage collector orphaned, labelled with its UID; and, with a live object of
        that name (`live_uid`), only those of an object seen deleted: the object cache may be behind
        the Workload cache."""
        by_key = self.state.workloads.by_index(self._index_owner_key, key)
        if not self.follows_gc_orphans:
            return [wl for wl in by_key if (self.controlling(wl) or {}).get("uid") != live_uid]
        gone_uid = self._gone_uids.get(key)
        found = [
            wl
            for wl in by_key
            if (uid := self.controlling(wl)["uid"]) != live_uid and (live_uid is None or uid == gone_uid)
        ]
        if gone_uid:
            namespace = key.partition("/")[0]
            found += [
                wl
                for wl in self.state.workloads.by_index(INDEX_JOB_UID_LABEL, gone_uid)
                if self.controlling(wl) is None and wl["metadata"].get("namespace") == namespace
            ]
        return found

    # -- Workload status -------------------------------------------------------------------------

    async def _sync_reclaimable_pods(self, obj: Obj, wl: Obj) -> Obj:
        desired = self.reclaimable_pods(obj, wl)
        current = [
            {"name": r.get("name"), "count": int(r.get("count") or 0)}
            for r in (wl.get("status") or {}).get("reclaimablePods") or ()
        ]
        if sorted(desired, key=lambda r: r["name"]) == sorted(current, key=lambda r: r["name"] or ""):
            return wl
        return await self._apply_status(wl, {"reclaimablePods": desired}, api.FIELD_MANAGER_RECLAIMABLE_PODS)

    async def _sync_pods_ready(self, obj: Obj, wl: Obj) -> Obj:
        wanted = pods_ready_condition(self.pods_ready(obj), wl)
        previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
        if (
            previous is not None
            and (previous.get("status"), previous.get("reason"), previous.get("message")) == wanted
        ):
            return wl
        current = wlstatus.working_copy(wl)
        wlstatus.set_condition(current, api.WORKLOAD_PODS_READY, *wanted, self.agent.clock.now())
        condition = wlstatus.condition(current, api.WORKLOAD_PODS_READY)
        return await self._apply_status(wl, {"conditions": [condition]}, api.FIELD_MANAGER_PODS_READY)
