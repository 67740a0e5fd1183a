"""A batch/v1 Job submitted on the manager runs on a worker (multikueue-spec §6.2): dispatch to
every worker, the first admission wins, the Job's status is mirrored, it finishes, and nothing is
left behind; a worker without quota is skipped; a worker eviction re-dispatches."""

from __future__ import annotations

import copy

import pytest
from admission_kit import local_queue, workload
from multikueue_kit import check_state, condition, eventually, mk_job, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster


async def test_job_runs_on_a_worker_and_its_status_is_mirrored(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace) as env:
        await kube.create(api.JOB, mk_job("hello"), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("hello"))
        name = wl["metadata"]["name"]

        async def ready():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            return current if state and state["state"] == "Ready" else None

        admitted = await eventually(ready, timeout=40)
        cluster = admitted["status"]["clusterName"]
        assert cluster in env.clusters
        assert check_state(admitted, env.check)["message"] == f'The workload was admitted on "{cluster}"'
        assert not admitted["status"].get("nominatedClusterNames")
        other = next(c for c in env.clusters if c != cluster)

        await env.wait_copies_gone(other, name)
        # The check turns Ready as the winner is recorded; the copy follows in the same reconcile.
        remote_job = await eventually(lambda: env.remote(cluster, api.JOB, "hello"), timeout=30)
        assert remote_job["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert remote_job["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == name
        assert "managedBy" not in remote_job["spec"]

        async def succeeded():
            job = await kube.get(api.JOB, "hello", namespace)
            return job if (job.get("status") or {}).get("succeeded") == 1 else None

        job = await eventually(succeeded, timeout=60)
        assert condition(job, "Complete")["status"] == "True"

        async def finished():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            c = condition(current, api.WORKLOAD_FINISHED)
            return c if c and c["status"] == "True" else None

        await eventually(finished, timeout=30)
        # Every stage of the dispatch was timed once, the status copy too (whether the Job's first
        # copied status was its progress or already its end).
        for stage in ("dispatched", "remote_admitted", "check_ready", "status_mirrored"):
            count = env.manager.registry.get_sample_value(
                "kueue_federation_multikueue_dispatch_stage_seconds_count", {"stage": stage}
            )
            assert count == 1, (stage, count)
        # The manager copied the Job's end and left the condition to the manager cluster's
        # worker_agent, which finished it from the Job (the manager writes it only as a fallback).
        current = await env.get(kube, api.WORKLOAD, name, namespace)
        finishers = [
            m["manager"]
            for m in current["metadata"]["managedFields"]
            if m.get("subresource") == "status" and '"Finished"' in str(m.get("fieldsV1"))
        ]
        assert finishers == ["kueue-job-controller-Finished"], finishers

        async def nothing_left():
            return (
                not await env.remote(cluster, api.WORKLOAD, name)
                and not await env.remote(cluster, api.JOB, "hello")
            ) or None

        await eventually(nothing_left, timeout=30)
        await env.event_note(name, "MultiKueue", f'The workload was admitted on "{cluster}"')
        pods, _ = await kube.list(api.POD, namespace=namespace)
        assert pods == [], "no pod may run on the manager cluster"


async def test_job_lands_on_the_worker_that_has_quota(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "0", "worker2": "4"}) as env:
        by_worker = {w: c for c, w in env.clusters.items()}
        await kube.create(api.JOB, mk_job("fits", keep_running=True), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("fits"))

        async def placed():
            current = await env.get(kube, api.WORKLOAD, wl["metadata"]["name"], namespace)
            return (current.get("status") or {}).get("clusterName")

        assert await eventually(placed, timeout=40) == by_worker["worker2"]
        await env.wait_copies_gone(by_worker["worker1"], wl["metadata"]["name"])

        async def running():
            job = await kube.get(api.JOB, "fits", namespace)
            return (job.get("status") or {}).get("active") == 1 or None

        await eventually(running, timeout=30)
        # Deleting the Job on the manager removes it and its Workload from the worker.
        await kube.delete(api.JOB, "fits", namespace, propagation_policy="Background")

        async def gone():
            return (
                not await env.remote(by_worker["worker2"], api.JOB, "fits")
                and not await env.remote(by_worker["worker2"], api.WORKLOAD, wl["metadata"]["name"])
            ) or None

        await eventually(gone, timeout=40)


async def test_job_not_managed_by_multikueue_is_rejected(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        await kube.create(api.JOB, mk_job("unmanaged", managed=False), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("unmanaged"))

        async def rejected():
            current = await env.get(kube, api.WORKLOAD, wl["metadata"]["name"], namespace)
            state = check_state(current, env.check)
            return state if state and state["state"] == "Rejected" else None

        state = await eventually(rejected, timeout=30)
        assert state["message"] == (
            'The owner is not managed by Kueue: Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" '
            'not "", Previously: "Pending"'
        )


async def test_eviction_on_the_worker_redispatches(fleet, kube, namespace):
    preemption = {"withinClusterQueue": "LowerPriority"}
    async with multikueue(fleet, kube, namespace, worker_preemption=preemption) as env:
        await kube.create(api.JOB, mk_job("evicted", cpu="4", keep_running=True), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("evicted"))
        name = wl["metadata"]["name"]

        async def placed():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            return current["status"].get("clusterName") if state and state["state"] == "Ready" else None

        first = await eventually(placed, timeout=40)
        # A higher-priority Workload of the worker's own users preempts the copy there.
        worker_kube = env.worker_kubes[env.clusters[first]]
        await worker_kube.create(
            api.WORKLOAD,
            workload(namespace, "urgent", "main", {"cpu": "4"}, priority=100),
            namespace=namespace,
        )

        async def evicted_on_manager():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            evicted = condition(current, api.WORKLOAD_EVICTED)
            found = evicted and "Workload evicted on worker cluster" in evicted["message"]
            return evicted if found else None

        evicted = await env.wait_for(evicted_on_manager, 40, name)
        expected = (
            f'Workload evicted on worker cluster: "{first}", resetting for re-admission. Previously: "Ready"'
        )
        assert evicted["message"].endswith(f"({expected})")

        async def placed_elsewhere():
            where = await placed()
            return where if where and where != first else None

        assert await env.wait_for(placed_elsewhere, 60, name) in env.clusters


async def test_a_job_no_worker_can_admit_says_why(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace) as env:
        await kube.create(api.JOB, mk_job("too-big", cpu="6"), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("too-big"))

        async def explained():
            current = await env.get(kube, api.WORKLOAD, wl["metadata"]["name"], namespace)
            state = check_state(current, env.check)
            return (
                state
                if state and state["message"].startswith("Not admitted by any worker cluster yet: ")
                else None
            )

        state = await eventually(explained, timeout=40)
        assert state["state"] == "Pending"
        for cluster in env.clusters:
            assert f'"{cluster}": ' in state["message"]
        assert "insufficient quota" in state["message"]


async def test_a_namespace_missing_on_the_workers_is_reported_on_the_workload(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        only_here = f"{namespace}-x"
        await kube.create(
            api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": only_here}}
        )
        try:
            cq = next(c for c in env.cleanup if c[1] is api.CLUSTER_QUEUE and c[0] is kube)[2]
            await kube.create(api.LOCAL_QUEUE, local_queue(only_here, "main", cq), namespace=only_here)
            await kube.create(api.JOB, mk_job("lost"), namespace=only_here)

            async def reported():
                items, _ = await kube.list(api.EVENT, namespace=only_here)
                notes = [e.get("note", "") for e in items if e.get("reason") == "MultiKueueDispatchFailed"]
                return notes[0] if notes else None

            note = await eventually(reported, timeout=40)
            assert note.startswith("Cannot create the workload on every nominated worker: ")
            assert f'namespaces "{only_here}" not found' in note
        finally:
            await _strip_finalizers_and_delete(kube, only_here)


async def _strip_finalizers_and_delete(kube, namespace: str) -> None:
    items, _ = await kube.list(api.WORKLOAD, namespace=namespace)
    for wl in items:
        await kube.patch_merge(
            api.WORKLOAD, wl["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace
        )
    await kube.delete(api.NAMESPACE, namespace)


async def test_a_priority_change_is_patched_into_the_copy_in_place(fleet, kube, namespace):
    """A priority change on the manager reaches the worker's copy without a new dispatch
    (the manager caches copies with only a digest of their spec, so it patches the priority fields)."""
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        (cluster,) = env.clusters
        worker_kube = env.worker_kubes[env.clusters[cluster]]
        low = f"{namespace}-low"
        wpc = {
            "apiVersion": api.API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": low},
            "value": 10,
        }
        for client in (kube, worker_kube):
            await env.create(client, api.WORKLOAD_PRIORITY_CLASS, copy.deepcopy(wpc))
        job = mk_job("prio", keep_running=True)
        job["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] = low
        await kube.create(api.JOB, job, namespace=namespace)
        wl = await eventually(lambda: env.job_workload("prio"))
        name = wl["metadata"]["name"]

        async def placed():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            return current if (current.get("status") or {}).get("clusterName") == cluster else None

        await eventually(placed, timeout=40)
        first = await env.remote(cluster, api.WORKLOAD, name)
        assert first["spec"]["priority"] == 10 and first["spec"]["priorityClassName"] == low
        # The Workload's priority is raised on the manager (a WorkloadPriorityClass-based priority is
        # mutable).
        await kube.patch_merge(api.WORKLOAD, name, {"spec": {"priority": 1000}}, namespace)

        async def copy_updated():
            copy_ = await env.remote(cluster, api.WORKLOAD, name)
            return copy_ if copy_ and copy_["spec"].get("priority") == 1000 else None

        updated = await eventually(copy_updated, timeout=30)
        assert updated["metadata"]["uid"] == first["metadata"]["uid"], "the copy was re-created"
        assert updated["spec"]["podSets"] == first["spec"]["podSets"]
        current = await env.get(kube, api.WORKLOAD, name, namespace)
        assert current["status"]["clusterName"] == cluster
