"""Workers that go away and come back (multikueue-spec §6.2): a lost admitting worker requeues the
Workload after workerLostTimeout, a brief loss does not, a restarted manager re-anchors the grace
period, a reconnect cleans copies that lost their manager Workload meanwhile."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
import yaml
from admission_kit import consistently, workload
from multikueue_kit import check_state, condition, eventually, mk_job, multikueue

from kube_runtime.conditions import format_time
from kueue_domain import api
from kueue_domain import workload as wlutil

pytestmark = pytest.mark.realcluster

ONLY_WORKER1 = {"worker1": "4", "worker2": "0"}


async def _admitted_on(env, kube, namespace, job: str) -> tuple[str, str]:
    await kube.create(api.JOB, mk_job(job, keep_running=True), namespace=namespace)
    wl = await eventually(lambda: env.job_workload(job))
    name = wl["metadata"]["name"]

    async def ready():
        current = await env.get(kube, api.WORKLOAD, name, namespace)
        state = check_state(current, env.check)
        return current["status"]["clusterName"] if state and state["state"] == "Ready" else None

    return name, await env.wait_for(ready, 40, name)


def _still_ready(env, kube, namespace, name):
    async def check():
        current = await env.get(kube, api.WORKLOAD, name, namespace)
        state = check_state(current, env.check)
        return state is not None and state["state"] == "Ready"

    return check


def _evicted_with(env, kube, namespace, name, text):
    async def check():
        current = await env.get(kube, api.WORKLOAD, name, namespace)
        evicted = condition(current, api.WORKLOAD_EVICTED)
        # Evicted=True lasts until the quota is reserved again; the False condition keeps the message.
        return evicted if evicted and text in evicted["message"] else None

    return check


async def test_a_brief_loss_of_the_admitting_worker_does_not_evict(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu=ONLY_WORKER1) as env:
        name, cluster = await _admitted_on(env, kube, namespace, "brief")
        with env.paused_apiserver(cluster):
            # The watch notices after its inactivity timeout (6 s); the grace period is 8 s.
            await consistently(_still_ready(env, kube, namespace, name), duration=9, interval=0.5)
        await consistently(_still_ready(env, kube, namespace, name), duration=6, interval=0.5)

        async def active_again():
            return await env.cluster_active(cluster) == ("True", "Active", "Connected") or None

        await eventually(active_again, timeout=30)


async def test_a_lost_admitting_worker_requeues_the_workload_after_the_timeout(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu=ONLY_WORKER1) as env:
        name, cluster = await _admitted_on(env, kube, namespace, "lost")
        with env.paused_apiserver(cluster):
            await asyncio.sleep(4)
            assert await _still_ready(env, kube, namespace, name)()
            await env.wait_for(_evicted_with(env, kube, namespace, name, "Admitting remote lost"), 40, name)

        # Back again: the stale copy is replaced and the Workload is admitted on that worker again.
        async def readmitted():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            return state and state["state"] == "Ready" and current["status"].get("clusterName") == cluster

        await env.wait_for(readmitted, 60, name)


async def test_a_restarted_manager_reanchors_the_grace_period(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu=ONLY_WORKER1) as env:
        name, cluster = await _admitted_on(env, kube, namespace, "restart")
        await env.stop_manager()
        with env.paused_apiserver(cluster):
            await env.start_manager()
            # Not evicted at once: the grace period (8 s) starts at the new manager's start.
            await consistently(_still_ready(env, kube, namespace, name), duration=5, interval=0.5)
            await eventually(_evicted_with(env, kube, namespace, name, "Admitting remote lost"), timeout=40)


async def test_reconnect_removes_copies_whose_manager_workload_was_deleted(fleet, kube, namespace):
    config = {"multiKueue": {"gcInterval": "0s"}}  # the reconnect alone must clean up
    async with multikueue(fleet, kube, namespace, worker_cpu=ONLY_WORKER1, manager_config=config) as env:
        name, cluster = await _admitted_on(env, kube, namespace, "stale")
        secret = f"{cluster}-secret"
        good = env.worker_kubeconfig_text(env.clusters[cluster])
        broken = yaml.safe_load(good)
        broken["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
        await env.put_secret(secret, yaml.safe_dump(broken))

        async def inactive():
            state = await env.cluster_active(cluster)
            return state and state[1] == "InsecureKubeConfig"

        await eventually(inactive, timeout=30)
        await kube.delete(api.JOB, "stale", namespace, propagation_policy="Background")

        async def local_gone():
            return await env.get(kube, api.WORKLOAD, name, namespace) is None

        await eventually(local_gone, timeout=30)
        assert await env.remote(cluster, api.WORKLOAD, name), "copies stay while the worker is unreachable"
        assert await env.remote(cluster, api.JOB, "stale")
        await env.put_secret(secret, good)

        async def cleaned():
            return not await env.remote(cluster, api.WORKLOAD, name) and not await env.remote(
                cluster, api.JOB, "stale"
            )

        await eventually(cleaned, timeout=40)


async def test_a_retry_check_without_quota_goes_back_to_pending(fleet, kube, namespace):
    """A Retry that reaches a Workload after its eviction (a stale write) must not leave it
    inadmissible for good: the manager sets its check back to Pending."""
    async with multikueue(fleet, kube, namespace, manager_cpu="1") as env:
        await kube.create(api.JOB, mk_job("stuck", cpu="2"), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("stuck"))
        name = wl["metadata"]["name"]

        async def pending_without_quota():
            # The checks' list of a new pending Workload may come up to 2 s after its QuotaReserved
            # condition (the agent leaves it to the reservation write for that long).
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            reserved = condition(current, api.WORKLOAD_QUOTA_RESERVED)
            listed = reserved and reserved["status"] == "False" and check_state(current, env.check)
            return current if listed else None

        current = await eventually(pending_without_quota, timeout=30)
        assert check_state(current, env.check)["state"] == "Pending"
        await kube.apply_status(
            api.WORKLOAD,
            {
                "apiVersion": api.WORKLOAD.api_version,
                "kind": api.WORKLOAD.kind,
                "metadata": {"name": name, "namespace": namespace},
                "status": {
                    "admissionChecks": [
                        {
                            "name": env.check,
                            "state": "Retry",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                            "message": "a late retry",
                        }
                    ]
                },
            },
            "test-stale-writer",
            force=True,
        )

        async def pending_again():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            return state if state and state["state"] == "Pending" else None

        state = await eventually(pending_again, timeout=30)
        assert state["message"].startswith(api.MSG_RETRY_WITHOUT_QUOTA), state


async def test_running_counts_left_on_a_job_without_quota_are_dropped(fleet, kube, namespace):
    """A mirrored running count that lands on the manager's suspended Job after its quota was
    released (a late write) would stand for good: no worker runs it and nothing else lowers it.
    The manager drops it on the Workload's next reconcile."""
    async with multikueue(fleet, kube, namespace, manager_cpu="1") as env:
        await kube.create(api.JOB, mk_job("late", cpu="2"), namespace=namespace)
        wl = await eventually(lambda: env.job_workload("late"))
        name = wl["metadata"]["name"]

        async def pending():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            reserved = condition(current, api.WORKLOAD_QUOTA_RESERVED)
            return current if reserved and reserved["status"] == "False" else None

        await eventually(pending, timeout=30)
        await kube.patch_status_merge(api.JOB, "late", {"status": {"active": 1, "ready": 1}}, namespace)
        # Any change of the Workload brings it back to the manager.
        await kube.patch_merge(api.WORKLOAD, name, {"metadata": {"labels": {"touched": "yes"}}}, namespace)

        async def dropped():
            job = await kube.get(api.JOB, "late", namespace=namespace)
            status = job.get("status") or {}
            return job if not status.get("active") and not status.get("ready") else None

        job = await eventually(dropped, timeout=30)
        assert job["spec"]["suspend"] is True


async def test_nothing_is_dispatched_while_the_manager_workload_is_being_evicted(fleet, kube, namespace):
    """An eviction clears clusterName and resets the check to Pending at once, but the Workload
    holds its old quota until it is released (Evicted stays True until quota is reserved again).
    Dispatching in that window sent out a copy that the manager then deactivated, and its Job was
    created and deleted on the worker. Here the manager-side Kueue is played by hand, so that the
    window stays open."""
    async with multikueue(fleet, kube, namespace, manager_agent=False) as env:
        job = await env.create(
            kube,
            api.JOB,
            {**mk_job("evicting"), "metadata": {**mk_job("evicting")["metadata"], "namespace": namespace}},
        )
        meta = job["metadata"]
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }
        body = workload(namespace, "job-evicting-1", "main")
        body["metadata"]["ownerReferences"] = [owner]
        wl = await kube.create(api.WORKLOAD, body, namespace=namespace)
        now = dt.datetime.now(dt.UTC)
        admission = {
            "clusterQueue": "manager-cq",
            "podSetAssignments": [
                {"name": "main", "count": 1, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}}
            ],
        }
        evicting = wlutil.working_copy(wl)
        evicting["status"] = {
            "admission": admission,
            "admissionChecks": [
                {
                    "name": env.check,
                    "state": api.CHECK_STATE_PENDING,
                    "message": "Reset to Pending after eviction. Previously: Retry",
                    "lastTransitionTime": format_time(now),
                }
            ],
        }
        wlutil.set_condition(
            evicting, api.WORKLOAD_QUOTA_RESERVED, "True", "QuotaReserved", "Quota reserved", now
        )
        wlutil.set_condition(
            evicting,
            api.WORKLOAD_EVICTED,
            "True",
            api.REASON_ADMISSION_CHECK,
            "Evicted due to AdmissionCheck in Retry state",
            now,
        )
        wl = await wlutil.apply_admission_status(kube, evicting)

        async def no_copy_anywhere():
            return all([not await env.remote_workloads(cluster) for cluster in env.clusters])

        await consistently(no_copy_anywhere, duration=5)

        # Quota released and reserved again: now it goes out.
        requeued = wlutil.working_copy(wl)
        wlutil.set_condition(
            requeued,
            api.WORKLOAD_EVICTED,
            "False",
            "QuotaReserved",
            "Previously: AdmissionCheck",
            dt.datetime.now(dt.UTC),
        )
        await wlutil.apply_admission_status(kube, requeued)

        async def a_copy_somewhere():
            return any([await env.remote_workloads(cluster) for cluster in env.clusters])

        await env.wait_for(a_copy_somewhere, 30, wl["metadata"]["name"])
