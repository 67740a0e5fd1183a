"""Two electors on a real Lease: takeover after expiry, transitions, and fast hand-over on release."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from kube_runtime.client import KubeClient
from kube_runtime.leaderelection import LeaderElector
from kueue_domain import api

pytestmark = pytest.mark.realcluster

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3, 2, 0.5
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


LEASE, NAMESPACE = api.LEASE, api.NAMESPACE


def elector(kube: KubeClient, namespace: str, identity: str, log: list[str]) -> LeaderElector:
    return LeaderElector(
        kube,
        namespace,
        "manager-lock",
        identity,
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
        on_started_leading=lambda: log.append(f"{identity} started"),
        on_stopped_leading=lambda: log.append(f"{identity} stopped"),
    )


async def test_takeover_after_expiry_and_fast_handover_on_release(kube, namespace):
    log: list[str] = []
    a, b = elector(kube, namespace, "a", log), elector(kube, namespace, "b", log)
    a.start()
    async with asyncio.timeout(10):
        await a.wait_leading()
    b.start()
    await asyncio.sleep(LEASE_DURATION + 1)  # longer than a lease: renewals keep a in charge
    assert a.is_leader and not b.is_leader and b.leader == "a"

    lease = await kube.get(LEASE, "manager-lock", namespace)
    spec = lease["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == LEASE_DURATION
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["acquireTime"]) and MICRO_TIME.match(spec["renewTime"])
    assert spec["renewTime"] > spec["acquireTime"]

    # a stops renewing without releasing (a crash, as far as b can tell).
    await a.stop(release=False)
    stopped = time.monotonic()
    assert log == ["a started", "a stopped"]
    async with asyncio.timeout(LEASE_DURATION + 3 * RETRY_PERIOD + 2):
        await b.wait_leading()
    took = time.monotonic() - stopped
    assert LEASE_DURATION - 2 * RETRY_PERIOD <= took <= LEASE_DURATION + 2.2 * RETRY_PERIOD + 1.5
    spec = (await kube.get(LEASE, "manager-lock", namespace))["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1

    # a comes back and waits; b releases on a clean stop, and a takes over well before expiry.
    a2 = elector(kube, namespace, "a", log)
    a2.start()
    await asyncio.sleep(1)
    assert not a2.is_leader
    await b.stop(release=True)
    released = time.monotonic()
    async with asyncio.timeout(LEASE_DURATION):
        await a2.wait_leading()
    assert time.monotonic() - released < 2.2 * RETRY_PERIOD + 1
    spec = (await kube.get(LEASE, "manager-lock", namespace))["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 2
    assert log == ["a started", "a stopped", "b started", "b stopped", "a started"]

    await a2.stop(release=True)
    spec = (await kube.get(LEASE, "manager-lock", namespace))["spec"]
    assert (
        spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1 and spec["leaseTransitions"] == 2
    )


async def test_a_concurrent_writer_loses_on_resource_version(kube, namespace):
    log: list[str] = []
    a, b = elector(kube, namespace, "a", log), elector(kube, namespace, "b", log)
    # Both race for an absent lease: exactly one wins.
    results = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
    assert sorted(results) == [False, True]
    winner = "a" if results[0] else "b"
    spec = (await kube.get(LEASE, "manager-lock", namespace))["spec"]
    assert spec["holderIdentity"] == winner
