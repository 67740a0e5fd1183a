"""A RayJob, a RayCluster and a RayService submitted on the manager each run on one worker with the
real KubeRay operator there (its Ray dashboard the fleet's stand-in): the copy carries the origin
label and the prebuilt Workload's name, no pod, Job or RayCluster of it starts on the manager, the
worker's whole status is mirrored onto the manager's object; the RayJob ends Complete and its
Workload Finished; the RayService shows Ready, and its copy gets a serveConfigV2 edited on the
manager in place; deleting a RayCluster or RayService on the manager removes the copy; a
RayCluster evicted on its worker is placed again."""

from __future__ import annotations

import pytest
from admission_kit import workload
from multikueue_kit import condition, eventually, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster

RAY_FRAMEWORKS = ["batch/job", "ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice"]
IMAGE = "rayproject/ray:2.41.0"


def _pod(name: str, cpu: str) -> dict:
    return {"spec": {"containers": [{"name": name, "image": IMAGE, "resources": {"requests": {"cpu": cpu}}}]}}


def _cluster_spec(workers: int) -> dict:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": _pod("ray-head", "1")},
        "workerGroupSpecs": [
            {
                "groupName": "workers",
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {},
                "template": _pod("ray-worker", "500m"),
            }
        ],
    }


def _meta(name: str) -> dict:
    return {"name": name, "labels": {api.LABEL_QUEUE_NAME: "main"}}


def ray_job(name: str, workers: int = 1) -> dict:
    """As our webhook on the manager leaves it: suspended, managed by MultiKueue."""
    return {
        "apiVersion": api.RAY_JOB.api_version,
        "kind": api.RAY_JOB.kind,
        "metadata": _meta(name),
        "spec": {
            "suspend": True,
            "managedBy": api.MANAGED_BY_MULTIKUEUE,
            "entrypoint": "python -c 'import ray; ray.init()'",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": _cluster_spec(workers),
        },
    }


def ray_cluster(name: str, workers: int = 1) -> dict:
    spec = {"suspend": True, "managedBy": api.MANAGED_BY_MULTIKUEUE, **_cluster_spec(workers)}
    return {
        "apiVersion": api.RAY_CLUSTER.api_version,
        "kind": api.RAY_CLUSTER.kind,
        "metadata": _meta(name),
        "spec": spec,
    }


def ray_service(name: str) -> dict:
    config = {"suspend": True, **_cluster_spec(1)}
    serve = "applications:\n- name: hello\n  import_path: hello:app\n  deployments:\n  - name: Hello\n"
    return {
        "apiVersion": api.RAY_SERVICE.api_version,
        "kind": api.RAY_SERVICE.kind,
        "metadata": _meta(name),
        "spec": {"managedBy": api.MANAGED_BY_MULTIKUEUE, "serveConfigV2": serve, "rayClusterConfig": config},
    }


async def test_a_rayjob_runs_on_one_worker_and_completes_on_the_manager(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, frameworks=RAY_FRAMEWORKS, memory="64Gi") as env:
        await kube.create(api.RAY_JOB, ray_job("ray"), namespace=namespace)
        wl = await env.workload_of("RayJob", "ray")
        name = wl["metadata"]["name"]
        assert name.startswith("rayjob-ray-")
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [
            ("head", 1),
            ("workers", 1),
            ("submitter", 1),
        ]
        cluster = await env.placed(name)
        copy_ = await eventually(lambda: env.remote(cluster, api.RAY_JOB, "ray"), timeout=30)
        assert copy_["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == name
        assert copy_["spec"].get("managedBy") in (None, "ray.io/kuberay-operator")

        async def completed():
            current = await kube.get(api.RAY_JOB, "ray", namespace)
            status = current.get("status") or {}
            return current if status.get("jobDeploymentStatus") == "Complete" else None

        done = await env.wait_for(completed, 120, name)
        # The worker's whole status: the Ray job's, the deployment's and its RayCluster's.
        assert done["status"]["jobStatus"] == "SUCCEEDED"
        assert done["status"]["rayClusterName"].startswith("ray-")
        assert done["status"]["jobId"]

        async def finished():
            current = await env.get(kube, api.WORKLOAD, name, namespace)
            found = condition(current, api.WORKLOAD_FINISHED)
            return found if found and found["status"] == "True" else None

        assert (await env.wait_for(finished, 30, name))["reason"] == "Succeeded"

        async def copy_gone():
            return await env.remote(cluster, api.RAY_JOB, "ray") is None or None

        await eventually(copy_gone, timeout=60)
        for resource in (api.POD, api.JOB, api.RAY_CLUSTER):
            items, _ = await kube.list(resource, namespace=namespace)
            assert items == [], f"no {resource.plural} may be made on the manager cluster"


async def test_a_raycluster_runs_on_one_worker_and_its_deletion_removes_the_copy(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, frameworks=RAY_FRAMEWORKS, memory="64Gi") as env:
        await kube.create(api.RAY_CLUSTER, ray_cluster("rc", workers=2), namespace=namespace)
        wl = await env.workload_of("RayCluster", "rc")
        name = wl["metadata"]["name"]
        assert name.startswith("raycluster-rc-")
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("head", 1), ("workers", 2)]
        cluster = await env.placed(name)

        async def ready():
            current = await kube.get(api.RAY_CLUSTER, "rc", namespace)
            status = current.get("status") or {}
            return (
                current if status.get("state") == "ready" and status.get("readyWorkerReplicas") == 2 else None
            )

        shown = await env.wait_for(ready, 90, name)
        assert shown["status"]["desiredWorkerReplicas"] == 2
        assert shown["status"]["head"]["serviceName"]
        pods, _ = await kube.list(api.POD, namespace=namespace)
        assert pods == [], "no pod may start on the manager cluster"

        await kube.delete(api.RAY_CLUSTER, "rc", namespace)

        async def all_gone():
            return (
                await env.remote(cluster, api.RAY_CLUSTER, "rc") is None
                and not await env.remote(cluster, api.WORKLOAD, name)
                and await env.get(kube, api.WORKLOAD, name, namespace) is None
            ) or None

        await eventually(all_gone, timeout=60)


async def test_a_raycluster_evicted_on_its_worker_is_placed_again(fleet, kube, namespace):
    preemption = {"withinClusterQueue": "LowerPriority"}
    async with multikueue(
        fleet, kube, namespace, worker_preemption=preemption, frameworks=RAY_FRAMEWORKS, memory="64Gi"
    ) as env:
        await kube.create(api.RAY_CLUSTER, ray_cluster("evicted", workers=2), namespace=namespace)
        name = (await env.workload_of("RayCluster", "evicted"))["metadata"]["name"]
        first = await env.placed(name)
        worker_kube = env.worker_kubes[env.clusters[first]]
        await worker_kube.create(
            api.WORKLOAD,
            workload(namespace, "urgent", "main", {"cpu": "4"}, priority=100),
            namespace=namespace,
        )
        second = await env.placed(name, seconds=90, not_on=first)

        async def copy_runs():
            copy_ = await env.remote(second, api.RAY_CLUSTER, "evicted")
            return copy_ if copy_ and copy_["spec"].get("suspend") is False else None

        await eventually(copy_runs, timeout=30)

        async def first_copy_gone():
            return await env.remote(first, api.RAY_CLUSTER, "evicted") is None or None

        await eventually(first_copy_gone, timeout=60)

        async def ready_again():
            current = await kube.get(api.RAY_CLUSTER, "evicted", namespace)
            return current if (current.get("status") or {}).get("state") == "ready" else None

        await env.wait_for(ready_again, 90, name)


async def test_a_rayservice_runs_on_one_worker_and_is_ready_on_the_manager(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, frameworks=RAY_FRAMEWORKS, memory="64Gi") as env:
        await kube.create(api.RAY_SERVICE, ray_service("serve"), namespace=namespace)
        wl = await env.workload_of("RayService", "serve")
        name = wl["metadata"]["name"]
        assert name.startswith("rayservice-serve-")
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("head", 1), ("workers", 1)]
        cluster = await env.placed(name)

        async def ready():
            current = await kube.get(api.RAY_SERVICE, "serve", namespace)
            return (
                current
                if condition(current, "Ready") and condition(current, "Ready")["status"] == "True"
                else None
            )

        shown = await env.wait_for(ready, 90, name)
        # Unsuspended on the manager (MultiKueue's), the worker's status shown there.
        assert shown["spec"]["rayClusterConfig"]["suspend"] is False
        assert shown["status"]["activeServiceStatus"]["rayClusterName"].startswith("serve-")
        for resource in (api.POD, api.RAY_CLUSTER):
            items, _ = await kube.list(resource, namespace=namespace)
            assert items == [], f"no {resource.plural} may be made on the manager cluster"

        # An edit of serveConfigV2 on the manager goes to the same copy, in place.
        before = await env.remote(cluster, api.RAY_SERVICE, "serve")
        edited = shown["spec"]["serveConfigV2"] + "  num_replicas: 2\n"
        await kube.patch_merge(api.RAY_SERVICE, "serve", {"spec": {"serveConfigV2": edited}}, namespace)

        async def forwarded():
            copy_ = await env.remote(cluster, api.RAY_SERVICE, "serve")
            return copy_ if copy_ and copy_["spec"].get("serveConfigV2") == edited else None

        after = await eventually(forwarded, timeout=30)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]

        await kube.delete(api.RAY_SERVICE, "serve", namespace)

        async def all_gone():
            return (
                await env.remote(cluster, api.RAY_SERVICE, "serve") is None
                and await env.get(kube, api.WORKLOAD, name, namespace) is None
            ) or None

        await eventually(all_gone, timeout=60)
