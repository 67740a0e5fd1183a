"""Flavors, fungibility and queueing strategies on a real kube-apiserver: taints and tolerations,
nodeLabels against nodeSelector and node affinity, whenCanBorrow / whenCanPreempt, the
NoMatchingFlavor and ExceedsMaxQuota reasons, ResourceFlavor updates requeueing parked workloads,
StrictFIFO against BestEffortFIFO, and namespaceSelector."""

from __future__ import annotations

import contextlib

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

ZONE = "example.com/zone"
SPOT_TAINT = {"key": "example.com/spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "example.com/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
SPOT_TAINT_TEXT = "{example.com/spot true NoSchedule <nil>}"


async def add_queue(cluster, name: str, flavors: dict, **kwargs) -> str:
    """A ClusterQueue plus a LocalQueue of the same name in the test namespace."""
    await cluster.create(cluster_queue(name, flavors, **kwargs))
    await cluster.create(local_queue(cluster.namespace, name, name))
    return name


async def flavor_of(cluster, name: str) -> str | None:
    wl = await cluster.wl(name)
    if not condition_is(wl, api.WORKLOAD_QUOTA_RESERVED):
        return None
    return wl["status"]["admission"]["podSetAssignments"][0]["flavors"]["cpu"]


async def admitted_to(cluster, name: str) -> str:
    """Wait for the workload to be admitted and return its cpu flavor."""
    await eventually(lambda: cluster.admitted(name))
    flavor = await flavor_of(cluster, name)
    assert flavor is not None
    return flavor


async def not_reserved(cluster, name: str) -> bool:
    return not await cluster.reserved(name)


def pending_message(*reasons: str) -> str:
    return "couldn't assign flavors to pod set main: " + ", ".join(reasons)


async def test_taints_and_tolerations(kube, cluster):
    """Ports "Using taints in resourceFlavors → Should schedule workloads on tolerated flavors", and the
    O-file reasons: WaitingForQuota when one flavor lacks quota and the other has an untolerated
    taint; ExceedsMaxQuota when the other exceeds its capacity."""
    ns = cluster.namespace
    spot, plain = unique("spot"), unique("plain")
    await cluster.create(resource_flavor(spot, taints=[SPOT_TAINT]))
    await cluster.create(resource_flavor(plain))
    cq = await add_queue(cluster, unique("cq"), {spot: {"cpu": "5"}, plain: {"cpu": "5"}})
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "tolerating", cq, {"cpu": "2"}, tolerations=[SPOT_TOLERATION]))
        assert await admitted_to(cluster, "tolerating") == spot
        await cluster.create(workload(ns, "intolerant", cq, {"cpu": "2"}))
        assert await admitted_to(cluster, "intolerant") == plain

        await cluster.create(workload(ns, "waiting", cq, {"cpu": "4"}))
        assert await eventually(lambda: cluster.pending_reason("waiting")) == (
            "WaitingForQuota",
            pending_message(
                f"insufficient unused quota for cpu in flavor {plain}, 1 more needed",
                f"untolerated taint {SPOT_TAINT_TEXT} in flavor {spot}",
            ),
        )
        await cluster.create(workload(ns, "too-big", cq, {"cpu": "6"}))
        assert await eventually(lambda: cluster.pending_reason("too-big")) == (
            "ExceedsMaxQuota",
            pending_message(
                f"insufficient quota for cpu in flavor {plain}, previously considered podsets requests (0) "
                "+ current podset request (6) > maximum capacity (5)",
                f"untolerated taint {SPOT_TAINT_TEXT} in flavor {spot}",
            ),
        )


async def test_node_labels_against_node_selector_and_affinity(kube, cluster):
    """Ports "Using affinity in resourceFlavors → Should admit workloads with affinity to specific flavor";
    selector keys a flavor does not label are ignored; no match is NoMatchingFlavor, and so is a
    resource the ClusterQueue does not cover."""
    ns = cluster.namespace
    fa, fb = unique("fa"), unique("fb")
    await cluster.create(resource_flavor(fa, node_labels={ZONE: "a"}))
    await cluster.create(resource_flavor(fb, node_labels={ZONE: "b"}))
    cq = await add_queue(cluster, unique("cq"), {fa: {"cpu": "5"}, fb: {"cpu": "5"}})
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "selects-b", cq, node_selector={ZONE: "b"}))
        assert await admitted_to(cluster, "selects-b") == fb
        await cluster.create(workload(ns, "other-key", cq, node_selector={"example.com/gpu": "x"}))
        assert await admitted_to(cluster, "other-key") == fa

        affinity = workload(ns, "affinity-b", cq)
        affinity["spec"]["podSets"][0]["template"]["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b", "c"]}]}
                    ]
                }
            }
        }
        await cluster.create(affinity)
        assert await admitted_to(cluster, "affinity-b") == fb

        await cluster.create(workload(ns, "selects-c", cq, node_selector={ZONE: "c"}))
        assert await eventually(lambda: cluster.pending_reason("selects-c")) == (
            "NoMatchingFlavor",
            pending_message(
                f"flavor {fa} doesn't match node affinity", f"flavor {fb} doesn't match node affinity"
            ),
        )
        await cluster.create(workload(ns, "memory", cq, {"cpu": "1", "memory": "1Gi"}))
        assert await eventually(lambda: cluster.pending_reason("memory")) == (
            "NoMatchingFlavor",
            pending_message("resource memory unavailable in ClusterQueue"),
        )


async def test_second_flavor_when_the_first_is_full(kube, cluster):
    ns = cluster.namespace
    first, second = unique("first"), unique("second")
    await cluster.create(resource_flavor(first))
    await cluster.create(resource_flavor(second))
    cq = await add_queue(cluster, unique("cq"), {first: {"cpu": "2"}, second: {"cpu": "4"}})
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w1", cq, {"cpu": "2"}))
        assert await admitted_to(cluster, "w1") == first
        await cluster.create(workload(ns, "w2", cq, {"cpu": "3"}))
        assert await admitted_to(cluster, "w2") == second

        async def reservation():
            status = (await cluster.cq(cq)).get("status") or {}
            return status.get("flavorsReservation") if status.get("reservingWorkloads") == 2 else None

        assert await eventually(reservation) == [
            {"name": first, "resources": [{"name": "cpu", "total": "2", "borrowed": "0"}]},
            {"name": second, "resources": [{"name": "cpu", "total": "3", "borrowed": "0"}]},
        ]


async def test_when_can_borrow_try_next_flavor(kube, cluster):
    """Ports "Should try next flavor instead of borrowing"; with the default (MayStopSearch) the first
    flavor is taken even though it borrows."""
    ns, co = cluster.namespace, unique("co")
    f1, f2 = unique("f1"), unique("f2")
    await cluster.create(resource_flavor(f1))
    await cluster.create(resource_flavor(f2))
    await add_queue(cluster, unique("lender"), {f1: {"cpu": "10"}}, cohort=co)
    stop = await add_queue(cluster, unique("stop"), {f1: {"cpu": "2"}, f2: {"cpu": "5"}}, cohort=co)
    try_next = await add_queue(
        cluster,
        unique("try"),
        {f1: {"cpu": "2"}, f2: {"cpu": "5"}},
        cohort=co,
        flavor_fungibility={"whenCanBorrow": "TryNextFlavor"},
    )
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "stops", stop, {"cpu": "4"}))
        assert await admitted_to(cluster, "stops") == f1
        await cluster.create(workload(ns, "tries", try_next, {"cpu": "4"}))
        assert await admitted_to(cluster, "tries") == f2

        async def stop_reservation():
            return ((await cluster.cq(stop)).get("status") or {}).get("flavorsReservation")

        async def borrowing():
            return await stop_reservation() == [
                {"name": f1, "resources": [{"name": "cpu", "total": "4", "borrowed": "2"}]},
                {"name": f2, "resources": [{"name": "cpu", "total": "0", "borrowed": "0"}]},
            ]

        await eventually(borrowing)


async def _reclaim_setup(cluster, fungibility: Obj | None) -> tuple[str, str, str, str, str]:
    co = unique("co")
    f1, f2 = unique("f1"), unique("f2")
    await cluster.create(resource_flavor(f1))
    await cluster.create(resource_flavor(f2))
    main = await add_queue(
        cluster,
        unique("main"),
        {f1: {"cpu": "4"}, f2: {"cpu": "4"}},
        cohort=co,
        preemption={"reclaimWithinCohort": "Any"},
        flavor_fungibility=fungibility,
    )
    other = await add_queue(cluster, unique("other"), {f1: {"cpu": "0"}}, cohort=co)
    return co, f1, f2, main, other


async def test_when_can_preempt_may_stop_search_reclaims_in_the_first_flavor(kube, cluster):
    """Ports "Should preempt before try next flavor"."""
    ns = cluster.namespace
    co, f1, _f2, main, other = await _reclaim_setup(cluster, {"whenCanPreempt": "MayStopSearch"})
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "borrower", other, {"cpu": "4"}))
        assert await admitted_to(cluster, "borrower") == f1
        await cluster.create(workload(ns, "owner", main, {"cpu": "4"}))

        async def evicted():
            wl = await cluster.wl("borrower")
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "Preempted") else None

        victim = await eventually(evicted)
        preempted = condition(victim, api.WORKLOAD_PREEMPTED)
        assert preempted["reason"] == "InCohortReclamation"
        assert preempted["message"].endswith(f"preemptor path: /{co}/{main}; preemptee path: /{co}/{other}")
        reason, message = await eventually(lambda: cluster.pending_reason("owner"))
        assert reason == "WaitingForPreemptedWorkloads"
        assert message.endswith(". Pending the preemption of 1 workload(s)")
        await cluster.release_evicted("borrower")
        assert await admitted_to(cluster, "owner") == f1


async def test_when_can_preempt_try_next_flavor_avoids_preemption(kube, cluster):
    """With the default `whenCanPreempt: TryNextFlavor` a later flavor that fits wins over reclaiming."""
    ns = cluster.namespace
    _co, f1, f2, main, other = await _reclaim_setup(cluster, None)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "borrower", other, {"cpu": "4"}))
        assert await admitted_to(cluster, "borrower") == f1
        await cluster.create(workload(ns, "owner", main, {"cpu": "4"}))
        assert await admitted_to(cluster, "owner") == f2
        assert condition(await cluster.wl("borrower"), api.WORKLOAD_EVICTED) is None


async def test_try_next_flavor_when_first_has_no_preemption_candidates(kube, cluster):
    """Ports "Should try next flavor if can't preempt on first": MayStopSearch, but the only candidate
    has a higher priority."""
    ns = cluster.namespace
    f1, f2 = unique("f1"), unique("f2")
    await cluster.create(resource_flavor(f1))
    await cluster.create(resource_flavor(f2))
    cq = await add_queue(
        cluster,
        unique("cq"),
        {f1: {"cpu": "2"}, f2: {"cpu": "2"}},
        preemption={"withinClusterQueue": "LowerPriority"},
        flavor_fungibility={"whenCanPreempt": "MayStopSearch"},
    )
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "high", cq, {"cpu": "2"}, priority=100))
        assert await admitted_to(cluster, "high") == f1
        await cluster.create(workload(ns, "low", cq, {"cpu": "2"}, priority=1))
        assert await admitted_to(cluster, "low") == f2
        assert condition(await cluster.wl("high"), api.WORKLOAD_EVICTED) is None


async def _parked_behind_flavor(cluster, flavor: Obj, expected_reason: str, **workload_kwargs) -> str:
    """A ClusterQueue on `flavor` with two identical workloads it cannot admit (the second one is
    parked as equivalent to the first)."""
    name = flavor["metadata"]["name"]
    await cluster.create(flavor)
    cq = await add_queue(cluster, unique("cq"), {name: {"cpu": "5"}})
    for w in ("w1", "w2"):
        await cluster.create(workload(cluster.namespace, w, cq, **workload_kwargs))
    assert await eventually(lambda: cluster.pending_reason("w1")) == (
        "NoMatchingFlavor",
        pending_message(expected_reason),
    )
    await consistently(lambda: not_reserved(cluster, "w2"), duration=0.5)
    return name


async def test_removing_a_flavor_taint_admits_parked_workloads(kube, cluster):
    """Ports "should retry pending workloads after nodeTaints are removed"."""
    rf = unique("tainted")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await _parked_behind_flavor(
            cluster,
            resource_flavor(rf, taints=[SPOT_TAINT]),
            f"untolerated taint {SPOT_TAINT_TEXT} in flavor {rf}",
        )
        await kube.patch_merge(api.RESOURCE_FLAVOR, rf, {"spec": {"nodeTaints": None}})
        assert await admitted_to(cluster, "w1") == rf
        assert await admitted_to(cluster, "w2") == rf


async def test_flavor_tolerating_its_own_taint_admits_parked_workloads(kube, cluster):
    """Ports "should retry pending workloads after the flavor tolerates its own taint"."""
    rf = unique("tainted")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await _parked_behind_flavor(
            cluster,
            resource_flavor(rf, taints=[SPOT_TAINT]),
            f"untolerated taint {SPOT_TAINT_TEXT} in flavor {rf}",
        )
        await kube.patch_merge(api.RESOURCE_FLAVOR, rf, {"spec": {"tolerations": [SPOT_TOLERATION]}})
        assert await admitted_to(cluster, "w1") == rf
        assert await admitted_to(cluster, "w2") == rf


async def test_node_labels_matching_the_selector_admit_parked_workloads(kube, cluster):
    """Ports "should retry pending workloads after nodeLabels match their nodeSelector"."""
    rf = unique("zoned")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await _parked_behind_flavor(
            cluster,
            resource_flavor(rf, node_labels={ZONE: "a"}),
            f"flavor {rf} doesn't match node affinity",
            node_selector={ZONE: "b"},
        )
        await kube.patch_merge(api.RESOURCE_FLAVOR, rf, {"spec": {"nodeLabels": {ZONE: "b"}}})
        assert await admitted_to(cluster, "w1") == rf
        assert await admitted_to(cluster, "w2") == rf


# ---------------------------------------------------------------------------------------------------
# Queueing strategies


async def test_strict_fifo_admits_by_priority_and_blocks_behind_its_head(kube, cluster):
    """Ports "Queueing with StrictFIFO → Should schedule workloads by their priority strictly": a smaller,
    lower-priority workload that would fit waits behind the head."""
    ns, rf = cluster.namespace, unique("rf")
    await cluster.create(resource_flavor(rf))
    cq = await add_queue(cluster, unique("strict"), {rf: {"cpu": "2"}}, strategy="StrictFIFO")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        for blocker in ("blocker-1", "blocker-2"):
            await cluster.create(workload(ns, blocker, cq, {"cpu": "1"}))
            await eventually(lambda b=blocker: cluster.admitted(b))
        # The older, lower-priority workload would fit first; the newer high-priority one is the head.
        await cluster.create(workload(ns, "low", cq, {"cpu": "1"}, priority=1))
        await cluster.create(workload(ns, "high", cq, {"cpu": "2"}, priority=100))
        assert (await eventually(lambda: cluster.pending_reason("high")))[0] == "WaitingForQuota"

        await cluster.finish("blocker-1")
        await consistently(lambda: not_reserved(cluster, "low"), duration=1.5)
        assert not await cluster.reserved("high")
        await cluster.finish("blocker-2")
        await eventually(lambda: cluster.admitted("high"))
        await consistently(lambda: not_reserved(cluster, "low"), duration=1)
        await cluster.finish("high")
        await eventually(lambda: cluster.admitted("low"))


async def test_strict_fifo_head_does_not_block_other_queues_from_borrowing(kube, cluster):
    """Ports "Pending workload with StrictFIFO doesn't block other CQ from borrowing from a third CQ"."""
    ns, rf, co = cluster.namespace, unique("rf"), unique("co")
    await cluster.create(resource_flavor(rf))
    lender = await add_queue(cluster, unique("lender"), {rf: {"cpu": "4"}}, cohort=co)
    strict = await add_queue(cluster, unique("strict"), {rf: {"cpu": "0"}}, cohort=co, strategy="StrictFIFO")
    other = await add_queue(cluster, unique("other"), {rf: {"cpu": "0"}}, cohort=co)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "lender-own", lender, {"cpu": "2"}))
        await eventually(lambda: cluster.admitted("lender-own"))
        await cluster.create(workload(ns, "strict-head", strict, {"cpu": "3"}, priority=100))
        await cluster.create(workload(ns, "strict-small", strict, {"cpu": "1"}))
        assert await eventually(lambda: cluster.pending_reason("strict-head")) == (
            "WaitingForQuota",
            pending_message(f"insufficient unused quota for cpu in flavor {rf}, 1 more needed"),
        )
        await cluster.create(workload(ns, "other-borrower", other, {"cpu": "2"}))
        await eventually(lambda: cluster.admitted("other-borrower"))
        assert not await cluster.reserved("strict-small")


async def test_best_effort_fifo_lets_a_smaller_workload_pass(kube, cluster):
    ns, rf = cluster.namespace, unique("rf")
    await cluster.create(resource_flavor(rf))
    cq = await add_queue(cluster, unique("best-effort"), {rf: {"cpu": "3"}})
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "running", cq, {"cpu": "1"}))
        await eventually(lambda: cluster.admitted("running"))
        await cluster.create(workload(ns, "big", cq, {"cpu": "3"}, priority=100))
        assert await eventually(lambda: cluster.pending_reason("big")) == (
            "WaitingForQuota",
            pending_message(f"insufficient unused quota for cpu in flavor {rf}, 1 more needed"),
        )
        await cluster.create(workload(ns, "small", cq, {"cpu": "2"}))
        await eventually(lambda: cluster.admitted("small"))
        assert not await cluster.reserved("big")


async def test_namespace_selector_mismatch_is_misconfigured_and_does_not_block(kube, cluster):
    """Ports "Workloads not matching namespaceSelector should not block others" (StrictFIFO), and the
    mismatched workload is admitted once its namespace gets the label."""
    ns, rf, team = cluster.namespace, unique("rf"), unique("team")
    other_ns = unique("flavors-matching")
    await cluster.create(resource_flavor(rf))
    cq = unique("cq")
    await cluster.create(
        cluster_queue(
            cq,
            {rf: {"cpu": "4"}},
            strategy="StrictFIFO",
            namespace_selector={"matchLabels": {"example.com/team": team}},
        )
    )
    await kube.create(
        api.NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": other_ns, "labels": {"example.com/team": team}},
        },
    )
    try:
        await cluster.create(local_queue(ns, "main", cq))
        await cluster.create(local_queue(other_ns, "main", cq))
        # Both exist before the agent starts, so the mismatched, higher-priority one is the first head.
        await cluster.create(workload(ns, "mismatch", "main", priority=100))
        await kube.create(api.WORKLOAD, workload(other_ns, "match", "main"), namespace=other_ns)
        async with running_agent(kube, gates=GRANULAR_REASONS):

            async def match_admitted():
                wl = await kube.get(api.WORKLOAD, "match", namespace=other_ns)
                return condition_is(wl, api.WORKLOAD_ADMITTED)

            await eventually(match_admitted)
            assert await eventually(lambda: cluster.pending_reason("mismatch")) == (
                "Misconfigured",
                "workload namespace doesn't match ClusterQueue selector",
            )
            await consistently(lambda: not_reserved(cluster, "mismatch"), duration=1)

            await kube.patch_merge(api.NAMESPACE, ns, {"metadata": {"labels": {"example.com/team": team}}})
            await eventually(lambda: cluster.admitted("mismatch"))
    finally:
        with contextlib.suppress(NotFound):
            await kube.delete(api.NAMESPACE, other_ns)
