"""manager.dispatch.least_loaded: one worker per round, the one with the fewest copies waiting for
quota (nominations its watch has not shown yet count too), then the fewest holding quota, then the
MultiKueueConfig's order; a worker that is not connected comes last."""

from __future__ import annotations

from test_manager_incremental import KEY, FakeChecks, FakeReconciler, FakeWorkloads, workload

from kube_runtime import api
from kube_runtime.clock import FakeClock
from kube_runtime.controller import Result
from manager.dispatch import LEAST_LOADED, is_external
from manager.dispatch.least_loaded import UNSEEN_NOMINATION_SECONDS, LeastLoadedDispatcher

ROUND = 10.0


class FakeRemote:
    def __init__(self, waiting: int = 0, holding: int = 0) -> None:
        self.waiting, self.holding = waiting, holding
        self.copies: set[str] = set()

    def copy_counts(self) -> tuple[int, int]:
        return self.waiting, self.holding

    def remote_workload(self, namespace: str, name: str) -> dict | None:
        return {"metadata": {"name": name}} if f"{namespace}/{name}" in self.copies else None


class FakeRemotes:
    def __init__(self, clients: dict[str, FakeRemote | None]) -> None:
        self.clients = clients

    def available(self, name: str) -> FakeRemote | None:
        return self.clients.get(name)


class Fixture:
    def __init__(self, clients: dict[str, FakeRemote | None]) -> None:
        self.clock = FakeClock()
        self.workloads = FakeWorkloads()
        self.reconciler = FakeReconciler(self.workloads)
        self.remotes = FakeRemotes(clients)
        self.dispatcher = LeastLoadedDispatcher(
            self.workloads,  # type: ignore[arg-type]
            FakeChecks(list(clients)),  # type: ignore[arg-type]
            self.reconciler,  # type: ignore[arg-type]
            self.clock,
            round_timeout=ROUND,
            remotes=self.remotes,  # type: ignore[arg-type]
        )

    async def dispatch(self, key: str = KEY) -> Result | None:
        namespace, _, name = key.partition("/")
        wl = workload()
        wl["metadata"] = {"namespace": namespace, "name": name}
        self.workloads.objects[key] = wl
        return await self.dispatcher.reconcile(key)


async def test_the_worker_with_fewest_copies_waiting_gets_the_only_copy() -> None:
    f = Fixture(
        {"w1": FakeRemote(waiting=3), "w2": FakeRemote(waiting=1, holding=9), "w3": FakeRemote(waiting=2)}
    )
    assert await f.dispatch() == Result(requeue_after=ROUND)
    assert f.reconciler.nominations == [["w2"]]


async def test_equal_waiting_prefers_fewer_held_then_the_config_order() -> None:
    f = Fixture({"w1": FakeRemote(holding=5), "w2": FakeRemote(holding=2), "w3": FakeRemote(holding=2)})
    await f.dispatch()
    assert f.reconciler.nominations == [["w2"]]


async def test_a_burst_spreads_over_the_workers_before_their_watches_show_the_copies() -> None:
    f = Fixture({"w1": FakeRemote(), "w2": FakeRemote(), "w3": FakeRemote()})
    for i in range(4):
        await f.dispatch(f"team-a/wl-{i}")
    assert f.reconciler.nominations == [["w1"], ["w2"], ["w3"], ["w1"]]


async def test_a_nomination_stops_counting_once_the_copy_is_seen_or_after_a_while() -> None:
    w1, w2 = FakeRemote(), FakeRemote(holding=1)
    f = Fixture({"w1": w1, "w2": w2})
    await f.dispatch("team-a/first")
    w1.copies.add("team-a/first")  # seen, and (in this fake) holding nothing: w1 is free again
    await f.dispatch("team-a/second")
    assert f.reconciler.nominations[-1] == ["w1"]
    # Never seen (its create failed): it counts against w1, for a few seconds only.
    await f.dispatch("team-a/third")
    assert f.reconciler.nominations[-1] == ["w2"]
    w2.copies.add("team-a/third")
    await f.dispatch("team-a/fourth")
    assert f.reconciler.nominations[-1] == ["w2"]
    w2.copies.add("team-a/fourth")
    await f.clock.advance(UNSEEN_NOMINATION_SECONDS)
    await f.dispatch("team-a/fifth")
    assert f.reconciler.nominations[-1] == ["w1"]


async def test_a_disconnected_worker_is_nominated_only_when_no_other_is_left() -> None:
    f = Fixture({"w1": None, "w2": FakeRemote(waiting=50)})
    await f.dispatch()
    assert f.reconciler.nominations == [["w2"]]


async def test_each_round_adds_one_more_worker_until_none_are_left() -> None:
    f = Fixture({"w1": FakeRemote(), "w2": FakeRemote(waiting=1)})
    await f.dispatch()
    assert f.reconciler.nominations == [["w1"]]
    await f.clock.advance(ROUND / 2)
    assert await f.dispatcher.reconcile(KEY) == Result(requeue_after=ROUND / 2)
    await f.clock.advance(ROUND / 2)
    await f.dispatcher.reconcile(KEY)
    assert f.reconciler.nominations == [["w1"], ["w1", "w2"]]


def test_the_least_loaded_name_is_ours_not_an_external_dispatcher() -> None:
    assert (
        LEAST_LOADED
        == api.DISPATCHER_LEAST_LOADED
        == "kueue-federation.dev/multikueue-dispatcher-least-loaded"
    )
    assert not is_external(LEAST_LOADED)
    assert is_external("example.com/my-dispatcher")
