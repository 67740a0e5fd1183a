"""Cohorts on a real kube-apiserver: borrowing and its limits, lending limits, hierarchical Cohort
objects, borrowing-level ordering, reclaim preemption, and the `borrowed` column of ClusterQueue
status."""

from __future__ import annotations

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

from kube_runtime.client import NotFound
from kueue_domain import api

pytestmark = pytest.mark.realcluster


def cohort(name: str, parent: str | None = None, quotas: dict | None = None) -> Obj:
    """A Cohort object; `quotas` has the `cluster_queue` builder's shape ({flavor: {resource: quota}})."""
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    if quotas:
        spec["resourceGroups"] = cluster_queue("unused", quotas)["spec"]["resourceGroups"]
    return {"apiVersion": api.API_VERSION, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


async def add_queue(cluster, name: str, flavors: dict, **kwargs) -> str:
    """A ClusterQueue plus a LocalQueue of the same name in the test namespace."""
    await cluster.create(cluster_queue(name, flavors, **kwargs))
    await cluster.create(local_queue(cluster.namespace, name, name))
    return name


def exceeds_max_quota(flavor: str, request: str, maximum: str) -> tuple[str, str]:
    return (
        "ExceedsMaxQuota",
        f"couldn't assign flavors to pod set main: insufficient quota for cpu in flavor {flavor}, "
        f"previously considered podsets requests (0) + current podset request ({request}) > "
        f"maximum capacity ({maximum})",
    )


async def reservation(cluster, cq: str) -> list[Obj] | None:
    return ((await cluster.cq(cq)).get("status") or {}).get("flavorsReservation")


def cpu_reservation(flavor: str, total: str, borrowed: str) -> list[Obj]:
    return [{"name": flavor, "resources": [{"name": "cpu", "total": total, "borrowed": borrowed}]}]


async def expect_reservation(cluster, cq: str, expected: list[Obj]) -> None:
    async def matches():
        return await reservation(cluster, cq) == expected

    try:
        await eventually(matches, timeout=10)
    except AssertionError:
        assert await reservation(cluster, cq) == expected


async def not_reserved(cluster, name: str) -> bool:
    return not await cluster.reserved(name)


async def test_borrows_from_a_cluster_queue_joining_the_cohort(kube, cluster):
    """Ports "Should schedule workloads borrowing quota from ClusterQueues in the same Cohort"."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    a = await add_queue(cluster, unique("a"), {rf: {"cpu": ("5", "10", None)}}, cohort=co)
    b = await add_queue(cluster, unique("b"), {rf: {"cpu": ("5", "10", None)}}, cohort=co)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "wa", a, {"cpu": "11"}))
        await cluster.create(workload(ns, "wb", b, {"cpu": "11"}))
        # 5 own + 5 from the sibling: the potential is 10 (nominal + borrowingLimit would be 15).
        assert await eventually(lambda: cluster.pending_reason("wa")) == exceeds_max_quota(rf, "11", "10")
        assert await eventually(lambda: cluster.pending_reason("wb")) == exceeds_max_quota(rf, "11", "10")

        lender = await add_queue(cluster, unique("lender"), {rf: {"cpu": "15"}}, cohort=co)
        await eventually(lambda: cluster.admitted("wa"))
        await eventually(lambda: cluster.admitted("wb"))
        wa = await cluster.wl("wa")
        assert wa["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": rf}
        assert condition(wa, api.WORKLOAD_QUOTA_RESERVED)["message"] == f"Quota reserved in ClusterQueue {a}"
        await expect_reservation(cluster, a, cpu_reservation(rf, "11", "6"))
        await expect_reservation(cluster, b, cpu_reservation(rf, "11", "6"))
        await expect_reservation(cluster, lender, cpu_reservation(rf, "0", "0"))


async def test_borrowing_limit_caps_borrowing_and_zero_blocks_it(kube, cluster):
    """Ports "Should admit workloads using borrowed ClusterQueue": a borrowingLimit of 0 blocks it."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    await add_queue(cluster, unique("lender"), {rf: {"cpu": "10"}}, cohort=co)
    capped = await add_queue(cluster, unique("capped"), {rf: {"cpu": ("2", "3", None)}}, cohort=co)
    blocked = await add_queue(cluster, unique("blocked"), {rf: {"cpu": ("2", "0", None)}}, cohort=co)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "capped-6", capped, {"cpu": "6"}))
        await cluster.create(workload(ns, "capped-5", capped, {"cpu": "5"}))
        await cluster.create(workload(ns, "blocked-3", blocked, {"cpu": "3"}))
        await cluster.create(workload(ns, "blocked-2", blocked, {"cpu": "2"}))
        await eventually(lambda: cluster.admitted("capped-5"))
        await eventually(lambda: cluster.admitted("blocked-2"))
        assert await eventually(lambda: cluster.pending_reason("capped-6")) == exceeds_max_quota(rf, "6", "5")
        assert await eventually(lambda: cluster.pending_reason("blocked-3")) == exceeds_max_quota(
            rf, "3", "2"
        )
        await expect_reservation(cluster, capped, cpu_reservation(rf, "5", "3"))
        await expect_reservation(cluster, blocked, cpu_reservation(rf, "2", "0"))


async def test_workloads_under_nominal_quota_go_before_borrowing_ones(kube, cluster):
    """Ports "Should start workloads that are under min quota before borrowing": the borrowing level orders
    the entries of one cycle before priority does."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    prod = await add_queue(cluster, unique("prod"), {rf: {"cpu": "2"}}, cohort=co, strategy="StrictFIFO")
    dev = await add_queue(cluster, unique("dev"), {rf: {"cpu": "0"}}, cohort=co, strategy="StrictFIFO")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "p1", prod, {"cpu": "2"}))
        await eventually(lambda: cluster.admitted("p1"))
        # The borrowing workload is older and has the higher priority.
        await cluster.create(workload(ns, "d1", dev, {"cpu": "1"}, priority=100))
        await cluster.create(workload(ns, "p2", prod, {"cpu": "2"}))
        assert (await eventually(lambda: cluster.pending_reason("d1")))[0] == "WaitingForQuota"
        assert (await eventually(lambda: cluster.pending_reason("p2")))[0] == "WaitingForQuota"

        await cluster.finish("p1")
        await eventually(lambda: cluster.admitted("p2"))
        await consistently(lambda: not_reserved(cluster, "d1"), duration=1.5)
        assert (await cluster.pending_reason("d1"))[0] == "WaitingForQuota"


async def test_pending_message_follows_the_latest_cycle(kube, cluster):
    """After a cycle skips an entry ("no longer fits"), the next cycle's NoFit message replaces it
    (StrictFIFO re-evaluates the head every cycle)."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    prod = await add_queue(cluster, unique("prod"), {rf: {"cpu": "2"}}, cohort=co, strategy="StrictFIFO")
    dev = await add_queue(cluster, unique("dev"), {rf: {"cpu": "0"}}, cohort=co, strategy="StrictFIFO")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "p1", prod, {"cpu": "2"}))
        await eventually(lambda: cluster.admitted("p1"))
        await cluster.create(workload(ns, "d1", dev, {"cpu": "1"}, priority=100))
        await cluster.create(workload(ns, "p2", prod, {"cpu": "2"}))
        no_fit = (
            "WaitingForQuota",
            f"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor {rf}, "
            "1 more needed",
        )
        assert await eventually(lambda: cluster.pending_reason("d1")) == no_fit
        await consistently(lambda: not_reserved(cluster, "p2"), duration=0.5)  # let earlier writes land
        await cluster.finish("p1")
        await eventually(lambda: cluster.admitted("p2"))

        async def latest_message():
            return await cluster.pending_reason("d1") == no_fit

        await eventually(latest_message, timeout=5)


async def test_lending_limit_caps_borrowing_and_raising_it_admits_more(kube, cluster):
    """Ports "Using cohorts for sharing with LendingLimit"."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    lender = await add_queue(cluster, unique("lender"), {rf: {"cpu": ("10", None, "4")}}, cohort=co)
    borrower = await add_queue(cluster, unique("borrower"), {rf: {"cpu": "2"}}, cohort=co)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        # The borrower can reach its own 2 plus the 4 the lender lends.
        await cluster.create(workload(ns, "too-big", borrower, {"cpu": "7"}))
        assert await eventually(lambda: cluster.pending_reason("too-big")) == exceeds_max_quota(rf, "7", "6")
        await cluster.create(workload(ns, "b1", borrower, {"cpu": "5"}))
        await eventually(lambda: cluster.admitted("b1"))
        await cluster.create(workload(ns, "b2", borrower, {"cpu": "2"}))
        assert await eventually(lambda: cluster.pending_reason("b2")) == (
            "WaitingForQuota",
            f"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor {rf}, "
            "1 more needed",
        )
        # What the lender does not lend stays available to it.
        await cluster.create(workload(ns, "own", lender, {"cpu": "5"}))
        await eventually(lambda: cluster.admitted("own"))
        await consistently(lambda: not_reserved(cluster, "b2"), duration=1)

        await kube.patch_merge(
            api.CLUSTER_QUEUE,
            lender,
            {
                "spec": {
                    "resourceGroups": cluster_queue(lender, {rf: {"cpu": ("10", None, "5")}})["spec"][
                        "resourceGroups"
                    ]
                }
            },
        )
        await eventually(lambda: cluster.admitted("b2"))
        await expect_reservation(cluster, borrower, cpu_reservation(rf, "7", "5"))
        await expect_reservation(cluster, lender, cpu_reservation(rf, "5", "0"))
        assert (await cluster.pending_reason("too-big"))[0] in ("ExceedsMaxQuota", "WaitingForQuota")
        assert not await cluster.reserved("too-big")


async def test_cohort_provides_resources_directly(kube, cluster):
    """Ports "Cohort provides resources directly", including a zero request of an undeclared resource and
    a ClusterQueue that switches into a cohort with capacity."""
    ns, rf, pool = cluster.namespace, unique("rf"), unique("pool")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cohort(pool, quotas={rf: {"cpu": "10"}}))
    member = await add_queue(cluster, unique("member"), {rf: {"cpu": "0"}}, cohort=pool)
    mover = await add_queue(cluster, unique("mover"), {rf: {"cpu": "0"}}, cohort=unique("empty"))
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w1", member, {"cpu": "8", "example.com/gpu": "0"}))
        await eventually(lambda: cluster.admitted("w1"))
        w1 = await cluster.wl("w1")
        assert w1["status"]["admission"]["podSetAssignments"] == [
            {"name": "main", "flavors": {"cpu": rf}, "resourceUsage": {"cpu": "8"}, "count": 1}
        ]
        await expect_reservation(cluster, member, cpu_reservation(rf, "8", "8"))

        await cluster.create(workload(ns, "w2", member, {"cpu": "3"}))
        assert (await eventually(lambda: cluster.pending_reason("w2")))[0] == "WaitingForQuota"

        await cluster.create(workload(ns, "m1", mover, {"cpu": "2"}))
        assert await eventually(lambda: cluster.pending_reason("m1")) == exceeds_max_quota(rf, "2", "0")
        await kube.patch_merge(api.CLUSTER_QUEUE, mover, {"spec": {"cohort": pool}})
        await eventually(lambda: cluster.admitted("m1"))
        assert not await cluster.reserved("w2")


async def test_hierarchical_cohorts_long_distance_and_reparenting(kube, cluster):
    """Ports "Long distance resource allows workload to be scheduled" and reparenting a child cohort under
    a larger root admits the overflow."""
    ns, rf = cluster.namespace, unique("rf")
    small, big, mid, leaf = unique("small"), unique("big"), unique("mid"), unique("leaf")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cohort(small, quotas={rf: {"cpu": "2"}}))
    await cluster.create(cohort(big, quotas={rf: {"cpu": "10"}}))
    await cluster.create(cohort(mid, parent=small))
    await cluster.create(cohort(leaf, parent=mid))
    cq = await add_queue(cluster, unique("cq"), {rf: {"cpu": "0"}}, cohort=leaf)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "near", cq, {"cpu": "1"}))
        await eventually(lambda: cluster.admitted("near"))
        await cluster.create(workload(ns, "overflow", cq, {"cpu": "5"}))
        assert await eventually(lambda: cluster.pending_reason("overflow")) == exceeds_max_quota(rf, "5", "2")

        await kube.patch_merge(api.COHORT, mid, {"spec": {"parentName": big}})
        await eventually(lambda: cluster.admitted("overflow"))
        await expect_reservation(cluster, cq, cpu_reservation(rf, "6", "6"))


async def test_cohort_lending_and_borrowing_limits_in_a_hierarchy(kube, cluster):
    """Ports "Cohort lendingLimit caps sibling borrowing in hierarchy" and "Cohort borrowingLimit blocks
    sibling borrowing in hierarchy": cohort limits act between a subtree and its parent."""
    ns, rf = cluster.namespace, unique("rf")
    root, lender_org, borrower_org, research = (
        unique("root"),
        unique("lender"),
        unique("borrower"),
        unique("res"),
    )
    await cluster.create(resource_flavor(rf))
    await cluster.create(cohort(lender_org, parent=root, quotas={rf: {"cpu": ("10", None, "3")}}))
    await cluster.create(cohort(borrower_org, parent=root))
    await cluster.create(cohort(research, parent=root, quotas={rf: {"cpu": ("0", "0", None)}}))
    borrower = await add_queue(cluster, unique("b"), {rf: {"cpu": "0"}}, cohort=borrower_org)
    isolated = await add_queue(cluster, unique("r"), {rf: {"cpu": "0"}}, cohort=research)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "b4", borrower, {"cpu": "4"}))
        await cluster.create(workload(ns, "b3", borrower, {"cpu": "3"}))
        await cluster.create(workload(ns, "r1", isolated, {"cpu": "1"}))
        await eventually(lambda: cluster.admitted("b3"))
        assert await eventually(lambda: cluster.pending_reason("b4")) == exceeds_max_quota(rf, "4", "3")
        assert await eventually(lambda: cluster.pending_reason("r1")) == exceeds_max_quota(rf, "1", "0")
        await expect_reservation(cluster, borrower, cpu_reservation(rf, "3", "3"))


async def test_deleting_a_cluster_queue_updates_borrowable_resources(kube, cluster):
    """Ports "Should prevent incorrect admission through borrowing after ClusterQueue deletion"."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    cq = await add_queue(cluster, unique("cq"), {rf: {"cpu": "2"}}, cohort=co)
    lender = await add_queue(cluster, unique("lender"), {rf: {"cpu": "5"}}, cohort=co)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "before", cq, {"cpu": "4"}))
        await eventually(lambda: cluster.admitted("before"))
        await cluster.finish("before")
        await expect_reservation(cluster, cq, cpu_reservation(rf, "0", "0"))

        await kube.delete(api.CLUSTER_QUEUE, lender)

        async def gone():
            try:
                await kube.get(api.CLUSTER_QUEUE, lender)
            except NotFound:
                return True
            return False

        await eventually(gone)
        await cluster.create(workload(ns, "after", cq, {"cpu": "4"}))
        assert await eventually(lambda: cluster.pending_reason("after")) == exceeds_max_quota(rf, "4", "2")
        await consistently(lambda: not_reserved(cluster, "after"), duration=1.5)


async def test_reclaim_within_cohort_preempts_a_borrower(kube, cluster):
    """Ports "foundation-queue allows best-effort queue to use capacity until it is ready to admit next
    workload" (`reclaimWithinCohort: Any`)."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    owner = await add_queue(
        cluster, unique("owner"), {rf: {"cpu": "4"}}, cohort=co, preemption={"reclaimWithinCohort": "Any"}
    )
    borrower = await add_queue(cluster, unique("borrower"), {rf: {"cpu": "0"}}, cohort=co)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "best-effort", borrower, {"cpu": "4"}))
        await eventually(lambda: cluster.admitted("best-effort"))
        await expect_reservation(cluster, borrower, cpu_reservation(rf, "4", "4"))

        preemptor = await cluster.create(workload(ns, "foundation", owner, {"cpu": "3"}))

        async def victim_evicted():
            wl = await cluster.wl("best-effort")
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "Preempted") else None

        victim = await eventually(victim_evicted)
        preempted = condition(victim, api.WORKLOAD_PREEMPTED)
        assert (preempted["status"], preempted["reason"]) == ("True", "InCohortReclamation")
        assert preempted["message"] == (
            f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, JobUID: UNKNOWN) "
            f"due to reclamation within the cohort; preemptor path: /{co}/{owner}; "
            f"preemptee path: /{co}/{borrower}"
        )
        assert condition(victim, api.WORKLOAD_EVICTED)["message"] == preempted["message"]
        assert await eventually(lambda: cluster.pending_reason("foundation")) == (
            "WaitingForPreemptedWorkloads",
            f"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor {rf}, "
            "3 more needed. Pending the preemption of 1 workload(s)",
        )
        # Evicted alone does not release quota: the job integration has to stop the victim first.
        await consistently(lambda: not_reserved(cluster, "foundation"), duration=1)

        await cluster.release_evicted("best-effort")
        await eventually(lambda: cluster.admitted("foundation"))
        victim = await cluster.wl("best-effort")
        assert condition_is(victim, api.WORKLOAD_REQUEUED, "True", "Preempted")
        assert condition_is(victim, api.WORKLOAD_QUOTA_RESERVED, "False")
        await expect_reservation(cluster, owner, cpu_reservation(rf, "3", "0"))
        await expect_reservation(cluster, borrower, cpu_reservation(rf, "0", "0"))
        await consistently(lambda: not_reserved(cluster, "best-effort"), duration=1)


async def test_lower_priority_reclaim_without_candidates_holds_capacity(kube, cluster):
    """Ports "foundation-queue blocks capacity when it is not sure that it can reclaim": a Preempt entry
    without candidates reserves capacity in its cycle (reclaimWithinCohort is not Any)."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    foundation = await add_queue(
        cluster,
        unique("foundation"),
        {rf: {"cpu": "4"}},
        cohort=co,
        strategy="StrictFIFO",
        preemption={"reclaimWithinCohort": "LowerPriority"},
    )
    best_effort = await add_queue(cluster, unique("best-effort"), {rf: {"cpu": "0"}}, cohort=co)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "be1", best_effort, {"cpu": "2"}, priority=100))
        await eventually(lambda: cluster.admitted("be1"))
        await cluster.create(workload(ns, "f1", foundation, {"cpu": "3"}))
        assert (await eventually(lambda: cluster.pending_reason("f1")))[0] == "WaitingForQuota"

        # Two cpus are free, but the foundation queue holds them for f1.
        await cluster.create(workload(ns, "be2", best_effort, {"cpu": "1"}, priority=100))
        assert await eventually(lambda: cluster.pending_reason("be2")) == (
            "WaitingForQuota",
            "Workload no longer fits after processing another workload",
        )
        await consistently(lambda: not_reserved(cluster, "be2"), duration=1.5)
        assert condition_is(await cluster.wl("be1"), api.WORKLOAD_EVICTED, "True") is False

        await cluster.finish("be1")
        await eventually(lambda: cluster.admitted("f1"))
        await eventually(lambda: cluster.admitted("be2"))
