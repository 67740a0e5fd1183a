"""The JobSet integration on one cluster, with the real JobSet controller of the test fleet's first
worker: one Workload per JobSet with a PodSet per replicated Job, started with its flavor's node
selector and tolerations in every replicated Job, finished from the JobSet's Completed condition;
stopped (and its templates restored) when its Workload is deactivated."""

from __future__ import annotations

import pytest
from admission_kit import (
    cluster_queue,
    eventually,
    local_queue,
    priority_classes,
    priority_of,
    relabel_priority,
    resource_flavor,
    unique,
    with_priority,
)
from multikueue_kit import job_set
from test_job_integration import job_agent, queues, worker_cluster  # noqa: F401 (fixture)

from kueue_domain import api, naming

pytestmark = pytest.mark.realcluster

FRAMEWORKS = {"integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}}


async def _workload(cluster, js: dict) -> dict | None:
    items, _ = await cluster.kube.list(api.WORKLOAD, namespace=cluster.namespace)
    uid = js["metadata"]["uid"]
    return next(
        (w for w in items if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences") or ())),
        None,
    )


def _suspended(body: dict) -> dict:
    body["spec"]["suspend"] = True
    return body


async def _flavored_queues(cluster) -> dict:
    rf, cq = unique("rf"), unique("cq")
    flavor = resource_flavor(rf, node_labels={"example.com/pool": "a"})
    flavor["spec"]["tolerations"] = [
        {"key": "example.com/pool", "operator": "Exists", "effect": "NoSchedule"}
    ]
    await cluster.create(flavor)
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "8"}}))
    await cluster.create(local_queue(cluster.namespace, "main", cq))
    return flavor


async def test_a_jobset_runs_with_its_flavor_and_finishes(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    await queues(cluster, cpu="8")
    async with job_agent(cluster, FRAMEWORKS):
        js = await cluster.kube.create(api.JOB_SET, _suspended(job_set("train")), namespace=cluster.namespace)
        wl = await eventually(lambda: _workload(cluster, js))
        assert wl["metadata"]["name"] == naming.workload_name(
            "train", js["metadata"]["uid"], "JobSet", "jobset.x-k8s.io"
        )
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("leader", 1), ("workers", 2)]

        async def completed():
            current = await cluster.kube.get(api.JOB_SET, "train", namespace=cluster.namespace)
            found = next(
                (
                    c
                    for c in (current.get("status") or {}).get("conditions") or ()
                    if c["type"] == "Completed"
                ),
                None,
            )
            return current if found and found["status"] == "True" else None

        await eventually(completed, timeout=90)

        async def finished():
            current = await _workload(cluster, js)
            found = next(
                (c for c in current["status"].get("conditions") or () if c["type"] == api.WORKLOAD_FINISHED),
                None,
            )
            return found if found and found["status"] == "True" else None

        assert (await eventually(finished, timeout=30))["reason"] == "Succeeded"


async def test_a_deactivated_jobset_is_suspended_and_its_templates_restored(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    flavor = await _flavored_queues(cluster)
    async with job_agent(cluster, FRAMEWORKS):
        body = _suspended(job_set("held", keep_running=True))
        js = await cluster.kube.create(api.JOB_SET, body, namespace=cluster.namespace)

        async def started():
            current = await cluster.kube.get(api.JOB_SET, "held", namespace=cluster.namespace)
            return current if current["spec"].get("suspend") is False else None

        running = await eventually(started, timeout=30)
        for rj in running["spec"]["replicatedJobs"]:
            pod = rj["template"]["spec"]["template"]["spec"]
            assert pod["nodeSelector"] == {"example.com/pool": "a"}
            assert flavor["spec"]["tolerations"][0] in pod["tolerations"]

        wl = await _workload(cluster, js)
        await cluster.kube.patch_merge(
            api.WORKLOAD, wl["metadata"]["name"], {"spec": {"active": False}}, namespace=cluster.namespace
        )

        async def stopped():
            current = await cluster.kube.get(api.JOB_SET, "held", namespace=cluster.namespace)
            return current if current["spec"].get("suspend") is True else None

        held = await eventually(stopped, timeout=30)

        async def restored():
            current = await cluster.kube.get(api.JOB_SET, "held", namespace=cluster.namespace)
            pods = [rj["template"]["spec"]["template"]["spec"] for rj in current["spec"]["replicatedJobs"]]
            return all("nodeSelector" not in p for p in pods) or None

        assert held["spec"]["suspend"] is True
        await eventually(restored, timeout=30)


async def test_a_jobset_priority_class_label_change_updates_its_workload(worker_cluster):  # noqa: F811
    """A pending JobSet relabelled to another WorkloadPriorityClass: its Workload follows."""
    cluster = worker_cluster
    await queues(cluster, cpu="1")  # too small: the JobSet stays pending
    classes = await priority_classes(cluster)
    async with job_agent(cluster, FRAMEWORKS):
        body = _suspended(job_set("prio"))
        body["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] = classes["low"]
        js = await cluster.kube.create(api.JOB_SET, body, namespace=cluster.namespace)
        wl = await eventually(lambda: _workload(cluster, js))
        assert priority_of(wl) == (classes["low"], 100)

        await relabel_priority(cluster.kube, api.JOB_SET, "prio", cluster.namespace, classes["high"])
        [current] = await eventually(
            lambda: with_priority(cluster, [wl["metadata"]["name"]], classes["high"], 300)
        )
        assert current["metadata"]["uid"] == wl["metadata"]["uid"]
