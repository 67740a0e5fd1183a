"""Conversion between the two served forms of Kueue's objects: `kueue.x-k8s.io/v1beta1` (the form
our processes work in) and `v1beta2` (the storage form, upstream's hub).

The rules are upstream Kueue's (`apis/kueue/v1beta1/*_conversion.go` at v0.19.2):

| kind | v1beta1 | v1beta2 |
|---|---|---|
| ClusterQueue | `spec.cohort` | `spec.cohortName` |
| ClusterQueue | `spec.admissionChecks: [name]` | `spec.admissionChecksStrategy.admissionChecks[{name}]` |
| ClusterQueue | `flavorFungibility` `Borrow` / `Preempt` | `MayStopSearch` |
| ClusterQueue | `status.pendingWorkloadsStatus` | (dropped) |
| ClusterQueue | (dropped) | `spec.concurrentAdmissionPolicy` |
| ClusterQueue, Cohort | `status.fairSharing.admissionFairSharingStatus` | (dropped) |
| LocalQueue | `status.flavorUsage`, `status.flavors` | `status.flavorsUsage`; flavors dropped |
| Workload | `spec.priorityClassName` + `priorityClassSource` | `spec.priorityClassRef{group,kind,name}` |
| Workload | `status.accumulatedPastExexcutionTimeSeconds` | `status.accumulatedPastExecutionTimeSeconds` |
| Workload | topology assignment `domains[{values,count}]` | `slices[...]` (compressed) |
| Workload | (dropped) | `preemptionGates` (spec, status), `podsetSliceRequiredTopologyConstraints` |
| AdmissionCheck | `spec.retryDelayMinutes` | (dropped) |
| MultiKueueCluster | `spec.kubeConfig`, `spec.clusterProfileRef` | the same under `spec.clusterSource` |
| MultiKueueConfig | (dropped) | `spec.quotaManagement` |

Every function here also accepts a partial object (the body of a merge patch or an apply): it
renames what is there and adds nothing that was not asked for; a `null` value (a merge patch's
"delete this") is renamed like any other.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kube_runtime import codec
from kube_runtime.resources import PRIORITY_CLASS
from kueue_domain.api import enums, labels, resources

Obj = dict[str, Any]

GROUP = resources.GROUP
V1BETA1 = resources.VERSION
V1BETA2 = "v1beta2"
VERSIONS = (V1BETA1, V1BETA2)

# v1beta1 spec.priorityClassSource values and the v1beta2 priorityClassRef they map to.
WORKLOAD_PRIORITY_CLASS_SOURCE = labels.PRIORITY_CLASS_SOURCE_WORKLOAD
POD_PRIORITY_CLASS_SOURCE = labels.PRIORITY_CLASS_SOURCE_POD
_SOURCE_TO_REF = {
    WORKLOAD_PRIORITY_CLASS_SOURCE: (GROUP, resources.WORKLOAD_PRIORITY_CLASS.kind),
    POD_PRIORITY_CLASS_SOURCE: (PRIORITY_CLASS.group, PRIORITY_CLASS.kind),
}
_REF_TO_SOURCE = {ref: source for source, ref in _SOURCE_TO_REF.items()}

_MAY_STOP_SEARCH = enums.FLAVOR_FUNGIBILITY_MAY_STOP_SEARCH


class ConversionError(ValueError):
    """An object that cannot be converted; the message says what is wrong with it."""


def _rename(d: Obj | None, old: str, new: str) -> None:
    if isinstance(d, dict) and old in d:
        d[new] = d.pop(old)


def _drop(d: Obj | None, *keys: str) -> None:
    if isinstance(d, dict):
        for key in keys:
            d.pop(key, None)


def _dict(d: Obj | None, key: str) -> Obj | None:
    value = d.get(key) if isinstance(d, dict) else None
    return value if isinstance(value, dict) else None


def _list(d: Obj | None, key: str) -> list[Any]:
    value = d.get(key) if isinstance(d, dict) else None
    return value if isinstance(value, list) else []


# ---------------------------------------------------------------------------------------------
# ClusterQueue, Cohort, LocalQueue


def _cq_to_v1beta2(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None:
        _rename(spec, "cohort", "cohortName")
        if "admissionChecks" in spec:
            checks = spec.pop("admissionChecks")
            if checks:
                spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
        fungibility = _dict(spec, "flavorFungibility")
        if fungibility is not None:
            if fungibility.get("whenCanBorrow") == "Borrow":
                fungibility["whenCanBorrow"] = _MAY_STOP_SEARCH
            if fungibility.get("whenCanPreempt") == "Preempt":
                fungibility["whenCanPreempt"] = _MAY_STOP_SEARCH
    status = _dict(obj, "status")
    _drop(status, "pendingWorkloadsStatus")
    _drop(_dict(status, "fairSharing"), "admissionFairSharingStatus")


def _cq_to_v1beta1(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    _rename(spec, "cohortName", "cohort")
    _drop(spec, "concurrentAdmissionPolicy")


def _cohort_to_v1beta2(obj: Obj) -> None:
    _drop(_dict(_dict(obj, "status"), "fairSharing"), "admissionFairSharingStatus")


def _lq_to_v1beta2(obj: Obj) -> None:
    status = _dict(obj, "status")
    _rename(status, "flavorUsage", "flavorsUsage")
    _drop(status, "flavors")


def _lq_to_v1beta1(obj: Obj) -> None:
    _rename(_dict(obj, "status"), "flavorsUsage", "flavorUsage")


# ---------------------------------------------------------------------------------------------
# Workload


def _wl_to_v1beta2(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None and ("priorityClassName" in spec or "priorityClassSource" in spec):
        name = spec.pop("priorityClassName", None)
        source = spec.pop("priorityClassSource", None)
        ref = _SOURCE_TO_REF.get(source or "")
        if ref is not None and name:
            spec["priorityClassRef"] = {"group": ref[0], "kind": ref[1], "name": name}
        elif name is None and source is None:
            spec["priorityClassRef"] = None  # a merge patch clearing both
        # A name without a known source has no v1beta2 form (upstream drops it too).
    status = _dict(obj, "status")
    _rename(status, "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds")
    for assignment in _list(_dict(status, "admission"), "podSetAssignments"):
        topology = _dict(assignment, "topologyAssignment")
        if topology is not None and "domains" in topology:
            assignment["topologyAssignment"] = topology_to_v1beta2(topology)


def _wl_to_v1beta1(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None:
        _drop(spec, "preemptionGates")
        if "priorityClassRef" in spec:
            ref = spec.pop("priorityClassRef")
            if ref is None:
                spec["priorityClassName"] = None
                spec["priorityClassSource"] = None
            else:
                source = _REF_TO_SOURCE.get((ref.get("group"), ref.get("kind")))
                if source is not None:
                    spec["priorityClassSource"] = source
                    spec["priorityClassName"] = ref.get("name")
        for podset in _list(spec, "podSets"):
            _drop(_dict(podset, "topologyRequest"), "podsetSliceRequiredTopologyConstraints")
    status = _dict(obj, "status")
    _rename(status, "accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds")
    _drop(status, "preemptionGates")
    for assignment in _list(_dict(status, "admission"), "podSetAssignments"):
        topology = _dict(assignment, "topologyAssignment")
        if topology is not None and "slices" in topology:
            assignment["topologyAssignment"] = topology_to_v1beta1(topology)


def _common_prefix(values: list[str]) -> str:
    """The longest string every value starts with, character by character."""
    first = min(values, key=len)
    for i, ch in enumerate(first):
        if any(v[i] != ch for v in values):
            return first[:i]
    return first


def topology_to_v1beta2(topology: Obj) -> Obj:
    """v1beta1 `{levels, domains[{values, count}]}` as one v1beta2 slice: a level whose values are
    all equal is `universal`; otherwise `individual` with the values' common prefix and suffix taken
    out of the roots. Equal counts are `universal` too."""
    levels = list(topology.get("levels") or [])
    domains = list(topology.get("domains") or [])
    out: Obj = {"levels": levels}
    if not domains:
        return out
    per_level: list[Obj] = []
    for i in range(len(levels)):
        values = [str((d.get("values") or [])[i]) for d in domains]
        if len(set(values)) == 1:
            per_level.append({"universal": values[0]})
            continue
        prefix = _common_prefix(values)
        suffix = _common_prefix([v[len(prefix) :][::-1] for v in values])[::-1]
        roots = [v[len(prefix) : len(v) - len(suffix)] for v in values]
        individual: Obj = {"roots": roots}
        if prefix:
            individual["prefix"] = prefix
        if suffix:
            individual["suffix"] = suffix
        per_level.append({"individual": individual})
    counts = [int(d.get("count") or 0) for d in domains]
    pod_counts: Obj = {"universal": counts[0]} if len(set(counts)) == 1 else {"individual": counts}
    out["slices"] = [{"domainCount": len(domains), "valuesPerLevel": per_level, "podCounts": pod_counts}]
    return out


def topology_to_v1beta1(topology: Obj) -> Obj:
    """Every v1beta2 slice expanded to its domains, in order."""
    levels = list(topology.get("levels") or [])
    domains: list[Obj] = []
    for s in topology.get("slices") or []:
        count = int(s.get("domainCount") or 0)
        per_level = s.get("valuesPerLevel") or []
        columns: list[list[str]] = []
        for level in per_level:
            if level.get("universal") is not None:
                columns.append([level["universal"]] * count)
                continue
            individual = level.get("individual") or {}
            roots = individual.get("roots") or []
            if len(roots) != count:
                raise ConversionError(f"a topology slice has {len(roots)} roots for {count} domains")
            prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
            columns.append([f"{prefix}{root}{suffix}" for root in roots])
        pod_counts = s.get("podCounts") or {}
        if pod_counts.get("universal") is not None:
            counts = [int(pod_counts["universal"])] * count
        else:
            counts = [int(c) for c in pod_counts.get("individual") or []]
            if len(counts) != count:
                raise ConversionError(f"a topology slice has {len(counts)} pod counts for {count} domains")
        for i in range(count):
            domains.append({"values": [column[i] for column in columns], "count": counts[i]})
    return {"levels": levels, "domains": domains}


# ---------------------------------------------------------------------------------------------
# AdmissionCheck, MultiKueueCluster, MultiKueueConfig


def _ac_to_v1beta2(obj: Obj) -> None:
    _drop(_dict(obj, "spec"), "retryDelayMinutes")


def _mkc_to_v1beta2(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None or ("kubeConfig" not in spec and "clusterProfileRef" not in spec):
        return
    source: Obj = {}
    kubeconfig = spec.pop("kubeConfig", None)
    if isinstance(kubeconfig, dict) and kubeconfig.get("location"):
        source["kubeConfig"] = kubeconfig
    profile = spec.pop("clusterProfileRef", None)
    if profile is not None:
        source["clusterProfileRef"] = profile
    spec["clusterSource"] = source


def _mkc_to_v1beta1(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is None or "clusterSource" not in spec:
        return
    source = spec.pop("clusterSource") or {}
    if source.get("kubeConfig") is not None:
        spec["kubeConfig"] = source["kubeConfig"]
    if source.get("clusterProfileRef") is not None:
        spec["clusterProfileRef"] = source["clusterProfileRef"]


def _mkconfig_to_v1beta1(obj: Obj) -> None:
    _drop(_dict(obj, "spec"), "quotaManagement")


def _nothing(obj: Obj) -> None:
    return None


_TO_V1BETA2: dict[str, Callable[[Obj], None]] = {
    "ClusterQueue": _cq_to_v1beta2,
    "Cohort": _cohort_to_v1beta2,
    "LocalQueue": _lq_to_v1beta2,
    "Workload": _wl_to_v1beta2,
    "AdmissionCheck": _ac_to_v1beta2,
    "MultiKueueCluster": _mkc_to_v1beta2,
    "MultiKueueConfig": _nothing,
    "ResourceFlavor": _nothing,
    "WorkloadPriorityClass": _nothing,
    "Topology": _nothing,
    "ProvisioningRequestConfig": _nothing,
}
_TO_V1BETA1: dict[str, Callable[[Obj], None]] = {
    "ClusterQueue": _cq_to_v1beta1,
    "Cohort": _nothing,
    "LocalQueue": _lq_to_v1beta1,
    "Workload": _wl_to_v1beta1,
    "AdmissionCheck": _nothing,
    "MultiKueueCluster": _mkc_to_v1beta1,
    "MultiKueueConfig": _mkconfig_to_v1beta1,
    "ResourceFlavor": _nothing,
    "WorkloadPriorityClass": _nothing,
    "Topology": _nothing,
    "ProvisioningRequestConfig": _nothing,
}
KINDS = frozenset(_TO_V1BETA2)


def convert(obj: Obj, kind: str, to_version: str, *, in_place: bool = False) -> Obj:
    """`obj` (a whole object or a partial one of `kind`) in `to_version`. A whole object's
    apiVersion says its version; a partial one without apiVersion is taken to be in the other
    version. Lists (`<Kind>List`) convert item by item."""
    if to_version not in VERSIONS:
        raise ConversionError(f"unknown {GROUP} version {to_version!r}; known: {', '.join(VERSIONS)}")
    if kind not in KINDS:
        raise ConversionError(f"no conversion for kind {kind!r} of {GROUP}")
    target = f"{GROUP}/{to_version}"
    out = obj if in_place else copy.deepcopy(obj)
    if "items" in out and isinstance(out.get("items"), list) and str(out.get("kind", "")).endswith("List"):
        for item in out["items"]:
            convert(item, kind, to_version, in_place=True)
        if "apiVersion" in out:
            out["apiVersion"] = target
        return out
    current = out.get("apiVersion")
    if current == target:
        return out
    if current is not None and current not in (f"{GROUP}/{v}" for v in VERSIONS):
        raise ConversionError(f"cannot convert {kind} from {current!r}: not a version of {GROUP}")
    (_TO_V1BETA2 if to_version == V1BETA2 else _TO_V1BETA1)[kind](out)
    if current is not None:
        out["apiVersion"] = target
    return out


# The client converts Kueue's objects on the wire through this codec (kube_runtime/codec.py);
# kueue_domain/__init__.py imports this module, so every process that knows Kueue has it.
codec.register(codec.GroupCodec(GROUP, VERSIONS, KINDS, convert))
