"""An asyncio work queue with client-go's rate-limited delaying workqueue semantics.

- A key is queued at most once; a key added while a worker holds it is marked dirty and queued
  again when the worker calls `done`, so one worker per key at a time and no update is lost.
- `add_after` delays an add on the injected clock; the earliest deadline for a key wins.
- `add_rate_limited` delays by a rate limiter: per-item exponential backoff combined (max) with an
  overall token bucket, like client-go's DefaultControllerRateLimiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from kube_runtime.clock import Clock

K = TypeVar("K", bound=Hashable)


class QueueShutDown(Exception):
    """Raised by `WorkQueue.get` once the queue is shut down."""


# ---------------------------------------------------------------------------------------------
# Rate limiters


class RateLimiter(Protocol):
    """How long to wait before retrying a key (client-go's workqueue.RateLimiter)."""

    def when(self, key: Hashable) -> float:
        """Record one more failure of `key` and return the delay in seconds before its retry."""
        ...

    def forget(self, key: Hashable) -> None:
        """Stop tracking `key` (it succeeded)."""
        ...

    def num_requeues(self, key: Hashable) -> int:
        """Failures recorded for `key` since it was last forgotten."""
        ...


class ItemExponentialBackoff:
    """Per-key exponential backoff: base, 2*base, 4*base ... up to cap (ItemExponentialFailureRateLimiter)."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if base <= 0 or cap < base:
            raise ValueError("backoff needs 0 < base <= cap")
        self.base, self.cap = base, cap
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        exponent = self._failures.get(key, 0)
        self._failures[key] = exponent + 1
        # Past 2**64 the float would overflow long after reaching any sane cap.
        if exponent >= 64:
            return self.cap
        return min(self.base * 2**exponent, self.cap)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class TokenBucket:
    """Overall rate limit: `burst` retries at once, then `qps` per second (client-go BucketRateLimiter).

    Like golang.org/x/time/rate's Reserve, every call takes a token now and returns how long until
    that token exists, so tokens may go negative and delays grow with the backlog.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("token bucket needs qps > 0 and burst >= 1")
        self.qps, self.burst = qps, burst
        self._clock = clock or Clock()
        self._tokens = float(burst)
        self._last = self._clock.monotonic()

    def when(self, key: Hashable) -> float:
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: Hashable) -> None:
        """The bucket is shared by all keys: nothing to forget."""

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOf:
    """The longest delay of several limiters; every limiter records every failure."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOf needs at least one limiter")
        self.limiters = limiters

    def when(self, key: Hashable) -> float:
        return max([limiter.when(key) for limiter in self.limiters])

    def forget(self, key: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def default_rate_limiter(
    clock: Clock | None = None,
    base: float = 0.005,
    cap: float = 1000.0,
    qps: float = 10.0,
    burst: int = 100,
) -> MaxOf:
    """client-go's DefaultControllerRateLimiter: 5ms..1000s per key, 10 qps / 100 burst overall."""
    return MaxOf(ItemExponentialBackoff(base, cap), TokenBucket(qps, burst, clock))


# ---------------------------------------------------------------------------------------------
# The queue


class WorkQueue(Generic[K]):
    """Deduplicating, delaying, rate-limited queue of keys for controller workers."""

    def __init__(
        self, name: str = "", clock: Clock | None = None, rate_limiter: RateLimiter | None = None
    ) -> None:
        self.name = name
        self.clock = clock or Clock()
        self.rate_limiter: RateLimiter = rate_limiter or default_rate_limiter(self.clock)
        self._queue: deque[K] = deque()  # ready keys, FIFO, each at most once
        self._dirty: set[K] = set()  # keys that need processing (queued, or re-added while processing)
        self._processing: dict[K, float] = {}  # key -> monotonic time a worker got it
        self._getters: deque[asyncio.Future[None]] = deque()
        self._waiting: dict[K, float] = {}  # delayed key -> earliest deadline (monotonic)
        self._heap: list[tuple[float, int, K]] = []  # may hold superseded deadlines; _waiting decides
        self._seq = itertools.count()
        self._delay_task: asyncio.Task[None] | None = None
        self._delay_task_deadline = float("inf")
        self._shutting_down = False
        # Counters for a metrics layer.
        self.adds_total = 0
        self.retries_total = 0

    # --- adding

    def add(self, key: K) -> None:
        """Queue `key` unless it is already queued; if a worker holds it, queue it again on `done`."""
        if self._shutting_down or key in self._dirty:
            return
        self.adds_total += 1
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake_one_getter()

    def add_after(self, key: K, seconds: float) -> None:
        """Add `key` once `seconds` have passed on the clock; an earlier pending deadline wins."""
        if self._shutting_down:
            return
        if seconds <= 0:
            self.add(key)
            return
        deadline = self.clock.monotonic() + seconds
        current = self._waiting.get(key)
        if current is not None and current <= deadline:
            return
        self._waiting[key] = deadline
        heapq.heappush(self._heap, (deadline, next(self._seq), key))
        if self._delay_task is None or self._delay_task.done() or deadline < self._delay_task_deadline:
            self._restart_delay_task()

    def add_rate_limited(self, key: K) -> None:
        """Add `key` after the rate limiter's delay for it (a retry after a failure)."""
        if self._shutting_down:
            return
        self.retries_total += 1
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset the rate limiter's failure count for `key` (call after a successful reconcile)."""
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.rate_limiter.num_requeues(key)

    # --- getting

    async def get(self) -> K:
        """Wait for a ready key and hand it to the caller, who must call `done(key)` afterwards."""
        while True:
            if self._shutting_down:
                raise QueueShutDown(self.name)
            if self._queue:
                key = self._queue.popleft()
                self._dirty.discard(key)
                self._processing[key] = self.clock.monotonic()
                if self._queue:
                    self._wake_one_getter()  # several keys may have arrived with one wake-up
                return key
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                getter.cancel()
                with contextlib.suppress(ValueError):
                    self._getters.remove(getter)
                # A wake-up meant for us must not be lost.
                if self._queue and not getter.cancelled():
                    self._wake_one_getter()
                raise

    def done(self, key: K) -> None:
        """The worker finished `key`; if it was added meanwhile, queue it again now."""
        if self._processing.pop(key, None) is None:
            return
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._wake_one_getter()

    # --- lifecycle

    def shutdown(self) -> None:
        """Stop accepting keys; every pending and future `get` raises QueueShutDown (no draining)."""
        self._shutting_down = True
        if self._delay_task is not None:
            self._delay_task.cancel()
            self._delay_task = None
        self._waiting.clear()
        self._heap.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # --- observation (metrics, tests)

    def __len__(self) -> int:
        """Keys ready to be handed out (client-go's Len / the depth gauge)."""
        return len(self._queue)

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def waiting(self) -> int:
        """Keys scheduled by add_after / add_rate_limited that are not due yet."""
        return len(self._waiting)

    @property
    def processing(self) -> int:
        """Keys held by workers right now."""
        return len(self._processing)

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    def longest_running_processor_seconds(self) -> float:
        """How long the oldest key still held by a worker has been held."""
        if not self._processing:
            return 0.0
        return self.clock.monotonic() - min(self._processing.values())

    def unfinished_work_seconds(self) -> float:
        """Sum over held keys of how long each has been held (client-go's unfinished_work_seconds)."""
        now = self.clock.monotonic()
        return sum(now - started for started in self._processing.values())

    # --- internals

    def _wake_one_getter(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _drop_superseded_deadlines(self) -> None:
        """Pop heap entries whose key was since given an earlier deadline (or already released)."""
        while self._heap and self._waiting.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)

    def _restart_delay_task(self) -> None:
        if self._delay_task is not None:
            self._delay_task.cancel()
        self._drop_superseded_deadlines()
        self._delay_task_deadline = self._heap[0][0]
        self._delay_task = asyncio.get_running_loop().create_task(
            self._release_due_keys(), name=f"workqueue-delay-{self.name}"
        )

    async def _release_due_keys(self) -> None:
        """Sleep until the earliest deadline, add every due key, repeat until nothing waits."""
        while self._heap and not self._shutting_down:
            now = self.clock.monotonic()
            while self._heap and self._heap[0][0] <= now:
                deadline, _, key = heapq.heappop(self._heap)
                if self._waiting.get(key) == deadline:
                    del self._waiting[key]
                    self.add(key)
            self._drop_superseded_deadlines()
            if not self._heap:
                break
            self._delay_task_deadline = self._heap[0][0]
            await self.clock.sleep(self._delay_task_deadline - now)
        self._delay_task_deadline = float("inf")
