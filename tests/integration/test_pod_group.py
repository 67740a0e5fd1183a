"""Plain pod groups on one cluster: pods of a group that never became complete (fewer pods than
`pod-group-total-count`, so no Workload) are not held by the `kueue.x-k8s.io/managed` finalizer
when deleted (upstream's "incomplete group deleted" spec: they stayed Terminating for good)."""

from __future__ import annotations

import pytest
from admission_kit import cluster_queue, eventually, local_queue, resource_flavor, running_agent, unique

from kube_runtime.client import NotFound
from kueue_domain import api

pytestmark = pytest.mark.realcluster


def group_pod(name: str, group: str, total: int) -> dict:
    """A pod of a group as the pod webhook leaves it: gated, with our finalizer."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                api.LABEL_QUEUE_NAME: "main",
                api.LABEL_MANAGED: "true",
                api.LABEL_POD_GROUP_NAME: group,
            },
            "annotations": {api.ANNOTATION_POD_GROUP_TOTAL_COUNT: str(total)},
            "finalizers": [api.FINALIZER_MANAGED],
        },
        "spec": {
            "schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


async def test_deleted_pods_of_an_incomplete_group_leave_no_pod_behind(kube, cluster):
    ns = cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}))
    await cluster.create(local_queue(ns, "main", cq))
    names = ["incomplete-0", "incomplete-1"]
    async with running_agent(kube, {"integrations": {"frameworks": ["pod"]}}):
        for name in names:  # two of the three pods the group announces
            await kube.create(api.POD, group_pod(name, "incomplete", 3), namespace=ns)

        async def no_workload():
            items, _ = await kube.list(api.WORKLOAD, namespace=ns)
            return not items

        assert await no_workload(), "an incomplete group has no Workload"
        for name in names:
            await kube.delete(api.POD, name, ns)

        async def gone():
            for name in names:
                try:
                    await kube.get(api.POD, name, namespace=ns)
                    return False
                except NotFound:
                    continue
            return True

        await eventually(gone, timeout=30)
