"""MultiKueue manager quota automation (feature gate MultiKueueManagerQuotaAutomation), against
the fleet: the manager ClusterQueue's quotas and its MultiKueueManagerQuotaAutomation condition
follow the worker ClusterQueues behind LocalQueues of the same namespace and name (upstream's e2e
"should automatically aggregate quotas from active worker ClusterQueues", then changes, a new
queue, a worker going inactive and back, an uncovered resource, Manual again, no check); with the
gate off nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from admission_kit import consistently, local_queue, resource_flavor, unique
from multikueue_kit import CONFIG_NAMESPACE, MultiKueueEnv, condition, eventually, multikueue

from kube_runtime.client import KubeClient
from kueue_domain import api

pytestmark = pytest.mark.realcluster

Obj = dict[str, Any]
GATE_ON = {"featureGates": {"MultiKueueManagerQuotaAutomation": True}}
GPU_H, GPU_L = "example.com/gpu-h100", "example.com/gpu-v100s"
RESOURCES = ["cpu", "memory", "ephemeral-storage", GPU_H, GPU_L]
# upstream's baseline e2e suite: worker1's and worker2's ClusterQueues.
WORKER1 = {"cpu": "2", "memory": "1G", "ephemeral-storage": "15G", GPU_H: "2", GPU_L: "1"}
WORKER2 = {"cpu": "1200m", "memory": "4G", "ephemeral-storage": "5G", GPU_H: "1", GPU_L: "2"}
CONDITION = "MultiKueueManagerQuotaAutomation"


async def queue_of(kube: KubeClient, namespace: str, lq: str = "main") -> str:
    return (await kube.get(api.LOCAL_QUEUE, lq, namespace))["spec"]["clusterQueue"]


async def set_quotas(kube: KubeClient, cq_name: str, quotas: dict[str, str]) -> None:
    """One flavor (the queue's first) with `quotas`, covering exactly those resources."""
    cq = await kube.get(api.CLUSTER_QUEUE, cq_name)
    group = cq["spec"]["resourceGroups"][0]
    flavor = group["flavors"][0]["name"]
    resources = [{"name": r, "nominalQuota": q} for r, q in quotas.items()]
    body = {"coveredResources": list(quotas), "flavors": [{"name": flavor, "resources": resources}]}
    await kube.patch_merge(api.CLUSTER_QUEUE, cq_name, {"spec": {"resourceGroups": [body]}})


async def set_mode(env: MultiKueueEnv, mode: str | None) -> None:
    await env.manager_kube.patch_merge(
        api.MULTIKUEUE_CONFIG_V1BETA2, env.config_name, {"spec": {"quotaManagement": mode}}
    )


def quotas(cq: Obj) -> dict[str, str]:
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    return {r["name"]: r["nominalQuota"] for f in flavors for r in f.get("resources") or ()}


def state(cq: Obj) -> tuple[str, str, str] | None:
    c = condition(cq, CONDITION)
    return (c["status"], c["reason"], c["message"]) if c else None


async def wait_manager(
    env: MultiKueueEnv, name: str, expected_quotas: dict[str, str] | None, expected_state: Any
) -> Obj:
    """Until the manager ClusterQueue shows these quotas (None: any) and condition (None: absent),
    the condition written for the ClusterQueue's current generation (a quota write comes first)."""

    async def reached() -> Obj | None:
        cq = await env.manager_kube.get(api.CLUSTER_QUEUE, name)
        ok = state(cq) == expected_state and (expected_quotas is None or quotas(cq) == expected_quotas)
        written = condition(cq, CONDITION)
        current = written is None or written.get("observedGeneration") == cq["metadata"]["generation"]
        return cq if ok and current else None

    try:
        return await eventually(reached, timeout=30)
    except AssertionError:
        cq = await env.manager_kube.get(api.CLUSTER_QUEUE, name)
        raise AssertionError(f"manager ClusterQueue: quotas {quotas(cq)}, condition {state(cq)}") from None


AUTOMATED = (
    "True",
    "QuotaAutomated",
    "ClusterQueue quota is automatically managed based on MultiKueue workers.",
)
NOT_REQUESTED = ("False", "NotRequested", "MultiKueue manager quota automation has not been requested.")


async def e2e_shape(env: MultiKueueEnv, namespace: str) -> tuple[str, dict[str, str]]:
    """upstream's e2e setup: the worker queues' quotas, the manager queue's resources at zero."""
    workers = {}
    for worker, values in (("worker1", WORKER1), ("worker2", WORKER2)):
        workers[worker] = await queue_of(env.worker_kubes[worker], namespace)
        await set_quotas(env.worker_kubes[worker], workers[worker], values)
    manager_cq = await queue_of(env.manager_kube, namespace)
    await set_quotas(env.manager_kube, manager_cq, dict.fromkeys(RESOURCES, "0"))
    return manager_cq, workers


async def test_manager_quotas_follow_worker_queues(fleet, kube, namespace):
    async with multikueue(
        fleet,
        kube,
        namespace,
        worker_cpu={"worker1": "2", "worker2": "1"},
        manager_cpu="0",
        manager_config=GATE_ON,
    ) as env:
        manager_cq, workers = await e2e_shape(env, namespace)
        zero = dict.fromkeys(RESOURCES, "0")
        # A MultiKueue ClusterQueue whose config does not ask for automation: said so, quotas kept.
        await wait_manager(env, manager_cq, zero, NOT_REQUESTED)

        # The e2e spec: Automated sums the active workers' queues.
        await set_mode(env, api.QUOTA_MANAGEMENT_AUTOMATED)
        expected = {"cpu": "3200m", "memory": "5G", "ephemeral-storage": "20G", GPU_H: "3", GPU_L: "3"}
        cq = await wait_manager(env, manager_cq, expected, AUTOMATED)
        assert condition(cq, CONDITION)["observedGeneration"] == cq["metadata"]["generation"]
        assert condition(cq, "Active")["status"] == "True"  # the agent's condition is left alone

        # A worker queue changes.
        await set_quotas(env.worker_kubes["worker2"], workers["worker2"], {**WORKER2, "cpu": "2"})
        expected = {**expected, "cpu": "4"}
        await wait_manager(env, manager_cq, expected, AUTOMATED)

        # A new queue pair: a manager LocalQueue `second` and, on worker1, a ClusterQueue behind a
        # LocalQueue of the same name.
        rf, extra = unique("rf"), unique("cq")
        w1 = env.worker_kubes["worker1"]
        await env.create(w1, api.RESOURCE_FLAVOR, resource_flavor(rf))
        await env.create(
            w1,
            api.CLUSTER_QUEUE,
            {
                "apiVersion": api.API_VERSION,
                "kind": "ClusterQueue",
                "metadata": {"name": extra},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [{"name": rf, "resources": [{"name": "cpu", "nominalQuota": "1"}]}],
                        }
                    ],
                },
            },
        )
        await w1.create(api.LOCAL_QUEUE, local_queue(namespace, "second", extra), namespace=namespace)
        await consistently(
            lambda: _quotas_are(env, manager_cq, expected), duration=2
        )  # the manager has no LocalQueue `second` yet
        await kube.create(api.LOCAL_QUEUE, local_queue(namespace, "second", manager_cq), namespace=namespace)
        expected = {**expected, "cpu": "5"}
        await wait_manager(env, manager_cq, expected, AUTOMATED)

        # worker2 inactive (its kubeconfig Secret gone): left out of the sum; back when it returns.
        cluster2 = next(c for c, w in env.clusters.items() if w == "worker2")
        await kube.delete(api.SECRET, f"{cluster2}-secret", CONFIG_NAMESPACE)
        await eventually(lambda: _inactive(env, cluster2), timeout=30)
        await wait_manager(
            env,
            manager_cq,
            {"cpu": "3", "memory": "1G", "ephemeral-storage": "15G", GPU_H: "2", GPU_L: "1"},
            AUTOMATED,
        )
        await env.put_secret(f"{cluster2}-secret", env.worker_kubeconfig_text("worker2"))
        await wait_manager(env, manager_cq, expected, AUTOMATED)

        # A worker resource the manager queue does not cover: refused, quotas kept.
        await set_quotas(w1, workers["worker1"], {**WORKER1, "pods": "10"})
        await wait_manager(
            env,
            manager_cq,
            expected,
            (
                "False",
                "UnsupportedConfiguration",
                "manager-side coveredResources is missing resources configured on workers: [pods]",
            ),
        )
        await set_quotas(w1, workers["worker1"], WORKER1)
        await wait_manager(env, manager_cq, expected, AUTOMATED)

        # Back to Manual: said so, quotas as they are.
        await set_mode(env, api.QUOTA_MANAGEMENT_MANUAL)
        await wait_manager(env, manager_cq, expected, NOT_REQUESTED)

        # Not a MultiKueue ClusterQueue any more: the condition goes.
        await kube.patch_merge(
            api.CLUSTER_QUEUE,
            manager_cq,
            {"spec": {"admissionChecks": None, "admissionChecksStrategy": None}},
        )
        await wait_manager(env, manager_cq, expected, None)


async def test_gate_off_writes_nothing(fleet, kube, namespace):
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "2", "worker2": "1"}, manager_cpu="0"
    ) as env:
        manager_cq, _ = await e2e_shape(env, namespace)
        await set_mode(env, api.QUOTA_MANAGEMENT_AUTOMATED)
        zero = dict.fromkeys(RESOURCES, "0")

        async def unchanged() -> bool:
            cq = await kube.get(api.CLUSTER_QUEUE, manager_cq)
            return quotas(cq) == zero and state(cq) is None

        await consistently(unchanged, duration=5)
        # The config kept the field (v1beta2) although the manager ignores it.
        config = await kube.get(api.MULTIKUEUE_CONFIG_V1BETA2, env.config_name)
        assert config["spec"]["quotaManagement"] == api.QUOTA_MANAGEMENT_AUTOMATED


async def _quotas_are(env: MultiKueueEnv, name: str, expected: dict[str, str]) -> bool:
    return quotas(await env.manager_kube.get(api.CLUSTER_QUEUE, name)) == expected


async def _inactive(env: MultiKueueEnv, cluster: str) -> bool:
    active = await env.cluster_active(cluster)
    return active is not None and active[0] == "False"
