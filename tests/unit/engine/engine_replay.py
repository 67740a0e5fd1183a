"""A discrete-event replay of a differential scenario (docs/differential.md) on the pure engine.

It drives the engine as `worker_agent/admission/` does, on a virtual clock: Workloads are
queued at their creation time; a cycle follows immediately after progress and backs off to 10 ms
otherwise; an admission is written `write_s` after its cycle; the runner marks an admitted Workload
Finished after its `runs-for`, and clears an evicted one's reservation `clear_s` after the eviction
is written, which puts it back in its queue; both request an inadmissible flush, batched by a
`RequeueBatcher`. The latencies are fixed, so a replay is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from worker_agent.engine import (
    Admit,
    Preempt,
    QueueManager,
    RequeueBatcher,
    Scheduler,
    SchedulerConfig,
    Snapshot,
    WorkloadInfo,
    requeue_scope,
)

AFTER = "scenario.kueue-federation.io/after"
RUNS_FOR = "scenario.kueue-federation.io/runs-for"


@dataclass
class Replay:
    evictions: Counter[str] = field(default_factory=Counter)
    admitted_at: dict[str, float] = field(default_factory=dict)  # first admission
    preemptions: list[tuple[float, str, str]] = field(default_factory=list)  # (time, victim, preemptor)
    flushes: list[float] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)


def replay(
    docs: list[dict[str, Any]],
    *,
    batcher: RequeueBatcher | None = None,
    write_s: float = 0.01,
    clear_s: float = 0.02,
    cycle_s: float = 0.002,
    until_s: float = 120.0,
    write_qps: float | None = None,
    finish_lag_s: float = 0.0,
) -> Replay:
    cqs = [d for d in docs if d["kind"] == "ClusterQueue"]
    flavors = [d for d in docs if d["kind"] == "ResourceFlavor"]
    cohorts = [d for d in docs if d["kind"] == "Cohort"]
    lq_cq = {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": d["spec"]["clusterQueue"]
        for d in docs
        if d["kind"] == "LocalQueue"
    }
    snapshot = Snapshot.from_objects(cluster_queues=cqs, resource_flavors=flavors, cohorts=cohorts)
    queues = QueueManager()
    for cq in cqs:
        queues.ensure(cq["metadata"]["name"], cq["spec"].get("queueingStrategy"))
    scheduler = Scheduler(snapshot, queues, SchedulerConfig())
    batcher = batcher or RequeueBatcher()
    out = Replay()

    events: list[tuple[float, int, str, Any]] = []
    seq = itertools.count()

    def at(t: float, kind: str, data: Any = None) -> None:
        heapq.heappush(events, (t, next(seq), kind, data))

    objs: dict[str, dict[str, Any]] = {}
    runs_for: dict[str, float | None] = {}
    t = 0.0
    for i, doc in enumerate(d for d in docs if d["kind"] == "Workload"):
        obj = yaml.safe_load(yaml.safe_dump(doc))
        annotations = obj["metadata"].pop("annotations", None) or {}
        t += float(annotations.get(AFTER, 0))
        obj["metadata"]["uid"] = f"uid-{i:05d}"
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        runs_for[key] = float(annotations[RUNS_FOR]) if RUNS_FOR in annotations else None
        at(t, "create", (key, obj))

    state: dict[str, str] = {}  # pending, admitted, evicting, finished
    generation: Counter[str] = Counter()
    cycle_armed = False
    # With `write_qps`, the engine's writes (admissions and evictions) share one budget, in decision
    # order, as the agent's client limiter does: a write lands `write_s` after its turn.
    next_turn = 0.0

    def write_lands(now: float) -> float:
        nonlocal next_turn
        if write_qps is None:
            return now + write_s
        next_turn = max(now, next_turn + 1.0 / write_qps)
        return next_turn + write_s

    def cluster_queue(key: str) -> str:
        obj = objs[key]
        return lq_cq[f"{obj['metadata']['namespace']}/{obj['spec']['queueName']}"]

    def queue(key: str, now: float) -> None:
        queues.push(WorkloadInfo.from_dict(objs[key], cluster_queue=cluster_queue(key)), now)

    def request_flush(cq: str, now: float) -> None:
        scope = requeue_scope(snapshot, cq)
        due = batcher.request(scope, cq, now)
        if due is not None:
            at(due, "flush", scope)

    at(0.0, "cycle")
    cycle_armed = True
    backoff = 0.001
    while events:
        now, _, kind, data = heapq.heappop(events)
        if now > until_s:
            break
        if kind == "create":
            key, obj = data
            obj["metadata"]["creationTimestamp"] = now
            objs[key] = obj
            state[key] = "pending"
            queue(key, now)
        elif kind == "flush":
            out.flushes.append(now)
            names = set()
            for name in batcher.take(data):
                names |= _tree(snapshot, name)
            queues.flush(names, now)
        elif kind == "finish":
            key, gen = data
            if generation[key] != gen or state[key] != "admitted":
                continue
            state[key] = "finished"
            out.finished.add(key)
            info = snapshot.remove_workload(key)
            if info is not None:
                request_flush(info.cluster_queue, now)
        elif kind == "evicted":
            key = data
            info = snapshot.workloads.get(key)
            if info is None or state[key] != "admitted":
                scheduler.observe_removed(key)
                continue
            info.evicted = True
            state[key] = "evicting"
            generation[key] += 1
            out.evictions[key] += 1
            at(now + clear_s, "cleared", key)
        elif kind == "cleared":
            key = data
            state[key] = "pending"
            info = snapshot.remove_workload(key)
            scheduler.observe_removed(key)
            if info is not None:
                request_flush(info.cluster_queue, now)
            queue(key, now)
        elif kind == "cycle":
            cycle_armed = False
            result = scheduler.schedule(now)
            for d in result.decisions:
                if isinstance(d, Admit):
                    key = d.workload_key
                    state[key] = "admitted"
                    generation[key] += 1
                    out.admitted_at.setdefault(key, now)
                    landed = write_lands(now)
                    if runs_for[key] is not None:
                        at(landed + runs_for[key] + finish_lag_s, "finish", (key, generation[key]))
                elif isinstance(d, Preempt):
                    out.preemptions.append((now, d.victim_key, d.preemptor_key))
                    at(write_lands(now), "evicted", d.victim_key)
            if result.heads == 0:
                backoff = 0.001
                continue  # idle until the next event wakes the loop
            if result.progressed():
                backoff = 0.001
                at(now + cycle_s, "cycle")
            else:
                at(now + cycle_s + backoff, "cycle")
                backoff = min(backoff * 2, 0.01)
            cycle_armed = True
            continue
        if not cycle_armed:
            at(now, "cycle")
            cycle_armed = True
    return out


def _tree(snapshot: Snapshot, cq_name: str) -> set[str]:
    cq = snapshot.cluster_queues.get(cq_name)
    if cq is None or cq.parent is None:
        return {cq_name}
    return {c.name for c in cq.root().cluster_queues()}


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
