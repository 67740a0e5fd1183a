"""Admission Fair Sharing on a real kube-apiserver: in a ClusterQueue with
`admissionScope.admissionMode: UsageBasedAdmissionFairSharing`, the LocalQueue that consumed less
is admitted from first, and every active LocalQueue shows its decayed usage in
`status.fairSharing.admissionFairSharingStatus`. A ClusterQueue without the admission scope keeps
the usual order (priority, then creation)."""

from __future__ import annotations

import asyncio

import pytest
from admission_kit import (
    cluster_queue,
    eventually,
    local_queue,
    resource_flavor,
    running_agent,
    unique,
    workload,
)

from kube_runtime.conditions import parse_time
from kueue_domain import api
from kueue_domain.resources import parse_quantity

pytestmark = pytest.mark.realcluster

AFS = {"admissionFairSharing": {"usageHalfLifeTime": "1h", "usageSamplingInterval": "1s"}}


def afs_status(lq: dict) -> dict | None:
    return ((lq.get("status") or {}).get("fairSharing") or {}).get("admissionFairSharingStatus")


async def consumed_cpu(cluster, lq: str):
    status = afs_status(await cluster.lq(lq))
    if status is None:
        return None
    return parse_quantity(status["consumedResources"].get("cpu", "0"))


async def test_the_local_queue_with_less_usage_is_admitted_first(kube, cluster):
    ns, rf = cluster.namespace, unique("rf")
    await cluster.create(resource_flavor(rf))
    usage_cq, plain_cq = unique("afs"), unique("plain")
    afs_obj = cluster_queue(usage_cq, {rf: {"cpu": "1"}})
    afs_obj["spec"]["admissionScope"] = {"admissionMode": api.ADMISSION_MODE_USAGE_BASED}
    await cluster.create(afs_obj)
    await cluster.create(cluster_queue(plain_cq, {rf: {"cpu": "1"}}))
    for cq in (usage_cq, plain_cq):
        for team in ("a", "b"):
            await cluster.create(local_queue(ns, f"{cq}-{team}", cq))
    async with running_agent(kube, AFS):
        for cq in (usage_cq, plain_cq):
            await cluster.create(workload(ns, f"{cq}-a1", f"{cq}-a"))
            await eventually(lambda cq=cq: cluster.admitted(f"{cq}-a1"))
            await cluster.create(workload(ns, f"{cq}-a2", f"{cq}-a"))
        # team a has consumed usage (its admission's entry penalty, then samples of 1 cpu in use);
        # team b none, and its status says so.
        assert await eventually(lambda: consumed_cpu(cluster, f"{usage_cq}-a"))
        assert await eventually(lambda: _has_status(cluster, usage_cq))
        await asyncio.sleep(1.1)  # the b workloads are strictly newer than the a ones
        for cq in (usage_cq, plain_cq):
            await cluster.create(workload(ns, f"{cq}-b1", f"{cq}-b"))
        for cq in (usage_cq, plain_cq):
            # b1 waits (parked as equivalent to a2, which did not fit: no condition of its own).
            await eventually(lambda cq=cq: pending_in(cluster, f"{cq}-b"))
            await cluster.finish(f"{cq}-a1")

        # With usage-based admission b, which consumed nothing, goes before a's older workload.
        await eventually(lambda: cluster.admitted(f"{usage_cq}-b1"))
        assert not await cluster.reserved(f"{usage_cq}-a2")
        # Without it the older workload goes first.
        await eventually(lambda: cluster.admitted(f"{plain_cq}-a2"))
        assert not await cluster.reserved(f"{plain_cq}-b1")

        # b's usage now grows with its admitted workload; lastUpdate moves with every sample.
        first = afs_status(await cluster.lq(f"{usage_cq}-b"))
        assert await eventually(lambda: consumed_cpu(cluster, f"{usage_cq}-b"))

        async def later():
            status = afs_status(await cluster.lq(f"{usage_cq}-b"))
            return parse_time(status["lastUpdate"]) > parse_time(first["lastUpdate"])

        await eventually(later, timeout=10)


async def pending_in(cluster, lq: str) -> bool:
    return ((await cluster.lq(lq)).get("status") or {}).get("pendingWorkloads") == 1


async def _has_status(cluster, usage_cq: str) -> bool:
    status = afs_status(await cluster.lq(f"{usage_cq}-b"))
    return status is not None and status["consumedResources"] == {} and bool(status["lastUpdate"])
