"""manager.metrics.ManagerMetrics.stage: each dispatch stage is observed once, in order, as the
time since the previous stage on the manager's monotonic clock; values read from the registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from kube_runtime.clock import FakeClock
from manager.metrics import STAGES, ManagerMetrics

HISTOGRAM = "kueue_federation_multikueue_dispatch_stage_seconds"
KEY = "team-a/job-sample-1a2b3"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics(registry: CollectorRegistry, clock: FakeClock) -> ManagerMetrics:
    return ManagerMetrics(registry, clock)


def count(registry: CollectorRegistry, stage: str) -> float:
    return registry.get_sample_value(f"{HISTOGRAM}_count", {"stage": stage}) or 0.0


def total(registry: CollectorRegistry, stage: str) -> float:
    return registry.get_sample_value(f"{HISTOGRAM}_sum", {"stage": stage}) or 0.0


def test_stage_order() -> None:
    assert STAGES == ("quota_reserved", "dispatched", "remote_admitted", "check_ready", "status_mirrored")


async def test_each_stage_observes_the_time_since_the_previous_one(
    metrics: ManagerMetrics, registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics.stage(KEY, "quota_reserved")
    for stage, seconds in zip(STAGES[1:], (0.5, 2.0, 0.25, 1.0), strict=True):
        await clock.advance(seconds)
        metrics.stage(KEY, stage)
    assert [count(registry, s) for s in STAGES[1:]] == [1, 1, 1, 1]
    assert [total(registry, s) for s in STAGES[1:]] == [0.5, 2.0, 0.25, 1.0]
    # The first stage only starts the clock.
    assert count(registry, "quota_reserved") == 0


async def test_a_repeated_stage_is_observed_once(
    metrics: ManagerMetrics, registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics.stage(KEY, "quota_reserved")
    await clock.advance(1)
    metrics.stage(KEY, "quota_reserved")  # does not restart the clock
    await clock.advance(1)
    metrics.stage(KEY, "dispatched")
    await clock.advance(5)
    metrics.stage(KEY, "dispatched")
    assert count(registry, "dispatched") == 1
    assert total(registry, "dispatched") == 2


async def test_a_stage_reached_out_of_order_is_ignored(
    metrics: ManagerMetrics, registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics.stage(KEY, "quota_reserved")
    await clock.advance(1)
    metrics.stage(KEY, "remote_admitted")  # skipped "dispatched"
    assert count(registry, "remote_admitted") == 0
    await clock.advance(1)
    metrics.stage(KEY, "dispatched")
    assert total(registry, "dispatched") == 2


async def test_stages_without_quota_reserved_first_are_ignored(
    metrics: ManagerMetrics, registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics.stage(KEY, "dispatched")
    await clock.advance(1)
    metrics.stage(KEY, "remote_admitted")
    assert all(count(registry, s) == 0 for s in STAGES)


async def test_keys_are_timed_independently(
    metrics: ManagerMetrics, registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics.stage("ns/a", "quota_reserved")
    await clock.advance(3)
    metrics.stage("ns/b", "quota_reserved")
    await clock.advance(1)
    metrics.stage("ns/a", "dispatched")
    metrics.stage("ns/b", "dispatched")
    assert count(registry, "dispatched") == 2
    assert total(registry, "dispatched") == 5


async def test_forget_drops_the_state_of_a_key(
    metrics: ManagerMetrics, registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics.stage(KEY, "quota_reserved")
    metrics.forget(KEY)
    await clock.advance(1)
    metrics.stage(KEY, "dispatched")
    assert count(registry, "dispatched") == 0
    metrics.forget("ns/never-seen")  # no error


async def test_after_the_last_stage_a_new_dispatch_starts_afresh(
    metrics: ManagerMetrics, registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics.stage(KEY, "quota_reserved")
    for stage in STAGES[1:]:
        await clock.advance(1)
        metrics.stage(KEY, stage)
    await clock.advance(100)
    metrics.stage(KEY, "dispatched")  # the finished dispatch left nothing behind
    assert count(registry, "dispatched") == 1
    metrics.stage(KEY, "quota_reserved")
    await clock.advance(2)
    metrics.stage(KEY, "dispatched")
    assert count(registry, "dispatched") == 2
    assert total(registry, "dispatched") == 3


def test_an_unknown_stage_is_a_programming_error(metrics: ManagerMetrics) -> None:
    with pytest.raises(ValueError):
        metrics.stage(KEY, "no_such_stage")


def test_cluster_status_gauge_follows_the_connection(
    metrics: ManagerMetrics, registry: CollectorRegistry
) -> None:
    def status(state: str) -> float | None:
        return registry.get_sample_value("multikueue_cluster_status", {"cluster": "w1", "status": state})

    metrics.set_cluster_connected("w1", True)
    assert (status("active"), status("inactive")) == (1, 0)
    metrics.set_cluster_connected("w1", False)
    assert (status("active"), status("inactive")) == (0, 1)
    metrics.set_cluster_connected("w1", None)
    assert (status("active"), status("inactive")) == (None, None)
    metrics.set_cluster_connected("never-seen", None)  # no error
