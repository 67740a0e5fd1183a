"""bench.diff_upstream's runs: one scenario against one engine on a fresh cluster (create, run like
a job integration, wait for quiet) and the outcome of every Workload."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.common import BenchError, Obj, cancel, condition_true, find_condition, say
from bench.diff_scenario import (
    PLURALS,
    Scenario,
    strip_scenario_annotations,
    to_upstream,
    upstream_config_fields,
)
from bench.engine_plan import OURS, UPSTREAM
from bench.engine_procs import agent_engine, ensure_minimalkueue, install_upstream_crds, minimalkueue_engine
from bench.engine_run import clear_reservation, mark_finished
from bench.fleet import Cluster

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
    if condition_true(obj, "Finished"):
        state = "Finished"
    elif condition_true(obj, "Admitted"):
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
    conds = tuple(condition_true(obj, c) for c in ("QuotaReserved", "Admitted", "Evicted", "Finished"))
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
        return to_upstream(obj) if self.shape is UPSTREAM else obj

    def _resource(self, kind: str) -> Any:
        from kueue_domain import api

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
                if find_condition(got, "Active") is None:
                    missing.append(f"{obj['kind']} {meta['name']}")
            if not missing:
                return
            if not self.engine.alive():
                raise BenchError(f"{self.engine.name} exited:\n{self.engine.log_tail()}")
            if self.now() > deadline:
                raise BenchError(f"{self.engine.name} never reported on {', '.join(missing)}")
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
        if condition_true(obj, "Admitted"):
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
        if wl is None or condition_true(wl, "Finished"):
            return None
        try:
            if condition_true(wl, "Evicted") and (wl.get("status") or {}).get("admission"):
                await clear_reservation(self.client, self.shape, wl)
                return None
            runs_for = self.runs_for.get(key)
            since = self.admitted_since.get(key)
            if runs_for is None or since is None or not condition_true(wl, "Admitted"):
                return None
            remaining = runs_for - (self.now() - since)
            if remaining > 0:
                return Result(requeue_after=remaining)
            await mark_finished(self.client, self.shape, wl)
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
            if condition_true(wl, "Finished"):
                continue
            if condition_true(wl, "Evicted") and (wl.get("status") or {}).get("admission"):
                return True
            if self.runs_for.get(key) is not None and condition_true(wl, "Admitted"):
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
                    raise BenchError(f"creating a Workload failed: {creator.exception()!r}")
                if not self.engine.alive():
                    raise BenchError(f"{self.engine.name} exited:\n{self.engine.log_tail()}")
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
        except (BenchError, OSError) as e:
            result.error = str(e)
            say(f"{self.engine.name}: {e}")
        except Exception as e:
            from kube_runtime.client import KubeClientError

            if not isinstance(e, KubeClientError):
                raise
            result.error = f"{type(e).__name__}: {e}"
            say(f"{self.engine.name}: {result.error}")
        finally:
            await cancel(creator)
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
        binary, crds = ensure_minimalkueue()
    cluster = Cluster(run_root / engine, f"{engine} ({scenario.name})", extra_up_args)
    try:
        cluster.up()
        if full_upstream:
            proc = FleetKueue(cluster.run_dir)
            shape = UPSTREAM
        elif engine == "upstream":
            assert binary is not None and crds is not None
            install_upstream_crds(cluster, crds)
            proc = minimalkueue_engine(work_dir, cluster.kubeconfig, binary)
            shape = UPSTREAM
        else:
            proc, _metrics_port = agent_engine(work_dir, cluster.kubeconfig, extra_config=scenario.config)
            shape = OURS
        runner = ScenarioRun(
            scenario, shape, cluster.kubeconfig, proc, quiet_s=args.quiet_seconds, timeout_s=args.timeout
        )
        return asyncio.run(runner.run())
    finally:
        cluster.down(save_logs_to=work_dir)
