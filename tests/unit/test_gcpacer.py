"""The garbage-collector pacer: survivors are frozen, cyclic garbage is still collected."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from kube_runtime.gcpacer import GcPacer


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def make_cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_step_collects_young_cycles_then_freezes_the_survivors():
    pacer = GcPacer(freeze_every=10, full_every=100, clock=Clock())
    garbage = make_cycle()
    kept = Node()
    step = pacer.step()
    assert garbage() is None  # collected before the freeze
    assert not step.full
    assert step.frozen is None  # not counted: counting walks every frozen object
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(kept)
    # The survivors are frozen: a collection no longer finds a cycle dropped after the freeze.
    frozen_then_dropped = make_cycle()
    gc.freeze()
    gc.collect()
    assert frozen_then_dropped() is not None


def test_the_full_pass_collects_cycles_that_became_garbage_while_frozen():
    clock = Clock()
    pacer = GcPacer(freeze_every=10, full_every=100, clock=clock)
    leaked = make_cycle()
    gc.freeze()  # as if frozen by an earlier step while still in use
    clock.now = 50
    assert not pacer.step().full
    assert leaked() is not None  # a plain step leaves frozen objects alone
    clock.now = 100
    step = pacer.step()
    assert step.full
    assert leaked() is None
    assert step.frozen == gc.get_freeze_count() > 0
    clock.now = 150
    assert not pacer.step().full  # the next full pass is full_every after this one


def test_reference_counting_still_frees_frozen_objects():
    pacer = GcPacer(freeze_every=10, full_every=100, clock=Clock())
    obj = Node()
    ref = weakref.ref(obj)
    pacer.step()
    del obj
    assert ref() is None


def test_bad_intervals_are_refused():
    with pytest.raises(ValueError):
        GcPacer(freeze_every=0)
    with pytest.raises(ValueError):
        GcPacer(freeze_every=10, full_every=5)


async def test_run_steps_until_cancelled_and_unfreezes():
    pacer = GcPacer(freeze_every=0.01, full_every=0.05)
    task = asyncio.create_task(pacer.run())
    await asyncio.sleep(0.1)
    assert gc.get_freeze_count() > 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gc.get_freeze_count() == 0
