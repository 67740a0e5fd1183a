"""The MetricsForCohorts and MetricForWorkloadCreationLatency metrics of an agent on a real
kube-apiserver: Cohort objects and ClusterQueues created, a workload admitted, a Job's Workload
created, things deleted, and what /metrics shows meanwhile."""

from __future__ import annotations

import pytest
from admission_kit import (
    Obj,
    cluster_queue,
    eventually,
    local_queue,
    resource_flavor,
    running_agent,
    unique,
    workload,
)
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kueue_domain import api

pytestmark = pytest.mark.realcluster

GATES_OFF = {"MetricsForCohorts": False, "MetricForWorkloadCreationLatency": False}


def cohort(name: str, parent: str | None = None, flavors: dict | None = None) -> Obj:
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    if flavors:
        spec["resourceGroups"] = cluster_queue("unused", flavors)["spec"]["resourceGroups"]
    return {"apiVersion": api.API_VERSION, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def batch_job(name: str, queue: str) -> Obj:
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: queue}},
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def samples(agent, name: str, **match: str) -> dict[frozenset, float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(agent.registry).decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in match.items()):
                out[frozenset(sample.labels.items() - {("replica_role", "standalone")})] = sample.value
    return out


def value(agent, name: str, **labels: str) -> float | None:
    return samples(agent, name).get(frozenset(labels.items()))


async def test_cohort_metrics_follow_queues_cohorts_and_workloads(cluster):
    ns, rf = cluster.namespace, unique("rf")
    root, team, a, b = unique("root"), unique("team"), unique("cqa"), unique("cqb")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cohort(root, flavors={rf: {"cpu": "2"}}))
    await cluster.create(cohort(team, root))
    await cluster.create(cluster_queue(a, {rf: {"cpu": "4"}}, cohort=team))
    await cluster.create(cluster_queue(b, {rf: {"cpu": ("3", None, "1")}}, cohort=root))
    await cluster.create(local_queue(ns, "main", a))
    quota, reservations = "kueue_cohort_subtree_quota", "kueue_cohort_subtree_resource_reservations"
    async with running_agent(cluster.kube) as agent:

        async def quotas_reported():
            return value(agent, quota, cohort=root, flavor=rf, resource="cpu") == 7

        # root: 2 of its own, team's 4 (a's) and the 1 of b's 3 that b lends.
        await eventually(quotas_reported)
        assert value(agent, quota, cohort=team, flavor=rf, resource="cpu") == 4
        assert value(agent, "kueue_cohort_info", cohort=team, parent_cohort=root, root_cohort=root) == 1
        assert value(agent, "kueue_cohort_info", cohort=root, parent_cohort="", root_cohort=root) == 1
        assert value(agent, "kueue_cluster_queue_info", cluster_queue=a, parent_cohort=team, root_cohort=root)
        assert value(agent, "kueue_cluster_queue_info", cluster_queue=b, parent_cohort=root, root_cohort=root)

        await cluster.create(workload(ns, "wl", "main", {"cpu": "1500m"}))

        async def reserved():
            return (
                value(agent, reservations, cohort=root, flavor=rf, resource="cpu") == 1.5
                and value(agent, reservations, cohort=team, flavor=rf, resource="cpu") == 1.5
            )

        await eventually(reserved)
        admitted_total = "kueue_cohort_subtree_admitted_workloads_total"

        async def counted():
            return (
                value(agent, admitted_total, cohort=team, priority_class="") == 1
                and value(agent, admitted_total, cohort=root, priority_class="") == 1
            )

        await eventually(counted)

        async def active_counted():
            active = "kueue_cohort_subtree_admitted_active_workloads"
            return value(agent, active, cohort=team) == 1 and value(agent, active, cohort=root) == 1

        await eventually(active_counted)

        # The workload finishes: reservations go, the subtree's admitted-active count is 0.
        await cluster.finish("wl")

        async def released():
            return samples(agent, reservations, cohort=team) == {}

        await eventually(released)

        # b leaves root's tree for a cohort of its own.
        solo = unique("solo")
        b_obj = await cluster.cq(b)
        b_obj["spec"]["cohort"] = solo
        await cluster.kube.replace(api.CLUSTER_QUEUE, b_obj)

        async def moved():
            return (
                value(agent, quota, cohort=root, flavor=rf, resource="cpu") == 6
                and value(agent, quota, cohort=solo, flavor=rf, resource="cpu") == 1
            )

        await eventually(moved)
        assert value(agent, "kueue_cluster_queue_info", cluster_queue=b, parent_cohort=solo, root_cohort=solo)

        # The Cohort object team is deleted while a still names it: every series of it goes once
        # (its counter too), and it lives on as an implicit root cohort of its own.
        await cluster.kube.delete(api.COHORT, team)

        async def team_is_a_root():
            return (
                value(agent, "kueue_cohort_info", cohort=team, parent_cohort="", root_cohort=team) == 1
                and value(agent, quota, cohort=root, flavor=rf, resource="cpu") == 2
            )

        await eventually(team_is_a_root)
        assert samples(agent, admitted_total, cohort=team) == {}
        assert value(agent, "kueue_cluster_queue_info", cluster_queue=a, parent_cohort=team, root_cohort=team)


async def test_a_jobs_workload_creation_latency_is_observed(cluster):
    ns, rf, cq = cluster.namespace, unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}))
    await cluster.create(local_queue(ns, "main", cq))
    async with running_agent(cluster.kube) as agent:
        await cluster.kube.create(api.JOB, batch_job("timed", "main"), namespace=ns)

        async def observed():
            name = "kueue_workload_creation_latency_seconds_count"
            return value(agent, name, job_kind="Job") == 1

        await eventually(observed)
        buckets = samples(agent, "kueue_workload_creation_latency_seconds_bucket", job_kind="Job")
        assert sorted(float(dict(k)["le"]) for k in buckets)[:2] == [0.01, 0.02]


async def test_with_both_gates_off_the_gated_metrics_are_absent(cluster):
    ns, rf, cq, co = cluster.namespace, unique("rf"), unique("cq"), unique("co")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}, cohort=co))
    await cluster.create(local_queue(ns, "main", cq))
    async with running_agent(cluster.kube, gates=GATES_OFF) as agent:
        await cluster.kube.create(api.JOB, batch_job("untimed", "main"), namespace=ns)

        async def subtree_reported():
            return value(agent, "kueue_cohort_subtree_quota", cohort=co, flavor=rf, resource="cpu") == 4

        await eventually(subtree_reported)  # not gated upstream

        async def workload_created():
            items, _ = await cluster.kube.list(api.WORKLOAD, namespace=ns)
            return bool(items)

        await eventually(workload_created)
        text = generate_latest(agent.registry).decode()
        assert "kueue_cohort_info" not in text
        assert "kueue_cluster_queue_info" not in text
        assert "kueue_workload_creation_latency_seconds" not in text
