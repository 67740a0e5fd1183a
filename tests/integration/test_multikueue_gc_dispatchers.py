"""Garbage collection of orphans on workers, never of foreign objects (multikueue-spec §3.2), and
the Incremental and External dispatchers (§3.5) and our least-loaded one."""

from __future__ import annotations

import dataclasses

import pytest
from admission_kit import consistently, unique, workload
from multikueue_kit import TEST_OPTIONS, check_state, eventually, mk_job, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster


def _remote_workload(namespace: str, name: str, origin: str | None) -> dict:
    wl = workload(namespace, name, "main", {"cpu": "1"})
    if origin:
        wl["metadata"]["labels"] = {api.LABEL_MULTIKUEUE_ORIGIN: origin}
    return wl


def _remote_job(name: str, origin: str, workload_name: str) -> dict:
    job = mk_job(name, managed=False)
    job["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] = origin
    job["metadata"]["annotations"] = {api.ANNOTATION_PREBUILT_WORKLOAD_NAME: workload_name}
    return job


async def test_gc_removes_orphans_of_our_origin_and_nothing_else(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "0"}) as env:
        (cluster,) = env.clusters
        worker = env.worker_kubes["worker1"]
        ours, foreign, unlabelled = unique("ours"), unique("foreign"), unique("unlabelled")
        await worker.create(api.WORKLOAD, _remote_workload(namespace, ours, env.origin), namespace=namespace)
        await worker.create(
            api.WORKLOAD, _remote_workload(namespace, foreign, "another-manager"), namespace=namespace
        )
        await worker.create(api.WORKLOAD, _remote_workload(namespace, unlabelled, None), namespace=namespace)
        await worker.create(
            api.JOB, _remote_job("orphan-job", env.origin, unique("gone")), namespace=namespace
        )
        await worker.create(
            api.JOB, _remote_job("foreign-job", "another-manager", unique("gone")), namespace=namespace
        )

        async def orphans_gone():
            return (
                not await env.remote(cluster, api.WORKLOAD, ours)
                and not await env.remote(cluster, api.JOB, "orphan-job")
            ) or None

        await eventually(orphans_gone, timeout=30)

        async def foreign_kept():
            return (
                await env.remote(cluster, api.WORKLOAD, foreign)
                and await env.remote(cluster, api.WORKLOAD, unlabelled)
                and await env.remote(cluster, api.JOB, "foreign-job")
            )

        await consistently(foreign_kept, duration=3)


async def test_incremental_dispatcher_nominates_in_config_order_round_by_round(fleet, kube, namespace):
    config = {
        "multiKueue": {
            "dispatcherName": api.DISPATCHER_INCREMENTAL,
            "incrementalDispatcherConfig": {"stepSize": 1},
        }
    }
    options = dataclasses.replace(TEST_OPTIONS, incremental_round_seconds=6)
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "0", "worker2": "4"}, start_manager=False
    ) as env:
        await env.start_manager(config, options)
        first, second = env.clusters  # config order: worker1, then worker2
        await kube.create(api.JOB, mk_job("incremental", keep_running=True), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("incremental"))
        name = wl["metadata"]["name"]

        async def nominated():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            return (current.get("status") or {}).get("nominatedClusterNames")

        assert await eventually(nominated, timeout=30) == [first]
        assert await eventually(lambda: env.remote(first, api.WORKLOAD, name))
        assert not await env.remote(second, api.WORKLOAD, name)

        async def admitted_on_second():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            return state and state["state"] == "Ready" and current["status"].get("clusterName") == second

        await eventually(admitted_on_second, timeout=40)
        assert not (await env.get(kube, api.WORKLOAD, name, namespace))["status"].get("nominatedClusterNames")


async def test_least_loaded_dispatcher_sends_one_copy_where_there_is_room(fleet, kube, namespace):
    config = {"multiKueue": {"dispatcherName": api.DISPATCHER_LEAST_LOADED}}
    # A round far longer than the waits below: what widens a dispatch here is the worker's refusal.
    options = dataclasses.replace(TEST_OPTIONS, least_loaded_round_seconds=120)
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "0", "worker2": "4"}, start_manager=False
    ) as env:
        await env.start_manager(config, options)
        # Both connected first: a Job dispatched while only worker1 is would widen when worker2 joins.
        await env.wait_connected()
        first, second = env.clusters  # equal load: config order, worker1 first

        async def workload_of(job: str) -> str | None:
            wl = await env.job_workload(job)
            return wl["metadata"]["name"] if wl else None

        def placed(name: str, cluster: str):
            async def check():
                current = await env.get(kube, api.WORKLOAD, name, namespace)
                state = check_state(current, env.check)
                return state and state["state"] == "Ready" and current["status"].get("clusterName") == cluster

            return check

        async def dispatches(name: str) -> list[str]:
            return await env.events(name, api.EVENT_MULTIKUEUE_DISPATCHED)

        # The first Job goes to worker1 alone; worker1 (no CPU) refuses it, and at that every
        # worker gets a copy, as with AllAtOnce: it runs on worker2, long before the round ends.
        await kube.create(api.JOB, mk_job("refused", keep_running=True), namespace=namespace)
        refused = await eventually(lambda: workload_of("refused"))
        await eventually(placed(refused, second), timeout=40)
        # The widening's Event joins the first one's series (same reason, as client-go's recorder
        # does), which keeps the first note: worker1 alone.
        assert await dispatches(refused) == [f"Dispatched to worker clusters: {api.go_list([first])}"]
        await env.wait_copies_gone(first, refused)

        # worker1 refused a copy within the round: the next Job goes straight to worker2, and only there.
        await kube.create(api.JOB, mk_job("fits", keep_running=True), namespace=namespace)
        fits = await eventually(lambda: workload_of("fits"))
        await eventually(placed(fits, second), timeout=30)
        assert await dispatches(fits) == [f"Dispatched to worker clusters: {api.go_list([second])}"]
        assert not await env.remote(first, api.WORKLOAD, fits)


async def test_external_dispatcher_follows_nominations_written_by_another_controller(fleet, kube, namespace):
    config = {"multiKueue": {"dispatcherName": "example.com/external-dispatcher"}}
    async with multikueue(fleet, kube, namespace, start_manager=False) as env:
        await env.start_manager(config)
        first, second = env.clusters
        await kube.create(api.JOB, mk_job("external", keep_running=True), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("external"))
        name = wl["metadata"]["name"]

        async def reserved():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            return current if check_state(current, env.check) else None

        current = await eventually(reserved, timeout=30)

        async def no_copies():
            return not await env.remote(first, api.WORKLOAD, name) and not await env.remote(
                second, api.WORKLOAD, name
            )

        await consistently(no_copies, duration=2)
        # The external controller nominates the second worker, as upstream advises, under kueue-admission.
        body = {
            "apiVersion": api.API_VERSION,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"nominatedClusterNames": [second]},
        }
        await kube.apply_status(api.WORKLOAD, body, "external-dispatcher", force=True)

        async def admitted_on_second():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            return state and state["state"] == "Ready" and current["status"].get("clusterName") == second

        await eventually(admitted_on_second, timeout=40)
        assert not await env.remote(first, api.WORKLOAD, name)
        assert current is not None
