"""Pure parts of the LeaderWorkerSet and pod-group integrations."""

from __future__ import annotations

import hashlib

from kueue_domain import api, naming
from worker_agent.integrations import leaderworkerset as lws_mod
from worker_agent.integrations import podgroup


def lws(leader: bool = True, origin_uid: str | None = None) -> dict:
    template = {
        "size": 3,
        "workerTemplate": {
            "metadata": {
                "labels": {
                    "leaderworkerset.sigs.k8s.io/name": "x",
                    "leaderworkerset.sigs.k8s.io/x": "y",
                    "a": "b",
                }
            },
            "spec": {"containers": [{"name": "w"}]},
        },
    }
    if leader:
        template["leaderTemplate"] = {"spec": {"containers": [{"name": "l"}]}}
    meta = {"name": "x", "namespace": "ns", "uid": "uid-1", "labels": {}, "annotations": {}}
    if origin_uid:
        meta["labels"][api.LABEL_MULTIKUEUE_ORIGIN] = "multikueue"
        meta["annotations"][api.ANNOTATION_MULTIKUEUE_ORIGIN_UID] = origin_uid
    return {"metadata": meta, "spec": {"replicas": 2, "leaderWorkerTemplate": template}}


def test_group_workload_name_hashes_owner_uid_or_origin_uid():
    def expected(uid: str) -> str:
        digest = hashlib.sha1(f"LeaderWorkerSet\nleaderworkerset.x-k8s.io\nx-1\n{uid}".encode()).hexdigest()
        return f"leaderworkerset-x-1-{digest[:5]}"

    assert naming.group_workload_name(lws(), 1) == expected("uid-1")
    assert naming.group_workload_name(lws(origin_uid="manager-uid"), 1) == expected("manager-uid")


def test_group_podsets_with_and_without_leader():
    podsets = lws_mod.group_podsets(lws())
    assert [(p["name"], p["count"]) for p in podsets] == [("leader", 1), ("worker", 2)]
    assert podsets[1]["template"]["metadata"]["labels"] == {"leaderworkerset.sigs.k8s.io/name": "x", "a": "b"}
    assert [(p["name"], p["count"]) for p in lws_mod.group_podsets(lws(leader=False))] == [("main", 3)]


def test_pod_role():
    leader_pod = {"metadata": {"annotations": {}}}
    worker_pod = {"metadata": {"annotations": {api.LWS_ANNOTATION_LEADER_NAME: "x-0"}}}
    assert lws_mod.pod_role(lws(), leader_pod) == "leader"
    assert lws_mod.pod_role(lws(), worker_pod) == "worker"
    assert lws_mod.pod_role(lws(leader=False), worker_pod) == "main"


def test_ungate_patch_removes_only_our_gate_and_adds_flavor_constraints():
    pod = {
        "metadata": {"name": "p", "resourceVersion": "5", "labels": {"app": "x"}},
        "spec": {
            "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}, {"name": "other"}],
            "nodeSelector": {"zone": "a"},
        },
    }
    info = {
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "labels": {api.LABEL_PODSET: "worker"},
    }
    patch = podgroup.ungate_patch(pod, info)
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "5"}
    ops = {p["path"]: p for p in patch[1:]}
    assert ops["/spec/schedulingGates"]["value"] == [{"name": "other"}]
    assert ops["/spec/nodeSelector"]["value"] == {"zone": "a", "pool": "gpu"}
    assert ops["/spec/tolerations"]["value"] == info["tolerations"]
    assert ops["/metadata/labels"]["value"] == {"app": "x", api.LABEL_PODSET: "worker"}
    only_gate = {
        "metadata": {"name": "p", "resourceVersion": "6"},
        "spec": {"schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}]},
    }
    assert podgroup.ungate_patch(only_gate, {})[1] == {"op": "remove", "path": "/spec/schedulingGates"}
