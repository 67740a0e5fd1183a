"""manager.liveness: a worker that answers nothing is seen within the bound, a slow one is not,
traffic on the main connection counts as an answer, and a silent worker's return is seen at once;
RemoteClient: a silence fails a connection attempt in progress instead of waiting for its
timeouts, and a worker answering again is reconnected without waiting for the backoff."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from kube_runtime.client import ConnectionLost
from kube_runtime.clock import FakeClock
from manager.liveness import Liveness, LivenessSettings, silence_message
from manager.remote import RemoteClient

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SERVER = "https://127.0.0.1:6443"


class Worker:
    """A worker's apiserver as the probe meets it: answering after `latency` seconds, silent
    (a probe waits until its deadline, or until the link heals), or refusing at once."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.latency = 0.0
        self.silent = False
        self.refusing = False
        self.probes = 0

    async def probe(self, seconds: float) -> int:
        self.probes += 1
        if self.refusing:
            raise ConnectionLost("connect: connection refused")
        deadline = self.clock.monotonic() + seconds
        while self.silent:
            if self.clock.monotonic() >= deadline:
                raise ConnectionLost("TimeoutError")
            await self.clock.sleep(0.5)
        if self.latency:
            if self.latency >= seconds:
                await self.clock.sleep(seconds)
                raise ConnectionLost("TimeoutError")
            await self.clock.sleep(self.latency)
        return 200


class Watcher:
    def __init__(self, clock: FakeClock, settings: LivenessSettings | None = None) -> None:
        self.clock = clock
        self.worker = Worker(clock)
        self.heard_elsewhere: float | None = None
        self.silences: list[tuple[str, dt.datetime, float]] = []
        self.answers: list[float] = []
        self.liveness = Liveness(
            SERVER,
            clock,
            settings or LivenessSettings(),
            probe=self.worker.probe,
            heard_elsewhere=lambda: self.heard_elsewhere,
            on_silent=lambda message, since: self.silences.append((message, since, clock.monotonic())),
            on_answer=lambda: self.answers.append(clock.monotonic()),
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watcher:
        self.task = asyncio.create_task(self.liveness.run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task

    async def run_for(self, seconds: float, step: float = 0.5) -> None:
        for _ in range(int(seconds / step)):
            await self.clock.advance(step)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=START)


async def test_a_worker_that_answers_is_never_silent(clock: FakeClock) -> None:
    async with Watcher(clock) as watcher:
        await watcher.run_for(120)
    assert watcher.silences == [] and watcher.liveness.reachable
    assert 20 <= watcher.worker.probes <= 26, "one probe every 5 s"


async def test_silence_is_declared_within_the_timeout_with_upstreams_message(clock: FakeClock) -> None:
    async with Watcher(clock) as watcher:
        await watcher.run_for(7)
        cut = clock.monotonic()
        watcher.worker.silent = True
        await watcher.run_for(30)
    assert len(watcher.silences) == 1, "declared once, not at every unanswered probe"
    message, since, declared = watcher.silences[0]
    assert declared - cut <= 15
    assert message == silence_message(SERVER, 15)  # since the last answer, at 5 s
    assert message.startswith(f"no answer from {SERVER} for ")
    # The grace period starts at the first unanswered probe, sent after the cut.
    wall = lambda mono: START + dt.timedelta(seconds=mono - 1000.0)  # noqa: E731
    assert wall(cut) <= since <= wall(declared)
    assert not watcher.liveness.reachable and watcher.liveness.silence == message


async def test_a_silent_worker_that_answers_again_is_seen_within_a_probe(clock: FakeClock) -> None:
    async with Watcher(clock) as watcher:
        watcher.worker.silent = True
        await watcher.run_for(40)
        assert len(watcher.silences) == 1 and watcher.answers == []
        healed = clock.monotonic()
        watcher.worker.silent = False
        await watcher.run_for(10)
    assert len(watcher.answers) == 1 and watcher.answers[0] - healed <= 1.0
    assert watcher.liveness.reachable and watcher.liveness.silence == ""


async def test_a_slow_worker_under_the_bound_stays_reachable(clock: FakeClock) -> None:
    async with Watcher(clock) as watcher:
        watcher.worker.latency = 6.0  # 3 s each way
        await watcher.run_for(120)
    assert watcher.silences == []


async def test_a_worker_slower_than_the_bound_is_silent(clock: FakeClock) -> None:
    async with Watcher(clock) as watcher:
        watcher.worker.latency = 11.0
        await watcher.run_for(30)
    assert len(watcher.silences) == 1


async def test_bytes_on_the_main_connection_count_as_an_answer(clock: FakeClock) -> None:
    async with Watcher(clock) as watcher:
        watcher.worker.silent = True  # the probes get nothing, the list streaming meanwhile does
        for _ in range(120):
            watcher.heard_elsewhere = clock.monotonic()
            await clock.advance(0.5)
        assert watcher.silences == []
        await watcher.run_for(20)  # the list ended, nothing else comes
    assert len(watcher.silences) == 1


async def test_a_refused_probe_is_retried_without_spinning(clock: FakeClock) -> None:
    async with Watcher(clock) as watcher:
        watcher.worker.refusing = True
        await watcher.run_for(16)
    assert len(watcher.silences) == 1
    assert watcher.worker.probes <= 16, "about one try a second, not a tight loop"


def test_the_timeout_must_exceed_the_probe_interval() -> None:
    with pytest.raises(ValueError, match="must be longer than the probe interval"):
        LivenessSettings(timeout=5, probe_interval=5)
    assert not LivenessSettings(probe_interval=0).enabled


# -- RemoteClient ------------------------------------------------------------------------------


def remote(clock: FakeClock, reachable: list[str]) -> RemoteClient:
    return RemoteClient(
        "worker1",
        "multikueue",
        [],
        clock,
        on_event=lambda _cluster, _keys: None,
        on_lost=lambda _cluster: None,
        on_reachable=reachable.append,
    )


async def test_silence_fails_a_connection_attempt_in_progress(clock: FakeClock, monkeypatch) -> None:
    started = asyncio.Event()

    async def hangs(self: RemoteClient, kubeconfig: dict) -> None:
        started.set()
        await asyncio.Event().wait()  # a TLS handshake into a black hole

    monkeypatch.setattr(RemoteClient, "_connect", hangs)
    client = remote(clock, [])
    client.config = {"clusters": []}  # no liveness task of its own: the test declares the silence
    attempt = asyncio.create_task(client.refresh(client.config))
    await started.wait()
    first_probe = clock.now()
    client.probe._silent(silence_message(SERVER, 15), first_probe)
    delay, error = await asyncio.wait_for(attempt, 1)
    assert error == f"no answer from {SERVER} for 15s"
    assert delay == 5.0 and client.failed_attempts == 1
    assert client.disconnected_since == START  # a new client counts as lost since its creation

    # While silent, later attempts fail at once, without a connect.
    async def must_not_connect(self: RemoteClient, kubeconfig: dict) -> None:
        pytest.fail("connected")

    monkeypatch.setattr(RemoteClient, "_connect", must_not_connect)
    await clock.advance(5)
    delay, error = await client.refresh(client.config)
    assert error.startswith("no answer from") and client.failed_attempts == 2 and delay == 10.0


async def test_a_worker_answering_again_is_reconnected_without_the_backoff(clock: FakeClock) -> None:
    reachable: list[str] = []
    client = remote(clock, reachable)
    client.failed_attempts, client.next_attempt = 3, clock.now() + dt.timedelta(seconds=20)
    client.probe._silent(silence_message(SERVER, 15), clock.now())
    client.probe._answer()
    assert reachable == ["worker1"] and client.next_attempt is None
    assert not client.probe.silent.is_set()


async def test_a_silence_of_a_connected_worker_is_a_loss_from_the_first_unanswered_probe(
    clock: FakeClock,
) -> None:
    lost: list[str] = []
    client = RemoteClient(
        "worker1", "multikueue", [], clock, on_event=lambda _c, _k: None, on_lost=lost.append
    )
    client.mark_connected()
    first_probe = clock.now() - dt.timedelta(seconds=10)
    client.probe._silent(silence_message(SERVER, 15), first_probe)
    assert lost == ["worker1"] and not client.connected
    assert client.disconnected_since == first_probe
