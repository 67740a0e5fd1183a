"""The TrainJob integration on one cluster, with the real Kubeflow Trainer and JobSet controllers of
the test fleet's first worker: one Workload per TrainJob with a PodSet per replicated Job of its
runtime (counts from numNodes), finished from the TrainJob's Complete condition, the JobSet it owns
getting no Workload; started with its flavor's node selector and tolerations in the Kueue runtime
patch (so in the JobSet the Trainer builds); stopped, the podset info removed from the runtime
patch and the quota released, when its Workload is deactivated."""

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
from multikueue_kit import train_job, training_runtime
from test_job_integration import job_agent, queues, worker_cluster  # noqa: F401 (fixture)

from kueue_domain import api, naming
from worker_agent.integrations.trainjob import kueue_runtime_patch, new_kueue_runtime_patch

pytestmark = pytest.mark.realcluster

FRAMEWORKS = {
    "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"]}
}


async def _workloads(cluster) -> list[dict]:
    items, _ = await cluster.kube.list(api.WORKLOAD, namespace=cluster.namespace)
    return items


async def _workload(cluster, tj: dict) -> dict | None:
    uid = tj["metadata"]["uid"]
    return next(
        (
            w
            for w in await _workloads(cluster)
            if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences") or ())
        ),
        None,
    )


def _queued(body: dict) -> dict:
    """As our webhook leaves it: suspended, with the Kueue runtime patch."""
    body["spec"]["suspend"] = True
    body["spec"]["runtimePatches"] = [new_kueue_runtime_patch()]
    return body


async def _runtime(cluster, **kwargs) -> str:
    name = unique("rt")
    await cluster.create(training_runtime(name, **kwargs))
    return name


def _patched_pods(tj: dict) -> list[dict]:
    spec = kueue_runtime_patch(tj)["trainingRuntimeSpec"]["template"]["spec"]
    return [rj["template"]["spec"]["template"] for rj in spec.get("replicatedJobs") or ()]


async def test_a_trainjob_runs_and_finishes(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    await queues(cluster, cpu="8")
    runtime = await _runtime(cluster)
    async with job_agent(cluster, FRAMEWORKS):
        body = _queued(train_job("train", runtime, nodes=3))
        tj = await cluster.kube.create(api.TRAIN_JOB, body, namespace=cluster.namespace)
        wl = await eventually(lambda: _workload(cluster, tj))
        assert wl["metadata"]["name"] == naming.workload_name(
            "train", tj["metadata"]["uid"], "TrainJob", "trainer.kubeflow.org"
        )
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 3)]

        async def completed():
            current = await cluster.kube.get(api.TRAIN_JOB, "train", namespace=cluster.namespace)
            conditions = (current.get("status") or {}).get("conditions") or ()
            found = next((c for c in conditions if c["type"] == "Complete"), None)
            return current if found and found["status"] == "True" else None

        await eventually(completed, timeout=90)

        async def finished():
            current = await _workload(cluster, tj)
            found = next(
                (c for c in current["status"].get("conditions") or () if c["type"] == api.WORKLOAD_FINISHED),
                None,
            )
            return found if found and found["status"] == "True" else None

        assert (await eventually(finished, timeout=30))["reason"] == "Succeeded"
        # The TrainJob's JobSet and its Job are covered by the TrainJob's Workload.
        assert [w["metadata"]["name"] for w in await _workloads(cluster)] == [wl["metadata"]["name"]]


async def test_a_trainjob_starts_with_its_flavor_and_a_deactivated_one_is_stopped(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    rf, cq = unique("rf"), unique("cq")
    flavor = resource_flavor(rf, node_labels={"example.com/pool": "a"})
    flavor["spec"]["tolerations"] = [
        {"key": "example.com/pool", "operator": "Exists", "effect": "NoSchedule"}
    ]
    await cluster.create(flavor)
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "8"}}))
    await cluster.create(local_queue(cluster.namespace, "main", cq))
    runtime = await _runtime(cluster, keep_running=True)
    async with job_agent(cluster, FRAMEWORKS):
        body = _queued(train_job("held", runtime, nodes=2))
        tj = await cluster.kube.create(api.TRAIN_JOB, body, namespace=cluster.namespace)

        async def running():
            current = await cluster.kube.get(api.TRAIN_JOB, "held", namespace=cluster.namespace)
            statuses = (current.get("status") or {}).get("jobsStatus") or ()
            started = current["spec"].get("suspend") is False and any(s.get("active") for s in statuses)
            return current if started else None

        current = await eventually(running, timeout=60)
        [patched] = _patched_pods(current)
        assert patched["metadata"]["labels"][api.LABEL_PODSET] == "node"
        assert patched["spec"]["nodeSelector"] == {"example.com/pool": "a"}
        assert patched["spec"]["tolerations"] == flavor["spec"]["tolerations"]
        js = await cluster.kube.get(api.JOB_SET, "held", namespace=cluster.namespace)
        pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"example.com/pool": "a"}
        assert flavor["spec"]["tolerations"][0] in pod["tolerations"]

        wl = await _workload(cluster, tj)
        await cluster.kube.patch_merge(
            api.WORKLOAD, wl["metadata"]["name"], {"spec": {"active": False}}, namespace=cluster.namespace
        )

        async def stopped():
            current = await cluster.kube.get(api.TRAIN_JOB, "held", namespace=cluster.namespace)
            return current if current["spec"].get("suspend") is True and not _patched_pods(current) else None

        await eventually(stopped, timeout=60)

        async def released():
            current = await _workload(cluster, tj)
            reserved = next(
                (
                    c
                    for c in current["status"].get("conditions") or ()
                    if c["type"] == api.WORKLOAD_QUOTA_RESERVED
                ),
                None,
            )
            return (reserved and reserved["status"] == "False") or None

        await eventually(released, timeout=60)


async def test_a_trainjob_priority_class_label_change_updates_its_workload(worker_cluster):  # noqa: F811
    """A pending TrainJob relabelled to another WorkloadPriorityClass: its Workload follows."""
    cluster = worker_cluster
    await queues(cluster, cpu="1")  # too small: the TrainJob stays pending
    runtime = await _runtime(cluster)
    classes = await priority_classes(cluster)
    async with job_agent(cluster, FRAMEWORKS):
        body = _queued(train_job("prio", runtime, nodes=3))
        body["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] = classes["low"]
        tj = await cluster.kube.create(api.TRAIN_JOB, body, namespace=cluster.namespace)
        wl = await eventually(lambda: _workload(cluster, tj))
        assert priority_of(wl) == (classes["low"], 100)

        await relabel_priority(cluster.kube, api.TRAIN_JOB, "prio", cluster.namespace, classes["high"])
        [current] = await eventually(
            lambda: with_priority(cluster, [wl["metadata"]["name"]], classes["high"], 300)
        )
        assert current["metadata"]["uid"] == wl["metadata"]["uid"]
