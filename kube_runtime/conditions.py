"""metav1.Condition helpers over plain dicts, with k8s.io/apimachinery meta.SetStatusCondition semantics.

A condition is `{type, status, observedGeneration?, lastTransitionTime, reason, message}`;
lastTransitionTime is RFC3339 with seconds precision (`2026-01-01T00:00:00Z`), as metav1.Time
serialises. All functions are pure apart from mutating the list they are given.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kube_runtime.constants import CONDITION_FALSE, CONDITION_TRUE

Condition = dict[str, Any]

_RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def format_time(t: dt.datetime) -> str:
    """metav1.Time as the API writes it: UTC, seconds precision; a naive datetime is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC).strftime(_RFC3339)


def parse_time(text: str) -> dt.datetime:
    """An aware UTC datetime from RFC3339 (`Z` or an offset, optional fractional seconds)."""
    parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC)


def _time_value(value: Any) -> str | None:
    """A lastTransitionTime as the string to store, or None when it is Go's zero time (unset)."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return format_time(value)
    return str(value)


def _generation(condition: Condition) -> int:
    return int(condition.get("observedGeneration") or 0)


def find_status_condition(conditions: list[Condition] | None, condition_type: str) -> Condition | None:
    """The condition of that type (the list entry itself, so callers may edit it), or None."""
    for condition in conditions or ():
        if condition.get("type") == condition_type:
            return condition
    return None


def set_status_condition(conditions: list[Condition], new: Condition, now: dt.datetime) -> bool:
    """Add or update `new` in place; True when anything changed.

    lastTransitionTime moves only when status changes (to new's if set, else `now`); reason,
    message and observedGeneration are updated without touching it.
    """
    existing = find_status_condition(conditions, new["type"])
    if existing is None:
        added: Condition = {"type": new["type"], "status": new.get("status", "")}
        if _generation(new):
            added["observedGeneration"] = _generation(new)
        added["lastTransitionTime"] = _time_value(new.get("lastTransitionTime")) or format_time(now)
        added["reason"] = new.get("reason", "")
        added["message"] = new.get("message", "")
        conditions.append(added)
        return True

    changed = False
    if existing.get("status") != new.get("status"):
        existing["status"] = new.get("status", "")
        existing["lastTransitionTime"] = _time_value(new.get("lastTransitionTime")) or format_time(now)
        changed = True
    for field in ("reason", "message"):
        if existing.get(field, "") != new.get(field, ""):
            existing[field] = new.get(field, "")
            changed = True
    if _generation(existing) != _generation(new):
        # observedGeneration is omitempty: Go's zero value drops the field.
        if _generation(new):
            existing["observedGeneration"] = _generation(new)
        else:
            existing.pop("observedGeneration", None)
        changed = True
    return changed


def remove_status_condition(conditions: list[Condition], condition_type: str) -> bool:
    """Remove every condition of that type in place; True when one was removed."""
    kept = [c for c in conditions if c.get("type") != condition_type]
    removed = len(kept) != len(conditions)
    conditions[:] = kept
    return removed


def is_status_condition_present_and_equal(
    conditions: list[Condition] | None, condition_type: str, status: str
) -> bool:
    condition = find_status_condition(conditions, condition_type)
    return condition is not None and condition.get("status") == status


def is_status_condition_true(conditions: list[Condition] | None, condition_type: str) -> bool:
    return is_status_condition_present_and_equal(conditions, condition_type, CONDITION_TRUE)


def is_status_condition_false(conditions: list[Condition] | None, condition_type: str) -> bool:
    return is_status_condition_present_and_equal(conditions, condition_type, CONDITION_FALSE)
