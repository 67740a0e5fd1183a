"""A Job's `kueue.x-k8s.io/priority-class` label changed on the manager (upstream's e2e "Priority
class mutation", test/e2e/multikueue/baseline): the manager's Workload takes the new class and
value, the manager's ClusterQueue preempts by it, and the copy on the worker follows the manager's
Workload, not the worker's Job (which keeps the label it was created with). A new value of the
manager's WorkloadPriorityClass reaches the copy the same way."""

from __future__ import annotations

import asyncio

import pytest
from multikueue_kit import check_state, condition, eventually, mk_job, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster

PRIORITY_FIELDS = ("priorityClassName", "priorityClassSource", "priority")


async def priority_classes(env, kube, namespace: str) -> tuple[str, str]:
    """A high (300) and a low (100) WorkloadPriorityClass of the same names on every cluster."""
    high, low = f"{namespace}-high", f"{namespace}-low"
    for client in (kube, *env.worker_kubes.values()):
        for name, value in ((high, 300), (low, 100)):
            body = {
                "apiVersion": api.API_VERSION,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            await env.create(client, api.WORKLOAD_PRIORITY_CLASS, body)
    return high, low


def prio_job(name: str, priority_class: str, cpu: str = "2") -> dict:
    job = mk_job(name, cpu=cpu, keep_running=True)
    job["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] = priority_class
    return job


def priority_of(wl: dict | None) -> tuple:
    spec = (wl or {}).get("spec") or {}
    return tuple(spec.get(k) for k in PRIORITY_FIELDS)


async def relabel(kube, namespace: str, job: str, priority_class: str) -> None:
    await kube.patch_merge(
        api.JOB, job, {"metadata": {"labels": {api.LABEL_PRIORITY_CLASS: priority_class}}}, namespace
    )


async def test_a_lowered_job_is_preempted_on_the_manager_for_a_pending_one(fleet, kube, namespace):
    """ "Should allow to mutate kueue.x-k8s.io/priority-class": the manager's quota holds one Job; a
    second of equal priority waits; lowering the first one's class lets the second preempt it on
    the manager, the second is dispatched and the first one's copies leave the workers."""
    preemption = {"withinClusterQueue": "LowerPriority"}
    async with multikueue(
        fleet,
        kube,
        namespace,
        worker_cpu={"worker1": "2", "worker2": "2"},
        manager_cpu="2",
        manager_preemption=preemption,
        worker_preemption=preemption,
    ) as env:
        high, low = await priority_classes(env, kube, namespace)
        await kube.create(api.JOB, prio_job("job1", high), namespace=namespace)
        wl1 = await eventually(lambda: env.job_workload("job1"))
        name1 = wl1["metadata"]["name"]

        async def admitted(name: str):
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            ready = state and state["state"] == "Ready" and condition(current, api.WORKLOAD_ADMITTED)
            return (
                current if ready and condition(current, api.WORKLOAD_ADMITTED)["status"] == "True" else None
            )

        placed1 = await env.wait_for(lambda: admitted(name1), 40, name1)
        first = placed1["status"]["clusterName"]
        copy1 = await eventually(lambda: env.remote(first, api.WORKLOAD, name1))
        assert priority_of(copy1) == priority_of(placed1) == (high, api.PRIORITY_CLASS_SOURCE_WORKLOAD, 300)

        await kube.create(api.JOB, prio_job("job2", high), namespace=namespace)
        wl2 = await eventually(lambda: env.job_workload("job2"))
        name2 = wl2["metadata"]["name"]

        async def pending_on_manager():
            current = await env.get(kube, api.WORKLOAD, name2, namespace)
            reserved = condition(current, api.WORKLOAD_QUOTA_RESERVED)
            return current if reserved and reserved["status"] == "False" else None

        await eventually(pending_on_manager, timeout=30)
        for cluster in env.clusters:
            assert await env.remote(cluster, api.WORKLOAD, name2) is None

        await relabel(kube, namespace, "job1", low)

        async def lowered():
            current = await env.get(kube, api.WORKLOAD, name1, namespace)
            return current if priority_of(current) == (low, api.PRIORITY_CLASS_SOURCE_WORKLOAD, 100) else None

        await env.wait_for(lowered, 30, name1)

        # The second Job is admitted on a worker, with the manager's spec.
        placed2 = await env.wait_for(lambda: admitted(name2), 60, name2)
        second = placed2["status"]["clusterName"]
        copy2 = await eventually(lambda: env.remote(second, api.WORKLOAD, name2))
        assert condition(copy2, api.WORKLOAD_ADMITTED)["status"] == "True"
        assert copy2["spec"] == placed2["spec"]
        await env.wait_copies_gone(next(c for c in env.clusters if c != second), name2)

        # The first one was preempted on the manager, and its copies are gone from every worker.
        async def preempted():
            current = await env.get(kube, api.WORKLOAD, name1, namespace)
            evicted, by = condition(current, api.WORKLOAD_EVICTED), condition(current, api.WORKLOAD_PREEMPTED)
            return (
                current if evicted and evicted["status"] == "True" and by and by["status"] == "True" else None
            )

        await env.wait_for(preempted, 30, name1)
        for cluster in env.clusters:
            await env.wait_copies_gone(cluster, name1)


async def test_the_copy_keeps_the_new_priority_when_the_workers_job_reconciles(fleet, kube, namespace):
    """ "Should keep workload priority even if job reconcile": the worker's Job still carries the old
    label; reconciling it does not take the copy back to the old priority."""
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        (cluster,) = env.clusters
        high, low = await priority_classes(env, kube, namespace)
        await kube.create(api.JOB, prio_job("job", high), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("job"))
        name = wl["metadata"]["name"]

        async def placed():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            return current if state and state["state"] == "Ready" else None

        await env.wait_for(placed, 40, name)
        remote_job = await eventually(lambda: env.remote(cluster, api.JOB, "job"), timeout=30)
        first = await env.remote(cluster, api.WORKLOAD, name)

        await relabel(kube, namespace, "job", low)
        wanted = (low, api.PRIORITY_CLASS_SOURCE_WORKLOAD, 100)

        async def manager_lowered():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            return current if priority_of(current) == wanted else None

        await env.wait_for(manager_lowered, 30, name)

        async def copy_lowered():
            current = await env.remote(cluster, api.WORKLOAD, name)
            return current if priority_of(current) == wanted else None

        updated = await env.wait_for(copy_lowered, 30, name)
        assert updated["metadata"]["uid"] == first["metadata"]["uid"], "the copy was re-created"
        assert remote_job["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] == high

        # The worker's Job reconciles (a change of its own, and its pod replaced); its old label
        # does not win over the copy's priority.
        worker_kube = env.worker_kubes[env.clusters[cluster]]
        await worker_kube.patch_merge(
            api.JOB, "job", {"metadata": {"annotations": {"example.com/touched": "1"}}}, namespace
        )
        pods, _ = await worker_kube.list(api.POD, namespace=namespace)
        for pod in pods:
            await worker_kube.delete(api.POD, pod["metadata"]["name"], namespace)
        for _ in range(10):
            current = await env.remote(cluster, api.WORKLOAD, name)
            assert priority_of(current) == wanted
            assert condition(current, api.WORKLOAD_ADMITTED)["status"] == "True"
            await asyncio.sleep(0.5)
        manager_wl = await env.get(kube, api.WORKLOAD, name, namespace)
        assert current["spec"] == manager_wl["spec"]

        # A new value of the manager's WorkloadPriorityClass reaches the manager's Workload (the
        # WorkloadPriorityClass controller) and from there the copy.
        await kube.patch_merge(api.WORKLOAD_PRIORITY_CLASS, low, {"value": 150})
        wanted = (low, api.PRIORITY_CLASS_SOURCE_WORKLOAD, 150)
        await env.wait_for(manager_lowered, 30, name)
        updated = await env.wait_for(copy_lowered, 30, name)
        assert updated["metadata"]["uid"] == first["metadata"]["uid"], "the copy was re-created"
