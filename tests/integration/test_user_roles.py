"""The user-facing ClusterRoles (deploy/rbac/user-roles) on a real cluster: applied as kustomize has
them, kube-controller-manager's clusterrole-aggregation controller fills kueue-batch-user-role and
kueue-batch-admin-role with the rules of the roles labelled for them (and the viewers' rules reach
Kubernetes' view role); then, as ServiceAccounts with TokenRequest tokens, one bound to the batch
user role in a namespace and one to the batch admin role cluster-wide, SelfSubjectAccessReviews and
real requests show what each may do: the user creates Jobs, lists Workloads and LocalQueues and reads
a LocalQueue's pending workloads in its namespace only, and may not touch ClusterQueues; the admin
lists and creates ClusterQueues and reads their pending workloads. The unit side:
tests/unit/test_user_roles.py; docs/admission.md (User-facing ClusterRoles)."""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path

import pytest
import yaml
from admission_kit import cluster_queue, eventually, local_queue, resource_flavor, unique

from kube_runtime.client import Forbidden, KubeClient
from kueue_domain import api

pytestmark = pytest.mark.realcluster

ROLES = Path(__file__).resolve().parents[2] / "deploy" / "rbac" / "user-roles"
CLUSTER = "manager"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def role_docs() -> list[dict]:
    docs: list[dict] = []
    for f in sorted(ROLES.glob("*-roles.yaml")):
        docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def rule_set(rules: list[dict]) -> set[str]:
    return {json.dumps(r, sort_keys=True) for r in rules}


async def cluster_role(kube: KubeClient, name: str) -> dict:
    return await kube.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")


async def can(client: KubeClient, verb: str, resource: str, **attributes: str) -> bool:
    """A SelfSubjectAccessReview: may this client's user do `verb` on `resource`?"""
    review = await client.request(
        "POST",
        SSAR,
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": resource, **attributes}},
        },
    )
    return bool(review["status"].get("allowed"))


@contextlib.asynccontextmanager
async def service_account_client(kube: KubeClient, fleet, namespace: str, name: str):
    """A client authenticated as ServiceAccount namespace/name, with a token from the TokenRequest API."""
    fleet.kubectl(CLUSTER, "-n", namespace, "create", "serviceaccount", name)
    token = await kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(Path(fleet.kubeconfig(CLUSTER)).read_text())  # noqa: ASYNC240 - a small local file
    config = copy.deepcopy(admin)
    config["users"] = [{"name": name, "user": {"token": token["status"]["token"]}}]
    config["contexts"] = [{"name": name, "context": {"cluster": admin["clusters"][0]["name"], "user": name}}]
    config["current-context"] = name
    async with await KubeClient.from_kubeconfig_dict(config) as client:
        yield client


def binding(
    kind: str, name: str, role: str, sa_namespace: str, sa: str, namespace: str | None = None
) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_namespace}],
    }


async def test_aggregated_roles_fill_and_grant(kube, cluster, fleet):
    fleet.kubectl(CLUSTER, "apply", "-k", str(ROLES))
    docs = {d["metadata"]["name"]: d for d in role_docs()}
    assert {"kueue-batch-admin-role", "kueue-batch-user-role"} <= set(docs)

    def members(label: str) -> list[dict]:
        return [d for d in docs.values() if (d["metadata"].get("labels") or {}).get(label) == "true"]

    # The aggregation controller writes the union of the labelled roles' rules (not ours: the two
    # aggregated roles have none of their own).
    for name, label in (
        ("kueue-batch-user-role", "rbac.kueue.x-k8s.io/batch-user"),
        ("kueue-batch-admin-role", "rbac.kueue.x-k8s.io/batch-admin"),
    ):
        expected = rule_set([r for d in members(label) for r in d["rules"]])

        async def filled(name=name, expected=expected):
            rules = rule_set((await cluster_role(kube, name)).get("rules") or [])
            return rules == expected or None

        await eventually(filled, timeout=60)
    # The viewers labelled aggregate-to-view reach Kubernetes' own view role.
    viewed = rule_set([r for d in members("rbac.authorization.k8s.io/aggregate-to-view") for r in d["rules"]])

    async def in_view():
        return rule_set((await cluster_role(kube, "view")).get("rules") or []) >= viewed or None

    await eventually(in_view, timeout=60)

    ns = cluster.namespace
    rf, cq = unique("rf"), unique("cq")
    await cluster.create(resource_flavor(rf))
    await cluster.create(cluster_queue(cq, {rf: {"cpu": "2"}}))
    await cluster.create(local_queue(ns, "main", cq))
    admin_binding = unique("batch-admin")
    fleet.kubectl(
        CLUSTER,
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump_all(
            [
                binding("RoleBinding", "batch-user", "kueue-batch-user-role", ns, "batch-user", namespace=ns),
                binding("ClusterRoleBinding", admin_binding, "kueue-batch-admin-role", ns, "batch-admin"),
            ]
        ),
    )
    try:
        async with service_account_client(kube, fleet, ns, "batch-user") as user:
            # RBAC decisions follow bindings within a moment (the authorizer's informers).
            await eventually(lambda: can(user, "create", "jobs", group="batch", namespace=ns), timeout=30)
            for group, resource in (
                ("jobset.x-k8s.io", "jobsets"),
                ("leaderworkerset.x-k8s.io", "leaderworkersets"),
                ("trainer.kubeflow.org", "trainjobs"),
            ):
                assert await can(user, "create", resource, group=group, namespace=ns), resource
            for verb, resource in (("list", "workloads"), ("get", "workloads"), ("list", "localqueues")):
                assert await can(user, verb, resource, group="kueue.x-k8s.io", namespace=ns), (verb, resource)
            assert await can(
                user,
                "get",
                "localqueues",
                group="visibility.kueue.x-k8s.io",
                namespace=ns,
                name="main",
                subresource="pendingworkloads",
            )
            # Reads Workloads and queues, changes none of them; nothing outside its namespace; no
            # ClusterQueues nor their pending workloads.
            assert not await can(user, "create", "workloads", group="kueue.x-k8s.io", namespace=ns)
            assert not await can(user, "create", "localqueues", group="kueue.x-k8s.io", namespace=ns)
            assert not await can(user, "create", "jobs", group="batch", namespace="default")
            assert not await can(user, "create", "clusterqueues", group="kueue.x-k8s.io")
            assert not await can(user, "list", "clusterqueues", group="kueue.x-k8s.io")
            assert not await can(
                user,
                "get",
                "clusterqueues",
                group="visibility.kueue.x-k8s.io",
                name=cq,
                subresource="pendingworkloads",
            )
            # Real requests.
            workloads, _ = await user.list(api.WORKLOAD, namespace=ns)
            assert workloads == []
            queues, _ = await user.list(api.LOCAL_QUEUE, namespace=ns)
            assert [q["metadata"]["name"] for q in queues] == ["main"]
            with pytest.raises(Forbidden):
                await user.list(api.CLUSTER_QUEUE)
            with pytest.raises(Forbidden):
                await user.request(
                    "POST",
                    f"/apis/{api.API_VERSION}/clusterqueues",
                    params={"dryRun": "All"},
                    body=cluster_queue(unique("cq"), {rf: {"cpu": "1"}}),
                )

        async with service_account_client(kube, fleet, ns, "batch-admin") as admin:
            await eventually(lambda: can(admin, "list", "clusterqueues", group="kueue.x-k8s.io"), timeout=30)
            for resource in ("clusterqueues", "resourceflavors", "cohorts"):
                assert await can(admin, "create", resource, group="kueue.x-k8s.io"), resource
            assert await can(admin, "update", "workloads", group="kueue.x-k8s.io", namespace="default")
            assert await can(
                admin,
                "get",
                "clusterqueues",
                group="visibility.kueue.x-k8s.io",
                name=cq,
                subresource="pendingworkloads",
            )
            queues, _ = await admin.list(api.CLUSTER_QUEUE)
            assert cq in {q["metadata"]["name"] for q in queues}
    finally:
        fleet.kubectl(
            CLUSTER, "delete", "clusterrolebinding", admin_binding, "--ignore-not-found", check=False
        )
