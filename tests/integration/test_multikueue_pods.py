"""Plain pods and pod groups submitted on the manager run on one worker (upstream's pod MultiKueue
adapter): the worker gets a copy of each pod (origin label, prebuilt Workload name), its agent
admits the Workload copy and ungates the pods there; the manager's pods stay gated for good, take
their copies' status (PodScheduled=True once the worker's pod is scheduled), finish, and nothing is
left on the worker. kwok runs the workers' pods; only Job pods complete by themselves, so the test
ends a plain pod's run on its worker as a kubelet would, through its status."""

from __future__ import annotations

import contextlib

import pytest
from multikueue_kit import check_state, condition, eventually, multikueue

from kube_runtime.client import KubeClient, NotFound
from kueue_domain import api
from kueue_domain.naming import workload_name

pytestmark = pytest.mark.realcluster

FRAMEWORKS = ["batch/job", "pod"]


def managed_pod(name: str, cpu: str = "1", group: str | None = None, total: int = 0) -> dict:
    """What the pod webhook makes of a pod labelled with a queue name: managed, gated, finalized."""
    labels = {api.LABEL_QUEUE_NAME: "main", api.LABEL_MANAGED: api.VALUE_TRUE}
    annotations = {}
    if group:
        labels[api.LABEL_POD_GROUP_NAME] = group
        annotations[api.ANNOTATION_POD_GROUP_TOTAL_COUNT] = str(total)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": annotations,
            "finalizers": [api.FINALIZER_MANAGED],
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def gated(pod: dict) -> bool:
    return any(
        g.get("name") == api.SCHEDULING_GATE_ADMISSION
        for g in (pod.get("spec") or {}).get("schedulingGates") or ()
    )


def phase(pod: dict | None) -> str | None:
    return ((pod or {}).get("status") or {}).get("phase")


async def complete(kube: KubeClient, namespace: str, name: str) -> None:
    """End a running pod's run as its kubelet would (kwok completes only Job pods)."""
    pod = await kube.get(api.POD, name, namespace)
    conditions = [
        {**c, "status": "False", "reason": "PodCompleted"}
        if c.get("type") in ("Ready", "ContainersReady")
        else c
        for c in (pod.get("status") or {}).get("conditions") or ()
    ]
    status = {"phase": "Succeeded", "conditions": conditions}
    await kube.patch_status_merge(api.POD, name, {"status": status}, namespace=namespace)


@contextlib.asynccontextmanager
async def pods_released(kube: KubeClient, namespace: str):
    """Whatever happens, the manager's pods lose our finalizer at the end (the agent that would
    release it stops with the test), so that the namespace can go."""
    try:
        yield
    finally:
        items, _ = await kube.list(api.POD, namespace=namespace)
        for pod in items:
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(NotFound):
                    await kube.patch_merge(
                        api.POD, pod["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace
                    )


async def wait_ready(env, kube: KubeClient, namespace: str, name: str) -> str:
    """The check Ready on the manager's Workload `name`; returns the worker it was admitted on."""

    async def ready():
        current = await env.get(kube, api.WORKLOAD, name, namespace)
        state = check_state(current, env.check)
        return current if state and state["state"] == "Ready" else None

    admitted = await env.wait_for(ready, 40, name)
    cluster = admitted["status"]["clusterName"]
    assert check_state(admitted, env.check)["message"] == f'The workload was admitted on "{cluster}"'
    return cluster


async def wait_finished(env, kube: KubeClient, namespace: str, name: str) -> dict:
    async def finished():
        current = await env.get(kube, api.WORKLOAD, name, namespace)
        c = condition(current, api.WORKLOAD_FINISHED)
        return c if c and c["status"] == "True" else None

    return await env.wait_for(finished, 40, name)


async def test_pod_runs_on_a_worker_and_its_status_is_mirrored(fleet, kube, namespace):
    async with (
        pods_released(kube, namespace),
        multikueue(fleet, kube, namespace, frameworks=FRAMEWORKS) as env,
    ):
        created = await kube.create(api.POD, managed_pod("solo"), namespace=namespace)
        name = workload_name("solo", created["metadata"]["uid"], "Pod", "")
        cluster = await wait_ready(env, kube, namespace, name)
        other = next(c for c in env.clusters if c != cluster)
        await env.wait_copies_gone(other, name)
        assert await env.remote(other, api.POD, "solo") is None

        remote = await eventually(lambda: env.remote(cluster, api.POD, "solo"), timeout=30)
        assert remote["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert remote["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == name
        worker_kube = env.worker_kubes[env.clusters[cluster]]

        # The worker's agent adopts the prebuilt copy, ungates the pod; kwok runs it.
        async def running_there():
            pod = await env.remote(cluster, api.POD, "solo")
            return pod if pod and not gated(pod) and phase(pod) == "Running" else None

        await eventually(running_there, timeout=40)
        copy_ = await env.remote(cluster, api.WORKLOAD, name)
        assert [r["name"] for r in copy_["metadata"]["ownerReferences"] if r.get("controller")] == ["solo"]

        # The manager's pod stays gated, yet says it is scheduled and running (upstream's "Should
        # overwrite the manager Pod's SchedulingGated condition once it runs on the worker").
        async def running_here():
            pod = await kube.get(api.POD, "solo", namespace)
            scheduled = condition(pod, "PodScheduled")
            if phase(pod) == "Running" and scheduled and scheduled["status"] == "True":
                return pod
            return None

        pod = await eventually(running_here, timeout=30)
        assert gated(pod) and not pod["spec"].get("nodeName")

        await complete(worker_kube, namespace, "solo")

        async def succeeded_here():
            current = await kube.get(api.POD, "solo", namespace)
            return current if phase(current) == "Succeeded" else None

        pod = await eventually(succeeded_here, timeout=30)
        assert condition(pod, "PodScheduled")["status"] == "True"
        assert condition(pod, "Ready")["status"] == "False"
        assert gated(pod) and not pod["spec"].get("nodeName"), "the manager's pod never ran"
        assert (await wait_finished(env, kube, namespace, name))["reason"] == "Succeeded"

        async def nothing_left():
            return (
                not await env.remote(cluster, api.WORKLOAD, name)
                and not await env.remote(cluster, api.POD, "solo")
            ) or None

        await eventually(nothing_left, timeout=30)

        async def released():
            current = await kube.get(api.POD, "solo", namespace)
            return api.FINALIZER_MANAGED not in (current["metadata"].get("finalizers") or ()) or None

        await eventually(released, timeout=20)


async def test_pod_group_runs_on_one_worker(fleet, kube, namespace):
    async with (
        pods_released(kube, namespace),
        multikueue(fleet, kube, namespace, frameworks=FRAMEWORKS) as env,
    ):
        members = ("grp-a", "grp-b")
        for member in members:
            await kube.create(api.POD, managed_pod(member, group="grp", total=2), namespace=namespace)
        cluster = await wait_ready(env, kube, namespace, "grp")
        other = next(c for c in env.clusters if c != cluster)
        await env.wait_copies_gone(other, "grp")
        worker_kube = env.worker_kubes[env.clusters[cluster]]

        async def running_there():
            pods = [await env.remote(cluster, api.POD, m) for m in members]
            return pods if all(p and not gated(p) and phase(p) == "Running" for p in pods) else None

        for pod in await eventually(running_there, timeout=40):
            assert pod["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == "grp"
            assert pod["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == env.origin
        assert not [m for m in members if await env.remote(other, api.POD, m)]
        copy_ = await env.remote(cluster, api.WORKLOAD, "grp")
        assert sorted(r["name"] for r in copy_["metadata"]["ownerReferences"]) == list(members)

        for member in members:
            await complete(worker_kube, namespace, member)

        async def succeeded_here():
            pods = [await kube.get(api.POD, m, namespace) for m in members]
            return pods if all(phase(p) == "Succeeded" for p in pods) else None

        for pod in await eventually(succeeded_here, timeout=30):
            assert gated(pod) and not pod["spec"].get("nodeName"), "the manager's pods never ran"
        finished = await wait_finished(env, kube, namespace, "grp")
        assert (finished["reason"], finished["message"]) == ("Succeeded", "Pods succeeded: 2/2.")

        async def nothing_left():
            pods = [await env.remote(cluster, api.POD, m) for m in members]
            return (not any(pods) and not await env.remote(cluster, api.WORKLOAD, "grp")) or None

        await eventually(nothing_left, timeout=30)


async def test_deleting_a_running_pod_on_the_manager_removes_its_copy(fleet, kube, namespace):
    async with (
        pods_released(kube, namespace),
        multikueue(fleet, kube, namespace, frameworks=FRAMEWORKS) as env,
    ):
        created = await kube.create(api.POD, managed_pod("doomed"), namespace=namespace)
        name = workload_name("doomed", created["metadata"]["uid"], "Pod", "")
        cluster = await wait_ready(env, kube, namespace, name)

        async def running_here():
            return phase(await kube.get(api.POD, "doomed", namespace)) == "Running" or None

        await eventually(running_here, timeout=40)
        await kube.delete(api.POD, "doomed", namespace)

        async def gone():
            here = await env.get(kube, api.POD, "doomed", namespace)
            there = await env.remote(cluster, api.POD, "doomed")
            return (
                here is None and there is None and not await env.remote(cluster, api.WORKLOAD, name)
            ) or None

        await env.wait_for(gone, 40, name)


def stamped_deployment(name: str, replicas: int, cpu: str = "500m") -> dict:
    """A Deployment as the Deployment webhook leaves it (its pod template stamped for the pod
    integration), its template also gated as the pod webhook would gate each pod."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: "main"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name, api.LABEL_MANAGED: api.VALUE_TRUE, api.LABEL_QUEUE_NAME: "main"},
                    "annotations": {api.ANNOTATION_POD_SUSPENDING_PARENT: api.FRAMEWORK_DEPLOYMENT},
                },
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}],
                    "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}],
                },
            },
        },
    }


async def test_deployment_pods_run_on_workers_and_the_deployment_is_ready(fleet, kube, namespace):
    """Upstream's "Should create pods on worker if the deployment is admitted": each pod is a
    single-pod Workload dispatched on its own; the manager's ReplicaSet controller counts the
    manager's pods ready from their mirrored status, so the Deployment reports ready replicas."""
    frameworks = ["batch/job", "deployment"]
    async with (
        pods_released(kube, namespace),
        multikueue(fleet, kube, namespace, frameworks=frameworks) as env,
    ):
        await kube.create(api.DEPLOYMENT, stamped_deployment("web", 2), namespace=namespace)

        async def ready(count: int):
            current = await kube.get(api.DEPLOYMENT, "web", namespace)
            status = current.get("status") or {}
            return (
                status if status.get("readyReplicas") == count and status.get("replicas") == count else None
            )

        await eventually(lambda: ready(2), timeout=60)

        async def placed() -> dict[str, str] | None:
            pods, _ = await kube.list(api.POD, namespace=namespace, label_selector="app=web")
            where = {}
            for pod in pods:
                assert gated(pod) and not pod["spec"].get("nodeName"), "a manager pod ran"
                meta = pod["metadata"]
                wl_name = workload_name(meta["name"], meta["uid"], "Pod", "")
                wl = await env.get(kube, api.WORKLOAD, wl_name, namespace)
                state = check_state(wl, env.check)
                if state is None or state["state"] != "Ready":
                    return None
                where[pod["metadata"]["name"]] = wl["status"]["clusterName"]
            return where if len(where) == 2 else None

        for pod_name, cluster in (await eventually(placed, timeout=30)).items():
            assert phase(await env.remote(cluster, api.POD, pod_name)) == "Running"

        # Scaling up adds a pod, dispatched on its own.
        await kube.patch_merge(api.DEPLOYMENT, "web", {"spec": {"replicas": 3}}, namespace)
        await eventually(lambda: ready(3), timeout=60)

        # Deleting the Deployment deletes the manager's pods, then their copies.
        await kube.delete(api.DEPLOYMENT, "web", namespace, propagation_policy="Foreground")

        async def all_gone():
            here, _ = await kube.list(api.POD, namespace=namespace, label_selector="app=web")
            there = []
            for worker_kube in env.worker_kubes.values():
                items, _ = await worker_kube.list(api.POD, namespace=namespace, label_selector="app=web")
                there += items
            return (not here and not there) or None

        await eventually(all_gone, timeout=60)
