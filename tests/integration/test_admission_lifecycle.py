"""Workload lifecycle on a real kube-apiserver: preemption, admission checks, stop policies,
deactivation, waitForPodsReady with requeue backoff, WorkloadPriorityClass."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from admission_kit import (
    GRANULAR_REASONS,
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

from kube_runtime.client import KubeClient
from kueue_domain import api
from worker_agent.admission import writes as admission
from worker_agent.controllers import workload as workload_controller

pytestmark = pytest.mark.realcluster


async def _queue(cluster, cpu: str = "4", **cq_kwargs) -> str:
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": cpu}}, **cq_kwargs))
    await cluster.create(local_queue(cluster.namespace, "main", cq))
    return cq


async def test_preemption_within_cluster_queue(kube, cluster):
    ns = cluster.namespace
    cq = await _queue(cluster, preemption={"withinClusterQueue": "LowerPriority"})
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "low", "main", {"cpu": "3"}, priority=10))
        await eventually(lambda: cluster.admitted("low"))
        high = await cluster.create(workload(ns, "high", "main", {"cpu": "3"}, priority=100))

        async def victim_evicted():
            wl = await cluster.wl("low")
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "Preempted") else None

        low = await eventually(victim_evicted)
        preempted = condition(low, api.WORKLOAD_PREEMPTED)
        assert (preempted["status"], preempted["reason"]) == ("True", "InClusterQueue")
        assert preempted["message"] == (
            f"Preempted to accommodate a workload (UID: {high['metadata']['uid']}, JobUID: UNKNOWN) due to "
            f"prioritization in the ClusterQueue; preemptor path: /{cq}; preemptee path: /{cq}"
        )
        reason, message = await eventually(lambda: cluster.pending_reason("high"))
        assert reason == "WaitingForPreemptedWorkloads"
        assert message.endswith("Pending the preemption of 1 workload(s)")
        # The preemption is issued once, and quota is held until the job integration stops the victim.
        await consistently(lambda: cluster.pending_reason("high"), duration=1.5)
        await cluster.release_evicted("low")
        await eventually(lambda: cluster.admitted("high"))
        low = await cluster.wl("low")
        assert condition_is(low, api.WORKLOAD_REQUEUED, "True", "Preempted")
        assert low["status"]["schedulingStats"]["evictions"] == [
            {"reason": "Preempted", "underlyingCause": "", "count": 1}
        ]


async def test_an_eviction_waits_behind_the_admissions_decided_before_it(kube, fleet, cluster, monkeypatch):
    """Admission and eviction writes reach the client limiter in decision order, as Kueue's do: a
    victim that finishes while its eviction waits behind earlier admissions is not evicted."""
    monkeypatch.setattr(admission, "DECISION_WRITE_SLOTS", 1)
    ns = cluster.namespace
    rf, small, busy = unique("rf"), unique("small"), unique("busy")
    await cluster.create(resource_flavor(rf))
    preemption = {"withinClusterQueue": "LowerPriority"}
    await cluster.create(cluster_queue(small, {rf: {"cpu": "1"}}, preemption=preemption))
    await cluster.create(cluster_queue(busy, {rf: {"cpu": "20"}}))
    await cluster.create(local_queue(ns, "small", small))
    await cluster.create(local_queue(ns, "busy", busy))
    # Two Workload writes per second: eight admissions queue for about four seconds.
    async with (
        await KubeClient.from_kubeconfig_file(fleet.kubeconfig("manager"), qps=2, burst=1) as slow,
        running_agent(slow, gates=GRANULAR_REASONS),
    ):
        await cluster.create(workload(ns, "victim", "small", {"cpu": "1"}, priority=10))
        await eventually(lambda: cluster.admitted("victim"))
        await asyncio.sleep(1.5)  # the budget refills
        for i in range(8):
            await cluster.create(workload(ns, f"busy-{i}", "busy", {"cpu": "1"}))
        await cluster.create(workload(ns, "high", "small", {"cpu": "1"}, priority=100))
        # The eviction is decided now, behind most of those admissions; the victim completes first.
        await asyncio.sleep(1.5)
        await cluster.finish("victim")
        await eventually(lambda: cluster.admitted("high"), timeout=30)
        for i in range(8):
            assert await cluster.admitted(f"busy-{i}")
        victim = await cluster.wl("victim")
        assert condition_is(victim, api.WORKLOAD_FINISHED)
        assert not condition_is(victim, api.WORKLOAD_EVICTED), condition(victim, api.WORKLOAD_EVICTED)


async def test_admission_checks_gate_admitted(kube, cluster):
    ns = cluster.namespace
    check = unique("check")
    await cluster.active_admission_check(check, "example.com/test")
    await _queue(cluster, admission_checks=[check])
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w", "main"))
        await eventually(lambda: cluster.reserved("w"))
        wl = await cluster.wl("w")
        assert wl["status"]["admissionChecks"][0]["name"] == check
        assert wl["status"]["admissionChecks"][0]["state"] == "Pending"
        assert condition(wl, api.WORKLOAD_ADMITTED) is None
        await cluster.set_check_state("w", check, "Ready", "all good")
        await eventually(lambda: cluster.admitted("w"))

        # Retry evicts; the check goes back to Pending with retryCount 1.
        await cluster.set_check_state("w", check, "Retry", "try later")

        async def evicted():
            wl = await cluster.wl("w")
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "AdmissionCheck") else None

        wl = await eventually(evicted)
        assert condition(wl, api.WORKLOAD_EVICTED)["message"] == (
            f'Evicted due to AdmissionCheck in Retry state: "{check}" (try later)'
        )
        state = wl["status"]["admissionChecks"][0]
        assert (state["state"], state["retryCount"]) == ("Pending", 1)

        # Rejected deactivates.
        await cluster.create(workload(ns, "r", "main", {"cpu": "1"}))
        await eventually(lambda: cluster.reserved("r"))
        await cluster.set_check_state("r", check, "Rejected", "no way")

        async def deactivated():
            wl = await cluster.wl("r")
            return (
                wl if (wl["spec"].get("active") is False and condition_is(wl, api.WORKLOAD_EVICTED)) else None
            )

        wl = await eventually(deactivated)
        evicted_cond = condition(wl, api.WORKLOAD_EVICTED)
        assert evicted_cond["reason"] == "DeactivatedDueToAdmissionCheck"
        assert evicted_cond["message"] == (
            f'The workload is deactivated due to AdmissionCheck in Rejected state: "{check}" (no way)'
        )
        assert condition(wl, api.WORKLOAD_DEACTIVATION_TARGET) is None


async def test_stop_policy_hold_and_drain(kube, cluster):
    ns = cluster.namespace
    cq = await _queue(cluster)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w", "main"))
        await eventually(lambda: cluster.admitted("w"))
        await kube.patch_merge(api.CLUSTER_QUEUE, cq, {"spec": {"stopPolicy": "HoldAndDrain"}})

        async def drained():
            wl = await cluster.wl("w")
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "ClusterQueueStopped") else None

        wl = await eventually(drained)
        assert condition(wl, api.WORKLOAD_EVICTED)["message"] == "The ClusterQueue is stopped"
        active = await eventually(
            lambda: _false_active(cluster, cq),
        )
        assert (active["reason"], active["message"]) == ("Stopped", "Can't admit new workloads: is stopped.")
        await cluster.release_evicted("w")
        await kube.patch_merge(api.CLUSTER_QUEUE, cq, {"spec": {"stopPolicy": "None"}})
        await eventually(lambda: cluster.admitted("w"))
        wl = await cluster.wl("w")
        assert condition(wl, api.WORKLOAD_REQUEUED)["reason"] in ("ClusterQueueRestarted", "QuotaReserved")


async def _false_active(cluster, cq):
    c = condition(await cluster.cq(cq), api.CONDITION_ACTIVE)
    return c if c and c["status"] == "False" else None


async def test_deactivation_and_reactivation(kube, cluster):
    ns = cluster.namespace
    await _queue(cluster)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w", "main"))
        await eventually(lambda: cluster.admitted("w"))
        await kube.patch_merge(api.WORKLOAD, "w", {"spec": {"active": False}}, namespace=ns)

        async def evicted():
            wl = await cluster.wl("w")
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "Deactivated") else None

        wl = await eventually(evicted)
        assert condition(wl, api.WORKLOAD_EVICTED)["message"] == "The workload is deactivated"
        await cluster.release_evicted("w")
        wl = await cluster.wl("w")
        assert condition_is(wl, api.WORKLOAD_REQUEUED, "False", "Deactivated")
        await consistently(lambda: _not_reserved(cluster, "w"), duration=1.5)
        await kube.patch_merge(api.WORKLOAD, "w", {"spec": {"active": True}}, namespace=ns)
        await eventually(lambda: cluster.admitted("w"))
        wl = await cluster.wl("w")
        assert condition(wl, api.WORKLOAD_REQUEUED)["reason"] == "Reactivated"


async def _not_reserved(cluster, name):
    return not await cluster.reserved(name)


async def test_pods_ready_timeout_requeues_with_backoff_then_deactivates(kube, cluster):
    ns = cluster.namespace
    await _queue(cluster)
    config = {
        "waitForPodsReady": {
            "enable": True,
            "timeout": "2s",
            "blockAdmission": False,
            "requeuingStrategy": {"backoffBaseSeconds": 1, "backoffMaxSeconds": 2, "backoffLimitCount": 1},
        }
    }
    async with running_agent(kube, config, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w", "main"))
        await eventually(lambda: cluster.admitted("w"))

        async def timed_out():
            wl = await cluster.wl("w")
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "PodsReadyTimeout") else None

        wl = await eventually(timed_out, timeout=15)
        assert condition(wl, api.WORKLOAD_EVICTED)["message"] == f"Exceeded the PodsReady timeout {ns}/w"
        assert wl["status"]["requeueState"]["count"] == 1
        await cluster.release_evicted("w")
        wl = await cluster.wl("w")
        assert condition_is(wl, api.WORKLOAD_REQUEUED, "False", "PodsReadyTimeout")
        # After the backoff: Requeued=True/BackoffFinished, and admitted again.
        await eventually(lambda: cluster.admitted("w"), timeout=15)
        wl = await cluster.wl("w")
        assert condition(wl, api.WORKLOAD_REQUEUED)["reason"] == "BackoffFinished"
        assert "requeueAt" not in wl["status"]["requeueState"]

        # The second timeout exceeds backoffLimitCount=1: deactivated.
        async def deactivated():
            wl = await cluster.wl("w")
            return (
                wl if wl["spec"].get("active") is False and condition_is(wl, api.WORKLOAD_EVICTED) else None
            )

        wl = await eventually(deactivated, timeout=15)
        assert condition(wl, api.WORKLOAD_EVICTED)["reason"] == "DeactivatedDueToRequeuingLimitExceeded"
        assert "requeueState" not in wl["status"]


async def test_priority_class_value_change_updates_workloads(kube, cluster):
    ns = cluster.namespace
    await _queue(cluster)
    wpc = unique("wpc")
    await cluster.create(
        {
            "apiVersion": api.API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": wpc},
            "value": 100,
        }
    )
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w", "main", priority=100, priority_class=wpc))
        await eventually(lambda: cluster.admitted("w"))
        await kube.patch_merge(api.WORKLOAD_PRIORITY_CLASS, wpc, {"value": 7})

        async def priority():
            return (await cluster.wl("w"))["spec"].get("priority") == 7

        await eventually(priority)


async def test_maximum_execution_time_deactivates(kube, cluster):
    ns = cluster.namespace
    await _queue(cluster)
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w", "main", max_exec_seconds=2))
        await eventually(lambda: cluster.admitted("w"))

        async def deactivated():
            wl = await cluster.wl("w")
            return (
                wl if wl["spec"].get("active") is False and condition_is(wl, api.WORKLOAD_EVICTED) else None
            )

        wl = await eventually(deactivated, timeout=15)
        evicted = condition(wl, api.WORKLOAD_EVICTED)
        assert evicted["reason"] == "DeactivatedDueToMaximumExecutionTimeExceeded"
        assert evicted["message"] == "The workload is deactivated due to exceeding the maximum execution time"


async def test_block_admission_waits_for_pods_ready(kube, cluster):
    ns = cluster.namespace
    await _queue(cluster)
    config = {"waitForPodsReady": {"enable": True, "timeout": "5m", "blockAdmission": True}}
    async with running_agent(kube, config, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "first", "main"))
        await eventually(lambda: cluster.admitted("first"))
        await cluster.create(workload(ns, "second", "main"))
        assert await eventually(lambda: cluster.pending_reason("second")) == (
            "WaitingForPodsReady",
            "waiting for all admitted workloads to be in PodsReady condition",
        )
        await consistently(lambda: _not_reserved(cluster, "second"), duration=1.5)
        # The job integration reports the first workload's pods ready: the second is admitted.
        await cluster.set_conditions(
            "first", {"type": "PodsReady", "status": "True", "reason": "Started", "message": "ready"}
        )
        await eventually(lambda: cluster.admitted("second"))


async def test_block_admission_admits_one_of_two_workloads_considered_in_the_same_cycle(kube, cluster):
    """Upstream "Should block admission of one new workload if two are considered in the same
    scheduling cycle": two ClusterQueues each have a fitting head when the agent starts."""
    ns = cluster.namespace
    rf, cq_a, cq_b = unique("rf"), unique("cq"), unique("cq")
    await cluster.create(resource_flavor(rf))
    for cq, lq in ((cq_a, "qa"), (cq_b, "qb")):
        await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}))
        await cluster.create(local_queue(ns, lq, cq))
    await cluster.create(workload(ns, "wa", "qa"))
    await cluster.create(workload(ns, "wb", "qb"))
    config = {"waitForPodsReady": {"enable": True, "timeout": "5m", "blockAdmission": True}}
    async with running_agent(kube, config, gates=GRANULAR_REASONS):

        async def one_admitted():
            admitted = [n for n in ("wa", "wb") if await cluster.admitted(n)]
            return admitted if admitted else None

        [first] = await eventually(one_admitted)
        second = "wb" if first == "wa" else "wa"
        assert await eventually(lambda: cluster.pending_reason(second)) == (
            "WaitingForPodsReady",
            "waiting for all admitted workloads to be in PodsReady condition",
        )
        await consistently(lambda: _not_reserved(cluster, second), duration=1.5)
        await cluster.set_conditions(
            first, {"type": "PodsReady", "status": "True", "reason": "Started", "message": "ready"}
        )
        await eventually(lambda: cluster.admitted(second))


async def test_pending_workloads_publish_resource_requests_until_admitted(kube, cluster):
    ns = cluster.namespace
    await _queue(cluster, cpu="2")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "big", "main", {"cpu": "1500m", "memory": "1Gi"}, count=2))

        async def published():
            wl = await cluster.wl("big")
            return (wl.get("status") or {}).get("resourceRequests") if wl else None

        # 2 pods x 1500m does not fit in 2 CPUs: the computed totals are published.
        assert await eventually(published) == [{"name": "main", "resources": {"cpu": "3", "memory": "2Gi"}}]
        await cluster.create(workload(ns, "small", "main", {"cpu": "500m"}))
        await eventually(lambda: cluster.admitted("small"))
        small = await cluster.wl("small")
        assert "resourceRequests" not in (small.get("status") or {}), "emptied (never set) when admitted"


async def test_equivalent_workload_parked_after_a_failure_says_it_was_bypassed(kube, cluster):
    """SchedulingEquivalenceHashing: a workload coming back to the queue (here: reactivated) while an
    equivalent one (here: itself) recently failed is parked without evaluation, and its QuotaReserved
    condition says so (reason: the failure's requeue reason)."""
    ns = cluster.namespace
    await _queue(cluster, cpu="1")
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "holder", "main", {"cpu": "1"}))
        await eventually(lambda: cluster.admitted("holder"))
        await cluster.create(workload(ns, "twin", "main", {"cpu": "1"}))
        assert (await eventually(lambda: cluster.pending_reason("twin")))[0] == "WaitingForQuota"
        # Its failure parked its scheduling hash. Deactivated, then reactivated, it comes back equal.
        await kube.patch_merge(api.WORKLOAD, "twin", {"spec": {"active": False}}, namespace=ns)

        async def deactivated():
            reason = await cluster.pending_reason("twin")
            return reason if reason and reason[0] == "Deactivated" else None

        await eventually(deactivated)
        await kube.patch_merge(api.WORKLOAD, "twin", {"spec": {"active": True}}, namespace=ns)

        async def bypassed():
            reason = await cluster.pending_reason("twin")
            return reason if reason and reason[0] != "Deactivated" else None

        # The quota would fit once the holder left, but nothing may be preempted: PreemptionNoCandidates.
        assert await eventually(bypassed) == (
            "PreemptionNoCandidates",
            "Bypassed scheduling evaluation because an equivalent workload recently failed",
        )


async def test_orphaned_job_workload_is_finished_and_released(kube, cluster):
    """A Workload made for a job (job-uid label) whose owner is gone: Finished/OwnerNotFound, no finalizer."""
    ns = cluster.namespace
    await _queue(cluster)
    orphan = workload(ns, "orphan", "main")
    orphan["metadata"]["labels"] = {api.LABEL_JOB_UID: "0f0f0f0f-aaaa-bbbb-cccc-000000000000"}
    orphan["metadata"]["finalizers"] = [api.FINALIZER_RESOURCE_IN_USE]
    await cluster.create(orphan)
    async with running_agent(kube, gates=GRANULAR_REASONS):

        async def released():
            wl = await cluster.wl("orphan")
            # Both writes seen (under load the watch may show the finalizer's removal first).
            done = wl and not wl["metadata"].get("finalizers") and condition(wl, api.WORKLOAD_FINISHED)
            return wl if done else None

        wl = await eventually(released)
        finished = condition(wl, api.WORKLOAD_FINISHED)
        assert (finished["status"], finished["reason"], finished["message"]) == (
            "True",
            "OwnerNotFound",
            "The workload's owner no longer exists",
        )


async def test_a_pending_message_is_rewritten_at_most_once_per_interval_and_ends_current(kube, cluster):
    """With a client budget above 50 QPS, a pending Workload whose message numbers move with every
    finished Workload gets a new QuotaReserved=False message at most every
    PENDING_MESSAGE_MIN_INTERVAL_SECONDS (same reason), and the last state is written once the
    interval has passed: coalesced, never lost. (At 50 QPS and below every change is written, as
    Kueue writes it: the budget bounds those writes.)"""
    from worker_agent.admission import PENDING_MESSAGE_MIN_INTERVAL_SECONDS as interval

    ns = cluster.namespace
    await _queue(cluster, cpu="6")
    async with running_agent(kube, config={"clientConnection": {"qps": 500, "burst": 1000}}):
        await cluster.create(workload(ns, "held", "main", {"cpu": "3"}))
        await eventually(lambda: cluster.admitted("held"))
        await cluster.create(workload(ns, "waiting", "main", {"cpu": "5"}))
        await eventually(lambda: cluster.pending_reason("waiting"))

        changes: list[tuple[float, str]] = []  # (loop time, message) each time the message changed

        async def record() -> None:
            loop = asyncio.get_running_loop()
            while True:
                pending = await cluster.pending_reason("waiting")
                if pending and (not changes or changes[-1][1] != pending[1]):
                    changes.append((loop.time(), pending[1]))
                await asyncio.sleep(0.05)

        recorder = asyncio.get_running_loop().create_task(record())
        try:
            # Each step admits a Workload next to the running one and finishes the running one, so
            # the unused quota the waiting Workload sees alternates between 4 and 3 cpu. The message
            # written when an interval ends is whichever is newest then, which may be the one written
            # before it: the steps go on (16 at least) until the recorder has seen two changes.
            previous, size = "held", "3"
            for step in range(48):
                if step >= 16 and len(changes) >= 3:
                    break
                size = "2" if size == "3" else "3"
                name = f"step-{step}"
                await cluster.create(workload(ns, name, "main", {"cpu": size}))
                await eventually(lambda name=name: cluster.admitted(name))
                await cluster.finish(previous)
                previous = name
            needed = "1 more needed" if size == "2" else "2 more needed"

            async def current() -> bool:
                return bool(changes) and changes[-1][1].endswith(needed)

            await eventually(current, timeout=interval + 10)
        finally:
            recorder.cancel()

    # The first change was written before the recorder started; the others it saw as they came.
    live = changes[1:]
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(live)]
    assert len(live) >= 2, changes
    # 0.2 s of slack for the poll interval and apiserver latency.
    assert all(gap >= interval - 0.2 for gap in gaps), (gaps, changes)


async def test_a_new_workloads_checks_come_with_its_reservation_and_a_waiting_ones_soon_after(
    kube, cluster, monkeypatch
):
    """The checks of a Workload admitted at once are written with its quota reservation, not in a
    write of their own before it; those of a Workload that waits appear on their own within
    moments (CHECKS_LIST_GRACE_SECONDS, lengthened here so that a slow machine cannot make the
    reservation come after it)."""
    grace = 6.0
    monkeypatch.setattr(workload_controller, "CHECKS_LIST_GRACE_SECONDS", grace)
    ns = cluster.namespace
    check = unique("check")
    await cluster.active_admission_check(check, "example.com/test")
    await _queue(cluster, cpu="1", admission_checks=[check])
    seen: list[dict] = []

    async def record() -> None:
        async for kind, obj in kube.watch(api.WORKLOAD, namespace=ns):
            if kind in ("ADDED", "MODIFIED") and obj["metadata"]["name"] == "fits":
                seen.append(obj)

    watcher = asyncio.create_task(record())
    try:
        await asyncio.sleep(0.5)
        async with running_agent(kube, gates=GRANULAR_REASONS):
            await cluster.create(workload(ns, "fits", "main", {"cpu": "1"}))
            await eventually(lambda: cluster.reserved("fits"))
            await cluster.create(workload(ns, "waits", "main", {"cpu": "1"}))

            async def waiting_checks():
                wl = await cluster.wl("waits")
                return (wl.get("status") or {}).get("admissionChecks")

            (state,) = await eventually(waiting_checks, timeout=grace + 15)
            assert (state["name"], state["state"]) == (check, "Pending")
            assert not condition_is(await cluster.wl("waits"), api.WORKLOAD_QUOTA_RESERVED)
    finally:
        watcher.cancel()
    with_checks = [o for o in seen if (o.get("status") or {}).get("admissionChecks")]
    assert with_checks, "the watch saw no version of the Workload with its checks"
    assert condition_is(with_checks[0], api.WORKLOAD_QUOTA_RESERVED), with_checks[0].get("status")
