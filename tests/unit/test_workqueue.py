"""WorkQueue: dedup, dirty re-adds, one worker per key, delays and rate limits on a FakeClock."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_runtime.clock import FakeClock
from kube_runtime.workqueue import (
    ItemExponentialBackoff,
    MaxOf,
    QueueShutDown,
    TokenBucket,
    WorkQueue,
    default_rate_limiter,
)


async def settle(rounds: int = 20) -> None:
    """Let ready callbacks and woken tasks run (a scheduling yield, not a delay)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_add_deduplicates_waiting_keys():
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("ns/a")
    queue.add("ns/a")
    queue.add("ns/b")
    assert len(queue) == 2
    assert await queue.get() == "ns/a"
    assert await queue.get() == "ns/b"
    assert len(queue) == 0
    assert queue.adds_total == 2


async def test_key_added_while_processing_is_redelivered_exactly_once_after_done():
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0, "a key held by a worker is not handed out again"
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_done_without_readd_does_not_requeue():
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("a")
    queue.done(await queue.get())
    assert len(queue) == 0


async def test_one_worker_per_key_with_many_workers():
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    holding: set[str] = set()
    overlaps: list[str] = []
    handled: list[str] = []

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            if key in holding:
                overlaps.append(key)
            holding.add(key)
            await settle(3)  # other workers run while we hold the key
            holding.discard(key)
            handled.append(key)
            queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    for _ in range(5):
        for key in ("a", "a", "b"):
            queue.add(key)
            await asyncio.sleep(0)
    await settle(100)
    queue.shutdown()
    await asyncio.gather(*workers)
    assert overlaps == []
    assert set(handled) == {"a", "b"}
    assert handled.count("a") >= 2  # re-adds during processing were not lost


async def test_add_after_waits_for_the_clock():
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 1.0)
    assert len(queue) == 0 and queue.waiting == 1
    await clock.advance(0.999)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert len(queue) == 1 and queue.waiting == 0
    assert await queue.get() == "a"


async def test_add_after_earlier_deadline_wins():
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("late-first", 10.0)
    queue.add_after("late-first", 2.0)
    queue.add_after("early-first", 1.0)
    queue.add_after("early-first", 5.0)  # does not postpone
    await clock.advance(1.0)
    assert await queue.get() == "early-first"
    await clock.advance(1.0)
    assert await queue.get() == "late-first"
    queue.done("early-first")
    queue.done("late-first")
    await clock.advance(20.0)
    assert len(queue) == 0, "superseded deadlines add nothing"
    assert clock.sleepers == 0


async def test_add_after_zero_adds_now():
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add_after("a", 0)
    assert len(queue) == 1


def test_item_backoff_doubles_from_5ms_and_caps_at_1000s():
    backoff = ItemExponentialBackoff()
    assert [backoff.when("k") for _ in range(5)] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    delays = [backoff.when("k") for _ in range(20)]
    assert delays[12] == pytest.approx(0.005 * 2**17)  # 655.36s, the last uncapped step
    assert delays[13:] == [1000.0] * 7
    assert backoff.num_requeues("k") == 25
    assert backoff.when("other") == pytest.approx(0.005), "failures are counted per key"
    backoff.forget("k")
    assert backoff.num_requeues("k") == 0
    assert backoff.when("k") == pytest.approx(0.005)


def test_item_backoff_is_configurable_and_survives_huge_counts():
    backoff = ItemExponentialBackoff(base=1.0, cap=30.0)
    assert [backoff.when("k") for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    for _ in range(2000):
        backoff.when("k")
    assert backoff.when("k") == 30.0


async def test_token_bucket_allows_burst_then_qps():
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.when(3) == pytest.approx(0.1)
    assert bucket.when(4) == pytest.approx(0.2)
    await clock.advance(0.2)  # the two reserved tokens have now been produced
    assert bucket.when(5) == pytest.approx(0.1)
    await clock.advance(10.0)  # refills to the burst, never above
    assert [bucket.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.when(9) == pytest.approx(0.1)


async def test_default_limiter_is_max_of_backoff_and_bucket():
    clock = FakeClock()
    limiter = default_rate_limiter(clock)
    assert isinstance(limiter, MaxOf)
    assert [limiter.when(f"k{i}") for i in range(100)] == [pytest.approx(0.005)] * 100
    assert limiter.when("k100") == pytest.approx(0.1), "the 101st retry within a second waits for the bucket"
    assert limiter.num_requeues("k0") == 1
    limiter.forget("k0")
    assert limiter.num_requeues("k0") == 0


async def test_add_rate_limited_delays_by_backoff_and_forget_resets():
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 1 and queue.retries_total == 1
    await clock.advance(0.004)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert len(queue) == 1
    queue.done(await queue.get())
    queue.add_rate_limited("a")
    await clock.advance(0.0099)
    assert len(queue) == 0
    await clock.advance(0.0001)
    assert len(queue) == 1
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_shutdown_unblocks_pending_get():
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    assert not any(g.done() for g in getters)
    queue.shutdown()
    for getter in getters:
        with pytest.raises(QueueShutDown):
            await getter
    with pytest.raises(QueueShutDown):
        await queue.get()
    queue.add("late")
    assert len(queue) == 0 and queue.shutting_down


async def test_shutdown_cancels_delayed_adds():
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 5)
    await settle()
    queue.shutdown()
    await clock.advance(10)
    assert len(queue) == 0 and clock.sleepers == 0


async def test_cancelled_getter_does_not_swallow_a_key():
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("a")
    first.cancel()  # woken but cancelled before it ran: the wake-up passes to the next getter
    await settle()
    assert first.cancelled()
    assert second.done() and second.result() == "a"


async def test_counters_for_metrics():
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("workloads", clock=clock)
    queue.add("a")
    queue.add("b")
    assert queue.depth == 2
    await queue.get()
    await clock.advance(3)
    await queue.get()
    await clock.advance(1)
    assert queue.processing == 2
    assert queue.longest_running_processor_seconds() == pytest.approx(4)
    assert queue.unfinished_work_seconds() == pytest.approx(5)
    queue.done("a")
    queue.done("b")
    assert queue.longest_running_processor_seconds() == 0.0
    queue.add_rate_limited("a")
    assert queue.retries_total == 1 and queue.adds_total == 2
    queue.shutdown()


# --- property: any interleaving of adds, gets and dones

KEYS = ["a", "b", "c"]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(KEYS)),
        st.tuples(st.just("get"), st.just(0)),
        st.tuples(st.just("done"), st.integers(0, 5)),
        st.tuples(st.just("yield"), st.just(0)),
    ),
    max_size=60,
)


async def _interleave(ops: list[tuple[str, object]]) -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    getters: list[asyncio.Task[str]] = []
    held: list[str] = []
    owed: set[str] = set()  # keys added since they were last handed out

    def collect() -> None:
        for task in [t for t in getters if t.done()]:
            getters.remove(task)
            key = task.result()
            assert key not in held, f"{key} handed to two workers at once"
            held.append(key)
            owed.discard(key)

    for op, arg in ops:
        if op == "add":
            queue.add(str(arg))
            owed.add(str(arg))
        elif op == "get":
            getters.append(asyncio.create_task(queue.get()))
        elif op == "done" and held:
            queue.done(held.pop(int(str(arg)) % len(held)))
        await asyncio.sleep(0)
        collect()

    # Finish every held key and keep getting until the queue is empty: nothing owed may be lost.
    for _ in range(200):
        await settle(3)
        collect()
        if held:
            queue.done(held.pop(0))
        elif len(queue):
            getters.append(asyncio.create_task(queue.get()))
        else:
            break
    assert not owed, f"lost keys {owed}"
    queue.shutdown()
    results = await asyncio.gather(*getters, return_exceptions=True)
    assert all(isinstance(r, QueueShutDown) for r in results)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_interleavings_never_share_a_key_and_never_lose_one(ops):
    loop = asyncio.new_event_loop()  # a private loop per example; the session loop is untouched
    try:
        loop.run_until_complete(_interleave(ops))
    finally:
        loop.close()
