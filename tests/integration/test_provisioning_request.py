"""The `kueue.x-k8s.io/provisioning-request` admission check on a real apiserver: the agent creates
PodTemplates and a ProvisioningRequest for a Job's Workload, cluster-autoscaler's stand-in
(localfleet/autoscaler_standin.py, a fleet component) answers, and the check's state follows:
admitted once Provisioned (the pods carry the consume annotation), retried then Rejected after
Failed per the config's retryStrategy, the request deleted on eviction. And a ClusterQueue with a
MultiKueue check next to a provisioning one is inactive, as upstream."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import yaml
from admission_kit import (
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
from test_job_integration import batch_job, create_job, job_workload

from kube_runtime.client import AlreadyExists, NotFound
from kueue_domain import api
from localfleet import autoscaler_standin as standin_mod
from localfleet.autoscaler_standin import AutoscalerStandIn
from localfleet.binaries import Binaries, crd_docs, read_versions

pytestmark = pytest.mark.realcluster

CLASS = api.PROVISIONING_CLASS_CHECK_CAPACITY
PRC_CRD = "provisioningrequestconfigs.kueue.x-k8s.io"
PR_CRD = "provisioningrequests.autoscaling.x-k8s.io"
REPO = Path(__file__).resolve().parents[2]


def _our_prc_crd() -> dict:
    crd = yaml.safe_load((REPO / "deploy" / "crds" / "provisioningrequestconfigs.yaml").read_text())
    crd["spec"].pop("conversion", None)  # same fields in both versions: no webhook needed here
    return crd


async def _ensure_crds(kube) -> None:
    """A fleet started before these CRDs joined it lacks them: install them as `up` would."""
    missing = []
    if not await kube.serves(api.PROVISIONING_REQUEST):
        missing += crd_docs(Binaries(read_versions()).provisioning_request_crds)
    if not await kube.serves(api.PROVISIONING_REQUEST_CONFIG):
        missing.append(_our_prc_crd())
    for crd in missing:
        with contextlib.suppress(AlreadyExists):
            await kube.create(api.CUSTOM_RESOURCE_DEFINITION, crd)
    for resource in (api.PROVISIONING_REQUEST, api.PROVISIONING_REQUEST_CONFIG):
        await eventually(lambda r=resource: kube.serves(r), timeout=30)


@pytest.fixture
async def prov_env(kube, cluster):
    await _ensure_crds(kube)
    return cluster


async def create_check(cluster, check: str, prc: str) -> None:
    ref = {"apiGroup": api.GROUP, "kind": "ProvisioningRequestConfig", "name": prc}
    spec = {"controllerName": api.PROVISIONING_REQUEST_CONTROLLER_NAME, "parameters": ref}
    await cluster.create(
        {"apiVersion": api.API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": check}, "spec": spec}
    )


async def setup_queue(
    cluster, retry: dict | None = None, managed: list[str] | None = None
) -> tuple[str, str]:
    """A ProvisioningRequestConfig, its check, and a ClusterQueue/LocalQueue `main` with it."""
    kube = cluster.kube
    prc = unique("prc")
    spec: dict = {"provisioningClassName": CLASS, "parameters": {"ValidUntilSeconds": "60"}}
    if retry:
        spec["retryStrategy"] = retry
    if managed:
        spec["managedResources"] = managed
    await kube.create(
        api.PROVISIONING_REQUEST_CONFIG,
        {
            "apiVersion": api.API_VERSION,
            "kind": "ProvisioningRequestConfig",
            "metadata": {"name": prc},
            "spec": spec,
        },
    )
    cluster.cleanup.add(api.PROVISIONING_REQUEST_CONFIG, prc)
    check = unique("prov")
    await create_check(cluster, check, prc)
    flavor, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(flavor, node_labels={"pool": "gpus"}))
    await cluster.create(cluster_queue(cq, {flavor: {"cpu": "8"}}, admission_checks=[check]))
    await cluster.create(local_queue(cluster.namespace, "main", cq))
    return check, cq


async def requests_of(cluster) -> dict[str, dict]:
    items, _ = await cluster.kube.list(api.PROVISIONING_REQUEST, namespace=cluster.namespace)
    return {pr["metadata"]["name"]: pr for pr in items}


def check_state(wl: dict | None, name: str) -> dict:
    return next(
        (c for c in ((wl or {}).get("status") or {}).get("admissionChecks") or () if c["name"] == name), {}
    )


@contextlib.asynccontextmanager
async def standin(kube, outcome, after: float = 1.0):
    s = AutoscalerStandIn(kube, outcome, after=after)
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


async def test_provisioned_request_admits_the_job_and_annotates_its_pods(kube, prov_env):
    cluster = prov_env
    check, _ = await setup_queue(cluster)
    async with running_agent(kube), standin(kube, standin_mod.PROVISIONED):
        active = await eventually(lambda: kube.get(api.ADMISSION_CHECK, check))
        await eventually(lambda: _active(kube, check))
        job = await create_job(cluster, batch_job(unique("job")))
        wl = await eventually(lambda: job_workload(cluster, job))
        wl_name = wl["metadata"]["name"]
        pr_name = f"{wl_name}-{check}-1"
        prs = await eventually(lambda: requests_of(cluster))
        assert list(prs) == [pr_name]
        pr = prs[pr_name]
        assert pr["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
        owner = pr["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Workload", wl_name, True)
        pt_name = f"ppt-{pr_name}-main"
        assert pr["spec"]["provisioningClassName"] == CLASS
        assert pr["spec"]["parameters"] == {"ValidUntilSeconds": "60"}
        assert pr["spec"]["podSets"] == [{"podTemplateRef": {"name": pt_name}, "count": 1}]

        async def template_owned_by_request():
            pt = await kube.get(api.POD_TEMPLATE, pt_name, namespace=cluster.namespace)
            refs = pt["metadata"].get("ownerReferences") or []
            return pt if [r["name"] for r in refs if r.get("controller")] == [pr_name] else None

        pt = await eventually(template_owned_by_request)
        assert pt["template"]["spec"]["nodeSelector"] == {"pool": "gpus"}  # the flavor's node labels

        await eventually(lambda: cluster.admitted(wl_name))
        state = check_state(await cluster.wl(wl_name), check)
        assert state["state"] == "Ready"
        assert state["message"] == "Capacity is found in the cluster"
        assert state["podSetUpdates"] == [
            {
                "name": "main",
                "annotations": {
                    "autoscaling.x-k8s.io/consume-provisioning-request": pr_name,
                    "autoscaling.x-k8s.io/provisioning-class-name": CLASS,
                },
            }
        ]

        async def pods():
            items, _ = await kube.list(api.POD, namespace=cluster.namespace)
            return items

        pod = (await eventually(pods))[0]
        assert pod["metadata"]["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == pr_name
        assert pod["metadata"]["annotations"]["autoscaling.x-k8s.io/provisioning-class-name"] == CLASS

        # Eviction (here a deactivation) deletes the request (CleanupProvisioningRequestsOnEviction).
        await kube.patch_merge(
            api.WORKLOAD, wl_name, {"spec": {"active": False}}, namespace=cluster.namespace
        )
        await eventually(lambda: condition_is_async(cluster, wl_name, api.WORKLOAD_EVICTED))
        await eventually(lambda: _gone(cluster, pr_name))
        assert active["spec"]["controllerName"] == api.PROVISIONING_REQUEST_CONTROLLER_NAME


async def test_failed_request_is_retried_then_rejected(kube, prov_env):
    cluster = prov_env
    check, _ = await setup_queue(
        cluster, retry={"backoffLimitCount": 1, "backoffBaseSeconds": 1, "backoffMaxSeconds": 2}
    )
    async with running_agent(kube), standin(kube, standin_mod.FAILED) as s:
        await eventually(lambda: _active(kube, check))
        job = await create_job(cluster, batch_job(unique("job")))
        wl = await eventually(lambda: job_workload(cluster, job))
        name = wl["metadata"]["name"]

        # Rejected deactivates the Workload (the eviction then resets the check to Pending).
        async def deactivated():
            current = await cluster.wl(name)
            evicted = condition(current, api.WORKLOAD_EVICTED) or {}
            return current if evicted.get("reason") == "DeactivatedDueToAdmissionCheck" else None

        current = await eventually(deactivated, timeout=60)
        assert current["spec"]["active"] is False
        assert condition(current, api.WORKLOAD_EVICTED)["message"] == (
            f'The workload is deactivated due to AdmissionCheck in Rejected state: "{check}" '
            f"({standin_mod.DEFAULT_FAILURE_MESSAGE})"
        )
        assert int(check_state(current, check).get("retryCount") or 0) == 1
        failed = [a for a in s.answered if a.endswith(" Failed")]
        assert failed == [
            f"{cluster.namespace}/{name}-{check}-1 Failed",
            f"{cluster.namespace}/{name}-{check}-2 Failed",
        ]
        evictions = current["status"]["schedulingStats"]["evictions"]
        assert {"reason": "AdmissionCheck", "count": 1, "underlyingCause": ""} in evictions
        # The check was Retry, then Rejected: the events say so (the controller's later
        # AdmissionCheckUpdated events join the first one's series, as client-go's do).
        expected = {
            (
                "AdmissionCheckUpdated",
                f"Admission check {check} updated state from Pending to Retry with message: "
                f"Retrying after failure: {standin_mod.DEFAULT_FAILURE_MESSAGE}",
            ),
            (
                "AdmissionCheckRejected",
                f"Deactivating workload because AdmissionCheck for {check} was Rejected: "
                f"{standin_mod.DEFAULT_FAILURE_MESSAGE}",
            ),
        }

        async def transitions():
            items, _ = await kube.list(api.EVENT, namespace=cluster.namespace)
            return expected <= {(e.get("reason"), e.get("note")) for e in items}

        await eventually(transitions)
        # Deactivated: the last request goes too.
        await eventually(lambda: _no_requests(cluster))
        await asyncio.sleep(1)
        assert not [a for a in s.answered if a.endswith(f"-{check}-3 Accepted")]


async def test_capacity_revoked_after_admission_deactivates_the_workload(kube, prov_env):
    cluster = prov_env
    check, _ = await setup_queue(cluster)
    # Revoked 4 s after Provisioned: the Workload is admitted in between.
    async with running_agent(kube), standin(kube, standin_mod.CAPACITY_REVOKED, after=4):
        await eventually(lambda: _active(kube, check))
        job = await create_job(cluster, batch_job(unique("job")))
        wl = await eventually(lambda: job_workload(cluster, job))
        name = wl["metadata"]["name"]
        await eventually(lambda: cluster.admitted(name))

        async def deactivated():
            current = await cluster.wl(name)
            evicted = condition(current, api.WORKLOAD_EVICTED) or {}
            return current if evicted.get("reason") == "DeactivatedDueToAdmissionCheck" else None

        current = await eventually(deactivated)
        assert condition(current, api.WORKLOAD_EVICTED)["message"] == (
            f'The workload is deactivated due to AdmissionCheck in Rejected state: "{check}" '
            f"({standin_mod.REVOKED[1]})"
        )
        await eventually(lambda: _no_requests(cluster))


async def test_booking_expired_after_admission_changes_nothing(kube, prov_env):
    cluster = prov_env
    check, _ = await setup_queue(cluster)
    async with running_agent(kube), standin(kube, standin_mod.BOOKING_EXPIRED) as s:
        await eventually(lambda: _active(kube, check))
        job = await create_job(cluster, batch_job(unique("job")))
        wl = await eventually(lambda: job_workload(cluster, job))
        name = wl["metadata"]["name"]
        await eventually(lambda: cluster.admitted(name))
        await eventually(lambda: _answered(s, " BookingExpired"))
        await consistently(lambda: cluster.admitted(name), duration=2)
        assert check_state(await cluster.wl(name), check)["state"] == "Ready"
        assert list(await requests_of(cluster)) == [f"{name}-{check}-1"]


async def test_without_cleanup_on_eviction_the_request_stays(kube, prov_env):
    cluster = prov_env
    check, _ = await setup_queue(cluster)
    gates = {"CleanupProvisioningRequestsOnEviction": False}
    async with running_agent(kube, gates=gates), standin(kube, standin_mod.PROVISIONED):
        await eventually(lambda: _active(kube, check))
        job = await create_job(cluster, batch_job(unique("job")))
        wl = await eventually(lambda: job_workload(cluster, job))
        name = wl["metadata"]["name"]
        await eventually(lambda: cluster.admitted(name))
        await kube.patch_merge(api.WORKLOAD, name, {"spec": {"active": False}}, namespace=cluster.namespace)
        await eventually(lambda: condition_is_async(cluster, name, api.WORKLOAD_EVICTED))
        await consistently(lambda: _present(cluster, f"{name}-{check}-1"), duration=2)


async def _present(cluster, pr_name: str) -> bool:
    return not await _gone(cluster, pr_name)


async def _answered(s, suffix: str) -> bool:
    return any(a.endswith(suffix) for a in s.answered)


async def test_no_request_when_no_podset_uses_a_managed_resource(kube, prov_env):
    cluster = prov_env
    check, _ = await setup_queue(cluster, managed=["example.com/gpu"])
    async with running_agent(kube):
        await eventually(lambda: _active(kube, check))
        job = await create_job(cluster, batch_job(unique("job")))
        wl = await eventually(lambda: job_workload(cluster, job))
        await eventually(lambda: cluster.admitted(wl["metadata"]["name"]))
        state = check_state(await cluster.wl(wl["metadata"]["name"]), check)
        assert (state["state"], state["message"]) == ("Ready", "the provisioning request is not needed")
        assert await requests_of(cluster) == {}


async def test_bad_parameters_and_multikueue_next_to_provisioning(kube, prov_env):
    cluster = prov_env
    check, prc = unique("prov"), unique("prc")
    await create_check(cluster, check, prc)
    mk = unique("mk")
    await cluster.active_admission_check(mk, controller=api.MULTIKUEUE_CONTROLLER_NAME)
    flavor, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(flavor))
    await cluster.create(cluster_queue(cq, {flavor: {"cpu": "1"}}, admission_checks=[check, mk]))
    async with running_agent(kube):

        async def bad():
            ac = await kube.get(api.ADMISSION_CHECK, check)
            c = condition(ac, api.CONDITION_ACTIVE)
            return c if c and c["status"] == "False" else None

        c = await eventually(bad)
        assert c["reason"] == "BadParametersRef"
        assert c["message"] == f'ProvisioningRequestConfig.kueue.x-k8s.io "{prc}" not found'
        # Give it its config: Active, and the ClusterQueue is still inactive for the MultiKueue pair.
        await kube.create(
            api.PROVISIONING_REQUEST_CONFIG,
            {
                "apiVersion": api.API_VERSION,
                "kind": "ProvisioningRequestConfig",
                "metadata": {"name": prc},
                "spec": {"provisioningClassName": CLASS},
            },
        )
        cluster.cleanup.add(api.PROVISIONING_REQUEST_CONFIG, prc)
        await eventually(lambda: _active(kube, check))

        async def reason():
            c = condition(await cluster.cq(cq), api.CONDITION_ACTIVE) or {}
            return c if c.get("reason") == "MultiKueueWithProvisioningRequest" else None

        c = await eventually(reason)
        assert c["status"] == "False"
        assert c["message"] == (
            "Can't admit new workloads: Cannot use both MultiKueue and ProvisioningRequest "
            f"AdmissionChecks together, found: {mk}, {check}."
        )


async def _active(kube, check: str) -> bool:
    return condition_is(await kube.get(api.ADMISSION_CHECK, check), api.CONDITION_ACTIVE, "True", "Active")


async def condition_is_async(cluster, name: str, ctype: str) -> bool:
    return condition_is(await cluster.wl(name), ctype)


async def _gone(cluster, pr_name: str) -> bool:
    try:
        await cluster.kube.get(api.PROVISIONING_REQUEST, pr_name, namespace=cluster.namespace)
    except NotFound:
        return True
    return False


async def _no_requests(cluster) -> bool:
    return not await requests_of(cluster)
