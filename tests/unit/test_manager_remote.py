"""manager.remote: the reconnect backoff schedule, the watch-establish timeout, the connection state
the worker-lost grace period reads, and `refresh` honouring its backoff window (upstream
TestReconnectBackoff, TestConnectionStateTransitions, TestActiveConditionSurfacesBackoff,
TestEstablishBackoffSchedule)."""

from __future__ import annotations

import datetime as dt

import pytest

from kube_runtime.client import NotFound
from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.adapters.base import foreign_object
from manager.clusters import Remotes
from manager.remote import (
    COPY_HOLDING,
    COPY_REFUSED,
    COPY_WAITING,
    FINISHED_GONE_KEEP_SECONDS,
    NO_FOREIGN_OBJECT_TTL_SECONDS,
    ConnectError,
    RemoteClient,
    copy_state,
    establish_timeout,
    finished_state,
    job_end_condition,
    retry_after,
)

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "w1"}]}
OTHER_KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "w1-rotated"}]}


def new_client(clock: FakeClock) -> RemoteClient:
    return RemoteClient(
        "worker1", "multikueue", [], clock, on_event=lambda _cluster, _keys: None, on_lost=lambda _c: None
    )


class FakeConnect:
    """Stands in for RemoteClient._connect: fails while `failing`, and counts its calls."""

    def __init__(self, failing: bool = True, error: str = "connection refused") -> None:
        self.failing = failing
        self.error = error
        self.calls: list[dict] = []

    async def __call__(self, kubeconfig: dict) -> None:
        self.calls.append(kubeconfig)
        if self.failing:
            raise ConnectError(self.error)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=START)


@pytest.fixture
def connect(monkeypatch: pytest.MonkeyPatch) -> FakeConnect:
    fake = FakeConnect()

    async def patched(self: RemoteClient, kubeconfig: dict) -> None:
        await fake(kubeconfig)

    monkeypatch.setattr(RemoteClient, "_connect", patched)
    return fake


# -- schedules ---------------------------------------------------------------------------------


def test_retry_after_doubles_from_5s_and_saturates_at_320s() -> None:
    assert [retry_after(n) for n in range(11)] == [0, 5, 10, 20, 40, 80, 160, 320, 320, 320, 320]
    assert retry_after(10_000) == 320


def test_retry_after_is_zero_without_failures() -> None:
    assert retry_after(0) == 0
    assert retry_after(-1) == 0


def test_establish_timeout_is_1_2_4_8_minutes_then_10() -> None:
    assert [establish_timeout(n) for n in range(7)] == [60, 120, 240, 480, 600, 600, 600]


def test_establish_timeout_stays_capped_after_many_failures() -> None:
    assert establish_timeout(1024) == 600


# -- connection state --------------------------------------------------------------------------


def test_new_client_is_disconnected_since_its_creation(clock: FakeClock) -> None:
    client = new_client(clock)
    assert client.connected is False
    assert client.disconnected_since == START
    assert client.failed_attempts == 0
    assert client.attempts_suffix() == ""


async def test_mark_connected_clears_the_loss_time(clock: FakeClock) -> None:
    client = new_client(clock)
    await clock.advance(3)
    client.mark_connected()
    assert client.connected is True
    assert client.disconnected_since is None


async def test_mark_disconnected_keeps_the_first_loss_time(clock: FakeClock) -> None:
    client = new_client(clock)
    client.mark_connected()
    await clock.advance(10)
    assert client.mark_disconnected() is True
    first_loss = client.disconnected_since
    assert first_loss == START + dt.timedelta(seconds=10)

    await clock.advance(30)
    assert client.mark_disconnected() is False
    assert client.connected is False
    assert client.disconnected_since == first_loss


async def test_mark_disconnected_on_a_new_client_keeps_the_creation_time(clock: FakeClock) -> None:
    client = new_client(clock)
    await clock.advance(5)
    assert client.mark_disconnected() is False
    assert client.disconnected_since == START


# -- refresh and its backoff window ------------------------------------------------------------


async def test_failed_refresh_counts_the_attempt_and_schedules_the_next(
    clock: FakeClock, connect: FakeConnect
) -> None:
    client = new_client(clock)
    delay, error = await client.refresh(KUBECONFIG)
    assert (delay, error) == (5, "connection refused")
    assert client.failed_attempts == 1
    assert client.next_attempt == START + dt.timedelta(seconds=5)
    assert client.connected is False
    assert connect.calls == [KUBECONFIG]


async def test_attempts_suffix_names_the_count_and_the_next_attempt_in_utc(
    clock: FakeClock, connect: FakeConnect
) -> None:
    client = new_client(clock)
    await client.refresh(KUBECONFIG)
    assert client.attempts_suffix() == (
        "; connection attempts: 1, next connection attempt: 2026-01-01T00:00:05Z"
    )


async def test_refresh_inside_the_backoff_window_does_not_connect(
    clock: FakeClock, connect: FakeConnect
) -> None:
    client = new_client(clock)
    await client.refresh(KUBECONFIG)
    await clock.advance(2)

    assert await client.refresh(KUBECONFIG) == (3, "")
    assert len(connect.calls) == 1
    assert client.failed_attempts == 1
    assert client.next_attempt == START + dt.timedelta(seconds=5)


async def test_each_failure_after_the_window_doubles_the_delay(
    clock: FakeClock, connect: FakeConnect
) -> None:
    client = new_client(clock)
    delays = []
    for _ in range(9):
        delay, error = await client.refresh(KUBECONFIG)
        assert error == "connection refused"
        delays.append(delay)
        await clock.advance(delay)
    assert delays == [5, 10, 20, 40, 80, 160, 320, 320, 320]
    assert client.failed_attempts == 9
    assert len(connect.calls) == 9


async def test_successful_refresh_connects_and_resets_the_attempts(
    clock: FakeClock, connect: FakeConnect
) -> None:
    client = new_client(clock)
    await client.refresh(KUBECONFIG)
    await clock.advance(5)
    connect.failing = False

    assert await client.refresh(KUBECONFIG) == (0, "")
    assert client.connected is True
    assert client.disconnected_since is None
    assert client.failed_attempts == 0
    assert client.next_attempt is None
    assert client.attempts_suffix() == ""


async def test_refresh_with_the_same_config_while_connected_is_a_no_op(
    clock: FakeClock, connect: FakeConnect
) -> None:
    connect.failing = False
    client = new_client(clock)
    await client.refresh(KUBECONFIG)
    assert await client.refresh(dict(KUBECONFIG)) == (0, "")
    assert len(connect.calls) == 1


async def test_a_lost_client_reconnects_with_the_same_config_at_once(
    clock: FakeClock, connect: FakeConnect
) -> None:
    connect.failing = False
    client = new_client(clock)
    await client.refresh(KUBECONFIG)
    client.mark_disconnected()

    assert await client.refresh(KUBECONFIG) == (0, "")
    assert len(connect.calls) == 2
    assert client.connected is True


async def test_a_changed_kubeconfig_resets_the_attempts_and_connects_inside_the_window(
    clock: FakeClock, connect: FakeConnect
) -> None:
    client = new_client(clock)
    await client.refresh(KUBECONFIG)
    await clock.advance(5)
    await client.refresh(KUBECONFIG)
    assert client.failed_attempts == 2
    await clock.advance(1)  # still inside the 10 s window

    delay, error = await client.refresh(OTHER_KUBECONFIG)
    assert (delay, error) == (5, "connection refused")
    assert client.failed_attempts == 1
    assert connect.calls == [KUBECONFIG, KUBECONFIG, OTHER_KUBECONFIG]
    assert client.config == OTHER_KUBECONFIG


async def test_a_changed_kubeconfig_that_works_connects_at_once(
    clock: FakeClock, connect: FakeConnect
) -> None:
    client = new_client(clock)
    await client.refresh(KUBECONFIG)
    connect.failing = False

    assert await client.refresh(OTHER_KUBECONFIG) == (0, "")
    assert client.connected is True
    assert client.failed_attempts == 0


async def test_an_error_without_text_is_reported_by_its_type(clock: FakeClock, connect: FakeConnect) -> None:
    connect.error = ""
    client = new_client(clock)
    assert await client.refresh(KUBECONFIG) == (5, "ConnectError")


def _finished_copy(name: str, reason: str = "Succeeded") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "status": {"conditions": [{"type": "Finished", "status": "True", "reason": reason}]},
    }


async def test_the_last_state_of_a_finished_object_that_left_the_worker_is_kept_for_a_while() -> None:
    """A worker may delete a finished Job and its Workload copy before the manager copied the end
    of the run; the reconcile reads their last state from here."""
    clock = FakeClock(START)
    client = new_client(clock)
    job = {
        "metadata": {"name": "j", "namespace": "ns"},
        "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    }
    client.remember_deleted(api.JOB, job)
    client.remember_deleted(api.WORKLOAD, _finished_copy("wl"))
    assert client.finished_gone(api.JOB, "ns", "j") == job
    assert client.finished_gone(api.WORKLOAD, "ns", "wl")["status"]["conditions"][0]["reason"] == "Succeeded"
    assert client.finished_gone(api.WORKLOAD, "ns", "j") is None  # per kind
    await clock.advance(FINISHED_GONE_KEEP_SECONDS + 1)
    client.remember_deleted(api.WORKLOAD, _finished_copy("later"))
    assert client.finished_gone(api.JOB, "ns", "j") is None
    assert client.finished_gone(api.WORKLOAD, "ns", "later") is not None


async def test_a_copy_the_manager_withdrew_leaves_no_end_of_run_behind() -> None:
    """The manager removes a copy (re-dispatch after an eviction): its worker finishes it with
    OwnerNotFound as the job goes. That copy, and only that one (by UID), is no result."""
    clock = FakeClock(START)
    client = new_client(clock)
    old = _finished_copy("wl", reason="OwnerNotFound")
    old["metadata"]["uid"] = "uid-old"
    client.withdraw(old)
    assert client.withdrawn(old)
    client.remember_deleted(api.WORKLOAD, old)
    assert client.finished_gone(api.WORKLOAD, "ns", "wl") is None
    new = _finished_copy("wl")
    new["metadata"]["uid"] = "uid-new"  # the copy dispatched later under the same name
    assert not client.withdrawn(new) and not client.withdrawn(None)
    client.remember_deleted(api.WORKLOAD, new)
    assert client.finished_gone(api.WORKLOAD, "ns", "wl") == new
    await clock.advance(FINISHED_GONE_KEEP_SECONDS + 1)
    client.withdraw({"metadata": {"uid": "uid-later"}})
    assert not client.withdrawn(old)  # marks expire


@pytest.mark.parametrize(
    ("resource", "obj"),
    [
        (api.WORKLOAD, _finished_copy("wl", reason="OutOfSync")),  # replaced, not finished
        (api.WORKLOAD, {"metadata": {"name": "wl", "namespace": "ns"}, "status": {}}),
        (api.JOB, {"metadata": {"name": "wl", "namespace": "ns"}, "status": {"active": 1}}),
    ],
)
def test_objects_that_did_not_finish_leave_nothing_behind(resource, obj) -> None:
    client = new_client(FakeClock(START))
    client.remember_deleted(resource, obj)
    assert not finished_state(resource, obj)
    assert client.finished_gone(resource, "ns", "wl") is None


async def test_a_worker_without_a_client_is_lost_since_first_asked_not_since_every_reconcile() -> None:
    """The worker-lost grace period of a worker whose MultiKueueCluster is gone runs out; a client
    (even one that never connected, after a restart with a bad kubeconfig) gives its own time."""
    clock = FakeClock(START)
    remotes = Remotes()
    assert remotes.lost_since("worker1", clock.now()) == START
    await clock.advance(30)
    assert remotes.lost_since("worker1", clock.now()) == START
    remotes.clients["worker1"] = new_client(clock)  # created now, never connected
    assert remotes.lost_since("worker1", clock.now()) == START + dt.timedelta(seconds=30)
    remotes.clients["worker1"].mark_connected()
    assert remotes.lost_since("worker1", clock.now()) == clock.now()


def _copy(*conditions: str) -> dict:
    return {"status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_a_copy_waits_for_quota_holds_it_is_refused_or_once_finished_counts_for_none() -> None:
    assert copy_state({}) == (COPY_WAITING,)
    assert copy_state(_copy("QuotaReserved", "Admitted")) == (COPY_HOLDING,)
    assert copy_state(_copy("QuotaReserved", "Finished")) == ()
    # Released, or never reserved because the worker could not admit it: no room there now.
    released = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}
    assert copy_state(released) == (COPY_REFUSED,)


async def test_the_watch_notes_when_it_last_showed_a_copy_refused_even_one_that_left() -> None:
    clock = FakeClock(start=START)
    client = new_client(clock)
    seen: list[dict] = []
    handle = client._noting_refusals(seen.append)
    refused = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}
    handle({})
    handle(_copy("QuotaReserved", "Admitted"))
    assert client.last_refusal is None and len(seen) == 2
    handle(refused)
    assert client.last_refusal == clock.monotonic()
    await clock.advance(4)
    handle(_copy("QuotaReserved", "Admitted"))  # another copy admitted: the refusal stands
    assert client.last_refusal == clock.monotonic() - 4
    handle(refused)  # the refused copy deleted (the delete handler passes its last state)
    assert client.last_refusal == clock.monotonic() and len(seen) == 5


class CountingKube:
    """Answers GETs of one job name with `obj` (or 404) and counts them."""

    def __init__(self, obj: dict | None) -> None:
        self.obj = obj
        self.gets = 0

    async def get(self, resource: api.Resource, name: str, namespace: str) -> dict:
        self.gets += 1
        if self.obj is None:
            raise NotFound({"code": 404, "reason": "NotFound", "message": f'jobs.batch "{name}" not found'})
        return self.obj


async def test_no_foreign_object_found_is_trusted_for_a_few_seconds_unless_asked_fresh() -> None:
    clock = FakeClock(START)
    client = new_client(clock)
    client.kube = CountingKube(None)  # type: ignore[assignment]
    assert await foreign_object(client, api.JOB, "team-a", "job") is None
    assert await foreign_object(client, api.JOB, "team-a", "job") is None
    assert client.kube.gets == 1  # type: ignore[attr-defined]
    foreign = {"metadata": {"name": "job", "namespace": "team-a", "labels": {}}}
    client.kube.obj = foreign  # type: ignore[attr-defined]
    assert await foreign_object(client, api.JOB, "team-a", "job", fresh=True) == foreign
    # Found afresh, it is no longer "none there" for the next plain ask either.
    assert await foreign_object(client, api.JOB, "team-a", "job") == foreign
    await clock.advance(NO_FOREIGN_OBJECT_TTL_SECONDS)
    assert await foreign_object(client, api.JOB, "team-a", "job") == foreign
    assert (
        await foreign_object(client, api.JOB, "team-a", "job") == foreign
    )  # a foreign one is never remembered
    assert client.kube.gets == 5  # type: ignore[attr-defined]


async def test_an_object_created_counts_as_there_until_the_watch_shows_it_or_its_deletion(
    clock: FakeClock,
) -> None:
    client = new_client(clock)
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u1"}}
    assert client.created_unseen(api.JOB, "ns", "j") is None
    client.remember_created(api.JOB, job)
    assert client.created_unseen(api.JOB, "ns", "j") == job
    assert client.created_unseen(api.JOB_SET, "ns", "j") is None  # per kind
    client.remember_deleted(api.JOB, job)  # the watch showed its deletion
    assert client.created_unseen(api.JOB, "ns", "j") is None
    client.remember_created(api.JOB, job)
    client.forget_created(api.JOB, "ns", "j")  # deleted by this manager
    assert client.created_unseen(api.JOB, "ns", "j") is None
    client.remember_created(api.JOB, job)
    await clock.advance(10.0)  # a watch event lost: the memory does not hold for long
    assert client.created_unseen(api.JOB, "ns", "j") is None


def test_a_job_s_end_is_the_finished_condition_its_worker_would_have_written() -> None:
    complete = {
        "type": "Complete",
        "status": "True",
        "message": "Reached expected number of succeeded pods",
        "lastTransitionTime": "2026-01-01T00:00:09Z",
    }
    job = {"status": {"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, complete]}}
    assert job_end_condition(api.JOB, job) == {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded",
        "message": "Reached expected number of succeeded pods",
        "lastTransitionTime": "2026-01-01T00:00:09Z",
    }
    failed = {
        "status": {"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}
    }
    assert job_end_condition(api.JOB, failed)["reason"] == "Failed"
    assert job_end_condition(api.JOB, failed)["message"] == "BackoffLimitExceeded"
    js = {"status": {"conditions": [{"type": "Completed", "status": "True", "message": "jobset completed"}]}}
    assert job_end_condition(api.JOB_SET, js)["reason"] == "Succeeded"
    tj = {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "trainjob failed"}]}}
    assert job_end_condition(api.TRAIN_JOB, tj)["reason"] == "Failed"
    # Not ended, or a kind whose own end is not its Workload's (a pod of a group): nothing.
    assert job_end_condition(api.JOB, {"status": {"active": 1}}) is None
    assert job_end_condition(api.JOB, {"status": {"conditions": [{**complete, "status": "False"}]}}) is None
    assert job_end_condition(api.POD, {"status": {"phase": "Succeeded"}}) is None
