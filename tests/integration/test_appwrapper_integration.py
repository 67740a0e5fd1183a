"""The AppWrapper integration on one cluster, with the real AppWrapper controller of the test fleet's
first worker: one Workload per AppWrapper with a PodSet per pod template of its components; admitted,
it is unsuspended with its flavor's node selector and tolerations in the component's podSetInfos,
which the AppWrapper controller applies to the Job it creates (that Job gets no Workload of its own);
it finishes from the AppWrapper's phase; deactivated, it is stopped (suspended, podSetInfos cleared),
its Job deleted by its controller, and the quota released."""

from __future__ import annotations

import pytest
from admission_kit import cluster_queue, eventually, local_queue, resource_flavor, unique
from multikueue_kit import condition
from test_job_integration import job_agent, queues, worker_cluster  # noqa: F401 (fixture)
from test_multikueue_appwrapper import APPWRAPPER_FRAMEWORKS, appwrapper

from kube_runtime.client import NotFound
from kueue_domain import api, naming

pytestmark = pytest.mark.realcluster

FRAMEWORKS = {"integrations": {"frameworks": APPWRAPPER_FRAMEWORKS}}


def _queued(body: dict) -> dict:
    """As our webhook leaves it: suspended."""
    body["spec"]["suspend"] = True
    return body


async def _workloads(cluster) -> list[dict]:
    items, _ = await cluster.kube.list(api.WORKLOAD, namespace=cluster.namespace)
    return items


async def _workload(cluster, aw: dict) -> dict | None:
    uid = aw["metadata"]["uid"]
    return next(
        (
            w
            for w in await _workloads(cluster)
            if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences") or ())
        ),
        None,
    )


async def _get(cluster, resource: api.Resource, name: str) -> dict | None:
    try:
        return await cluster.kube.get(resource, name, namespace=cluster.namespace)
    except NotFound:
        return None


async def test_an_appwrapper_is_admitted_runs_its_job_and_finishes(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    await queues(cluster, cpu="4")
    async with job_agent(cluster, FRAMEWORKS):
        body = _queued(appwrapper("aw", pods=2))
        aw = await cluster.kube.create(api.APPWRAPPER, body, namespace=cluster.namespace)
        wl = await eventually(lambda: _workload(cluster, aw))
        assert wl["metadata"]["name"] == naming.workload_name(
            "aw", aw["metadata"]["uid"], "AppWrapper", "workload.codeflare.dev"
        )
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("aw-0", 2)]

        async def succeeded():
            current = await _get(cluster, api.APPWRAPPER, "aw")
            return current if (current.get("status") or {}).get("phase") == "Succeeded" else None

        await eventually(succeeded, timeout=120)

        async def finished():
            found = condition(await _workload(cluster, aw), api.WORKLOAD_FINISHED)
            return found if found and found["status"] == "True" else None

        found = await eventually(finished, timeout=30)
        assert (found["reason"], found["message"]) == ("Succeeded", "AppWrapper finished successfully")
        # The Job the AppWrapper controller created is covered by the AppWrapper's Workload.
        job = await _get(cluster, api.JOB, "aw")
        assert job["metadata"]["ownerReferences"][0]["kind"] == "AppWrapper"
        assert [w["metadata"]["name"] for w in await _workloads(cluster)] == [wl["metadata"]["name"]]


async def test_an_appwrapper_starts_with_its_flavor_and_a_deactivated_one_is_stopped(worker_cluster):  # noqa: F811
    cluster = worker_cluster
    rf, cq = unique("rf"), unique("cq")
    flavor = resource_flavor(rf, node_labels={"example.com/pool": "a"})
    flavor["spec"]["tolerations"] = [
        {"key": "example.com/pool", "operator": "Exists", "effect": "NoSchedule"}
    ]
    await cluster.create(flavor)
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "8"}}))
    await cluster.create(local_queue(cluster.namespace, "main", cq))
    async with job_agent(cluster, FRAMEWORKS):
        body = _queued(appwrapper("held", pods=2, keep_running=True))
        aw = await cluster.kube.create(api.APPWRAPPER, body, namespace=cluster.namespace)

        async def deployed():
            current = await _get(cluster, api.APPWRAPPER, "held")
            job = await _get(cluster, api.JOB, "held")
            return (current, job) if not current["spec"].get("suspend") and job else None

        current, job = await eventually(deployed, timeout=60)
        [info] = current["spec"]["components"][0]["podSetInfos"]
        assert info["labels"][api.LABEL_PODSET] == "held-0"
        assert info["nodeSelector"] == {"example.com/pool": "a"}
        assert info["tolerations"] == flavor["spec"]["tolerations"]
        # The component's template is left alone; the controller merged the info into the Job.
        assert "nodeSelector" not in current["spec"]["components"][0]["template"]["spec"]["template"]["spec"]
        pod = job["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"example.com/pool": "a"}
        assert pod["metadata"]["labels"][api.APPWRAPPER_LABEL] == "held"

        wl = await _workload(cluster, aw)
        await cluster.kube.patch_merge(
            api.WORKLOAD, wl["metadata"]["name"], {"spec": {"active": False}}, namespace=cluster.namespace
        )

        async def stopped():
            current = await _get(cluster, api.APPWRAPPER, "held")
            cleared = "podSetInfos" not in current["spec"]["components"][0]
            gone = await _get(cluster, api.JOB, "held") is None
            return current if current["spec"].get("suspend") is True and cleared and gone else None

        await eventually(stopped, timeout=90)

        async def released():
            reserved = condition(await _workload(cluster, aw), api.WORKLOAD_QUOTA_RESERVED)
            return (reserved and reserved["status"] == "False") or None

        await eventually(released, timeout=60)
