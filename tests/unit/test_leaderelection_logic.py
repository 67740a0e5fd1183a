"""Lease-expiry decisions and the elector loop, on a FakeClock with an in-memory Lease."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt

from kube_runtime.client import AlreadyExists, Conflict, NotFound
from kube_runtime.clock import FakeClock
from kube_runtime.leaderelection import (
    LeaderElectionRecord,
    LeaderElector,
    LeaseObserver,
    format_micro_time,
    next_record,
    released_record,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_micro_time_format_matches_client_go():
    assert format_micro_time(T0) == "2026-01-01T00:00:00.000000Z"
    assert format_micro_time(T0 + dt.timedelta(microseconds=1500)) == "2026-01-01T00:00:00.001500Z"


def test_lease_held_by_other_expires_by_our_clock_since_last_change():
    clock = FakeClock()
    observer = LeaseObserver()
    held = LeaderElectionRecord("a", 15, "t0", "t0", 0)
    observer.observe(held, clock.monotonic())
    assert observer.held_by_other("b", clock.monotonic(), 15)
    # The holder's renewTime does not matter, only when we saw the record change.
    observer.observe(held, clock.monotonic() + 14.9)
    assert observer.held_by_other("b", clock.monotonic() + 14.9, 15)
    assert not observer.held_by_other("b", clock.monotonic() + 15, 15)
    # A renewal (any change) restarts the count.
    renewed = LeaderElectionRecord("a", 15, "t0", "t1", 0)
    observer.observe(renewed, clock.monotonic() + 10)
    assert observer.held_by_other("b", clock.monotonic() + 24, 15)
    assert not observer.held_by_other("b", clock.monotonic() + 25, 15)


def test_lease_duration_comes_from_the_record_when_set():
    observer = LeaseObserver()
    observer.observe(LeaderElectionRecord("a", 40, "t", "t", 0), 0.0)
    assert observer.held_by_other("b", 30.0, 15)
    observer.observe(LeaderElectionRecord("a", 0, "t", "t", 0), 0.0)
    assert not observer.held_by_other("b", 30.0, 15)


def test_own_or_released_lease_is_never_held_by_other():
    observer = LeaseObserver()
    observer.observe(LeaderElectionRecord("a", 15, "t", "t", 3), 0.0)
    assert not observer.held_by_other("a", 1.0, 15)
    observer.observe(LeaderElectionRecord("", 1, "t", "t", 3), 0.0)
    assert not observer.held_by_other("b", 0.0, 15)


def test_next_record_renews_or_takes_over():
    first = next_record(None, "a", T0, 15)
    assert first == LeaderElectionRecord("a", 15, format_micro_time(T0), format_micro_time(T0), 0)
    later = T0 + dt.timedelta(seconds=2)
    renewed = next_record(first, "a", later, 15)
    assert renewed.acquire_time == first.acquire_time
    assert renewed.renew_time == format_micro_time(later)
    assert renewed.lease_transitions == 0
    taken = next_record(renewed, "b", later, 15)
    assert (taken.holder_identity, taken.lease_transitions, taken.acquire_time) == (
        "b",
        1,
        format_micro_time(later),
    )
    released = released_record(taken, later)
    assert (released.holder_identity, released.lease_duration_seconds, released.lease_transitions) == (
        "",
        1,
        1,
    )
    assert next_record(released, "a", later, 15).lease_transitions == 2


class FakeLeaseClient:
    """Just enough of KubeClient for Leases, with resourceVersion checks like the apiserver."""

    def __init__(self) -> None:
        self.lease: dict | None = None
        self.rv = 0
        self.down = False
        self.calls: list[str] = []

    def _check(self) -> None:
        if self.down:
            from kube_runtime.client import ConnectionLost

            raise ConnectionLost("apiserver unreachable")

    async def get(self, resource, name, namespace=None):
        self.calls.append("get")
        self._check()
        if self.lease is None:
            raise NotFound({"code": 404})
        return copy.deepcopy(self.lease)

    async def create(self, resource, obj, namespace=None):
        self._check()
        if self.lease is not None:
            raise AlreadyExists({"code": 409, "reason": "AlreadyExists"})
        self.rv += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)

    async def replace(self, resource, obj, namespace=None):
        self.calls.append("replace")
        self._check()
        if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise Conflict({"code": 409, "reason": "Conflict"})
        self.rv += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)

    @property
    def spec(self) -> dict:
        return self.lease["spec"]


async def settle(clock: FakeClock, seconds: float, step: float = 0.25) -> None:
    for _ in range(int(seconds / step)):
        await clock.advance(step)


async def test_elector_takes_over_after_expiry_and_steps_down_when_renewal_fails():
    clock = FakeClock(start=T0)
    api = FakeLeaseClient()
    events: list[str] = []
    a = LeaderElector(
        api, "ns", "lock", "a", 4, 3, 1, clock=clock,
        on_started_leading=lambda: events.append("a+"), on_stopped_leading=lambda: events.append("a-"),
    )  # fmt: skip
    b = LeaderElector(
        api, "ns", "lock", "b", 4, 3, 1, clock=clock,
        on_started_leading=lambda: events.append("b+"), on_stopped_leading=lambda: events.append("b-"),
    )  # fmt: skip
    a.start()
    await settle(clock, 0.5)
    b.start()
    await settle(clock, 3)
    assert a.is_leader and not b.is_leader and api.spec["holderIdentity"] == "a"
    assert api.spec["renewTime"].endswith("Z") and "." in api.spec["renewTime"]

    await a.stop(release=False)  # a vanishes without releasing
    assert events == ["a+", "a-"]
    # a renewed at most retry_period (1 s) before stopping, and b saw that renewal no earlier,
    # so by b's clock the lease (4 s) cannot expire within 2 s.
    await settle(clock, 2)
    assert not b.is_leader
    # b saw the last renewal at most 2.2 s after it (jittered polls), it expires 4 s after that,
    # and b's next poll comes at most 2.2 s later: 9 s is enough.
    await settle(clock, 7)
    assert b.is_leader and api.spec["holderIdentity"] == "b"
    assert api.spec["leaseTransitions"] == 1

    api.down = True  # b cannot renew: after renew_deadline it steps down
    await settle(clock, 5)
    assert not b.is_leader and events[-1] == "b-"
    await b.stop()


async def test_release_hands_over_at_once():
    clock = FakeClock(start=T0)
    api = FakeLeaseClient()
    a = LeaderElector(api, "ns", "lock", "a", 15, 10, 2, clock=clock)
    b = LeaderElector(api, "ns", "lock", "b", 15, 10, 2, clock=clock)
    a.start()
    await settle(clock, 1)
    b.start()
    await settle(clock, 5)
    assert a.is_leader and not b.is_leader
    await a.stop(release=True)
    assert api.spec["holderIdentity"] == "" and api.spec["leaseDurationSeconds"] == 1
    await settle(clock, 5)  # well under lease_duration
    assert b.is_leader and api.spec["leaseTransitions"] == 1
    await b.stop()


async def test_async_leader_work_is_cancelled_on_step_down():
    clock = FakeClock(start=T0)
    api = FakeLeaseClient()
    cancelled = asyncio.Event()

    async def lead() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    a = LeaderElector(api, "ns", "lock", "a", 4, 3, 1, clock=clock, on_started_leading=lead)
    a.start()
    await settle(clock, 1)
    assert a.is_leader and not cancelled.is_set()
    api.down = True
    await settle(clock, 5)
    assert not a.is_leader and cancelled.is_set()
    await a.stop()


async def test_the_leader_renews_with_one_request_and_reads_again_after_a_conflict():
    clock = FakeClock(start=T0)
    api = FakeLeaseClient()
    a = LeaderElector(api, "ns", "lock", "a", 15, 10, 2, clock=clock)
    a.start()
    await settle(clock, 1)
    assert a.is_leader
    api.calls.clear()
    await settle(clock, 6)  # three renewals, each over the Lease written last: no read
    assert api.calls == ["replace"] * 3
    first_renewal = api.spec["renewTime"]
    # Somebody else writes the Lease (a kubectl edit, say): the next renewal conflicts, reads it
    # and renews over what it read, in the same round, and the leader keeps leading.
    api.lease["metadata"]["annotations"] = {"touched": "yes"}
    api.rv += 1
    api.lease["metadata"]["resourceVersion"] = str(api.rv)
    api.calls.clear()
    await settle(clock, 2)
    assert api.calls == ["replace", "get", "replace"]
    assert a.is_leader and api.spec["holderIdentity"] == "a" and api.spec["renewTime"] > first_renewal
    assert api.lease["metadata"]["annotations"] == {"touched": "yes"}
    await a.stop()


async def test_a_leader_whose_lease_was_taken_stops_leading():
    clock = FakeClock(start=T0)
    api = FakeLeaseClient()
    a = LeaderElector(api, "ns", "lock", "a", 4, 3, 1, clock=clock)
    a.start()
    await settle(clock, 1)
    assert a.is_leader
    taken = next_record(LeaderElectionRecord.from_lease(api.lease), "b", T0, 4)
    api.lease["spec"] = taken.to_spec()
    api.rv += 1
    api.lease["metadata"]["resourceVersion"] = str(api.rv)
    await settle(clock, 4)  # the optimistic renewal conflicts; the read shows b's lease, held
    assert not a.is_leader and api.spec["holderIdentity"] == "b"
    await a.stop()
