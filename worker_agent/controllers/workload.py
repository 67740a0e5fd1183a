"""The Workload controller: everything about a Workload's admission status that is not the
scheduler's own decision.

One reconcile per Workload key, level-triggered: it reads the cached object, computes the next
status with `kueue_domain.workload`, and writes it with one strict server-side apply (a conflict
simply retries). Deadlines (PodsReady timeout, requeue backoff, maximum execution time) come back
as `Result(requeue_after=...)`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple

import structlog

from kube_runtime.apply import set_finalizer
from kube_runtime.client import KubeClient, NotFound
from kube_runtime.clock import Clock
from kube_runtime.conditions import parse_time
from kube_runtime.controller import Result
from kube_runtime.events import EventRecorder
from kueue_domain import api, features
from kueue_domain import workload as wlstatus
from worker_agent.admission import AdmissionState
from worker_agent.controllers.workload_timers import (
    admitted_deadlines,
    finish_requeue_backoff,
    max_exec_remaining,
    pods_ready_remaining,
)

log = structlog.get_logger("worker_agent.workload")

Obj = dict[str, Any]


# QuotaReserved=False reasons that a "Bypassed scheduling evaluation" message may replace: queued,
# or coming back to the queue. Scheduler diagnoses and static blockers are kept.
BYPASS_CHECKED_REASONS = frozenset(
    {"", api.REASON_PENDING_EVALUATION, api.REASON_PENDING, api.REASON_DEACTIVATED, api.REASON_SUSPENDED}
)


# A pending Workload's admission checks (Pending) are written by the scheduler with its quota
# reservation; the workload controller writes them on their own once the Workload is this old and
# still waits (upstream's writes them at once, often a moment before the reservation that repeats them).
CHECKS_LIST_GRACE_SECONDS = 2.0


class _Queues(NamedTuple):
    """A Workload's LocalQueue and ClusterQueue objects (None when missing) and its ClusterQueue's name."""

    lq: Obj | None
    cq: Obj | None
    cq_name: str | None


class WorkloadController:
    def __init__(
        self,
        kube: KubeClient,
        state: AdmissionState,
        clock: Clock | None = None,
        recorder: EventRecorder | None = None,
        metrics: Any = None,
    ) -> None:
        self.kube = kube
        self.state = state
        self.config = state.config
        self.gates = state.config.features
        self.clock = clock or Clock()
        self.recorder = recorder
        self.metrics = metrics

    async def _write(self, wl: Obj) -> None:
        try:
            await wlstatus.apply_admission_status(self.kube, wl, strict=True)
        except NotFound:
            return

    async def _event(self, wl: Obj, type_: str, reason: str, note: str) -> None:
        if self.recorder is not None:
            await self.recorder.event(wl, type_, reason, "Reconcile", note)

    async def reconcile(self, key: str) -> Result | None:
        cached = self.state.workloads.get(key)
        if cached is None:
            return None
        if self._orphaned(cached):
            return await self._finish_orphan(wlstatus.working_copy(cached), self.clock.now())
        if cached["metadata"].get("deletionTimestamp"):
            # Deleted and not (or no longer) holding quota: nothing left to release.
            if wlstatus.is_finished(cached) or not wlstatus.has_quota_reservation(cached):
                await self._remove_finalizer(cached)
            return None
        if wlstatus.is_finished(cached):
            return await self._retain_finished(cached)
        now = self.clock.now()
        wl = wlstatus.status_working_copy(cached)  # below, only the status changes
        name, namespace = wl["metadata"]["name"], wl["metadata"]["namespace"]

        # --- deactivation
        if not wlstatus.is_active(wl):
            return await self._reconcile_inactive(wl, now)
        target = wlstatus.condition(wl, api.WORKLOAD_DEACTIVATION_TARGET)
        if target and target.get("status") == "True":
            await self.kube.patch_merge(api.WORKLOAD, name, {"spec": {"active": False}}, namespace=namespace)
            return None
        return await self._reconcile_active(key, wl, now)

    async def _reconcile_active(self, key: str, wl: Obj, now: dt.datetime) -> Result | None:
        """An active Workload: its admission checks, then as one holding quota or as a pending one."""
        changed = False
        requeued = wlstatus.condition(wl, api.WORKLOAD_REQUEUED)
        if (
            requeued
            and requeued.get("status") == "False"
            and requeued.get("reason") == api.REASON_DEACTIVATED
            and not wlstatus.has_quota_reservation(wl)
        ):
            changed |= wlstatus.set_requeued(wl, True, api.REASON_REACTIVATED, api.MSG_REACTIVATED, now)

        lq = self.state.local_queue_for(wl)
        cq_name = self.state.cluster_queue_for(wl)
        cq = self.state.cluster_queues.get(cq_name) if cq_name else None

        # --- admission checks
        checks_synced = False
        if cq is not None:
            admission = (wl.get("status") or {}).get("admission")
            required = wlstatus.required_admission_checks(cq.get("spec") or {}, admission)
            checks_synced = wlstatus.sync_admission_checks(wl, required, now)

        result = await self._reconcile_checks(wl, now)
        if result is not None:
            return result if result is not True else None

        queues = _Queues(lq, cq, cq_name)
        if wlstatus.has_quota_reservation(wl):
            return await self._reconcile_reserved(key, wl, queues, changed | checks_synced, now)
        return await self._reconcile_pending(key, wl, queues, changed, checks_synced, now)

    async def _reconcile_reserved(
        self, key: str, wl: Obj, queues: _Queues, changed: bool, now: dt.datetime
    ) -> Result | None:
        """A Workload holding quota: its Admitted condition, stop policies, missing queues, deadlines."""
        lq, cq, cq_name = queues
        was_admitted = wlstatus.is_admitted(wl)
        if wlstatus.sync_admitted_condition(wl, now):
            changed = True
            if not was_admitted and wlstatus.is_admitted(wl):
                self.state.note_own_admission(key)  # its watch event may come before the answer
                try:
                    await self._write(wl)
                except BaseException:
                    self.state.drop_own_admission(key)
                    raise
                await self.state.announce_admitted(wl, cq_name or "", now)
                return None
        stop = await self._reconcile_queue_state(wl, lq, cq, cq_name, now)
        if stop is not None:
            return stop
        if changed:
            await self._write(wl)
            return None
        return await self._enforce_deadlines(wl, now)

    async def _reconcile_pending(
        self, key: str, wl: Obj, queues: _Queues, changed: bool, checks_synced: bool, now: dt.datetime
    ) -> Result | None:
        """A pending Workload: requeue backoff, restarted or missing queues, its pending condition."""
        lq, cq, cq_name = queues
        if wlstatus.is_on_hold(wl):
            # Kept out of the queues by its owner (a StatefulSet scaled to zero): its reason stays.
            if changed or checks_synced:
                await self._write(wl)
            return None
        requeue_after = finish_requeue_backoff(wl, now)
        if requeue_after == 0.0:
            changed = True
            requeue_after = None
        changed |= self._restarted_queues(wl, lq, cq, now)
        problem = self._queue_problems(wl, lq, cq, cq_name, now)
        changed |= problem or self._bypassed(wl, key, now)
        created = wl["metadata"].get("creationTimestamp")
        if checks_synced and not changed and created:
            hold = CHECKS_LIST_GRACE_SECONDS - wlstatus.seconds_since(created, now)
            if hold > 0:
                # A new Workload's checks, and nothing else: the scheduler writes them with the quota
                # reservation, usually within moments; this write would be one more on the Workload.
                return Result(requeue_after=min(hold, requeue_after) if requeue_after else hold)
        changed |= checks_synced
        if changed:
            await self._write(wl)
        return Result(requeue_after=requeue_after) if requeue_after else None

    # ---------------------------------------------------------------------------------------------

    @staticmethod
    def _orphaned(wl: Obj) -> bool:
        """Created for a job (job-uid label) whose owner is gone (FinishOrphanedWorkloads)."""
        meta = wl.get("metadata") or {}
        return (
            bool((meta.get("labels") or {}).get(api.LABEL_JOB_UID))
            and not meta.get("ownerReferences")
            and not meta.get("deletionTimestamp")
        )

    async def _finish_orphan(self, wl: Obj, now: dt.datetime) -> None:
        if not wlstatus.is_finished(wl):
            wlstatus.set_condition(
                wl, api.WORKLOAD_FINISHED, "True", api.REASON_OWNER_NOT_FOUND, api.MSG_OWNER_NOT_FOUND, now
            )
            await self._write(wl)
        await self._remove_finalizer(wl)

    async def _retain_finished(self, wl: Obj) -> Result | None:
        """ObjectRetentionPolicies: a finished Workload is deleted `afterFinished` after its Finished
        condition (without our finalizer, which a finished Workload no longer needs); until then it
        comes back when that time is up."""
        keep = self.config.workload_retention.after_finished_seconds
        if keep is None:
            return None
        finished = wlstatus.condition(wl, api.WORKLOAD_FINISHED) or {}
        remaining = keep - wlstatus.seconds_since(finished.get("lastTransitionTime"), self.clock.now())
        if remaining > 0:
            return Result(requeue_after=remaining)
        meta = wl["metadata"]
        if api.FINALIZER_RESOURCE_IN_USE in (meta.get("finalizers") or ()):
            await self._remove_finalizer(wl)
        try:
            await self.kube.delete(api.WORKLOAD, meta["name"], namespace=meta["namespace"])
        except NotFound:
            return None
        log.info(
            "deleted a finished workload: its retention elapsed",
            workload=f"{meta['namespace']}/{meta['name']}",
        )
        if self.recorder is not None:
            await self.recorder.normal(
                wl, api.EVENT_DELETED, api.EVENT_ACTION_DELETED, api.MSG_DELETED_FINISHED_WORKLOAD
            )
        return None

    async def _remove_finalizer(self, wl: Obj) -> None:
        await set_finalizer(
            self.kube, api.WORKLOAD, wl, api.FINALIZER_RESOURCE_IN_USE, present=False, strict=False
        )

    async def _reconcile_inactive(self, wl: Obj, now: dt.datetime) -> Result | None:
        target = wlstatus.condition(wl, api.WORKLOAD_DEACTIVATION_TARGET)
        reason, message = api.REASON_DEACTIVATED, api.deactivated_message()
        if target and target.get("status") == "True":
            reason = api.deactivated_due_to(target.get("reason", ""))
            message = api.deactivated_message(target.get("message", ""))
        changed = False
        evicted_now = False
        if wlstatus.has_quota_reservation(wl) and not wlstatus.is_evicted(wl):
            changed |= wlstatus.set_evicted(wl, reason, message, now)
            evicted_now = True
        if target is not None:
            changed |= wlstatus.remove_condition(wl, api.WORKLOAD_DEACTIVATION_TARGET)
        status = wl.setdefault("status", {})
        if status.pop("requeueState", None) is not None:
            changed = True
        if not wlstatus.has_quota_reservation(wl):
            reserved = wlstatus.condition(wl, api.WORKLOAD_QUOTA_RESERVED)
            if reserved is not None or wlstatus.condition(wl, api.WORKLOAD_EVICTED) is not None:
                deactivated = wlstatus.unadmitted_reason(
                    self.gates, api.REASON_DEACTIVATED, api.REASON_PENDING
                )
                changed |= wlstatus.set_condition(
                    wl, api.WORKLOAD_QUOTA_RESERVED, "False", deactivated, message, now
                )
            requeued = wlstatus.condition(wl, api.WORKLOAD_REQUEUED)
            if requeued is None or requeued.get("status") == "True":
                evicted = wlstatus.condition(wl, api.WORKLOAD_EVICTED)
                if evicted is not None and evicted.get("status") == "True":
                    changed |= wlstatus.set_requeued(
                        wl, False, evicted.get("reason", reason), evicted.get("message", message), now
                    )
        if changed:
            await self._write(wl)
        if evicted_now:
            cq = self.state.cluster_queue_for(wl) or ""
            await self._event(wl, api.EVENT_NORMAL, api.evicted_due_to_event(reason), message)
            if self.metrics is not None:
                self.metrics.evicted(cq, reason, "")
        return None

    async def _reconcile_checks(self, wl: Obj, now: dt.datetime) -> Result | bool | None:
        """Rejected -> DeactivationTarget; Retry -> evict with backoff. True when it wrote."""
        checks = wlstatus.check_states(wl)
        rejected = [c for c in checks if c.get("state") == api.CHECK_STATE_REJECTED]
        if rejected:
            message = api.admission_check_rejected_message(
                (c["name"], c.get("message", "")) for c in rejected
            )
            wlstatus.set_deactivation_target(wl, api.REASON_ADMISSION_CHECK, message, now)
            await self._write(wl)
            first = rejected[0]
            await self._event(
                wl,
                api.EVENT_WARNING,
                api.EVENT_ADMISSION_CHECK_REJECTED,
                f"Deactivating workload because AdmissionCheck for {first['name']} was Rejected: "
                f"{first.get('message', '')}",
            )
            return True
        retry = [c for c in checks if c.get("state") == api.CHECK_STATE_RETRY]
        if retry and wlstatus.has_quota_reservation(wl) and not wlstatus.is_evicted(wl):
            message = api.evicted_due_to_admission_check_retry_message(
                (c["name"], c.get("message", "")) for c in retry
            )
            requeue_at = None
            for c in retry:
                after = c.get("requeueAfterSeconds")
                if after and c.get("lastTransitionTime"):
                    at = parse_time(c["lastTransitionTime"]) + dt.timedelta(seconds=int(after))
                    requeue_at = at if requeue_at is None or at > requeue_at else requeue_at
            wlstatus.set_evicted(wl, api.REASON_ADMISSION_CHECK, message, now)
            if requeue_at is not None:
                state = wl.setdefault("status", {}).setdefault("requeueState", {})
                state["requeueAt"] = requeue_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            await self._write(wl)
            await self._event(
                wl, api.EVENT_NORMAL, api.evicted_due_to_event(api.REASON_ADMISSION_CHECK), message
            )
            if self.metrics is not None:
                self.metrics.evicted(self.state.cluster_queue_for(wl) or "", api.REASON_ADMISSION_CHECK, "")
            return True
        return None

    async def _reconcile_queue_state(
        self, wl: Obj, lq: Obj | None, cq: Obj | None, cq_name: str | None, now: dt.datetime
    ) -> Result | None:
        """Stop policies and missing queues for a workload holding quota."""
        lq_policy = ((lq or {}).get("spec") or {}).get("stopPolicy") or api.STOP_POLICY_NONE
        cq_policy = ((cq or {}).get("spec") or {}).get("stopPolicy") or api.STOP_POLICY_NONE
        queue = (wl.get("spec") or {}).get("queueName", "")
        if wlstatus.is_admitted(wl):
            for policy, reason, message in (
                (lq_policy, api.REASON_LOCAL_QUEUE_STOPPED, api.MSG_LOCAL_QUEUE_STOPPED),
                (cq_policy, api.REASON_CLUSTER_QUEUE_STOPPED, api.MSG_CLUSTER_QUEUE_STOPPED),
            ):
                if policy == api.STOP_POLICY_HOLD_AND_DRAIN and not wlstatus.is_evicted(wl):
                    wlstatus.set_evicted(wl, reason, message, now)
                    await self._write(wl)
                    await self._event(wl, api.EVENT_NORMAL, api.evicted_due_to_event(reason), message)
                    if self.metrics is not None:
                        self.metrics.evicted(cq_name or "", reason, "")
                    return Result()
            return None
        problem = None
        if lq is None or (lq.get("metadata") or {}).get("deletionTimestamp"):
            problem = (api.REASON_MISCONFIGURED, api.local_queue_missing_message(queue))
        elif lq_policy != api.STOP_POLICY_NONE:
            problem = (api.REASON_SUSPENDED, api.local_queue_stopped_message(queue))
        elif cq is None or (cq.get("metadata") or {}).get("deletionTimestamp"):
            problem = (api.REASON_MISCONFIGURED, api.cluster_queue_missing_message(cq_name or ""))
        elif cq_policy != api.STOP_POLICY_NONE:
            problem = (api.REASON_SUSPENDED, api.cluster_queue_stopped_message(cq_name or ""))
        if problem is None:
            return None
        reason = wlstatus.unadmitted_reason(self.gates, problem[0], api.REASON_INADMISSIBLE)
        wlstatus.unset_quota_reservation(wl, reason, problem[1], now)
        await self._write(wl)
        return Result()

    def _restarted_queues(self, wl: Obj, lq: Obj | None, cq: Obj | None, now: dt.datetime) -> bool:
        requeued = wlstatus.condition(wl, api.WORKLOAD_REQUEUED)
        if requeued is None or requeued.get("status") != "False":
            return False
        reason = requeued.get("reason")
        if reason == api.REASON_CLUSTER_QUEUE_STOPPED and cq is not None:
            if ((cq.get("spec") or {}).get("stopPolicy") or api.STOP_POLICY_NONE) == api.STOP_POLICY_NONE:
                return wlstatus.set_requeued(wl, True, api.REASON_CLUSTER_QUEUE_RESTARTED, "", now)
        if reason == api.REASON_LOCAL_QUEUE_STOPPED and lq is not None:
            if ((lq.get("spec") or {}).get("stopPolicy") or api.STOP_POLICY_NONE) == api.STOP_POLICY_NONE:
                return wlstatus.set_requeued(wl, True, api.REASON_LOCAL_QUEUE_RESTARTED, "", now)
        return False

    def _queue_problems(
        self, wl: Obj, lq: Obj | None, cq: Obj | None, cq_name: str | None, now: dt.datetime
    ) -> bool:
        """A pending workload whose LocalQueue or ClusterQueue is missing or inactive."""
        queue = (wl.get("spec") or {}).get("queueName")
        if not queue:
            return False
        if lq is None:
            problem = (api.REASON_MISCONFIGURED, api.lq_missing_message(queue))
        elif ((lq.get("spec") or {}).get("stopPolicy") or api.STOP_POLICY_NONE) != api.STOP_POLICY_NONE:
            problem = (api.REASON_SUSPENDED, api.lq_inactive_message(queue))
        elif cq is None:
            problem = (api.REASON_MISCONFIGURED, api.cq_missing_message(cq_name or ""))
        elif not self.state.cluster_queue_active(cq_name or ""):
            problem = (api.REASON_SUSPENDED, api.cluster_queue_inactive(cq_name or ""))
        else:
            return False
        reason = wlstatus.unadmitted_reason(self.gates, problem[0], api.REASON_INADMISSIBLE)
        return wlstatus.set_pending_condition(wl, reason, problem[1], now)

    def _bypassed(self, wl: Obj, key: str, now: dt.datetime) -> bool:
        """A workload parked because an equivalent one just failed says so, unless its condition
        already carries the scheduler's own diagnosis (Kueue's shouldCheckEquivalenceHash). Upstream
        writes this only with UnadmittedWorkloadsObservability."""
        if not self.gates.enabled(features.UNADMITTED_WORKLOADS_OBSERVABILITY):
            return False
        cond = wlstatus.condition(wl, api.WORKLOAD_QUOTA_RESERVED)
        if cond is None or (cond.get("reason") or "") not in BYPASS_CHECKED_REASONS:
            return False
        reason = self.state.queues.no_fit_reason(key)
        if not reason:
            return False
        return wlstatus.set_pending_condition(wl, reason, api.MSG_BYPASSED_SCHEDULING, now)

    async def _enforce_deadlines(self, wl: Obj, now: dt.datetime) -> Result | None:
        """PodsReady timeout (evict with backoff, or deactivate past the limit) and max execution time."""
        remaining = pods_ready_remaining(self.config.wait_for_pods_ready, wl, now)
        if remaining is not None and remaining <= 0:
            wfpr = self.config.wait_for_pods_ready
            assert wfpr is not None
            count = int(((wl.get("status") or {}).get("requeueState") or {}).get("count") or 0)
            limit = wfpr.requeuing.backoff_limit_count
            if limit is not None and count + 1 > limit:
                wlstatus.set_deactivation_target(
                    wl, api.REASON_REQUEUING_LIMIT_EXCEEDED, api.MSG_REQUEUING_LIMIT_EXCEEDED, now
                )
                await self._write(wl)
                return None
            pods_ready = wlstatus.condition(wl, api.WORKLOAD_PODS_READY) or {}
            cause = (
                api.REASON_WAIT_FOR_RECOVERY
                if pods_ready.get("reason") == api.REASON_WAIT_FOR_RECOVERY
                else api.REASON_WAIT_FOR_START
            )
            message = api.pods_ready_timeout_message(wl["metadata"]["namespace"], wl["metadata"]["name"])
            wlstatus.set_evicted(wl, api.REASON_PODS_READY_TIMEOUT, message, now, underlying_cause=cause)
            wlstatus.update_requeue_state(
                wl, wfpr.requeuing.backoff_base_seconds, wfpr.requeuing.backoff_max_seconds, now
            )
            await self._write(wl)
            await self._event(
                wl, api.EVENT_NORMAL, api.evicted_due_to_event(api.REASON_PODS_READY_TIMEOUT), message
            )
            if self.metrics is not None:
                self.metrics.evicted(
                    self.state.cluster_queue_for(wl) or "", api.REASON_PODS_READY_TIMEOUT, cause
                )
            return None
        remaining_exec = max_exec_remaining(wl, now)
        if remaining_exec is not None and remaining_exec <= 0:
            if not wlstatus.is_true(wl, api.WORKLOAD_DEACTIVATION_TARGET):
                wlstatus.set_deactivation_target(
                    wl,
                    api.REASON_MAXIMUM_EXECUTION_TIME_EXCEEDED,
                    api.MSG_MAXIMUM_EXECUTION_TIME_EXCEEDED,
                    now,
                )
                wl.setdefault("status", {}).pop("accumulatedPastExexcutionTimeSeconds", None)
                await self._write(wl)
                limit = int((wl.get("spec") or {}).get("maximumExecutionTimeSeconds") or 0)
                await self._event(
                    wl,
                    api.EVENT_WARNING,
                    api.EVENT_MAXIMUM_EXECUTION_TIME_EXCEEDED,
                    api.maximum_execution_time_exceeded_event_message(limit),
                )
            return None
        return admitted_deadlines(self.config.wait_for_pods_ready, wl, now)
