"""The Helm chart (deploy/helm/kueue-federation) against the kustomize bases in deploy/: rendered with
`helm template` and compared object by object (kind, name, namespace; RBAC rules, webhook rules and
paths, Deployments' specs with their args and ports, Services, APIServices, CRDs, the Configurations,
monitoring), so the two cannot drift; then what each value changes, `helm lint`, and that both
Configurations the chart writes load in our processes. docs/helm.md."""

from __future__ import annotations

import copy

import pytest
import yaml
from helm_kit import (
    CHART,
    DEPLOY,
    by_key,
    helm,
    key,
    kubectl_binary,
    kustomize_bases,
    kustomize_python,
    render,
    require_helm,
)

from kueue_domain.config import parse_config
from manager.config import parse_manager_config

EVERYTHING = (
    "manager.enabled=true",
    "multikueueRemoteRole.enabled=true",
    "monitoring.serviceMonitors.enabled=true",
    "monitoring.prometheusRule.enabled=true",
    "monitoring.grafanaDashboard.enabled=true",
)
# Labels Helm's convention adds to every object of the chart (kustomize's labels are kept as well).
CHART_LABELS = {
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
    # Its component's name, also where kustomize has no label (not on Services: see below).
    "app.kubernetes.io/name",
}
CONFIG_KEYS = {"kueue-worker-agent-config": "config.yaml", "kueue-federation-manager-config": "manager.yaml"}


@pytest.fixture(scope="module")
def bases() -> dict[str, list[dict]]:
    return kustomize_bases()


def without_namespaces(docs: list[dict]) -> list[dict]:
    """The chart creates no Namespace: Helm's convention is `--namespace X --create-namespace`."""
    return [d for d in docs if d["kind"] != "Namespace"]


def pod_spec_without_checksum(deployment: dict) -> dict:
    spec = copy.deepcopy(deployment["spec"])
    annotations = spec["template"]["metadata"].pop("annotations", {})
    assert set(annotations) <= {"checksum/config"}
    return spec


def assert_same_object(chart: dict, kust: dict) -> None:
    """The fields that make the object what it is, equal; the chart may only add labels (Helm's and
    the keep policy of CRDs)."""
    k = key(kust)
    assert chart["apiVersion"] == kust["apiVersion"], k
    labels = chart["metadata"].get("labels") or {}
    for name, value in (kust["metadata"].get("labels") or {}).items():
        assert labels.get(name) == value, (k, name)
    assert set(labels) - set(kust["metadata"].get("labels") or {}) <= CHART_LABELS, k
    if k[0] == "Service":
        # The ServiceMonitors select Services by app.kubernetes.io/name: the metrics ones only.
        assert ("app.kubernetes.io/name" in labels) == k[1].endswith("-metrics"), k
    kind = kust["kind"]
    if kind in ("ClusterRole", "Role"):
        # An aggregated ClusterRole has no rules of its own (the aggregation controller writes them).
        assert chart.get("rules") == kust.get("rules"), k
        assert chart.get("aggregationRule") == kust.get("aggregationRule"), k
    elif kind in ("ClusterRoleBinding", "RoleBinding"):
        assert (chart["roleRef"], chart["subjects"]) == (kust["roleRef"], kust["subjects"]), k
    elif kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert chart["webhooks"] == kust["webhooks"], k
    elif kind == "Deployment":
        assert pod_spec_without_checksum(chart) == kust["spec"], k
    elif kind == "ConfigMap" and k[1] in CONFIG_KEYS:
        name = CONFIG_KEYS[k[1]]
        assert set(chart["data"]) == set(kust["data"]) == {name}, k
        assert yaml.safe_load(chart["data"][name]) == yaml.safe_load(kust["data"][name]), k
    elif kind == "ConfigMap":
        assert chart["data"] == kust["data"], k
    elif kind == "CustomResourceDefinition":
        assert chart["spec"] == kust["spec"], k
        assert chart["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}, k
    elif kind == "ServiceAccount":
        pass
    else:  # Service, APIService, ServiceMonitor, PrometheusRule
        assert chart["spec"] == kust["spec"], k


def test_everything_on_equals_every_kustomize_base(bases):
    """manager, deploy/rbac's role and monitoring on: exactly the objects of all bases, field for field."""
    expected = by_key(without_namespaces([d for docs in bases.values() for d in docs]))
    rendered = by_key(render(*EVERYTHING))
    assert sorted(rendered) == sorted(expected)
    for k, kust in expected.items():
        assert_same_object(rendered[k], kust)


def test_defaults_are_the_worker_agent_with_crds(bases):
    """Default values: what every cluster gets, deploy/crds + deploy/worker-agent (with deploy/webhooks),
    and the worker_agent's metrics Service (deploy/monitoring has it in kustomize)."""
    expected = by_key(without_namespaces(bases["crds"] + bases["worker-agent"]))
    rendered = by_key(render())
    metrics = ("Service", "kueue-worker-agent-metrics", "kueue-system")
    assert sorted(rendered) == sorted([*expected, metrics])
    for k, kust in expected.items():
        assert_same_object(rendered[k], kust)


def test_manager_alone_is_the_manager_base(bases):
    expected = by_key(without_namespaces(bases["manager"]))
    rendered = by_key(render("manager.enabled=true", "workerAgent.enabled=false", "crds.enabled=false"))
    assert sorted(rendered) == sorted(expected)
    for k, kust in expected.items():
        assert_same_object(rendered[k], kust)


def test_python_kustomize_reads_as_kubectl_kustomize():
    """The Python reading of the kustomizations (used without the cached kubectl) builds what
    `kubectl kustomize` builds."""
    if not kubectl_binary().is_file():
        pytest.skip(f"no cached kubectl at {kubectl_binary()}")
    kubectl_built = kustomize_bases()
    for name in ("crds", "worker-agent", "manager", "monitoring"):
        assert by_key(kustomize_python(DEPLOY / name)) == by_key(kubectl_built[name]), name


@pytest.mark.parametrize(
    ("chart_file", "source"),
    [
        *[
            (f"files/crds/{p.name}", p)
            for p in sorted((DEPLOY / "crds").glob("*.yaml"))
            if p.stem != "kustomization"
        ],
        ("files/monitoring/alert-rules.yaml", DEPLOY / "monitoring" / "alert-rules.yaml"),
        ("files/monitoring/grafana-dashboard.json", DEPLOY / "monitoring" / "grafana-dashboard.json"),
    ],
    ids=str,
)
def test_chart_files_are_copies_of_deploy(chart_file, source):
    """Helm cannot read files outside the chart: these are copies. Edit deploy/, then copy."""
    copied = CHART / chart_file
    assert copied.is_file(), f"cp {source.relative_to(DEPLOY.parent)} {copied.relative_to(DEPLOY.parent)}"
    assert copied.read_text() == source.read_text(), (
        f"{copied.relative_to(DEPLOY.parent)} differs from {source.relative_to(DEPLOY.parent)}: copy it again"
    )


def test_no_stray_chart_files():
    crds = {p.name for p in (CHART / "files" / "crds").glob("*")}
    assert crds == {p.name for p in (DEPLOY / "crds").glob("*.yaml")} - {"kustomization.yaml"}


def test_release_namespace_everywhere():
    """Installed elsewhere than kueue-system, every reference follows: namespaced objects, binding
    subjects, webhook and conversion Services, APIServices, ServiceMonitors, the Configurations, and
    the webhooks skip the release namespace."""
    ns = "batch-control"
    docs = render(*EVERYTHING, namespace=ns)
    for doc in docs:
        kind, name, namespace = key(doc)
        # The alert rules' descriptions are prose for kueue-system (`kubectl -n kueue-system ...`).
        if kind != "PrometheusRule":
            assert "kueue-system" not in yaml.safe_dump(doc), (kind, name)
        if kind not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "APIService") and (
            "WebhookConfiguration" not in kind
        ):
            assert namespace == ns, (kind, name)
    objects = by_key(docs)
    workloads = objects[("CustomResourceDefinition", "workloads.kueue.x-k8s.io", "")]
    assert workloads["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "name": "kueue-webhook-service",
        "namespace": ns,
        "path": "/convert",
    }
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        name = f"kueue-{kind.removesuffix('WebhookConfiguration').lower()}-webhook-configuration"
        for hook in objects[(kind, name, "")]["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == ns
            assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", ns]
    assert (
        objects[("APIService", "v1beta2.visibility.kueue.x-k8s.io", "")]["spec"]["service"]["namespace"] == ns
    )
    for name, data_key in CONFIG_KEYS.items():
        assert yaml.safe_load(objects[("ConfigMap", name, ns)]["data"][data_key])["namespace"] == ns


def configuration(docs: list[dict], name: str) -> dict:
    cm = by_key(docs)[("ConfigMap", name, "kueue-system")]
    return yaml.safe_load(cm["data"][CONFIG_KEYS[name]])


def test_values_replicas_image_resources_args():
    docs = by_key(
        render(
            "manager.enabled=true",
            "workerAgent.replicas=5",
            "manager.replicas=1",
            "image.repository=registry.example/kf",
            "image.tag=v9",
            "image.pullPolicy=Always",
            "workerAgent.resources.limits.memory=4Gi",
            "workerAgent.extraArgs={--kueue-cr-from-cluster}",
            "manager.logFormat=console",
        )
    )
    agent = docs[("Deployment", "kueue-worker-agent", "kueue-system")]
    manager = docs[("Deployment", "kueue-federation-manager", "kueue-system")]
    assert (agent["spec"]["replicas"], manager["spec"]["replicas"]) == (5, 1)
    for d in (agent, manager):
        container = d["spec"]["template"]["spec"]["containers"][0]
        assert (container["image"], container["imagePullPolicy"]) == ("registry.example/kf:v9", "Always")
    agent_container = agent["spec"]["template"]["spec"]["containers"][0]
    assert agent_container["resources"] == {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"memory": "4Gi"},
    }
    assert agent_container["args"][-1] == "--kueue-cr-from-cluster"
    assert manager["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--log-format", "console"]


def test_feature_gates_and_config_merge():
    """Global gates reach both Configurations, a component's own override them (false too), and a
    component's config is merged over the chart's (a false wins, a list replaces)."""
    docs = render(
        "manager.enabled=true",
        "featureGates.LocalQueueMetrics=true",
        "featureGates.PartialAdmission=true",
        "workerAgent.featureGates.PartialAdmission=false",
        "workerAgent.config.leaderElection.leaderElect=false",
        "workerAgent.config.integrations.frameworks={batch/job}",
        "manager.config.multiKueue.workerLostTimeout=5m",
    )
    agent = configuration(docs, "kueue-worker-agent-config")
    manager = configuration(docs, "kueue-federation-manager-config")
    assert agent["featureGates"] == {"LocalQueueMetrics": True, "PartialAdmission": False}
    assert manager["featureGates"] == {"LocalQueueMetrics": True, "PartialAdmission": True}
    assert agent["leaderElection"] == {"leaderElect": False}
    assert agent["integrations"] == {"frameworks": ["batch/job"]}
    assert manager["multiKueue"]["workerLostTimeout"] == "5m"
    assert manager["multiKueue"]["gcInterval"] == "1m"
    assert parse_config(agent).feature_gates == {"LocalQueueMetrics": True, "PartialAdmission": False}


def test_configurations_load_in_our_processes():
    """What the chart writes is a Configuration the worker_agent and the manager accept, as written."""
    docs = render("manager.enabled=true", "featureGates.LocalQueueMetrics=true")
    agent = parse_config(configuration(docs, "kueue-worker-agent-config"), "agent")
    manager = parse_manager_config(configuration(docs, "kueue-federation-manager-config"), "manager")
    assert agent.namespace == manager.namespace == "kueue-system"
    assert agent.feature_gates == manager.feature_gates == {"LocalQueueMetrics": True}
    assert manager.leader_election_id == "kueue-federation-manager"


def test_config_change_rolls_the_pods():
    """The pod template carries a checksum of the Configuration: a changed value rolls the Deployment."""

    def checksum(*sets: str) -> str:
        agent = by_key(render(*sets))[("Deployment", "kueue-worker-agent", "kueue-system")]
        return agent["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum() == checksum("workerAgent.replicas=3")
    assert checksum() != checksum("featureGates.LocalQueueMetrics=true")


def test_metrics_port_and_scheme():
    """The metrics port and scheme are values: https (with TokenReview/SubjectAccessReview) adds the
    review rules, a metrics-reader ClusterRole and an HTTPS scrape."""
    docs = by_key(
        render(
            "manager.enabled=true",
            "monitoring.serviceMonitors.enabled=true",
            "metrics.port=8443",
            "metrics.scheme=https",
        )
    )
    for name, deployment, config in (
        ("kueue-worker-agent", "kueue-worker-agent", "kueue-worker-agent-config"),
        ("kueue-federation-manager", "kueue-federation-manager", "kueue-federation-manager-config"),
    ):
        ports = docs[("Deployment", deployment, "kueue-system")]["spec"]["template"]["spec"]["containers"][0][
            "ports"
        ]
        assert {"name": "metrics", "containerPort": 8443} in ports
        assert configuration(list(docs.values()), config)["metrics"]["bindAddress"] == ":8443"
        service = docs[("Service", f"{name}-metrics", "kueue-system")]
        assert service["spec"]["ports"] == [{"name": "https", "port": 8443, "targetPort": "metrics"}]
        rules = docs[("ClusterRole", name, "")]["rules"]
        assert {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        } in rules
        endpoint = docs[("ServiceMonitor", name, "kueue-system")]["spec"]["endpoints"][0]
        assert endpoint["scheme"] == "https"
    reader = docs[("ClusterRole", "kueue-metrics-reader", "")]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    plain = by_key(render("metrics.scheme=http", "metrics.port=8080"))
    assert ("ClusterRole", "kueue-metrics-reader", "") not in plain


def test_components_can_be_left_out():
    nothing = render("workerAgent.enabled=false", "crds.enabled=false")
    assert nothing == []
    no_visibility = by_key(
        render("workerAgent.visibility.enabled=false", "workerAgent.webhooks.enabled=false")
    )
    kinds = {k[0] for k in no_visibility}
    assert not kinds & {"APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    agent = no_visibility[("Deployment", "kueue-worker-agent", "kueue-system")]
    container = agent["spec"]["template"]["spec"]["containers"][0]
    assert "--visibility-bind-address" not in container["args"]
    assert "visibility" not in {p["name"] for p in container["ports"]}
    unkept = by_key(render("crds.keep=false"))
    crd = unkept[("CustomResourceDefinition", "workloads.kueue.x-k8s.io", "")]
    assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})


@pytest.mark.parametrize("sets", [(), EVERYTHING, ("metrics.scheme=https", "manager.enabled=true")], ids=str)
def test_helm_lint(sets):
    require_helm()
    args = ["lint", "--strict", str(CHART)]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in out
