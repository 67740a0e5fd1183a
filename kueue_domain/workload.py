"""Workload status transitions over plain dicts, without I/O.

Every function edits a Workload dict in place and returns True when it changed something. The
controllers and the scheduler loop copy the cached object, call these, and write the result with
`apply_admission_status` (the one function here that does I/O) under the `kueue-admission` field
manager.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
from collections.abc import Iterable
from typing import Any

from kube_runtime.conditions import (
    find_status_condition,
    format_time,
    is_status_condition_true,
    parse_time,
    remove_status_condition,
    set_status_condition,
)
from kueue_domain import api, features
from kueue_domain.features import DEFAULT_GATES, FeatureGates

Obj = dict[str, Any]

# The status fields the admission field manager owns; an apply always carries all of them.
MANAGED_CONDITION_TYPES = (
    api.WORKLOAD_QUOTA_RESERVED,
    api.WORKLOAD_BLOCKED_ON_PREEMPTION_GATES,
    api.WORKLOAD_EVICTED,
    api.WORKLOAD_ADMITTED,
    api.WORKLOAD_PREEMPTED,
    api.WORKLOAD_REQUEUED,
    api.WORKLOAD_DEACTIVATION_TARGET,
    api.WORKLOAD_FINISHED,
    api.WORKLOAD_PODS_READY,
)
MANAGED_STATUS_FIELDS = (
    "admission",
    "requeueState",
    "resourceRequests",
    "accumulatedPastExexcutionTimeSeconds",
    "accumulatedPastExecutionTimeSeconds",
    "schedulingStats",
    "clusterName",
    "nominatedClusterNames",
    "unhealthyNodes",
    "admissionChecks",
)


def conditions(wl: Obj) -> list[dict[str, Any]]:
    return wl.setdefault("status", {}).setdefault("conditions", [])


def condition(wl: Obj, ctype: str) -> dict[str, Any] | None:
    return find_status_condition((wl.get("status") or {}).get("conditions"), ctype)


def is_true(wl: Obj, ctype: str) -> bool:
    return is_status_condition_true((wl.get("status") or {}).get("conditions"), ctype)


is_status_condition_true_in = is_true  # for any object with status.conditions


def generation(wl: Obj) -> int:
    return int((wl.get("metadata") or {}).get("generation") or 0)


def set_condition(wl: Obj, ctype: str, status: str, reason: str, message: str, now: dt.datetime) -> bool:
    return set_status_condition(
        conditions(wl),
        {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": truncate_message(message),
            "observedGeneration": generation(wl),
        },
        now,
    )


def truncate_message(message: str) -> str:
    data = message.encode()
    if len(data) <= api.CONDITION_MESSAGE_LIMIT_BYTES:
        return message
    limit = api.CONDITION_MESSAGE_LIMIT_BYTES - len(api.TRUNCATION_SUFFIX)
    return data[:limit].decode(errors="ignore") + api.TRUNCATION_SUFFIX


# ------------------------------------------------------------------------------------------------
# State queries


def has_quota_reservation(wl: Obj) -> bool:
    return is_true(wl, api.WORKLOAD_QUOTA_RESERVED)


def is_admitted(wl: Obj) -> bool:
    return is_true(wl, api.WORKLOAD_ADMITTED)


def is_finished(wl: Obj) -> bool:
    return is_true(wl, api.WORKLOAD_FINISHED)


def is_evicted(wl: Obj) -> bool:
    return is_true(wl, api.WORKLOAD_EVICTED)


def is_active(wl: Obj) -> bool:
    return (wl.get("spec") or {}).get("active") is not False


def check_states(wl: Obj) -> list[dict[str, Any]]:
    return list((wl.get("status") or {}).get("admissionChecks") or ())


def all_checks_ready(wl: Obj) -> bool:
    return all(c.get("state") == api.CHECK_STATE_READY for c in check_states(wl))


def admission_gated(wl: Obj) -> bool:
    return bool(((wl.get("metadata") or {}).get("annotations") or {}).get(api.ANNOTATION_ADMISSION_GATED_BY))


def is_on_hold(wl: Obj) -> bool:
    """Its quota reservation deliberately released (QuotaReserved=False, reason OnHold: a
    StatefulSet scaled to zero); it is not queued until that reason is cleared."""
    reserved = condition(wl, api.WORKLOAD_QUOTA_RESERVED)
    return (
        reserved is not None
        and reserved.get("status") == "False"
        and reserved.get("reason") == api.REASON_ON_HOLD
    )


def is_admissible(wl: Obj) -> bool:
    """May be queued: not gated, finished, inactive, reserved, on hold or waiting for pods."""
    if admission_gated(wl) or is_finished(wl) or not is_active(wl) or has_quota_reservation(wl):
        return False
    if is_on_hold(wl):
        return False
    return not is_true(wl, api.WORKLOAD_WAITING_FOR_REPLACEMENT_PODS)


def may_become_admissible(old: Obj, new: Obj) -> bool:
    """Whether an update of a parked (inadmissible) Workload takes it back to the heap (Kueue's
    PushOrUpdate and its in-place update test): its generation or spec, its priority-boost
    annotation, its reclaimable pods, or its Evicted or Requeued condition changed. Anything else,
    such as the scheduler's own QuotaReserved=False message, leaves it parked until a flush."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if old_meta.get("generation") != new_meta.get("generation") or old.get("spec") != new.get("spec"):
        return True
    old_boost = (old_meta.get("annotations") or {}).get(api.ANNOTATION_PRIORITY_BOOST)
    if old_boost != (new_meta.get("annotations") or {}).get(api.ANNOTATION_PRIORITY_BOOST):
        return True
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    if old_status.get("reclaimablePods") != new_status.get("reclaimablePods"):
        return True
    queue_order = (api.WORKLOAD_EVICTED, api.WORKLOAD_REQUEUED)
    return any(condition(old, ctype) != condition(new, ctype) for ctype in queue_order)


def state_name(wl: Obj) -> str:
    """Finished > Admitted > QuotaReserved > Pending."""
    if is_finished(wl):
        return "Finished"
    if is_admitted(wl):
        return "Admitted"
    if has_quota_reservation(wl):
        return "QuotaReserved"
    return "Pending"


# ------------------------------------------------------------------------------------------------
# Transitions


def sync_admitted_condition(wl: Obj, now: dt.datetime) -> bool:
    """Admitted follows QuotaReserved and the checks; True->False adds to the past execution time."""
    reserved = has_quota_reservation(wl)
    checks_ready = all_checks_ready(wl)
    admitted = is_admitted(wl)
    if admitted == (reserved and checks_ready):
        return False
    if not admitted:
        return set_condition(wl, api.WORKLOAD_ADMITTED, "True", api.REASON_ADMITTED, api.MSG_ADMITTED, now)
    if reserved:
        reason, message = api.REASON_UNSATISFIED_ADMISSION_CHECKS, api.MSG_UNSATISFIED_ADMISSION_CHECKS
    else:
        reason, message = api.REASON_NO_RESERVATION, api.MSG_NO_RESERVATION
    previous = condition(wl, api.WORKLOAD_ADMITTED)
    if previous and previous.get("lastTransitionTime"):
        elapsed = max(0, int((now - parse_time(previous["lastTransitionTime"])).total_seconds()))
        status = wl.setdefault("status", {})
        past = int(status.get("accumulatedPastExexcutionTimeSeconds") or 0) + elapsed
        status["accumulatedPastExexcutionTimeSeconds"] = past
    set_condition(wl, api.WORKLOAD_ADMITTED, "False", reason, message, now)
    return True


def set_resource_requests(wl: Obj, requests: list[Obj]) -> bool:
    """`status.resourceRequests` (per-PodSet totals of a pending workload); True if it changed."""
    status = wl.setdefault("status", {})
    if status.get("resourceRequests") == requests:
        return False
    status["resourceRequests"] = requests
    return True


def set_quota_reservation(wl: Obj, admission: Obj, now: dt.datetime) -> bool:
    """QuotaReserved=True with `admission`; Evicted/Preempted/BlockedOnPreemptionGates reset."""
    status = wl.setdefault("status", {})
    status["admission"] = admission
    status.pop("resourceRequests", None)  # published for pending workloads only
    cq = admission.get("clusterQueue", "")
    set_condition(
        wl,
        api.WORKLOAD_QUOTA_RESERVED,
        "True",
        api.REASON_QUOTA_RESERVED,
        api.quota_reserved_message(cq),
        now,
    )
    for ctype in (api.WORKLOAD_EVICTED, api.WORKLOAD_PREEMPTED, api.WORKLOAD_BLOCKED_ON_PREEMPTION_GATES):
        previous = condition(wl, ctype)
        if previous and previous.get("status") == "True":
            set_condition(
                wl,
                ctype,
                "False",
                api.REASON_QUOTA_RESERVED,
                api.previously_message(previous.get("message", "")),
                now,
            )
    status.pop("resourceRequests", None)
    sync_admitted_condition(wl, now)
    return True


def unset_quota_reservation(wl: Obj, reason: str, message: str, now: dt.datetime) -> bool:
    """QuotaReserved=False with reason/message; clears the admission (UnsetQuotaReservationWithCondition)."""
    changed = set_condition(wl, api.WORKLOAD_QUOTA_RESERVED, "False", reason, message, now)
    status = wl.setdefault("status", {})
    if status.get("admission") is not None:
        status.pop("admission", None)
        changed = True
    if sync_admitted_condition(wl, now):
        changed = True
    return changed


def set_pending_condition(wl: Obj, reason: str, message: str, now: dt.datetime) -> bool:
    """A workload left pending by the scheduler: QuotaReserved=False, written only on change."""
    if has_quota_reservation(wl):
        return False
    return set_condition(wl, api.WORKLOAD_QUOTA_RESERVED, "False", reason, message, now)


def set_evicted(wl: Obj, reason: str, message: str, now: dt.datetime, underlying_cause: str = "") -> bool:
    """Evicted=True and its side effects: checks reset to Pending, cluster names cleared, stats counted."""
    changed = set_condition(wl, api.WORKLOAD_EVICTED, "True", reason, message, now)
    status = wl.setdefault("status", {})
    for check in status.get("admissionChecks") or ():
        state = check.get("state")
        if state == api.CHECK_STATE_PENDING:
            continue
        if state == api.CHECK_STATE_RETRY:
            check["retryCount"] = int(check.get("retryCount") or 0) + 1
        check["state"] = api.CHECK_STATE_PENDING
        check["message"] = api.reset_to_pending_after_eviction_message(state or "")
        check["lastTransitionTime"] = format_time(now)
        changed = True
    for key in ("clusterName", "nominatedClusterNames", "unhealthyNodes"):
        if status.pop(key, None) is not None:
            changed = True
    stats = status.setdefault("schedulingStats", {})
    evictions = stats.setdefault("evictions", [])
    for entry in evictions:
        if entry.get("reason") == reason and entry.get("underlyingCause", "") == underlying_cause:
            entry["count"] = int(entry.get("count") or 0) + 1
            break
    else:
        item: dict[str, Any] = {"reason": reason, "count": 1}
        item["underlyingCause"] = underlying_cause
        evictions.append(item)
    return changed


def set_preempted(wl: Obj, reason: str, message: str, now: dt.datetime) -> bool:
    return set_condition(wl, api.WORKLOAD_PREEMPTED, "True", reason, message, now)


def set_requeued(wl: Obj, status: bool, reason: str, message: str, now: dt.datetime) -> bool:
    return set_condition(wl, api.WORKLOAD_REQUEUED, "True" if status else "False", reason, message, now)


def set_deactivation_target(wl: Obj, reason: str, message: str, now: dt.datetime) -> bool:
    return set_condition(wl, api.WORKLOAD_DEACTIVATION_TARGET, "True", reason, message, now)


def remove_condition(wl: Obj, ctype: str) -> bool:
    return remove_status_condition(conditions(wl), ctype)


def update_requeue_state(
    wl: Obj, base_seconds: int, max_seconds: int, now: dt.datetime, rng: random.Random | None = None
) -> None:
    """count += 1, requeueAt = now + min(base * 2^(count-1), max) with up to 0.01% jitter; never backwards."""
    status = wl.setdefault("status", {})
    state = status.setdefault("requeueState", {})
    count = int(state.get("count") or 0) + 1
    state["count"] = count
    backoff = min(base_seconds * 2 ** (count - 1), max_seconds)
    backoff *= 1 + (rng or random).random() * 0.0001
    requeue_at = now + dt.timedelta(seconds=backoff)
    previous = state.get("requeueAt")
    if previous and parse_time(previous) > requeue_at:
        return
    state["requeueAt"] = format_time(requeue_at)


def requeued_after_eviction(reason: str) -> bool:
    """Requeued is True after these eviction reasons, False (reason = eviction reason) otherwise."""
    return reason in (api.REASON_PREEMPTED, api.REASON_NODE_FAILURES)


def unadmitted_reason(gates: FeatureGates, granular: str, legacy: str) -> str:
    """A QuotaReserved=False reason: the granular one with UnadmittedWorkloadsObservability, else
    the legacy one upstream v0.19 writes by default (Kueue's UnadmittedWorkloadReasonWithFallback)."""
    return granular if gates.enabled(features.UNADMITTED_WORKLOADS_OBSERVABILITY) else legacy


def clear_reservation_after_eviction(wl: Obj, now: dt.datetime, gates: FeatureGates = DEFAULT_GATES) -> bool:
    """What a job integration does once the evicted job has stopped."""
    evicted = condition(wl, api.WORKLOAD_EVICTED)
    if not evicted or evicted.get("status") != "True":
        return False
    reason = evicted.get("reason", "")
    pending = unadmitted_reason(gates, api.REASON_PENDING_EVALUATION, api.REASON_PENDING)
    changed = unset_quota_reservation(wl, pending, evicted.get("message", ""), now)
    if requeued_after_eviction(reason):
        changed |= set_requeued(wl, True, reason, evicted.get("message", ""), now)
    else:
        changed |= set_requeued(wl, False, reason, evicted.get("message", ""), now)
    return changed


# ------------------------------------------------------------------------------------------------
# Writing


def admission_status(wl: Obj) -> Obj:
    """The part of `status` owned by the admission field manager."""
    status = wl.get("status") or {}
    owned: Obj = {}
    for key in MANAGED_STATUS_FIELDS:
        value = status.get(key)
        if value not in (None, [], {}):
            owned[key] = copy.deepcopy(value)
    kept = [c for c in status.get("conditions") or () if c.get("type") in MANAGED_CONDITION_TYPES]
    if kept:
        owned["conditions"] = copy.deepcopy(kept)
    return owned


def admission_apply_body(wl: Obj, strict: bool = False) -> Obj:
    """SSA body for the status subresource; `strict` adds resourceVersion (optimistic concurrency)."""
    meta = wl.get("metadata") or {}
    metadata: Obj = {"name": meta["name"], "namespace": meta["namespace"]}
    if strict and meta.get("resourceVersion"):
        metadata["resourceVersion"] = meta["resourceVersion"]
    return {
        "apiVersion": api.WORKLOAD.api_version,
        "kind": api.WORKLOAD.kind,
        "metadata": metadata,
        "status": admission_status(wl),
    }


def status_apply_body(wl: Obj, status: Obj) -> Obj:
    """SSA body for the status subresource with only `status` (e.g. one condition), no
    resourceVersion: for a field manager that owns just those fields."""
    meta = wl["metadata"]
    return {
        "apiVersion": api.WORKLOAD.api_version,
        "kind": api.WORKLOAD.kind,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": status,
    }


async def apply_admission_status(kube: Any, wl: Obj, strict: bool = False) -> Obj:
    """Server-side apply (forced) of what `kueue-admission` owns in `wl`'s status; `strict` makes a
    stale copy fail with Conflict. API errors are the caller's to handle."""
    return await kube.apply_status(
        api.WORKLOAD, admission_apply_body(wl, strict=strict), api.FIELD_MANAGER_ADMISSION, force=True
    )


def working_copy(wl: Obj) -> Obj:
    """A copy to change and write back: metadata and status are copied deeply, `spec` (the pod
    templates, most of the object) is shared and must be treated as read-only."""
    return {key: value if key == "spec" else copy.deepcopy(value) for key, value in wl.items()}


def status_working_copy(wl: Obj) -> Obj:
    """A copy whose status is changed and written back with `apply_admission_status`: only `status`
    is copied deeply (metadata holds the managedFields, most of what `working_copy` copies);
    metadata and spec are shared and must be treated as read-only."""
    return {key: copy.deepcopy(value) if key == "status" else value for key, value in wl.items()}


def admission_checks_for(
    cq_spec: Obj, assigned_flavors: Iterable[str] | None, all_flavors: Iterable[str]
) -> set[str]:
    """Checks that apply: before admission those covering every CQ flavor; after, intersecting."""
    rules: list[tuple[str, set[str]]] = []
    for name in cq_spec.get("admissionChecks") or ():
        rules.append((name, set()))
    strategy = cq_spec.get("admissionChecksStrategy") or {}
    for rule in strategy.get("admissionChecks") or ():
        rules.append((rule["name"], set(rule.get("onFlavors") or ())))
    all_set = set(all_flavors)
    result: set[str] = set()
    for name, on_flavors in rules:
        if not on_flavors:
            result.add(name)
        elif assigned_flavors is None:
            if all_set <= on_flavors:
                result.add(name)
        elif on_flavors & set(assigned_flavors):
            result.add(name)
    return result


def required_admission_checks(cq_spec: Obj, admission: Obj | None) -> set[str]:
    """The ClusterQueue's checks that apply to a workload with (or without) this admission."""
    all_flavors = [f["name"] for rg in cq_spec.get("resourceGroups") or () for f in rg.get("flavors") or ()]
    assigned = None
    if admission:
        assigned = {
            f for psa in admission.get("podSetAssignments") or () for f in (psa.get("flavors") or {}).values()
        }
    return admission_checks_for(cq_spec, assigned, all_flavors)


def seconds_since(timestamp: str | None, now: dt.datetime) -> float:
    """Seconds from an RFC3339 API timestamp to `now` (0 when unset or in the future)."""
    if not timestamp:
        return 0.0
    return max(0.0, (now - parse_time(timestamp)).total_seconds())


def sync_admission_checks(wl: Obj, required: set[str], now: dt.datetime) -> bool:
    """Add missing checks as Pending, drop those that no longer apply, keep them sorted by name."""
    status = wl.setdefault("status", {})
    current = list(status.get("admissionChecks") or ())
    names = {c["name"] for c in current}
    changed = False
    for name in required - names:
        current.append(
            {
                "name": name,
                "state": api.CHECK_STATE_PENDING,
                "lastTransitionTime": format_time(now),
                "message": "",
            }
        )
        changed = True
    kept = [c for c in current if c["name"] in required]
    if len(kept) != len(current):
        changed = True
    kept.sort(key=lambda c: c["name"])
    if changed:
        if kept:
            status["admissionChecks"] = kept
        else:
            status.pop("admissionChecks", None)
    return changed
