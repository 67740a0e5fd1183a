"""OwnWrites: the versions a controller's writes replaced, until its cache shows them."""

from kube_runtime.ownwrites import OwnWrites


def _obj(rv: str) -> dict:
    return {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": rv}}


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_replaced_version_lags_until_the_cache_shows_a_newer_one():
    writes = OwnWrites(clock=_Clock())
    writes.wrote("ns/j", _obj("5"), _obj("6"))
    assert writes.lagging("ns/j", _obj("5"))
    assert writes.lagging("ns/j", _obj("5"))  # still stale: asked again, same answer
    assert not writes.lagging("ns/j", _obj("6"))
    assert len(writes) == 0  # forgotten once the cache caught up
    assert not writes.lagging("ns/j", _obj("5"))


def test_a_write_that_changed_nothing_is_not_remembered():
    writes = OwnWrites(clock=_Clock())
    writes.wrote("ns/j", _obj("5"), _obj("5"))
    writes.wrote("ns/j", _obj("5"), None)
    writes.wrote("ns/j", {"metadata": {}}, _obj("7"))
    assert not writes.lagging("ns/j", _obj("5"))
    assert len(writes) == 0


def test_every_version_of_a_series_of_writes_lags():
    writes = OwnWrites(clock=_Clock())
    writes.wrote("ns/j", _obj("5"), _obj("6"))  # suspend
    writes.wrote("ns/j", _obj("6"), _obj("7"))  # then restore the template
    assert writes.lagging("ns/j", _obj("5"))
    assert writes.lagging("ns/j", _obj("6"))
    assert not writes.lagging("ns/j", _obj("7"))


def test_the_memory_expires_so_a_lost_watch_event_cannot_hold_a_key_back():
    clock = _Clock()
    writes = OwnWrites(ttl=10.0, clock=clock)
    writes.wrote("ns/j", _obj("5"), _obj("6"))
    clock.now += 9.9
    assert writes.lagging("ns/j", _obj("5"))
    clock.now += 0.2
    assert not writes.lagging("ns/j", _obj("5"))
    assert len(writes) == 0


def test_keys_are_apart_and_forget_drops_one():
    writes = OwnWrites(clock=_Clock())
    writes.wrote("ns/a", _obj("5"), _obj("6"))
    writes.wrote("ns/b", _obj("5"), _obj("9"))
    writes.forget("ns/a")
    assert not writes.lagging("ns/a", _obj("5"))
    assert writes.lagging("ns/b", _obj("5"))
    assert not writes.lagging("ns/b", None)  # the object is gone: nothing to wait for
