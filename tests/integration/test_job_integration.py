"""batch/v1 Job integration against real clusters of the test fleet.

The manager cluster runs the Job controller but has no scheduler or nodes: pods of a started Job
stay Pending, which keeps Jobs running for start, stop and eviction checks. Jobs that must finish
run on a worker cluster, where kwok nodes run their pods to completion.

Jobs are created with `spec.suspend: true` (what the suspending webhook does on a real install).
"""

from __future__ import annotations

import contextlib

import pytest
from admission_kit import (
    Cleanup,
    Cluster,
    cluster_queue,
    condition,
    condition_is,
    consistently,
    eventually,
    local_queue,
    resource_flavor,
    running_agent,
    unique,
)

from kube_runtime.client import KubeClient, NotFound
from kueue_domain import api, naming

pytestmark = pytest.mark.realcluster

Obj = dict


def batch_job(
    name: str,
    queue: str | None = "main",
    *,
    parallelism: int = 1,
    completions: int = 1,
    cpu: str = "1",
    priority_class: str | None = None,
    node_selector: dict | None = None,
) -> Obj:
    labels = {}
    if queue:
        labels[api.LABEL_QUEUE_NAME] = queue
    if priority_class:
        labels[api.LABEL_PRIORITY_CLASS] = priority_class
    pod_spec: Obj = {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "completions": completions,
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }


async def create_job(cluster: Cluster, body: Obj) -> Obj:
    return await cluster.kube.create(api.JOB, body, namespace=cluster.namespace)


async def get_job(cluster: Cluster, name: str) -> Obj:
    return await cluster.kube.get(api.JOB, name, namespace=cluster.namespace)


async def job_workload(cluster: Cluster, job: Obj) -> Obj | None:
    items, _ = await cluster.kube.list(api.WORKLOAD, namespace=cluster.namespace)
    for wl in items:
        if any(
            ref.get("uid") == job["metadata"]["uid"] for ref in wl["metadata"].get("ownerReferences") or ()
        ):
            return wl
    return None


async def job_events(cluster: Cluster, name: str, reason: str) -> list[str]:
    items, _ = await cluster.kube.list(api.EVENT, namespace=cluster.namespace)
    return [
        e.get("note", "")
        for e in items
        if (e.get("regarding") or {}).get("name") == name
        and (e.get("regarding") or {}).get("kind") == "Job"
        and e.get("reason") == reason
    ]


def running(job: Obj) -> bool:
    return job["spec"].get("suspend") is False


@contextlib.asynccontextmanager
async def job_agent(cluster: Cluster, config: Obj | None = None):
    """A running agent; afterwards the namespace's Workloads lose their finalizer, so that deleting
    the namespace is not blocked once the agent is gone."""
    try:
        async with running_agent(cluster.kube, config) as agent:
            yield agent
    finally:
        items, _ = await cluster.kube.list(api.WORKLOAD, namespace=cluster.namespace)
        for wl in items:
            with contextlib.suppress(NotFound):
                await cluster.kube.patch_merge(
                    api.WORKLOAD,
                    wl["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                    namespace=cluster.namespace,
                )


async def queues(
    cluster: Cluster, cpu: str = "4", node_labels: dict | None = None, lq: str = "main", **cq_kwargs
) -> tuple[str, str]:
    rf, cq = unique("rf"), unique("cq")
    flavor = resource_flavor(rf, node_labels=node_labels)
    await cluster.create(flavor)
    await cluster.create(cluster_queue(cq, {rf: {"cpu": cpu}}, **cq_kwargs))
    await cluster.create(local_queue(cluster.namespace, lq, cq))
    return rf, cq


async def priority_class(cluster: Cluster, value: int) -> str:
    name = unique("wpc")
    await cluster.create(
        {
            "apiVersion": api.API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
    )
    return name


@pytest.fixture
async def worker_cluster(fleet):
    """A namespace on the first worker cluster (kube-scheduler and kwok nodes run pods there)."""
    async with await KubeClient.from_kubeconfig_file(fleet.kubeconfig(fleet.workers[0])) as kube:
        ns = unique("job-integration")
        await kube.create(api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        cleanup = Cleanup(kube)
        yield Cluster(kube, ns, cleanup)
        await kube.delete(api.NAMESPACE, ns)
        await cleanup.run()


# ------------------------------------------------------------------------------------------------
# Manager cluster: pods stay Pending.


async def test_job_gets_a_workload_and_starts_with_the_flavor_node_selector(cluster):
    ns = cluster.namespace
    rf = unique("rf")
    flavor = resource_flavor(rf, node_labels={"example.com/pool": "a"})
    flavor["spec"]["tolerations"] = [
        {"key": "example.com/pool", "operator": "Exists", "effect": "NoSchedule"}
    ]
    await cluster.create(flavor)
    cq = unique("cq")
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "4"}}))
    await cluster.create(local_queue(ns, "main", cq))
    config = {"waitForPodsReady": {"enable": True, "blockAdmission": False, "timeout": "10m"}}
    async with job_agent(cluster, config):
        job = await create_job(cluster, batch_job("sample-job", parallelism=2, completions=4))
        wl = await eventually(lambda: job_workload(cluster, job))
        meta = wl["metadata"]
        assert meta["name"] == naming.workload_name("sample-job", job["metadata"]["uid"], "Job", "batch")
        assert meta["name"].startswith("job-sample-job-") and len(meta["name"]) == len("job-sample-job-") + 5
        assert meta["finalizers"] == [api.FINALIZER_RESOURCE_IN_USE]
        assert meta["labels"] == {api.LABEL_JOB_UID: job["metadata"]["uid"]}
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", "sample-job", True)
        assert wl["spec"]["queueName"] == "main"
        (podset,) = wl["spec"]["podSets"]
        assert (podset["name"], podset["count"]) == ("main", 2)
        assert podset["template"]["metadata"]["labels"] == {
            "app": "sample-job",
            "batch.kubernetes.io/job-name": "sample-job",
        }

        job = await eventually(lambda: _started(cluster, "sample-job"))
        template = job["spec"]["template"]
        assert template["spec"]["nodeSelector"] == {"example.com/pool": "a"}
        assert template["spec"]["tolerations"] == flavor["spec"]["tolerations"]
        labels = template["metadata"]["labels"]
        assert labels[api.LABEL_PODSET] == "main"
        assert labels[api.LABEL_LOCAL_QUEUE_NAME] == "main"
        assert labels[api.LABEL_CLUSTER_QUEUE_NAME] == cq
        assert job["spec"]["parallelism"] == 2
        assert await cluster.admitted(meta["name"])
        assert await eventually(lambda: job_events(cluster, "sample-job", "CreatedWorkload")) == [
            f"Created Workload: {ns}/{meta['name']}"
        ]
        assert await eventually(lambda: job_events(cluster, "sample-job", "Started")) == [
            f"Admitted by clusterQueue {cq}"
        ]

        # Pods stay Pending here: PodsReady=False/WaitForStart, written under its own field manager.
        async def waiting_for_start():
            current = await cluster.wl(meta["name"])
            return (
                current if condition_is(current, api.WORKLOAD_PODS_READY, "False", "WaitForStart") else None
            )

        current = await eventually(waiting_for_start)
        assert condition(current, api.WORKLOAD_PODS_READY)["message"] == "Not all pods are ready or succeeded"
        managers = {
            m["manager"] for m in current["metadata"]["managedFields"] if m.get("subresource") == "status"
        }
        assert api.FIELD_MANAGER_PODS_READY in managers


async def _started(cluster: Cluster, name: str) -> Obj | None:
    job = await get_job(cluster, name)
    return job if running(job) else None


async def _suspended(cluster: Cluster, name: str) -> Obj | None:
    """Suspended and no longer being stopped (the template is restored by then)."""
    job = await get_job(cluster, name)
    stopping = (job["metadata"].get("annotations") or {}).get(api.ANNOTATION_STOPPING)
    return job if job["spec"].get("suspend") is True and stopping is None else None


async def test_job_that_does_not_fit_stays_suspended(cluster):
    await queues(cluster, cpu="1")
    async with job_agent(cluster):
        first = await create_job(cluster, batch_job("first"))
        await eventually(lambda: _started(cluster, "first"))
        second = await create_job(cluster, batch_job("second"))
        wl = await eventually(lambda: job_workload(cluster, second))

        async def waiting_for_quota():
            # Upstream v0.19's default reason (WaitingForQuota with UnadmittedWorkloadsObservability).
            reason = await cluster.pending_reason(wl["metadata"]["name"])
            return reason if reason and reason[0] == "Pending" else None

        await eventually(waiting_for_quota)
        await consistently(lambda: _suspended(cluster, "second"), duration=2)
        assert await cluster.admitted((await job_workload(cluster, first))["metadata"]["name"])


async def test_job_created_running_is_suspended_until_admitted(cluster):
    await queues(cluster, cpu="1")
    async with job_agent(cluster):
        body = batch_job("eager", cpu="2")
        body["spec"]["suspend"] = False  # as if no suspending webhook ran
        job = await create_job(cluster, body)
        await eventually(lambda: _suspended(cluster, "eager"))
        assert await eventually(lambda: job_events(cluster, "eager", "Stopped")) == [
            "Missing Workload; unable to restore pod templates"
        ]
        wl = await eventually(lambda: job_workload(cluster, job))
        assert await eventually(lambda: cluster.pending_reason(wl["metadata"]["name"]))
        await consistently(lambda: _suspended(cluster, "eager"), duration=1.5)


async def test_higher_priority_job_preempts_a_lower_one(cluster):
    ns = cluster.namespace
    _, cq = await queues(
        cluster,
        cpu="2",
        node_labels={"example.com/pool": "a"},
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    low_class, high_class = await priority_class(cluster, 10), await priority_class(cluster, 100)
    async with job_agent(cluster):
        low = await create_job(
            cluster, batch_job("low", cpu="2", priority_class=low_class, node_selector={"zone": "z1"})
        )
        started = await eventually(lambda: _started(cluster, "low"))
        assert started["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "z1", "example.com/pool": "a"}
        low_wl = await job_workload(cluster, low)
        assert low_wl["spec"]["priority"] == 10

        high = await create_job(cluster, batch_job("high", cpu="2", priority_class=high_class))

        # The lower one is stopped with its original template, then its Workload is requeued.
        stopped = await eventually(lambda: _suspended(cluster, "low"))
        template = stopped["spec"]["template"]
        assert template["spec"]["nodeSelector"] == {"zone": "z1"}
        assert api.LABEL_PODSET not in template["metadata"]["labels"]
        assert api.ANNOTATION_STOPPING not in (stopped["metadata"].get("annotations") or {})

        async def requeued():
            wl = await cluster.wl(low_wl["metadata"]["name"])
            return wl if condition_is(wl, api.WORKLOAD_REQUEUED, "True", "Preempted") else None

        wl = await eventually(requeued)
        assert condition_is(wl, api.WORKLOAD_EVICTED, "True", "Preempted")
        # Pending when released (PendingEvaluation with UnadmittedWorkloadsObservability); the
        # scheduler then writes why it stays pending.
        assert condition_is(wl, api.WORKLOAD_QUOTA_RESERVED, "False")
        assert "admission" not in wl["status"]
        (note,) = await eventually(lambda: job_events(cluster, "low", "Stopped"))
        assert note.startswith("Preempted to accommodate a workload")
        await eventually(lambda: _started(cluster, "high"))
        high_wl = await job_workload(cluster, high)
        assert await cluster.admitted(high_wl["metadata"]["name"])
        await consistently(lambda: _suspended(cluster, "low"), duration=1)

        # Once the preemptor is gone (its Workload finishes with OwnerNotFound), the lower one runs again.
        await cluster.kube.delete(api.JOB, "high", namespace=ns, propagation_policy="Background")
        await eventually(lambda: _started(cluster, "low"))
        assert await cluster.admitted(low_wl["metadata"]["name"])
        assert cq


async def test_relabelled_priority_class_updates_the_workload_and_lets_a_pending_job_preempt(cluster):
    """Changing a running Job's `kueue.x-k8s.io/priority-class` label gives its Workload the new
    class and value (upstream's UpdateWorkloadPriority); the pending Job of equal priority, which
    could not preempt it before, now does."""
    ns = cluster.namespace
    await queues(cluster, cpu="2", preemption={"withinClusterQueue": "LowerPriority"})
    low_class, high_class = await priority_class(cluster, 10), await priority_class(cluster, 100)
    async with job_agent(cluster):
        first = await create_job(cluster, batch_job("first", cpu="2", priority_class=high_class))
        await eventually(lambda: _started(cluster, "first"))
        first_wl = await job_workload(cluster, first)
        name = first_wl["metadata"]["name"]
        assert (first_wl["spec"]["priorityClassName"], first_wl["spec"]["priority"]) == (high_class, 100)

        second = await create_job(cluster, batch_job("second", cpu="2", priority_class=high_class))
        second_wl = await eventually(lambda: job_workload(cluster, second))

        async def pending_second():
            wl = await cluster.wl(second_wl["metadata"]["name"])
            return wl if condition_is(wl, api.WORKLOAD_QUOTA_RESERVED, "False") else None

        await eventually(pending_second)
        # Equal priority: no preemption.
        await consistently(lambda: _started(cluster, "first"), duration=1)

        await cluster.kube.patch_merge(
            api.JOB, "first", {"metadata": {"labels": {api.LABEL_PRIORITY_CLASS: low_class}}}, namespace=ns
        )

        async def relabelled():
            wl = await cluster.wl(name)
            spec = wl["spec"]
            return wl if (spec.get("priorityClassName"), spec.get("priority")) == (low_class, 10) else None

        wl = await eventually(relabelled)
        assert wl["spec"]["priorityClassSource"] == api.PRIORITY_CLASS_SOURCE_WORKLOAD
        (note,) = await eventually(lambda: job_events(cluster, "first", api.EVENT_UPDATED_WORKLOAD))
        assert note == f"Updated workload priority class: {ns}/{name}"

        # The lower one is preempted and the pending one runs.
        async def preempted():
            wl = await cluster.wl(name)
            return wl if condition_is(wl, api.WORKLOAD_EVICTED, "True", "Preempted") else None

        await eventually(preempted)
        await eventually(lambda: _suspended(cluster, "first"))
        await eventually(lambda: _started(cluster, "second"))
        assert await cluster.admitted(second_wl["metadata"]["name"])
        # The Workload keeps the label's class through its requeue.
        wl = await cluster.wl(name)
        assert (wl["spec"]["priorityClassName"], wl["spec"]["priority"]) == (low_class, 10)


async def test_deactivated_workload_stops_the_job_and_is_not_readmitted(cluster):
    await queues(cluster)
    async with job_agent(cluster):
        job = await create_job(cluster, batch_job("j"))
        await eventually(lambda: _started(cluster, "j"))
        name = (await job_workload(cluster, job))["metadata"]["name"]
        await cluster.kube.patch_merge(
            api.WORKLOAD, name, {"spec": {"active": False}}, namespace=cluster.namespace
        )
        await eventually(lambda: _suspended(cluster, "j"))

        async def released():
            wl = await cluster.wl(name)
            return wl if condition_is(wl, api.WORKLOAD_REQUEUED, "False", "Deactivated") else None

        wl = await eventually(released)
        assert condition_is(wl, api.WORKLOAD_EVICTED, "True", "Deactivated")
        assert not condition_is(wl, api.WORKLOAD_QUOTA_RESERVED)
        await consistently(lambda: _suspended(cluster, "j"), duration=2)
        assert not await cluster.reserved(name)


async def test_deleting_the_job_releases_its_workload(cluster):
    ns = cluster.namespace
    await queues(cluster)
    async with job_agent(cluster):
        first = await create_job(cluster, batch_job("first"))
        second = await create_job(cluster, batch_job("second"))
        await eventually(lambda: _started(cluster, "first"))
        await eventually(lambda: _started(cluster, "second"))
        first_wl = await job_workload(cluster, first)
        second_wl = await job_workload(cluster, second)

        # Background deletion: the garbage collector deletes the Workload; its finalizer is released.
        await cluster.kube.delete(api.JOB, "first", namespace=ns, propagation_policy="Background")

        async def gone():
            return await cluster.wl(first_wl["metadata"]["name"]) is None

        await eventually(gone, timeout=30)

        # Orphaned: the Workload stays, finished with OwnerNotFound and without finalizer.
        await cluster.kube.delete(api.JOB, "second", namespace=ns, propagation_policy="Orphan")

        async def orphan_finished():
            wl = await cluster.wl(second_wl["metadata"]["name"])
            if wl is None or wl["metadata"].get("finalizers"):
                return None
            return wl if condition_is(wl, api.WORKLOAD_FINISHED, "True", "OwnerNotFound") else None

        wl = await eventually(orphan_finished)
        assert condition(wl, api.WORKLOAD_FINISHED)["message"] == "The workload's owner no longer exists"


async def test_job_without_queue_name_uses_the_default_local_queue(cluster):
    await queues(cluster, lq="default")
    async with job_agent(cluster):
        job = await create_job(cluster, batch_job("j", queue=None))
        wl = await eventually(lambda: job_workload(cluster, job))
        assert wl["spec"]["queueName"] == "default"
        await eventually(lambda: _started(cluster, "j"))


async def test_job_of_a_multikueue_cluster_queue_is_not_started_locally(kube, cluster):
    check = unique("mk")
    await cluster.active_admission_check(check, api.MULTIKUEUE_CONTROLLER_NAME)
    await queues(cluster, admission_checks=[check])
    async with job_agent(cluster):
        job = await create_job(cluster, batch_job("j"))
        wl = await eventually(lambda: job_workload(cluster, job))
        name = wl["metadata"]["name"]
        await eventually(lambda: cluster.reserved(name))
        await cluster.set_check_state(name, check, "Ready", "dispatched")
        await eventually(lambda: cluster.admitted(name))
        await consistently(lambda: _suspended(cluster, "j"), duration=2)


async def test_partially_admitted_job_runs_with_the_admitted_parallelism(cluster):
    await queues(cluster, cpu="2")
    async with job_agent(cluster):
        body = batch_job("partial", parallelism=4, completions=4)
        body["metadata"]["annotations"] = {api.ANNOTATION_JOB_MIN_PARALLELISM: "2"}
        job = await create_job(cluster, body)
        wl = await eventually(lambda: job_workload(cluster, job))
        (podset,) = wl["spec"]["podSets"]
        assert (podset["count"], podset["minCount"]) == (4, 2)
        started = await eventually(lambda: _started(cluster, "partial"))
        assert started["spec"]["parallelism"] == 2
        wl = await cluster.wl(wl["metadata"]["name"])
        assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2


async def test_deleted_workload_stops_the_job_which_gets_a_new_one(cluster):
    ns = cluster.namespace
    await queues(cluster, node_labels={"example.com/pool": "a"})
    async with job_agent(cluster):
        job = await create_job(cluster, batch_job("j"))
        await eventually(lambda: _started(cluster, "j"))
        first = await job_workload(cluster, job)
        await cluster.kube.delete(api.WORKLOAD, first["metadata"]["name"], namespace=ns)
        assert await eventually(lambda: job_events(cluster, "j", "Stopped")) == ["Workload is deleted"]

        async def replaced():
            wl = await job_workload(cluster, job)
            return wl if wl and wl["metadata"]["uid"] != first["metadata"]["uid"] else None

        second = await eventually(replaced)
        # Built from the restored template: no trace of the first admission.
        template = second["spec"]["podSets"][0]["template"]
        assert "nodeSelector" not in template["spec"]
        assert api.LABEL_PODSET not in template["metadata"]["labels"]
        await eventually(lambda: cluster.admitted(second["metadata"]["name"]))
        await eventually(lambda: _started(cluster, "j"))


# ------------------------------------------------------------------------------------------------
# Worker cluster: kwok runs Job pods to completion.


async def test_job_completes_and_its_workload_finishes(worker_cluster):
    cluster = worker_cluster
    ns = cluster.namespace
    await queues(cluster, node_labels={"type": "kwok"})
    config = {"waitForPodsReady": {"enable": True, "blockAdmission": False, "timeout": "10m"}}
    async with job_agent(cluster, config):
        job = await create_job(cluster, batch_job("done", parallelism=1, completions=3, cpu="100m"))
        wl = await eventually(lambda: job_workload(cluster, job))
        name = wl["metadata"]["name"]

        async def finished():
            current = await cluster.wl(name)
            if current is None or current["metadata"].get("finalizers"):
                return None
            return current if condition_is(current, api.WORKLOAD_FINISHED, "True") else None

        wl = await eventually(finished, timeout=60)
        done = await get_job(cluster, "done")
        complete = next(c for c in done["status"]["conditions"] if c["type"] == "Complete")
        finished_condition = condition(wl, api.WORKLOAD_FINISHED)
        assert (finished_condition["reason"], finished_condition["message"]) == (
            "Succeeded",
            complete["message"],
        )
        assert condition_is(wl, api.WORKLOAD_PODS_READY, "True", "Started")
        # Written as upstream's job reconciler writes it, under a field manager of its own.
        finishers = [
            m["manager"]
            for m in wl["metadata"]["managedFields"]
            if m.get("subresource") == "status" and '"Finished"' in str(m.get("fieldsV1"))
        ]
        assert finishers == ["kueue-job-controller-Finished"], finishers
        assert await eventually(lambda: job_events(cluster, "done", "FinishedWorkload")) == [
            f"Workload '{ns}/{name}' is declared finished"
        ]


async def test_preempted_job_runs_again_after_the_preemptor_completes(worker_cluster):
    cluster = worker_cluster
    await queues(
        cluster, cpu="1", node_labels={"type": "kwok"}, preemption={"withinClusterQueue": "LowerPriority"}
    )
    low_class, high_class = await priority_class(cluster, 10), await priority_class(cluster, 100)
    async with job_agent(cluster):
        # No node has this label: the lower Job's pods stay Pending, so it never completes.
        low = await create_job(
            cluster, batch_job("low", priority_class=low_class, node_selector={"example.com/hold": "true"})
        )
        await eventually(lambda: _started(cluster, "low"))
        low_name = (await job_workload(cluster, low))["metadata"]["name"]
        high = await create_job(cluster, batch_job("high", priority_class=high_class))
        high_wl = await eventually(lambda: job_workload(cluster, high))

        async def high_finished():
            return await cluster.wl(high_wl["metadata"]["name"]) is None or condition_is(
                await cluster.wl(high_wl["metadata"]["name"]), api.WORKLOAD_FINISHED, "True", "Succeeded"
            )

        await eventually(high_finished, timeout=60)
        await eventually(lambda: _started(cluster, "low"))

        async def readmitted():
            wl = await cluster.wl(low_name)
            return wl if condition_is(wl, api.WORKLOAD_ADMITTED) else None

        wl = await eventually(readmitted)
        assert wl["status"]["schedulingStats"]["evictions"] == [
            {"reason": "Preempted", "underlyingCause": "", "count": 1}
        ]
        assert condition_is(wl, api.WORKLOAD_EVICTED, "False", "QuotaReserved")
        assert len(await job_events(cluster, "low", "Stopped")) == 1
        assert len(await job_events(cluster, "low", "Started")) == 1  # one event, series count 2
