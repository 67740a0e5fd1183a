"""What the LWS and JobSet mixes share: creating objects at a target rate with creates in flight
bounded, waiting on the manager's progress with a deadline, and tidying up afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from bench.common import say

IN_FLIGHT = 50  # creates in flight: the pace is the rate, not the round trip


async def create_at_rate(
    names: Sequence[str], rate: float, create: Callable[[str], Awaitable[None]], failures: list[BaseException]
) -> tuple[float, float]:
    """`create(name)` for every name, the index-th at `index / rate` seconds after the first; a
    failure is appended to `failures` and the run goes on. Returns the first submission's
    monotonic time and the seconds the submission took."""
    now = time.monotonic
    first_submit = now()
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def create_one(name: str) -> None:
        try:
            await create(name)
        except Exception as exc:  # recorded; the run goes on without it
            failures.append(exc)
        finally:
            limit.release()

    tasks = []
    for index, name in enumerate(names):
        delay = first_submit + index / rate - now() if rate > 0 else 0
        if delay > 0:
            await asyncio.sleep(delay)
        await limit.acquire()
        tasks.append(asyncio.get_running_loop().create_task(create_one(name)))
    await asyncio.gather(*tasks)
    return first_submit, now() - first_submit


async def wait_done(done: Callable[[], bool], progress: Callable[[], str], timeout_s: float) -> bool:
    """Polls `done()` every 0.1 s, saying `progress()` every 5 s; True when `timeout_s` ran out first."""
    now = time.monotonic
    deadline, next_progress = now() + timeout_s, now() + 5
    while not done():
        if now() > deadline:
            return True
        if now() >= next_progress:
            say(progress())
            next_progress += 5
        await asyncio.sleep(0.1)
    return False


def submission_rate(submitted: int, submission_s: float) -> float | None:
    return submitted / submission_s if submission_s > 0 else None


def creates_error(failures: Sequence[BaseException]) -> str | None:
    return f"{len(failures)} creates failed, first: {failures[0]!r}" if failures else None


async def tear_down(
    informers: Iterable[Any], clients: Iterable[Any], cleanup: Any | None, collection: str, selector: str
) -> None:
    """Stops the informers; with a `cleanup` client, deletes what `selector` labels in the
    `collection` (its API path); closes the clients. Nothing here raises."""
    for informer in informers:
        with contextlib.suppress(Exception):
            await informer.stop()
    if cleanup is not None:
        with contextlib.suppress(Exception):
            await cleanup.request(
                "DELETE",
                collection,
                params={"labelSelector": selector, "propagationPolicy": "Background"},
                request_timeout=120,
            )
    for c in clients:
        with contextlib.suppress(Exception):
            await c.close()
