"""worker_agent/admission/ without an apiserver: the status writes when it cannot be reached
(the scheduling loop waits for its pending-condition writes, so a connection error must come back
as a failed write, retried in the background, not as an exception that stops the loop), the
scheduling loop's pace (a cycle's evictions are written before the next cycle, as Kueue's are), and
the requeue interval a feature gate sets."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from kube_runtime.client import KubeClient
from kube_runtime.ratelimit import HIGH, LOW
from kueue_domain import features
from kueue_domain.config import parse_config
from worker_agent.admission import AdmissionState
from worker_agent.engine.scheduler import CycleResult, Preempt, Requeue

UNREACHABLE = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "c",
    # Port 1 on loopback: the connection is refused at once.
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
}

WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "Workload",
    "metadata": {"name": "wl", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
    "spec": {"queueName": "main", "podSets": []},
    "status": {},
}


@pytest.fixture
async def state():
    kube = await KubeClient.from_kubeconfig_dict(UNREACHABLE, request_timeout=5, connect_timeout=2)
    state = AdmissionState(kube, parse_config({}))
    state._newest = lambda key: WORKLOAD if key == "ns/wl" else None  # the informer's copy
    yield state
    await kube.close()


async def test_a_pending_write_to_an_unreachable_apiserver_fails_without_raising(state):
    decision = Requeue("ns/wl", "Pending", "couldn't assign flavors")
    assert await state._write_pending(decision, HIGH) is False
    assert "ns/wl" not in state._pending_written


async def test_the_cycle_hands_a_failed_pending_write_to_the_background_retry(state):
    decision = Requeue("ns/wl", "Pending", "couldn't assign flavors")
    result = CycleResult(heads=1)
    result.decisions.append(decision)
    await state.write_pending_conditions(result)  # does not raise
    assert state._pending_latest["ns/wl"] == decision
    assert "ns/wl" in state._pending_writers
    for task in list(state._tasks):
        task.cancel()


async def test_a_new_message_waits_for_the_interval_only_with_a_budget_above_50_qps():
    """Above 50 QPS a new message under the reason written last is held back for the message
    interval (no write storm with a raised budget); at Kueue's own budgets it is written in the
    cycle, as Kueue writes it."""
    kube = await KubeClient.from_kubeconfig_dict(UNREACHABLE)
    written = []

    async def write_pending(decision, lane=LOW):
        written.append((decision.message, lane))
        return True

    for qps in (20, 50, 500):
        state = AdmissionState(kube, parse_config({"clientConnection": {"qps": qps, "burst": 2 * qps}}))
        state._write_pending = write_pending
        state._newest = lambda key: WORKLOAD if key == "ns/wl" else None
        state._pending_written["ns/wl"] = ("Pending", "3 more needed")
        state._pending_written_at["ns/wl"] = state.clock.monotonic()  # just written
        written.clear()
        for message in ("3 more needed", "2 more needed"):
            result = CycleResult(heads=1)
            result.decisions.append(Requeue("ns/wl", "Pending", message))
            await state.write_pending_conditions(result)
        if qps > 50:
            assert written == [] and state._pending_latest["ns/wl"].message == "2 more needed"
        else:
            assert written == [("2 more needed", HIGH)], qps  # the unchanged one is not rewritten
        for task in list(state._tasks):
            task.cancel()
    await kube.close()


async def test_scheduler_long_requeue_interval_retries_parked_workloads_after_10_s():
    """Upstream's requeueLongBatchPeriod: with the gate, parked Workloads wait 10 s, not 1 s."""
    kube = await KubeClient.from_kubeconfig_dict(UNREACHABLE)
    periods = [
        AdmissionState(kube, parse_config({"featureGates": gates})).requeuer.period
        for gates in ({}, {features.SCHEDULER_LONG_REQUEUE_INTERVAL: True})
    ]
    await kube.close()
    assert periods == [1.0, 10.0]


async def test_the_next_cycle_starts_only_when_the_evictions_of_this_one_are_written(state):
    """Kueue issues a cycle's preemptions inside the cycle (IssuePreemptions) and waits for them."""
    cycles = 0

    def schedule_once():
        nonlocal cycles
        cycles += 1
        result = CycleResult(heads=1)
        if cycles == 1:
            result.decisions.append(Preempt("ns/victim", "InClusterQueue", "preempted", "ns/wl"))
        return result

    written = asyncio.Event()
    release = asyncio.Event()

    async def write_preemption(decision):
        await release.wait()
        written.set()

    state.schedule_once = schedule_once
    state._write_preemption = write_preemption
    loop = asyncio.get_running_loop().create_task(state.run_scheduler())
    try:
        await asyncio.sleep(0.3)
        assert cycles == 1, "a cycle started while the eviction of the one before was still being written"
        release.set()
        for _ in range(50):
            if cycles > 1:
                break
            await asyncio.sleep(0.02)
        assert written.is_set() and cycles > 1
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def test_the_scheduling_loop_stops_when_cancelled_as_it_is_woken(state, monkeypatch):
    """A cancel that lands in the same loop turn as a wake-up stops the loop (Python 3.11's
    asyncio.wait_for returned the wake-up and dropped the cancel, so an agent's shutdown hung)."""
    from worker_agent.admission import loop as admission

    monkeypatch.setattr(admission, "CYCLE_BACKOFF_INITIAL", 30.0)  # a cycle without progress waits 30 s
    cycles = 0

    def schedule_once():
        nonlocal cycles
        cycles += 1
        return CycleResult(heads=1)  # a head left where it was: no progress

    state.schedule_once = schedule_once
    loop = asyncio.get_running_loop().create_task(state.run_scheduler())
    await asyncio.sleep(0.05)
    assert cycles == 1 and not loop.done()
    state.wake.set()
    loop.cancel()
    done, _ = await asyncio.wait({loop}, timeout=2)
    assert loop in done and loop.cancelled(), f"the loop went on after its cancel ({cycles} cycles)"


async def test_the_decision_log_has_a_line_per_cycle_and_per_retry_of_parked_workloads():
    """`--decision-log`: what each cycle decided, and when parked workloads were retried."""
    import io
    import json

    from worker_agent.engine.scheduler import Admit

    kube = await KubeClient.from_kubeconfig_dict(UNREACHABLE)
    trace = io.StringIO()
    state = AdmissionState(kube, parse_config({}), decision_log=trace)
    result = CycleResult(heads=3)
    result.decisions += [
        Admit("ns/a", {"clusterQueue": "cq"}),
        Preempt("ns/victim", "InClusterQueue", "Preempted to accommodate a workload", "ns/big"),
        Requeue("ns/b", "Pending", "couldn't assign flavors to pod set main"),
    ]
    state._log_cycle(result)
    state.flush_now([])
    await kube.close()
    cycle, flush = (json.loads(line) for line in trace.getvalue().splitlines())
    assert cycle["heads"] == 3
    assert cycle["admit"] == ["ns/a"]
    assert cycle["preempt"] == [["ns/victim", "ns/big", "InClusterQueue"]]
    assert cycle["pending"] == [["ns/b", "Pending", "couldn't assign flavors to pod set main"]]
    assert flush["flush"] == [] and flush["t"] >= cycle["t"]


def test_a_priority_change_of_a_workload_holding_quota_retries_the_parked_ones(state):
    """Kueue's workload controller on PriorityChanged: a Workload that holds quota and changed its
    priority (e.g. a job's priority-class label lowered it) may now be preempted, so the parked
    Workloads of its ClusterQueue's cohort tree try again."""
    flushed = []
    state.request_flush = lambda names: flushed.append(list(names))
    admitted = {
        **WORKLOAD,
        "spec": {"queueName": "main", "priority": 300, "podSets": []},
        "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": []}},
    }
    state._route_workload(None, admitted)
    flushed.clear()
    state._route_workload(
        admitted, {**admitted, "metadata": {**admitted["metadata"], "resourceVersion": "8"}}
    )
    assert flushed == []  # nothing that matters to the parked ones changed
    lowered = {**admitted, "spec": {**admitted["spec"], "priority": 100}}
    state._route_workload(admitted, lowered)
    assert flushed == [["cq"]]
    assert state.snapshot.workloads["ns/wl"].priority == 100
