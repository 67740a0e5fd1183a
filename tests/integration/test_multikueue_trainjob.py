"""A TrainJob submitted on the manager runs on one worker with the real Kubeflow Trainer and JobSet
controllers there: its Workload's PodSets come from the ClusterTrainingRuntime (on every cluster) and
the TrainJob's numNodes and resourcesPerNode; the copy carries the origin label and the prebuilt
Workload's name, no pod, Job or JobSet starts on the manager, the worker's status is mirrored onto the
manager's TrainJob, which ends Complete; a TrainJob too big for one worker goes to the other."""

from __future__ import annotations

import pytest
from admission_kit import unique
from multikueue_kit import (
    TRAIN_JOB_FRAMEWORKS,
    condition,
    eventually,
    multikueue,
    train_job,
    training_runtime,
)

from kueue_domain import api
from worker_agent.integrations.trainjob import new_kueue_runtime_patch

pytestmark = pytest.mark.realcluster


def _for_manager(body: dict) -> dict:
    """As our webhook on the manager leaves it: suspended, managed by MultiKueue, with the Kueue
    runtime patch."""
    body["spec"]["suspend"] = True
    body["spec"]["managedBy"] = api.MANAGED_BY_MULTIKUEUE
    body["spec"]["runtimePatches"] = [new_kueue_runtime_patch()]
    return body


async def _runtime_everywhere(env, **kwargs) -> str:
    """A ClusterTrainingRuntime of its own on the manager and on every worker."""
    name = unique("rt")
    for kube in (env.manager_kube, *env.worker_kubes.values()):
        await env.create(kube, api.CLUSTER_TRAINING_RUNTIME, training_runtime(name, **kwargs))
    return name


async def test_a_trainjob_runs_on_one_worker_and_completes_on_the_manager(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, frameworks=TRAIN_JOB_FRAMEWORKS) as env:
        runtime = await _runtime_everywhere(env)
        await kube.create(
            api.TRAIN_JOB, _for_manager(train_job("train", runtime, nodes=2)), namespace=namespace
        )
        wl = await env.workload_of("TrainJob", "train")
        name = wl["metadata"]["name"]
        assert name.startswith("trainjob-train-")
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("node", 2)]
        node = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
        assert node["resources"]["requests"]["cpu"] == "1"  # resourcesPerNode, not the runtime's 500m
        cluster = await env.placed(name)
        other = next(c for c in env.clusters if c != cluster)
        await env.wait_copies_gone(other, name)
        # The check turns Ready as the winner is recorded; the copy follows in the same reconcile.
        copy_ = await eventually(lambda: env.remote(cluster, api.TRAIN_JOB, "train"), timeout=30)
        assert copy_["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == name
        assert copy_["spec"].get("managedBy") in (None, api.TRAIN_JOB_MANAGED_BY_DEFAULT)

        async def completed():
            current = await kube.get(api.TRAIN_JOB, "train", namespace)
            found = condition(current, "Complete")
            return current if found and found["status"] == "True" else None

        done = await env.wait_for(completed, 90, name)
        assert [(s["name"], s.get("succeeded")) for s in done["status"]["jobsStatus"]] == [("node", 1)]

        async def finished():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            found = condition(current, api.WORKLOAD_FINISHED)
            return found if found and found["status"] == "True" else None

        assert (await env.wait_for(finished, 30, name))["reason"] == "Succeeded"

        async def copy_gone():
            return await env.remote(cluster, api.TRAIN_JOB, "train") is None or None

        await eventually(copy_gone, timeout=30)
        pods, _ = await kube.list(api.POD, namespace=namespace)
        jobs, _ = await kube.list(api.JOB, namespace=namespace)
        job_sets, _ = await kube.list(api.JOB_SET, namespace=namespace)
        assert pods == [] and jobs == [] and job_sets == [], "nothing may run on the manager cluster"


async def test_a_trainjob_too_big_for_one_worker_goes_to_the_other(fleet, kube, namespace):
    workers = {"worker1": "2", "worker2": "6"}
    async with multikueue(fleet, kube, namespace, worker_cpu=workers, frameworks=TRAIN_JOB_FRAMEWORKS) as env:
        runtime = await _runtime_everywhere(env, keep_running=True)
        await kube.create(
            api.TRAIN_JOB, _for_manager(train_job("big", runtime, nodes=4)), namespace=namespace
        )
        name = (await env.workload_of("TrainJob", "big"))["metadata"]["name"]
        cluster = await env.placed(name)
        assert env.clusters[cluster] == "worker2"

        async def runs_there():
            copy_ = await env.remote(cluster, api.TRAIN_JOB, "big")
            return copy_ if copy_ and copy_["spec"].get("suspend") is False else None

        await eventually(runs_there, timeout=30)
        # Deleting the TrainJob on the manager removes the copy and its Workloads everywhere.
        await kube.delete(api.TRAIN_JOB, "big", namespace)

        async def all_gone():
            return (
                await env.remote(cluster, api.TRAIN_JOB, "big") is None
                and not await env.remote(cluster, api.WORKLOAD, name)
                and await env.get(kube, api.WORKLOAD, name, namespace) is None
            ) or None

        await eventually(all_gone, timeout=60)
