"""A controller-runtime style loop: workers take keys from a WorkQueue and call an async reconcile.

Reconciles are level-triggered and keyed by name; they return `Result(requeue_after=...)` instead
of sleeping. Failures are retried with the queue's rate limiter; success forgets the key's backoff.
The controller knows nothing about informers: event handlers call `enqueue(key)`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

import structlog

from kube_runtime.client import KubeClientError
from kube_runtime.clock import Clock
from kube_runtime.workqueue import QueueShutDown, WorkQueue

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: run again after `requeue_after` seconds, or retry with backoff."""

    requeue_after: float | None = None
    requeue: bool = False


Reconcile = Callable[[Any], Awaitable[Result | None]]

# controller-runtime's reconcile_total result labels.
RESULT_SUCCESS = "success"
RESULT_ERROR = "error"
RESULT_REQUEUE = "requeue"
RESULT_REQUEUE_AFTER = "requeue_after"


def _key_fields(key: Hashable) -> dict[str, Any]:
    """Log fields for a key: `namespace`/`name` for "ns/name" keys, `name` for cluster-scoped ones."""
    if isinstance(key, str):
        namespace, sep, name = key.rpartition("/")
        return {"namespace": namespace, "name": name} if sep else {"name": key}
    return {"key": key}


class Controller:
    """Runs `concurrency` workers over one queue; a key is never reconciled by two workers at once."""

    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        queue: WorkQueue[Any] | None = None,
        concurrency: int = 1,
        clock: Clock | None = None,
        expected_errors: tuple[type[BaseException], ...] = (KubeClientError,),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.name = name
        self.clock = clock or (queue.clock if queue is not None else Clock())
        self.queue: WorkQueue[Any] = queue if queue is not None else WorkQueue(name, self.clock)
        self.concurrency = concurrency
        self._reconcile = reconcile
        # API errors are routine (conflicts, disconnects): log them without a traceback.
        self._expected_errors = expected_errors
        self._workers: list[asyncio.Task[None]] = []
        self._log = log.bind(controller=name)
        # Counters for a metrics layer.
        self.reconcile_total: dict[str, int] = dict.fromkeys(
            (RESULT_SUCCESS, RESULT_ERROR, RESULT_REQUEUE, RESULT_REQUEUE_AFTER), 0
        )
        self.active_workers = 0

    # --- feeding

    def enqueue(self, key: Hashable) -> None:
        """Ask for a reconcile of `key` (deduplicated with any pending request)."""
        self.queue.add(key)

    def enqueue_after(self, key: Hashable, seconds: float) -> None:
        self.queue.add_after(key, seconds)

    # --- lifecycle

    def start(self) -> None:
        """Start the workers and return; `stop()` ends them."""
        if self._workers:
            return
        loop = asyncio.get_running_loop()
        self._workers = [
            loop.create_task(self._worker(), name=f"controller-{self.name}-{i}")
            for i in range(self.concurrency)
        ]

    async def run(self) -> None:
        """Start the workers and wait until `stop()` (or cancellation) ends them."""
        self.start()
        await asyncio.gather(*self._workers)

    async def stop(self) -> None:
        """Shut the queue down and wait for in-flight reconciles to finish."""
        self.queue.shutdown()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)

    # --- workers

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueShutDown:
                return
            self.active_workers += 1
            try:
                await self._reconcile_key(key)
            finally:
                self.active_workers -= 1
                self.queue.done(key)

    async def _reconcile_key(self, key: Hashable) -> None:
        try:
            result = await self._reconcile(key)
        except asyncio.CancelledError:
            raise
        except self._expected_errors as exc:
            self._retry_after_error(key)
            self._log.warning(
                "reconcile failed",
                **_key_fields(key),
                error=str(exc),
                error_type=type(exc).__name__,
                retries=self.queue.num_requeues(key),
            )
            return
        except Exception:
            self._retry_after_error(key)
            self._log.exception("reconcile raised", **_key_fields(key), retries=self.queue.num_requeues(key))
            return
        if result is not None and result.requeue_after is not None:
            # controller-runtime: RequeueAfter forgets the backoff and schedules a plain delayed add.
            self.reconcile_total[RESULT_REQUEUE_AFTER] += 1
            self.queue.forget(key)
            self.queue.add_after(key, max(0.0, result.requeue_after))
        elif result is not None and result.requeue:
            self.reconcile_total[RESULT_REQUEUE] += 1
            self.queue.add_rate_limited(key)
        else:
            self.reconcile_total[RESULT_SUCCESS] += 1
            self.queue.forget(key)

    def _retry_after_error(self, key: Hashable) -> None:
        self.reconcile_total[RESULT_ERROR] += 1
        self.queue.add_rate_limited(key)
