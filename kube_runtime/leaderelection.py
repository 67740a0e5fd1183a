"""Lease-based leader election with client-go's semantics (coordination.k8s.io/v1 Lease).

A candidate takes the Lease when it is absent, released (empty holder), already ours, or expired.
Expiry is judged by the candidate's own monotonic clock: the lease is expired when its record has not
changed for leaseDurationSeconds since this process last saw it change (no cross-host clock trust).
Updates use optimistic concurrency (resourceVersion); a 409 means another candidate won the race.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog

from kube_runtime import resources
from kube_runtime.client import ApiError, Conflict, ConnectionLost, KubeClient, NotFound
from kube_runtime.clock import Clock

log = structlog.get_logger(__name__)

Obj = dict[str, Any]


def format_micro_time(t: dt.datetime) -> str:
    """metav1.MicroTime as client-go writes it: `2026-01-01T00:00:00.000000Z`."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaderElectionRecord:
    """The Lease spec fields leader election reads and writes."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Obj) -> LeaderElectionRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=spec.get("holderIdentity") or "",
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            lease_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> Obj:
        spec: Obj = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class LeaseObserver:
    """The last Lease record this process saw and when (its own monotonic time) that record last changed."""

    def __init__(self) -> None:
        self.record: LeaderElectionRecord | None = None
        self.observed_at: float | None = None

    def observe(self, record: LeaderElectionRecord, now: float) -> None:
        if record != self.record:
            self.record = record
            self.observed_at = now

    def is_valid(self, now: float, default_duration: float) -> bool:
        """True while the observed holder's lease has not run out by our clock."""
        if self.record is None or self.observed_at is None:
            return False
        duration = self.record.lease_duration_seconds or default_duration
        return self.observed_at + duration > now

    def held_by_other(self, identity: str, now: float, default_duration: float) -> bool:
        """Someone else holds a lease that has not expired: we must not take it."""
        record = self.record
        if record is None or not record.holder_identity or record.holder_identity == identity:
            return False
        return self.is_valid(now, default_duration)


def next_record(
    observed: LeaderElectionRecord | None, identity: str, now: dt.datetime, lease_duration: int
) -> LeaderElectionRecord:
    """The record to write when `identity` acquires or renews (keeps acquireTime/transitions on renew)."""
    stamp = format_micro_time(now)
    if observed is not None and observed.holder_identity == identity:
        return replace(
            observed,
            lease_duration_seconds=lease_duration,
            renew_time=stamp,
            acquire_time=observed.acquire_time or stamp,
        )
    transitions = observed.lease_transitions + 1 if observed is not None else 0
    return LeaderElectionRecord(identity, lease_duration, stamp, stamp, transitions)


def released_record(observed: LeaderElectionRecord, now: dt.datetime) -> LeaderElectionRecord:
    """client-go's ReleaseOnCancel record: no holder, 1s duration, transitions unchanged."""
    stamp = format_micro_time(now)
    return LeaderElectionRecord("", 1, stamp, stamp, observed.lease_transitions)


Callback = Callable[[], Any]


class LeaderElector:
    """Campaigns for one Lease; `on_started_leading` runs while leading (async: cancelled on loss)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        clock: Clock | None = None,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= 1.2 * retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 * retry_period")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock or Clock()
        self._on_started_leading = on_started_leading
        self._on_stopped_leading = on_stopped_leading
        self.observer = LeaseObserver()
        self._lease: Obj | None = None  # last Lease object read or written (its resourceVersion)
        self._is_leader = False
        self._leading = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._leading_task: asyncio.Task[Any] | None = None
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    # -- state -------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @property
    def leader(self) -> str:
        """The holder identity last observed ("" if none)."""
        return self.observer.record.holder_identity if self.observer.record else ""

    async def wait_leading(self) -> None:
        await self._leading.wait()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"leader-election-{self.name}")

    async def stop(self, release: bool = True) -> None:
        """Stop campaigning; with `release` (client-go ReleaseOnCancel) hand the lease over at once."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        was_leader = self._is_leader
        # Stop our leader-only work first, so it never overlaps with the next leader's.
        await self._stop_leading()
        if release and was_leader:
            await self.release()

    async def run(self) -> None:
        """Acquire, lead until a renewal misses renew_deadline, then campaign again; forever."""
        while True:
            await self._acquire()
            await self._start_leading()
            try:
                await self._renew_loop()
            finally:
                if not _cancelling():  # on cancellation stop() steps down (and maybe releases)
                    await self._stop_leading()

    # -- the protocol ------------------------------------------------------------------------

    async def _acquire(self) -> None:
        while True:
            if await self._attempt(self.renew_deadline):
                self._log.info("acquired lease")
                return
            # client-go jitters the acquire retry by a factor of 1.2.
            await self._clock.sleep(self.retry_period * (1 + random.uniform(0, 1.2)))

    async def _renew_loop(self) -> None:
        while True:
            await self._clock.sleep(self.retry_period)
            started = self._clock.monotonic()
            while True:
                remaining = self.renew_deadline - (self._clock.monotonic() - started)
                if remaining <= 0:
                    self._log.warning("failed to renew lease within the renew deadline, stepping down")
                    return
                if await self._attempt(remaining):
                    break
                if self.observer.held_by_other(self.identity, self._clock.monotonic(), self.lease_duration):
                    self._log.warning("lease taken by another candidate", holder=self.leader)
                    return
                await self._clock.sleep(min(self.retry_period, remaining))

    async def _attempt(self, budget: float) -> bool:
        try:
            async with asyncio.timeout(max(budget, 0.1)):
                return await self.try_acquire_or_renew()
        except (TimeoutError, ConnectionLost, ApiError) as exc:
            self._log.info("lease update failed", error=str(exc) or type(exc).__name__)
            return False

    async def try_acquire_or_renew(self) -> bool:
        """One round: True if we hold the lease after it."""
        now_mono = self._clock.monotonic()
        now = self._clock.now()
        duration = int(self.lease_duration)
        if await self._renew_optimistically(now, now_mono, duration):
            return True
        try:
            lease = await self.client.get(resources.LEASE, self.name, self.namespace)
        except NotFound:
            record = next_record(None, self.identity, now, duration)
            body = {
                "apiVersion": resources.LEASE.api_version,
                "kind": resources.LEASE.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.to_spec(),
            }
            try:
                created = await self.client.create(resources.LEASE, body)
            except Conflict:
                return False
            self._lease = created
            self.observer.observe(LeaderElectionRecord.from_lease(created), now_mono)
            return True
        self._lease = lease
        observed = LeaderElectionRecord.from_lease(lease)
        self.observer.observe(observed, now_mono)
        if self.observer.held_by_other(self.identity, now_mono, self.lease_duration):
            return False
        return await self._write(lease, next_record(observed, self.identity, now, duration), now_mono)

    async def _write(self, lease: Obj, record: LeaderElectionRecord, now_mono: float) -> bool:
        """Replace `lease` with `record` as its spec; it carries its resourceVersion, so a 409
        (False) means the Lease changed since it was read."""
        body = copy.deepcopy(lease)
        body["spec"] = {**(lease.get("spec") or {}), **record.to_spec()}
        try:
            updated = await self.client.replace(resources.LEASE, body)
        except Conflict:
            return False
        self._lease = updated
        self.observer.observe(LeaderElectionRecord.from_lease(updated), now_mono)
        return True

    async def _renew_optimistically(self, now: dt.datetime, now_mono: float, duration: int) -> bool:
        """client-go's fast path: the leader, whose lease has not run out, renews over the Lease
        it wrote last, without reading it first (one request a renewal, not two). A conflict (the
        Lease changed since) sends it down the slow path: read, then decide."""
        lease = self._lease
        if not self._is_leader or lease is None or not self.observer.is_valid(now_mono, self.lease_duration):
            return False
        observed = LeaderElectionRecord.from_lease(lease)
        if observed.holder_identity != self.identity:
            return False
        try:
            return await self._write(lease, next_record(observed, self.identity, now, duration), now_mono)
        except NotFound:
            return False

    async def release(self) -> bool:
        """Give the lease up (empty holder) if we hold it; True if released."""
        lease = self._lease
        for _ in range(2):
            if lease is None or LeaderElectionRecord.from_lease(lease).holder_identity != self.identity:
                return False
            body = copy.deepcopy(lease)
            record = released_record(LeaderElectionRecord.from_lease(lease), self._clock.now())
            body["spec"] = {**(lease.get("spec") or {}), **record.to_spec()}
            try:
                self._lease = await self.client.replace(resources.LEASE, body)
                self.observer.observe(LeaderElectionRecord.from_lease(self._lease), self._clock.monotonic())
                self._log.info("released lease")
                return True
            except Conflict:
                lease = await self._get_quietly()
            except (ConnectionLost, ApiError) as exc:
                self._log.warning("failed to release lease", error=str(exc))
                return False
        return False

    async def _get_quietly(self) -> Obj | None:
        try:
            return await self.client.get(resources.LEASE, self.name, self.namespace)
        except (ConnectionLost, ApiError):
            return None

    # -- callbacks ---------------------------------------------------------------------------

    async def _start_leading(self) -> None:
        self._is_leader = True
        self._leading.set()
        if self._on_started_leading is None:
            return
        try:
            result = self._on_started_leading()
        except Exception:
            self._log.exception("on_started_leading failed")
            return
        if inspect.isawaitable(result):
            self._leading_task = asyncio.ensure_future(result)

    async def _stop_leading(self) -> None:
        if not self._is_leader:
            return
        self._is_leader = False
        self._leading.clear()
        task, self._leading_task = self._leading_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._log.info("stopped leading")
        if self._on_stopped_leading is None:
            return
        try:
            result = self._on_stopped_leading()
            if inspect.isawaitable(result):
                await result
        except Exception:
            self._log.exception("on_stopped_leading failed")


def _cancelling() -> bool:
    task = asyncio.current_task()
    return bool(task is not None and task.cancelling())
