"""kube_runtime.ratelimit: per-resource token buckets with a HIGH and a LOW lane."""

import asyncio

import pytest

from kube_runtime.clock import FakeClock
from kube_runtime.ratelimit import (
    HIGH,
    LOW,
    PriorityTokenBucket,
    ResourceRateLimits,
    priority,
    resource_type_of_path,
)


async def settle():
    for _ in range(10):
        await asyncio.sleep(0)


def start(order: list, bucket: PriorityTokenBucket, name: str, lane: int | None = None) -> asyncio.Task:
    async def go():
        await bucket.acquire(lane)
        order.append(name)

    return asyncio.get_running_loop().create_task(go())


async def test_burst_at_once_then_qps():
    clock = FakeClock()
    bucket = PriorityTokenBucket(qps=10, burst=3, clock=clock)
    order: list[str] = []
    tasks = [start(order, bucket, f"r{i}") for i in range(5)]
    await settle()
    assert order == ["r0", "r1", "r2"]
    await clock.advance(0.1)
    assert order == ["r0", "r1", "r2", "r3"]
    await clock.advance(0.1)
    assert order[-1] == "r4"
    await asyncio.gather(*tasks)
    await clock.advance(10.0)  # refills to the burst, never above
    tasks = [start(order, bucket, f"s{i}") for i in range(4)]
    await settle()
    assert order[-3:] == ["s0", "s1", "s2"] and "s3" not in order
    await clock.advance(0.1)
    await asyncio.gather(*tasks)


async def test_high_lane_is_served_before_low_lane_waiters():
    clock = FakeClock()
    bucket = PriorityTokenBucket(qps=10, burst=1, clock=clock)
    order: list[str] = []
    tasks = [start(order, bucket, "first")]
    await settle()
    tasks += [start(order, bucket, f"low{i}", LOW) for i in range(2)]
    await settle()
    tasks += [start(order, bucket, f"high{i}", HIGH) for i in range(2)]
    await settle()
    assert bucket.waiting(LOW) == 2 and bucket.waiting(HIGH) == 2
    for _ in range(4):
        await clock.advance(0.1)
    assert order == ["first", "high0", "high1", "low0", "low1"]
    await asyncio.gather(*tasks)


async def test_priority_context_sets_the_lane_of_the_current_task():
    clock = FakeClock()
    bucket = PriorityTokenBucket(qps=10, burst=1, clock=clock)
    order: list[str] = []
    await bucket.acquire()  # takes the only token

    async def low():
        with priority(LOW):
            await bucket.acquire()
        order.append("low")

    tasks = [asyncio.get_running_loop().create_task(low())]
    await settle()
    tasks.append(start(order, bucket, "high"))
    await settle()
    await clock.advance(0.1)
    await clock.advance(0.1)
    assert order == ["high", "low"]
    await asyncio.gather(*tasks)
    with pytest.raises(ValueError):
        with priority(7):
            pass


async def test_a_cancelled_waiter_costs_no_token():
    clock = FakeClock()
    bucket = PriorityTokenBucket(qps=10, burst=1, clock=clock)
    order: list[str] = []
    await bucket.acquire()
    gone = start(order, bucket, "gone")
    kept = start(order, bucket, "kept")
    await settle()
    gone.cancel()
    await settle()
    await clock.advance(0.1)
    assert order == ["kept"]
    await kept


async def test_each_resource_has_its_own_budget():
    clock = FakeClock()
    limits = ResourceRateLimits(qps=1, burst=1, clock=clock)
    await limits.acquire("/apis/kueue.x-k8s.io/v1beta1/namespaces/a/workloads/w1/status")
    # Another resource does not wait behind workloads.
    await asyncio.wait_for(limits.acquire("/apis/kueue.x-k8s.io/v1beta1/clusterqueues/cq/status"), 1)
    await asyncio.wait_for(limits.acquire("/apis/events.k8s.io/v1/namespaces/a/events"), 1)
    # The same resource (any namespace, any subresource) does.
    waiter = asyncio.get_running_loop().create_task(
        limits.acquire("/apis/kueue.x-k8s.io/v1beta1/namespaces/b/workloads/w2")
    )
    await settle()
    assert not waiter.done()
    await clock.advance(1.0)
    await waiter
    with pytest.raises(ValueError):
        ResourceRateLimits(qps=0, burst=1)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/namespaces", "v1/namespaces"),
        ("/api/v1/namespaces/x", "v1/namespaces"),
        ("/api/v1/namespaces/x/pods/p/status", "v1/pods"),
        ("/api/v1/nodes", "v1/nodes"),
        ("/apis/kueue.x-k8s.io/v1beta1/workloads", "kueue.x-k8s.io/v1beta1/workloads"),
        ("/apis/kueue.x-k8s.io/v1beta1/namespaces/n/workloads/w/status", "kueue.x-k8s.io/v1beta1/workloads"),
        ("/apis/batch/v1/namespaces/n/jobs?watch=true", "batch/v1/jobs"),
        ("/version", "version"),
    ],
)
def test_resource_type_of_path(path, expected):
    assert resource_type_of_path(path) == expected


async def test_turn_waits_in_its_lane_and_prepays_the_first_request_of_the_block():
    clock = FakeClock()
    limits = ResourceRateLimits(qps=10, burst=1, clock=clock)
    path = "/apis/kueue.x-k8s.io/v1beta1/namespaces/a/workloads/w/status"
    await limits.acquire(path)  # the only token
    order: list[str] = []

    async def pending_write():
        async with limits.turn(path, LOW):
            order.append("decided")
            await limits.acquire(path)  # uses the token the turn waited for
            order.append("sent")
            await limits.acquire(path)  # a second request needs its own
            order.append("second")

    async def admission_write():
        await limits.acquire(path)
        order.append("admission")

    low = asyncio.get_running_loop().create_task(pending_write())
    await settle()
    high = asyncio.get_running_loop().create_task(admission_write())
    await settle()
    await clock.advance(0.1)
    assert order == ["admission"], "the HIGH request waiting behind it goes first"
    await clock.advance(0.1)
    assert order == ["admission", "decided", "sent"]
    await clock.advance(0.1)
    assert order[-1] == "second"
    await asyncio.gather(low, high)


async def test_a_turn_that_sends_nothing_gives_its_token_back():
    clock = FakeClock()
    limits = ResourceRateLimits(qps=1, burst=1, clock=clock)
    path = "/apis/kueue.x-k8s.io/v1beta1/namespaces/a/workloads/w/status"
    async with limits.turn(path, LOW):
        pass  # decided that nothing needs writing
    # The token is still there: the next request does not wait.
    await asyncio.wait_for(limits.acquire(path), 1)
    waiter = asyncio.get_running_loop().create_task(limits.acquire(path))
    await settle()
    assert not waiter.done(), "and there was only one"
    await clock.advance(1.0)
    await waiter


async def test_low_lane_uses_spare_budget_only_or_after_its_maximum_wait():
    clock = FakeClock()
    bucket = PriorityTokenBucket(qps=10, burst=4, clock=clock, low_max_wait=1.0)
    for _ in range(4):
        await bucket.acquire()  # the budget is spent
    order: list[str] = []
    low = start(order, bucket, "low", LOW)
    await settle()
    await clock.advance(0.1)  # one token: enough for HIGH, not spare budget for LOW
    assert order == []
    high = start(order, bucket, "high", HIGH)
    await settle()
    assert order == ["high"], "HIGH takes the token at once"
    await clock.advance(0.2)  # two tokens = half the burst: spare budget
    assert order == ["high", "low"]
    await asyncio.gather(low, high)
    # Saturated: HIGH requests keep the bucket empty; LOW goes after waiting low_max_wait.
    highs = [start(order, bucket, f"h{i}", HIGH) for i in range(40)]
    await settle()
    low = start(order, bucket, "low2", LOW)
    await settle()
    for _ in range(8):
        await clock.advance(0.1)
    assert "low2" not in order and order[-1].startswith("h"), "still waiting behind HIGH"
    for _ in range(4):
        await clock.advance(0.1)
    assert "low2" in order
    assert order.index("low2") < len(order) - 1 or any(not t.done() for t in highs)
    await clock.advance(10.0)
    await asyncio.gather(low, *highs)
