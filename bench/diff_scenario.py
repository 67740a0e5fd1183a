"""bench.diff_upstream's scenarios: load a multi-document YAML file of Kueue v1beta1 objects (setup
objects, timed Workloads, a Configuration), group and merge them, and convert objects to upstream's
v1beta2 form."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.common import REPO, Obj
from bench.engine_plan import UPSTREAM

SCENARIO_DIR = REPO / "tests" / "scenarios"
DOC_PATH = REPO / "docs" / "differential.md"
ANNOTATION_AFTER = "scenario.kueue-federation.io/after"
ANNOTATION_RUNS_FOR = "scenario.kueue-federation.io/runs-for"
KUEUE_V1BETA1 = "kueue.x-k8s.io/v1beta1"
CONFIG_V1BETA1 = "config.kueue.x-k8s.io/v1beta1"
# The Configuration fields a scenario may set (for both engines).
SCENARIO_CONFIG_FIELDS = ("fairSharing", "admissionFairSharing")
FAIR_SHARING_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
# Created in this order, whatever their order in the file (a LocalQueue needs its Namespace).
SETUP_KINDS = ("Namespace", "WorkloadPriorityClass", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
PLURALS = {
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Workload": "workloads",
}
FIELDS = ("state", "clusterQueue", "flavors", "evictions", "pending", "order")
# Two first admissions closer than this are not ordered: the engines' latencies differ.
ORDER_TOLERANCE_S = 1.0


class ScenarioError(Exception):
    pass


# ==============================================================================================
# Scenarios
# ==============================================================================================


@dataclass
class ScenarioWorkload:
    obj: Obj
    after_s: float
    runs_for_s: float | None

    @property
    def key(self) -> str:
        meta = self.obj["metadata"]
        return f"{meta['namespace']}/{meta['name']}"


@dataclass
class Scenario:
    path: Path
    setup: list[Obj]
    workloads: list[ScenarioWorkload]
    # Workload key -> the scenario it came from, when several scenarios run together.
    origin: dict[str, str] = field(default_factory=dict)
    # Configuration fields for both engines (config.kueue.x-k8s.io/v1beta1 form), e.g. fairSharing.
    config: Obj = field(default_factory=dict)

    @property
    def fair_sharing(self) -> bool:
        return bool((self.config.get("fairSharing") or {}).get("enable"))

    @property
    def name(self) -> str:
        return scenario_name(self.path)

    def origin_of(self, key: str) -> str:
        return self.origin.get(key, self.name)


def scenario_name(path: Path) -> str:
    try:
        return str(path.relative_to(SCENARIO_DIR))
    except ValueError:
        return str(path)


def group_by_config(scenarios: list[Scenario]) -> list[Scenario]:
    """`--together`: one merged run per distinct Configuration (fair sharing changes every decision,
    so scenarios written without it never run with it)."""
    groups: dict[str, list[Scenario]] = {}
    for sc in scenarios:
        groups.setdefault(json.dumps(sc.config, sort_keys=True), []).append(sc)
    if len(groups) == 1:
        return [merge_scenarios(scenarios)]
    return [merge_scenarios(group, f"together-{i}") for i, group in enumerate(groups.values(), 1)]


def merge_scenarios(scenarios: list[Scenario], name: str = "together") -> Scenario:
    """Several scenarios as one run (`--together`): setup objects they share must be identical,
    Workloads follow each other in the given order."""
    setup: dict[tuple[str, str, str], Obj] = {}
    configs = {json.dumps(sc.config, sort_keys=True) for sc in scenarios}
    if len(configs) > 1:
        raise ScenarioError("scenarios run together must have the same Configuration")
    merged = Scenario(Path(name), [], [], config=scenarios[0].config if scenarios else {})
    for sc in scenarios:
        for obj in sc.setup:
            meta = obj["metadata"]
            ident = (obj["kind"], meta.get("namespace", ""), meta["name"])
            if ident in setup and setup[ident] != obj:
                raise ScenarioError(
                    f"{sc.name}: {obj['kind']} {meta['name']} differs from another scenario's; "
                    "scenarios run together must not share names"
                )
            setup.setdefault(ident, obj)
        for w in sc.workloads:
            if w.key in merged.origin:
                raise ScenarioError(f"{sc.name}: Workload {w.key} also in {merged.origin[w.key]}")
            merged.origin[w.key] = sc.name
            merged.workloads.append(w)
    merged.setup = sorted(setup.values(), key=lambda o: SETUP_KINDS.index(o["kind"]))
    return merged


def _seconds(obj: Obj, annotation: str) -> float | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ScenarioError(f"annotation {annotation}: {value!r} is not a number of seconds") from None
    if seconds < 0:
        raise ScenarioError(f"annotation {annotation}: {value!r} is negative")
    return seconds


def scenario_config(doc: Obj, where: str) -> Obj:
    """A scenario's Configuration document: only SCENARIO_CONFIG_FIELDS, checked."""
    if doc.get("apiVersion") != CONFIG_V1BETA1:
        got = doc.get("apiVersion")
        raise ScenarioError(f"{where}: a Configuration must be {CONFIG_V1BETA1} (got {got})")
    extra = sorted(set(doc) - {"apiVersion", "kind", *SCENARIO_CONFIG_FIELDS})
    if extra:
        raise ScenarioError(
            f"{where}: Configuration field(s) {', '.join(extra)} not supported in a scenario "
            f"(only {', '.join(SCENARIO_CONFIG_FIELDS)})"
        )
    fair = doc.get("fairSharing")
    if fair is not None:
        if not isinstance(fair, dict) or not isinstance(fair.get("enable", False), bool):
            raise ScenarioError(f"{where}: fairSharing must be a mapping with a boolean enable")
        strategies = fair.get("preemptionStrategies")
        if strategies is not None and (
            not isinstance(strategies, list) or any(s not in FAIR_SHARING_STRATEGIES for s in strategies)
        ):
            allowed = ", ".join(FAIR_SHARING_STRATEGIES)
            raise ScenarioError(f"{where}: fairSharing.preemptionStrategies must be a list of {allowed}")
    afs = doc.get("admissionFairSharing")
    if afs is not None and (
        not isinstance(afs, dict)
        or set(afs) - {"usageHalfLifeTime", "usageSamplingInterval", "resourceWeights"}
    ):
        raise ScenarioError(
            f"{where}: admissionFairSharing must be a mapping of usageHalfLifeTime, usageSamplingInterval "
            "and resourceWeights"
        )
    return {k: doc[k] for k in SCENARIO_CONFIG_FIELDS if k in doc}


def upstream_config_fields(config: Obj) -> Obj:
    """A scenario's Configuration fields in upstream's config.kueue.x-k8s.io/v1beta2 form: fair sharing
    is on when `fairSharing` is present there (v1beta2 dropped `enable`)."""
    fields: Obj = {}
    fair = config.get("fairSharing") or {}
    if fair.get("enable"):
        fields["fairSharing"] = {
            "preemptionStrategies": list(
                fair.get("preemptionStrategies") or ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
            )
        }
    if config.get("admissionFairSharing") is not None:  # the same shape in v1beta2
        fields["admissionFairSharing"] = dict(config["admissionFairSharing"])
    return fields


def load_scenario(path: Path) -> Scenario:
    """Validate and split one scenario file: setup objects by kind, Workloads in file order."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as e:
        raise ScenarioError(f"{path}: {e}") from e
    setup: list[Obj] = []
    workloads: list[ScenarioWorkload] = []
    config: Obj | None = None
    for i, doc in enumerate(docs, 1):
        where = f"{path}: document {i}"
        kind, version = doc.get("kind"), doc.get("apiVersion")
        if kind == "Configuration":
            if config is not None:
                raise ScenarioError(f"{where}: a second Configuration")
            config = scenario_config(doc, where)
            continue
        meta = doc.get("metadata") or {}
        if not meta.get("name"):
            raise ScenarioError(f"{where}: metadata.name is required")
        if kind == "Namespace":
            if version != "v1":
                raise ScenarioError(f"{where}: a Namespace is apiVersion v1")
        elif kind in PLURALS:
            if version != KUEUE_V1BETA1:
                raise ScenarioError(f"{where}: {kind} must be {KUEUE_V1BETA1} (got {version})")
        else:
            raise ScenarioError(
                f"{where}: kind {kind!r} is not one of Namespace, {', '.join(PLURALS)}, Configuration"
            )
        if kind in ("LocalQueue", "Workload") and not meta.get("namespace"):
            raise ScenarioError(f"{where}: a {kind} needs metadata.namespace")
        if kind == "Workload":
            try:
                workloads.append(
                    ScenarioWorkload(
                        doc, _seconds(doc, ANNOTATION_AFTER) or 0.0, _seconds(doc, ANNOTATION_RUNS_FOR)
                    )
                )
            except ScenarioError as e:
                raise ScenarioError(f"{where}: {e}") from None
        else:
            setup.append(doc)
    if not workloads:
        raise ScenarioError(f"{path}: no Workload")
    keys = [w.key for w in workloads]
    if len(set(keys)) != len(keys):
        raise ScenarioError(f"{path}: two Workloads share a namespace/name")
    setup.sort(key=lambda o: SETUP_KINDS.index(o["kind"]))
    return Scenario(path, setup, workloads, config=config or {})


def scenario_paths(args: Iterable[str]) -> list[Path]:
    """Files as given; a directory stands for every *.yaml under it (recursively), sorted."""
    paths: list[Path] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            paths.extend(sorted(p.rglob("*.yaml")))
        elif p.is_file():
            paths.append(p)
        else:
            raise ScenarioError(f"{arg}: no such scenario file or directory")
    return [p.resolve() for p in paths]


def to_upstream(obj: Obj) -> Obj:
    """A v1beta1 object in upstream's storage version (v1beta2): upstream's CRDs convert nothing
    without their webhook, so the fields that were renamed are renamed here, as its conversion does."""
    if obj.get("apiVersion") != KUEUE_V1BETA1:
        return obj
    out = json.loads(json.dumps(obj))
    out["apiVersion"] = UPSTREAM.api_version
    spec = out.get("spec") or {}
    if out["kind"] == "ClusterQueue":
        if "cohort" in spec:
            spec["cohortName"] = spec.pop("cohort")
        checks = spec.pop("admissionChecks", None)
        if checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
        fungibility = spec.get("flavorFungibility") or {}
        for key, old in (("whenCanBorrow", "Borrow"), ("whenCanPreempt", "Preempt")):
            if fungibility.get(key) == old:
                fungibility[key] = "MayStopSearch"
    elif out["kind"] == "Workload":
        name = spec.pop("priorityClassName", None)
        source = spec.pop("priorityClassSource", None)
        if name and source == "kueue.x-k8s.io/workloadpriorityclass":
            spec["priorityClassRef"] = {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": name,
            }
        elif name and source == "scheduling.k8s.io/priorityclass":
            spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}
    return out


def strip_scenario_annotations(obj: Obj) -> Obj:
    out = json.loads(json.dumps(obj))
    annotations = (out.get("metadata") or {}).get("annotations") or {}
    for key in (ANNOTATION_AFTER, ANNOTATION_RUNS_FOR):
        annotations.pop(key, None)
    if not annotations:
        out["metadata"].pop("annotations", None)
    return out
