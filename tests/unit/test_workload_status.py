"""Workload status transitions (kueue_domain.workload): the exact conditions Kueue writes."""

from __future__ import annotations

import copy
import datetime as dt

from kueue_domain import api, features
from kueue_domain import workload as w

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(seconds=90)


def wl(**status):
    return {"metadata": {"name": "a", "namespace": "ns", "generation": 2}, "spec": {}, "status": status}


ADMISSION = {
    "clusterQueue": "cq",
    "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}, "count": 1}],
}


def test_reservation_without_checks_admits_in_the_same_write():
    obj = wl()
    w.set_quota_reservation(obj, ADMISSION, T0)
    reserved = w.condition(obj, api.WORKLOAD_QUOTA_RESERVED)
    admitted = w.condition(obj, api.WORKLOAD_ADMITTED)
    assert (reserved["status"], reserved["reason"], reserved["message"]) == (
        "True",
        "QuotaReserved",
        "Quota reserved in ClusterQueue cq",
    )
    assert (admitted["status"], admitted["reason"], admitted["message"]) == (
        "True",
        "Admitted",
        "The workload is admitted",
    )
    assert reserved["observedGeneration"] == 2


def test_reservation_with_pending_check_is_not_admitted():
    obj = wl(admissionChecks=[{"name": "ac", "state": "Pending"}])
    w.set_quota_reservation(obj, ADMISSION, T0)
    assert w.has_quota_reservation(obj)
    assert w.condition(obj, api.WORKLOAD_ADMITTED) is None  # no condition until something is admitted
    obj["status"]["admissionChecks"][0]["state"] = "Ready"
    assert w.sync_admitted_condition(obj, T1)
    assert w.is_admitted(obj)


def test_re_reservation_resets_eviction_with_previously_message():
    obj = wl()
    w.set_quota_reservation(obj, ADMISSION, T0)
    w.set_evicted(obj, "Preempted", "Preempted to accommodate", T0)
    w.set_preempted(obj, "InClusterQueue", "Preempted to accommodate", T0)
    w.clear_reservation_after_eviction(obj, T1)
    assert "admission" not in obj["status"]
    assert w.condition(obj, api.WORKLOAD_REQUEUED)["status"] == "True"
    assert w.condition(obj, api.WORKLOAD_ADMITTED)["reason"] == "NoReservation"
    assert obj["status"]["accumulatedPastExexcutionTimeSeconds"] == 90
    w.set_quota_reservation(obj, ADMISSION, T1)
    evicted = w.condition(obj, api.WORKLOAD_EVICTED)
    assert (evicted["status"], evicted["reason"], evicted["message"]) == (
        "False",
        "QuotaReserved",
        "Previously: Preempted to accommodate",
    )
    assert w.condition(obj, api.WORKLOAD_PREEMPTED)["status"] == "False"


def test_eviction_resets_checks_and_counts():
    obj = wl(
        admissionChecks=[{"name": "a", "state": "Retry", "retryCount": 1}, {"name": "b", "state": "Ready"}],
        clusterName="worker1",
    )
    w.set_evicted(obj, "AdmissionCheck", "msg", T0)
    w.set_evicted(obj, "AdmissionCheck", "msg", T0)
    checks = obj["status"]["admissionChecks"]
    assert checks[0]["state"] == "Pending" and checks[0]["retryCount"] == 2
    assert checks[1]["message"] == "Reset to Pending after eviction. Previously: Ready"
    assert "clusterName" not in obj["status"]
    assert obj["status"]["schedulingStats"]["evictions"] == [
        {"reason": "AdmissionCheck", "underlyingCause": "", "count": 2}
    ]


def test_eviction_for_other_reasons_requeues_false():
    obj = wl()
    w.set_quota_reservation(obj, ADMISSION, T0)
    w.set_evicted(obj, "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/a", T0)
    w.clear_reservation_after_eviction(obj, T1)
    requeued = w.condition(obj, api.WORKLOAD_REQUEUED)
    assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")
    reserved = w.condition(obj, api.WORKLOAD_QUOTA_RESERVED)
    assert (reserved["status"], reserved["reason"]) == ("False", "Pending")


def test_eviction_with_unadmitted_workloads_observability_says_pending_evaluation():
    obj = wl()
    w.set_quota_reservation(obj, ADMISSION, T0)
    w.set_evicted(obj, "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/a", T0)
    w.clear_reservation_after_eviction(obj, T1, features.build({"UnadmittedWorkloadsObservability": True}))
    reserved = w.condition(obj, api.WORKLOAD_QUOTA_RESERVED)
    assert (reserved["status"], reserved["reason"], reserved["message"]) == (
        "False",
        "PendingEvaluation",
        "Exceeded the PodsReady timeout ns/a",
    )


def test_requeue_state_backoff_doubles_and_caps():
    obj = wl()
    seen = []
    for _ in range(8):
        w.update_requeue_state(obj, 60, 3600, T0)
        at = dt.datetime.fromisoformat(obj["status"]["requeueState"]["requeueAt"].replace("Z", "+00:00"))
        seen.append(round((at - T0).total_seconds()))
    assert seen == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert obj["status"]["requeueState"]["count"] == 8


def test_admission_checks_for_flavors():
    spec = {
        "admissionChecks": ["all"],
        "admissionChecksStrategy": {"admissionChecks": [{"name": "spot-only", "onFlavors": ["spot"]}]},
    }
    assert w.admission_checks_for(spec, None, ["spot", "on-demand"]) == {"all"}
    assert w.admission_checks_for(spec, None, ["spot"]) == {"all", "spot-only"}
    assert w.admission_checks_for(spec, {"spot"}, ["spot", "on-demand"]) == {"all", "spot-only"}
    assert w.admission_checks_for(spec, {"on-demand"}, ["spot", "on-demand"]) == {"all"}


def test_sync_admission_checks_adds_pending_sorted_and_drops_stale():
    obj = wl(admissionChecks=[{"name": "z", "state": "Ready"}, {"name": "old", "state": "Ready"}])
    assert w.sync_admission_checks(obj, {"z", "a"}, T0)
    assert [(c["name"], c["state"]) for c in obj["status"]["admissionChecks"]] == [
        ("a", "Pending"),
        ("z", "Ready"),
    ]
    assert not w.sync_admission_checks(obj, {"z", "a"}, T0)


def test_apply_body_carries_only_admission_fields():
    obj = wl(
        conditions=[
            {"type": "QuotaReserved", "status": "True"},
            {"type": "SomethingElse", "status": "True"},
        ],
        admission=ADMISSION,
        reclaimablePods=[{"name": "main", "count": 1}],
    )
    obj["metadata"]["resourceVersion"] = "7"
    body = w.admission_apply_body(obj, strict=True)
    assert body["metadata"] == {"name": "a", "namespace": "ns", "resourceVersion": "7"}
    assert [c["type"] for c in body["status"]["conditions"]] == ["QuotaReserved"]
    assert "reclaimablePods" not in body["status"]
    assert "resourceVersion" not in w.admission_apply_body(obj)["metadata"]


def test_status_working_copy_leaves_the_cached_workload_unchanged():
    cached = wl(conditions=[{"type": "QuotaReserved", "status": "False", "reason": "Pending"}])
    before = w.working_copy(cached)
    working = w.status_working_copy(cached)
    w.set_quota_reservation(working, ADMISSION, T0)
    assert cached == before
    assert working["status"]["admission"] == ADMISSION
    assert w.admission_apply_body(working)["metadata"] == {"name": "a", "namespace": "ns"}


def test_admissible():
    assert w.is_admissible(wl())
    assert not w.is_admissible({**wl(), "spec": {"active": False}})
    gated = wl()
    gated["metadata"]["annotations"] = {api.ANNOTATION_ADMISSION_GATED_BY: "x"}
    assert not w.is_admissible(gated)
    on_hold = wl(conditions=[{"type": "QuotaReserved", "status": "False", "reason": "OnHold"}])
    assert not w.is_admissible(on_hold)


def test_only_changes_that_may_make_it_admissible_take_a_parked_workload_back():
    """Kueue's PushOrUpdate: generation, spec, priority boost, reclaimable pods, Evicted, Requeued."""
    old = wl()
    w.set_pending_condition(old, "Pending", "3 more needed", T0)
    pending_message = copy.deepcopy(old)
    w.set_pending_condition(pending_message, "Pending", "2 more needed", T1)
    assert not w.may_become_admissible(old, pending_message)
    resource_requests = copy.deepcopy(old)
    resource_requests["status"]["resourceRequests"] = [{"name": "main", "resources": {"cpu": "1"}}]
    assert not w.may_become_admissible(old, resource_requests)

    changes = []
    spec = copy.deepcopy(old)
    spec["spec"]["priority"] = 5
    changes.append(spec)
    generation = copy.deepcopy(old)
    generation["metadata"]["generation"] = 3
    changes.append(generation)
    boost = copy.deepcopy(old)
    boost["metadata"]["annotations"] = {api.ANNOTATION_PRIORITY_BOOST: "10"}
    changes.append(boost)
    reclaimable = copy.deepcopy(old)
    reclaimable["status"]["reclaimablePods"] = [{"name": "main", "count": 1}]
    changes.append(reclaimable)
    requeued = copy.deepcopy(old)
    w.set_requeued(requeued, False, "Deactivated", "deactivated", T1)
    changes.append(requeued)
    evicted = copy.deepcopy(old)
    w.set_condition(evicted, api.WORKLOAD_EVICTED, "True", "Preempted", "preempted", T1)
    changes.append(evicted)
    assert all(w.may_become_admissible(old, new) for new in changes)
