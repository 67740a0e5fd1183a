"""manager.dispatch.least_loaded: one copy, to the worker with room and the fewest copies waiting
(nominations its watch has not shown yet count too), then the fewest holding quota, then the
MultiKueueConfig's order; every worker, as AllAtOnce, when none has room, when the chosen worker
refuses the copy, or when its round ends without an admission."""

from __future__ import annotations

from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.dispatch import LEAST_LOADED, is_external
from manager.dispatch.least_loaded import UNSEEN_NOMINATION_SECONDS, LeastLoadedChoice, refused
from manager.remote import COPY_HOLDING, COPY_REFUSED, COPY_WAITING, copy_state

ROUND = 10.0
KEY = "team-a/wl"


class FakeRemote:
    def __init__(self, waiting: int = 0, holding: int = 0, refusing: int = 0) -> None:
        self.waiting, self.holding, self.refusing = waiting, holding, refusing
        self.copies: set[str] = set()
        self.last_refusal: float | None = None  # set by the watch in RemoteClient

    def copy_counts(self) -> tuple[int, int, int]:
        return self.waiting, self.holding, self.refusing

    def remote_workload(self, namespace: str, name: str) -> dict | None:
        return {"metadata": {"name": name}} if f"{namespace}/{name}" in self.copies else None


class FakeRemotes:
    def __init__(self, clients: dict[str, FakeRemote | None]) -> None:
        self.clients = clients

    def available(self, name: str) -> FakeRemote | None:
        return self.clients.get(name)


def copy(reserved: str | None = None, finished: bool = False) -> dict:
    conditions = []
    if reserved is not None:
        conditions.append({"type": "QuotaReserved", "status": reserved, "reason": "Pending"})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    return {"metadata": {"name": "wl"}, "status": {"conditions": conditions}}


class Fixture:
    def __init__(self, clients: dict[str, FakeRemote | None]) -> None:
        self.clock = FakeClock()
        self.clients = clients
        self.choice = LeastLoadedChoice(FakeRemotes(clients), self.clock, ROUND)  # type: ignore[arg-type]

    def nominate(
        self, key: str = KEY, current: list[str] | None = None, copies: dict | None = None
    ) -> tuple[list[str], float | None]:
        everyone = [c for c, client in self.clients.items() if client is not None]
        return self.choice.nominate(key, current or [], everyone, copies or {})


def test_a_copy_is_refused_when_its_worker_could_not_reserve_quota_for_it() -> None:
    assert copy_state(copy()) == (COPY_WAITING,)
    assert copy_state(copy("True")) == (COPY_HOLDING,)
    assert copy_state(copy("False")) == (COPY_REFUSED,)
    assert copy_state(copy("False", finished=True)) == ()
    assert refused(copy("False")) and not refused(copy()) and not refused(None)


def test_a_copy_waiting_only_for_the_rest_of_its_group_is_not_refused() -> None:
    for message in (
        api.waiting_for_group_primary_message("lws-0"),
        api.waiting_for_group_members_message(["lws-1"]),
    ):
        waits = copy("False")
        waits["status"]["conditions"][0]["message"] = message
        assert copy_state(waits) == (COPY_WAITING,) and not refused(waits)
    no_room = copy("False")
    no_room["status"]["conditions"][0]["message"] = (
        "couldn't assign flavors to pod set main: insufficient quota"
    )
    assert refused(no_room)


def test_the_worker_with_fewest_copies_waiting_gets_the_only_copy() -> None:
    f = Fixture(
        {"w1": FakeRemote(waiting=3), "w2": FakeRemote(waiting=1, holding=9), "w3": FakeRemote(waiting=2)}
    )
    assert f.nominate() == (["w2"], ROUND)


def test_equal_waiting_prefers_fewer_held_then_the_config_order() -> None:
    f = Fixture({"w1": FakeRemote(holding=5), "w2": FakeRemote(holding=2), "w3": FakeRemote(holding=2)})
    assert f.nominate() == (["w2"], ROUND)


def test_a_worker_keeping_a_copy_refused_has_no_room() -> None:
    f = Fixture({"w1": FakeRemote(refusing=1), "w2": FakeRemote(waiting=4, holding=9)})
    assert f.nominate() == (["w2"], ROUND)


def test_with_no_room_anywhere_every_worker_gets_a_copy() -> None:
    f = Fixture({"w1": FakeRemote(refusing=1), "w2": FakeRemote(refusing=2)})
    assert f.nominate() == (["w1", "w2"], None)


async def test_a_refused_copy_widens_to_every_worker_at_once_and_the_worker_has_no_room_for_a_round() -> None:
    w1 = FakeRemote()
    f = Fixture({"w1": w1, "w2": FakeRemote(holding=1)})
    assert f.nominate() == (["w1"], ROUND)
    assert f.nominate(current=["w1"], copies={"w1": copy(), "w2": None}) == (["w1"], ROUND)
    w1.refusing, w1.last_refusal = 1, f.clock.monotonic()  # what w1's watch shows
    assert f.nominate(current=["w1"], copies={"w1": copy("False"), "w2": None}) == (["w1", "w2"], None)
    assert f.nominate(current=["w1", "w2"]) == (["w1", "w2"], None)  # widened for good
    # The refused copy is gone (admitted elsewhere): w1 still counts as full until the round ends.
    w1.refusing = 0
    assert f.nominate("team-a/next") == (["w2"], ROUND)
    await f.clock.advance(ROUND)
    assert f.nominate("team-a/later") == (["w1"], ROUND)


async def test_a_refusal_of_any_workload_leaves_the_worker_no_room_for_a_round() -> None:
    # However the refused Workload was placed (widened for another reason, admitted elsewhere
    # before this dispatcher looked at it again), the worker's watch saw the refusal.
    w1 = FakeRemote()
    f = Fixture({"w1": w1, "w2": FakeRemote(holding=3)})
    w1.last_refusal = f.clock.monotonic()
    assert f.nominate("team-a/one") == (["w2"], ROUND)
    await f.clock.advance(ROUND / 2)
    assert f.nominate("team-a/two") == (["w2"], ROUND)
    await f.clock.advance(ROUND / 2)
    assert f.nominate("team-a/three") == (["w1"], ROUND)


async def test_the_round_ends_in_every_worker() -> None:
    f = Fixture({"w1": FakeRemote(), "w2": FakeRemote(waiting=1)})
    assert f.nominate() == (["w1"], ROUND)
    await f.clock.advance(ROUND / 2)
    assert f.nominate(current=["w1"]) == (["w1"], ROUND / 2)
    await f.clock.advance(ROUND / 2)
    assert f.nominate(current=["w1"]) == (["w1", "w2"], None)


def test_a_single_nomination_not_chosen_by_this_manager_widens() -> None:
    # A restarted manager does not know when the round began.
    f = Fixture({"w1": FakeRemote(), "w2": FakeRemote()})
    assert f.nominate(current=["w2"]) == (["w1", "w2"], None)


def test_the_chosen_worker_lost_or_excluded_widens_to_the_others() -> None:
    f = Fixture({"w1": FakeRemote(), "w2": FakeRemote(), "w3": FakeRemote()})
    assert f.nominate() == (["w1"], ROUND)
    assert f.choice.nominate(KEY, ["w1"], ["w2", "w3"], {}) == (["w2", "w3"], None)


def test_a_burst_spreads_over_the_workers_before_their_watches_show_the_copies() -> None:
    f = Fixture({"w1": FakeRemote(), "w2": FakeRemote(), "w3": FakeRemote()})
    chosen = [f.nominate(f"team-a/wl-{i}")[0] for i in range(4)]
    assert chosen == [["w1"], ["w2"], ["w3"], ["w1"]]


async def test_a_nomination_stops_counting_once_the_copy_is_seen_or_after_a_while() -> None:
    w1, w2 = FakeRemote(), FakeRemote(holding=1)
    f = Fixture({"w1": w1, "w2": w2})
    assert f.nominate("team-a/first")[0] == ["w1"]
    w1.copies.add("team-a/first")  # seen, and (in this fake) holding nothing: w1 is free again
    assert f.nominate("team-a/second")[0] == ["w1"]
    # Never seen (its create failed): it counts against w1, for a few seconds only.
    assert f.nominate("team-a/third")[0] == ["w2"]
    w2.copies.add("team-a/third")
    assert f.nominate("team-a/fourth")[0] == ["w2"]
    w2.copies.add("team-a/fourth")
    await f.clock.advance(UNSEEN_NOMINATION_SECONDS)
    assert f.nominate("team-a/fifth")[0] == ["w1"]


def test_a_disconnected_worker_gets_no_copy_and_one_worker_is_everyone() -> None:
    f = Fixture({"w1": None, "w2": FakeRemote(waiting=50)})
    assert f.nominate() == (["w2"], None)


def test_forget_drops_the_choice() -> None:
    f = Fixture({"w1": FakeRemote(), "w2": FakeRemote()})
    f.nominate()
    f.choice.forget(KEY)
    assert f.nominate(current=["w1"]) == (["w1", "w2"], None)


def test_the_least_loaded_name_is_ours_not_an_external_dispatcher() -> None:
    assert (
        LEAST_LOADED
        == api.DISPATCHER_LEAST_LOADED
        == "kueue-federation.dev/multikueue-dispatcher-least-loaded"
    )
    assert not is_external(LEAST_LOADED)
