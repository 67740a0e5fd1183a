"""LeaderWorkerSets across clusters (multikueue-spec §3.10, §4, and beyond upstream): every group
on one worker, the worker's LWS status on the manager's LWS, a partly reserved group that does
not make the remote LWS flap, scaling in place, a group evicted on its worker re-placed whole, and
GC of remote LWS objects whose manager LWS is gone."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from admission_kit import consistently, workload
from multikueue_kit import LWS_FRAMEWORKS as FRAMEWORKS
from multikueue_kit import check_state, eventually, lws, multikueue

from kube_runtime.client import KubeClient
from kueue_domain import api
from manager.adapters.leaderworkerset import ANNOTATION_WORKER_CLUSTER

pytestmark = pytest.mark.realcluster


async def members(env, name: str) -> list[dict]:
    items, _ = await env.manager_kube.list(api.WORKLOAD, namespace=env.namespace)
    return [
        wl
        for wl in items
        if (wl["metadata"].get("annotations") or {}).get(api.ANNOTATION_JOB_OWNER_NAME) == name
    ]


def placed_on(env, name: str, count: int):
    """All `count` members Ready on one worker: that worker's MultiKueueCluster name."""

    async def check():
        found = await members(env, name)
        clusters = set()
        for wl in found:
            state = check_state(wl, env.check)
            if not state or state["state"] != "Ready":
                return None
            clusters.add(wl["status"].get("clusterName"))
        return clusters.pop() if len(found) == count and len(clusters) == 1 else None

    return check


@contextlib.asynccontextmanager
async def count_remote_lws_events(kube: KubeClient, namespace: str):
    """Counts ADDED/DELETED watch events of LeaderWorkerSets on a worker while the block runs."""
    counts = {"ADDED": 0, "DELETED": 0}

    async def watch():
        async for event_type, _obj in kube.watch(api.LEADER_WORKER_SET, namespace, allow_bookmarks=False):
            if event_type in counts:
                counts[event_type] += 1

    task = asyncio.get_running_loop().create_task(watch())
    try:
        yield counts
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def test_groups_run_on_one_worker_and_the_status_is_mirrored(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, frameworks=FRAMEWORKS) as env:
        created = await kube.create(api.LEADER_WORKER_SET, lws("serve"), namespace=namespace)
        cluster = await eventually(placed_on(env, "serve", 2), timeout=60)
        other = next(c for c in env.clusters if c != cluster)
        remote = await eventually(lambda: env.remote(cluster, api.LEADER_WORKER_SET, "serve"))
        assert remote["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert (
            remote["metadata"]["annotations"][api.ANNOTATION_MULTIKUEUE_ORIGIN_UID]
            == created["metadata"]["uid"]
        )
        assert not remote["metadata"].get("ownerReferences")
        assert not await env.remote(other, api.LEADER_WORKER_SET, "serve")
        await env.wait_copies_gone(other, *[wl["metadata"]["name"] for wl in await members(env, "serve")])

        async def mirrored():
            local = await kube.get(api.LEADER_WORKER_SET, "serve", namespace)
            annotations = local["metadata"].get("annotations") or {}
            ready = (local.get("status") or {}).get("readyReplicas")
            return local if ready == 2 and annotations.get(ANNOTATION_WORKER_CLUSTER) == cluster else None

        local = await eventually(mirrored, timeout=60)
        assert local["status"]["replicas"] == 2
        pods, _ = await kube.list(api.POD, namespace=namespace)
        assert pods == [], "no pod of the LWS runs on the manager cluster"

        await kube.delete(api.LEADER_WORKER_SET, "serve", namespace)

        async def gone_from_worker():
            copies = [
                wl
                for wl in await env.remote_workloads(cluster)
                if wl["metadata"]["name"].startswith("leaderworkerset-serve-")
            ]
            return (not copies and not await env.remote(cluster, api.LEADER_WORKER_SET, "serve")) or None

        await eventually(gone_from_worker, timeout=60)


async def test_a_partly_reserved_group_does_not_make_the_remote_lws_flap(fleet, kube, namespace):
    # Manager quota for one group only: the group placed, then a second group that waits for quota
    # on the manager must not take the shared remote LWS away from the first (upstream does, §4.6).
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "4"}, manager_cpu="2", frameworks=FRAMEWORKS
    ) as env:
        (cluster,) = env.clusters
        worker = env.worker_kubes["worker1"]
        async with count_remote_lws_events(worker, namespace) as counts:
            await kube.create(api.LEADER_WORKER_SET, lws("partial", replicas=1), namespace=namespace)
            assert await eventually(placed_on(env, "partial", 1), timeout=60) == cluster
            await kube.patch_merge(api.LEADER_WORKER_SET, "partial", {"spec": {"replicas": 2}}, namespace)

            async def two_members():
                return len(await members(env, "partial")) == 2 or None

            await eventually(two_members, timeout=30)
            await consistently(lambda: env.remote(cluster, api.LEADER_WORKER_SET, "partial"), duration=5)
            # Quota for the second group: it follows the first to the same worker.
            cq = next(c for c in env.cleanup if c[1] is api.CLUSTER_QUEUE and c[0] is kube)[2]
            current = await kube.get(api.CLUSTER_QUEUE, cq)
            current["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "4"
            await kube.replace(api.CLUSTER_QUEUE, current)
            assert await eventually(placed_on(env, "partial", 2), timeout=60) == cluster
            await asyncio.sleep(1)
        assert counts == {"ADDED": 1, "DELETED": 0}, f"the remote LWS was re-created: {counts}"


async def test_scaling_changes_the_remote_lws_in_place(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "8"}, frameworks=FRAMEWORKS) as env:
        (cluster,) = env.clusters
        await kube.create(api.LEADER_WORKER_SET, lws("scale"), namespace=namespace)
        await eventually(placed_on(env, "scale", 2), timeout=60)
        remote = await eventually(lambda: env.remote(cluster, api.LEADER_WORKER_SET, "scale"))
        uid = remote["metadata"]["uid"]

        await kube.patch_merge(api.LEADER_WORKER_SET, "scale", {"spec": {"replicas": 3}}, namespace)
        assert await eventually(placed_on(env, "scale", 3), timeout=60) == cluster

        async def remote_replicas(count):
            current = await env.remote(cluster, api.LEADER_WORKER_SET, "scale")
            return current if current and current["spec"]["replicas"] == count else None

        assert (await eventually(lambda: remote_replicas(3), timeout=60))["metadata"]["uid"] == uid

        await kube.patch_merge(api.LEADER_WORKER_SET, "scale", {"spec": {"replicas": 1}}, namespace)
        assert (await eventually(lambda: remote_replicas(1), timeout=60))["metadata"]["uid"] == uid

        async def one_copy_left():
            copies = [
                wl
                for wl in await env.remote_workloads(cluster)
                if wl["metadata"]["name"].startswith("leaderworkerset-scale-")
            ]
            return len(copies) == 1 or None

        await eventually(one_copy_left, timeout=60)
        assert (await env.remote(cluster, api.LEADER_WORKER_SET, "scale"))["metadata"]["uid"] == uid

        # A template change reaches the worker's LWS as an update of its spec (its controller rolls
        # it out), not as a re-creation.
        patch = {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": {"labels": {"rev": "2"}}}}}}
        await kube.patch_merge(api.LEADER_WORKER_SET, "scale", patch, namespace)

        async def new_template():
            current = await env.remote(cluster, api.LEADER_WORKER_SET, "scale")
            template = current["spec"]["leaderWorkerTemplate"]["workerTemplate"]
            return (
                current if ((template.get("metadata") or {}).get("labels") or {}).get("rev") == "2" else None
            )

        assert (await eventually(new_template, timeout=60))["metadata"]["uid"] == uid


async def test_a_group_evicted_on_its_worker_is_replaced_whole(fleet, kube, namespace):
    preemption = {"withinClusterQueue": "LowerPriority"}
    async with multikueue(fleet, kube, namespace, worker_preemption=preemption, frameworks=FRAMEWORKS) as env:
        await kube.create(api.LEADER_WORKER_SET, lws("evict"), namespace=namespace)
        first = await eventually(placed_on(env, "evict", 2), timeout=60)
        # The worker's own users need most of the worker: a group is preempted there, and none fits.
        worker = env.worker_kubes[env.clusters[first]]
        await worker.create(
            api.WORKLOAD,
            workload(namespace, "urgent", "main", {"cpu": "3"}, priority=100),
            namespace=namespace,
        )

        async def elsewhere():
            where = await placed_on(env, "evict", 2)()
            return where if where and where != first else None

        second = await eventually(elsewhere, timeout=90)
        await eventually(lambda: env.remote(second, api.LEADER_WORKER_SET, "evict"), timeout=30)

        async def left_first():
            return not await env.remote(first, api.LEADER_WORKER_SET, "evict") or None

        await eventually(left_first, timeout=30)


async def test_gc_removes_remote_lws_whose_manager_lws_is_gone(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}, frameworks=FRAMEWORKS) as env:
        (cluster,) = env.clusters
        worker = env.worker_kubes["worker1"]
        orphan = lws("orphan")
        orphan["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] = env.origin
        orphan["metadata"]["annotations"] = {
            api.ANNOTATION_MULTIKUEUE_ORIGIN_UID: "00000000-0000-0000-0000-000000000000"
        }
        foreign = lws("foreign")
        foreign["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] = "another-manager"
        foreign["metadata"]["annotations"] = {
            api.ANNOTATION_MULTIKUEUE_ORIGIN_UID: "00000000-0000-0000-0000-000000000001"
        }
        await worker.create(api.LEADER_WORKER_SET, orphan, namespace=namespace)
        await worker.create(api.LEADER_WORKER_SET, foreign, namespace=namespace)

        async def orphan_gone():
            return not await env.remote(cluster, api.LEADER_WORKER_SET, "orphan") or None

        await eventually(orphan_gone, timeout=30)
        assert await env.remote(cluster, api.LEADER_WORKER_SET, "foreign")
