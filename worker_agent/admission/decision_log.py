"""`--decision-log`: one JSON line per scheduling cycle and per inadmissible flush."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TextIO

import orjson
import structlog

from worker_agent.engine.scheduler import CycleResult

log = structlog.get_logger("worker_agent.admission")


class DecisionLog:
    """The trace of what each cycle decided, and when parked workloads were retried; it stops
    (and scheduling goes on) when a write fails."""

    def __init__(self, out: TextIO | None) -> None:
        self._out = out

    @property
    def enabled(self) -> bool:
        return self._out is not None

    def cycle(self, result: CycleResult, now: float) -> None:
        """The cycle's decisions as one line, for a look at why it did what it did."""
        record = {
            "heads": result.heads,
            "admit": [d.workload_key for d in result.admitted],
            "preempt": [[d.victim_key, d.preemptor_key, d.reason] for d in result.preempted],
            "pending": [[d.workload_key, d.reason, d.message] for d in result.requeued],
        }
        self.write(record, now)

    def flush(self, scope: Iterable[str], now: float) -> None:
        if self._out is not None:
            self.write({"flush": sorted(scope)}, now)

    def write(self, record: dict[str, Any], now: float) -> None:
        """One line: `t` (wall clock, ms precision) first, then `record`."""
        assert self._out is not None
        try:
            self._out.write(orjson.dumps({"t": round(now, 3), **record}).decode() + "\n")
        except (OSError, ValueError) as exc:  # a full disk or a closed file: stop tracing, keep scheduling
            log.warning("decision log write failed; tracing stops", error=str(exc))
            self._out = None
