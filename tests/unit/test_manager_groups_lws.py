"""Workload groups and the LeaderWorkerSet adapter's pure parts: group membership and the
primary, the remote LWS copy, the spec hash that keeps in-place updates from looping, and the
Workload keys of a remote LWS (names must match the manager's exactly)."""

from __future__ import annotations

import pytest

from kube_runtime.informer import Informer
from kueue_domain import api
from kueue_domain.naming import group_workload_name
from manager.adapters.leaderworkerset import (
    ANNOTATION_SPEC_HASH,
    ANNOTATION_WORKER_CLUSTER,
    LeaderWorkerSetAdapter,
    remote_lws_copy,
    spec_hash,
)
from manager.groups import INDEX_GROUP, GroupConflict, Groups, group_index, group_key

UID = "6b9a3c4e-0000-4000-8000-000000000001"


def member(
    name: str, index: int | str | None, cluster: str = "", owner: str = "serve", ns: str = "team"
) -> dict:
    annotations = {
        api.ANNOTATION_JOB_OWNER_GVK: api.JOB_OWNER_GVK_LEADER_WORKER_SET,
        api.ANNOTATION_JOB_OWNER_NAME: owner,
    }
    if index is not None:
        annotations[api.ANNOTATION_COMPONENT_WORKLOAD_INDEX] = str(index)
    wl = {"metadata": {"name": name, "namespace": ns, "annotations": annotations}, "status": {}}
    if cluster:
        wl["status"]["clusterName"] = cluster
    return wl


def lws(replicas: int | None = 2) -> dict:
    spec = {"leaderWorkerTemplate": {"size": 3}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "serve",
            "namespace": "team",
            "uid": UID,
            "labels": {api.LABEL_QUEUE_NAME: "user-queue"},
            "annotations": {"note": "kept", ANNOTATION_WORKER_CLUSTER: "worker1"},
            "resourceVersion": "12",
            "ownerReferences": [{"kind": "Thing", "name": "x"}],
        },
        "spec": spec,
    }


def informer_with(*workloads: dict) -> Informer:
    informer = Informer(client=None, resource=api.WORKLOAD)  # type: ignore[arg-type]
    informer.add_index(INDEX_GROUP, group_index)
    for wl in workloads:
        informer.store.upsert(wl)
    return informer


def test_group_key_needs_both_owner_annotations():
    assert group_key(member("a", 0)) == f"team/{api.JOB_OWNER_GVK_LEADER_WORKER_SET}/serve"
    job_workload = {"metadata": {"name": "job-x", "namespace": "team"}}
    assert group_key(job_workload) is None


def test_members_exclude_self_deleted_and_other_groups():
    a, b, c = member("a", 0), member("b", 1), member("c", 2)
    c["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    other = member("z", 0, owner="another")
    groups = Groups(informer_with(a, b, c, other))
    assert [m["metadata"]["name"] for m in groups.members(a)] == ["b"]


def test_assigned_cluster_is_common_or_a_conflict():
    assert Groups.assigned_cluster([member("a", 0), member("b", 1, "w1")]) == "w1"
    assert Groups.assigned_cluster([member("a", 0)]) == ""
    with pytest.raises(GroupConflict, match='assigned to different clusters: "w1" and "w2"'):
        Groups.assigned_cluster([member("a", 0, "w1"), member("b", 1, "w2")])


@pytest.mark.parametrize(
    ("index", "others", "primary"),
    [(0, [1, 2], True), (1, [0, 2], False), (1, [-1, 2], True), (-1, [3], False), (2, [], True)],
)
def test_the_lowest_valid_index_is_primary(index, others, primary):
    wls = [member(f"m{i}", i) for i in others]
    assert Groups.is_primary(index, wls, LeaderWorkerSetAdapter.workload_index) is primary


@pytest.mark.parametrize(("value", "index"), [("0", 0), ("7", 7), ("-2", -1), ("x", -1), (None, -1)])
def test_workload_index_reads_the_component_annotation(value, index):
    assert LeaderWorkerSetAdapter.workload_index(member("m", value)) == index


def test_remote_lws_copy_carries_origin_and_manager_uid_and_nothing_local():
    local = lws()
    remote = remote_lws_copy(local, "multikueue")
    meta = remote["metadata"]
    assert meta["labels"] == {api.LABEL_QUEUE_NAME: "user-queue", api.LABEL_MULTIKUEUE_ORIGIN: "multikueue"}
    assert meta["annotations"]["note"] == "kept"
    assert meta["annotations"][api.ANNOTATION_MULTIKUEUE_ORIGIN_UID] == UID
    assert meta["annotations"][ANNOTATION_SPEC_HASH] == spec_hash(local)
    assert ANNOTATION_WORKER_CLUSTER not in meta["annotations"]
    assert set(meta) == {"name", "namespace", "labels", "annotations"}
    remote["spec"]["replicas"] = 9
    assert local["spec"]["replicas"] == 2


def test_spec_hash_follows_the_spec_not_key_order_or_metadata():
    one, two = lws(), lws()
    two["spec"] = {"leaderWorkerTemplate": {"size": 3}, "replicas": 2}
    two["metadata"]["labels"] = {}
    assert spec_hash(one) == spec_hash(two)
    two["spec"]["replicas"] = 3
    assert spec_hash(one) != spec_hash(two)


def test_workload_keys_of_a_remote_lws_match_the_manager_names():
    remote = remote_lws_copy(lws(replicas=3), "multikueue")
    remote["metadata"]["uid"] = "worker-side-uid"  # names hash the manager's UID, not this one
    adapter = LeaderWorkerSetAdapter(None, None)  # type: ignore[arg-type]
    keys = adapter.workload_keys_for(remote)
    assert keys == [f"team/{group_workload_name(lws(), i)}" for i in range(3)]
    default_replicas = remote_lws_copy(lws(replicas=None), "multikueue")
    default_replicas["metadata"]["uid"] = "worker-side-uid"
    assert len(adapter.workload_keys_for(default_replicas)) == 1
    unannotated = lws()
    unannotated["metadata"]["annotations"] = {}
    assert adapter.workload_keys_for(unannotated) == []
