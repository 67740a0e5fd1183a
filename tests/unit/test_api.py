"""Spot checks that API constants match the upstream strings and that Resource builds the right URLs."""

from __future__ import annotations

import pytest

from kueue_domain import api


def test_key_strings_match_upstream():
    assert api.LABEL_QUEUE_NAME == "kueue.x-k8s.io/queue-name"
    assert api.MULTIKUEUE_CONTROLLER_NAME == "kueue.x-k8s.io/multikueue"
    assert api.LABEL_MULTIKUEUE_ORIGIN == "kueue.x-k8s.io/multikueue-origin"
    assert api.ANNOTATION_MULTIKUEUE_ORIGIN_UID == "kueue.x-k8s.io/multikueue-origin-uid"
    assert api.LABEL_PREBUILT_WORKLOAD_NAME == "kueue.x-k8s.io/prebuilt-workload-name"
    assert api.FINALIZER_RESOURCE_IN_USE == "kueue.x-k8s.io/resource-in-use"
    assert api.SCHEDULING_GATE_ADMISSION == "kueue.x-k8s.io/admission"
    assert (
        api.WORKLOAD_QUOTA_RESERVED,
        api.WORKLOAD_ADMITTED,
        api.WORKLOAD_EVICTED,
        api.WORKLOAD_FINISHED,
    ) == (
        "QuotaReserved",
        "Admitted",
        "Evicted",
        "Finished",
    )
    assert api.FIELD_MANAGER_ADMISSION == "kueue-admission"
    assert api.FIELD_MANAGER_MULTIKUEUE == "kueue.x-k8s.io/multikueue"
    assert api.DISPATCHER_ALL_AT_ONCE == "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    assert api.METRIC_MULTIKUEUE_WORKLOADS_DISPATCHED_TOTAL == "multikueue_workloads_dispatched_total"


def test_message_templates():
    assert api.quota_reserved_message("cluster-queue") == "Quota reserved in ClusterQueue cluster-queue"
    assert api.deactivated_due_to("EvictedOnManagerCluster") == "DeactivatedDueToEvictedOnManagerCluster"
    # The exact ACS message asserted by upstream's enabled_integration_test.
    rejected = api.acs_update_message(
        api.no_adapter_for_owner_message("kubeflow.org/v2beta1, Kind=MPIJob"), "Pending"
    )
    assert rejected == (
        'No multikueue adapter found for owner kind "kubeflow.org/v2beta1, Kind=MPIJob", '
        'Previously: "Pending"'
    )
    assert api.evicted_on_worker_message("worker1") == (
        'Workload evicted on worker cluster: "worker1", resetting for re-admission. Previously: "Ready"'
    )
    assert api.ac_clusters_message(["a", "b"], ["c"]) == "Missing clusters: [a b], Inactive clusters: [c]"
    assert (
        api.expecting_managed_by_message("")
        == 'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not ""'
    )
    assert api.evicted_due_to_admission_check_retry_message([("mk", "Admitting remote lost")]) == (
        'Evicted due to AdmissionCheck in Retry state: "mk" (Admitting remote lost)'
    )
    assert api.cq_inactive_message([api.CQ_CLAUSE_STOPPED, api.cq_clause_missing_flavors(["x", "y"])]) == (
        "Can't admit new workloads: is stopped, references missing ResourceFlavor(s): x,y."
    )


def test_go_quote_matches_strconv_quote():
    assert api.go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert api.go_quote("tab\there\n") == '"tab\\there\\n"'
    assert api.go_quote("\x00\x7f") == '"\\x00\\x7f"'
    assert api.go_quote("é\u200b") == '"é\\u200b"'


def test_gvk_strings_use_go_format():
    assert api.LEADER_WORKER_SET.gvk == api.JOB_OWNER_GVK_LEADER_WORKER_SET
    assert api.JOB.gvk == "batch/v1, Kind=Job"
    assert api.POD.gvk == "/v1, Kind=Pod"


def test_api_paths():
    assert api.WORKLOAD.api_path("team-a") == "/apis/kueue.x-k8s.io/v1beta1/namespaces/team-a/workloads"
    assert api.WORKLOAD.api_path() == "/apis/kueue.x-k8s.io/v1beta1/workloads"
    assert api.WORKLOAD.api_path("team-a", "wl", "status") == (
        "/apis/kueue.x-k8s.io/v1beta1/namespaces/team-a/workloads/wl/status"
    )
    assert api.CLUSTER_QUEUE.api_path(name="cq") == "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/cq"
    assert api.CLUSTER_QUEUE.api_path("ignored", "cq") == "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/cq"
    assert api.POD.api_path("default", "p") == "/api/v1/namespaces/default/pods/p"
    assert api.NAMESPACE.api_path(name="default") == "/api/v1/namespaces/default"
    assert api.EVENT.api_path("ns") == "/apis/events.k8s.io/v1/namespaces/ns/events"
    assert api.LEASE.api_version == "coordination.k8s.io/v1" and api.POD.api_version == "v1"
    with pytest.raises(ValueError):
        api.WORKLOAD.api_path(name="wl")


def test_resources_are_frozen_and_complete():
    kinds = {r.kind for r in api.KUEUE_RESOURCES}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue", "Workload", "WorkloadPriorityClass"} <= kinds
    assert {"AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster"} <= kinds
    assert all(r.group == api.GROUP and r.version == "v1beta1" for r in api.KUEUE_RESOURCES)
    assert [r.kind for r in api.KUEUE_RESOURCES if r.namespaced] == ["LocalQueue", "Workload"]
    with pytest.raises(AttributeError):
        api.WORKLOAD.plural = "x"  # type: ignore[misc]


def test_multikueue_backoff_schedules():
    assert [api.reconnect_delay(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 320, 320, 320]
    assert [api.watch_establish_timeout(n) for n in range(6)] == [60, 120, 240, 480, 600, 600]
