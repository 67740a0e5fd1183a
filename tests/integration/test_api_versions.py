"""kueue.x-k8s.io v1beta2 (storage) and v1beta1 (deprecated, converted by our /convert webhook) on
a real kube-apiserver: objects written in either version are admitted alike, each reads back in the
other, kubectl warns on v1beta1, and our client speaks v1beta2 without the webhook."""

from __future__ import annotations

import json

import pytest
from admission_kit import (
    cluster_queue,
    condition_is,
    eventually,
    local_queue,
    running_agent,
    unique,
    workload,
)

from kube_runtime.client import KubeClient
from kueue_domain import api

pytestmark = pytest.mark.realcluster

CLUSTER = "manager"
V2 = "kueue.x-k8s.io/v1beta2"
DEPRECATION = "Warning: This version is deprecated. Use v1beta2 instead."


def kubectl_json(fleet, *args: str, input: str | None = None) -> dict:
    return json.loads(fleet.kubectl(CLUSTER, *args, "-o", "json", input=input).stdout)


def as_v1beta2(obj: dict) -> dict:
    """A v1beta1 manifest of admission_kit written as a user of v1beta2 would write it."""
    obj = json.loads(json.dumps(obj))
    obj["apiVersion"] = V2
    spec = obj.get("spec") or {}
    if obj["kind"] == "ClusterQueue" and "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
    if obj["kind"] == "Workload" and "priorityClassName" in spec:
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": spec.pop("priorityClassName"),
        }
        spec.pop("priorityClassSource", None)
    return obj


async def test_our_client_speaks_the_storage_version(fleet, kube, cluster):
    assert await kube.served_versions(api.GROUP) == ["v1beta2", "v1beta1"]
    rf = unique("rf")
    created = await cluster.create(
        {"apiVersion": api.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": rf}, "spec": {}}
    )
    assert kube.wire_versions[api.GROUP] == "v1beta2"
    assert created["apiVersion"] == api.API_VERSION  # callers still see v1beta1
    # The apiserver records the version a write came in: v1beta2, so no conversion webhook call.
    stored = kubectl_json(fleet, "get", f"resourceflavors.v1beta2.{api.GROUP}", rf, "--show-managed-fields")
    assert {m["apiVersion"] for m in stored["metadata"]["managedFields"]} == {V2}


async def test_v1beta2_and_v1beta1_objects_are_admitted_alike(fleet, kube, cluster):
    ns = cluster.namespace
    rf, wpc = unique("rf"), unique("high")
    queues = {version: (unique(f"cq-{version}"), f"lq-{version}") for version in ("v1beta1", "v1beta2")}
    await cluster.create(
        {"apiVersion": api.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": rf}, "spec": {}}
    )
    await cluster.create(
        {
            "apiVersion": api.API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": wpc},
            "value": 500,
        }
    )
    for version, (cq, lq) in queues.items():
        cq_obj = cluster_queue(cq, {rf: {"cpu": "2"}})
        cq_obj["spec"]["cohort"] = unique("cohort")
        wl = workload(ns, f"wl-{version}", lq, {"cpu": "2"})
        wl["spec"]["priorityClassName"] = wpc
        wl["spec"]["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        wl["spec"]["priority"] = 500
        objects = [cq_obj, local_queue(ns, lq, cq), wl]
        if version == "v1beta2":
            objects = [as_v1beta2(o) for o in objects]
        for obj in objects:
            res = fleet.kubectl(CLUSTER, "create", "-f", "-", input=json.dumps(obj))
            # kubectl relays the deprecation warning of v1beta1 (and only of v1beta1).
            assert (DEPRECATION in res.stderr) == (version == "v1beta1"), res.stderr
        cluster.cleanup.add(api.CLUSTER_QUEUE, cq)
    cluster.cleanup.add(api.RESOURCE_FLAVOR, rf)
    cluster.cleanup.add(api.WORKLOAD_PRIORITY_CLASS, wpc)

    async with running_agent(kube):
        for version in queues:
            await eventually(lambda v=version: cluster.admitted(f"wl-{v}"))
    for version, (cq, _) in queues.items():
        wl = await cluster.wl(f"wl-{version}")
        assert condition_is(wl, api.WORKLOAD_ADMITTED)
        assert wl["status"]["admission"]["clusterQueue"] == cq
        assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": rf}
        # Whatever version it was written in, v1beta1 readers see v1beta1 and v1beta2 readers v1beta2.
        assert wl["spec"]["priorityClassName"] == wpc
        assert wl["spec"]["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
        v1 = kubectl_json(fleet, "get", f"workloads.v1beta1.{api.GROUP}", "-n", ns, f"wl-{version}")
        assert v1["spec"]["priorityClassName"] == wpc
        v2 = kubectl_json(fleet, "get", f"workloads.v1beta2.{api.GROUP}", "-n", ns, f"wl-{version}")
        assert v2["spec"]["priorityClassRef"] == {
            "group": api.GROUP,
            "kind": "WorkloadPriorityClass",
            "name": wpc,
        }
        assert "priorityClassName" not in v2["spec"]
        cq_v1 = kubectl_json(fleet, "get", f"clusterqueues.v1beta1.{api.GROUP}", cq)
        cq_v2 = kubectl_json(fleet, "get", f"clusterqueues.v1beta2.{api.GROUP}", cq)
        assert cq_v1["spec"]["cohort"] == cq_v2["spec"]["cohortName"]
        assert "cohort" not in cq_v2["spec"]


async def test_local_queue_usage_reads_under_each_versions_name(fleet, kube, cluster):
    ns = cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(
        {"apiVersion": api.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": rf}, "spec": {}}
    )
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "2"}}))
    await cluster.create(local_queue(ns, "main", cq))
    async with running_agent(kube):
        await cluster.create(workload(ns, "w", "main", {"cpu": "1"}))
        await eventually(lambda: cluster.admitted("w"))

        async def usage() -> list:
            return ((await cluster.lq("main")).get("status") or {}).get("flavorUsage") or []

        v1_usage = await eventually(usage)
    v2 = kubectl_json(fleet, "get", f"localqueues.v1beta2.{api.GROUP}", "-n", ns, "main")
    assert v2["status"]["flavorsUsage"] == v1_usage
    assert "flavorUsage" not in v2["status"]


async def test_a_v1beta1_client_goes_through_the_conversion_webhook(fleet):
    """A client that insists on v1beta1 (as old tooling does) reads and writes through /convert."""
    async with await KubeClient.from_kubeconfig_file(fleet.kubeconfig(CLUSTER)) as old:
        old.negotiate_versions = False
        name = unique("mkc")
        created = await old.create(
            api.MULTIKUEUE_CLUSTER,
            {
                "apiVersion": api.API_VERSION,
                "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {"kubeConfig": {"location": "some-secret", "locationType": "Secret"}},
            },
        )
        try:
            assert created["apiVersion"] == api.API_VERSION
            assert created["spec"] == {"kubeConfig": {"location": "some-secret", "locationType": "Secret"}}
            assert old.wire_versions == {}
            v2 = kubectl_json(fleet, "get", f"multikueueclusters.v1beta2.{api.GROUP}", name)
            assert v2["spec"] == {
                "clusterSource": {"kubeConfig": {"location": "some-secret", "locationType": "Secret"}}
            }
        finally:
            await old.delete(api.MULTIKUEUE_CLUSTER, name)


def test_v1beta2_validation_messages_are_upstreams(fleet, cluster):
    bad = {
        "apiVersion": V2,
        "kind": "MultiKueueCluster",
        "metadata": {"name": unique("mkc")},
        "spec": {"clusterSource": {}},
    }
    res = fleet.kubectl(CLUSTER, "create", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0
    assert "exactly one of the fields in [kubeConfig clusterProfileRef] must be set" in res.stderr
    wl = as_v1beta2(workload(cluster.namespace, "w", "q", {"cpu": "1"}))
    wl["spec"]["priorityClassRef"] = {
        "group": "scheduling.k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "x",
    }
    wl["spec"]["priority"] = 1
    res = fleet.kubectl(CLUSTER, "create", "--dry-run=server", "-f", "-", input=json.dumps(wl), check=False)
    assert "only the PriorityClass kind is allowed for the scheduling.k8s.io group" in res.stderr


def test_printer_columns_of_v1beta2(fleet, cluster):
    cq = unique("cq")
    obj = {
        "apiVersion": V2,
        "kind": "ClusterQueue",
        "metadata": {"name": cq},
        "spec": {"cohortName": "team-a"},
    }
    fleet.kubectl(CLUSTER, "create", "-f", "-", input=json.dumps(obj))
    try:
        out = fleet.kubectl(CLUSTER, "get", f"clusterqueues.v1beta2.{api.GROUP}", cq).stdout
        header, row = out.splitlines()[:2]
        assert header.split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
        assert row.split()[:2] == [cq, "team-a"]
    finally:
        fleet.kubectl(CLUSTER, "delete", "clusterqueue", cq, "--wait=false", check=False)
