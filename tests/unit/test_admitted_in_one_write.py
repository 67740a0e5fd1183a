"""Admitted in the manager's check-Ready write: the MultiKueue manager sets its check Ready,
`clusterName` and, when every check is Ready, Admitted in one apply (upstream's manager cluster
takes a second write for Admitted, from its workload controller). The manager cluster's
worker_agent records the Admitted Event and metrics when it sees an admission it did not write,
and only then."""

from __future__ import annotations

import asyncio
import datetime as dt
import types

from kube_runtime.clock import FakeClock
from kube_runtime.ownwrites import OwnWrites
from kueue_domain import api
from manager.workload_status import WorkloadStatus
from worker_agent.admission import AdmissionState
from worker_agent.engine import Snapshot

NOW = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)


class RecordingKube:
    def __init__(self) -> None:
        self.bodies: list[dict] = []

    async def apply_status(self, resource, body, field_manager, force=False):
        self.bodies.append(body)
        return body


def condition(type_: str, status: str = "True", at: str = "2026-11-29T11:59:50Z") -> dict:
    return {"type": type_, "status": status, "reason": type_, "message": "", "lastTransitionTime": at}


def check(name: str, state: str) -> dict:
    return {"name": name, "state": state, "message": "", "lastTransitionTime": "2026-11-29T11:59:50Z"}


def workload(*checks: dict, admitted: bool = False) -> dict:
    conditions = [condition(api.WORKLOAD_QUOTA_RESERVED)]
    if admitted:
        conditions.append(condition(api.WORKLOAD_ADMITTED, at="2026-11-29T12:00:00Z"))
    return {
        "apiVersion": api.WORKLOAD.api_version,
        "kind": api.WORKLOAD.kind,
        "metadata": {
            "name": "job-j-1a2b3",
            "namespace": "team-a",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-29T11:59:40Z",
        },
        "spec": {"queueName": "user-queue"},
        "status": {
            "conditions": conditions,
            "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": []},
            "admissionChecks": list(checks),
            "nominatedClusterNames": ["worker1", "worker2"],
        },
    }


def reconciler(kube: RecordingKube) -> types.SimpleNamespace:
    r = types.SimpleNamespace(kube=kube, clock=FakeClock(NOW), external_nominations=False)
    r._set_state = lambda *a, **k: WorkloadStatus._set_state(r, *a, **k)  # type: ignore[arg-type]
    r._apply_status = lambda *a: WorkloadStatus._apply_status(r, *a)  # type: ignore[arg-type]
    r._own_writes = OwnWrites()
    return r


async def mark_ready(wl: dict) -> dict:
    kube = RecordingKube()
    await WorkloadStatus.mark_ready(  # type: ignore[arg-type]
        reconciler(kube), wl, check("sample-multikueue", "Pending"), "worker1", 'admitted on "worker1"', True
    )
    (body,) = kube.bodies
    return body["status"]


def types_of(status: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


async def test_the_check_ready_write_admits_when_it_is_the_last_check():
    status = await mark_ready(workload(check("sample-multikueue", "Pending")))
    assert status["admissionChecks"][0]["state"] == "Ready"
    assert status["clusterName"] == "worker1"
    assert "nominatedClusterNames" not in status
    assert types_of(status)[api.WORKLOAD_ADMITTED] == "True"
    admitted = next(c for c in status["conditions"] if c["type"] == api.WORKLOAD_ADMITTED)
    assert (admitted["reason"], admitted["message"]) == ("Admitted", "The workload is admitted")


async def test_another_check_still_pending_leaves_admitted_to_later():
    status = await mark_ready(
        workload(check("sample-multikueue", "Pending"), check("provisioning", "Pending"))
    )
    assert status["clusterName"] == "worker1"
    assert api.WORKLOAD_ADMITTED not in types_of(status)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def event(self, obj, type_, reason, action, note):
        self.events.append((type_, reason, note))


class Metrics:
    def __init__(self) -> None:
        self.admitted_calls: list[tuple[str, float]] = []

    def admitted(self, cq: str, wait: float) -> None:
        self.admitted_calls.append((cq, wait))


def agent_state() -> types.SimpleNamespace:
    tasks: list[asyncio.Task] = []
    state = types.SimpleNamespace(
        _own_admissions=set(),
        clock=FakeClock(NOW),
        metrics=Metrics(),
        recorder=Recorder(),
        cluster_queue_for=lambda wl: wl["status"]["admission"]["clusterQueue"],
        _spawn=lambda coro: tasks.append(asyncio.ensure_future(coro)),
        tasks=tasks,
    )
    state.announce_admitted = lambda *a: AdmissionState.announce_admitted(state, *a)  # type: ignore[arg-type]
    state.snapshot = Snapshot()  # no cohorts: the cohort counters are not touched
    state.count_admitted_in_cohorts = lambda *a: AdmissionState.count_admitted_in_cohorts(state, *a)  # type: ignore[arg-type]
    state.seen = lambda old, new: AdmissionState._admitted_elsewhere(state, old, new)  # type: ignore[arg-type]
    return state


async def test_the_agent_announces_an_admission_written_by_the_manager_once():
    state = agent_state()
    before = workload(check("sample-multikueue", "Pending"))
    after = workload(check("sample-multikueue", "Ready"), admitted=True)
    state.seen(before, after)
    state.seen(after, after)  # a later event of the admitted Workload: nothing new
    await asyncio.gather(*state.tasks)
    assert state.recorder.events == [
        (
            "Normal",
            "Admitted",
            "Admitted by ClusterQueue cluster-queue, wait time since reservation was 10s",
        )
    ]
    assert state.metrics.admitted_calls == [("cluster-queue", 20.0)]


async def test_the_agent_does_not_announce_its_own_admissions_twice():
    state = agent_state()
    before = workload(check("sample-multikueue", "Ready"))
    after = workload(check("sample-multikueue", "Ready"), admitted=True)
    AdmissionState.note_own_admission(state, "team-a/job-j-1a2b3")  # type: ignore[arg-type]
    state.seen(before, after)  # the workload controller's own write
    no_reservation = workload()
    no_reservation["status"]["conditions"] = []
    state.seen(no_reservation, after)  # the scheduler's admission: announced where it was written
    state.seen(None, after)  # a first list (a restart): nothing is announced again
    await asyncio.gather(*state.tasks)
    assert state.recorder.events == [] and state.metrics.admitted_calls == []
    assert state._own_admissions == set()
