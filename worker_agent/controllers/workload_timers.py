"""A Workload's timers, read from its status: the PodsReady timeout, the maximum execution time and
the requeue backoff (whose end is marked on the working copy); the workload controller acts on them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kube_runtime.conditions import parse_time
from kube_runtime.controller import Result
from kueue_domain import api
from kueue_domain import workload as wlstatus
from kueue_domain.config import WaitForPodsReady

Obj = dict[str, Any]


def admitted_deadlines(wfpr: WaitForPodsReady | None, wl: Obj, now: dt.datetime) -> Result | None:
    """Schedule the PodsReady timeout and maximum execution time checks."""
    waits = [w for w in (pods_ready_remaining(wfpr, wl, now), max_exec_remaining(wl, now)) if w]
    if not waits:
        return None
    remaining = min(waits)
    if remaining <= 0:
        return Result(requeue_after=0.001)
    return Result(requeue_after=remaining)


def pods_ready_remaining(wfpr: WaitForPodsReady | None, wl: Obj, now: dt.datetime) -> float | None:
    """Seconds left before the PodsReady timeout (or the recovery timeout), if it runs."""
    if wfpr is None or not wlstatus.is_admitted(wl) or wlstatus.is_evicted(wl):
        return None
    pods_ready = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
    if pods_ready and pods_ready.get("status") == "True":
        return None
    if pods_ready and pods_ready.get("reason") == api.REASON_WAIT_FOR_RECOVERY:
        if wfpr.recovery_timeout_seconds is None:
            return None
        return wfpr.recovery_timeout_seconds - wlstatus.seconds_since(
            pods_ready.get("lastTransitionTime"), now
        )
    admitted = wlstatus.condition(wl, api.WORKLOAD_ADMITTED) or {}
    return wfpr.timeout_seconds - wlstatus.seconds_since(admitted.get("lastTransitionTime"), now)


def max_exec_remaining(wl: Obj, now: dt.datetime) -> float | None:
    """Seconds left of maximumExecutionTimeSeconds, if it is set and the Workload is admitted."""
    limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
    if not limit or not wlstatus.is_admitted(wl):
        return None
    admitted = wlstatus.condition(wl, api.WORKLOAD_ADMITTED) or {}
    past = int((wl.get("status") or {}).get("accumulatedPastExexcutionTimeSeconds") or 0)
    return int(limit) - past - wlstatus.seconds_since(admitted.get("lastTransitionTime"), now)


def finish_requeue_backoff(wl: Obj, now: dt.datetime) -> float | None:
    """Pending after a timed-out or retried admission: Requeued=True once requeueAt passes."""
    status = wl.get("status") or {}
    state = status.get("requeueState") or {}
    requeued = wlstatus.condition(wl, api.WORKLOAD_REQUEUED)
    waiting = (
        requeued is not None
        and requeued.get("status") == "False"
        and requeued.get("reason")
        in (
            api.REASON_PODS_READY_TIMEOUT,
            api.REASON_ADMISSION_CHECK,
        )
    )
    at = state.get("requeueAt")
    if at:
        remaining = (parse_time(at) - now).total_seconds()
        if remaining > 0:
            return remaining
    if not waiting and not at:
        return None
    if not waiting:
        return None
    if at:
        state = wl["status"]["requeueState"]
        state.pop("requeueAt", None)
    wlstatus.set_requeued(wl, True, api.REASON_BACKOFF_FINISHED, api.MSG_BACKOFF_FINISHED, now)
    return 0.0
