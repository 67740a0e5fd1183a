"""Basic admission on a real kube-apiserver: queues, quota, status columns, and the upstream
conditions for missing queues."""

from __future__ import annotations

import pytest
from admission_kit import (
    GRANULAR_REASONS,
    cluster_queue,
    condition,
    condition_is,
    eventually,
    local_queue,
    resource_flavor,
    running_agent,
    unique,
    workload,
)

from kueue_domain import api

pytestmark = pytest.mark.realcluster


async def test_admits_as_fits_and_reports_status(kube, cluster):
    ns = cluster.namespace
    rf, cq = unique("default"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}))
    await cluster.create(local_queue(ns, "main", cq))
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "first", "main", {"cpu": "3"}))
        await eventually(lambda: cluster.admitted("first"))
        first = await cluster.wl("first")
        assert condition_is(first, api.WORKLOAD_QUOTA_RESERVED, "True", api.REASON_QUOTA_RESERVED)
        assert (
            condition(first, api.WORKLOAD_QUOTA_RESERVED)["message"] == f"Quota reserved in ClusterQueue {cq}"
        )
        assert condition(first, api.WORKLOAD_ADMITTED)["message"] == "The workload is admitted"
        assert first["status"]["admission"] == {
            "clusterQueue": cq,
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": rf}, "resourceUsage": {"cpu": "3"}, "count": 1}
            ],
        }

        await cluster.create(workload(ns, "second", "main", {"cpu": "2"}))
        reason = await eventually(lambda: cluster.pending_reason("second"))
        assert reason == (
            api.REASON_WAITING_FOR_QUOTA,
            f"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor {rf}, "
            "1 more needed",
        )

        async def cq_status():
            status = (await cluster.cq(cq)).get("status") or {}
            return (
                status
                if status.get("pendingWorkloads") == 1 and status.get("admittedWorkloads") == 1
                else None
            )

        status = await eventually(cq_status)
        assert status["reservingWorkloads"] == 1
        assert status["flavorsUsage"] == [
            {"name": rf, "resources": [{"name": "cpu", "total": "3", "borrowed": "0"}]}
        ]
        assert status["flavorsReservation"] == status["flavorsUsage"]
        active = condition({"status": status}, api.CONDITION_ACTIVE)
        assert (active["status"], active["reason"], active["message"]) == (
            "True",
            "Ready",
            "Can admit new workloads",
        )

        async def lq_status():
            status = (await cluster.lq("main")).get("status") or {}
            return (
                status
                if status.get("pendingWorkloads") == 1 and status.get("admittedWorkloads") == 1
                else None
            )

        lq = await eventually(lq_status)
        assert lq["flavorUsage"] == [{"name": rf, "resources": [{"name": "cpu", "total": "3"}]}]
        assert condition({"status": lq}, api.CONDITION_ACTIVE)["reason"] == "Ready"

        # kubectl shows upstream columns with these values.
        out = cluster_kubectl(cluster, "get", "clusterqueues", cq)
        assert out.split("\n")[0].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
        out = cluster_kubectl(cluster, "get", "clusterqueues", cq, "-o", "wide")
        header, row = out.strip().split("\n")
        assert header.split() == [
            "NAME",
            "COHORT",
            "STRATEGY",
            "PENDING",
            "WORKLOADS",
            "ADMITTED",
            "WORKLOADS",
        ]
        assert row.split() == [cq, "BestEffortFIFO", "1", "1"]
        out = cluster_kubectl(cluster, "get", "localqueues", "-n", ns)
        header, row = out.strip().split("\n")
        assert header.split() == ["NAME", "CLUSTERQUEUE", "PENDING", "WORKLOADS", "ADMITTED", "WORKLOADS"]
        assert row.split() == ["main", cq, "1", "1"]
        out = cluster_kubectl(cluster, "get", "workloads", "-n", ns, "first")
        header, row = out.strip().split("\n")
        assert header.split()[:5] == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED"]
        assert row.split()[:4] == ["first", "main", cq, "True"]

        await cluster.finish("first")
        await eventually(lambda: cluster.admitted("second"))


def cluster_kubectl(cluster, *args: str) -> str:
    fleet = cluster.fleet
    return fleet.kubectl("manager", *args).stdout


async def test_missing_queues_have_upstream_conditions(kube, cluster):
    ns = cluster.namespace
    missing_cq = unique("missing-cq")
    await cluster.create(local_queue(ns, "orphan", missing_cq))
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "no-lq", "nowhere"))
        await cluster.create(workload(ns, "no-cq", "orphan"))

        async def lq_inactive():
            c = condition(await cluster.lq("orphan"), api.CONDITION_ACTIVE)
            return c if c and c["status"] == "False" else None

        c = await eventually(lq_inactive)
        assert (c["reason"], c["message"]) == (
            "ClusterQueueDoesNotExist",
            "Can't submit new workloads to clusterQueue",
        )
        assert await eventually(lambda: cluster.pending_reason("no-lq")) == (
            "Misconfigured",
            "LocalQueue nowhere doesn't exist",
        )
        assert await eventually(lambda: cluster.pending_reason("no-cq")) == (
            "Misconfigured",
            f"ClusterQueue {missing_cq} doesn't exist",
        )


async def test_cluster_queue_inactive_until_flavor_exists(kube, cluster):
    ns = cluster.namespace
    rf, cq = unique("late"), unique("cq")
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}))
    await cluster.create(local_queue(ns, "main", cq))
    async with running_agent(kube, gates=GRANULAR_REASONS):
        await cluster.create(workload(ns, "w", "main"))

        async def inactive():
            c = condition(await cluster.cq(cq), api.CONDITION_ACTIVE)
            return c if c and c["status"] == "False" else None

        c = await eventually(inactive)
        assert (c["reason"], c["message"]) == (
            "FlavorNotFound",
            f"Can't admit new workloads: references missing ResourceFlavor(s): {rf}.",
        )
        assert await eventually(lambda: cluster.pending_reason("w")) == (
            "Suspended",
            f"ClusterQueue {cq} is inactive",
        )
        await cluster.create(resource_flavor(rf))
        await eventually(lambda: cluster.admitted("w"))


async def test_pending_reasons_are_upstream_v0_19s_by_default_and_granular_with_the_gate(kube, cluster):
    """Kueue v0.19 (UnadmittedWorkloadsObservability off) writes QuotaReserved=False/Pending for every
    scheduler diagnosis; the message is the same with the gate on, only the reason is granular."""
    ns = cluster.namespace
    rf, cq = unique("zone-a"), unique("cq")
    await cluster.create(resource_flavor(rf, node_labels={"example.com/zone": "a"}))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}))
    await cluster.create(local_queue(ns, "main", cq))
    expected = {
        "waits": (
            api.REASON_WAITING_FOR_QUOTA,
            f"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor {rf}, "
            "1 more needed",
        ),
        "never-fits": (
            api.REASON_EXCEEDS_MAX_QUOTA,
            f"couldn't assign flavors to pod set main: insufficient quota for cpu in flavor {rf}, "
            "previously considered podsets requests (0) + current podset request (10) > maximum capacity (4)",
        ),
        "no-flavor": (
            api.REASON_NO_MATCHING_FLAVOR,
            f"couldn't assign flavors to pod set main: flavor {rf} doesn't match node affinity",
        ),
    }
    async with running_agent(kube):
        await cluster.create(workload(ns, "running", "main", {"cpu": "3"}))
        await eventually(lambda: cluster.admitted("running"))
        await cluster.create(workload(ns, "waits", "main", {"cpu": "2"}))
        await cluster.create(workload(ns, "never-fits", "main", {"cpu": "10"}))
        await cluster.create(workload(ns, "no-flavor", "main", node_selector={"example.com/zone": "b"}))
        for name, (_, message) in expected.items():
            assert await eventually(lambda name=name: cluster.pending_reason(name)) == (
                api.REASON_PENDING,
                message,
            )
    async with running_agent(kube, gates=GRANULAR_REASONS):
        for name, want in expected.items():

            async def granular(name=name):
                reason = await cluster.pending_reason(name)
                return reason if reason and reason[0] != api.REASON_PENDING else None

            assert await eventually(granular) == want


async def test_missing_queues_are_inadmissible_by_default(kube, cluster):
    """With default gates a Workload whose LocalQueue or ClusterQueue is missing is
    QuotaReserved=False/Inadmissible (Misconfigured only with UnadmittedWorkloadsObservability)."""
    ns = cluster.namespace
    missing_cq = unique("missing-cq")
    await cluster.create(local_queue(ns, "orphan", missing_cq))
    async with running_agent(kube):
        await cluster.create(workload(ns, "no-lq", "nowhere"))
        await cluster.create(workload(ns, "no-cq", "orphan"))
        no_lq = await eventually(lambda: cluster.pending_reason("no-lq"))
        assert no_lq == ("Inadmissible", "LocalQueue nowhere doesn't exist")
        no_cq = await eventually(lambda: cluster.pending_reason("no-cq"))
        assert no_cq == ("Inadmissible", f"ClusterQueue {missing_cq} doesn't exist")


async def test_every_cluster_queue_that_exists_before_the_agent_starts_gets_its_status(kube, cluster):
    """A new ClusterQueue gets its finalizer and its Active condition from one reconcile: the
    finalizer's own update is no spec change and brings nothing back (20 queues made this race
    lose for most of them)."""
    rf = unique("default")
    await cluster.create(resource_flavor(rf))
    names = [unique("early") for _ in range(20)]
    for i, name in enumerate(names):
        await cluster.create(cluster_queue(name, {rf: {"cpu": "1"}}, cohort=f"{names[0]}-{i % 4}"))
        await cluster.create(local_queue(cluster.namespace, f"lq-{i}", name))
    async with running_agent(kube):

        async def unreported() -> list[str] | None:
            missing = []
            for name in names:
                cq = await cluster.cq(name)
                active = condition(cq, api.CONDITION_ACTIVE)
                finalizers = cq["metadata"].get("finalizers") or []
                if (
                    active is None
                    or active["status"] != "True"
                    or api.FINALIZER_RESOURCE_IN_USE not in finalizers
                ):
                    missing.append(name)
            return missing or None

        async def all_reported() -> bool:
            return await unreported() is None

        try:
            await eventually(all_reported, timeout=30)
        except AssertionError:
            raise AssertionError(
                f"ClusterQueues without Active=True or finalizer: {await unreported()}"
            ) from None
