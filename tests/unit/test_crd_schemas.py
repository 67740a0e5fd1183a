"""Our kueue.x-k8s.io/v1beta1 CRDs (deploy/crds), checked without a cluster: names, scopes, printer
columns, v1beta1 field names, defaults, enums, and that every schema is structural."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kueue_domain import api

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
# The standard Kubernetes resource.Quantity regular expression.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# The only places an object may keep fields the schema does not describe: the pod template.
PRESERVE_UNKNOWN_ALLOWED = re.compile(r"^Workload(/v1beta2)?:\.spec\.podSets\[\]\.template(\.|$)")

# kind -> (plural, singular, scope, shortNames, has status subresource)
NAMES = {
    "ResourceFlavor": ("resourceflavors", "resourceflavor", "Cluster", ["flavor", "flavors", "rf"], False),
    "ClusterQueue": ("clusterqueues", "clusterqueue", "Cluster", ["cq"], True),
    "Cohort": ("cohorts", "cohort", "Cluster", ["co"], True),
    "LocalQueue": ("localqueues", "localqueue", "Namespaced", ["queue", "queues", "lq"], True),
    "Workload": ("workloads", "workload", "Namespaced", ["kwl", "kueueworkload", "kueueworkloads"], True),
    "WorkloadPriorityClass": ("workloadpriorityclasses", "workloadpriorityclass", "Cluster", ["wpc"], False),
    "AdmissionCheck": ("admissionchecks", "admissioncheck", "Cluster", ["ac"], True),
    "MultiKueueConfig": ("multikueueconfigs", "multikueueconfig", "Cluster", ["mkconf"], False),
    "MultiKueueCluster": ("multikueueclusters", "multikueuecluster", "Cluster", ["mkc"], True),
    "ProvisioningRequestConfig": (
        "provisioningrequestconfigs",
        "provisioningrequestconfig",
        "Cluster",
        ["prc"],
        False,
    ),
}

# kind -> [(name, type, jsonPath, priority)]; no entry means kubectl's default NAME AGE.
PRINTER_COLUMNS = {
    "ClusterQueue": [
        ("Cohort", "string", ".spec.cohort", 0),
        ("Strategy", "string", ".spec.queueingStrategy", 1),
        ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
        ("Admitted Workloads", "integer", ".status.admittedWorkloads", 1),
    ],
    "LocalQueue": [
        ("ClusterQueue", "string", ".spec.clusterQueue", 0),
        ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
        ("Admitted Workloads", "integer", ".status.admittedWorkloads", 0),
    ],
    "Workload": [
        ("Queue", "string", ".spec.queueName", 0),
        ("Reserved in", "string", ".status.admission.clusterQueue", 0),
        ("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status", 0),
        ("Finished", "string", ".status.conditions[?(@.type=='Finished')].status", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
    ],
    "WorkloadPriorityClass": [("Value", "integer", ".value", 0)],
    "MultiKueueCluster": [
        ("Connected", "string", ".status.conditions[?(@.type=='Active')].status", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
    ],
}

# What `kubectl get <kind>` (and `-o wide`) prints as headers.
HEADERS = {
    "ResourceFlavor": (["NAME", "AGE"], ["NAME", "AGE"]),
    "Cohort": (["NAME", "AGE"], ["NAME", "AGE"]),
    "AdmissionCheck": (["NAME", "AGE"], ["NAME", "AGE"]),
    "MultiKueueConfig": (["NAME", "AGE"], ["NAME", "AGE"]),
    "ProvisioningRequestConfig": (["NAME", "AGE"], ["NAME", "AGE"]),
    "ClusterQueue": (
        ["NAME", "COHORT", "PENDING WORKLOADS"],
        ["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
    ),
    "LocalQueue": (["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],) * 2,
    "Workload": (["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"],) * 2,
    "WorkloadPriorityClass": (["NAME", "VALUE"], ["NAME", "VALUE"]),
    "MultiKueueCluster": (["NAME", "CONNECTED", "AGE"], ["NAME", "CONNECTED", "AGE"]),
}


def _load() -> dict[str, tuple[Path, dict]]:
    crds: dict[str, tuple[Path, dict]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert len(docs) == 1, f"{path.name}: one CRD per file"
        crds[docs[0]["spec"]["names"]["kind"]] = (path, docs[0])
    return crds


CRDS = _load()


def version(kind: str, name: str = "v1beta1") -> dict:
    """One served version of a CRD; the tests here read v1beta1, the form our code works in
    (test_crd_versions.py checks v1beta2 against it)."""
    return next(v for v in CRDS[kind][1]["spec"]["versions"] if v["name"] == name)


def schema(kind: str, name: str = "v1beta1") -> dict:
    return version(kind, name)["schema"]["openAPIV3Schema"]


def node(kind: str, path: str, name: str = "v1beta1") -> dict:
    """Schema node at a dotted path; `[]` steps into list items, e.g. `spec.podSets[].count`."""
    current = schema(kind, name)
    for part in path.split("."):
        is_list = part.endswith("[]")
        current = current["properties"][part.removesuffix("[]")]
        if is_list:
            current = current["items"]
    return current


def walk(schema_node: dict, path: str) -> Iterator[tuple[str, dict]]:
    """Every schema node with its path (`[]` for list items, `{}` for map values)."""
    yield path, schema_node
    for name, child in schema_node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema_node.get("items"), dict):
        yield from walk(schema_node["items"], f"{path}[]")
    if isinstance(schema_node.get("additionalProperties"), dict):
        yield from walk(schema_node["additionalProperties"], f"{path}{{}}")


def all_nodes() -> Iterator[tuple[str, str, dict]]:
    """Every node of every served version's schema (a v1beta2 node's kind reads `Kind/v1beta2`)."""
    for kind in CRDS:
        for served in CRDS[kind][1]["spec"]["versions"]:
            label = kind if served["name"] == "v1beta1" else f"{kind}/{served['name']}"
            for path, schema_node in walk(served["schema"]["openAPIV3Schema"], ""):
                yield label, path, schema_node


def test_every_kind_has_one_file_and_the_kustomization_lists_them():
    assert set(CRDS) == set(NAMES)
    kustomization = yaml.safe_load((CRD_DIR / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(path.name for path, _ in CRDS.values())


@pytest.mark.parametrize("kind", sorted(NAMES))
def test_names_scope_and_version(kind: str):
    path, crd = CRDS[kind]
    plural, singular, scope, short_names, _ = NAMES[kind]
    assert (
        path.read_text().startswith("#")
        and "written for kueue-federation" in path.read_text().splitlines()[0]
    )
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{api.GROUP}"
    spec = crd["spec"]
    assert spec["group"] == api.GROUP
    assert spec["scope"] == scope
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": singular,
        "shortNames": short_names,
    }
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [
        ("v1beta1", True, False),
        ("v1beta2", True, True),
    ]
    v1beta1 = spec["versions"][0]
    if kind == "MultiKueueConfig":  # upstream does not deprecate this one
        assert "deprecated" not in v1beta1
    else:
        assert v1beta1["deprecated"] is True
        assert v1beta1["deprecationWarning"] == "This version is deprecated. Use v1beta2 instead."
    assert spec["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}
            },
        },
    }


def test_names_match_the_api_constants():
    assert {resource.kind for resource in api.KUEUE_RESOURCES} == set(CRDS)
    for resource in api.KUEUE_RESOURCES:
        plural, _, scope, _, _ = NAMES[resource.kind]
        assert (resource.plural, resource.namespaced) == (plural, scope == "Namespaced")


@pytest.mark.parametrize("kind", sorted(NAMES))
def test_status_subresource(kind: str):
    has_status = NAMES[kind][4]
    assert version(kind).get("subresources") == ({"status": {}} if has_status else None)
    assert ("status" in schema(kind)["properties"]) == has_status


@pytest.mark.parametrize("kind", sorted(NAMES))
def test_printer_columns(kind: str):
    columns = version(kind).get("additionalPrinterColumns")
    if kind not in PRINTER_COLUMNS:
        assert columns is None
    else:
        assert [
            (c["name"], c["type"], c["jsonPath"], c.get("priority", 0)) for c in columns
        ] == PRINTER_COLUMNS[kind]
    default_headers = ["NAME"] + [c["name"].upper() for c in columns or [] if c.get("priority", 0) == 0]
    wide_headers = ["NAME"] + [c["name"].upper() for c in columns or []]
    if not columns:
        default_headers = wide_headers = ["NAME", "AGE"]
    assert (default_headers, wide_headers) == HEADERS[kind]


@pytest.mark.parametrize("kind", sorted(PRINTER_COLUMNS))
def test_printer_column_paths_exist_in_the_schema(kind: str):
    for column in version(kind)["additionalPrinterColumns"]:
        path = column["jsonPath"]
        if path == ".metadata.creationTimestamp":
            continue
        path = re.sub(r"\[\?\(@\.type=='\w+'\)\]", "[]", path).lstrip(".")
        target = node(kind, path)
        assert target["type"] == column["type"], path


def test_workload_selectable_field():
    """Upstream selects `.status.admission.clusterQueue` in the storage version only."""
    selectable = version("Workload", "v1beta2")["selectableFields"]
    assert selectable == [{"jsonPath": ".status.admission.clusterQueue"}]
    assert node("Workload", "status.admission.clusterQueue", "v1beta2")["type"] == "string"
    for kind in CRDS:
        assert "selectableFields" not in version(kind)
        if kind != "Workload":
            assert "selectableFields" not in version(kind, "v1beta2")


# ---------------------------------------------------------------------------------------------
# Structural schemas (what the kube-apiserver requires) and our own conventions.


def test_every_node_is_structural():
    for kind, path, schema_node in all_nodes():
        where = f"{kind}:{path or '<root>'}"
        if schema_node.get("x-kubernetes-int-or-string"):
            assert "type" not in schema_node, where
            assert schema_node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], where
        elif schema_node.get("x-kubernetes-preserve-unknown-fields"):
            assert schema_node.get("type") == "object", where
        else:
            assert schema_node.get("type") in {"object", "array", "string", "integer", "boolean", "number"}, (
                where
            )
        for keyword in ("allOf", "oneOf", "not"):
            assert keyword not in schema_node, where
        if "anyOf" in schema_node:
            assert schema_node.get("x-kubernetes-int-or-string"), where
        if "properties" in schema_node or "additionalProperties" in schema_node:
            assert schema_node.get("type") == "object", where
            assert not ("properties" in schema_node and "additionalProperties" in schema_node), where
        if "items" in schema_node:
            assert schema_node.get("type") == "array", where
        if schema_node.get("type") == "array":
            assert isinstance(schema_node.get("items"), dict), where
        assert "x-kubernetes-embedded-resource" not in schema_node, where


def test_unknown_fields_are_preserved_only_in_pod_templates():
    preserving = [
        f"{kind}:{path}" for kind, path, n in all_nodes() if n.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert preserving, "the pod template keeps unknown fields"
    assert all(PRESERVE_UNKNOWN_ALLOWED.match(p) for p in preserving), preserving
    assert "Workload:.spec.podSets[].template" in preserving


def test_list_map_keys_are_required_or_defaulted():
    seen = 0
    for kind, path, schema_node in all_nodes():
        list_type = schema_node.get("x-kubernetes-list-type")
        if list_type != "map":
            assert "x-kubernetes-list-map-keys" not in schema_node, f"{kind}:{path}"
            continue
        seen += 1
        items = schema_node["items"]
        for key in schema_node["x-kubernetes-list-map-keys"]:
            assert key in items["properties"], f"{kind}:{path} key {key}"
            assert key in items.get("required", []) or "default" in items["properties"][key], (
                f"{kind}:{path}.{key}"
            )
    assert seen > 10


def test_required_fields_are_declared_properties():
    for kind, path, schema_node in all_nodes():
        for field in schema_node.get("required", []):
            assert field in schema_node.get("properties", {}), f"{kind}:{path} requires undeclared {field}"


def test_defaults_satisfy_their_enums():
    for kind, path, schema_node in all_nodes():
        if "default" in schema_node and "enum" in schema_node:
            assert schema_node["default"] in schema_node["enum"], f"{kind}:{path}"


def test_every_cel_rule_has_a_message_and_bounded_lists_above_it():
    rules = 0
    for kind in CRDS:
        for path, schema_node in walk(schema(kind), ""):
            validations = schema_node.get("x-kubernetes-validations", [])
            for validation in validations:
                rules += 1
                assert validation.get("message"), f"{kind}:{path} {validation['rule']}"
                assert set(validation) <= {"rule", "message", "fieldPath", "reason", "messageExpression"}
            if not validations:
                continue
            # Each list between the root and a rule multiplies its estimated cost: keep them bounded.
            ancestor = schema(kind)
            steps = [s for s in re.split(r"(\.|\[\]|\{\})", path) if s and s != "."]
            for step in steps:
                if ancestor.get("type") == "array" or step == "[]":
                    assert "maxItems" in ancestor, f"{kind}:{path}: unbounded list above a CEL rule"
                if step == "[]":
                    ancestor = ancestor["items"]
                elif step == "{}":
                    assert "maxProperties" in ancestor, f"{kind}:{path}: unbounded map above a CEL rule"
                    ancestor = ancestor["additionalProperties"]
                else:
                    ancestor = ancestor["properties"][step]
            if ancestor.get("type") == "array":
                assert "maxItems" in ancestor, f"{kind}:{path}"
    assert rules >= 20


# ---------------------------------------------------------------------------------------------
# Quantities


def quantity_nodes() -> list[tuple[str, dict]]:
    return [(f"{k}:{p}", n) for k, p, n in all_nodes() if n.get("x-kubernetes-int-or-string")]


def test_every_quantity_uses_the_kubernetes_quantity_pattern():
    nodes = quantity_nodes()
    assert len(nodes) > 15
    for where, schema_node in nodes:
        assert schema_node.get("pattern") == QUANTITY_PATTERN, where
    quantity_paths = {where for where, _ in nodes}
    for expected in (
        "ClusterQueue:.spec.resourceGroups[].flavors[].resources[].nominalQuota",
        "ClusterQueue:.spec.resourceGroups[].flavors[].resources[].borrowingLimit",
        "ClusterQueue:.spec.resourceGroups[].flavors[].resources[].lendingLimit",
        "ClusterQueue:.status.flavorsUsage[].resources[].total",
        "Cohort:.spec.resourceGroups[].flavors[].resources[].nominalQuota",
        "Cohort:.spec.resourceGroups[].flavors[].resources[].lendingLimit",
        "Cohort:.spec.fairSharing.weight",
        "Workload:.spec.podSets[].template.spec.containers[].resources.requests{}",
        "Workload:.spec.podSets[].template.spec.initContainers[].resources.limits{}",
        "Workload:.status.admission.podSetAssignments[].resourceUsage{}",
        "Workload:.status.resourceRequests[].resources{}",
        "LocalQueue:.status.flavorUsage[].resources[].total",
    ):
        assert expected in quantity_paths


@pytest.mark.parametrize(
    "value", ["1", "500m", "10Gi", "1.5", "0", "+2", "-1", "1e3", "1E-3", ".5", "128Mi", "2k"]
)
def test_quantity_pattern_accepts(value: str):
    assert re.fullmatch(QUANTITY_PATTERN, value)


@pytest.mark.parametrize("value", ["ten", "1Q", "", "1 Gi", "Gi", "1.2.3", "1ki", "--1", "1GiB", "0x10"])
def test_quantity_pattern_rejects(value: str):
    assert not re.fullmatch(QUANTITY_PATTERN, value)


# ---------------------------------------------------------------------------------------------
# Fields, defaults and enums per kind.


def test_cluster_queue_v1beta1_fields():
    spec = node("ClusterQueue", "spec")
    assert "cohort" in spec["properties"] and "cohortName" not in spec["properties"]
    assert node("ClusterQueue", "spec.admissionChecks")["items"]["maxLength"] == 316
    assert node("ClusterQueue", "spec.admissionChecksStrategy.admissionChecks")[
        "x-kubernetes-list-map-keys"
    ] == ["name"]
    strategy = node("ClusterQueue", "spec.queueingStrategy")
    assert strategy["enum"] == [api.QUEUEING_STRATEGY_STRICT_FIFO, api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO]
    assert strategy["default"] == "BestEffortFIFO"
    assert node("ClusterQueue", "spec.stopPolicy")["enum"] == ["None", "Hold", "HoldAndDrain"]
    assert node("ClusterQueue", "spec.stopPolicy")["default"] == "None"
    assert "default" not in node("ClusterQueue", "spec.namespaceSelector")

    group = node("ClusterQueue", "spec.resourceGroups[]")
    assert group["required"] == ["coveredResources", "flavors"]
    assert node("ClusterQueue", "spec.resourceGroups")["maxItems"] == 16
    assert (
        group["properties"]["coveredResources"]["minItems"],
        group["properties"]["coveredResources"]["maxItems"],
    ) == (
        1,
        64,
    )
    assert node("ClusterQueue", "spec.resourceGroups[].flavors")["x-kubernetes-list-map-keys"] == ["name"]
    quota = node("ClusterQueue", "spec.resourceGroups[].flavors[].resources[]")
    assert quota["required"] == ["name", "nominalQuota"]
    assert any("size(self.coveredResources)" in v["rule"] for v in group["x-kubernetes-validations"])
    messages = [v["message"] for v in spec["x-kubernetes-validations"]]
    assert any(
        m.startswith("borrowingLimit") and m.endswith(api.MSG_BORROWING_LIMIT_NEEDS_COHORT) for m in messages
    )


def test_cluster_queue_preemption_and_fungibility_defaults():
    preemption = node("ClusterQueue", "spec.preemption")
    assert preemption["default"] == {}
    props = preemption["properties"]
    assert (props["reclaimWithinCohort"]["default"], props["reclaimWithinCohort"]["enum"]) == (
        "Never",
        ["Never", "LowerPriority", "Any"],
    )
    assert (props["withinClusterQueue"]["default"], props["withinClusterQueue"]["enum"]) == (
        "Never",
        ["Never", "LowerPriority", "LowerOrNewerEqualPriority"],
    )
    assert props["borrowWithinCohort"]["default"] == {}
    assert props["borrowWithinCohort"]["properties"]["policy"]["default"] == "Never"
    assert props["borrowWithinCohort"]["properties"]["policy"]["enum"] == ["Never", "LowerPriority"]
    assert any("reclaimWithinCohort == 'Never'" in v["rule"] for v in preemption["x-kubernetes-validations"])

    fungibility = node("ClusterQueue", "spec.flavorFungibility")
    assert fungibility["default"] == {}
    props = fungibility["properties"]
    assert props["whenCanBorrow"]["default"] == api.FLAVOR_FUNGIBILITY_MAY_STOP_SEARCH
    assert props["whenCanPreempt"]["default"] == api.FLAVOR_FUNGIBILITY_TRY_NEXT_FLAVOR
    assert set(props["whenCanBorrow"]["enum"]) == {"MayStopSearch", "TryNextFlavor", "Borrow"}
    assert set(props["whenCanPreempt"]["enum"]) == {"MayStopSearch", "TryNextFlavor", "Preempt"}
    assert props["preference"]["enum"] == ["BorrowingOverPreemption", "PreemptionOverBorrowing"]


def without_descriptions(schema_node: object) -> object:
    if isinstance(schema_node, dict):
        return {k: without_descriptions(v) for k, v in schema_node.items() if k != "description"}
    if isinstance(schema_node, list):
        return [without_descriptions(v) for v in schema_node]
    return schema_node


def test_cohort_v1beta1_fields():
    spec = node("Cohort", "spec")
    assert set(spec["properties"]) == {"parentName", "resourceGroups", "fairSharing"}
    parent = node("Cohort", "spec.parentName")
    cq_cohort = node("ClusterQueue", "spec.cohort")
    assert (parent["type"], parent["maxLength"], parent["pattern"]) == ("string", 253, cq_cohort["pattern"])
    # resourceGroups and fairSharing are the ClusterQueue's schemas, quantity patterns and CEL rules included.
    assert node("Cohort", "spec.resourceGroups")["maxItems"] == 16
    for path in ("spec.resourceGroups", "spec.fairSharing"):
        assert without_descriptions(node("Cohort", path)) == without_descriptions(node("ClusterQueue", path))
    assert node("Cohort", "spec.fairSharing.weight")["default"] == 1


def test_cohort_limits_need_a_parent_and_lending_limit_is_not_capped():
    validations = node("Cohort", "spec")["x-kubernetes-validations"]
    assert [v["message"] for v in validations] == [
        f"borrowingLimit {api.MSG_LIMIT_NEEDS_PARENT}",
        f"lendingLimit {api.MSG_LIMIT_NEEDS_PARENT}",
    ]
    for validation, field in zip(validations, ("borrowingLimit", "lendingLimit"), strict=True):
        assert validation["rule"].startswith("has(self.parentName) || ")
        assert f"!has(r.{field})" in validation["rule"]
        assert validation["fieldPath"] == ".resourceGroups"
    rules = [v["rule"] for _, n in walk(schema("Cohort"), "") for v in n.get("x-kubernetes-validations", [])]
    assert not any("nominalQuota" in rule for rule in rules)


def test_cohort_status():
    status = node("Cohort", "status")["properties"]
    assert set(status) == {"fairSharing"}
    assert node("Cohort", "status.fairSharing")["required"] == ["weightedShare"]
    weighted_share = node("Cohort", "status.fairSharing.weightedShare")
    assert (weighted_share["type"], weighted_share["format"]) == ("integer", "int64")
    assert without_descriptions(node("Cohort", "status.fairSharing")) == without_descriptions(
        node("ClusterQueue", "status.fairSharing")
    )


def test_local_queue_v1beta1_fields():
    cluster_queue = node("LocalQueue", "spec.clusterQueue")
    assert cluster_queue["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": api.MSG_FIELD_IS_IMMUTABLE}
    ]
    status = node("LocalQueue", "status")["properties"]
    assert {"flavorUsage", "flavors", "flavorsReservation", "fairSharing"} <= set(status)
    assert "flavorsUsage" not in status
    assert node("LocalQueue", "spec.stopPolicy")["default"] == "None"


def test_workload_v1beta1_fields_and_defaults():
    spec = node("Workload", "spec")["properties"]
    assert {"priorityClassName", "priorityClassSource", "priority", "queueName", "active"} <= set(spec)
    assert "priorityClassRef" not in spec and "preemptionGates" not in spec
    assert node("Workload", "spec.priorityClassSource")["enum"] == [
        api.PRIORITY_CLASS_SOURCE_WORKLOAD,
        api.PRIORITY_CLASS_SOURCE_POD,
        "",
    ]
    assert node("Workload", "spec.active")["default"] is True
    pod_sets = node("Workload", "spec.podSets")
    assert (pod_sets["minItems"], pod_sets["maxItems"], pod_sets["x-kubernetes-list-map-keys"]) == (
        1,
        18,
        ["name"],
    )
    pod_set = node("Workload", "spec.podSets[]")
    assert pod_set["required"] == ["count", "template"]
    assert pod_set["properties"]["name"]["default"] == api.DEFAULT_PODSET_NAME
    assert (pod_set["properties"]["count"]["default"], pod_set["properties"]["count"]["minimum"]) == (1, 0)
    assert any("self.minCount <= self.count" in v["rule"] for v in pod_set["x-kubernetes-validations"])
    template = pod_set["properties"]["template"]
    assert template["type"] == "object" and template["x-kubernetes-preserve-unknown-fields"] is True


def test_workload_status_fields():
    status = node("Workload", "status")["properties"]
    for field in (
        "conditions",
        "admission",
        "requeueState",
        "reclaimablePods",
        "admissionChecks",
        "resourceRequests",
        "accumulatedPastExecutionTimeSeconds",
        "accumulatedPastExexcutionTimeSeconds",  # the upstream v1beta1 spelling
        "schedulingStats",
        "nominatedClusterNames",
        "clusterName",
        "unhealthyNodes",
    ):
        assert field in status, field
    assert node("Workload", "status.conditions")["maxItems"] == 16
    assert node("Workload", "status.admissionChecks[].state")["enum"] == [
        api.CHECK_STATE_PENDING,
        api.CHECK_STATE_READY,
        api.CHECK_STATE_RETRY,
        api.CHECK_STATE_REJECTED,
    ]
    assert node("Workload", "status.schedulingStats.evictions")["x-kubernetes-list-map-keys"] == [
        "reason",
        "underlyingCause",
    ]
    assert node("Workload", "status.nominatedClusterNames")["maxItems"] == 20
    assert node("Workload", "status.clusterName")["maxLength"] == 256
    messages = {v["message"] for v in node("Workload", "status")["x-kubernetes-validations"]}
    assert messages == {api.MSG_CLUSTER_NAME_IMMUTABLE, api.MSG_CLUSTER_NAME_EXCLUSIVE}


@pytest.mark.parametrize(
    "kind", ["ClusterQueue", "LocalQueue", "Workload", "AdmissionCheck", "MultiKueueCluster"]
)
def test_conditions_are_metav1_conditions_keyed_by_type(kind: str):
    conditions = node(kind, "status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert sorted(item["required"]) == ["lastTransitionTime", "message", "reason", "status", "type"]
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"


def test_workload_priority_class_admission_check_and_multikueue():
    wpc = schema("WorkloadPriorityClass")
    assert wpc["required"] == ["value"]
    assert (wpc["properties"]["value"]["type"], wpc["properties"]["value"]["format"]) == ("integer", "int32")
    assert wpc["properties"]["description"]["maxLength"] == 2048

    controller_name = node("AdmissionCheck", "spec.controllerName")
    assert node("AdmissionCheck", "spec")["required"] == ["controllerName"]
    assert (controller_name["minLength"], controller_name["maxLength"]) == (1, 253)
    assert controller_name["x-kubernetes-validations"][0]["message"] == api.MSG_FIELD_IS_IMMUTABLE

    assert node("MultiKueueConfig", "spec")["required"] == ["clusters"]
    clusters = node("MultiKueueConfig", "spec.clusters")
    assert (clusters["minItems"], clusters["maxItems"], clusters["x-kubernetes-list-type"]) == (1, 20, "set")

    assert node("MultiKueueCluster", "spec")["required"] == ["kubeConfig"]
    kube_config = node("MultiKueueCluster", "spec.kubeConfig")
    assert kube_config["required"] == ["location", "locationType"]
    location_type = kube_config["properties"]["locationType"]
    assert (location_type["enum"], location_type["default"]) == (
        [api.LOCATION_TYPE_SECRET, api.LOCATION_TYPE_PATH],
        api.LOCATION_TYPE_SECRET,
    )
    assert node("MultiKueueCluster", "spec.clusterProfileRef")["required"] == ["name"]
    messages = [v["message"] for v in node("MultiKueueCluster", "spec")["x-kubernetes-validations"]]
    assert messages == [api.MSG_CLUSTER_SOURCE_EXACTLY_ONE]
