"""An AppWrapper (wrapping a batch/v1 Job) submitted on the manager runs on one worker with the real
AppWrapper controller there: its Workload's PodSet comes from the wrapped Job, the copy carries the
origin label and the prebuilt Workload's name and no managedBy, no pod or Job starts on the manager,
the worker's whole status (phase, conditions, componentStatus) is mirrored onto the manager's
AppWrapper, which ends Succeeded; deleting it on the manager removes the copy; one evicted on its
worker is placed again."""

from __future__ import annotations

import pytest
from admission_kit import workload
from multikueue_kit import KEEP_RUNNING_ANNOTATION, check_state, condition, eventually, multikueue

from kube_runtime.conditions import find_status_condition
from kueue_domain import api

pytestmark = pytest.mark.realcluster

APPWRAPPER_FRAMEWORKS = ["batch/job", "workload.codeflare.dev/appwrapper"]


def appwrapper(
    name: str, pods: int = 1, cpu: str = "1", keep_running: bool = False, queue: str = "main"
) -> dict:
    """An AppWrapper of one batch/v1 Job of `pods` pods (the AppWrapper project's wrapped-job sample)."""
    template: dict = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}],
        }
    }
    if keep_running:
        template["metadata"] = {"annotations": {KEEP_RUNNING_ANNOTATION: "true"}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": pods, "completions": pods, "template": template},
    }
    return {
        "apiVersion": api.APPWRAPPER.api_version,
        "kind": api.APPWRAPPER.kind,
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: queue}},
        "spec": {"components": [{"template": job}]},
    }


def _for_manager(body: dict) -> dict:
    """As our webhook on the manager leaves it: suspended, managed by MultiKueue."""
    body["spec"]["suspend"] = True
    body["spec"]["managedBy"] = api.MANAGED_BY_MULTIKUEUE
    return body


async def test_an_appwrapper_runs_on_one_worker_and_succeeds_on_the_manager(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, frameworks=APPWRAPPER_FRAMEWORKS) as env:
        await kube.create(api.APPWRAPPER, _for_manager(appwrapper("wrapped", pods=2)), namespace=namespace)
        wl = await env.workload_of("AppWrapper", "wrapped")
        name = wl["metadata"]["name"]
        assert name.startswith("appwrapper-wrapped-")
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("wrapped-0", 2)]
        cluster = await env.placed(name)
        other = next(c for c in env.clusters if c != cluster)
        await env.wait_copies_gone(other, name)
        copy_ = await eventually(lambda: env.remote(cluster, api.APPWRAPPER, "wrapped"), timeout=30)
        assert copy_["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == name
        assert "managedBy" not in copy_["spec"]

        async def succeeded():
            current = await kube.get(api.APPWRAPPER, "wrapped", namespace)
            return current if (current.get("status") or {}).get("phase") == "Succeeded" else None

        done = await env.wait_for(succeeded, 120, name)
        # The worker's status, verbatim: the controller's conditions and what it deployed.
        assert condition(done, "QuotaReserved")["reason"] == "Succeeded"
        [component] = done["status"]["componentStatus"]
        assert (component["kind"], component["name"]) == ("Job", "wrapped")
        assert find_status_condition(component["conditions"], "ResourcesDeployed")["status"] == "True"

        async def finished():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            found = condition(current, api.WORKLOAD_FINISHED)
            return found if found and found["status"] == "True" else None

        found = await env.wait_for(finished, 30, name)
        assert (found["reason"], found["message"]) == ("Succeeded", "AppWrapper finished successfully")

        async def copy_gone():
            return await env.remote(cluster, api.APPWRAPPER, "wrapped") is None or None

        await eventually(copy_gone, timeout=60)
        pods, _ = await kube.list(api.POD, namespace=namespace)
        jobs, _ = await kube.list(api.JOB, namespace=namespace)
        assert pods == [] and jobs == [], "nothing may run on the manager cluster"


async def test_an_appwrapper_evicted_on_its_worker_is_placed_again_and_deleting_it_removes_the_copy(
    fleet, kube, namespace
):
    preemption = {"withinClusterQueue": "LowerPriority"}
    async with multikueue(
        fleet, kube, namespace, worker_preemption=preemption, frameworks=APPWRAPPER_FRAMEWORKS
    ) as env:
        body = _for_manager(appwrapper("evicted", pods=3, keep_running=True))
        await kube.create(api.APPWRAPPER, body, namespace=namespace)
        name = (await env.workload_of("AppWrapper", "evicted"))["metadata"]["name"]
        first = await env.placed(name)

        async def deployed(cluster: str):
            copy_ = await env.remote(cluster, api.APPWRAPPER, "evicted")
            return copy_ if (copy_ or {}).get("status", {}).get("phase") == "Running" else None

        await env.wait_for(lambda: deployed(first), 60, name)
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

        second = await env.wait_for(elsewhere, 120, name)
        await env.wait_for(lambda: deployed(second), 60, name)

        async def first_copy_gone():
            return await env.remote(first, api.APPWRAPPER, "evicted") is None or None

        await eventually(first_copy_gone, timeout=60)

        # Deleting the AppWrapper on the manager removes the copy (and its Job) and the Workloads.
        await kube.delete(api.APPWRAPPER, "evicted", namespace)

        async def all_gone():
            return (
                await env.remote(second, api.APPWRAPPER, "evicted") is None
                and await env.remote(second, api.JOB, "evicted") is None
                and not await env.remote(second, api.WORKLOAD, name)
                and await env.get(kube, api.WORKLOAD, name, namespace) is None
            ) or None

        await eventually(all_gone, timeout=90)
