"""AppWrapper adapter (workload.codeflare.dev/v1beta2; upstream's appwrapper_multikueue_adapter): the
admitting worker gets a copy of the manager's AppWrapper (metadata labels and annotations, the whole
spec) with the MultiKueue origin label and the prebuilt Workload name, and `spec.managedBy` cleared
so that the worker's AppWrapper controller runs it; the worker's whole AppWrapper status (phase,
conditions, componentStatus, resettingCount) is mirrored onto the manager's AppWrapper; the copy is
deleted when the Workload finishes, is evicted or is garbage-collected."""

from __future__ import annotations

import copy
from typing import Any

from kube_runtime.conditions import find_status_condition
from kueue_domain import api
from manager.adapters.base import clone_for_creation
from manager.adapters.mirrored import MirroredStatusAdapter

Obj = dict[str, Any]
# What the AppWrapper controller writes as it suspends an AppWrapper (its Suspending phase).
RELEASED_REASON = "Suspended"
RELEASED_MESSAGE = "Suspend is true"


def appwrapper_finished(aw: Obj) -> bool:
    """Phase Succeeded or Failed."""
    phase = (aw.get("status") or {}).get("phase")
    return phase in (api.APPWRAPPER_PHASE_SUCCEEDED, api.APPWRAPPER_PHASE_FAILED)


def remote_appwrapper_copy(local: Obj, workload_name: str, origin: str) -> Obj:
    """What is created on the worker (CloneObjectMetaForCreation + the spec, managedBy cleared)."""
    spec = copy.deepcopy(local.get("spec") or {})
    spec.pop("managedBy", None)
    return clone_for_creation(api.APPWRAPPER, local, spec, workload_name, origin)


def released_status_patch(local: Obj) -> Obj | None:
    """The `QuotaReserved` condition set False, as the worker's controller sets it once the
    components are deleted: the manager's agent releases an evicted AppWrapper's quota when it is no
    longer True. None when it is not True."""
    conditions = list((local.get("status") or {}).get("conditions") or ())
    found = find_status_condition(conditions, api.APPWRAPPER_CONDITION_QUOTA_RESERVED)
    if found is None or found.get("status") != api.CONDITION_TRUE:
        return None
    released = {**found, "status": "False", "reason": RELEASED_REASON, "message": RELEASED_MESSAGE}
    return {"status": {"conditions": [released if c is found else c for c in conditions]}}


class AppWrapperAdapter(MirroredStatusAdapter):
    resource = api.APPWRAPPER
    jobs_status_field = ""  # no per-Job status list: released_status_patch says what changes
    cached_spec_drops = ("components",)
    remote_copy = staticmethod(remote_appwrapper_copy)
    finished = staticmethod(appwrapper_finished)

    def released_status_patch(self, local: Obj) -> Obj | None:
        return released_status_patch(local)
