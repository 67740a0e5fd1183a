"""Replay the scheduler baseline's workload mix (bench.engine) on the pure admission engine,
with fixed latencies on a virtual clock (tests/unit/engine/engine_replay.py), and count evictions.

No cluster: the same Scheduler, Snapshot and QueueManager the worker_agent runs, driven as
worker_agent/admission/ drives them. Where a live run evicts and this replay does not, the
evictions come from the live system's timing (cache lag, write latency, rate limits), not from the
engine's decisions on a consistent snapshot.

  .venv/bin/python -m bench.replay_baseline --scale 1.0 --cycle 0.002 --write 0.01 --clear 0.02
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from bench import engine_plan as be
from bench.common import REPO

sys.path.insert(0, str(REPO / "tests" / "unit" / "engine"))
from engine_replay import AFTER, RUNS_FOR, replay


def scenario(scale: float) -> tuple[list[dict], dict[str, str]]:
    """The baseline's objects as a differential scenario: each (ClusterQueue, class) set creates one
    Workload per class interval, as upstream's generator does; the class of every Workload key."""
    config = be.baseline_config(scale)
    objects = be.plan_objects(be.OURS, config)
    timed = []
    for queue in be.plan_queues(config):
        for set_index, cls in enumerate(config.classes):
            for serial in range(cls.count):
                wl = be.workload_object(be.OURS, queue, cls, set_index, serial)
                # As upstream's generator (and bench.engine's): wait one interval, then create.
                timed.append(((serial + 1) * cls.interval_ms / 1000.0, wl, cls))
    timed.sort(key=lambda item: item[0])
    docs = objects["ResourceFlavor"] + objects["ClusterQueue"] + objects["LocalQueue"]
    classes, previous = {}, 0.0
    for at, wl, cls in timed:
        wl["metadata"]["annotations"] = {AFTER: str(at - previous), RUNS_FOR: str(cls.runtime_ms / 1000.0)}
        previous = at
        docs.append(wl)
        classes[f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"] = cls.name
    return docs, classes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="replay_baseline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="workloads per set, as bench.engine's --scale"
    )
    parser.add_argument("--cycle", type=float, default=0.002, help="seconds per scheduling cycle")
    parser.add_argument("--write", type=float, default=0.01, help="seconds from a decision to its write")
    parser.add_argument("--clear", type=float, default=0.02, help="seconds from an eviction to its requeue")
    parser.add_argument("--until", type=float, default=900.0, help="virtual seconds to replay at most")
    parser.add_argument(
        "--write-qps",
        type=float,
        help="the agent's write budget: admissions and evictions land one per 1/QPS, in decision order "
        "(default: no limit)",
    )
    parser.add_argument(
        "--finish-lag",
        type=float,
        default=0.0,
        help="seconds from a Workload's runtime ending to the engine seeing it Finished (default 0)",
    )
    args = parser.parse_args(argv)
    docs, classes = scenario(args.scale)
    started = time.process_time()
    out = replay(
        docs,
        until_s=args.until,
        cycle_s=args.cycle,
        write_s=args.write,
        clear_s=args.clear,
        write_qps=args.write_qps,
        finish_lag_s=args.finish_lag,
    )
    evicted = collections.Counter()
    for key, count in out.evictions.items():
        evicted[classes[key]] += count
    pairs = collections.Counter(f"{classes[p]} evicts {classes[v]}" for _, v, p in out.preemptions)
    print(
        f"{len(classes)} workloads, {len(out.finished)} finished, {sum(out.evictions.values())} evictions "
        f"({dict(evicted) or 'none'}), "
        f"{sum(1 for n in out.evictions.values() if n > 1)} evicted more than once, "
        f"preemptions {dict(pairs) or 'none'}; {time.process_time() - started:.1f} s CPU"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
