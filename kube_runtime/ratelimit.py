"""Client-side request rate limits: one token bucket per API resource, with two priority lanes.

controller-runtime builds one REST client per GroupVersionKind, and client-go gives each REST client
its own token bucket of `qps`/`burst` when no shared limiter is configured. So for Kueue (and
minimalkueue, its performance harness) `clientConnection.qps` is a budget *per resource type*:
Workload writes do not wait behind ClusterQueue status writes or Events. `ResourceRateLimits`
reproduces that: the bucket is chosen by the request path's API group, version and resource.

Within one bucket, requests wait in two lanes. `LOW` priority requests (informational writes that
a newer one supersedes, such as a pending workload's status message) only use spare
budget: a token when no `HIGH` one waits and the bucket is at least half full, or after waiting
`LOW_MAX_WAIT` seconds. A saturated budget goes to the writes that move work first.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections import deque
from collections.abc import AsyncIterator, Iterator

from kube_runtime.clock import Clock
from kube_runtime.resources import parse_api_path

HIGH, LOW = 0, 1
_LANES = (HIGH, LOW)
# Token counts and times are floats: a deficit below this is rounding, not a reason to sleep again.
_EPSILON = 1e-6
LOW_MAX_WAIT = 5.0  # seconds a LOW request waits for spare budget before it takes its turn anyway

# The lane of requests sent from the current task (see `priority()`).
_priority: contextvars.ContextVar[int] = contextvars.ContextVar("kube_request_priority", default=HIGH)
# The bucket of a token this task already holds (see `ResourceRateLimits.turn`).
_prepaid: contextvars.ContextVar[str | None] = contextvars.ContextVar("kube_request_prepaid", default=None)


@contextlib.contextmanager
def priority(lane: int) -> Iterator[None]:
    """Requests sent inside this block (in this task) wait in `lane`."""
    if lane not in _LANES:
        raise ValueError(f"priority must be HIGH ({HIGH}) or LOW ({LOW}), not {lane!r}")
    token = _priority.set(lane)
    try:
        yield
    finally:
        _priority.reset(token)


def current_priority() -> int:
    return _priority.get()


def _check_rate(qps: float, burst: int) -> None:
    if qps <= 0 or burst < 1:
        raise ValueError("a token bucket needs qps > 0 and burst >= 1")


class PriorityTokenBucket:
    """`burst` requests at once, then `qps` per second. Like client-go's limiter `Wait`, a request
    blocks until it has a token. HIGH requests are served first, in arrival order. LOW requests use
    spare budget only: one is served when no HIGH request waits and the bucket holds at least half
    its burst (the budget is not saturated), or, once it has waited `low_max_wait` seconds, with the
    next token."""

    def __init__(
        self, qps: float, burst: int, clock: Clock | None = None, low_max_wait: float = LOW_MAX_WAIT
    ) -> None:
        _check_rate(qps, burst)
        self.qps, self.burst = float(qps), int(burst)
        self.low_max_wait = low_max_wait
        self._low_min_tokens = max(1.0, self.burst / 2)
        self._clock = clock or Clock()
        self._tokens = float(burst)
        self._last = self._clock.monotonic()
        # Per lane: (waiter, monotonic time it started waiting).
        self._lanes: tuple[deque[tuple[asyncio.Future[None], float]], ...] = tuple(deque() for _ in _LANES)
        self._dispatcher: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()

    def waiting(self, lane: int | None = None) -> int:
        lanes = self._lanes if lane is None else (self._lanes[lane],)
        return sum(1 for q in lanes for f, _ in q if not f.done())

    def _refill(self) -> None:
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    async def acquire(self, lane: int | None = None) -> None:
        """Wait for a token in `lane` (default: the current task's `priority()`)."""
        lane = current_priority() if lane is None else lane
        self._refill()
        needed = 1.0 if lane == HIGH else self._low_min_tokens
        if (
            self._tokens >= needed - _EPSILON
            and not self._first(HIGH)
            and (lane == HIGH or not self._first(LOW))
        ):
            self._tokens -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lanes[lane].append((waiter, self._clock.monotonic()))
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())
        else:
            self._kick.set()  # a sleeping dispatcher re-evaluates (a HIGH request may go sooner)
        await waiter  # a cancelled waiter is skipped by the dispatcher and costs no token

    def refund(self) -> None:
        """Give back a token that was taken but not used."""
        self._refill()
        self._tokens = min(float(self.burst), self._tokens + 1)

    def _first(self, lane: int) -> tuple[asyncio.Future[None], float] | None:
        queue = self._lanes[lane]
        while queue and queue[0][0].done():
            queue.popleft()
        return queue[0] if queue else None

    async def _dispatch(self) -> None:
        while True:
            self._refill()
            now = self._clock.monotonic()
            low = self._first(LOW)
            aged = low is not None and now - low[1] >= self.low_max_wait - _EPSILON
            lane, first = (LOW, low) if aged else (HIGH, self._first(HIGH))
            if first is None:
                lane, first = LOW, low
            if first is None:
                return
            needed = 1.0 if lane == HIGH or aged else self._low_min_tokens
            if self._tokens >= needed - _EPSILON:
                self._lanes[lane].popleft()
                self._tokens -= 1
                first[0].set_result(None)
                continue
            delay = (needed - self._tokens) / self.qps
            if lane == LOW and not aged:
                delay = min(delay, first[1] + self.low_max_wait - now)
            await self._sleep_or_kick(delay)

    async def _sleep_or_kick(self, delay: float) -> None:
        self._kick.clear()
        sleeper = asyncio.ensure_future(self._clock.sleep(delay))
        kicked = asyncio.ensure_future(self._kick.wait())
        try:
            await asyncio.wait((sleeper, kicked), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            kicked.cancel()


class ResourceRateLimits:
    """One `PriorityTokenBucket` per API resource, created on first use."""

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        _check_rate(qps, burst)  # now, not on the first request
        self.qps, self.burst = qps, burst
        self._clock = clock or Clock()
        self._buckets: dict[str, PriorityTokenBucket] = {}

    def bucket(self, path: str) -> PriorityTokenBucket:
        key = resource_type_of_path(path)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = PriorityTokenBucket(self.qps, self.burst, self._clock)
        return bucket

    async def acquire(self, path: str) -> None:
        key = resource_type_of_path(path)
        if _prepaid.get() == key:
            _prepaid.set(None)  # the token taken by `turn`
            return
        await self.bucket(path).acquire()

    @contextlib.asynccontextmanager
    async def turn(self, path: str, lane: int) -> AsyncIterator[None]:
        """Wait for a token of `path`'s resource in `lane`, then run the block; the block's first
        request to that resource uses the token, and if it sends none the token is given back. For
        writes decided from a cache: decide after the wait, when the cache is as fresh as it gets,
        not before it."""
        bucket = self.bucket(path)
        key = resource_type_of_path(path)
        await bucket.acquire(lane)
        token = _prepaid.set(key)
        try:
            yield
        finally:
            if _prepaid.get() == key:
                bucket.refund()  # the block decided not to send anything
            _prepaid.reset(token)


def resource_type_of_path(path: str) -> str:
    """`<group>/<version>/<resource>` of a request path (subresources share their resource's
    bucket, as they share its REST client in client-go): `batch/v1/jobs`,
    `v1/pods`; other paths (discovery, /version) map to their first two segments."""
    group_version, resource, _ = parse_api_path(path)
    return f"{group_version}/{resource}" if resource else group_version
