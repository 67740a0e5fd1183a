"""The admission webhooks behind a real kube-apiserver: the server runs in-process on 127.0.0.1 with
self-managed TLS, and URL-based webhook configurations registered on the manager cluster send it
the requests of this test's namespaces only (a namespaceSelector on a label unique to the test),
so other tests sharing the fleet never reach it. The configurations are deleted at the end, also
on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import uuid
from typing import Any

import pytest

from kube_runtime.client import ApiError, KubeClient, NotFound
from kube_runtime.informer import Informer
from kueue_domain import api
from kueue_domain.config import parse_config
from worker_agent.webhooks.certs import CertManager
from worker_agent.webhooks.common import Lookups
from worker_agent.webhooks.server import WebhookServer

pytestmark = pytest.mark.realcluster

Obj = dict[str, Any]
SCOPE_LABEL = "kueue-federation.test/webhooks"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def webhook_configurations(token: str, port: int) -> tuple[Obj, Obj]:
    """Our eight webhooks as URL clientConfigs, limited to namespaces labelled with the token."""
    rules = {
        "job": ("batch", "v1", "jobs"),
        "pod": ("", "v1", "pods"),
        "leaderworkerset": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        "jobset": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    }
    paths = {
        ("job", True): api.WEBHOOK_PATH_MUTATE_JOB,
        ("job", False): api.WEBHOOK_PATH_VALIDATE_JOB,
        ("pod", True): api.WEBHOOK_PATH_MUTATE_POD,
        ("pod", False): api.WEBHOOK_PATH_VALIDATE_POD,
        ("leaderworkerset", True): api.WEBHOOK_PATH_MUTATE_LEADER_WORKER_SET,
        ("leaderworkerset", False): api.WEBHOOK_PATH_VALIDATE_LEADER_WORKER_SET,
        ("jobset", True): api.WEBHOOK_PATH_MUTATE_JOB_SET,
        ("jobset", False): api.WEBHOOK_PATH_VALIDATE_JOB_SET,
    }
    configs = []
    for mutating in (True, False):
        hooks = []
        for kind, (group, version, plural) in rules.items():
            operations = ["CREATE"] if mutating and kind != "leaderworkerset" else ["CREATE", "UPDATE"]
            hooks.append(
                {
                    "name": f"{'m' if mutating else 'v'}{kind}.kb.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                    "clientConfig": {"url": f"https://127.0.0.1:{port}{paths[(kind, mutating)]}"},
                    "namespaceSelector": {"matchLabels": {SCOPE_LABEL: token}},
                    "rules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": [version],
                            "operations": operations,
                            "resources": [plural],
                        }
                    ],
                }
            )
        kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
        configs.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {
                    "name": f"kueue-webhook-test-{token}-{'mutating' if mutating else 'validating'}"
                },
                "webhooks": hooks,
            }
        )
    return configs[0], configs[1]


async def dry_run_create(kube: KubeClient, resource: api.Resource, obj: Obj, namespace: str) -> Obj:
    return await kube.request("POST", resource.api_path(namespace), params={"dryRun": "All"}, body=obj)


async def eventually(check, seconds: float = 30) -> Any:
    """Poll `check()` until it returns something truthy."""
    async with asyncio.timeout(seconds):
        while True:
            result = await check()
            if result:
                return result
            await asyncio.sleep(0.2)


def job_obj(name: str, labels: Obj | None = None) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
                    ],
                }
            }
        },
    }


@pytest.fixture
async def webhook_env(kube, tmp_path):
    """Two labelled namespaces, the server, its informers and the registered configurations."""
    token = uuid.uuid4().hex[:8]
    namespaces = [f"webhooks-{token}-a", f"webhooks-{token}-b", f"webhooks-{token}-certs"]
    for ns in namespaces:
        labels = {SCOPE_LABEL: token} if not ns.endswith("certs") else {}
        await kube.create(
            api.NAMESPACE,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}},
        )
    port = free_port()
    config = parse_config(
        {
            "namespace": namespaces[2],
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(tmp_path / "certs")},
            "internalCertManagement": {"webhookSecretName": f"webhook-certs-{token}"},
            "integrations": {
                "frameworks": [
                    "batch/job",
                    "pod",
                    "leaderworkerset.x-k8s.io/leaderworkerset",
                    "jobset.x-k8s.io/jobset",
                ]
            },
        }
    )
    mutating, validating = webhook_configurations(token, port)
    informers = {
        "local_queues": Informer(kube, api.LOCAL_QUEUE),
        "priority_classes": Informer(kube, api.WORKLOAD_PRIORITY_CLASS),
        "cluster_queues": Informer(kube, api.CLUSTER_QUEUE),
        "admission_checks": Informer(kube, api.ADMISSION_CHECK),
    }
    lookups = Lookups(**informers, synced=lambda: all(i.has_synced for i in informers.values()))
    certificates = CertManager(
        kube,
        config,
        webhook_configurations=[
            (api.MUTATING_WEBHOOK_CONFIGURATION, mutating["metadata"]["name"]),
            (api.VALIDATING_WEBHOOK_CONFIGURATION, validating["metadata"]["name"]),
        ],
    )
    server = WebhookServer(kube, config, lookups, certificates)
    created: list[tuple[api.Resource, str]] = []
    try:
        for informer in informers.values():
            informer.start()
        await server.start()
        assert server.serving
        # Registered without a CA bundle: the cert manager injects it.
        await kube.create(api.MUTATING_WEBHOOK_CONFIGURATION, mutating)
        created.append((api.MUTATING_WEBHOOK_CONFIGURATION, mutating["metadata"]["name"]))
        await kube.create(api.VALIDATING_WEBHOOK_CONFIGURATION, validating)
        created.append((api.VALIDATING_WEBHOOK_CONFIGURATION, validating["metadata"]["name"]))
        await certificates.inject_ca_bundle()
        for informer in informers.values():
            await informer.wait_synced()

        # The apiserver picks up new webhook configurations asynchronously: wait until it calls us.
        async def effective() -> bool:
            try:
                obj = await dry_run_create(
                    kube, api.JOB, job_obj("probe", {api.LABEL_QUEUE_NAME: "q"}), namespaces[0]
                )
            except ApiError:
                return False
            return bool(obj["spec"].get("suspend"))

        await eventually(effective)
        yield {"kube": kube, "namespaces": namespaces, "server": server, "token": token, "created": created}
    finally:
        for resource, name in created:
            with contextlib.suppress(NotFound):
                await kube.delete(resource, name)
        await server.stop()
        for informer in informers.values():
            await informer.stop()
        for ns in namespaces:
            with contextlib.suppress(NotFound):
                await kube.delete(api.NAMESPACE, ns)
        # A job integration of another test's agent sharing the fleet may have made Workloads for
        # our Jobs; with the namespaces terminating no new ones can appear: release what is there.
        for ns in namespaces:
            workloads, _ = await kube.list(api.WORKLOAD, namespace=ns)
            for workload in workloads:
                with contextlib.suppress(NotFound):
                    await kube.patch_merge(
                        api.WORKLOAD,
                        workload["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        namespace=ns,
                    )


async def test_ca_bundle_was_injected_and_secret_created(webhook_env):
    kube, namespaces, token = webhook_env["kube"], webhook_env["namespaces"], webhook_env["token"]
    secret = await kube.get(api.SECRET, f"webhook-certs-{token}", namespace=namespaces[2])
    assert set(secret["data"]) >= {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    for resource, name in webhook_env["created"]:
        obj = await kube.get(resource, name)
        assert all(h["clientConfig"]["caBundle"] == secret["data"]["ca.crt"] for h in obj["webhooks"])


async def test_job_with_queue_name_is_created_suspended(webhook_env):
    kube, ns = webhook_env["kube"], webhook_env["namespaces"][0]
    created = await kube.create(
        api.JOB, job_obj("queued", {api.LABEL_QUEUE_NAME: "some-queue"}), namespace=ns
    )
    assert created["spec"]["suspend"] is True
    plain = await kube.create(api.JOB, job_obj("plain"), namespace=ns)
    assert plain["spec"].get("suspend") is False  # not Kueue's: the API default


async def test_job_gets_the_namespace_default_local_queue(webhook_env):
    kube, ns = webhook_env["kube"], webhook_env["namespaces"][1]
    await kube.create(
        api.LOCAL_QUEUE,
        {
            "apiVersion": api.API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": ns},
            "spec": {"clusterQueue": "does-not-matter"},
        },
        namespace=ns,
    )

    async def defaulted() -> Obj | None:
        obj = await dry_run_create(kube, api.JOB, job_obj("defaulted"), ns)
        return obj if (obj["metadata"].get("labels") or {}).get(api.LABEL_QUEUE_NAME) else None

    await eventually(defaulted)  # once the LocalQueue informer has it
    job = await kube.create(api.JOB, job_obj("defaulted"), namespace=ns)
    assert job["metadata"]["labels"][api.LABEL_QUEUE_NAME] == "default"
    assert job["spec"]["suspend"] is True
    # ... and it cannot be cleared in this namespace.
    with pytest.raises(ApiError, match="queue-name must not be empty in namespace with default queue"):
        await kube.patch_merge(
            api.JOB, "defaulted", {"metadata": {"labels": {api.LABEL_QUEUE_NAME: None}}}, namespace=ns
        )


async def test_job_of_a_multikueue_cluster_queue_gets_managed_by(webhook_env, cluster):
    kube, ns, token = webhook_env["kube"], webhook_env["namespaces"][0], webhook_env["token"]
    check, cq = f"mk-{token}", f"cq-{token}"
    await kube.create(
        api.ADMISSION_CHECK,
        {
            "apiVersion": api.API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {"controllerName": api.MULTIKUEUE_CONTROLLER_NAME},
        },
    )
    cluster.cleanup.add(api.ADMISSION_CHECK, check)
    await kube.create(
        api.CLUSTER_QUEUE,
        {
            "apiVersion": api.API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {"namespaceSelector": {}, "resourceGroups": [], "admissionChecks": [check]},
        },
    )
    cluster.cleanup.add(api.CLUSTER_QUEUE, cq)
    await kube.create(
        api.LOCAL_QUEUE,
        {
            "apiVersion": api.API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": "mk", "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
        namespace=ns,
    )

    async def managed_by() -> str | None:
        obj = await dry_run_create(kube, api.JOB, job_obj("mk", {api.LABEL_QUEUE_NAME: "mk"}), ns)
        return obj["spec"].get("managedBy")

    assert await eventually(managed_by) == api.MULTIKUEUE_CONTROLLER_NAME

    # A JobSet queued there: suspended and managed by MultiKueue as well (upstream defaults JobSets too).
    async def job_set_managed_by() -> Obj | None:
        obj = await dry_run_create(kube, api.JOB_SET, job_set_obj("mk", {api.LABEL_QUEUE_NAME: "mk"}), ns)
        return obj if obj["spec"].get("managedBy") else None

    created = await eventually(job_set_managed_by)
    assert created["spec"]["managedBy"] == api.MULTIKUEUE_CONTROLLER_NAME
    assert created["spec"]["suspend"] is True


async def test_pod_with_queue_name_is_gated_and_finalized(webhook_env):
    kube, ns = webhook_env["kube"], webhook_env["namespaces"][0]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {api.LABEL_QUEUE_NAME: "some-queue"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
    }
    created = await kube.create(api.POD, pod, namespace=ns)
    try:
        assert created["metadata"]["labels"][api.LABEL_MANAGED] == "true"
        assert api.FINALIZER_MANAGED in created["metadata"]["finalizers"]
        assert {"name": api.SCHEDULING_GATE_ADMISSION} in created["spec"]["schedulingGates"]
        assert len(created["metadata"]["annotations"][api.ANNOTATION_ROLE_HASH]) == 8
        # A managed label other than "true" is refused.
        bad = copy.deepcopy(pod)
        bad["metadata"] = {"name": "bad", "labels": {api.LABEL_MANAGED: "yes"}}
        with pytest.raises(ApiError, match="managed label value can only be 'true'"):
            await kube.create(api.POD, bad, namespace=ns)
    finally:
        # Nothing reconciles these pods here: release the finalizer so the namespace can go.
        await kube.patch_merge(api.POD, "p", {"metadata": {"finalizers": None}}, namespace=ns)


async def test_lws_pod_templates_are_stamped(webhook_env):
    kube, ns = webhook_env["kube"], webhook_env["namespaces"][0]
    template = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "srv", "labels": {api.LABEL_QUEUE_NAME: "serving"}},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": copy.deepcopy(template),
                "workerTemplate": copy.deepcopy(template),
            },
        },
    }
    created = await kube.create(api.LEADER_WORKER_SET, lws, namespace=ns)
    lwt = created["spec"]["leaderWorkerTemplate"]
    for name in ("leaderTemplate", "workerTemplate"):
        meta = lwt[name]["metadata"]
        assert meta["annotations"][api.ANNOTATION_POD_SUSPENDING_PARENT] == api.FRAMEWORK_LEADER_WORKER_SET
        assert meta["annotations"][api.ANNOTATION_POD_GROUP_SERVING] == "true"
        assert meta["labels"][api.LABEL_QUEUE_NAME] == "serving"


def job_set_obj(name: str, labels: Obj | None = None) -> Obj:
    job = job_obj("unused")["spec"]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job}}]},
    }


async def test_a_queued_jobset_is_suspended_and_a_bad_one_refused_naming_the_field(webhook_env):
    kube, ns = webhook_env["kube"], webhook_env["namespaces"][0]
    created = await kube.create(
        api.JOB_SET, job_set_obj("queued", {api.LABEL_QUEUE_NAME: "some-queue"}), namespace=ns
    )
    assert created["spec"]["suspend"] is True
    with pytest.raises(ApiError) as err:
        await kube.create(api.JOB_SET, job_set_obj("bad", {api.LABEL_QUEUE_NAME: "Bad_Name"}), namespace=ns)
    assert err.value.code == 403
    assert err.value.message.startswith(
        'admission webhook "vjobset.kb.io" denied the request: metadata.labels[kueue.x-k8s.io/queue-name]: '
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric'
    )


async def test_invalid_queue_name_is_rejected_with_a_clear_message(webhook_env):
    kube, ns = webhook_env["kube"], webhook_env["namespaces"][0]
    with pytest.raises(ApiError) as err:
        await kube.create(api.JOB, job_obj("bad", {api.LABEL_QUEUE_NAME: "Bad_Name"}), namespace=ns)
    assert err.value.code == 403
    assert err.value.message.startswith(
        'admission webhook "vjob.kb.io" denied the request: metadata.labels[kueue.x-k8s.io/queue-name]: '
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric'
    )
