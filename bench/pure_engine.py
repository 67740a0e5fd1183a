"""Micro-benchmark: engine CPU time per scheduling decision.

30 ClusterQueues in 5 cohorts of 6 (20 CPU nominal each, borrowingLimit 100), workloads of three
sizes queued up front; admitted workloads run for a few cycles, then finish and free their quota
(which flushes the cohort's inadmissible workloads, batched per cycle like Kueue's 1 s batch).

    python -m bench.pure_engine [--workloads 15000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict

from worker_agent.engine.ordering import QueueManager
from worker_agent.engine.scheduler import Scheduler, SchedulerConfig
from worker_agent.engine.snapshot import Snapshot
from worker_agent.engine.workloads import WorkloadInfo

SIZES = (("small", "1"), ("medium", "5"), ("large", "10"))


def build(n_workloads: int, seed: int) -> tuple[Snapshot, QueueManager, list[WorkloadInfo]]:
    rng = random.Random(seed)
    cluster_queues = []
    for cohort in range(5):
        for i in range(6):
            cluster_queues.append(
                {
                    "metadata": {"name": f"cq-{cohort}-{i}"},
                    "spec": {
                        "cohort": f"cohort-{cohort}",
                        "namespaceSelector": {},
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [
                                    {
                                        "name": "default",
                                        "resources": [
                                            {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                }
            )
    snapshot = Snapshot.from_objects(
        cluster_queues=cluster_queues, resource_flavors=[{"metadata": {"name": "default"}}]
    )
    queues = QueueManager()
    for cq in cluster_queues:
        queues.ensure(cq["metadata"]["name"])
    workloads = []
    for n in range(n_workloads):
        size, cpu = SIZES[n % 3]
        cq = cluster_queues[rng.randrange(len(cluster_queues))]["metadata"]["name"]
        obj = {
            "metadata": {
                "name": f"{size}-{n}",
                "namespace": "bench",
                "uid": f"uid-{n}",
                "creationTimestamp": n,
            },
            "spec": {
                "queueName": "lq",
                "priority": rng.choice((0, 0, 0, 100)),
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {
                            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
                        },
                    }
                ],
            },
        }
        workloads.append(WorkloadInfo.from_dict(obj, cluster_queue=cq))
    return snapshot, queues, workloads


def run(n_workloads: int = 15_000, seed: int = 1, max_cycles: int = 200_000) -> dict[str, float]:
    build_start = time.process_time()
    snapshot, queues, workloads = build(n_workloads, seed)
    build_cpu = time.process_time() - build_start
    rng = random.Random(seed + 1)

    engine_cpu = 0.0
    start = time.process_time()
    for wl in workloads:
        queues.push(wl)
    engine_cpu += time.process_time() - start

    scheduler = Scheduler(snapshot, queues, SchedulerConfig())
    finish_at: dict[int, list[str]] = defaultdict(list)
    cohort_cqs = {
        cohort.name: [cq.name for cq in cohort.cluster_queues()] for cohort in snapshot.root_cohorts()
    }
    decisions = admitted = heads = 0
    pending_at_start = queues.pending()
    cycle = 0
    idle = 0
    while admitted < n_workloads and cycle < max_cycles:
        cycle += 1
        start = time.process_time()
        result = scheduler.schedule(now=float(cycle))
        to_flush: set[str] = set()
        for key in finish_at.pop(cycle, ()):
            info = snapshot.remove_workload(key)
            if info is not None:
                cq = snapshot.cluster_queues[info.cluster_queue]
                to_flush.add(cq.parent.name if cq.parent is not None else cq.name)
        for cohort in to_flush:
            queues.flush(cohort_cqs.get(cohort, [cohort]), now=float(cycle))
        engine_cpu += time.process_time() - start

        decisions += len(result.decisions)
        heads += result.heads
        for admit in result.admitted:
            admitted += 1
            finish_at[cycle + rng.randint(2, 20)].append(admit.workload_key)
        if result.heads == 0:
            idle += 1
            # Nothing to pop: jump to the next finish.
            if finish_at:
                next_cycle = min(finish_at)
                cycle = max(cycle, next_cycle - 1)
            elif idle > 3:
                break
        else:
            idle = 0

    per_decision_ms = engine_cpu / decisions * 1000 if decisions else float("nan")
    return {
        "workloads": n_workloads,
        "pending_at_start": pending_at_start,
        "cycles": cycle,
        "heads": heads,
        "decisions": decisions,
        "admitted": admitted,
        "engine_cpu_s": engine_cpu,
        "per_decision_ms": per_decision_ms,
        "per_admission_ms": engine_cpu / admitted * 1000 if admitted else float("nan"),
        "build_cpu_s": build_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=15_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    stats = run(args.workloads, args.seed)
    print(
        f"workloads={stats['workloads']} pending_at_start={stats['pending_at_start']} "
        f"cycles={stats['cycles']} heads={stats['heads']} decisions={stats['decisions']} "
        f"admitted={stats['admitted']}"
    )
    print(f"request computation (build, not counted): {stats['build_cpu_s']:.2f} s CPU")
    print(f"engine CPU: {stats['engine_cpu_s']:.2f} s")
    print(f"engine CPU per scheduling decision: {stats['per_decision_ms']:.3f} ms")
    print(f"engine CPU per admission: {stats['per_admission_ms']:.3f} ms")


if __name__ == "__main__":
    main()
