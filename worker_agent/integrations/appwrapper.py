"""AppWrappers (workload.codeflare.dev/v1beta2, integration `workload.codeflare.dev/appwrapper`): one
Workload `appwrapper-<name>-<hash5>` per managed AppWrapper, one PodSet per pod template of its
components, named `<name>-<i>` (appwrapper_podsets: as the AppWrapper project derives them).

The AppWrapper controller deploys the components (a Job, a JobSet, a PyTorchJob, ...) once
`spec.suspend` is false and deletes them when it is true again. So the AppWrapper starts when its
Workload is Admitted: unsuspended, with each PodSet's info (the assigned flavors' nodeSelector and
tolerations, the podset labels and annotations) written into its component's `podSetInfos`, which
the AppWrapper controller applies to the pod templates as it creates the components (the templates
themselves are never changed); it is stopped (suspended, every `podSetInfos` cleared, in one update)
when the Workload is evicted, and the reservation is released once its `QuotaReserved` condition is
no longer True (the controller deleted its components). Phase `Succeeded` finishes the Workload
("AppWrapper finished successfully"); `Failed` too ("AppWrapper failed"), once its resources are
gone (`ResourcesDeployed` not True). `PodsReady` is the AppWrapper's own condition.

Which AppWrappers are managed, and MultiKueue, as for JobSets (managedBy `kueue.x-k8s.io/multikueue`:
unsuspended on admission, never run here). The components of a managed AppWrapper are not top-level
jobs: their integrations leave them, and what they own, to the AppWrapper's Workload
(`manages_child`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import structlog

from kube_runtime.conditions import find_status_condition
from kueue_domain import api
from worker_agent.integrations import framework
from worker_agent.integrations.appwrapper_podsets import (
    PodSetError,
    appwrapper_podsets,
    component_podsets,
    components,
)
from worker_agent.integrations.jobframework import templated

log = structlog.get_logger("worker_agent.appwrapper")

Obj = dict[str, Any]
SUSPEND = ("spec", "suspend")
# PodSetInfo fields an AppWrapperPodSetInfo carries (omitted when empty, as its JSON omits them).
INFO_FIELDS = ("annotations", "labels", "nodeSelector", "tolerations", "schedulingGates")


# ------------------------------------------------------------------------------------------------
# Pure parts: reading an AppWrapper


def _condition_true(aw: Obj, ctype: str) -> bool:
    found = find_status_condition((aw.get("status") or {}).get("conditions"), ctype)
    return bool(found and found.get("status") == api.CONDITION_TRUE)


def is_active(aw: Obj) -> bool:
    """Its `QuotaReserved` condition is True: the controller deployed, or is deploying, its components."""
    return _condition_true(aw, api.APPWRAPPER_CONDITION_QUOTA_RESERVED)


def finished(aw: Obj) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the phase; a Failed AppWrapper whose resources are still
    being deleted is not finished yet."""
    phase = (aw.get("status") or {}).get("phase")
    if phase == api.APPWRAPPER_PHASE_SUCCEEDED:
        return True, True, api.MSG_APPWRAPPER_SUCCEEDED
    if phase == api.APPWRAPPER_PHASE_FAILED:
        if _condition_true(aw, api.APPWRAPPER_CONDITION_RESOURCES_DEPLOYED):
            return False, False, "Still deleting resources for failed AppWrapper"
        return True, False, api.MSG_APPWRAPPER_FAILED
    return False, False, ""


def pods_ready(aw: Obj) -> bool:
    return _condition_true(aw, api.APPWRAPPER_CONDITION_PODS_READY)


# ------------------------------------------------------------------------------------------------
# Pure parts: the AppWrapper as it is started and stopped


def podset_info(info: Obj) -> Obj:
    """An AppWrapperPodSetInfo: the PodSetInfo's labels, annotations, nodeSelector, tolerations and
    scheduling gates, each only when not empty."""
    return {key: copy.deepcopy(info[key]) for key in INFO_FIELDS if info.get(key)}


def started_appwrapper(aw: Obj, infos: Mapping[str, Obj]) -> Obj | None:
    """RunWithPodSetsInfo (SetPodSetInfos): a copy, unsuspended, with the infos, in the admission's
    PodSet order, as the components' `podSetInfos` (one per PodSet of each component). None when it
    is not suspended; PodSetInfoConflict when the counts differ."""
    if (aw.get("spec") or {}).get("suspend") is not True:
        return None
    ordered = list(infos.values())
    podsets = component_podsets(aw)
    expected = sum(len(p) for p in podsets)
    if expected != len(ordered):
        raise framework.PodSetInfoConflict(
            f"invalid podset infos: expecting {expected} podsets, got {len(ordered)}"
        )
    result = copy.deepcopy(aw)
    position = 0
    for component, component_sets in zip(components(result), podsets, strict=True):
        component["podSetInfos"] = [podset_info(ordered[position + i]) for i in range(len(component_sets))]
        position += len(component_sets)
    templated.set_path(result, SUSPEND, False)
    return result


def stopped_appwrapper(aw: Obj) -> Obj | None:
    """Suspend and RestorePodSetsInfo (ClearPodSetInfos) in one: a copy, suspended, without any
    component's `podSetInfos`. None when there is nothing to change."""
    result = copy.deepcopy(aw)
    templated.set_path(result, SUSPEND, True)
    for component in (result.get("spec") or {}).get("components") or ():
        component.pop("podSetInfos", None)
    return None if result == aw else result


# ------------------------------------------------------------------------------------------------
# The integration


class AppWrapperIntegration(templated.TemplatedReconciler):
    """On the templated framework with the run and stop halves of its own: the podset infos go into
    the components' `podSetInfos`, not into the pod templates (the AppWrapper controller merges them
    when it creates the components)."""

    name = api.FRAMEWORK_APPWRAPPER
    resource = api.APPWRAPPER
    index_prefix = "appWrapper"
    managed_by_default = api.APPWRAPPER_MANAGED_BY_DEFAULT
    suspend_path = SUSPEND

    is_active = staticmethod(is_active)
    finished = staticmethod(finished)
    pods_ready = staticmethod(pods_ready)

    def ready(self, key: str, aw: Obj) -> bool:
        try:
            appwrapper_podsets(aw)
        except PodSetError as exc:
            # Upstream fails the reconcile (its webhook would have refused such components).
            log.warning(
                "cannot derive the AppWrapper's PodSets; fix its components", appwrapper=key, error=str(exc)
            )
            return False
        return True

    podsets = staticmethod(appwrapper_podsets)

    def reclaimable_pods(self, aw: Obj, wl: Obj) -> list[Obj]:
        return []

    def started(self, aw: Obj, infos: Mapping[str, Obj]) -> Obj | None:
        return started_appwrapper(aw, infos)

    def stopped(self, aw: Obj, wl: Obj | None) -> Obj | None:
        return stopped_appwrapper(aw)
