"""Our kueue.x-k8s.io/v1beta1 CRDs on a real kube-apiserver: accepted objects get upstream's defaults,
invalid ones are rejected with a message naming the field, and kubectl prints upstream's columns."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import pytest

from kueue_domain import api

pytestmark = pytest.mark.realcluster

CLUSTER = "manager"
CRD_NAMES = [
    f"{plural}.{api.GROUP}"
    for plural in (
        "resourceflavors",
        "clusterqueues",
        "cohorts",
        "localqueues",
        "workloads",
        "workloadpriorityclasses",
        "admissionchecks",
        "multikueueconfigs",
        "multikueueclusters",
    )
]
SUFFIX = uuid.uuid4().hex[:8]
NOW = "2026-01-01T00:00:00Z"


def unique(name: str) -> str:
    return f"crdtest-{name}-{SUFFIX}"


def obj(kind: str, name: str, body: dict, namespace: str | None = None) -> dict:
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"apiVersion": api.API_VERSION, "kind": kind, "metadata": metadata, **body}


def container(cpu: str | int = "1") -> dict:
    return {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}


def workload_body(queue: str = "user-queue", cpu: str | int = "1", **pod_set: object) -> dict:
    template = {"spec": {"restartPolicy": "Never", "containers": [container(cpu)]}}
    return {"spec": {"queueName": queue, "podSets": [{"template": template, **pod_set}]}}


def condition(type_: str, status: str = "True", reason: str = "Test") -> dict:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "set by test",
        "lastTransitionTime": NOW,
    }


def headers(output: str) -> list[str]:
    """Column headers of kubectl's table output (columns are at least three spaces apart)."""
    return re.split(r"\s{2,}", output.splitlines()[0].strip())


class Objects:
    """Creates objects through kubectl and deletes whatever it created at the end of the module."""

    def __init__(self, fleet, namespace: str) -> None:
        self.fleet = fleet
        self.namespace = namespace
        self.created: list[tuple[str, str, str | None]] = []

    def create(self, manifest: dict, dry_run: bool = False, check: bool = True):
        args = ["create", "-f", "-", "-o", "json"]
        if dry_run:
            args.append("--dry-run=server")
        res = self.fleet.kubectl(CLUSTER, *args, input=json.dumps(manifest), check=check)
        if res.returncode == 0 and not dry_run:
            meta = manifest["metadata"]
            self.created.append((manifest["kind"], meta["name"], meta.get("namespace")))
        return res

    def created_object(self, manifest: dict, dry_run: bool = False) -> dict:
        return json.loads(self.create(manifest, dry_run=dry_run).stdout)

    def rejected(self, manifest: dict) -> str:
        res = self.create(manifest, dry_run=True, check=False)
        assert res.returncode != 0, f"{manifest['kind']} was accepted: {res.stdout}"
        return res.stderr

    def patch(self, kind: str, name: str, patch: dict, namespace: str | None = None, status: bool = False):
        # v1beta1 explicitly: kubectl's default is the preferred version, v1beta2.
        args = [
            "patch",
            f"{kind.lower()}s.v1beta1.{api.GROUP}",
            name,
            "--type=merge",
            "-p",
            json.dumps(patch),
        ]
        if namespace:
            args += ["-n", namespace]
        if status:
            args.append("--subresource=status")
        return self.fleet.kubectl(CLUSTER, *args, check=False)

    def cleanup(self) -> None:
        for kind, name, namespace in reversed(self.created):
            args = ["delete", f"{kind.lower()}.{api.GROUP}", name, "--ignore-not-found", "--wait=false"]
            if namespace:
                args += ["-n", namespace]
            self.fleet.kubectl(CLUSTER, *args, check=False)


@pytest.fixture(scope="module")
def objects(fleet) -> Iterator[Objects]:
    namespace = unique("ns")
    fleet.kubectl(CLUSTER, "create", "namespace", namespace)
    created = Objects(fleet, namespace)
    try:
        yield created
    finally:
        created.cleanup()
        fleet.kubectl(
            CLUSTER, "delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False
        )


# ---------------------------------------------------------------------------------------------
# Installed and healthy


def test_workload_crd_is_installed(fleet):
    res = fleet.kubectl(CLUSTER, "get", "crd", f"workloads.{api.GROUP}")
    assert f"workloads.{api.GROUP}" in res.stdout


@pytest.mark.parametrize("cluster", ["manager", "worker1", "worker2"])
def test_every_crd_is_established_and_structural(fleet, cluster: str):
    for crd_name in CRD_NAMES:
        crd = json.loads(fleet.kubectl(cluster, "get", "crd", crd_name, "-o", "json").stdout)
        conditions = {c["type"]: c for c in crd["status"].get("conditions", [])}
        assert conditions["Established"]["status"] == "True", crd_name
        assert conditions["NamesAccepted"]["status"] == "True", crd_name
        assert "NonStructuralSchema" not in conditions, conditions["NonStructuralSchema"]["message"]
        assert [(v["name"], v["storage"]) for v in crd["spec"]["versions"]] == [
            ("v1beta1", False),
            ("v1beta2", True),
        ]
        client_config = crd["spec"]["conversion"]["webhook"]["clientConfig"]
        assert client_config["url"].endswith("/convert") and client_config["caBundle"], crd_name


# ---------------------------------------------------------------------------------------------
# Valid objects: accepted, with upstream's defaults


def test_cluster_queue_gets_upstream_defaults(objects: Objects):
    cluster_queue = obj(
        "ClusterQueue",
        unique("cq-defaults"),
        {
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 9},
                                    {"name": "memory", "nominalQuota": "36Gi"},
                                ],
                            }
                        ],
                    }
                ],
            }
        },
    )
    spec = objects.created_object(cluster_queue, dry_run=True)["spec"]
    assert spec["queueingStrategy"] == api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO
    assert spec["stopPolicy"] == api.STOP_POLICY_NONE
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "Never",
        "borrowWithinCohort": {"policy": "Never"},
    }
    assert spec["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"}
    assert spec["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] == "36Gi"


def test_cluster_queue_without_namespace_selector_keeps_none(objects: Objects):
    spec = objects.created_object(obj("ClusterQueue", unique("cq-nosel"), {"spec": {}}), dry_run=True)["spec"]
    assert "namespaceSelector" not in spec
    assert spec["queueingStrategy"] == "BestEffortFIFO"


def test_cluster_queue_in_a_cohort_with_limits_checks_and_deprecated_fungibility(objects: Objects):
    cluster_queue = obj(
        "ClusterQueue",
        unique("cq-cohort"),
        {
            "spec": {
                "cohort": "team-a",
                "queueingStrategy": "StrictFIFO",
                "admissionChecks": ["multikueue"],
                "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "borrowWithinCohort": {"policy": "LowerPriority"},
                },
                "fairSharing": {"weight": "500m"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": "on-demand",
                                "resources": [
                                    {
                                        "name": "cpu",
                                        "nominalQuota": "4",
                                        "borrowingLimit": "2",
                                        "lendingLimit": 1,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        },
    )
    spec = objects.created_object(cluster_queue, dry_run=True)["spec"]
    assert spec["cohort"] == "team-a"
    # Stored as v1beta2 and read back as upstream converts it: the check names become a strategy,
    # the legacy fungibility values MayStopSearch.
    assert spec["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue"}]}
    assert "admissionChecks" not in spec
    assert spec["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"}
    assert spec["preemption"]["withinClusterQueue"] == "Never"


def test_cohorts_with_quota_and_a_parent_are_accepted(objects: Objects):
    root = obj(
        "Cohort",
        unique("co-root"),
        {"spec": {"resourceGroups": quota_group(nominalQuota="10"), "fairSharing": {}}},
    )
    spec = objects.created_object(root, dry_run=True)["spec"]
    assert spec["fairSharing"] == {"weight": 1}
    assert spec["resourceGroups"][0]["flavors"][0]["resources"] == [{"name": "cpu", "nominalQuota": "10"}]

    # Limits are allowed under a parent, and unlike on a ClusterQueue lendingLimit may exceed nominalQuota.
    child = obj(
        "Cohort",
        unique("co-child"),
        {
            "spec": {
                "parentName": "some-parent",
                "resourceGroups": quota_group(nominalQuota="2", borrowingLimit="1", lendingLimit="5"),
                "fairSharing": {"weight": "500m"},
            }
        },
    )
    spec = objects.created_object(child, dry_run=True)["spec"]
    assert spec["parentName"] == "some-parent"
    assert spec["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] == "5"


def test_resource_flavor_local_queue_and_priority_class_are_accepted(objects: Objects):
    flavor = obj(
        "ResourceFlavor",
        unique("rf"),
        {
            "spec": {
                "nodeLabels": {"cloud.example.com/spot": "true"},
                "nodeTaints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}],
                "tolerations": [
                    {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
                ],
            }
        },
    )
    assert objects.created_object(flavor, dry_run=True)["spec"]["nodeLabels"] == {
        "cloud.example.com/spot": "true"
    }

    local_queue = obj(
        "LocalQueue", unique("lq"), {"spec": {"clusterQueue": "cluster-queue"}}, objects.namespace
    )
    assert objects.created_object(local_queue, dry_run=True)["spec"] == {
        "clusterQueue": "cluster-queue",
        "stopPolicy": "None",
    }

    priority_class = obj("WorkloadPriorityClass", unique("wpc"), {"value": 1000, "description": "important"})
    assert objects.created_object(priority_class, dry_run=True)["value"] == 1000


def test_workload_gets_upstream_defaults(objects: Objects):
    workload = obj("Workload", unique("wl-defaults"), workload_body(), objects.namespace)
    spec = objects.created_object(workload, dry_run=True)["spec"]
    assert spec["podSets"][0]["name"] == api.DEFAULT_PODSET_NAME
    assert spec["podSets"][0]["count"] == 1
    assert spec["active"] is True
    # v1beta1 defaults priorityClassSource to ""; v1beta2 (storage) has no such field, and upstream's
    # conversion gives it back only for a known source.
    assert "priorityClassSource" not in spec
    # The pod template keeps fields the schema does not describe.
    assert spec["podSets"][0]["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["podSets"][0]["template"]["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"


def test_workload_with_priority_class_and_two_pod_sets_is_accepted(objects: Objects):
    template = {"spec": {"containers": [container("500m")]}}
    body = {
        "spec": {
            "queueName": "user-queue",
            "priorityClassName": "high",
            "priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD,
            "priority": 1000,
            "maximumExecutionTimeSeconds": 60,
            "podSets": [
                {"name": api.ROLE_LEADER, "count": 1, "template": template},
                {"name": api.ROLE_WORKER, "count": 2, "minCount": 1, "template": template},
            ],
        }
    }
    spec = objects.created_object(obj("Workload", unique("wl-lws"), body, objects.namespace), dry_run=True)[
        "spec"
    ]
    assert [p["name"] for p in spec["podSets"]] == ["leader", "worker"]


def test_admission_check_and_multikueue_objects_are_accepted(objects: Objects):
    check = obj(
        "AdmissionCheck",
        unique("ac"),
        {
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {"apiGroup": api.GROUP, "kind": "MultiKueueConfig", "name": "multikueue-test"},
            }
        },
    )
    # v1beta1 defaults retryDelayMinutes to 15; v1beta2 (storage) dropped the field, as upstream's.
    assert "retryDelayMinutes" not in objects.created_object(check, dry_run=True)["spec"]

    config = obj("MultiKueueConfig", unique("mkconf"), {"spec": {"clusters": ["worker1", "worker2"]}})
    assert objects.created_object(config, dry_run=True)["spec"]["clusters"] == ["worker1", "worker2"]

    secret_cluster = obj(
        "MultiKueueCluster", unique("mkc"), {"spec": {"kubeConfig": {"location": "worker1-secret"}}}
    )
    assert objects.created_object(secret_cluster, dry_run=True)["spec"]["kubeConfig"] == {
        "location": "worker1-secret",
        "locationType": api.LOCATION_TYPE_SECRET,
    }
    path_cluster = obj(
        "MultiKueueCluster",
        unique("mkc-path"),
        {"spec": {"kubeConfig": {"location": "/etc/multikueue/kubeconfigs/w2", "locationType": "Path"}}},
    )
    assert objects.created_object(path_cluster, dry_run=True)["spec"]["kubeConfig"]["locationType"] == "Path"
    profile_cluster = obj(
        "MultiKueueCluster",
        unique("mkc-profile"),
        {"spec": {"kubeConfig": {"location": ""}, "clusterProfileRef": {"name": "worker1"}}},
    )
    assert objects.created_object(profile_cluster, dry_run=True)["spec"]["clusterProfileRef"] == {
        "name": "worker1"
    }


# ---------------------------------------------------------------------------------------------
# Invalid objects: rejected, with the field named


def test_cluster_queue_with_unknown_queueing_strategy_is_rejected(objects: Objects):
    stderr = objects.rejected(
        obj("ClusterQueue", unique("cq-sideways"), {"spec": {"queueingStrategy": "Sideways"}})
    )
    assert 'spec.queueingStrategy: Unsupported value: "Sideways"' in stderr
    assert '"StrictFIFO"' in stderr and '"BestEffortFIFO"' in stderr


def quota_group(**quota: object) -> list[dict]:
    resources = [{"name": "cpu", **quota}] if quota else [{"name": "cpu", "nominalQuota": 1}]
    return [{"coveredResources": ["cpu"], "flavors": [{"name": "default-flavor", "resources": resources}]}]


INVALID = {
    "cq-borrowing-limit-without-cohort": (
        "ClusterQueue",
        {"spec": {"resourceGroups": quota_group(nominalQuota=1, borrowingLimit=1)}},
        ["spec.resourceGroups", "borrowingLimit must be nil when cohort is empty"],
    ),
    "cq-lending-limit-without-cohort": (
        "ClusterQueue",
        {"spec": {"resourceGroups": quota_group(nominalQuota=1, lendingLimit=1)}},
        ["spec.resourceGroups", "lendingLimit must be nil when cohort is empty"],
    ),
    "cq-missing-nominal-quota": (
        "ClusterQueue",
        {"spec": {"resourceGroups": quota_group(borrowingLimit=1)}},
        ["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Required value"],
    ),
    "cq-garbage-quota": (
        "ClusterQueue",
        {"spec": {"resourceGroups": quota_group(nominalQuota="1Q")}},
        ["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "should match"],
    ),
    "cq-resources-differ-from-covered": (
        "ClusterQueue",
        {
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}],
                    }
                ]
            }
        },
        ["spec.resourceGroups[0]", "flavors must have the same number of resources as the coveredResources"],
    ),
    "cq-no-covered-resources": (
        "ClusterQueue",
        {"spec": {"resourceGroups": [{"coveredResources": [], "flavors": [{"name": "f", "resources": []}]}]}},
        ["spec.resourceGroups[0].coveredResources", "should have at least 1 items"],
    ),
    "cq-borrow-within-cohort-without-reclaim": (
        "ClusterQueue",
        {"spec": {"cohort": "c", "preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}}},
        ["spec.preemption", "reclaimWithinCohort"],
    ),
    "cq-preference-without-try-next-flavor": (
        "ClusterQueue",
        {"spec": {"flavorFungibility": {"preference": "PreemptionOverBorrowing"}}},
        ["spec.flavorFungibility.preference", "TryNextFlavor"],
    ),
    "cq-unknown-preemption-policy": (
        "ClusterQueue",
        {"spec": {"preemption": {"withinClusterQueue": "Always"}}},
        ["spec.preemption.withinClusterQueue: Unsupported value", '"LowerOrNewerEqualPriority"'],
    ),
    "cq-checks-and-strategy": (
        "ClusterQueue",
        {"spec": {"admissionChecks": ["a"], "admissionChecksStrategy": {"admissionChecks": [{"name": "a"}]}}},
        ["spec.admissionChecksStrategy", "admissionChecks and admissionChecksStrategy cannot both be set"],
    ),
    "co-borrowing-limit-without-parent": (
        "Cohort",
        {"spec": {"resourceGroups": quota_group(nominalQuota=1, borrowingLimit=1)}},
        ["spec.resourceGroups", f"borrowingLimit {api.MSG_LIMIT_NEEDS_PARENT}"],
    ),
    "co-lending-limit-without-parent": (
        "Cohort",
        {"spec": {"resourceGroups": quota_group(nominalQuota=1, lendingLimit=1)}},
        ["spec.resourceGroups", f"lendingLimit {api.MSG_LIMIT_NEEDS_PARENT}"],
    ),
    "co-garbage-weight": (
        "Cohort",
        {"spec": {"fairSharing": {"weight": "heavy"}}},
        ["spec.fairSharing.weight", "should match"],
    ),
    "co-bad-parent-name": (
        "Cohort",
        {"spec": {"parentName": "Not_A_Name"}},
        ["spec.parentName", "should match"],
    ),
    "wl-garbage-quantity": (
        "Workload",
        workload_body(cpu="ten"),
        ["spec.podSets[0].template.spec.containers[0].resources.requests.cpu", "should match"],
    ),
    "wl-min-count-above-count": (
        "Workload",
        workload_body(count=2, minCount=3),
        ["spec.podSets[0].minCount", "minCount should be positive and less or equal to count"],
    ),
    "wl-no-pod-sets": (
        "Workload",
        {"spec": {"queueName": "q", "podSets": []}},
        ["spec.podSets", "should have at least 1 items"],
    ),
    "wl-pod-set-without-template": (
        "Workload",
        {"spec": {"podSets": [{"count": 1}]}},
        ["spec.podSets[0].template: Required value"],
    ),
    "wl-priority-class-without-priority": (
        "Workload",
        {"spec": {"priorityClassName": "high", **workload_body()["spec"]}},
        ["spec.priority", "priority should not be nil when priorityClassName is set"],
    ),
    "wl-unknown-priority-class-source": (
        "Workload",
        {"spec": {"priorityClassSource": "example.com/priority", **workload_body()["spec"]}},
        ["spec.priorityClassSource: Unsupported value"],
    ),
    "wl-bad-pod-set-name": (
        "Workload",
        workload_body(name="Main_Set"),
        ["spec.podSets[0].name", "should match"],
    ),
    "wpc-without-value": (
        "WorkloadPriorityClass",
        {"description": "no value"},
        ["value: Required value"],
    ),
    "ac-without-controller-name": (
        "AdmissionCheck",
        {"spec": {"parameters": {"apiGroup": api.GROUP, "kind": "MultiKueueConfig", "name": "x"}}},
        ["spec.controllerName: Required value"],
    ),
    "mkconf-duplicate-cluster": (
        "MultiKueueConfig",
        {"spec": {"clusters": ["worker1", "worker1"]}},
        ['spec.clusters[1]: Duplicate value: "worker1"'],
    ),
    "mkconf-no-clusters": (
        "MultiKueueConfig",
        {"spec": {"clusters": []}},
        ["spec.clusters", "should have at least 1 items"],
    ),
    "mkc-bad-location-type": (
        "MultiKueueCluster",
        {"spec": {"kubeConfig": {"location": "s", "locationType": "ConfigMap"}}},
        ['spec.kubeConfig.locationType: Unsupported value: "ConfigMap"', '"Secret"', '"Path"'],
    ),
    "mkc-both-sources": (
        "MultiKueueCluster",
        {"spec": {"kubeConfig": {"location": "s"}, "clusterProfileRef": {"name": "p"}}},
        ["spec: Invalid value", api.MSG_CLUSTER_SOURCE_EXACTLY_ONE],
    ),
    "mkc-no-source": (
        "MultiKueueCluster",
        {"spec": {"kubeConfig": {"location": ""}}},
        [api.MSG_CLUSTER_SOURCE_EXACTLY_ONE],
    ),
    "mkc-without-kubeconfig": (
        "MultiKueueCluster",
        {"spec": {}},
        ["spec.kubeConfig: Required value"],
    ),
    "rf-exists-toleration-with-value": (
        "ResourceFlavor",
        {"spec": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}},
        ["spec.tolerations", "a value must be empty when 'operator' is 'Exists'"],
    ),
    "rf-bad-taint-effect": (
        "ResourceFlavor",
        {"spec": {"nodeTaints": [{"key": "k", "effect": "Sometimes"}]}},
        ["spec.nodeTaints", "supported taint effect values"],
    ),
    "rf-topology-without-node-labels": (
        "ResourceFlavor",
        {"spec": {"topologyName": "default"}},
        ["at least one nodeLabel is required when topology is set"],
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_object_is_rejected_naming_the_field(objects: Objects, case: str):
    kind, body, expected = INVALID[case]
    namespace = objects.namespace if kind == "Workload" else None
    stderr = objects.rejected(obj(kind, unique(case), body, namespace))
    for text in expected:
        assert text in stderr, f"{case}: {text!r} not in {stderr!r}"


# ---------------------------------------------------------------------------------------------
# Immutability (CEL transition rules) on real objects


def test_local_queue_cluster_queue_is_immutable(objects: Objects):
    name = unique("lq-immutable")
    objects.create(obj("LocalQueue", name, {"spec": {"clusterQueue": "cluster-queue"}}, objects.namespace))
    res = objects.patch("LocalQueue", name, {"spec": {"clusterQueue": "other-queue"}}, objects.namespace)
    assert res.returncode != 0
    assert "spec.clusterQueue" in res.stderr and api.MSG_FIELD_IS_IMMUTABLE in res.stderr
    # Changing something else is fine.
    res = objects.patch("LocalQueue", name, {"spec": {"stopPolicy": "Hold"}}, objects.namespace)
    assert res.returncode == 0, res.stderr


def test_admission_check_controller_name_is_immutable(objects: Objects):
    name = unique("ac-immutable")
    objects.create(obj("AdmissionCheck", name, {"spec": {"controllerName": "example.com/check"}}))
    res = objects.patch("AdmissionCheck", name, {"spec": {"controllerName": "example.com/other"}})
    assert res.returncode != 0
    assert "spec.controllerName" in res.stderr and api.MSG_FIELD_IS_IMMUTABLE in res.stderr


def test_resource_flavor_topology_name_is_immutable_once_set(objects: Objects):
    name = unique("rf-tas")
    objects.create(
        obj("ResourceFlavor", name, {"spec": {"nodeLabels": {"pool": "a"}, "topologyName": "default"}})
    )
    for change in ("other", None):
        res = objects.patch("ResourceFlavor", name, {"spec": {"topologyName": change}})
        assert res.returncode != 0, change
        assert "spec.topologyName" in res.stderr and "topologyName is immutable once set" in res.stderr


def reserve_and_admit(objects: Objects, name: str) -> None:
    status = {
        "conditions": [condition(api.WORKLOAD_QUOTA_RESERVED), condition(api.WORKLOAD_ADMITTED)],
        "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": [{"name": "main", "count": 1}]},
    }
    res = objects.patch("Workload", name, {"status": status}, objects.namespace, status=True)
    assert res.returncode == 0, res.stderr


def test_workload_priority_and_execution_time_are_frozen_while_reserved(objects: Objects):
    pod_priority = unique("wl-pod-priority")
    body = workload_body()
    body["spec"].update(
        priorityClassName="pod-class",
        priorityClassSource=api.PRIORITY_CLASS_SOURCE_POD,
        priority=5,
        maximumExecutionTimeSeconds=10,
    )
    objects.create(obj("Workload", pod_priority, body, objects.namespace))
    reserve_and_admit(objects, pod_priority)
    for spec_change, field in (
        ({"priorityClassName": "other-class"}, "spec.priorityClassName"),
        ({"priorityClassName": None}, "spec.priorityClassName"),
        ({"priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD}, "spec.priorityClassSource"),
        ({"maximumExecutionTimeSeconds": 20}, "spec.maximumExecutionTimeSeconds"),
    ):
        res = objects.patch("Workload", pod_priority, {"spec": spec_change}, objects.namespace)
        assert res.returncode != 0, spec_change
        assert field in res.stderr and "immutable" in res.stderr, res.stderr
    # The priority value itself follows its class, even while admitted.
    res = objects.patch("Workload", pod_priority, {"spec": {"priority": 7}}, objects.namespace)
    assert res.returncode == 0, res.stderr

    # A WorkloadPriorityClass name may change while reserved.
    class_priority = unique("wl-wpc-priority")
    body["spec"]["priorityClassSource"] = api.PRIORITY_CLASS_SOURCE_WORKLOAD
    objects.create(obj("Workload", class_priority, body, objects.namespace))
    reserve_and_admit(objects, class_priority)
    res = objects.patch(
        "Workload", class_priority, {"spec": {"priorityClassName": "other-class"}}, objects.namespace
    )
    assert res.returncode == 0, res.stderr


# ---------------------------------------------------------------------------------------------
# kubectl get: upstream printer columns


def test_get_workloads_prints_upstream_columns(fleet, objects: Objects):
    name = unique("wl-columns")
    objects.create(obj("Workload", name, workload_body(queue="user-queue"), objects.namespace))
    out = fleet.kubectl(CLUSTER, "get", "workloads", "-n", objects.namespace, name).stdout
    assert headers(out) == ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
    assert re.split(r"\s{2,}", out.splitlines()[1].strip())[:2] == [name, "user-queue"]
    for short_name in ("kwl", "kueueworkload", "kueueworkloads"):
        res = fleet.kubectl(CLUSTER, "get", short_name, "-n", objects.namespace, name, "-o", "name")
        assert res.stdout.strip() == f"workload.{api.GROUP}/{name}"


def test_get_cluster_queues_and_local_queues_print_upstream_columns(fleet, objects: Objects):
    cq_name = unique("cq-columns")
    objects.create(obj("ClusterQueue", cq_name, {"spec": {"cohort": "columns-cohort"}}))
    out = fleet.kubectl(CLUSTER, "get", "cq", cq_name).stdout
    assert headers(out) == ["NAME", "COHORT", "PENDING WORKLOADS"]
    assert re.split(r"\s{2,}", out.splitlines()[1].strip())[:2] == [cq_name, "columns-cohort"]
    wide = fleet.kubectl(CLUSTER, "get", "clusterqueues", cq_name, "-o", "wide").stdout
    assert headers(wide) == ["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
    assert "BestEffortFIFO" in wide.splitlines()[1]

    lq_name = unique("lq-columns")
    objects.create(obj("LocalQueue", lq_name, {"spec": {"clusterQueue": cq_name}}, objects.namespace))
    out = fleet.kubectl(CLUSTER, "get", "lq", "-n", objects.namespace, lq_name).stdout
    assert headers(out) == ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]

    wpc_name = unique("wpc-columns")
    objects.create(obj("WorkloadPriorityClass", wpc_name, {"value": 42}))
    out = fleet.kubectl(CLUSTER, "get", "wpc", wpc_name).stdout
    assert headers(out) == ["NAME", "VALUE"]
    assert re.split(r"\s{2,}", out.splitlines()[1].strip()) == [wpc_name, "42"]

    rf_name = unique("rf-columns")
    objects.create(obj("ResourceFlavor", rf_name, {"spec": {}}))
    assert headers(fleet.kubectl(CLUSTER, "get", "rf", rf_name).stdout) == ["NAME", "AGE"]

    mkc_name = unique("mkc-columns")
    objects.create(obj("MultiKueueCluster", mkc_name, {"spec": {"kubeConfig": {"location": "s"}}}))
    assert headers(fleet.kubectl(CLUSTER, "get", "mkc", mkc_name).stdout) == ["NAME", "CONNECTED", "AGE"]


def test_get_cohorts_prints_name_and_age(fleet, objects: Objects):
    name = unique("co-columns")
    objects.create(obj("Cohort", name, {"spec": {"parentName": "columns-root"}}))
    out = fleet.kubectl(CLUSTER, "get", "co", name).stdout
    assert headers(out) == ["NAME", "AGE"]
    assert re.split(r"\s{2,}", out.splitlines()[1].strip())[0] == name
    assert headers(fleet.kubectl(CLUSTER, "get", "cohorts", name, "-o", "wide").stdout) == ["NAME", "AGE"]
    res = fleet.kubectl(CLUSTER, "get", "co", name, "-o", "name")
    assert res.stdout.strip() == f"cohort.{api.GROUP}/{name}"


def test_cohort_status_subresource_keeps_the_weighted_share(fleet, objects: Objects):
    name = unique("co-status")
    objects.create(obj("Cohort", name, {"spec": {}}))
    res = objects.patch("Cohort", name, {"status": {"fairSharing": {"weightedShare": 250}}}, status=True)
    assert res.returncode == 0, res.stderr
    stored = json.loads(fleet.kubectl(CLUSTER, "get", "co", name, "-o", "json").stdout)
    assert stored["status"] == {"fairSharing": {"weightedShare": 250}}
    # A spec write does not touch status.
    res = objects.patch("Cohort", name, {"spec": {"parentName": "other-root"}, "status": {}})
    assert res.returncode == 0, res.stderr
    stored = json.loads(fleet.kubectl(CLUSTER, "get", "co", name, "-o", "json").stdout)
    assert stored["status"]["fairSharing"]["weightedShare"] == 250


# ---------------------------------------------------------------------------------------------
# Workload status: the admission shape, the selectable field and the status CEL rules


def test_workload_status_rules(fleet, objects: Objects):
    name = unique("wl-status")
    namespace = objects.namespace
    cq_name = unique("cq-status")
    objects.create(obj("Workload", name, workload_body(queue="user-queue"), namespace))

    admission = {
        "clusterQueue": cq_name,
        "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "default-flavor"}, "resourceUsage": {"cpu": "1"}, "count": 1}
        ],
    }
    two_assignments = {**admission, "podSetAssignments": [*admission["podSetAssignments"], {"name": "extra"}]}
    reserved = {"conditions": [condition(api.WORKLOAD_QUOTA_RESERVED)]}

    res = objects.patch(
        "Workload", name, {"status": {**reserved, "admission": two_assignments}}, namespace, True
    )
    assert res.returncode != 0
    assert "status.admission.podSetAssignments" in res.stderr
    assert "podSetAssignments must have the same number of podSets as the spec" in res.stderr

    res = objects.patch("Workload", name, {"status": {**reserved, "admission": admission}}, namespace, True)
    assert res.returncode == 0, res.stderr
    out = fleet.kubectl(CLUSTER, "get", "workloads", "-n", namespace, name).stdout
    assert re.split(r"\s{2,}", out.splitlines()[1].strip())[:3] == [name, "user-queue", cq_name]

    selected = fleet.kubectl(
        CLUSTER, "get", "workloads", "-n", namespace, "-o", "name",
        "--field-selector", f"status.admission.clusterQueue={cq_name}",
    ).stdout.split()  # fmt: skip
    assert selected == [f"workload.{api.GROUP}/{name}"]
    other = fleet.kubectl(
        CLUSTER, "get", "workloads", "-n", namespace, "-o", "name",
        "--field-selector", "status.admission.clusterQueue=some-other-queue",
    ).stdout.split()  # fmt: skip
    assert other == []

    res = objects.patch("Workload", name, {"spec": {"queueName": "other-queue"}}, namespace)
    assert res.returncode != 0
    assert "spec.queueName" in res.stderr
    assert "queueName is immutable while workload quota reserved" in res.stderr

    both = {"clusterName": "worker1", "nominatedClusterNames": ["worker1", "worker2"]}
    res = objects.patch("Workload", name, {"status": both}, namespace, True)
    assert res.returncode != 0
    assert "status.clusterName" in res.stderr and api.MSG_CLUSTER_NAME_EXCLUSIVE in res.stderr

    res = objects.patch(
        "Workload", name, {"status": {"nominatedClusterNames": ["worker1", "worker2"]}}, namespace, True
    )
    assert res.returncode == 0, res.stderr
    res = objects.patch(
        "Workload",
        name,
        {"status": {"clusterName": "worker1", "nominatedClusterNames": None}},
        namespace,
        True,
    )
    assert res.returncode == 0, res.stderr
    res = objects.patch("Workload", name, {"status": {"clusterName": "worker2"}}, namespace, True)
    assert res.returncode != 0
    assert "status.clusterName" in res.stderr and api.MSG_CLUSTER_NAME_IMMUTABLE in res.stderr
    # Eviction clears it: allowed.
    res = objects.patch("Workload", name, {"status": {"clusterName": None}}, namespace, True)
    assert res.returncode == 0, res.stderr

    res = objects.patch(
        "Workload", name, {"status": {"accumulatedPastExecutionTimeSeconds": 30}}, namespace, True
    )
    assert res.returncode == 0, res.stderr
    stored = json.loads(
        fleet.kubectl(CLUSTER, "get", "workloads", "-n", namespace, name, "-o", "json").stdout
    )
    assert stored["status"]["accumulatedPastExecutionTimeSeconds"] == 30
    assert stored["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {"cpu": "1"}


def test_unknown_fields_are_kept_only_in_the_pod_template(fleet, objects: Objects):
    body = workload_body()
    body["spec"]["podSets"][0]["template"]["spec"]["futurePodField"] = {"kept": True}
    template = objects.created_object(
        obj("Workload", unique("wl-keep"), body, objects.namespace), dry_run=True
    )["spec"]["podSets"][0]["template"]
    assert template["spec"]["futurePodField"] == {"kept": True}

    body["spec"]["notAField"] = "x"
    manifest = json.dumps(obj("Workload", unique("wl-prune"), body, objects.namespace))
    strict = fleet.kubectl(CLUSTER, "create", "--dry-run=server", "-f", "-", input=manifest, check=False)
    assert strict.returncode != 0 and 'unknown field "spec.notAField"' in strict.stderr
    lenient = fleet.kubectl(
        CLUSTER, "create", "--dry-run=server", "--validate=false", "-f", "-", "-o", "json", input=manifest
    )
    spec = json.loads(lenient.stdout)["spec"]
    assert "notAField" not in spec
    assert spec["podSets"][0]["template"]["spec"]["futurePodField"] == {"kept": True}
