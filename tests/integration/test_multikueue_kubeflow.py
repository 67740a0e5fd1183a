"""Kubeflow jobs submitted on the manager run on one worker with the real operators there (the
training-operator for PyTorchJobs and TFJobs, the MPI Operator for MPIJobs, whose launcher is a
batch/v1 Job): the Workload's PodSets are the replica types in upstream's order, the copy carries
the origin label and the prebuilt Workload's name with runPolicy.managedBy cleared, no pod starts on
the manager, the worker's status (conditions, replicaStatuses) is mirrored onto the manager's job,
which ends Succeeded; its Workload finishes and the copy goes. A PyTorchJob evicted on its worker is
placed again on the other one, and deleting it on the manager removes the copy and its Workloads."""

from __future__ import annotations

import copy

import pytest
from admission_kit import workload
from multikueue_kit import KEEP_RUNNING_ANNOTATION, check_state, condition, eventually, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster

FRAMEWORKS = ["batch/job", api.FRAMEWORK_PYTORCH_JOB, api.FRAMEWORK_TF_JOB, api.FRAMEWORK_MPI_JOB]


# The container name each operator's validation requires (the MPI Operator has no webhook).
CONTAINER = {"PyTorchJob": "pytorch", "TFJob": "tensorflow", "MPIJob": "mpi"}


def kubeflow_job(
    resource: api.Resource, field: str, name: str, replicas: dict[str, int], keep_running: bool = False
) -> dict:
    """A job of `resource` with `replicas` (replica type -> count) of one 1-cpu container each, as
    our webhook on the manager leaves it: suspended and managed by MultiKueue, queued to `main`."""
    requests = {"requests": {"cpu": "1"}}
    container = {"name": CONTAINER[resource.kind], "image": "busybox", "resources": requests}
    pod: dict = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    if keep_running:
        pod["metadata"] = {"annotations": {KEEP_RUNNING_ANNOTATION: "true"}}
    specs = {
        t: {"replicas": n, "restartPolicy": "Never", "template": copy.deepcopy(pod)}
        for t, n in replicas.items()
    }
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: "main"}},
        "spec": {field: specs, "runPolicy": {"suspend": True, "managedBy": api.MANAGED_BY_MULTIKUEUE}},
    }


def pytorch_job(name: str, keep_running: bool = False) -> dict:
    return kubeflow_job(
        api.PYTORCH_JOB, "pytorchReplicaSpecs", name, {"Master": 1, "Worker": 2}, keep_running
    )


def tf_job(name: str) -> dict:
    return kubeflow_job(api.TF_JOB, "tfReplicaSpecs", name, {"Worker": 2, "PS": 1})


def mpi_job(name: str) -> dict:
    body = kubeflow_job(api.MPI_JOB, "mpiReplicaSpecs", name, {"Worker": 2, "Launcher": 1})
    for spec in body["spec"]["mpiReplicaSpecs"].values():
        spec.pop("restartPolicy")  # v2beta1's ReplicaSpec has one too, but the launcher's Job sets its own
    body["spec"]["slotsPerWorker"] = 1
    return body


@pytest.mark.parametrize(
    ("resource", "body", "podsets", "finisher"),
    [
        (api.PYTORCH_JOB, pytorch_job("torch"), [("master", 1), ("worker", 2)], "Master"),
        (api.TF_JOB, tf_job("tf"), [("ps", 1), ("worker", 2)], "Worker"),
        (api.MPI_JOB, mpi_job("mpi"), [("launcher", 1), ("worker", 2)], "Launcher"),
    ],
    ids=["pytorchjob", "tfjob", "mpijob"],
)
async def test_a_kubeflow_job_runs_on_one_worker_and_succeeds_on_the_manager(
    fleet, kube, namespace, resource, body, podsets, finisher
):
    name = body["metadata"]["name"]
    async with multikueue(fleet, kube, namespace, frameworks=FRAMEWORKS) as env:
        await kube.create(resource, copy.deepcopy(body), namespace=namespace)
        wl = await env.workload_of(resource.kind, name)
        wl_name = wl["metadata"]["name"]
        assert wl_name.startswith(f"{resource.kind.lower()}-{name}-")
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == podsets
        cluster = await env.placed(wl_name)
        other = next(c for c in env.clusters if c != cluster)
        await env.wait_copies_gone(other, wl_name)
        copy_ = await eventually(lambda: env.remote(cluster, resource, name), timeout=30)
        assert copy_["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == wl_name
        assert copy_["spec"]["runPolicy"].get("managedBy") in (
            None,
            "kubeflow.org/training-operator",
            "kubeflow.org/mpi-operator",
        )

        async def succeeded():
            current = await kube.get(resource, name, namespace)
            found = condition(current, api.KUBEFLOW_CONDITION_SUCCEEDED)
            return current if found and found["status"] == "True" else None

        done = await env.wait_for(succeeded, 120, wl_name)
        # The worker's status, verbatim: the replica that ends the job succeeded, nothing of it active.
        ended = done["status"]["replicaStatuses"][finisher]
        assert int(ended.get("succeeded") or 0) >= 1 and not ended.get("active"), done["status"]
        if resource is api.PYTORCH_JOB:
            assert ended["selector"] == (
                f"training.kubeflow.org/job-name={name},training.kubeflow.org/operator-name=pytorchjob-controller,"
                "training.kubeflow.org/replica-type=master"
            )

        async def finished():
            current = await env.get(kube, api.WORKLOAD, wl_name, namespace)
            found = condition(current, api.WORKLOAD_FINISHED)
            return found if found and found["status"] == "True" else None

        assert (await env.wait_for(finished, 30, wl_name))["reason"] == "Succeeded"

        async def copy_gone():
            return await env.remote(cluster, resource, name) is None or None

        await eventually(copy_gone, timeout=30)
        pods, _ = await kube.list(api.POD, namespace=namespace)
        jobs, _ = await kube.list(api.JOB, namespace=namespace)
        assert pods == [] and jobs == [], "nothing may run on the manager cluster"


async def test_a_pytorchjob_evicted_on_its_worker_is_placed_again_and_deleting_it_removes_the_copy(
    fleet, kube, namespace
):
    preemption = {"withinClusterQueue": "LowerPriority"}
    async with multikueue(fleet, kube, namespace, worker_preemption=preemption, frameworks=FRAMEWORKS) as env:
        await kube.create(api.PYTORCH_JOB, pytorch_job("evicted", keep_running=True), namespace=namespace)
        name = (await env.workload_of("PyTorchJob", "evicted"))["metadata"]["name"]
        first = await env.placed(name)

        async def runs_there(cluster: str):
            copy_ = await env.remote(cluster, api.PYTORCH_JOB, "evicted")
            return copy_ if copy_ and copy_["spec"]["runPolicy"].get("suspend") is False else None

        await eventually(lambda: runs_there(first), timeout=30)
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
        await eventually(lambda: runs_there(second), timeout=30)

        async def first_copy_gone():
            return await env.remote(first, api.PYTORCH_JOB, "evicted") is None or None

        await eventually(first_copy_gone, timeout=60)

        async def mirrored_running():
            current = await kube.get(api.PYTORCH_JOB, "evicted", namespace)
            found = condition(current, api.KUBEFLOW_CONDITION_RUNNING)
            return current if found and found["status"] == "True" else None

        await env.wait_for(mirrored_running, 60, name)
        await kube.delete(api.PYTORCH_JOB, "evicted", namespace)

        async def all_gone():
            return (
                await env.remote(second, api.PYTORCH_JOB, "evicted") is None
                and not await env.remote(second, api.WORKLOAD, name)
                and await env.get(kube, api.WORKLOAD, name, namespace) is None
            ) or None

        await eventually(all_gone, timeout=60)
        pods, _ = await kube.list(api.POD, namespace=namespace)
        assert pods == [], "nothing may run on the manager cluster"
