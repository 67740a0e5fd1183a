"""Controller: workers, retries with backoff, requeue_after on a FakeClock, per-key exclusivity, stop."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from structlog.testing import capture_logs

from kube_runtime.client import Conflict
from kube_runtime.clock import FakeClock
from kube_runtime.controller import Controller, Result


async def settle(rounds: int = 20) -> None:
    """Let ready callbacks and woken tasks run (a scheduling yield, not a delay)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_reconcile_is_called_once_per_enqueued_key():
    calls: list[str] = []

    async def reconcile(key: str) -> None:
        calls.append(key)

    controller = Controller("test", reconcile, clock=FakeClock())
    controller.start()
    for key in ("ns/a", "ns/b", "ns/a"):
        controller.enqueue(key)
    await settle()
    assert sorted(calls) == ["ns/a", "ns/b"]
    assert controller.reconcile_total["success"] == 2
    await controller.stop()


async def test_failure_is_retried_with_exponential_backoff_then_forgotten():
    clock = FakeClock()
    calls: list[float] = []

    async def reconcile(key: str) -> None:
        calls.append(clock.monotonic())
        if len(calls) <= 2:
            raise RuntimeError("boom")

    controller = Controller("test", reconcile, clock=clock)
    controller.start()
    with capture_logs() as logs:
        controller.enqueue("a")
        await settle()
        assert len(calls) == 1 and controller.queue.num_requeues("a") == 1
        await clock.advance(0.004)
        assert len(calls) == 1
        await clock.advance(0.001)  # first retry after 5ms
        assert len(calls) == 2
        await clock.advance(0.0099)
        assert len(calls) == 2
        await clock.advance(0.0001)  # second retry after 10ms more
        assert len(calls) == 3
    assert controller.queue.num_requeues("a") == 0, "success forgets the backoff"
    assert controller.reconcile_total["error"] == 2
    failures = [e for e in logs if e["event"] == "reconcile raised"]
    assert len(failures) == 2
    assert failures[0]["controller"] == "test" and failures[0]["name"] == "a"
    assert failures[0]["log_level"] == "error" and failures[0].get("exc_info")
    await controller.stop()


async def test_expected_api_errors_are_logged_without_traceback():
    status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"}

    async def reconcile(key: str) -> None:
        raise Conflict(status)

    controller = Controller("workloads", reconcile, clock=FakeClock())
    controller.start()
    with capture_logs() as logs:
        controller.enqueue("team-a/job-1")
        await settle()
    await controller.stop()
    [entry] = [e for e in logs if e["event"] == "reconcile failed"]
    assert entry["log_level"] == "warning"
    assert entry["namespace"] == "team-a" and entry["name"] == "job-1"
    assert entry["error_type"] == "Conflict"
    assert "exc_info" not in entry
    assert controller.queue.num_requeues("team-a/job-1") == 1


async def test_requeue_after_runs_again_after_the_delay():
    clock = FakeClock()
    calls: list[float] = []

    async def reconcile(key: str) -> Result | None:
        calls.append(clock.monotonic())
        return Result(requeue_after=30.0) if len(calls) == 1 else None

    controller = Controller("test", reconcile, clock=clock)
    controller.start()
    controller.enqueue("a")
    await settle()
    assert len(calls) == 1
    await clock.advance(29.9)
    assert len(calls) == 1
    await clock.advance(0.1)
    assert len(calls) == 2 and calls[1] - calls[0] == pytest.approx(30.0)
    await clock.advance(100)
    assert len(calls) == 2
    assert controller.reconcile_total == {"success": 1, "error": 0, "requeue": 0, "requeue_after": 1}
    await controller.stop()


async def test_requeue_true_retries_with_backoff_without_error():
    clock = FakeClock()
    calls = 0

    async def reconcile(key: str) -> Result:
        nonlocal calls
        calls += 1
        return Result(requeue=calls < 3)

    controller = Controller("test", reconcile, clock=clock)
    controller.start()
    controller.enqueue("a")
    await settle()
    await clock.advance(0.005)
    assert calls == 2
    await clock.advance(0.010)
    assert calls == 3
    assert controller.queue.num_requeues("a") == 0
    await controller.stop()


async def test_concurrency_runs_distinct_keys_in_parallel_never_the_same_key():
    release = asyncio.Event()
    in_flight: Counter[str] = Counter()
    max_parallel = 0
    same_key_overlap = False
    calls: Counter[str] = Counter()

    async def reconcile(key: str) -> None:
        nonlocal max_parallel, same_key_overlap
        in_flight[key] += 1
        calls[key] += 1
        same_key_overlap |= in_flight[key] > 1
        max_parallel = max(max_parallel, sum(in_flight.values()))
        await release.wait()
        in_flight[key] -= 1

    controller = Controller("test", reconcile, concurrency=3, clock=FakeClock())
    controller.start()
    for key in ("a", "b", "c", "d"):
        controller.enqueue(key)
    await settle()
    assert max_parallel == 3 and controller.active_workers == 3
    assert set(calls) == {"a", "b", "c"}
    controller.enqueue("a")  # a is being reconciled: it waits, it does not run twice at once
    controller.enqueue("b")
    await settle()
    release.set()
    await settle(50)
    assert not same_key_overlap
    assert calls == Counter({"a": 2, "b": 2, "c": 1, "d": 1})
    await controller.stop()


async def test_stop_waits_for_in_flight_reconcile_and_ends_run():
    started, finish = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    async def reconcile(key: str) -> None:
        started.set()
        await finish.wait()
        finished.append(key)

    controller = Controller("test", reconcile, concurrency=2, clock=FakeClock())
    runner = asyncio.create_task(controller.run())
    controller.enqueue("a")
    await started.wait()
    stopping = asyncio.create_task(controller.stop())
    await settle()
    assert not stopping.done(), "stop waits for the running reconcile"
    finish.set()
    await stopping
    await runner  # run() returns once the workers are gone
    assert finished == ["a"]
    controller.enqueue("b")
    await settle()
    assert finished == ["a"] and len(controller.queue) == 0


async def test_stop_before_start_is_harmless():
    async def reconcile(key: str) -> None:
        raise AssertionError("never called")

    controller = Controller("test", reconcile, clock=FakeClock())
    await controller.stop()
    assert controller.queue.shutting_down
