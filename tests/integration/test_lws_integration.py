"""LeaderWorkerSet integration against a worker cluster of the fleet (real LWS controller):
one Workload per group with upstream names, PodSets and annotations; scaling creates and deletes
group Workloads; a group's pods carry the pod-group identity of their Workload."""

from __future__ import annotations

import hashlib

import pytest
from admission_kit import (
    Cleanup,
    Cluster,
    cluster_queue,
    eventually,
    local_queue,
    priority_classes,
    priority_of,
    relabel_priority,
    resource_flavor,
    running_agent,
    unique,
    with_priority,
)

from kube_runtime.client import KubeClient
from kueue_domain import api

pytestmark = pytest.mark.realcluster


def sample_lws(name: str, queue: str, replicas: int = 2, size: int = 3) -> dict:
    def template(role: str, cpu: str) -> dict:
        return {
            "spec": {
                "containers": [
                    {"name": f"nginx-{role}", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
                ]
            }
        }

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: queue}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template("leader", "100m"),
                "workerTemplate": template("worker", "200m"),
            },
        },
    }


def expected_name(lws: dict, index: int) -> str:
    name, uid = lws["metadata"]["name"], lws["metadata"]["uid"]
    digest = hashlib.sha1(
        f"LeaderWorkerSet\nleaderworkerset.x-k8s.io\n{name}-{index}\n{uid}".encode()
    ).hexdigest()
    return f"leaderworkerset-{name}-{index}-{digest[:5]}"


@pytest.fixture
async def worker_cluster(fleet):
    async with await KubeClient.from_kubeconfig_file(fleet.kubeconfig(fleet.workers[0])) as kube:
        ns = unique("lws")
        await kube.create(api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        cleanup = Cleanup(kube)
        yield Cluster(kube, ns, cleanup)
        items, _ = await kube.list(api.WORKLOAD, namespace=ns)
        for wl in items:  # the agent that would release them has stopped with the test
            await kube.patch_merge(
                api.WORKLOAD, wl["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace=ns
            )
        await kube.delete(api.NAMESPACE, ns)
        await cleanup.run()


async def test_lws_group_workloads_follow_replicas(worker_cluster):
    cluster = worker_cluster
    kube, ns = cluster.kube, cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "10"}}))
    await cluster.create(local_queue(ns, "user-queue", cq))
    async with running_agent(
        kube, {"integrations": {"frameworks": ["leaderworkerset.x-k8s.io/leaderworkerset"]}}
    ):
        lws = await kube.create(api.LEADER_WORKER_SET, sample_lws("sample", "user-queue"), namespace=ns)

        async def workloads(count: int):
            items, _ = await kube.list(api.WORKLOAD, namespace=ns)
            live = [w for w in items if not w["metadata"].get("deletionTimestamp")]
            return live if len(live) == count else None

        items = await eventually(lambda: workloads(2))
        by_name = {w["metadata"]["name"]: w for w in items}
        assert set(by_name) == {expected_name(lws, 0), expected_name(lws, 1)}
        wl = by_name[expected_name(lws, 0)]
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("leader", 1), ("worker", 2)]
        assert wl["spec"]["queueName"] == "user-queue"
        annotations = wl["metadata"]["annotations"]
        assert (
            annotations[api.ANNOTATION_JOB_OWNER_GVK] == "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet"
        )
        assert annotations[api.ANNOTATION_JOB_OWNER_NAME] == "sample"
        assert annotations[api.ANNOTATION_COMPONENT_WORKLOAD_INDEX] == "0"
        assert annotations[api.ANNOTATION_IS_GROUP_WORKLOAD] == "true"
        owner = wl["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner.get("controller")) == ("LeaderWorkerSet", "sample", None)
        assert wl["metadata"]["finalizers"] == [api.FINALIZER_RESOURCE_IN_USE]
        await eventually(lambda: cluster.admitted(expected_name(lws, 1)))

        # The group's pods get the pod-group identity of their Workload.
        async def labelled_pods():
            pods, _ = await kube.list(api.POD, namespace=ns)
            done = [p for p in pods if (p["metadata"].get("labels") or {}).get(api.LABEL_POD_GROUP_NAME)]
            return done if len(done) == 6 else None

        pods = await eventually(labelled_pods, timeout=30)
        roles = {}
        for pod in pods:
            group = pod["metadata"]["labels"][api.LWS_LABEL_GROUP_INDEX]
            assert pod["metadata"]["labels"][api.LABEL_POD_GROUP_NAME] == expected_name(lws, int(group))
            assert pod["metadata"]["annotations"][api.ANNOTATION_POD_GROUP_TOTAL_COUNT] == "3"
            role = pod["metadata"]["annotations"][api.ANNOTATION_ROLE_HASH]
            roles[role] = roles.get(role, 0) + 1
        assert roles == {"leader": 2, "worker": 4}

        await kube.patch_merge(api.LEADER_WORKER_SET, "sample", {"spec": {"replicas": 3}}, namespace=ns)
        items = await eventually(lambda: workloads(3))
        assert expected_name(lws, 2) in {w["metadata"]["name"] for w in items}
        await kube.patch_merge(api.LEADER_WORKER_SET, "sample", {"spec": {"replicas": 1}}, namespace=ns)
        items = await eventually(lambda: workloads(1))
        assert [w["metadata"]["name"] for w in items] == [expected_name(lws, 0)]


async def test_lws_priority_class_label_change_reaches_every_group_workload(worker_cluster):
    """Upstream's LeaderWorkerSet reconciler runs UpdateWorkloadPriority on each group's Workload:
    a changed `kueue.x-k8s.io/priority-class` label gives every admitted group the new class."""
    cluster = worker_cluster
    kube, ns = cluster.kube, cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "10"}}))
    await cluster.create(local_queue(ns, "user-queue", cq))
    classes = await priority_classes(cluster)
    async with running_agent(
        kube, {"integrations": {"frameworks": ["leaderworkerset.x-k8s.io/leaderworkerset"]}}
    ):
        body = sample_lws("prio", "user-queue", replicas=2, size=2)
        body["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] = classes["high"]
        lws = await kube.create(api.LEADER_WORKER_SET, body, namespace=ns)
        names = [expected_name(lws, 0), expected_name(lws, 1)]
        for name in names:
            await eventually(lambda name=name: cluster.admitted(name))
            wl = await cluster.wl(name)
            assert priority_of(wl) == (classes["high"], 300)

        await relabel_priority(kube, api.LEADER_WORKER_SET, "prio", ns, classes["low"])
        for wl in await eventually(lambda: with_priority(cluster, names, classes["low"], 100)):
            assert wl["spec"]["priorityClassSource"] == api.PRIORITY_CLASS_SOURCE_WORKLOAD
            assert await cluster.admitted(wl["metadata"]["name"])
