"""The `Active` condition of MultiKueueClusters and AdmissionChecks: written with a full status
update (optimistic concurrency), and only when its status, reason or message changed (§2.4)."""

from __future__ import annotations

import copy
from typing import Any

from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition, set_status_condition
from kueue_domain import api
from kueue_domain.workload import truncate_message

Obj = dict[str, Any]
ACTIVE = "Active"


def active_condition_differs(obj: Obj, status: str, reason: str, message: str) -> bool:
    current = find_status_condition((obj.get("status") or {}).get("conditions"), ACTIVE)
    return current is None or (current.get("status"), current.get("reason"), current.get("message")) != (
        status,
        reason,
        message,
    )


async def write_active(
    kube: KubeClient, resource: api.Resource, obj: Obj, status: str, reason: str, message: str, clock: Clock
) -> bool:
    """Returns whether a write was sent. A Conflict propagates (the caller's reconcile retries)."""
    message = truncate_message(message)
    if not active_condition_differs(obj, status, reason, message):
        return False
    updated = copy.deepcopy(obj)
    conditions = updated.setdefault("status", {}).setdefault("conditions", [])
    condition = {
        "type": ACTIVE,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": int(obj["metadata"].get("generation") or 0),
    }
    set_status_condition(conditions, condition, clock.now())
    await kube.replace_status(resource, updated)
    return True
