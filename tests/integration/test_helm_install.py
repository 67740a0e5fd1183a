"""The Helm chart on a real cluster of the fleet: `helm template` through a server-side dry run
(`kubectl apply --server-side --dry-run=server`: every object, CRDs included, is valid for the
kube-apiserver); then `helm install`, `helm upgrade` (replicas, a feature gate, the visibility API off)
and `helm uninstall`, checking the objects appear, change and disappear. The pods never run (the
fleet has no kubelet and no image): objects are checked, not pods. docs/helm.md.

On the manager cluster, in a namespace and under a release name of their own. Cluster-scoped objects
have the chart's fixed names: the fleet's CRDs stay (crds.enabled=false on install), and ClusterRoles
another test applied from deploy/ (test_worker_agent_rbac, test_user_roles) are adopted with
--take-ownership and deleted by the uninstall (those tests apply them again)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import yaml
from helm_kit import CHART, DEPLOY, helm, kustomize_python, load_docs, render

pytestmark = pytest.mark.realcluster

CLUSTER = "manager"
TEST_GROUP = "kueue.helm-test.kueue-federation.dev"
CLUSTER_SCOPED = [
    ("clusterrole", "kueue-worker-agent"),
    ("clusterrolebinding", "kueue-worker-agent"),
    ("clusterrole", "kueue-federation-manager"),
    ("clusterrolebinding", "kueue-federation-manager"),
    # The user-facing roles (kueue-batch-admin-role, kueue-batch-user-role, the roles they aggregate).
    *(("clusterrole", d["metadata"]["name"]) for d in kustomize_python(DEPLOY / "rbac" / "user-roles")),
    ("mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration"),
    ("validatingwebhookconfiguration", "kueue-validating-webhook-configuration"),
    ("apiservice", "v1beta2.visibility.kueue.x-k8s.io"),
    ("apiservice", "v1beta1.visibility.kueue.x-k8s.io"),
]
# Objects another process of the fleet serves or reads: never taken over.
LIVE_KINDS = {"mutatingwebhookconfiguration", "validatingwebhookconfiguration", "apiservice"}
# Kept by `helm uninstall` (helm.sh/resource-policy: keep): the aggregated roles, which the
# aggregation controller would create again if deleted with the roles they gather.
KEPT = [("clusterrole", "kueue-batch-admin-role"), ("clusterrole", "kueue-batch-user-role")]


@pytest.fixture
def release_namespace(fleet):
    """A namespace of its own; the release is always uninstalled and the namespace deleted."""
    if fleet.state.get("options", {}).get("agents"):
        pytest.skip(
            "this fleet runs our worker_agent: the chart would take over its webhooks and APIServices"
        )
    for kind, name in CLUSTER_SCOPED:
        if kind in LIVE_KINDS:
            found = fleet.kubectl(CLUSTER, "get", kind, name, "--ignore-not-found", "-o", "name").stdout
            assert not found.strip(), f"{kind}/{name} exists on {CLUSTER}: someone else's, not touched"
    ns = f"helm-chart-{uuid.uuid4().hex[:8]}"
    fleet.kubectl(CLUSTER, "create", "namespace", ns)
    yield ns
    run_helm(fleet, "uninstall", f"kf-{ns}", "--namespace", ns, "--wait", check=False)
    fleet.kubectl(CLUSTER, "delete", "namespace", ns, "--wait=false", check=False)
    for kind, name in KEPT:
        fleet.kubectl(CLUSTER, "delete", kind, name, "--ignore-not-found", check=False)


def run_helm(fleet, *args: str, check: bool = True) -> str:
    return helm(*args, "--kubeconfig", fleet.kubeconfig(CLUSTER), check=check)


def get(fleet, kind: str, name: str, ns: str | None = None) -> dict | None:
    args = ["get", kind, name, "--ignore-not-found", "-o", "json"]
    out = fleet.kubectl(CLUSTER, *args, *(["-n", ns] if ns else [])).stdout
    return json.loads(out) if out.strip() else None


def agent_config(fleet, ns: str) -> dict:
    cm = get(fleet, "configmap", "kueue-worker-agent-config", ns)
    return yaml.safe_load(cm["data"]["config.yaml"])


def test_server_side_dry_run_of_everything(fleet, release_namespace):
    """Every object the chart renders (CRDs, both processes, deploy/rbac's role; not monitoring, whose
    kinds need the Prometheus Operator's CRDs) passes the kube-apiserver's validation and admission.

    The CRDs go under a group of their own (TEST_GROUP): the fleet's CRDs of the same names have a
    conversion webhook `url` (its agents run on 127.0.0.1) that server-side apply would merge with the
    chart's `service` (two of them are invalid), so they are dry-run created as the chart has them."""
    ns = release_namespace
    docs = render("manager.enabled=true", "multikueueRemoteRole.enabled=true", namespace=ns)
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    # One per file of the chart's CRDs (Kueue's nine kinds and ProvisioningRequestConfig).
    assert len(crds) == 10
    for crd in crds:
        assert crd["spec"]["group"] == "kueue.x-k8s.io"
        crd["spec"]["group"] = TEST_GROUP
        crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{TEST_GROUP}"
        assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"] == ns
    res = fleet.kubectl(
        CLUSTER,
        "apply",
        "--server-side",
        "--dry-run=server",
        # ClusterRoles and bindings another test applied from deploy/ (other subjects' namespace): a
        # dry run changes nothing, so taking their fields over is only pretended.
        "--force-conflicts",
        "--field-manager=helm-chart-test",
        "-f",
        "-",
        input=yaml.safe_dump_all(docs),
    )
    applied = [line for line in res.stdout.splitlines() if line.strip()]
    assert len(applied) == len(docs) > 20, res.stdout
    assert all(line.endswith("serverside-applied (server dry run)") for line in applied), res.stdout
    # Nothing was created.
    assert get(fleet, "deployment", "kueue-worker-agent", ns) is None
    assert get(fleet, "crd", f"workloads.{TEST_GROUP}") is None


def test_install_upgrade_uninstall(fleet, release_namespace):
    ns = release_namespace
    release = f"kf-{ns}"
    out = run_helm(
        fleet,
        "install",
        release,
        str(CHART),
        "--namespace",
        ns,
        "--set",
        "manager.enabled=true",
        "--set",
        "crds.enabled=false",
        "--take-ownership",
    )
    assert "STATUS: deployed" in out
    agent = get(fleet, "deployment", "kueue-worker-agent", ns)
    manager = get(fleet, "deployment", "kueue-federation-manager", ns)
    assert agent["spec"]["replicas"] == 2 and manager["spec"]["replicas"] == 2
    for kind, name in [
        ("serviceaccount", "kueue-worker-agent"),
        ("serviceaccount", "kueue-federation-manager"),
        ("role", "kueue-worker-agent"),
        ("rolebinding", "kueue-federation-manager"),
        ("service", "kueue-webhook-service"),
        ("service", "kueue-visibility-server"),
        ("service", "kueue-worker-agent-metrics"),
        ("service", "kueue-federation-manager-metrics"),
        ("configmap", "kueue-federation-manager-config"),
    ]:
        assert get(fleet, kind, name, ns) is not None, (kind, name)
    for kind, name in CLUSTER_SCOPED:
        obj = get(fleet, kind, name)
        assert obj is not None, (kind, name)
        assert obj["metadata"]["annotations"]["meta.helm.sh/release-name"] == release, (kind, name)
    binding = get(fleet, "clusterrolebinding", "kueue-worker-agent")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kueue-worker-agent", "namespace": ns}]
    hooks = get(fleet, "validatingwebhookconfiguration", "kueue-validating-webhook-configuration")["webhooks"]
    assert {h["clientConfig"]["service"]["namespace"] for h in hooks} == {ns}
    assert "featureGates" not in agent_config(fleet, ns)
    # The rendered manifest Helm recorded is what `helm template` renders.
    manifest = load_docs(run_helm(fleet, "get", "manifest", release, "--namespace", ns))
    expected = render("manager.enabled=true", "crds.enabled=false", namespace=ns, release=release)
    assert sorted((d["kind"], d["metadata"]["name"]) for d in manifest) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in expected
    )

    checksum = agent["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    run_helm(
        fleet,
        "upgrade",
        release,
        str(CHART),
        "--namespace",
        ns,
        "--reuse-values",
        "--set",
        "workerAgent.replicas=3",
        "--set",
        "featureGates.LocalQueueMetrics=true",
    )
    agent = get(fleet, "deployment", "kueue-worker-agent", ns)
    assert agent["spec"]["replicas"] == 3
    assert agent["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != checksum
    assert agent_config(fleet, ns)["featureGates"] == {"LocalQueueMetrics": True}
    manager_config = yaml.safe_load(
        get(fleet, "configmap", "kueue-federation-manager-config", ns)["data"]["manager.yaml"]
    )
    assert manager_config["featureGates"] == {"LocalQueueMetrics": True}
    assert get(fleet, "deployment", "kueue-federation-manager", ns)["spec"]["replicas"] == 2

    # A component turned off: its objects are deleted by the upgrade.
    run_helm(
        fleet,
        "upgrade",
        release,
        str(CHART),
        "--namespace",
        ns,
        "--reuse-values",
        "--set",
        "workerAgent.visibility.enabled=false",
    )
    assert get(fleet, "apiservice", "v1beta2.visibility.kueue.x-k8s.io") is None
    assert get(fleet, "service", "kueue-visibility-server", ns) is None
    args = get(fleet, "deployment", "kueue-worker-agent", ns)["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert "--visibility-bind-address" not in args
    history = run_helm(fleet, "history", release, "--namespace", ns, "-o", "json")
    assert [r["revision"] for r in json.loads(history)] == [1, 2, 3]

    run_helm(fleet, "uninstall", release, "--namespace", ns, "--wait")
    for kind, name in CLUSTER_SCOPED:
        if (kind, name) not in KEPT:
            assert get(fleet, kind, name) is None, (kind, name)
    # The kept aggregated roles: still aggregated, and with the roles they gather gone, no rules left.
    for kind, name in KEPT:
        deadline = time.monotonic() + 30
        while (role := get(fleet, kind, name)) and role.get("rules") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert role["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", name
        assert role["aggregationRule"]["clusterRoleSelectors"], name
        assert not role.get("rules"), (name, role.get("rules"))
    for kind in ("deployment", "service", "configmap", "serviceaccount", "role", "rolebinding"):
        left = fleet.kubectl(
            CLUSTER, "get", kind, "-n", ns, "-l", f"app.kubernetes.io/instance={release}", "-o", "name"
        )
        assert left.stdout.strip() == "", (kind, left.stdout)
    assert run_helm(fleet, "list", "--namespace", ns, "-q").strip() == ""
