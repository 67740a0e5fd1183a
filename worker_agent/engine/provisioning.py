"""The ProvisioningRequest admission check's decisions, without a cluster: object names and attempts,
which PodSets a request covers, the request's spec, and the check state a request's conditions give
(upstream Kueue v0.19.2's pkg/controller/admissionchecks/provisioning, the same rules).

Objects are plain dicts as the API serves them (Workloads in kueue.x-k8s.io/v1beta1).
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kube_runtime.conditions import find_status_condition
from kueue_domain import api
from kueue_domain import workload as wlstatus

Obj = dict[str, Any]


class InconsistentAssignments(Exception):
    """A PodSet that needs capacity has no assignment in the Workload's admission."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("inconsistent podSet assignments" + (f": {detail}" if detail else ""))


# --- names ------------------------------------------------------------------------------------


def limit_object_name(full: str) -> str:
    """`full`, or its first 247 characters, `-` and 5 hex digits of its SHA-1 when longer."""
    if len(full) <= api.OBJ_NAME_MAX_PREFIX_LENGTH:
        return full
    digest = hashlib.sha1(full.encode()).hexdigest()[: api.OBJ_NAME_HASH_LENGTH]
    return f"{full[: api.OBJ_NAME_MAX_PREFIX_LENGTH]}-{digest}"


def request_name(workload: str, check: str, attempt: int) -> str:
    return limit_object_name(f"{workload}-{check}-{attempt}")


def pod_template_name(request: str, podset: str) -> str:
    return limit_object_name(f"{api.POD_TEMPLATES_PREFIX}-{request}-{podset}")


def attempt_of(request: str, workload: str, check: str) -> int | None:
    """The attempt number in a request's name, None when it is not one of this Workload's check's."""
    prefix = limit_object_name(f"{workload}-{check}-")
    match = re.fullmatch(re.escape(prefix) + r"([0-9]+)", request)
    return int(match.group(1)) if match else None


def _attempt(pr: Obj, workload: str, check: str) -> int:
    return attempt_of(pr["metadata"]["name"], workload, check) or 1


# --- the config -------------------------------------------------------------------------------


def parameters_error(check: Obj) -> str | None:
    """Why an AdmissionCheck's parameters do not name a ProvisioningRequestConfig (upstream's text)."""
    ref = (check.get("spec") or {}).get("parameters")
    if not ref:
        return api.ERR_MISSING_PARAMETERS_REF
    if not ref.get("name"):
        return api.ERR_EMPTY_PARAMETERS_NAME
    if ref.get("apiGroup", "") != api.GROUP:
        return api.err_wrong_parameters_group_for_config(ref.get("apiGroup", ""))
    if ref.get("kind", "") != api.PROVISIONING_REQUEST_CONFIG.kind:
        return api.err_wrong_parameters_kind_for_config(ref.get("kind", ""))
    return None


def config_for_check(check: Obj, get_config: Callable[[str], Obj | None]) -> tuple[Obj | None, str]:
    """(the check's ProvisioningRequestConfig, "") or (None, why not)."""
    error = parameters_error(check)
    if error:
        return None, error
    name = check["spec"]["parameters"]["name"]
    config = get_config(name)
    if config is None:
        return None, api.err_provisioning_config_not_found(name)
    return config, ""


def active_condition(check: Obj, get_config: Callable[[str], Obj | None]) -> tuple[str, str, str]:
    """(status, reason, message) of a provisioning check's Active condition."""
    _, error = config_for_check(check, get_config)
    if error:
        return "False", api.AC_REASON_BAD_PARAMETERS_REF, error
    return "True", api.AC_REASON_ACTIVE, api.AC_MSG_ACTIVE


@dataclass(frozen=True)
class RetryStrategy:
    limit: int = api.PRC_DEFAULT_BACKOFF_LIMIT_COUNT
    base_seconds: int = api.PRC_DEFAULT_BACKOFF_BASE_SECONDS
    max_seconds: int = api.PRC_DEFAULT_BACKOFF_MAX_SECONDS


def retry_strategy(config: Obj) -> RetryStrategy:
    raw = (config.get("spec") or {}).get("retryStrategy") or {}
    return RetryStrategy(
        int(raw.get("backoffLimitCount", api.PRC_DEFAULT_BACKOFF_LIMIT_COUNT)),
        int(raw.get("backoffBaseSeconds", api.PRC_DEFAULT_BACKOFF_BASE_SECONDS)),
        int(raw.get("backoffMaxSeconds", api.PRC_DEFAULT_BACKOFF_MAX_SECONDS)),
    )


def requeue_after_seconds(retry_count: int, strategy: RetryStrategy, rng: random.Random | None = None) -> int:
    """Backoff for the next retry: base * 2^retryCount, at most max, with upstream's 0.01% jitter,
    in whole seconds."""
    step = min(strategy.base_seconds * 2**retry_count, strategy.max_seconds)
    return int(step * (1 + (rng or random).random() * 0.0001))


# --- which PodSets need capacity ---------------------------------------------------------------


def _container_uses(container: Obj, resources: set[str]) -> bool:
    res = container.get("resources") or {}
    return any(r in resources for key in ("requests", "limits") for r in res.get(key) or {})


def pod_uses(pod_spec: Obj, resources: set[str]) -> bool:
    containers = [*(pod_spec.get("initContainers") or ()), *(pod_spec.get("containers") or ())]
    return any(_container_uses(c, resources) for c in containers)


def _managed(config: Obj) -> set[str]:
    return set((config.get("spec") or {}).get("managedResources") or ())


def _assignments(wl: Obj) -> dict[str, Obj]:
    admission = (wl.get("status") or {}).get("admission") or {}
    return {psa["name"]: psa for psa in admission.get("podSetAssignments") or ()}


def _covered(podset: Obj, managed: set[str]) -> bool:
    spec = (podset.get("template") or {}).get("spec") or {}
    return int(podset.get("count", 1)) > 0 and (not managed or pod_uses(spec, managed))


def request_is_needed(wl: Obj, config: Obj) -> bool:
    """Whether any PodSet using a managed resource (any, with none listed) is admitted with pods."""
    assignments = _assignments(wl)
    managed = _managed(config)
    for podset in (wl.get("spec") or {}).get("podSets") or ():
        if not _covered(podset, managed):
            continue
        psa = assignments.get(podset["name"])
        if psa is None:
            raise InconsistentAssignments(f"missing assignment for PodSet {api.go_quote(podset['name'])}")
        if int(psa.get("count", podset.get("count", 1))) > 0:
            return True
    return False


@dataclass
class MergedPodSet:
    name: str
    podset: Obj
    assignment: Obj
    count: int


def _similar(a: Obj, b: Obj) -> bool:
    """IdenticalWorkloadSchedulingRequirements: containers' requests, pod resources, nodeSelector,
    tolerations, affinity and resourceClaims equal."""
    sa, sb = (a.get("template") or {}).get("spec") or {}, (b.get("template") or {}).get("spec") or {}

    def requests(spec: Obj, key: str) -> list[Any]:
        return [(c.get("resources") or {}).get("requests") or {} for c in spec.get(key) or ()]

    keys = ("resources", "nodeSelector", "tolerations", "affinity", "resourceClaims")
    return all(requests(sa, k) == requests(sb, k) for k in ("containers", "initContainers")) and all(
        (sa.get(k) or None) == (sb.get(k) or None) for k in keys
    )


def _can_merge(a: Obj, b: Obj, policy: str | None) -> bool:
    if policy == api.MERGE_IDENTICAL_POD_TEMPLATES:
        return a.get("template") == b.get("template")
    if policy == api.MERGE_IDENTICAL_SCHEDULING_REQUIREMENTS:
        return _similar(a, b)
    return False


def merge_podsets(wl: Obj, config: Obj) -> list[MergedPodSet]:
    """The PodSets a request lists, in the Workload's order, those the podSetMergePolicy allows
    folded into an earlier one (their counts added)."""
    managed = _managed(config)
    policy = (config.get("spec") or {}).get("podSetMergePolicy")
    assignments = _assignments(wl)
    merged: list[MergedPodSet] = []
    for podset in (wl.get("spec") or {}).get("podSets") or ():
        if not _covered(podset, managed):
            continue
        psa = assignments.get(podset["name"])
        if psa is None:
            raise InconsistentAssignments()
        count = int(psa.get("count", podset.get("count", 1)))
        if count <= 0:
            continue
        for entry in merged:
            if policy and _can_merge(entry.podset, podset, policy):
                entry.count += count
                break
        else:
            merged.append(MergedPodSet(podset["name"], podset, psa, count))
    return merged


# --- the request ------------------------------------------------------------------------------


def request_parameters(wl: Obj, config: Obj) -> dict[str, str]:
    """The config's parameters, and the Workload's `provreq.kueue.x-k8s.io/<name>` annotations."""
    params = dict((config.get("spec") or {}).get("parameters") or {})
    for key, value in ((wl.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith(api.ANNOTATION_PROVREQ_PREFIX):
            params[key.removeprefix(api.ANNOTATION_PROVREQ_PREFIX)] = value
    return params


def request_body(wl: Obj, name: str, config: Obj, podsets: Iterable[tuple[str, int]]) -> Obj:
    """The ProvisioningRequest `name` for (PodTemplate name, count) pairs, controlled by `wl`."""
    meta = wl["metadata"]
    spec: Obj = {
        "provisioningClassName": (config.get("spec") or {}).get("provisioningClassName", ""),
        "podSets": [{"podTemplateRef": {"name": pt}, "count": count} for pt, count in podsets],
    }
    params = request_parameters(wl, config)
    if params:
        spec["parameters"] = params
    return {
        "apiVersion": api.PROVISIONING_REQUEST.api_version,
        "kind": api.PROVISIONING_REQUEST.kind,
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {api.LABEL_MANAGED: api.VALUE_TRUE},
            "ownerReferences": [controller_reference(wl, api.API_VERSION)],
        },
        "spec": spec,
    }


def controller_reference(owner: Obj, api_version: str) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": api_version,
        "kind": owner.get("kind") or "Workload",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def synced_with_config(pr: Obj, config: Obj) -> bool:
    spec, cfg = pr.get("spec") or {}, config.get("spec") or {}
    if spec.get("provisioningClassName") != cfg.get("provisioningClassName"):
        return False
    params = spec.get("parameters") or {}
    return all(params.get(k) == v for k, v in (cfg.get("parameters") or {}).items())


def owned_by(pr: Obj, wl_name: str) -> bool:
    return any(r.get("name") == wl_name for r in (pr.get("metadata") or {}).get("ownerReferences") or ())


def active_or_last(wl: Obj, configs: Mapping[str, Obj | None], owned: list[Obj]) -> dict[str, Obj]:
    """Per check with a config: the request of the highest attempt that is still in line with the
    config, when the Workload needs one."""
    name = wl["metadata"]["name"]
    result: dict[str, Obj] = {}
    for check, config in configs.items():
        if config is None or not request_is_needed(wl, config):
            continue
        for pr in owned:
            attempt = attempt_of(pr["metadata"]["name"], name, check)
            if attempt is None or not synced_with_config(pr, config):
                continue
            current = result.get(check)
            if current is None or _attempt(current, name, check) < attempt:
                result[check] = pr
    return result


def next_attempt(wl: Obj, state: Obj | None, pr: Obj | None, check: str) -> int | None:
    """The attempt to create a request for, None when none is to be created: the first (after the
    retries the check counted, when an eviction deleted the earlier ones), or the next one after a
    Failed request (or BookingExpired before admission) while the check is Pending."""
    if pr is None:
        return int((state or {}).get("retryCount") or 0) + 1
    failed = _true(pr, api.PR_FAILED) or (_true(pr, api.PR_BOOKING_EXPIRED) and not wlstatus.is_admitted(wl))
    if failed and state is not None and state.get("state") == api.CHECK_STATE_PENDING:
        return _attempt(pr, wl["metadata"]["name"], check) + 1
    return None


# --- the check state --------------------------------------------------------------------------


def _cond(pr: Obj, ctype: str) -> Obj | None:
    return find_status_condition((pr.get("status") or {}).get("conditions"), ctype)


def _true(pr: Obj, ctype: str) -> bool:
    c = _cond(pr, ctype)
    return c is not None and c.get("status") == "True"


def _message(pr: Obj, ctype: str) -> str:
    return (_cond(pr, ctype) or {}).get("message", "")


def pod_set_updates(wl: Obj, pr: Obj, config: Obj) -> list[Obj]:
    """Per PodSet of the request: the consume and class annotations, and the nodeSelector the
    config's podSetUpdates take from the request's provisioningClassDetails."""
    name = pr["metadata"]["name"]
    by_template = {
        pod_template_name(name, ps["name"]): ps["name"] for ps in (wl.get("spec") or {}).get("podSets") or ()
    }
    details = (pr.get("status") or {}).get("provisioningClassDetails") or {}
    selectors = ((config.get("spec") or {}).get("podSetUpdates") or {}).get("nodeSelector")
    updates = []
    for ps in (pr.get("spec") or {}).get("podSets") or ():
        update: Obj = {
            "name": by_template.get(ps["podTemplateRef"]["name"], ""),
            "annotations": {
                api.ANNOTATION_CONSUME_PROVISIONING_REQUEST: name,
                api.ANNOTATION_PROVISIONING_CLASS_NAME: (pr.get("spec") or {}).get(
                    "provisioningClassName", ""
                ),
            },
        }
        if selectors is not None:
            update["nodeSelector"] = {
                s["key"]: details[s["valueFromProvisioningClassDetail"]]
                for s in selectors
                if s["valueFromProvisioningClassDetail"] in details
            }
        updates.append(update)
    return updates


def _retry_or_reject(
    state: Obj, pr: Obj, ctype: str, retry_message: str, attempt: int, strategy: RetryStrategy, rng: Any
) -> None:
    if attempt <= strategy.limit:
        state["message"] = retry_message
        if attempt > int(state.get("retryCount") or 0):  # not on an old request
            state["state"] = api.CHECK_STATE_RETRY
            state["requeueAfterSeconds"] = requeue_after_seconds(
                int(state.get("retryCount") or 0), strategy, rng
            )
    else:
        state["state"] = api.CHECK_STATE_REJECTED
        state["message"] = _message(pr, ctype)


def next_check_state(
    wl: Obj, state: Obj, config: Obj | None, pr: Obj | None, rng: random.Random | None = None
) -> Obj | None:
    """The check's state as the request's conditions make it (a new dict), or None to leave it as
    it is (a request is still to be created)."""
    new = copy.deepcopy(state)
    if config is None:
        new["state"], new["message"] = api.CHECK_STATE_PENDING, api.MSG_CHECK_INACTIVE
        return new
    if not request_is_needed(wl, config):
        if new.get("state") != api.CHECK_STATE_READY:
            new["state"], new["message"] = api.CHECK_STATE_READY, api.MSG_NO_REQUEST_NEEDED
            new.pop("podSetUpdates", None)
        return new
    if pr is None:
        return None
    attempt = _attempt(pr, wl["metadata"]["name"], state["name"])
    strategy = retry_strategy(config)
    if _true(pr, api.PR_FAILED):
        message = api.retrying_after_failure_message(_message(pr, api.PR_FAILED))
        _retry_or_reject(new, pr, api.PR_FAILED, message, attempt, strategy, rng)
    elif _true(pr, api.PR_CAPACITY_REVOKED):
        if wlstatus.is_active(wl) and not wlstatus.is_finished(wl):
            new["state"], new["message"] = api.CHECK_STATE_REJECTED, _message(pr, api.PR_CAPACITY_REVOKED)
    elif _true(pr, api.PR_BOOKING_EXPIRED):
        if not wlstatus.is_admitted(wl):
            message = api.retrying_after_booking_expired_message(_message(pr, api.PR_BOOKING_EXPIRED))
            _retry_or_reject(new, pr, api.PR_BOOKING_EXPIRED, message, attempt, strategy, rng)
    elif _true(pr, api.PR_PROVISIONED):
        if new.get("state") != api.CHECK_STATE_READY:
            new["state"] = api.CHECK_STATE_READY
            new["podSetUpdates"] = pod_set_updates(wl, pr, config)
            new["message"] = _message(pr, api.PR_PROVISIONED)
    elif _true(pr, api.PR_ACCEPTED):
        provisioned = _cond(pr, api.PR_PROVISIONED)
        if provisioned is not None:  # the ETA the autoscaler gives
            new["state"], new["message"] = api.CHECK_STATE_PENDING, provisioned.get("message", "")
    else:
        new["state"], new["message"] = api.CHECK_STATE_PENDING, ""
    return new


def state_changed(old: Obj, new: Obj) -> bool:
    keys = ("state", "message", "podSetUpdates", "requeueAfterSeconds")
    return any(old.get(k) != new.get(k) for k in keys)


def with_transition_time(old: Obj, new: Obj, now: dt.datetime) -> Obj:
    """`new` with lastTransitionTime now when its state changed (SetAdmissionCheckState)."""
    if old.get("state") != new.get("state") or not new.get("lastTransitionTime"):
        new["lastTransitionTime"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return new
