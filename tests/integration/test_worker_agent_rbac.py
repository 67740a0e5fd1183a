"""The worker_agent's RBAC in deploy/worker-agent is enough: an agent authenticated as the
kueue-worker-agent ServiceAccount (token from the TokenRequest API) elects a leader, admits a
Workload, writes ClusterQueue status and events, with no permission errors; and it may make the
calls its visibility API server and its secure metrics endpoint make."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import structlog
import yaml
from admission_kit import (
    cluster_queue,
    eventually,
    local_queue,
    resource_flavor,
    running_agent,
    unique,
    workload,
)

from kube_runtime import delegated_auth
from kube_runtime.client import KubeClient
from kueue_domain import api

pytestmark = pytest.mark.realcluster

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "worker-agent"


async def test_agent_runs_with_its_service_account(kube, cluster, fleet):
    cluster.fleet.kubectl(
        "manager", "apply", "-f", str(DEPLOY / "namespace.yaml"), "-f", str(DEPLOY / "rbac.yaml")
    )
    token = await kube.request(
        "POST",
        "/api/v1/namespaces/kueue-system/serviceaccounts/kueue-worker-agent/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(Path(fleet.kubeconfig("manager")).read_text())  # noqa: ASYNC240 - a small local file
    config = copy.deepcopy(admin)
    config["users"] = [{"name": "agent", "user": {"token": token["status"]["token"]}}]
    config["contexts"] = [
        {"name": "agent", "context": {"cluster": admin["clusters"][0]["name"], "user": "agent"}}
    ]
    config["current-context"] = "agent"
    ns = cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "2"}}))
    await cluster.create(local_queue(ns, "main", cq))
    with structlog.testing.capture_logs() as logs:
        async with await KubeClient.from_kubeconfig_dict(config) as agent_kube:
            lease = unique("rbac-test")
            settings = {"leaderElection": {"leaderElect": True, "resourceName": lease}}
            async with running_agent(agent_kube, settings) as agent:
                await cluster.create(workload(ns, "w", "main"))
                await eventually(lambda: cluster.admitted("w"))

                async def cq_status():
                    return ((await cluster.cq(cq)).get("status") or {}).get("admittedWorkloads") == 1

                await eventually(cq_status)

                async def events():
                    items, _ = await kube.list(api.EVENT, namespace=ns)
                    return {e.get("reason") for e in items} >= {"QuotaReserved", "Admitted"}

                await eventually(events)
                held = await kube.get(api.LEASE, lease, namespace="kueue-system")
                assert held["spec"]["holderIdentity"] == agent.identity
    # No event refused to the ServiceAccount (RBAC). Events about other tests' objects in
    # namespaces being deleted ("unable to create new content in namespace ...") may be dropped.
    refused = [
        entry
        for entry in logs
        if str(entry.get("event", "")).startswith("dropping event")
        and "system:serviceaccount" in str(entry.get("error", ""))
    ]
    assert refused == []


async def test_the_service_account_may_do_what_the_visibility_api_needs(kube, cluster, fleet):
    """The visibility API server's calls, made with the ServiceAccount's token: the authentication
    ConfigMap, a SubjectAccessReview, and the APIServices whose CA bundle it keeps."""
    cluster.fleet.kubectl(
        "manager", "apply", "-f", str(DEPLOY / "namespace.yaml"), "-f", str(DEPLOY / "rbac.yaml")
    )
    token = await kube.request(
        "POST",
        "/api/v1/namespaces/kueue-system/serviceaccounts/kueue-worker-agent/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(Path(fleet.kubeconfig("manager")).read_text())  # noqa: ASYNC240 - a small local file
    config = copy.deepcopy(admin)
    config["users"] = [{"name": "agent", "user": {"token": token["status"]["token"]}}]
    config["contexts"] = [
        {"name": "agent", "context": {"cluster": admin["clusters"][0]["name"], "user": "agent"}}
    ]
    config["current-context"] = "agent"
    async with await KubeClient.from_kubeconfig_dict(config) as agent_kube:
        authn = delegated_auth.RequestHeaderAuthenticator(agent_kube)
        await authn.refresh()
        # The fleet's apiservers have aggregation flags: the front-proxy CA and header names are read.
        assert authn.settings.requestheader_cas and authn.settings.username_headers == ("X-Remote-User",)
        reviewer = delegated_auth.SubjectAccessReviewer(agent_kube)
        nobody = delegated_auth.UserInfo(f"nobody-{unique('u')}", groups=("system:authenticated",))
        attributes = delegated_auth.ResourceAttributes(
            "get", "visibility.kueue.x-k8s.io", "v1beta1", "clusterqueues", "pendingworkloads", "cq"
        )
        decision = await reviewer.authorize(nobody, attributes)
        assert decision.allowed is False and reviewer.reviews_total == 1
        await agent_kube.list(api.API_SERVICE)  # no Forbidden


async def test_the_service_account_may_review_metrics_callers(kube, cluster, fleet):
    """Secure metrics' reviews, made with the ServiceAccount's token: a TokenReview of a scraper's
    token and a SubjectAccessReview of `get /metrics`; and nothing more than that on /metrics itself."""
    cluster.fleet.kubectl(
        "manager", "apply", "-f", str(DEPLOY / "namespace.yaml"), "-f", str(DEPLOY / "rbac.yaml")
    )
    token = await kube.request(
        "POST",
        "/api/v1/namespaces/kueue-system/serviceaccounts/kueue-worker-agent/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(Path(fleet.kubeconfig("manager")).read_text())  # noqa: ASYNC240 - a small local file
    config = copy.deepcopy(admin)
    config["users"] = [{"name": "agent", "user": {"token": token["status"]["token"]}}]
    config["contexts"] = [
        {"name": "agent", "context": {"cluster": admin["clusters"][0]["name"], "user": "agent"}}
    ]
    config["current-context"] = "agent"
    async with await KubeClient.from_kubeconfig_dict(config) as agent_kube:
        tokens = delegated_auth.TokenReviewer(agent_kube)
        user = await tokens.review(token["status"]["token"])
        assert user is not None and user.name == "system:serviceaccount:kueue-system:kueue-worker-agent"
        assert await tokens.review("not-a-token") is None
        access = delegated_auth.SubjectAccessReviewer(agent_kube, always_allow_groups=())
        decision = await access.authorize(user, delegated_auth.NonResourceAttributes("get", "/metrics"))
        assert decision.allowed is False  # the agent itself is no metrics reader
