"""Step 2 of a manager Workload's reconcile (multikueue-spec §3.4): a copy finished on its worker,
so the Workload finishes here too, once its job's end has reached the manager's job; or, when the
copy fell out of sync, the check asks for a Retry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition
from kube_runtime.controller import Result
from kube_runtime.events import EventRecorder
from kube_runtime.informer import object_key
from kueue_domain import api
from kueue_domain import workload as wlutil
from manager.adapters.base import Adapter
from manager.copies import Group, best_match
from manager.metrics import ManagerMetrics
from manager.remote import job_end_condition
from manager.workload_status import WorkloadStatus

Obj = dict[str, Any]

# How long a finished copy's Workload waits for the end of its job to reach the manager's job.
FINISHED_SYNC_WAIT = 30.0

# A Job's end copied to the manager's Job: the manager cluster's job integration finishes the
# Workload from it, within moments; the manager writes Finished itself only if that has not
# happened this long after the worker's copy finished (an agent down, or no Job integration there).
LOCAL_FINISH_WAIT = 5.0


class FinishMirror:
    def __init__(
        self,
        status: WorkloadStatus,
        *,
        recorder: EventRecorder,
        metrics: ManagerMetrics,
        clock: Clock,
        forget: Callable[[str], None],
    ) -> None:
        self.status = status
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        # Called with the Workload's key once it is finished here: it is no longer tracked.
        self.on_finished = forget
        # Workload key -> when (monotonic) the manager began to leave its Finished to the manager
        # cluster's job integration (LOCAL_FINISH_WAIT).
        self._local_finish_since: dict[str, float] = {}

    def forget(self, key: str) -> None:
        self._local_finish_since.pop(key, None)

    def finished_copy(
        self, wl: Obj, adapter: Adapter, owner_name: str, group: Group
    ) -> tuple[str, Obj] | None:
        """(worker, Finished condition) of the copy whose run is over. A copy that finished and
        then left its worker (with its job) counts."""
        kept = {c: r for c, r in group.remotes.items() if not group.available[c].withdrawn(r)}
        return best_match(kept, api.WORKLOAD_FINISHED) or self._finished_and_gone(
            wl, adapter, owner_name, group
        )

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

    async def mirror(
        self, wl: Obj, state: Obj, adapter: Adapter, owner_name: str, group: Group, finished: tuple[str, Obj]
    ) -> Result | None:
        """Finish `wl` as its copy on the worker `finished` names did (or re-dispatch when that copy
        fell out of sync)."""
        cluster, condition = finished
        namespace, key = wl["metadata"]["namespace"], object_key(wl)
        if condition.get("reason") == api.REASON_OUT_OF_SYNC:
            if state.get("state") != api.CHECK_STATE_READY:
                return None
            message = api.remote_out_of_sync_message(cluster)
            await self.status.update_check_state(wl, state, api.CHECK_STATE_RETRY, message)
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
        await self.status.apply_finished(wl, reason, message)
        self.on_finished(key)
        return None
