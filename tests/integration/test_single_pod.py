"""A single managed pod (queue-name label, no group) runs as its own Workload `pod-<name>-<hash>`:
ungated with the flavor's node labels once admitted, Finished when the pod ends."""

from __future__ import annotations

import contextlib

import pytest
from admission_kit import (
    cluster_queue,
    condition,
    eventually,
    local_queue,
    priority_classes,
    priority_of,
    relabel_priority,
    resource_flavor,
    running_agent,
    unique,
    with_priority,
)

from kube_runtime.client import NotFound
from kueue_domain import api
from kueue_domain.naming import workload_name

pytestmark = pytest.mark.realcluster


async def test_single_pod_is_admitted_ungated_and_finished(kube, cluster):
    ns = cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf, node_labels={"pool": "blue"}))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "2"}}))
    await cluster.create(local_queue(ns, "main", cq))
    # What the pod webhook makes of a pod with a queue-name label.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "solo",
            "labels": {api.LABEL_QUEUE_NAME: "main", api.LABEL_MANAGED: "true"},
            "finalizers": [api.FINALIZER_MANAGED],
        },
        "spec": {
            "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    created = await kube.create(api.POD, pod, namespace=ns)
    expected = workload_name("solo", created["metadata"]["uid"], "Pod", "")
    assert expected.startswith("pod-solo-")
    async with running_agent(kube, {"integrations": {"frameworks": ["pod"]}}):
        await eventually(lambda: cluster.admitted(expected))

        async def ungated():
            current = await kube.get(api.POD, "solo", namespace=ns)
            return current if not current["spec"].get("schedulingGates") else None

        current = await eventually(ungated)
        assert current["spec"]["nodeSelector"] == {"pool": "blue"}
        assert current["metadata"]["labels"][api.LABEL_PODSET] == "main"
        await kube.patch_status_merge(api.POD, "solo", {"status": {"phase": "Succeeded"}}, namespace=ns)

        async def finished():
            wl = await cluster.wl(expected)
            c = condition(wl, api.WORKLOAD_FINISHED)
            return c if c and c["status"] == "True" else None

        c = await eventually(finished)
        assert c["reason"] == "Succeeded"

        async def pod_released():
            current = await kube.get(api.POD, "solo", namespace=ns)
            return api.FINALIZER_MANAGED not in (current["metadata"].get("finalizers") or ())

        await eventually(pod_released)


async def test_a_gated_pod_relabelled_to_another_priority_class_moves_its_workload(kube, cluster):
    """A single pod's `kueue.x-k8s.io/priority-class` label changed while it waits (gated, over
    quota): its Workload takes the new class and value."""
    ns = cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "1"}}))
    await cluster.create(local_queue(ns, "main", cq))
    classes = await priority_classes(cluster)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "waiting",
            "labels": {
                api.LABEL_QUEUE_NAME: "main",
                api.LABEL_MANAGED: "true",
                api.LABEL_PRIORITY_CLASS: classes["low"],
            },
            "finalizers": [api.FINALIZER_MANAGED],
        },
        "spec": {
            "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}],
        },
    }
    created = await kube.create(api.POD, pod, namespace=ns)
    name = workload_name("waiting", created["metadata"]["uid"], "Pod", "")
    try:
        async with running_agent(kube, {"integrations": {"frameworks": ["pod"]}}):
            wl = await eventually(lambda: cluster.wl(name))
            assert priority_of(wl) == (classes["low"], 100)
            await relabel_priority(kube, api.POD, "waiting", ns, classes["high"])
            await eventually(lambda: with_priority(cluster, [name], classes["high"], 300))
    finally:
        for resource, obj in ((api.POD, "waiting"), (api.WORKLOAD, name)):
            with contextlib.suppress(NotFound):
                await kube.patch_merge(resource, obj, {"metadata": {"finalizers": None}}, namespace=ns)


async def test_deleting_an_admitted_pod_finishes_its_workload_and_frees_the_quota(kube, cluster):
    """Upstream's finalizeWorkloads: a single pod being deleted (or gone, when it had no finalizer,
    as a Deployment's pods) finishes its Workload with OwnerNotFound, which releases the quota."""
    ns = cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "1"}}))
    await cluster.create(local_queue(ns, "main", cq))

    def managed(name: str, finalizer: bool) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {api.LABEL_QUEUE_NAME: "main", api.LABEL_MANAGED: "true"},
                "finalizers": [api.FINALIZER_MANAGED] if finalizer else [],
            },
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}],
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
            },
        }

    async with running_agent(kube, {"integrations": {"frameworks": ["pod"]}}):
        for name, finalizer in (("first", True), ("second", False)):
            created = await kube.create(api.POD, managed(name, finalizer), namespace=ns)
            expected = workload_name(name, created["metadata"]["uid"], "Pod", "")
            await eventually(lambda expected=expected: cluster.admitted(expected), timeout=30)
            await kube.delete(api.POD, name, namespace=ns)

            async def released(expected=expected):
                wl = await cluster.wl(expected)
                if wl is None:
                    return True
                c = condition(wl, api.WORKLOAD_FINISHED)
                return (c and c["status"] == "True" and c["reason"] == "OwnerNotFound") or None

            await eventually(released, timeout=30)

            async def pod_gone(name=name):
                items, _ = await kube.list(api.POD, namespace=ns)
                return not [p for p in items if p["metadata"]["name"] == name] or None

            await eventually(pod_gone, timeout=30)
