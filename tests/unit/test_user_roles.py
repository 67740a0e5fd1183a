"""The ClusterRoles for Kueue's users (deploy/rbac/user-roles, in deploy/worker-agent and the Helm
chart): upstream Kueue's names and labels, the rules each editor and viewer grants, and what the two
aggregated roles add up to once kube-controller-manager has gathered their rules by label (computed
here as its clusterrole-aggregation controller does: the union of the rules of every ClusterRole that
matches a selector). docs/admission.md (User-facing ClusterRoles); the same roles against a real
cluster: tests/integration/test_user_roles.py."""

from __future__ import annotations

import pytest
from helm_kit import DEPLOY, by_key, kustomize, render

ROLES = DEPLOY / "rbac" / "user-roles"
BATCH_ADMIN = "rbac.kueue.x-k8s.io/batch-admin"
BATCH_USER = "rbac.kueue.x-k8s.io/batch-user"
ALL_VIEWS = {"view", "edit", "admin"}
CRUD = ["create", "delete", "get", "list", "patch", "update", "watch"]
READ = ["get", "list", "watch"]
BOTH = ("editor", "viewer")

# (role name without kueue- and -role, API group, resource, has a status subresource, which of its
# roles the batch user gets too, the Kubernetes roles its viewer is aggregated into): upstream
# v0.19's config/components/rbac for the objects we serve and the job kinds we integrate.
OBJECTS = [
    ("clusterqueue", "kueue.x-k8s.io", "clusterqueues", True, (), {"admin"}),
    ("localqueue", "kueue.x-k8s.io", "localqueues", True, ("viewer",), ALL_VIEWS),
    ("resourceflavor", "kueue.x-k8s.io", "resourceflavors", False, (), {"admin"}),
    ("cohort", "kueue.x-k8s.io", "cohorts", False, (), {"admin"}),
    ("workload", "kueue.x-k8s.io", "workloads", True, ("viewer",), ALL_VIEWS),
    ("job", "batch", "jobs", True, BOTH, ALL_VIEWS),
    ("jobset", "jobset.x-k8s.io", "jobsets", True, BOTH, ALL_VIEWS),
    ("leaderworkerset", "leaderworkerset.x-k8s.io", "leaderworkersets", True, BOTH, ALL_VIEWS),
    ("trainjob", "trainer.kubeflow.org", "trainjobs", True, BOTH, ALL_VIEWS),
]
PENDING = [
    ("pending-workloads-cq-viewer", "clusterqueues/pendingworkloads", False),
    ("pending-workloads-lq-viewer", "localqueues/pendingworkloads", True),
]
# Upstream's roles for kinds we do not integrate yet: not shipped (they come with the integrations),
# and none for the Topology CRD, which we do not serve.
NOT_SHIPPED = [
    "pytorchjob",
    "tfjob",
    "xgboostjob",
    "paddlejob",
    "jaxjob",
    "mpijob",
    "rayjob",
    "raycluster",
    "rayservice",
    "sparkapplication",
    "topology",
]


@pytest.fixture(scope="module")
def roles() -> dict[str, dict]:
    docs = kustomize(ROLES)
    assert all(d["kind"] == "ClusterRole" for d in docs)
    return {d["metadata"]["name"]: d for d in docs}


def labels(role: dict) -> dict[str, str]:
    return role["metadata"].get("labels") or {}


def aggregated(roles: dict[str, dict], name: str) -> list[dict]:
    """The rules the aggregation controller writes into an aggregated role: those of every other
    ClusterRole matching one of its selectors."""
    selectors = [s["matchLabels"] for s in roles[name]["aggregationRule"]["clusterRoleSelectors"]]
    out: list[dict] = []
    for other_name, other in sorted(roles.items()):
        if other_name != name and any(labels(other).items() >= s.items() for s in selectors):
            out += other.get("rules") or []
    return out


def allowed(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", ()) and resource in r.get("resources", ()) and verb in r.get("verbs", ())
        for r in rules
    )


def test_names(roles):
    expected = {"kueue-batch-admin-role", "kueue-batch-user-role"}
    for name, *_ in OBJECTS:
        expected |= {f"kueue-{name}-editor-role", f"kueue-{name}-viewer-role"}
    expected |= {f"kueue-{name}-role" for name, *_ in PENDING}
    assert set(roles) == expected
    for kind in NOT_SHIPPED:
        assert not {f"kueue-{kind}-editor-role", f"kueue-{kind}-viewer-role"} & set(roles)


def test_the_two_batch_roles_only_aggregate(roles):
    for name, label in (("kueue-batch-admin-role", BATCH_ADMIN), ("kueue-batch-user-role", BATCH_USER)):
        role = roles[name]
        # No rules key at all: a re-apply of an empty list would wipe what the controller wrote.
        assert "rules" not in role
        assert role["aggregationRule"] == {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]}
        assert not {BATCH_ADMIN, BATCH_USER} & set(labels(role))


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o[0])
def test_editor_and_viewer(roles, obj):
    name, group, resource, status, for_user, views = obj
    status_rule = [{"apiGroups": [group], "resources": [f"{resource}/status"], "verbs": ["get"]}]
    editor = roles[f"kueue-{name}-editor-role"]
    viewer = roles[f"kueue-{name}-viewer-role"]
    assert editor["rules"] == [
        {"apiGroups": [group], "resources": [resource], "verbs": CRUD},
        *(status_rule if status else []),
    ]
    assert viewer["rules"] == [
        {"apiGroups": [group], "resources": [resource], "verbs": READ},
        *(status_rule if status else []),
    ]

    def user(which: str) -> dict[str, str]:
        return {BATCH_USER: "true"} if which in for_user else {}

    assert labels(editor) == {
        "rbac.kueue.x-k8s.io/role": f"{name}-editor",
        BATCH_ADMIN: "true",
        **user("editor"),
    }
    assert labels(viewer) == {
        "rbac.kueue.x-k8s.io/role": f"{name}-viewer",
        BATCH_ADMIN: "true",
        **user("viewer"),
        **{f"rbac.authorization.k8s.io/aggregate-to-{v}": "true" for v in views},
    }


@pytest.mark.parametrize("pending", PENDING, ids=lambda p: p[0])
def test_pending_workloads_viewers(roles, pending):
    name, resource, for_user = pending
    role = roles[f"kueue-{name}-role"]
    assert role["rules"] == [
        {"apiGroups": ["visibility.kueue.x-k8s.io"], "resources": [resource], "verbs": READ}
    ]
    assert labels(role) == {
        "rbac.kueue.x-k8s.io/role": name,
        BATCH_ADMIN: "true",
        **({BATCH_USER: "true"} if for_user else {}),
        **{f"rbac.authorization.k8s.io/aggregate-to-{v}": "true" for v in ALL_VIEWS},
    }


def members(roles: dict[str, dict], label: str) -> set[str]:
    return {n for n, r in roles.items() if labels(r).get(label) == "true"}


def test_batch_user_aggregates_jobs_and_reads_its_queues(roles):
    assert members(roles, BATCH_USER) == {
        *(
            f"kueue-{k}-{r}-role"
            for k in ("job", "jobset", "leaderworkerset", "trainjob")
            for r in ("editor", "viewer")
        ),
        "kueue-workload-viewer-role",
        "kueue-localqueue-viewer-role",
        "kueue-pending-workloads-lq-viewer-role",
    }
    rules = aggregated(roles, "kueue-batch-user-role")
    for group, resource in (
        ("batch", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("trainer.kubeflow.org", "trainjobs"),
    ):
        assert all(allowed(rules, group, resource, v) for v in CRUD), resource
    assert allowed(rules, "kueue.x-k8s.io", "workloads", "list")
    assert allowed(rules, "kueue.x-k8s.io", "localqueues", "get")
    assert allowed(rules, "visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get")
    assert not allowed(rules, "visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads", "get")
    # A batch user reads its queues and Workloads, and changes none of them.
    for resource in ("workloads", "localqueues"):
        assert not any(allowed(rules, "kueue.x-k8s.io", resource, v) for v in ("create", "update", "delete"))
    for resource in ("clusterqueues", "resourceflavors", "cohorts"):
        assert not any(allowed(rules, "kueue.x-k8s.io", resource, v) for v in CRUD), resource


def test_batch_admin_aggregates_everything(roles):
    assert members(roles, BATCH_ADMIN) == set(roles) - {"kueue-batch-admin-role", "kueue-batch-user-role"}
    rules = aggregated(roles, "kueue-batch-admin-role")
    for _, group, resource, *_ in OBJECTS:
        assert all(allowed(rules, group, resource, v) for v in CRUD), resource
    for _, resource, _ in PENDING:
        assert allowed(rules, "visibility.kueue.x-k8s.io", resource, "get")


def test_in_the_worker_agent_base_and_the_chart(roles):
    """deploy/worker-agent includes them; the chart renders them by default (with the worker_agent),
    also with the visibility API off, and not with workerAgent.userRoles.enabled=false; it keeps the
    two aggregated ones on uninstall."""
    agent = {d["metadata"]["name"] for d in kustomize(DEPLOY / "worker-agent") if d["kind"] == "ClusterRole"}
    assert set(roles) <= agent

    def chart_roles(*sets: str) -> dict[str, dict]:
        return {k[1]: d for k, d in by_key(render(*sets)).items() if k[0] == "ClusterRole"}

    assert set(roles) <= set(chart_roles())
    assert set(roles) <= set(chart_roles("workerAgent.visibility.enabled=false"))
    off = chart_roles("workerAgent.userRoles.enabled=false")
    assert not set(roles) & set(off)
    assert "kueue-worker-agent" in off
    # `helm uninstall` keeps the two aggregated roles (deleted, the aggregation controller would
    # create them again without their aggregationRule); the others go.
    for name, doc in chart_roles().items():
        if name in roles:
            kept = (doc["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
            assert kept == (name in {"kueue-batch-admin-role", "kueue-batch-user-role"}), name
