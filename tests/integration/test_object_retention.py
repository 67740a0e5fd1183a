"""ObjectRetentionPolicies against a real cluster: with `objectRetentionPolicies.workloads.afterFinished`
a finished Workload is deleted once that time has passed since its Finished condition (the Job stays,
and gets no new Workload); with `afterDeactivatedByKueue` a Job whose Workload Kueue deactivated is
deleted, and its Workload with it. Without the policy, both stay."""

from __future__ import annotations

import pytest
from admission_kit import condition, condition_is, consistently, eventually, unique
from test_job_integration import (
    batch_job,
    create_job,
    get_job,
    job_agent,
    job_events,
    job_workload,
    queues,
    worker_cluster,  # noqa: F401 (a fixture)
)

from kube_runtime.client import NotFound
from kueue_domain import api

pytestmark = pytest.mark.realcluster


async def workload_events(cluster, name: str, reason: str) -> list[str]:
    items, _ = await cluster.kube.list(api.EVENT, namespace=cluster.namespace)
    return [
        e.get("note", "")
        for e in items
        if (e.get("regarding") or {}).get("kind") == "Workload"
        and (e.get("regarding") or {}).get("name") == name
        and e.get("reason") == reason
    ]


async def gone(cluster, wl_name: str) -> bool:
    return await cluster.wl(wl_name) is None


async def no_workload(cluster, job) -> bool:
    return await job_workload(cluster, job) is None


async def test_a_finished_workload_is_deleted_after_its_retention(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    await queues(cluster, node_labels={"type": "kwok"})
    config = {"objectRetentionPolicies": {"workloads": {"afterFinished": "3s"}}}
    async with job_agent(cluster, config):
        job = await create_job(cluster, batch_job(unique("done"), cpu="100m"))
        name = job["metadata"]["name"]
        wl = await eventually(lambda: job_workload(cluster, job))
        wl_name = wl["metadata"]["name"]

        async def finished():
            current = await cluster.wl(wl_name)
            return current if current and condition_is(current, api.WORKLOAD_FINISHED) else None

        wl = await eventually(finished, timeout=60)
        # Not before its time (3 s after the Finished condition), then deleted.
        await consistently(lambda: cluster.wl(wl_name), duration=1)
        await eventually(lambda: gone(cluster, wl_name), timeout=20)
        events = await eventually(lambda: workload_events(cluster, wl_name, api.EVENT_DELETED))
        assert events == ["Deleted finished workload due to elapsed retention"]
        # The Job stays, finished, and no Workload is made for it again.
        assert (await get_job(cluster, name))["status"].get("succeeded") == 1
        await consistently(lambda: no_workload(cluster, job), duration=3)
        assert condition(wl, api.WORKLOAD_FINISHED)["reason"] == "Succeeded"


async def test_without_the_policy_a_finished_workload_stays(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    await queues(cluster, node_labels={"type": "kwok"})
    async with job_agent(cluster):
        job = await create_job(cluster, batch_job(unique("kept"), cpu="100m"))
        wl = await eventually(lambda: job_workload(cluster, job))
        wl_name = wl["metadata"]["name"]

        async def finished():
            current = await cluster.wl(wl_name)
            return current if current and condition_is(current, api.WORKLOAD_FINISHED) else None

        await eventually(finished, timeout=60)
        await consistently(lambda: cluster.wl(wl_name), duration=4)


async def test_a_job_kueue_deactivated_is_deleted_after_its_retention(cluster):
    """On the manager cluster pods stay Pending, so the Job runs until its maximum execution time
    deactivates its Workload (DeactivatedDueToMaximumExecutionTimeExceeded)."""
    await queues(cluster)
    config = {"objectRetentionPolicies": {"workloads": {"afterDeactivatedByKueue": "2s"}}}
    async with job_agent(cluster, config):
        body = batch_job(unique("deact"), cpu="100m")
        body["metadata"]["labels"][api.LABEL_MAX_EXEC_TIME_SECONDS] = "2"
        job = await create_job(cluster, body)
        name = job["metadata"]["name"]
        wl = await eventually(lambda: job_workload(cluster, job))
        wl_name = wl["metadata"]["name"]

        async def deactivated():
            current = await cluster.wl(wl_name)
            evicted = condition(current, api.WORKLOAD_EVICTED) if current else None
            return evicted if evicted and evicted["reason"].startswith("DeactivatedDueTo") else None

        evicted = await eventually(deactivated, timeout=30)
        assert evicted["reason"] == "DeactivatedDueToMaximumExecutionTimeExceeded"

        async def job_gone():
            try:
                await get_job(cluster, name)
            except NotFound:
                return True
            return None

        await eventually(job_gone, timeout=30)
        await eventually(lambda: gone(cluster, wl_name), timeout=30)
        assert await eventually(lambda: job_events(cluster, name, api.EVENT_DELETED)) == [
            "Deleted job: deactivation retention period expired"
        ]
