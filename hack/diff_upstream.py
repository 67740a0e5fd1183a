#!/usr/bin/env python3
"""Differential runs (issue 10): one scenario against our worker_agent and against upstream Kueue.

A scenario is one multi-document YAML file of plain Kueue v1beta1 objects (docs/differential.md).
For each engine the runner starts a fresh single cluster (hack/bench_engine.py's BenchCluster),
installs that engine's CRDs, creates every object but the Workloads, starts the engine (our
`python -m worker_agent`, or upstream v0.19.2's `minimalkueue` built from its Go module), waits
until the engine has reported on every ClusterQueue and LocalQueue, then creates the Workloads in
file order, `scenario.kueue-federation.io/after` seconds apart. Like a job integration, the runner
marks an admitted Workload Finished after its `scenario.kueue-federation.io/runs-for` seconds and
drops the reservation of an evicted one. Once nothing that matters has changed for a few seconds
it reads every Workload's outcome: state, ClusterQueue, flavor per pod set and resource,
evictions by reason and the order of first admission. It prints the differences, then
`N workloads, M differ`, and exits 0 only when M is 0.

  .venv/bin/python hack/diff_upstream.py [SCENARIO_OR_DIR ...]   (default: tests/scenarios)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(REPO / "hack"))
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    try:
        import bench_engine
    except ImportError:  # not the project's .venv (yaml missing): re-exec with it
        venv_python = REPO / ".venv" / "bin" / "python"
        if Path(sys.executable).resolve() == venv_python.resolve() or not venv_python.exists():
            sys.exit("diff-upstream: run `make venv` first (the project's .venv is missing or incomplete)")
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    bench_engine._bootstrap()
else:
    import bench_engine

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterable  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

Obj = dict[str, Any]

SCENARIO_DIR = REPO / "tests" / "scenarios"
DOC_PATH = REPO / "docs" / "differential.md"
ANNOTATION_AFTER = "scenario.kueue-federation.io/after"
ANNOTATION_RUNS_FOR = "scenario.kueue-federation.io/runs-for"
KUEUE_V1BETA1 = "kueue.x-k8s.io/v1beta1"
CONFIG_V1BETA1 = "config.kueue.x-k8s.io/v1beta1"
# The Configuration fields a scenario may set (for both engines).
SCENARIO_CONFIG_FIELDS = ("fairSharing",)
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


def say(msg: str) -> None:
    print(f"diff-upstream: {msg}", file=sys.stderr, flush=True)


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
    out["apiVersion"] = bench_engine.UPSTREAM.api_version
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


# ==============================================================================================
# Outcomes
# ==============================================================================================


@dataclass
class Outcome:
    state: str  # Pending, Admitted, Finished, Inactive, Missing
    cluster_queue: str
    flavors: str  # "main: cpu=on-demand, memory=on-demand; ..." in pod set order
    evictions: str  # "Preempted/InClusterQueue x1, ..." sorted, or "0"
    first_admitted_s: float | None  # since the first Workload was created, as the runner saw it
    pending: str = "-"  # a Workload pending at the end: its QuotaReserved "reason: message"

    def field(self, name: str) -> str:
        return {
            "state": self.state,
            "clusterQueue": self.cluster_queue,
            "flavors": self.flavors,
            "evictions": self.evictions,
            "pending": self.pending,
        }[name]


def outcome_of(obj: Obj | None, first_admitted_s: float | None) -> Outcome:
    if obj is None:
        return Outcome("Missing", "-", "-", "0", first_admitted_s)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if bench_engine.condition_true(obj, "Finished"):
        state = "Finished"
    elif bench_engine.condition_true(obj, "Admitted"):
        state = "Admitted"
    elif spec.get("active") is False:
        state = "Inactive"
    else:
        state = "Pending"
    admission = status.get("admission") or {}
    podsets = []
    for psa in admission.get("podSetAssignments") or []:
        flavors = ", ".join(f"{r}={f}" for r, f in sorted((psa.get("flavors") or {}).items()))
        podsets.append(f"{psa.get('name')}: {flavors}")
    evictions = []
    for entry in (status.get("schedulingStats") or {}).get("evictions") or []:
        cause = entry.get("underlyingCause") or ""
        evictions.append(f"{entry.get('reason')}{'/' + cause if cause else ''} x{entry.get('count', 0)}")
    return Outcome(
        state,
        admission.get("clusterQueue") or "-",
        "; ".join(podsets) or "-",
        ", ".join(sorted(evictions)) or "0",
        first_admitted_s,
        pending_reason(obj) if state == "Pending" else "-",
    )


def pending_reason(obj: Obj) -> str:
    """`<reason>: <message>` of QuotaReserved=False: what dashboards and `kubectl describe` show."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "QuotaReserved" and cond.get("status") == "False":
            return f"{cond.get('reason', '')}: {cond.get('message', '')}"
    return "-"


def signature(obj: Obj) -> tuple[Any, ...]:
    """What the runner waits to see settle: conditions that matter, admission, eviction counts."""
    status = obj.get("status") or {}
    conds = tuple(
        bench_engine.condition_true(obj, c) for c in ("QuotaReserved", "Admitted", "Evicted", "Finished")
    )
    return (
        conds,
        json.dumps(status.get("admission"), sort_keys=True),
        json.dumps(status.get("schedulingStats"), sort_keys=True),
        (obj.get("spec") or {}).get("active"),
        pending_reason(obj),
    )


@dataclass
class EngineResult:
    engine: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    error: str | None = None
    timed_out: bool = False
    wall_s: float | None = None
    engine_cpu_s: float | None = None
    workload_updates: int = 0  # Workload watch events after creation: status write volume
    # Per Workload, every change of its conditions' status/reason/message, for finding why two differ.
    history: dict[str, list[tuple[float, str]]] = field(default_factory=dict)

    def to_dict(self) -> Obj:
        return {**asdict(self), "outcomes": {k: asdict(v) for k, v in self.outcomes.items()}}


class ScenarioRun:
    """One scenario against one engine on one fresh cluster: create, run like a job integration,
    wait for quiet, read outcomes."""

    def __init__(
        self,
        scenario: Scenario,
        shape: Any,
        kubeconfig: Path,
        engine: Any,
        *,
        quiet_s: float,
        timeout_s: float,
        clock: Any = time.monotonic,
    ) -> None:
        self.scenario = scenario
        self.shape = shape
        self.kubeconfig = kubeconfig
        self.engine = engine
        self.quiet_s = quiet_s
        self.timeout_s = timeout_s
        self.now = clock
        self.runs_for = {w.key: w.runs_for_s for w in scenario.workloads}
        self.expected = set(self.runs_for)
        self.created: set[str] = set()
        self.t0: float | None = None
        self.first_admitted: dict[str, float] = {}
        self.admitted_since: dict[str, float] = {}
        self.signatures: dict[str, tuple[Any, ...]] = {}
        self.last_change = self.now()
        self.updates = 0
        self.history: dict[str, list[tuple[float, str]]] = {}

    def _convert(self, obj: Obj) -> Obj:
        obj = strip_scenario_annotations(obj) if obj["kind"] == "Workload" else obj
        return to_upstream(obj) if self.shape is bench_engine.UPSTREAM else obj

    def _resource(self, kind: str) -> Any:
        from kube_runtime import api

        if kind == "Namespace":
            return api.NAMESPACE
        return self.shape.resource(PLURALS[kind], kind, kind in ("LocalQueue", "Workload"))

    async def _create_setup(self) -> None:
        from kube_runtime.client import AlreadyExists

        for obj in self.scenario.setup:
            try:
                await self.client.create(self._resource(obj["kind"]), self._convert(obj))
            except AlreadyExists:
                if obj["kind"] != "Namespace":
                    raise

    async def _wait_queues_reported(self, seconds: float = 60) -> None:
        """Every ClusterQueue and LocalQueue has an Active condition: the engine has seen them all."""
        queues = [o for o in self.scenario.setup if o["kind"] in ("ClusterQueue", "LocalQueue")]
        deadline = self.now() + seconds
        while True:
            missing = []
            for obj in queues:
                meta = obj["metadata"]
                got = await self.client.get(self._resource(obj["kind"]), meta["name"], meta.get("namespace"))
                if bench_engine.find_condition(got, "Active") is None:
                    missing.append(f"{obj['kind']} {meta['name']}")
            if not missing:
                return
            if not self.engine.alive():
                raise bench_engine.BenchError(f"{self.engine.name} exited:\n{self.engine.log_tail()}")
            if self.now() > deadline:
                raise bench_engine.BenchError(f"{self.engine.name} never reported on {', '.join(missing)}")
            await asyncio.sleep(0.2)

    def _on_workload(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if key not in self.expected:
            return
        now = self.now()
        self.updates += 1
        sig = signature(obj)
        if self.signatures.get(key) != sig:
            self.signatures[key] = sig
            self.last_change = now
        conds = "; ".join(
            f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}"
            for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("type") in ("QuotaReserved", "Admitted", "Evicted", "Preempted", "Finished")
        )
        trail = self.history.setdefault(key, [])
        if not trail or trail[-1][1] != conds:
            trail.append((round(now - (self.t0 or now), 3), conds))
        if bench_engine.condition_true(obj, "Admitted"):
            self.admitted_since.setdefault(key, now)
            if self.t0 is not None:
                self.first_admitted.setdefault(key, now - self.t0)
        else:
            self.admitted_since.pop(key, None)
        self.controller.enqueue(key)

    async def reconcile(self, key: str) -> Any:
        from kube_runtime.client import Conflict, NotFound
        from kube_runtime.controller import Result

        wl = self.informer.get(key)
        if wl is None or bench_engine.condition_true(wl, "Finished"):
            return None
        try:
            if bench_engine.condition_true(wl, "Evicted") and (wl.get("status") or {}).get("admission"):
                await bench_engine.clear_reservation(self.client, self.shape, wl)
                return None
            runs_for = self.runs_for.get(key)
            since = self.admitted_since.get(key)
            if runs_for is None or since is None or not bench_engine.condition_true(wl, "Admitted"):
                return None
            remaining = runs_for - (self.now() - since)
            if remaining > 0:
                return Result(requeue_after=remaining)
            await bench_engine.mark_finished(self.client, self.shape, wl)
        except NotFound:
            return None
        except Conflict:
            return Result(requeue_after=0.05)
        return None

    def busy(self) -> bool:
        """Something the runner still has to do: a running Workload to finish, an eviction to clear."""
        for key in self.created:
            wl = self.informer.get(key)
            if wl is None:
                return True
            if bench_engine.condition_true(wl, "Finished"):
                continue
            if bench_engine.condition_true(wl, "Evicted") and (wl.get("status") or {}).get("admission"):
                return True
            if self.runs_for.get(key) is not None and bench_engine.condition_true(wl, "Admitted"):
                return True
        return False

    async def _create_workloads(self) -> None:
        for w in self.scenario.workloads:
            await asyncio.sleep(w.after_s)
            await self.client.create(self._resource("Workload"), self._convert(w.obj))
            if self.t0 is None:
                self.t0 = self.now()
            self.created.add(w.key)
            self.last_change = self.now()

    async def run(self) -> EngineResult:
        from kube_runtime.client import KubeClient
        from kube_runtime.controller import Controller
        from kube_runtime.informer import Informer

        result = EngineResult(self.engine.name)
        self.client = await KubeClient.from_kubeconfig_file(str(self.kubeconfig), qps=1000, burst=2000)
        self.informer = Informer(self.client, self.shape.workloads, name="diff-workloads")
        self.controller = Controller("diff-runner", self.reconcile, concurrency=5)
        self.informer.add_handler(
            on_add=self._on_workload, on_update=lambda _old, new: self._on_workload(new)
        )
        creator: asyncio.Task[None] | None = None
        try:
            await self._create_setup()
            self.engine.start()
            await self._wait_queues_reported()
            self.informer.start()
            self.controller.start()
            async with asyncio.timeout(60):
                await self.informer.wait_synced()
            started = self.now()
            creator = asyncio.create_task(self._create_workloads(), name="creator")
            while True:
                self.engine.sample()
                if creator.done() and creator.exception() is not None:
                    raise bench_engine.BenchError(f"creating a Workload failed: {creator.exception()!r}")
                if not self.engine.alive():
                    raise bench_engine.BenchError(f"{self.engine.name} exited:\n{self.engine.log_tail()}")
                if creator.done() and not self.busy() and self.now() - self.last_change >= self.quiet_s:
                    break
                if self.now() - started > self.timeout_s:
                    result.timed_out = True
                    say(f"{self.engine.name}: no quiet within {self.timeout_s:.0f}s; reading outcomes anyway")
                    break
                await asyncio.sleep(0.1)
            result.wall_s = self.now() - started
            self.engine.sample()
            result.engine_cpu_s = self.engine.cpu_s
            result.workload_updates = self.updates
            result.history = self.history
            for w in self.scenario.workloads:
                result.outcomes[w.key] = outcome_of(self.informer.get(w.key), self.first_admitted.get(w.key))
        except (bench_engine.BenchError, OSError) as e:
            result.error = str(e)
            say(f"{self.engine.name}: {e}")
        except Exception as e:
            from kube_runtime.client import KubeClientError

            if not isinstance(e, KubeClientError):
                raise
            result.error = f"{type(e).__name__}: {e}"
            say(f"{self.engine.name}: {result.error}")
        finally:
            if creator is not None and not creator.done():
                creator.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await creator
            await asyncio.to_thread(self.engine.stop)
            for step in (self.controller.stop, self.informer.stop):
                with contextlib.suppress(Exception):
                    await step()
            await self.client.close()
        return result


class FleetKueue:
    """Upstream's full `kueue` binary, which `localfleet up --upstream-kueue manager` starts and
    supervises (minimalkueue has no fair sharing and takes no configuration); the runner only reads
    its log."""

    name = "kueue"
    cpu_s: float | None = None
    peak_rss_mib: float | None = None

    def __init__(self, run_dir: Path) -> None:
        self.log_path = run_dir / "manager" / "upstream-kueue.log"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass  # stopped with its cluster

    def sample(self) -> None:
        pass

    def alive(self) -> bool:
        return True  # the fleet's supervisor restarts it; a dead one never reports on the queues

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"


def run_engine(
    engine: str, scenario: Scenario, args: argparse.Namespace, run_root: Path, work_dir: Path
) -> EngineResult:
    """A fresh cluster for one engine and one scenario, always torn down."""
    binary = crds = None
    fields = upstream_config_fields(scenario.config) if engine == "upstream" else {}
    full_upstream = bool(fields)
    extra_up_args: list[str] = []
    if full_upstream:
        fields_file = work_dir / "upstream-config-fields.yaml"
        fields_file.write_text(yaml.safe_dump(fields))
        extra_up_args = ["--upstream-kueue", "manager", "--upstream-kueue-config", str(fields_file)]
    elif engine == "upstream":
        binary, crds = bench_engine.ensure_minimalkueue()
    cluster = bench_engine.BenchCluster(run_root / engine, f"{engine} ({scenario.name})", extra_up_args)
    try:
        cluster.up()
        if full_upstream:
            proc = FleetKueue(cluster.run_dir)
            shape = bench_engine.UPSTREAM
        elif engine == "upstream":
            assert binary is not None and crds is not None
            bench_engine.install_upstream_crds(cluster, crds)
            proc = bench_engine.minimalkueue_engine(work_dir, cluster.kubeconfig, binary)
            shape = bench_engine.UPSTREAM
        else:
            proc, _metrics_port = bench_engine.agent_engine(
                work_dir, cluster.kubeconfig, extra_config=scenario.config
            )
            shape = bench_engine.OURS
        runner = ScenarioRun(
            scenario, shape, cluster.kubeconfig, proc, quiet_s=args.quiet_seconds, timeout_s=args.timeout
        )
        return asyncio.run(runner.run())
    finally:
        cluster.down()


# ==============================================================================================
# Comparison
# ==============================================================================================


@dataclass(frozen=True)
class Difference:
    scenario: str
    workload: str
    field: str
    ours: str
    upstream: str
    listed: str | None = None  # the reason given in docs/differential.md


def _order_label(outcome: Outcome, rank: dict[str, int], key: str) -> str:
    if outcome.first_admitted_s is None:
        return "never admitted"
    return f"#{rank[key]} at {outcome.first_admitted_s:.1f}s"


def order_inversions(
    ours: dict[str, Outcome], upstream: dict[str, Outcome], group: Any = lambda _key: ""
) -> set[str]:
    """Workloads whose first admission is clearly before another's (of the same group: scenario)
    on one engine, clearly after on the other (both gaps above ORDER_TOLERANCE_S)."""
    both = [
        k
        for k, o in ours.items()
        if o.first_admitted_s is not None and k in upstream and upstream[k].first_admitted_s is not None
    ]
    flagged: set[str] = set()
    for i, a in enumerate(both):
        for b in both[i + 1 :]:
            if group(a) != group(b):
                continue
            da = ours[b].first_admitted_s - ours[a].first_admitted_s  # type: ignore[operator]
            du = upstream[b].first_admitted_s - upstream[a].first_admitted_s  # type: ignore[operator]
            if (da > ORDER_TOLERANCE_S and du < -ORDER_TOLERANCE_S) or (
                da < -ORDER_TOLERANCE_S and du > ORDER_TOLERANCE_S
            ):
                flagged.update((a, b))
    return flagged


def _ranks(outcomes: dict[str, Outcome]) -> dict[str, int]:
    admitted = sorted((o.first_admitted_s, k) for k, o in outcomes.items() if o.first_admitted_s is not None)
    return {k: i for i, (_t, k) in enumerate(admitted, 1)}


def compare(
    scenario: Scenario, ours: EngineResult, upstream: EngineResult, listed: dict[tuple[str, str, str], str]
) -> list[Difference]:
    diffs: list[Difference] = []
    inversions = order_inversions(ours.outcomes, upstream.outcomes, scenario.origin_of)
    ours_rank, upstream_rank = _ranks(ours.outcomes), _ranks(upstream.outcomes)
    for key, mine in ours.outcomes.items():
        name_of_scenario = scenario.origin_of(key)
        theirs = upstream.outcomes.get(key)
        if theirs is None:
            continue
        for name in FIELDS:
            if name == "order":
                if key not in inversions:
                    continue
                a, b = _order_label(mine, ours_rank, key), _order_label(theirs, upstream_rank, key)
            else:
                a, b = mine.field(name), theirs.field(name)
                if a == b:
                    continue
            why = listed.get((name_of_scenario, key, name)) or listed.get((name_of_scenario, "*", name))
            diffs.append(Difference(name_of_scenario, key, name, a, b, why))
    return diffs


def known_differences(doc: Path = DOC_PATH) -> dict[tuple[str, str, str], str]:
    """Rows `| scenario.yaml | namespace/workload or * | field | why |` of the doc's
    "Known differences" table."""
    listed: dict[tuple[str, str, str], str] = {}
    try:
        text = doc.read_text()
    except OSError:
        return listed
    section = text.split("## Known differences", 1)[-1] if "## Known differences" in text else ""
    section = section.split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].endswith(".yaml") and cells[2] in FIELDS:
            listed[(cells[0], cells[1], cells[2])] = cells[3]
    return listed


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def format_differences(diffs: list[Difference]) -> str:
    rows = [["SCENARIO", "WORKLOAD", "FIELD", "OURS", "UPSTREAM", "LISTED"]]
    for d in diffs:
        rows.append([d.scenario, d.workload, d.field, d.ours, d.upstream, "yes" if d.listed else ""])
    return format_table(rows)


def format_outcomes(scenario: Scenario, results: dict[str, EngineResult]) -> str:
    rows = [["WORKLOAD", "ENGINE", "STATE", "CLUSTERQUEUE", "FLAVORS", "EVICTIONS", "ADMITTED AT"]]
    for w in scenario.workloads:
        for engine, result in results.items():
            o = result.outcomes.get(w.key)
            if o is None:
                continue
            at = "-" if o.first_admitted_s is None else f"{o.first_admitted_s:.1f}s"
            rows.append([w.key, engine, o.state, o.cluster_queue, o.flavors, o.evictions, at])
    return format_table(rows)


# ==============================================================================================
# main
# ==============================================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="diff_upstream", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("scenarios", nargs="*", help="scenario files or directories (default: tests/scenarios)")
    p.add_argument("--engine", choices=("both", "ours", "upstream"), default="both")
    p.add_argument(
        "--quiet-seconds", type=float, default=4.0, help="no Workload change this long (default 4)"
    )
    p.add_argument(
        "--timeout", type=float, default=180.0, help="seconds per scenario and engine (default 180)"
    )
    p.add_argument("--outcomes", action="store_true", help="also print every Workload's outcome per engine")
    p.add_argument(
        "--allow-listed",
        action="store_true",
        help="exit 0 when every difference is listed in docs/differential.md",
    )
    p.add_argument(
        "--together",
        action="store_true",
        help="run the scenarios as one, on one fresh cluster per engine (faster; their names must not clash)",
    )
    p.add_argument("--json", metavar="PATH", help="write outcomes and differences as JSON")
    p.add_argument("--work-dir", help="engine logs (default /tmp/kueue-federation-diff/<time>)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kube_runtime.logging import setup_logging

    setup_logging("warning")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    run_root = shm / f"kueue-federation-diff-{os.getpid()}"
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work_root = Path(args.work_dir or f"/tmp/kueue-federation-diff/{stamp}")
    engines = ["ours", "upstream"] if args.engine == "both" else [args.engine]
    listed = known_differences()
    all_diffs: list[Difference] = []
    report: Obj = {"scenarios": {}}
    total = 0
    failed = False
    try:
        scenarios = [load_scenario(p) for p in scenario_paths(args.scenarios or [str(SCENARIO_DIR)])]
        if args.together and len(scenarios) > 1:
            scenarios = group_by_config(scenarios)
        if "upstream" in engines:
            bench_engine.ensure_minimalkueue()
        for scenario in scenarios:
            say(f"scenario {scenario.name}: {len(scenario.workloads)} workloads")
            work_dir = work_root / scenario.path.stem
            work_dir.mkdir(parents=True, exist_ok=True)
            results: dict[str, EngineResult] = {}
            for engine in engines:
                results[engine] = run_engine(engine, scenario, args, run_root, work_dir)
                r = results[engine]
                cpu = "n/a" if r.engine_cpu_s is None else f"{r.engine_cpu_s:.2f}s"
                how = "error" if r.error else "timed out" if r.timed_out else "quiet"
                say(
                    f"{scenario.name} on {engine}: {how}"
                    f" after {r.wall_s or 0:.1f}s, engine CPU {cpu}, {r.workload_updates} Workload updates"
                )
                failed = failed or r.error is not None or r.timed_out
            if args.outcomes or len(engines) == 1:
                print(f"== {scenario.name}", flush=True)
                print(format_outcomes(scenario, results), flush=True)
            total += len(scenario.workloads)
            diffs: list[Difference] = []
            if len(engines) == 2:
                diffs = compare(scenario, results["ours"], results["upstream"], listed)
                all_diffs.extend(diffs)
            report["scenarios"][scenario.name] = {
                "results": {k: v.to_dict() for k, v in results.items()},
                "differences": [asdict(d) for d in diffs],
            }
        differing = {(d.scenario, d.workload) for d in all_diffs}
        unlisted = {(d.scenario, d.workload) for d in all_diffs if not d.listed}
        if all_diffs:
            print(format_differences(all_diffs), flush=True)
        report["workloads"], report["differ"], report["unlisted"] = total, len(differing), len(unlisted)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        say(f"engine logs in {work_root}")
        if len(engines) == 2:
            suffix = (
                f" ({len(differing) - len(unlisted)} listed in docs/differential.md)" if differing else ""
            )
            print(f"{total} workloads, {len(differing)} differ{suffix}", flush=True)
        if failed:
            return 1
        return 0 if not (unlisted if args.allow_listed else differing) else 1
    except ScenarioError as e:
        say(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        say("interrupted; clusters and engine processes were stopped")
        return 130
    except (bench_engine.BenchError, subprocess.SubprocessError) as e:
        say(f"error: {e}")
        return 1
    finally:
        with contextlib.suppress(OSError):
            run_root.rmdir()


if __name__ == "__main__":
    sys.exit(main())
