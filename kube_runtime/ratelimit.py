"""Client-side request rate limits: one token bucket per API resource, with two priority lanes.

controller-runtime builds one REST client per GroupVersionKind, and client-go gives each REST client
its own token bucket of `qps`/`burst` when no shared limiter is configured. So for Kueue (and
minimalkueue, its performance harness) `clientConnection.qps` is a budget *per resource type*:
Workload writes do not wait behind ClusterQueue status writes or Events. `ResourceRateLimits`
reproduces that: the bucket is chosen by the request path's API group, version and resource.

Within one bucket, requests wait in two lanes. `LOW` priority requests (informational writes that
a newer one supersedes, such as a pending workload's QuotaReserved=False message) only get a token
when no `HIGH` one waits, so a saturated budget goes to the writes that move work first.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections import deque
from collections.abc import AsyncIterator, Iterator

from kube_runtime.clock import Clock

HIGH, LOW = 0, 1
_LANES = (HIGH, LOW)

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


class PriorityTokenBucket:
    """`burst` requests at once, then `qps` per second; waiting requests are served HIGH lane first,
    then in arrival order. Like client-go's limiter `Wait`, a request blocks until it has a token."""

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("a token bucket needs qps > 0 and burst >= 1")
        self.qps, self.burst = float(qps), int(burst)
        self._clock = clock or Clock()
        self._tokens = float(burst)
        self._last = self._clock.monotonic()
        self._lanes: tuple[deque[asyncio.Future[None]], ...] = tuple(deque() for _ in _LANES)
        self._dispatcher: asyncio.Task[None] | None = None

    def waiting(self, lane: int | None = None) -> int:
        lanes = self._lanes if lane is None else (self._lanes[lane],)
        return sum(1 for q in lanes for f in q if not f.done())

    def _refill(self) -> None:
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    async def acquire(self, lane: int | None = None) -> None:
        """Wait for a token in `lane` (default: the current task's `priority()`)."""
        lane = current_priority() if lane is None else lane
        self._refill()
        if self._tokens >= 1 and not any(self._lanes):
            self._tokens -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lanes[lane].append(waiter)
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())
        await waiter  # a cancelled waiter is skipped by the dispatcher and costs no token

    def _next_waiter(self) -> asyncio.Future[None] | None:
        for queue in self._lanes:
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    return waiter
        return None

    async def _dispatch(self) -> None:
        while any(self._lanes):
            self._refill()
            if self._tokens < 1:
                await self._clock.sleep((1 - self._tokens) / self.qps)
                continue
            waiter = self._next_waiter()
            if waiter is None:
                return
            self._tokens -= 1
            waiter.set_result(None)


class ResourceRateLimits:
    """One `PriorityTokenBucket` per API resource, created on first use."""

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        PriorityTokenBucket(qps, burst, clock)  # validate now, not on the first request
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
        request to that resource uses the token. For writes decided from a cache: decide after
        the wait, when the cache is as fresh as it gets, not before it."""
        await self.bucket(path).acquire(lane)
        token = _prepaid.set(resource_type_of_path(path))
        try:
            yield
        finally:
            _prepaid.reset(token)


def resource_type_of_path(path: str) -> str:
    """`<group>/<version>/<resource>` of a request path (subresources share their resource's
    bucket, as they share its REST client in client-go): `kueue.x-k8s.io/v1beta1/workloads`,
    `v1/pods`; other paths (discovery, /version) map to their first two segments."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        group_version, rest = parts[1:2], parts[2:]
    elif parts[0] == "apis":
        group_version, rest = parts[1:3], parts[3:]
    else:
        return "/".join(parts[:2])
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    return "/".join(group_version + rest[:1])
