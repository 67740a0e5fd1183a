"""manager.adapters.pod: the pod copy a worker gets, the status a manager pod takes from its copy
(the local SchedulingGated condition kept until the worker's pod is scheduled), what the manager
keeps of a worker's pod, and which local Workload a worker's pod belongs to."""

from __future__ import annotations

import copy

from kueue_domain import api
from manager.adapters.pod import (
    PodAdapter,
    group_index,
    mirrored_pod_status,
    pod_group_name,
    remote_pod_copy,
)
from manager.remote import finished_state

GATED = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "gated"}


def local_pod(name: str = "solo", group: str | None = None) -> dict:
    labels = {api.LABEL_QUEUE_NAME: "main", api.LABEL_MANAGED: "true"}
    annotations = {api.ANNOTATION_ROLE_HASH: "abcd1234"}
    if group:
        labels[api.LABEL_POD_GROUP_NAME] = group
        annotations[api.ANNOTATION_POD_GROUP_TOTAL_COUNT] = "2"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": labels,
            "annotations": annotations,
            "finalizers": [api.FINALIZER_MANAGED],
        },
        "spec": {
            "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [dict(GATED)]},
    }


def test_the_remote_copy_has_metadata_spec_origin_and_prebuilt_name() -> None:
    local = local_pod(group="g")
    before = copy.deepcopy(local)
    remote = remote_pod_copy(local, "g", "origin-1")
    assert local == before
    meta = remote["metadata"]
    assert (remote["apiVersion"], remote["kind"]) == ("v1", "Pod")
    assert (meta["name"], meta["namespace"]) == ("solo", "team-a")
    assert meta["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == "origin-1"
    assert meta["labels"][api.LABEL_POD_GROUP_NAME] == "g"
    assert meta["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == "g"
    assert meta["annotations"][api.ANNOTATION_ROLE_HASH] == "abcd1234"
    assert "finalizers" not in meta and "uid" not in meta and "resourceVersion" not in meta
    assert remote["spec"] == local["spec"]  # still gated: the worker's agent ungates it
    assert "status" not in remote


def test_the_gated_condition_stays_while_the_worker_pod_is_unscheduled() -> None:
    local = local_pod()
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    status = mirrored_pod_status(local, {"phase": "Pending", "conditions": [unschedulable]})
    assert status["conditions"] == [GATED]
    assert status["phase"] == "Pending"


def test_the_gated_condition_stays_when_the_worker_pod_has_no_scheduled_condition() -> None:
    status = mirrored_pod_status(local_pod(), {"phase": "Pending"})
    assert status["conditions"] == [GATED]


def test_the_worker_pods_scheduled_condition_overwrites_the_gated_one() -> None:
    remote = {
        "phase": "Running",
        "qosClass": "Burstable",
        "podIP": "10.0.0.7",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
        ],
    }
    status = mirrored_pod_status(local_pod(), remote)
    assert status == remote


def test_an_ungated_local_pod_takes_the_worker_status_whole() -> None:
    local = local_pod()
    local["spec"].pop("schedulingGates")
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    status = mirrored_pod_status(local, {"phase": "Pending", "conditions": [unschedulable]})
    assert status["conditions"] == [unschedulable]


def test_the_local_qos_class_is_kept() -> None:
    assert mirrored_pod_status(local_pod(), {"phase": "Pending"})["qosClass"] == "Burstable"


def test_group_name_from_the_label_or_the_annotation() -> None:
    assert pod_group_name(local_pod(group="g")) == "g"
    pod = local_pod()
    pod["metadata"]["annotations"][api.ANNOTATION_POD_GROUP_NAME] = "h"
    assert pod_group_name(pod) == "h"
    assert pod_group_name(local_pod()) == ""
    assert group_index(local_pod(group="g")) == ("team-a/g",)
    assert group_index(local_pod()) == ()


def test_the_manager_keeps_of_a_worker_pod_its_metadata_status_node_and_gates() -> None:
    pod = local_pod()
    pod["metadata"]["managedFields"] = [{"manager": "x"}]
    pod["spec"]["nodeName"] = "kwok-node-0"
    kept = PodAdapter.remote_cache_transform(pod)
    assert kept["spec"] == {"nodeName": "kwok-node-0", "schedulingGates": pod["spec"]["schedulingGates"]}
    assert kept["status"] == pod["status"]
    assert "managedFields" not in kept["metadata"]


def test_workload_keys_for_a_worker_pod() -> None:
    adapter = PodAdapter.__new__(PodAdapter)
    pod = remote_pod_copy(local_pod(), "pod-solo-1a2b3", "o")
    assert adapter.workload_keys_for(pod) == ["team-a/pod-solo-1a2b3"]
    assert adapter.workload_keys_for(local_pod()) == []


def test_a_pod_that_ended_is_remembered_when_it_leaves_its_worker() -> None:
    pod = local_pod()
    assert not finished_state(api.POD, pod)
    pod["status"]["phase"] = "Succeeded"
    assert finished_state(api.POD, pod)
    pod["status"]["phase"] = "Failed"
    assert finished_state(api.POD, pod)


def test_an_ended_copy_counts_only_for_the_pod_it_was_made_for() -> None:
    from manager.adapters.pod import ran_for

    local = local_pod()
    local["metadata"]["creationTimestamp"] = "2026-11-28T10:00:05Z"
    ended = remote_pod_copy(local, "pod-solo-aaaaa", "o")
    ended["metadata"]["creationTimestamp"] = "2026-11-28T10:00:07Z"
    assert ran_for(ended, local, "pod-solo-aaaaa")
    assert not ran_for(ended, local, "pod-solo-bbbbb")  # another pod of that name, another Workload
    ended["metadata"]["creationTimestamp"] = "2026-11-28T09:59:00Z"
    assert not ran_for(ended, local, "pod-solo-aaaaa")  # an earlier run of a group name reused since
