"""The visibility API's pure parts: the order of a ClusterQueue's pending workloads (heap, parked and
in-flight together), positions, limit/offset defaults and bounds, and the bodies (upstream's
PendingWorkloadsSummary, discovery, the NotFound and BadRequest statuses)."""

from __future__ import annotations

from typing import Any

import pytest

from kueue_domain import api
from worker_agent import visibility
from worker_agent.engine import ClusterQueuePending, WorkloadInfo

Obj = dict[str, Any]


def wl_obj(name: str, priority: int, created: int, *, lq: str = "lq", namespace: str = "ns") -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-01-01T00:00:{created:02d}Z",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"job-{name}",
                    "uid": f"job-uid-{name}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": lq,
            "priority": priority,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}],
        },
    }


def info(name: str, priority: int, created: int, **kwargs: Any) -> WorkloadInfo:
    return WorkloadInfo.from_dict(wl_obj(name, priority, created, **kwargs), cluster_queue="cq")


def names(items: list[Obj]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


# ------------------------------------------------------------------------------------------------
# Order


def test_snapshot_sorts_heap_parked_and_in_flight_workloads_together():
    q = ClusterQueuePending("cq")
    for w in (info("low-old", 0, 1), info("high-new", 10, 5), info("high-old", 10, 2), info("mid", 5, 3)):
        q.push_or_update(w)
    head = q.pop()
    assert head is not None and head.name == "high-old"
    assert q.requeue_if_not_present(head, api.REQUEUE_NO_FIT) is False  # parked (inadmissible)
    assert head.key in q.inadmissible and head.key not in q.items
    # Its equivalent (same priority and shape) was parked with it (SchedulingEquivalenceHashing).
    assert {w.name for w in q.inadmissible.values()} == {"high-old", "high-new"}
    in_flight = q.pop()  # the next head, taken by a scheduling cycle
    assert in_flight is not None and in_flight.name == "mid" and q.inflight is in_flight
    # Parked and in-flight workloads count, in the places their priority and creation give them,
    # as upstream's Snapshot sorts heap, inadmissible and inflight together.
    assert [w.name for w in q.snapshot()] == ["high-old", "high-new", "mid", "low-old"]
    assert [w.name for w in q.items.values()] == ["low-old"]
    assert len(q.snapshot()) == q.pending() == 4


def test_snapshot_keeps_the_in_flight_head_and_parked_workloads():
    q = ClusterQueuePending("cq")
    for w in (info("a", 0, 1), info("b", 0, 2), info("c", 3, 3)):
        q.push_or_update(w)
    popped = q.pop()
    assert popped is not None and popped.name == "c"
    assert [w.name for w in q.snapshot()] == ["c", "a", "b"]
    q.requeue_if_not_present(popped, api.REQUEUE_NO_FIT)  # parked: still first by priority
    assert [w.name for w in q.snapshot()] == ["c", "a", "b"]
    assert q.pending() == 3


def test_equal_priority_and_time_break_ties_by_uid():
    q = ClusterQueuePending("cq")
    q.push_or_update(info("y", 1, 4))
    q.push_or_update(info("x", 1, 4))
    assert [w.name for w in q.snapshot()] == ["x", "y"]


# ------------------------------------------------------------------------------------------------
# Positions, limit and offset


PENDING = [
    info("a0", 9, 1, lq="a"),
    info("b0", 8, 2, lq="b"),
    info("a1", 7, 3, lq="a"),
    info("a2", 6, 4, lq="a"),
    info("b1", 5, 5, lq="b"),
    info("other-a0", 4, 6, lq="a", namespace="other"),
]
OBJECTS = {
    w.key: wl_obj(w.name, w.priority, i + 1, lq=w.queue_name, namespace=w.namespace)
    for i, w in enumerate(PENDING)
}


def object_of(w: WorkloadInfo) -> Obj | None:
    return OBJECTS.get(w.key)


def test_cluster_queue_items_positions_and_the_upstream_item_shape():
    items = visibility.cluster_queue_items(PENDING, 1000, 0, object_of)
    assert names(items) == ["a0", "b0", "a1", "a2", "b1", "other-a0"]
    assert [i["positionInClusterQueue"] for i in items] == [0, 1, 2, 3, 4, 5]
    # A LocalQueue is a namespace and a name: ns/a and other/a count apart.
    assert [i["positionInLocalQueue"] for i in items] == [0, 0, 1, 2, 1, 0]
    assert items[0] == {
        "metadata": {
            "name": "a0",
            "namespace": "ns",
            "creationTimestamp": "2026-01-01T00:00:01Z",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "job-a0", "uid": "job-uid-a0"}
            ],
        },
        "priority": 9,
        "localQueueName": "a",
        "positionInClusterQueue": 0,
        "positionInLocalQueue": 0,
    }
    assert list(items[0]) == [
        "metadata",
        "priority",
        "localQueueName",
        "positionInClusterQueue",
        "positionInLocalQueue",
    ]


def test_cluster_queue_items_slice_keeps_positions_of_the_whole_queue():
    items = visibility.cluster_queue_items(PENDING, 2, 2, object_of)
    assert names(items) == ["a1", "a2"]
    assert [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in items] == [(2, 1), (3, 2)]
    assert visibility.cluster_queue_items(PENDING, 10, 6, object_of) == []
    assert visibility.cluster_queue_items(PENDING, 0, 0, object_of) == []


def test_local_queue_items_count_their_own_positions_and_the_cluster_queues():
    items = visibility.local_queue_items(PENDING, "ns", "a", 1000, 0, object_of)
    assert names(items) == ["a0", "a1", "a2"]
    assert [i["positionInLocalQueue"] for i in items] == [0, 1, 2]
    assert [i["positionInClusterQueue"] for i in items] == [0, 2, 3]
    sliced = visibility.local_queue_items(PENDING, "ns", "a", 1, 1, object_of)
    assert [
        (i["metadata"]["name"], i["positionInLocalQueue"], i["positionInClusterQueue"]) for i in sliced
    ] == [("a1", 1, 2)]
    assert names(visibility.local_queue_items(PENDING, "other", "a", 1000, 0, object_of)) == ["other-a0"]
    assert visibility.local_queue_items(PENDING, "ns", "a", 5, 3, object_of) == []
    assert visibility.local_queue_items(PENDING, "ns", "nobody", 5, 0, object_of) == []


def test_an_item_without_owners_or_object_has_no_owner_references():
    bare = WorkloadInfo.from_dict(
        {"metadata": {"name": "w", "namespace": "ns"}, "spec": {"queueName": "q", "podSets": []}},
        cluster_queue="cq",
    )
    item = visibility.pending_workload(bare, None, 4, 1)
    assert item == {
        "metadata": {"name": "w", "namespace": "ns"},
        "priority": 0,
        "localQueueName": "q",
        "positionInClusterQueue": 4,
        "positionInLocalQueue": 1,
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, (1000, 0)),  # upstream's defaults
        ({"limit": ["0"]}, (1000, 0)),  # 0 is defaulted too
        ({"limit": ["2"], "offset": ["3"]}, (2, 3)),
        ({"limit": ["+2"], "offset": ["-3"]}, (2, 0)),
        ({"limit": ["-1"]}, (0, 0)),  # bounded: a negative limit fetches nothing
        ({"limit": ["2000000000"]}, (visibility.MAX_PENDING_WORKLOADS_LIMIT, 0)),
        ({"limit": ["7", "9"]}, (7, 0)),  # the first value counts
    ],
)
def test_pending_workload_options(query, expected):
    assert visibility.pending_workload_options(query) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", 'strconv.ParseInt: parsing "abc": invalid syntax'),
        ("", 'strconv.ParseInt: parsing "": invalid syntax'),
        ("1.5", 'strconv.ParseInt: parsing "1.5": invalid syntax'),
        (" 1", 'strconv.ParseInt: parsing " 1": invalid syntax'),
        ("9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    ],
)
def test_a_parameter_that_is_not_an_int64_is_refused_with_gos_message(value, message):
    with pytest.raises(visibility.OptionsError) as err:
        visibility.pending_workload_options({"offset": [value]})
    assert str(err.value) == message
    assert visibility.parse_int64(["9223372036854775807"]) == 2**63 - 1


# ------------------------------------------------------------------------------------------------
# Bodies


def test_summary_and_not_found_bodies():
    assert visibility.summary("v1beta1", []) == {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": "visibility.kueue.x-k8s.io/v1beta1",
        "metadata": {},
        "items": [],
    }
    assert visibility.not_found("clusterqueue", "nope") == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'clusterqueue.visibility.kueue.x-k8s.io "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "visibility.kueue.x-k8s.io", "kind": "clusterqueue"},
        "code": 404,
    }


def test_discovery_documents():
    group = visibility.api_group()
    assert group["preferredVersion"] == {
        "groupVersion": "visibility.kueue.x-k8s.io/v1beta2",
        "version": "v1beta2",
    }
    assert [v["version"] for v in group["versions"]] == ["v1beta2", "v1beta1"]
    resources = visibility.api_resource_list("v1beta1")
    assert resources["groupVersion"] == "visibility.kueue.x-k8s.io/v1beta1"
    assert resources["resources"] == [
        {
            "name": "clusterqueues",
            "singularName": "clusterqueue",
            "namespaced": False,
            "kind": "PendingWorkloadsSummary",
            "verbs": [],
        },
        {
            "name": "clusterqueues/pendingworkloads",
            "singularName": "",
            "namespaced": False,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
        {
            "name": "localqueues",
            "singularName": "localqueue",
            "namespaced": True,
            "kind": "PendingWorkloadsSummary",
            "verbs": [],
        },
        {
            "name": "localqueues/pendingworkloads",
            "singularName": "",
            "namespaced": True,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
    ]
    assert visibility.api_group_list()["groups"][0]["name"] == "visibility.kueue.x-k8s.io"


# ------------------------------------------------------------------------------------------------
# The server's answers, over a real AdmissionState whose informers were filled as a list fills them

UNREACHABLE = {
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "c",
}


async def listed(informer: Any, objects: list[Obj]) -> None:
    """What an informer's first list does: the store replaced, handlers told, synced."""
    for event in informer.store.replace(objects):
        await informer._dispatch(event)
    informer._synced.set()


@pytest.fixture
async def server():
    from multidict import MultiDict

    from kube_runtime.client import KubeClient
    from kueue_domain.config import parse_config
    from worker_agent.admission import AdmissionState

    kube = await KubeClient.from_kubeconfig_dict(UNREACHABLE, request_timeout=2, connect_timeout=1)
    state = AdmissionState(kube, parse_config({}))
    srv = visibility.VisibilityServer(kube, visibility.PendingWorkloads(state), certificates=None)

    def get(path: str, method: str = "GET", **query: str) -> tuple[int, Obj]:
        return srv.answer(method, path, MultiDict(query))

    yield state, get
    await kube.close()


async def test_answers_before_and_after_the_caches_sync(server):
    state, get = server
    cq_path = "/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/cq/pendingworkloads"
    code, body = get(cq_path)
    assert (code, body["reason"]) == (503, "ServiceUnavailable")
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}, "resourceGroups": []},
    }
    lqs = [
        {"metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": cq_name}}
        for lq, ns, cq_name in (("a", "ns", "cq"), ("b", "ns", "cq"), ("orphan", "ns", "gone"))
    ]
    await listed(state.cluster_queues, [cq])
    await listed(state.local_queues, lqs)
    await listed(
        state.workloads,
        [wl_obj("late", 1, 9, lq="a"), wl_obj("first", 7, 1, lq="b"), wl_obj("second", 1, 2, lq="a")],
    )
    code, body = get(cq_path)
    assert code == 200 and names(body["items"]) == ["first", "second", "late"]
    assert body["items"][1]["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job-second", "uid": "job-uid-second"}
    ]
    code, body = get(cq_path, limit="1", offset="1")
    assert names(body["items"]) == ["second"]
    lq_path = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/a/pendingworkloads"
    code, body = get(lq_path)
    assert body["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta2"
    assert [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in body["items"]
    ] == [
        ("second", 1, 0),
        ("late", 2, 1),
    ]
    # A LocalQueue of a ClusterQueue that does not exist: no items. Missing queues: upstream's 404s.
    orphan = get("/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/ns/localqueues/orphan/pendingworkloads")
    assert orphan == (200, visibility.summary("v1beta1", []))
    code, body = get("/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/none/pendingworkloads")
    assert (code, body["message"]) == (404, 'clusterqueue.visibility.kueue.x-k8s.io "none" not found')
    code, body = get(
        "/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/other/localqueues/a/pendingworkloads"
    )
    assert (code, body["message"]) == (404, 'localqueue.visibility.kueue.x-k8s.io "a" not found')
    code, body = get(cq_path, limit="x")
    assert (code, body["reason"], body["message"]) == (
        400,
        "BadRequest",
        'strconv.ParseInt: parsing "x": invalid syntax',
    )


async def test_discovery_paths_methods_and_unknown_versions(server):
    _, get = server
    assert get("/apis")[1]["kind"] == "APIGroupList"
    assert get("/apis/visibility.kueue.x-k8s.io")[1] == visibility.api_group()
    assert get("/apis/visibility.kueue.x-k8s.io/v1beta2/")[1] == visibility.api_resource_list("v1beta2")
    assert get("/apis/visibility.kueue.x-k8s.io/v1alpha1")[0] == 404
    code, body = get("/apis/visibility.kueue.x-k8s.io/v1alpha1/clusterqueues/cq/pendingworkloads")
    assert (code, body["message"]) == (404, "the server could not find the requested resource")
    code, body = get("/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/cq/pendingworkloads", "POST")
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
