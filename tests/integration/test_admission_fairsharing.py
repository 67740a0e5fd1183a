"""Fair sharing on a real kube-apiserver: admission follows the Dominant Resource Share, preemption
reclaims towards a fair share, and ClusterQueues report `status.fairSharing.weightedShare`."""

from __future__ import annotations

import asyncio

import pytest
from admission_kit import (
    GRANULAR_REASONS,
    Obj,
    cluster_queue,
    condition,
    condition_is,
    consistently,
    eventually,
    local_queue,
    resource_flavor,
    running_agent,
    unique,
    workload,
)

from kueue_domain import api

pytestmark = pytest.mark.realcluster

FAIR_SHARING = {"fairSharing": {"enable": True}}


async def add_queue(cluster, name: str, flavors: dict, **kwargs) -> str:
    """A ClusterQueue plus a LocalQueue of the same name in the test namespace."""
    await cluster.create(cluster_queue(name, flavors, **kwargs))
    await cluster.create(local_queue(cluster.namespace, name, name))
    return name


def cohort(name: str, parent: str | None = None, quotas: dict | None = None) -> Obj:
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    if quotas:
        spec["resourceGroups"] = cluster_queue("unused", quotas)["spec"]["resourceGroups"]
    return {"apiVersion": api.API_VERSION, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


async def workloads(cluster) -> list[Obj]:
    items, _ = await cluster.kube.list(api.WORKLOAD, namespace=cluster.namespace)
    return items


def reserving_in(items: list[Obj], cq: str) -> list[Obj]:
    """Workloads holding quota in `cq` (finished ones keep their admission but release it)."""
    return [
        wl
        for wl in items
        if condition_is(wl, api.WORKLOAD_QUOTA_RESERVED)
        and not condition_is(wl, api.WORKLOAD_FINISHED)
        and ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") == cq
    ]


async def expect_reserving(cluster, counts: dict[str, int]) -> None:
    async def check():
        items = await workloads(cluster)
        actual = {cq: len(reserving_in(items, cq)) for cq in counts}
        return actual if actual == counts else None

    try:
        await eventually(check, timeout=10)
    except AssertionError:
        items = await workloads(cluster)
        assert {cq: len(reserving_in(items, cq)) for cq in counts} == counts


async def expect_weighted_shares(cluster, shares: dict[str, int]) -> None:
    async def actual():
        return {
            cq: ((await cluster.cq(cq)).get("status") or {}).get("fairSharing", {}).get("weightedShare")
            for cq in shares
        }

    async def matches():
        return await actual() == shares

    try:
        await eventually(matches, timeout=10)
    except AssertionError:
        assert await actual() == shares


async def create_many(cluster, queue: str, count: int, prefix: str, cpu: str = "1") -> None:
    for i in range(count):
        await cluster.create(workload(cluster.namespace, f"{prefix}-{i}", queue, {"cpu": cpu}))


async def finish_one_reserving(cluster, cq: str) -> str:
    wl = reserving_in(await workloads(cluster), cq)[0]
    await cluster.finish(wl["metadata"]["name"])
    return wl["metadata"]["name"]


async def test_admissions_respect_fair_share_without_preemption(kube, cluster):
    """Ports "Preemption is disabled → Admits workloads respecting fair share" and "Shouldn't reserve quota
    because not enough resources". Capacity comes back one unit at a time; each unit goes to the
    ClusterQueue whose share stays lowest, not to the oldest workload (which classic ordering picks)."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    a = await add_queue(cluster, unique("a"), {rf: {"cpu": "3"}}, cohort=co)
    b = await add_queue(cluster, unique("b"), {rf: {"cpu": "1"}}, cohort=co)
    shared = await add_queue(cluster, unique("shared"), {rf: {"cpu": "4"}}, cohort=co)
    async with running_agent(kube, FAIR_SHARING, gates=GRANULAR_REASONS):
        await create_many(cluster, a, 10, "a")
        await expect_reserving(cluster, {a: 8, b: 0, shared: 0})
        # a borrows 5 of the 8 cpus its cohort can lend: 5 * 1000 / 8.
        await expect_weighted_shares(cluster, {a: 625, b: 0, shared: 0})

        await asyncio.sleep(1.1)  # b's workloads are strictly newer than a's pending ones
        await create_many(cluster, b, 5, "b")
        assert (await eventually(lambda: cluster.pending_reason("b-0")))[0] == "WaitingForQuota"

        await finish_one_reserving(cluster, a)
        await expect_reserving(cluster, {a: 7, b: 1})
        # b now borrows (2 > 1) with share 125, a would reach 500: b still wins.
        await finish_one_reserving(cluster, a)
        await expect_reserving(cluster, {a: 6, b: 2})

        async def a_stays_at_six():
            return len(reserving_in(await workloads(cluster), a)) == 6

        await consistently(a_stays_at_six, duration=1.5)
        await expect_weighted_shares(cluster, {a: 375, b: 125, shared: 0})

        await cluster.create(workload(ns, "too-big", shared, {"cpu": "10"}))
        assert await eventually(lambda: cluster.pending_reason("too-big")) == (
            "ExceedsMaxQuota",
            f"couldn't assign flavors to pod set main: insufficient quota for cpu in flavor {rf}, "
            "previously considered podsets requests (0) + current podset request (10) > maximum capacity (8)",
        )


async def test_preemption_reclaims_towards_fair_share(kube, cluster):
    """Ports "Preemption is enabled → Admits workloads respecting fair share": the job integration is
    emulated by releasing each evicted workload."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    preemption = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    a = await add_queue(cluster, unique("a"), {rf: {"cpu": "3"}}, cohort=co, preemption=preemption)
    b = await add_queue(cluster, unique("b"), {rf: {"cpu": "3"}}, cohort=co, preemption=preemption)
    c = await add_queue(cluster, unique("c"), {rf: {"cpu": "3"}}, cohort=co, preemption=preemption)
    async with running_agent(kube, FAIR_SHARING, gates=GRANULAR_REASONS):
        await create_many(cluster, a, 10, "a")
        await expect_reserving(cluster, {a: 9})
        await expect_weighted_shares(cluster, {a: 667, b: 0, c: 0})

        await create_many(cluster, b, 5, "b")
        reasons = await release_evictions(cluster, a, 4)
        # Three to give b its nominal quota back, one more because b's share stays below a's.
        assert sorted(reasons) == ["InCohortFairSharing"] + ["InCohortReclamation"] * 3
        await expect_reserving(cluster, {a: 5, b: 4})
        await expect_weighted_shares(cluster, {a: 223, b: 112, c: 0})

        c0 = await cluster.create(workload(ns, "c0", c, {"cpu": "1"}))
        (victim,) = await release_evictions(cluster, a, 1, with_messages=True)
        reason, message = victim
        assert reason == "InCohortReclamation"
        assert message.startswith(f"Preempted to accommodate a workload (UID: {c0['metadata']['uid']}, ")
        assert message.endswith(f"preemptor path: /{co}/{c}; preemptee path: /{co}/{a}")
        await eventually(lambda: cluster.admitted("c0"))
        await expect_reserving(cluster, {a: 4, b: 4, c: 1})
        await expect_weighted_shares(cluster, {a: 112, b: 112, c: 0})
        await consistently(lambda: no_new_evictions(cluster), duration=1)


async def no_new_evictions(cluster) -> bool:
    return not [
        wl
        for wl in await workloads(cluster)
        if condition_is(wl, api.WORKLOAD_EVICTED) and condition_is(wl, api.WORKLOAD_QUOTA_RESERVED)
    ]


async def release_evictions(cluster, cq: str, count: int, with_messages: bool = False) -> list:
    """Release `count` preempted workloads of `cq` one by one, as their job integration would; returns
    their Preempted reasons (with messages if asked)."""
    released: list = []
    seen: set[str] = set()
    deadline = asyncio.get_running_loop().time() + 12
    while len(released) < count:
        assert asyncio.get_running_loop().time() < deadline, f"only {len(released)} evictions in {cq}"
        for wl in reserving_in(await workloads(cluster), cq):
            name = wl["metadata"]["name"]
            if name in seen or not condition_is(wl, api.WORKLOAD_EVICTED, "True", "Preempted"):
                continue
            seen.add(name)
            preempted = condition(wl, api.WORKLOAD_PREEMPTED) or {}
            await cluster.release_evicted(name)
            reason = preempted.get("reason", "")
            released.append((reason, preempted.get("message", "")) if with_messages else reason)
            break
        else:
            await asyncio.sleep(0.1)
    return released


async def test_hierarchical_cohorts_share_at_every_level(kube, cluster):
    """Ports "hierarchical cohorts → admits workloads respecting fair share": shares are computed against
    what the parent can lend (here the whole tree, 14 cpus)."""
    rf = unique("rf")
    root, first_left, first_right = unique("root"), unique("first-left"), unique("first-right")
    second_left, second_right, bank = unique("second-left"), unique("second-right"), unique("bank")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cohort(first_left, parent=root))
    await cluster.create(cohort(first_right, parent=root))
    await cluster.create(cohort(second_left, parent=first_left))
    await cluster.create(cohort(second_right, parent=first_left))
    await cluster.create(cohort(bank, parent=first_right, quotas={rf: {"cpu": "10"}}))
    left = await add_queue(cluster, unique("left"), {rf: {"cpu": "2"}}, cohort=second_left)
    right = await add_queue(cluster, unique("right"), {rf: {"cpu": "2"}}, cohort=second_right)
    async with running_agent(kube, FAIR_SHARING, gates=GRANULAR_REASONS):
        for i in range(5):
            await cluster.create(workload(cluster.namespace, f"left-{i}", left, {"cpu": "1"}))
            await cluster.create(workload(cluster.namespace, f"right-{i}", right, {"cpu": "1"}))
        await expect_reserving(cluster, {left: 5, right: 5})
        # Each borrows 3 of the 14 cpus its parent can reach: 3 * 1000 / 14 = 214.3, rounded up.
        await expect_weighted_shares(cluster, {left: 215, right: 215})


async def test_cohort_status_reports_weighted_share(kube, cluster):
    rf, root, child = unique("rf"), unique("root"), unique("child")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cohort(root, quotas={rf: {"cpu": "4"}}))
    await cluster.create(cohort(child, parent=root))
    cq = await add_queue(cluster, unique("cq"), {rf: {"cpu": "0"}}, cohort=child)
    async with running_agent(kube, FAIR_SHARING, gates=GRANULAR_REASONS):
        await create_many(cluster, cq, 2, "w")
        await expect_reserving(cluster, {cq: 2})

        async def child_share():
            status = (await kube.get(api.COHORT, child)).get("status") or {}
            return (status.get("fairSharing") or {}).get("weightedShare") == 500

        await eventually(child_share, timeout=5)
