"""Python's cyclic garbage collector, paced for a controller that caches a cluster's objects.

A controller's heap is mostly its informer caches: decoded JSON, millions of small dicts and lists
that live for minutes. CPython's collector scans every tracked object of the oldest generation on
each full collection, and starts one whenever a quarter more objects have survived into it, so a
busy agent with 15,000 Workloads cached stopped 24 times in 400 s, for up to 0.98 s (measured with a
`gc.callbacks` probe during `make bench-engine`; docs/benchmarks.md). A stopped controller reads no
watch events and runs no scheduling cycle; when it resumes it sees a pile of finished Workloads at
once, in every cohort, which is not what happened in the cluster.

The pacer keeps the collector's full scans small: every `freeze_every` seconds it collects what has
become garbage among the objects that arrived since its last step (a short pause: only those are
scanned) and then freezes the survivors (`gc.freeze()`: the collector no longer scans them).
Frozen objects are still freed by reference counting as soon as nothing refers to them, which is
how a replaced or deleted cached object goes; only a reference cycle that becomes garbage after
being frozen waits, until the full pass every `full_every` seconds unfreezes everything, collects
and freezes again: one full-length pause per `full_every`, instead of several a minute.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

GC_FREEZE_EVERY_SECONDS = 2.0
GC_FULL_EVERY_SECONDS = 1800.0


@dataclass
class GcStep:
    full: bool  # everything was unfrozen and scanned
    collected: int  # unreachable objects found
    pause_s: float  # how long the step held the interpreter
    frozen: int | None  # objects frozen afterwards, counted on full passes only (counting walks them all)


class GcPacer:
    def __init__(
        self,
        freeze_every: float = GC_FREEZE_EVERY_SECONDS,
        full_every: float = GC_FULL_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if freeze_every <= 0 or full_every < freeze_every:
            raise ValueError("freeze_every must be positive and full_every at least freeze_every")
        self.freeze_every = freeze_every
        self.full_every = full_every
        self.clock = clock
        self.last_full = clock()

    def step(self) -> GcStep:
        """One collection of the objects not yet frozen (all of them on a full pass), then a freeze."""
        now = self.clock()
        full = now - self.last_full >= self.full_every
        started = time.perf_counter()
        if full:
            gc.unfreeze()
            self.last_full = now
        collected = gc.collect()
        gc.freeze()
        pause = time.perf_counter() - started
        return GcStep(full, collected, pause, gc.get_freeze_count() if full else None)

    async def run(self) -> None:
        """Step every `freeze_every` seconds until cancelled; the full passes are logged."""
        try:
            while True:
                await asyncio.sleep(self.freeze_every)
                result = self.step()
                if result.full:
                    log.info(
                        "full garbage collection",
                        pause_ms=round(result.pause_s * 1000, 1),
                        collected=result.collected,
                        frozen=result.frozen,
                    )
        finally:
            gc.unfreeze()
