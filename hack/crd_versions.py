#!/usr/bin/env python3
# ruff: noqa: E501  (CEL rules and their messages are kept on one line each, as upstream has them)
"""Give every CRD in deploy/crds its `v1beta2` version, written from its `v1beta1` one.

The v1beta1 schema in each file is the source we edit by hand. This script derives the v1beta2
schema from it with upstream Kueue's v1beta1 -> v1beta2 renames (the same ones
kueue_domain/conversion.py applies to objects), makes v1beta2 the storage version, marks v1beta1
deprecated with upstream's warning (MultiKueueConfig excepted, as upstream), and points
`spec.conversion` at the worker_agent's `/convert` webhook (Service `kueue-webhook-service` in
`kueue-system`; the agent injects its CA bundle).

    python hack/crd_versions.py           # rewrite deploy/crds/*.yaml
    python hack/crd_versions.py --check   # exit 1 if a file is not what this script writes
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = ROOT / "deploy" / "crds"

Obj = dict[str, Any]

DEPRECATION_WARNING = "This version is deprecated. Use v1beta2 instead."
NOT_DEPRECATED = {"multikueueconfigs.kueue.x-k8s.io"}
WEBHOOK_SERVICE = {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}
DNS_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _props(schema: Obj, *path: str) -> Obj:
    """The `properties` map at `path` (each step goes through properties, and through `items`
    for arrays)."""
    node = schema
    for step in path:
        node = node["properties"][step]
        if node.get("type") == "array":
            node = node["items"]
    return node


def _rename_property(node: Obj, old: str, new: str, description: str | None = None) -> None:
    props = node["properties"]
    renamed = {}
    for key, value in props.items():
        renamed[new if key == old else key] = value
    node["properties"] = renamed
    if description is not None:
        renamed[new]["description"] = description
    if old in node.get("required", []):
        node["required"] = [new if r == old else r for r in node["required"]]


def _validations(node: Obj, edit: Callable[[Obj], Obj | None]) -> None:
    rules = [r for r in (edit(dict(rule)) for rule in node.get("x-kubernetes-validations", [])) if r]
    if rules:
        node["x-kubernetes-validations"] = rules
    else:
        node.pop("x-kubernetes-validations", None)


# ---------------------------------------------------------------------------------------------
# Per kind: v1beta1 schema (a copy) -> v1beta2 schema, in place


def _cluster_queue(schema: Obj, columns: list[Obj]) -> None:
    spec = _props(schema, "spec")
    _rename_property(spec, "cohort", "cohortName", "Name of the Cohort this ClusterQueue belongs to.")
    spec["properties"].pop("admissionChecks")

    def edit(rule: Obj) -> Obj | None:
        if "admissionChecks)" in rule["rule"]:
            return None  # admissionChecks is gone; only the strategy remains
        rule["rule"] = rule["rule"].replace("self.cohort)", "self.cohortName)")
        return rule

    _validations(spec, edit)
    fungibility = spec["properties"]["flavorFungibility"]["properties"]
    fungibility["whenCanBorrow"]["enum"] = [v for v in fungibility["whenCanBorrow"]["enum"] if v != "Borrow"]
    fungibility["whenCanPreempt"]["enum"] = [
        v for v in fungibility["whenCanPreempt"]["enum"] if v != "Preempt"
    ]
    spec["properties"]["concurrentAdmissionPolicy"] = {
        "description": "How Workloads may be admitted on a less preferred flavor and later migrate "
        "(v1beta2 only; not implemented by this engine: accepted and kept).",
        "type": "object",
        "required": ["migration"],
        "properties": {
            "migration": {
                "type": "object",
                "required": ["mode"],
                "properties": {
                    "mode": {
                        "type": "string",
                        "maxLength": 253,
                        "enum": ["TryPreferredFlavors", "RetainFirstAdmission"],
                    },
                    "constraints": {
                        "type": "object",
                        "properties": {
                            "lastAcceptableFlavorName": {
                                "type": "string",
                                "maxLength": 253,
                                "pattern": DNS_NAME,
                            }
                        },
                    },
                },
            }
        },
    }
    status = _props(schema, "status")
    status["properties"].pop("pendingWorkloadsStatus")
    status["properties"]["fairSharing"]["properties"].pop("admissionFairSharingStatus", None)
    for column in columns:
        if column["jsonPath"] == ".spec.cohort":
            column["jsonPath"] = ".spec.cohortName"


def _cohort(schema: Obj, columns: list[Obj]) -> None:
    _props(schema, "status", "fairSharing")["properties"].pop("admissionFairSharingStatus", None)


def _local_queue(schema: Obj, columns: list[Obj]) -> None:
    status = _props(schema, "status")
    _rename_property(status, "flavorUsage", "flavorsUsage")
    status["properties"].pop("flavors")


def _workload(schema: Obj, columns: list[Obj]) -> None:
    _workload_spec(schema)
    _workload_status(schema)


def _workload_spec(schema: Obj) -> None:
    """The Workload's v1beta2 `spec`: priorityClassRef and its rules, preemption gates, slice
    constraints."""
    spec = _props(schema, "spec")
    spec["properties"].pop("priorityClassName")
    spec["properties"].pop("priorityClassSource")
    spec["properties"]["priorityClassRef"] = _priority_class_ref()
    spec["properties"]["preemptionGates"] = _gate_list(
        "Gates that govern whether this Workload may trigger preemptions (v1beta2 only).", {}
    )
    _validations(
        spec,
        lambda rule: (
            {
                **rule,
                "rule": "!has(self.priorityClassRef) || has(self.priority)",
                "message": "priority should not be nil when priorityClassRef is set",
            }
            if "priorityClassName" in rule["rule"]
            else rule
        ),
    )
    priority_rules = _priority_rules()
    kept = [r for r in schema.get("x-kubernetes-validations", []) if "priorityClass" not in r["rule"]]
    schema["x-kubernetes-validations"] = kept[:1] + priority_rules + kept[1:]
    podset = _props(schema, "spec", "podSets")
    request = podset["properties"].get("topologyRequest")
    if request is not None:
        request["properties"]["podsetSliceRequiredTopologyConstraints"] = _slice_constraints()


def _priority_class_ref() -> Obj:
    """v1beta2's `spec.priorityClassRef`, in place of priorityClassName and priorityClassSource."""
    return {
        "description": "The PriorityClass (WorkloadPriorityClass or Pod PriorityClass) that gives "
        "this Workload its priority.",
        "type": "object",
        "required": ["group", "kind", "name"],
        "properties": {
            "group": {"type": "string", "enum": ["kueue.x-k8s.io", "scheduling.k8s.io"]},
            "kind": {"type": "string", "enum": ["WorkloadPriorityClass", "PriorityClass"]},
            "name": {"type": "string", "minLength": 1, "maxLength": 253, "pattern": DNS_NAME},
        },
        "x-kubernetes-validations": [
            {
                "rule": "(self.group == 'scheduling.k8s.io') ? self.kind == 'PriorityClass' : true",
                "message": "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
            },
            {
                "rule": "(self.group == 'kueue.x-k8s.io') ? self.kind == 'WorkloadPriorityClass' : true",
                "message": "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
            },
        ],
    }


def _priority_rules() -> list[Obj]:
    """The rules that keep `spec.priorityClassRef` as it is while the Workload has quota reserved."""
    reserved = (
        "has(oldSelf.status) && has(oldSelf.status.conditions) && "
        "oldSelf.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')"
    )
    both = "has(oldSelf.spec.priorityClassRef) && has(self.spec.priorityClassRef)"
    return [
        {
            "rule": f"({reserved}) ? (!has(oldSelf.spec.priorityClassRef) && !has(self.spec.priorityClassRef)) || ({both}) : true",
            "message": "priorityClassRef is immutable while workload quota reserved",
            "fieldPath": ".spec.priorityClassRef",
        },
        {
            "rule": f"({reserved} && {both}) ? oldSelf.spec.priorityClassRef.group == self.spec.priorityClassRef.group : true",
            "message": "priorityClassRef.group is immutable while workload quota reserved",
            "fieldPath": ".spec.priorityClassRef.group",
        },
        {
            "rule": f"({reserved} && {both}) ? oldSelf.spec.priorityClassRef.kind == self.spec.priorityClassRef.kind : true",
            "message": "priorityClassRef.kind is immutable while workload quota reserved",
            "fieldPath": ".spec.priorityClassRef.kind",
        },
        {
            "rule": f"({reserved} && {both} && self.spec.priorityClassRef.group == 'scheduling.k8s.io' && "
            "self.spec.priorityClassRef.kind == 'PriorityClass') ? "
            "oldSelf.spec.priorityClassRef.name == self.spec.priorityClassRef.name : true",
            "message": "priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass while workload quota reserved",
            "fieldPath": ".spec.priorityClassRef.name",
        },
    ]


def _slice_constraints() -> Obj:
    """v1beta2's `podSets[].topologyRequest.podsetSliceRequiredTopologyConstraints`."""
    return {
        "description": "Nested slice topology constraints (v1beta2 only).",
        "type": "array",
        "maxItems": 16,
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "required": ["topology", "size"],
            "properties": {
                "topology": {"type": "string", "minLength": 1, "maxLength": 63},
                "size": {"type": "integer", "format": "int32", "minimum": 1},
            },
        },
    }


def _workload_status(schema: Obj) -> None:
    """The Workload's v1beta2 `status`: the misspelt field gone, preemption gates, topology slices."""
    status = _props(schema, "status")
    status["properties"].pop("accumulatedPastExexcutionTimeSeconds")
    status["properties"]["accumulatedPastExecutionTimeSeconds"]["description"] = (
        "Time the Workload spent admitted in earlier admissions."
    )
    status["properties"]["preemptionGates"] = _gate_list(
        "States of the Workload's preemption gates (v1beta2 only).",
        {
            "position": {"type": "string", "enum": ["Closed", "Open"]},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    )
    assignment = _props(schema, "status", "admission", "podSetAssignments")["properties"]
    assignment["topologyAssignment"] = _topology_assignment(assignment["topologyAssignment"])


def _gate_list(description: str, more: Obj) -> Obj:
    """A list of preemption gates keyed by name (spec: names; status: names with their state)."""
    return {
        "description": description,
        "type": "array",
        "maxItems": 8,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {
            "type": "object",
            "required": ["name", *more],
            "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 63}, **more},
        },
    }


def _topology_assignment(v1beta1: Obj) -> Obj:
    one_of = "exactly one of the fields in [universal individual] must be set"
    counts = {"type": "integer", "format": "int32", "minimum": 1}
    return {
        "description": v1beta1.get("description", "Topology-Aware Scheduling assignment of this PodSet."),
        "type": "object",
        "required": ["levels", "slices"],
        "properties": {
            "levels": v1beta1["properties"]["levels"],
            "slices": _assignment_slices(counts, one_of),
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.slices.all(x, size(x.valuesPerLevel) == size(self.levels))",
                "message": "valuesPerLevel must have the same length as the number of levels in this TopologyAssignment",
            }
        ],
    }


def _assignment_slices(counts: Obj, one_of: str) -> Obj:
    """v1beta2's `topologyAssignment.slices`: per slice its domain count, values and pod counts."""
    return {
        "type": "array",
        "maxItems": 1000,
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "required": ["domainCount", "valuesPerLevel", "podCounts"],
            "properties": {
                "domainCount": counts,
                "valuesPerLevel": _values_per_level(one_of),
                "podCounts": _pod_counts(counts, one_of),
            },
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.podCounts.individual) || size(self.podCounts.individual) == self.domainCount",
                    "message": "podCounts.individual must have length equal to domainCount",
                },
                {
                    "rule": "self.valuesPerLevel.all(x, !has(x.individual) || size(x.individual.roots) == self.domainCount)",
                    "message": "valuesPerLevel.individual, if set, must have roots of length equal to "
                    "domainCount of this TopologyAssignmentSlice",
                },
            ],
        },
    }


def _values_per_level(one_of: str) -> Obj:
    """A slice's `valuesPerLevel`: per level one value for every domain, or one for each."""
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": 16,
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "properties": {
                "universal": {"type": "string", "maxLength": 63},
                "individual": {
                    "type": "object",
                    "required": ["roots"],
                    "properties": {
                        "prefix": {"type": "string", "maxLength": 63},
                        "suffix": {"type": "string", "maxLength": 63},
                        "roots": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 100000,
                            "x-kubernetes-list-type": "atomic",
                            "items": {"type": "string", "maxLength": 63},
                        },
                    },
                },
            },
            "x-kubernetes-validations": [
                {"rule": "has(self.universal) != has(self.individual)", "message": one_of}
            ],
        },
    }


def _pod_counts(counts: Obj, one_of: str) -> Obj:
    """A slice's `podCounts`: one count for every domain, or one for each."""
    return {
        "type": "object",
        "properties": {
            "universal": counts,
            "individual": {
                "type": "array",
                "minItems": 1,
                "maxItems": 100000,
                "x-kubernetes-list-type": "atomic",
                "items": counts,
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "[has(self.universal),has(self.individual)].filter(x,x==true).size() == 1",
                "message": one_of,
            }
        ],
    }


def _admission_check(schema: Obj, columns: list[Obj]) -> None:
    _props(schema, "spec")["properties"].pop("retryDelayMinutes")


def _multikueue_cluster(schema: Obj, columns: list[Obj]) -> None:
    spec = _props(schema, "spec")
    kubeconfig = copy.deepcopy(spec["properties"]["kubeConfig"])
    kubeconfig["required"] = ["location"]
    kubeconfig["properties"]["location"]["minLength"] = 1
    profile = copy.deepcopy(spec["properties"]["clusterProfileRef"])
    spec["properties"] = {
        "clusterSource": {
            "description": "Where the credentials of the worker cluster come from: exactly one of "
            "kubeConfig and clusterProfileRef.",
            "type": "object",
            "properties": {"kubeConfig": kubeconfig, "clusterProfileRef": profile},
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.kubeConfig),has(self.clusterProfileRef)].filter(x,x==true).size() == 1",
                    "message": "exactly one of the fields in [kubeConfig clusterProfileRef] must be set",
                }
            ],
        }
    }
    spec["required"] = ["clusterSource"]
    spec.pop("x-kubernetes-validations", None)


def _multikueue_config(schema: Obj, columns: list[Obj]) -> None:
    _props(schema, "spec")["properties"]["quotaManagement"] = {
        "description": "Manual or Automated quota management of the workers (v1beta2 only; "
        "accepted and kept, not acted on).",
        "type": "string",
        "enum": ["Manual", "Automated"],
    }


def _provisioning_request_config(schema: Obj, columns: list[Obj]) -> None:
    spec = _props(schema, "spec")
    spec["properties"]["provisioningClassName"]["minLength"] = 1
    selector = spec["properties"]["podSetUpdates"]["properties"]["nodeSelector"]
    selector["x-kubernetes-list-type"] = "map"
    selector["x-kubernetes-list-map-keys"] = ["key"]


def _unchanged(schema: Obj, columns: list[Obj]) -> None:
    return None


TO_V1BETA2: dict[str, Callable[[Obj, list[Obj]], None]] = {
    "ClusterQueue": _cluster_queue,
    "Cohort": _cohort,
    "LocalQueue": _local_queue,
    "Workload": _workload,
    "AdmissionCheck": _admission_check,
    "MultiKueueCluster": _multikueue_cluster,
    "MultiKueueConfig": _multikueue_config,
    "ProvisioningRequestConfig": _provisioning_request_config,
    "ResourceFlavor": _unchanged,
    "WorkloadPriorityClass": _unchanged,
}


def with_v1beta2(crd: Obj) -> Obj:
    """`crd` serving v1beta1 (deprecated) and v1beta2 (storage), converted by the webhook."""
    crd = copy.deepcopy(crd)
    spec = crd["spec"]
    v1beta1 = next(v for v in spec["versions"] if v["name"] == "v1beta1")
    v1beta1 = {k: v for k, v in v1beta1.items() if k not in ("deprecated", "deprecationWarning")}
    v1beta2 = copy.deepcopy(v1beta1)
    if "selectableFields" not in v1beta2:  # taken from the v1beta1 hand-written source on the first run
        v1beta2 = _with_selectable_fields(v1beta2, spec)
    v1beta2["name"] = "v1beta2"
    v1beta2["storage"] = True
    columns = v1beta2.get("additionalPrinterColumns", [])
    TO_V1BETA2[spec["names"]["kind"]](v1beta2["schema"]["openAPIV3Schema"], columns)
    v1beta1["storage"] = False
    # As upstream: only the storage version selects fields. (Identical per-version selectableFields
    # are lifted to spec.selectableFields by the apiserver, which then refuses them for lack of a
    # top-level schema, since our versions' schemas differ.)
    v1beta1.pop("selectableFields", None)
    if crd["metadata"]["name"] not in NOT_DEPRECATED:
        ordered = {}
        for key, value in v1beta1.items():
            ordered[key] = value
            if key == "storage":
                ordered["deprecated"] = True
                ordered["deprecationWarning"] = DEPRECATION_WARNING
        v1beta1 = ordered
    spec["versions"] = [v1beta1, v1beta2]
    spec["conversion"] = {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"service": dict(WEBHOOK_SERVICE)}},
    }
    return crd


def _with_selectable_fields(v1beta2: Obj, spec: Obj) -> Obj:
    """Re-running on a generated file: v1beta1 no longer carries selectableFields, v1beta2 does."""
    current = next((v for v in spec["versions"] if v["name"] == "v1beta2"), {})
    if "selectableFields" not in current:
        return v1beta2
    out = {}
    for key, value in v1beta2.items():
        if key == "additionalPrinterColumns":
            out["selectableFields"] = copy.deepcopy(current["selectableFields"])
        out[key] = value
    return out


def _header(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def render(path: Path) -> str:
    """The file `path` as this script writes it: its header comment, then the CRD with v1beta2."""
    text = path.read_text()
    crd = yaml.safe_load(text)
    body = yaml.safe_dump(with_v1beta2(crd), sort_keys=False, width=100, allow_unicode=True)
    return _header(text) + body


def crd_files() -> list[Path]:
    return [p for p in sorted(CRD_DIR.glob("*.yaml")) if p.name != "kustomization.yaml"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report files that differ")
    args = parser.parse_args(argv)
    stale = []
    for path in crd_files():
        rendered = render(path)
        if rendered == path.read_text():
            continue
        stale.append(path)
        if not args.check:
            path.write_text(rendered)
    if args.check and stale:
        print("not what hack/crd_versions.py writes: " + ", ".join(str(p.relative_to(ROOT)) for p in stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
