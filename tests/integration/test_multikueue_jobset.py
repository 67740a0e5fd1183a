"""A JobSet submitted on the manager runs on one worker with the real JobSet controller there: its
copy carries the origin label and the prebuilt Workload's name, no pod starts on the manager, the
worker's status is mirrored onto the manager's JobSet, which ends Completed; a JobSet too big for
one worker goes to the other; one evicted on its worker is placed again; deleting it on the manager
removes the copy. (A worker without the JobSet CRD: test_multikueue_bad_input.)"""

from __future__ import annotations

import pytest
from admission_kit import workload
from multikueue_kit import JOB_SET_FRAMEWORKS, check_state, condition, eventually, job_set, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster


def _for_manager(body: dict) -> dict:
    """As our webhook on the manager leaves it: suspended, managed by MultiKueue."""
    body["spec"]["suspend"] = True
    body["spec"]["managedBy"] = api.MANAGED_BY_MULTIKUEUE
    return body


async def test_the_guides_jobset_runs_on_one_worker_and_completes_on_the_manager(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, frameworks=JOB_SET_FRAMEWORKS) as env:
        await kube.create(api.JOB_SET, _for_manager(job_set("guide")), namespace=namespace)
        wl = await env.workload_of("JobSet", "guide")
        name = wl["metadata"]["name"]
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("workers", 2)]
        cluster = await env.placed(name)
        other = next(c for c in env.clusters if c != cluster)
        await env.wait_copies_gone(other, name)
        # The check turns Ready as the winner is recorded; the copy follows in the same reconcile.
        copy_ = await eventually(lambda: env.remote(cluster, api.JOB_SET, "guide"), timeout=30)
        assert copy_["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == name
        assert "managedBy" not in copy_["spec"]

        async def completed():
            current = await kube.get(api.JOB_SET, "guide", namespace)
            found = condition(current, "Completed")
            return current if found and found["status"] == "True" else None

        done = await env.wait_for(completed, 90, name)
        statuses = {r["name"]: r["succeeded"] for r in done["status"]["replicatedJobsStatus"]}
        assert statuses == {"leader": 1, "workers": 1}
        assert done["status"].get("terminalState") == "Completed"

        async def finished():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            found = condition(current, api.WORKLOAD_FINISHED)
            return found if found and found["status"] == "True" else None

        assert (await env.wait_for(finished, 30, name))["reason"] == "Succeeded"

        async def copy_gone():
            return await env.remote(cluster, api.JOB_SET, "guide") is None or None

        await eventually(copy_gone, timeout=30)
        pods, _ = await kube.list(api.POD, namespace=namespace)
        jobs, _ = await kube.list(api.JOB, namespace=namespace)
        assert pods == [] and jobs == [], "nothing may run on the manager cluster"


async def test_a_jobset_too_big_for_one_worker_goes_to_the_other(fleet, kube, namespace):
    workers = {"worker1": "2", "worker2": "6"}
    async with multikueue(fleet, kube, namespace, worker_cpu=workers, frameworks=JOB_SET_FRAMEWORKS) as env:
        await kube.create(api.JOB_SET, _for_manager(job_set("big", workers=3)), namespace=namespace)
        name = (await env.workload_of("JobSet", "big"))["metadata"]["name"]
        assert env.clusters[await env.placed(name)] == "worker2"


async def test_a_jobset_evicted_on_its_worker_is_placed_again(fleet, kube, namespace):
    preemption = {"withinClusterQueue": "LowerPriority"}
    async with multikueue(
        fleet, kube, namespace, worker_preemption=preemption, frameworks=JOB_SET_FRAMEWORKS
    ) as env:
        body = _for_manager(job_set("evicted", workers=3, keep_running=True))
        await kube.create(api.JOB_SET, body, namespace=namespace)
        name = (await env.workload_of("JobSet", "evicted"))["metadata"]["name"]
        first = await env.placed(name)
        worker_kube = env.worker_kubes[env.clusters[first]]
        await worker_kube.create(
            api.WORKLOAD,
            workload(namespace, "urgent", "main", {"cpu": "4"}, priority=100),
            namespace=namespace,
        )

        async def elsewhere():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            state = check_state(current, env.check)
            where = current["status"].get("clusterName")
            return where if state and state["state"] == "Ready" and where != first else None

        second = await env.wait_for(elsewhere, 90, name)

        async def copy_runs():
            copy_ = await env.remote(second, api.JOB_SET, "evicted")
            return copy_ if copy_ and not copy_["spec"].get("suspend") else None

        await eventually(copy_runs, timeout=30)

        async def first_copy_gone():
            return await env.remote(first, api.JOB_SET, "evicted") is None or None

        await eventually(first_copy_gone, timeout=60)

        # Deleting the JobSet on the manager removes the copy and its Workloads everywhere.
        await kube.delete(api.JOB_SET, "evicted", namespace)

        async def all_gone():
            return (
                await env.remote(second, api.JOB_SET, "evicted") is None
                and not await env.remote(second, api.WORKLOAD, name)
                and await env.get(kube, api.WORKLOAD, name, namespace) is None
            ) or None

        await eventually(all_gone, timeout=60)
