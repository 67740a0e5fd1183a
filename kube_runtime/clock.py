"""An injectable clock: production code asks a Clock for time and sleeps; tests use FakeClock."""

from __future__ import annotations

import asyncio
import datetime as dt
import heapq
import itertools
import time


class Clock:
    """Real time. `monotonic` for intervals, `now` for timestamps written to the API."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock(Clock):
    """Time moves only when a test calls `advance`; sleepers wake in deadline order."""

    def __init__(self, start: dt.datetime | None = None, monotonic_start: float = 1000.0) -> None:
        self._mono = monotonic_start
        self._wall = start or dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> dt.datetime:
        return self._wall

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """Number of coroutines currently blocked in `sleep` (useful to sync tests)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper whose deadline passed, in order."""
        target = self._mono + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._wall += dt.timedelta(seconds=deadline - self._mono)
            self._mono = deadline
            if not fut.done():
                fut.set_result(None)
            # Let woken coroutines run (and maybe schedule new sleeps) before the next deadline.
            for _ in range(5):
                await asyncio.sleep(0)
        self._wall += dt.timedelta(seconds=target - self._mono)
        self._mono = target
        for _ in range(5):
            await asyncio.sleep(0)
