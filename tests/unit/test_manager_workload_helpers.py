"""manager.copies' pure helpers and owner_gvk: the owner GVK string adapters are keyed by, which
worker's copy wins, the remote Workload copy (upstream's cloneForCreate) and the spec comparisons that
decide between patching and re-dispatching a copy."""

from __future__ import annotations

import copy

import pytest

from kueue_domain import api
from manager.adapters.base import owner_gvk
from manager.copies import (
    SPEC_DIGEST_KEY,
    best_match,
    only_priority_differs,
    priority_patch,
    remote_copy,
    remote_spec_out_of_sync,
    remote_workload_cache_transform,
)

# -- owner_gvk ---------------------------------------------------------------------------------


def test_owner_gvk_of_a_batch_job() -> None:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True}
    assert owner_gvk(ref) == "batch/v1, Kind=Job"


def test_owner_gvk_of_a_core_pod_has_an_empty_group() -> None:
    assert owner_gvk({"apiVersion": "v1", "kind": "Pod", "name": "p"}) == "/v1, Kind=Pod"


def test_owner_gvk_of_a_leaderworkerset() -> None:
    ref = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "srv"}
    assert owner_gvk(ref) == "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet"


# -- best_match --------------------------------------------------------------------------------


def remote_wl(*conditions: dict) -> dict:
    return {"metadata": {"name": "wl", "namespace": "ns"}, "status": {"conditions": list(conditions)}}


def admitted(status: str, since: str) -> dict:
    return {"type": "Admitted", "status": status, "lastTransitionTime": since, "reason": "Admitted"}


def test_best_match_is_the_earliest_true_condition() -> None:
    remotes = {
        "worker1": remote_wl(admitted("True", "2026-01-01T00:00:10Z")),
        "worker2": remote_wl(admitted("True", "2026-01-01T00:00:05Z")),
        "worker3": remote_wl(admitted("True", "2026-01-01T00:00:20Z")),
    }
    found = best_match(remotes, "Admitted")
    assert found is not None
    cluster, condition = found
    assert cluster == "worker2"
    assert condition["lastTransitionTime"] == "2026-01-01T00:00:05Z"


def test_best_match_ignores_false_conditions_and_missing_copies() -> None:
    remotes = {
        "worker1": remote_wl(admitted("False", "2026-01-01T00:00:01Z")),
        "worker2": None,
        "worker3": remote_wl(admitted("True", "2026-01-01T00:00:30Z")),
        "worker4": remote_wl({"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026"}),
    }
    assert best_match(remotes, "Admitted") == ("worker3", remotes["worker3"]["status"]["conditions"][0])


def test_best_match_keeps_the_recorded_cluster_while_its_copy_has_the_condition() -> None:
    remotes = {
        "worker1": remote_wl(admitted("True", "2026-01-01T00:00:05Z")),
        "worker2": remote_wl(admitted("True", "2026-01-01T00:00:05Z")),
    }
    assert best_match(remotes, "Admitted")[0] == "worker1"
    assert best_match(remotes, "Admitted", prefer="worker2")[0] == "worker2"
    remotes["worker2"] = None
    assert best_match(remotes, "Admitted", prefer="worker2")[0] == "worker1"


def test_best_match_is_none_when_no_copy_has_the_condition_true() -> None:
    remotes = {"worker1": remote_wl(admitted("False", "2026-01-01T00:00:01Z")), "worker2": None}
    assert best_match(remotes, "Admitted") is None
    assert best_match({}, "Admitted") is None


# -- remote_copy -------------------------------------------------------------------------------


def local_workload() -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "job-sample-1a2b3",
            "namespace": "team-a",
            "uid": "6f9b-uid",
            "resourceVersion": "4711",
            "generation": 2,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {api.LABEL_JOB_UID: "abc-123", "kueue.x-k8s.io/queue-name": "user-queue"},
            "annotations": {"note": "kept"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "sample",
                    "uid": "abc-123",
                    "controller": True,
                }
            ],
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "queueName": "user-queue",
            "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}],
        },
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    }


def test_remote_copy_keeps_name_labels_annotations_and_spec() -> None:
    local = local_workload()
    remote = remote_copy(local, "manager-east")
    assert remote == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "job-sample-1a2b3",
            "namespace": "team-a",
            "labels": {
                "kueue.x-k8s.io/queue-name": "user-queue",
                api.LABEL_MULTIKUEUE_ORIGIN: "manager-east",
            },
            "annotations": {"note": "kept"},
        },
        "spec": local["spec"],
    }


def test_remote_copy_has_no_owners_finalizers_status_or_identity() -> None:
    remote = remote_copy(local_workload(), "multikueue")
    meta = remote["metadata"]
    for key in ("ownerReferences", "finalizers", "uid", "resourceVersion", "generation", "creationTimestamp"):
        assert key not in meta
    assert "status" not in remote
    assert api.LABEL_JOB_UID not in meta["labels"]
    assert meta["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == "multikueue"


def test_remote_copy_does_not_share_state_with_the_local_workload() -> None:
    local = local_workload()
    before = copy.deepcopy(local)
    remote = remote_copy(local, "multikueue")
    remote["spec"]["podSets"][0]["count"] = 99
    remote["spec"]["podSets"][0]["template"]["spec"]["containers"].append({"name": "extra"})
    remote["metadata"]["labels"]["added"] = "x"
    remote["metadata"]["annotations"]["added"] = "x"
    assert local == before


def test_remote_copy_of_a_workload_without_labels() -> None:
    local = {"metadata": {"name": "wl", "namespace": "ns"}, "spec": {"queueName": "q"}}
    remote = remote_copy(local, "multikueue")
    assert remote["metadata"]["labels"] == {api.LABEL_MULTIKUEUE_ORIGIN: "multikueue"}
    assert "annotations" not in remote["metadata"]
    assert local == {"metadata": {"name": "wl", "namespace": "ns"}, "spec": {"queueName": "q"}}


# -- spec comparisons --------------------------------------------------------------------------


def test_a_copy_that_lost_empty_fields_in_conversion_is_in_sync() -> None:
    # Upstream Kueue v0.19 stores v1beta2: the v1beta1 copy it returns has no priorityClassSource: "".
    local = {"spec": {"queueName": "q", "priorityClassSource": "", "podSets": [{"name": "main", "count": 1}]}}
    remote = {"spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "minCount": None}]}}
    assert remote_spec_out_of_sync(local, remote) is False


def test_a_copy_with_another_pod_count_is_out_of_sync() -> None:
    local = {"spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1}]}}
    remote = {"spec": {"queueName": "q", "podSets": [{"name": "main", "count": 2}], "preemptionGates": []}}
    assert remote_spec_out_of_sync(local, remote) is True
    assert (
        remote_spec_out_of_sync(local, {"spec": {"queueName": "q", "priority": 0, **local["spec"]}}) is True
    )


def wpc_workload(priority_class: str, priority: int, **extra: object) -> dict:
    spec = {
        "queueName": "q",
        "podSets": [{"name": "main", "count": 1}],
        "priorityClassName": priority_class,
        "priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD,
        "priority": priority,
        **extra,
    }
    return {"spec": spec}


def test_only_priority_differs_for_a_workload_priority_class_change() -> None:
    assert only_priority_differs(wpc_workload("high", 1000), wpc_workload("low", 10)) is True


def test_only_priority_differs_ignores_preemption_gates() -> None:
    local = wpc_workload("high", 1000, preemptionGates=[{"name": "kueue.x-k8s.io/multikueue"}])
    assert only_priority_differs(local, wpc_workload("low", 10)) is True


def test_only_priority_differs_is_false_when_something_else_changed_too() -> None:
    remote = wpc_workload("low", 10)
    remote["spec"]["podSets"] = [{"name": "main", "count": 2}]
    assert only_priority_differs(wpc_workload("high", 1000), remote) is False


def test_only_priority_differs_is_false_for_a_pod_priority_class() -> None:
    local = wpc_workload("high", 1000)
    remote = wpc_workload("low", 10)
    for wl in (local, remote):
        wl["spec"]["priorityClassSource"] = api.PRIORITY_CLASS_SOURCE_POD
    assert only_priority_differs(local, remote) is False


def test_only_priority_differs_needs_a_workload_priority_class_on_the_copy() -> None:
    # A class added on the manager to a Workload whose copy has none is a new dispatch (upstream's
    # PriorityChanged needs the remote's class to be a WorkloadPriorityClass).
    remote = wpc_workload("low", 10)
    del remote["spec"]["priorityClassName"], remote["spec"]["priorityClassSource"]
    assert only_priority_differs(wpc_workload("high", 1000), remote) is False
    # A copy with a WorkloadPriorityClass follows a manager Workload that has none.
    local = wpc_workload("low", 10)
    del local["spec"]["priorityClassName"], local["spec"]["priorityClassSource"]
    assert only_priority_differs(local, wpc_workload("low", 10)) is True


def test_the_priority_patch_sets_all_three_fields() -> None:
    assert priority_patch(wpc_workload("high", 1000)) == {
        "priorityClassName": "high",
        "priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD,
        "priority": 1000,
    }
    assert priority_patch({"spec": {"priority": 5}}) == {
        "priorityClassName": None,
        "priorityClassSource": None,
        "priority": 5,
    }


def test_a_cached_copy_keeps_its_status_and_a_digest_of_its_spec() -> None:
    remote = wpc_workload("low", 10, preemptionGates=[{"name": "g"}])
    remote["metadata"] = {"name": "wl", "namespace": "ns", "managedFields": [{"manager": "x"}]}
    remote["status"] = {"conditions": [{"type": "Admitted", "status": "True"}]}
    cached = remote_workload_cache_transform(remote)
    assert cached["status"] == remote["status"] and cached["metadata"] == {"name": "wl", "namespace": "ns"}
    assert set(cached["spec"]) == {"priorityClassName", "priorityClassSource", "priority", SPEC_DIGEST_KEY}
    assert remote["spec"]["podSets"] == [{"name": "main", "count": 1}]  # the input is left alone


@pytest.mark.parametrize(
    ("local", "remote", "out_of_sync", "priority_only"),
    [
        (wpc_workload("high", 1000), wpc_workload("high", 1000), False, True),
        (wpc_workload("high", 1000), wpc_workload("low", 10), True, True),
        (
            wpc_workload("high", 1000, preemptionGates=[{"name": "g"}]),
            wpc_workload("high", 1000),
            False,
            True,
        ),
        (
            wpc_workload("high", 1000),
            wpc_workload("high", 1000, podSets=[{"name": "main", "count": 2}]),
            True,
            False,
        ),
        (wpc_workload("high", 1000, queueName="other"), wpc_workload("low", 10), True, False),
        (
            {"spec": {"queueName": "q", "priorityClassSource": "", "podSets": [{"name": "m", "count": 1}]}},
            {"spec": {"queueName": "q", "podSets": [{"name": "m", "count": 1, "minCount": None}]}},
            False,
            False,
        ),
    ],
)
def test_comparisons_agree_on_full_and_cached_copies(local, remote, out_of_sync, priority_only) -> None:
    for copy_ in (remote, remote_workload_cache_transform(remote)):
        assert remote_spec_out_of_sync(local, copy_) is out_of_sync
        assert only_priority_differs(local, copy_) is priority_only
