"""OwnWrites: the versions a controller's writes replaced, until its cache shows them."""

from kube_runtime.clock import FakeClock
from kube_runtime.ownwrites import OwnWrites


def _obj(rv: str) -> dict:
    return {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": rv}}


def test_the_replaced_version_lags_until_the_cache_shows_a_newer_one():
    writes = OwnWrites(clock=FakeClock().monotonic)
    writes.wrote("ns/j", _obj("5"), _obj("6"))
    assert writes.lagging("ns/j", _obj("5"))
    assert writes.lagging("ns/j", _obj("5"))  # still stale: asked again, same answer
    assert not writes.lagging("ns/j", _obj("6"))
    assert len(writes) == 0  # forgotten once the cache caught up
    assert not writes.lagging("ns/j", _obj("5"))


def test_a_write_that_changed_nothing_is_not_remembered():
    writes = OwnWrites(clock=FakeClock().monotonic)
    writes.wrote("ns/j", _obj("5"), _obj("5"))
    writes.wrote("ns/j", _obj("5"), None)
    writes.wrote("ns/j", {"metadata": {}}, _obj("7"))
    assert not writes.lagging("ns/j", _obj("5"))
    assert len(writes) == 0


def test_every_version_of_a_series_of_writes_lags():
    writes = OwnWrites(clock=FakeClock().monotonic)
    writes.wrote("ns/j", _obj("5"), _obj("6"))  # suspend
    writes.wrote("ns/j", _obj("6"), _obj("7"))  # then restore the template
    assert writes.lagging("ns/j", _obj("5"))
    assert writes.lagging("ns/j", _obj("6"))
    assert not writes.lagging("ns/j", _obj("7"))


async def test_the_memory_expires_so_a_lost_watch_event_cannot_hold_a_key_back():
    clock = FakeClock()
    writes = OwnWrites(ttl=10.0, clock=clock.monotonic)
    writes.wrote("ns/j", _obj("5"), _obj("6"))
    await clock.advance(9.9)
    assert writes.lagging("ns/j", _obj("5"))
    await clock.advance(0.2)
    assert not writes.lagging("ns/j", _obj("5"))
    assert len(writes) == 0


def test_keys_are_apart_and_forget_drops_one():
    writes = OwnWrites(clock=FakeClock().monotonic)
    writes.wrote("ns/a", _obj("5"), _obj("6"))
    writes.wrote("ns/b", _obj("5"), _obj("9"))
    writes.forget("ns/a")
    assert not writes.lagging("ns/a", _obj("5"))
    assert writes.lagging("ns/b", _obj("5"))
    assert not writes.lagging("ns/b", None)  # the object is gone: nothing to wait for


def test_a_version_written_by_another_between_our_read_and_our_write_lags_too():
    writes = OwnWrites(clock=FakeClock().monotonic)
    writes.wrote("ns/j", _obj("5"), _obj("9"))  # read 5; the job controller wrote 7 before our 9
    assert writes.lagging("ns/j", _obj("7"))  # still older than what we wrote
    assert writes.lagging("ns/j", _obj("8"))
    assert not writes.lagging("ns/j", _obj("10"))  # newer than our write: current
    assert len(writes) == 0
    writes.wrote("ns/j", _obj("a"), _obj("c"))  # not numbers: only the replaced one is known
    assert writes.lagging("ns/j", _obj("a")) and not writes.lagging("ns/j", _obj("b"))
