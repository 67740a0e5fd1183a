"""Admission Fair Sharing in the engine: upstream's decay math and entry penalty
(pkg/util/admissionfairsharing), the usage ledger (pkg/cache/queue/afs), the ordering of a
UsageBasedAdmissionFairSharing ClusterQueue by its LocalQueues' usage, and the penalty an admission
pushes."""

import math
from fractions import Fraction

import pytest
from engine_builders import admitted, cluster_queue, snapshot, workload

from worker_agent.engine import Mode, Preemptor, QueueManager, Scheduler, assign_flavors
from worker_agent.engine.admissionfairsharing import (
    AfsConfig,
    UsageLedger,
    alpha_rate,
    amounts_from_api,
    amounts_to_api,
    decayed_consumed,
    entry_penalty,
    mul_by_float,
    usage_value,
)

HOUR = 3600.0


def test_alpha_rate_and_decay():
    assert alpha_rate(HOUR, HOUR) == 0.5
    assert alpha_rate(0, HOUR) == 0.0
    assert alpha_rate(HOUR, 0) == 0.0  # a half-life of 0: no decay by this function
    # One half-life later, half of the old usage and half of the new.
    assert decayed_consumed({"cpu": Fraction(4)}, {"cpu": Fraction(2)}, HOUR, HOUR) == {"cpu": Fraction(3)}
    # Two half-lives of no usage: a quarter left; a resource only in the new usage is added.
    out = decayed_consumed({"cpu": Fraction(4)}, {"memory": Fraction(1024)}, 2 * HOUR, HOUR)
    assert out == {"cpu": Fraction(1), "memory": Fraction(768)}


def test_products_are_rounded_down_to_nine_places_as_upstream():
    # 1 - 0.5 ** 0.5 = 0.2928932188134524...
    assert mul_by_float({"cpu": Fraction(1)}, 1 - 0.5**0.5) == {"cpu": Fraction(292893218, 10**9)}
    assert amounts_to_api(mul_by_float({"cpu": Fraction(1)}, 1 - 0.5**0.5)) == {"cpu": "292893218n"}
    # Repeated decay reaches zero instead of a fixed point.
    value = {"cpu": Fraction(1, 10**9)}
    assert mul_by_float(value, 0.9) == {"cpu": Fraction(0)}


def test_entry_penalty_is_requests_times_the_sampling_alpha():
    config = AfsConfig(half_life_seconds=600, sampling_interval_seconds=300)
    penalty = entry_penalty({"cpu": Fraction(2), "memory": Fraction(2**30)}, config)
    assert amounts_to_api(penalty) == {"cpu": "585786437n", "memory": "314491699005987495n"}
    assert entry_penalty({"cpu": Fraction(2)}, AfsConfig(half_life_seconds=0)) == {"cpu": Fraction(0)}


def test_usage_is_weighted_and_divided_by_the_local_queue_weight():
    consumed = {"cpu": Fraction(2), "memory": Fraction(10)}
    penalty = {"cpu": Fraction(1)}
    assert usage_value(consumed, penalty, 1.0, {}) == 13.0
    assert usage_value(consumed, penalty, 2.0, {"cpu": 2.0, "memory": 0.5}) == (3 * 2 + 10 * 0.5) / 2
    assert usage_value(consumed, penalty, 0.0, {}) == math.inf
    assert amounts_from_api({"cpu": "1500m", "memory": "1Ki"}) == {
        "cpu": Fraction(3, 2),
        "memory": Fraction(1024),
    }


def test_ledger_penalties_settle_once_and_can_be_dropped():
    ledger = UsageLedger(AfsConfig(half_life_seconds=HOUR, sampling_interval_seconds=HOUR))
    ledger.push_penalty("ns/a", "ns/w1", {"cpu": Fraction(2)}, now=0)
    ledger.push_penalty("ns/a", "ns/w1", {"cpu": Fraction(2)}, now=0)  # replaced, not stacked
    assert ledger.usage("ns/a") == 1.0 and ledger.has_pending_penalty("ns/a")
    ledger.push_penalty("ns/a", "ns/w2", {"cpu": Fraction(4)}, now=0)
    assert ledger.usage("ns/a") == 3.0
    assert ledger.sub_penalty("ns/a", "ns/w2") == {"cpu": Fraction(2)}
    assert ledger.sub_penalty("ns/a", "ns/w2") is None and ledger.sub_penalty("ns/none", "x") is None
    assert "ns/none" not in ledger.entries
    # w1 admitted with 2 cpus in use, no time elapsed: only the penalty is folded in.
    ledger.settle("ns/a", "ns/w1", {"cpu": Fraction(2)}, now=0)
    assert ledger.entries["ns/a"].resources == {"cpu": Fraction(1)}
    assert not ledger.has_pending_penalty("ns/a")
    ledger.settle("ns/a", "ns/w1", {"cpu": Fraction(2)}, now=0)  # settling again folds nothing
    assert ledger.usage("ns/a") == 1.0
    # One half-life of 2 cpus in use.
    assert ledger.sample("ns/a", {"cpu": Fraction(2)}, now=HOUR) == {"cpu": Fraction(3, 2)}
    ledger.set_weight("ns/a", 3.0)
    assert ledger.usage("ns/a") == 0.5


def test_ledger_seeds_from_status_and_keeps_the_sampling_interval():
    ledger = UsageLedger(AfsConfig(half_life_seconds=HOUR, sampling_interval_seconds=60))
    assert ledger.seed("ns/a", {"cpu": Fraction(5)}, now=100) is False
    assert ledger.due_in("ns/a", existed=False, now=100) is None
    # Seeded just now: a sample at once neither decays nor adds.
    assert ledger.sample("ns/a", {"cpu": Fraction(1)}, now=100) == {"cpu": Fraction(5)}
    assert ledger.seed("ns/a", {"cpu": Fraction(5)}, now=130) is True
    assert ledger.due_in("ns/a", existed=True, now=130) == 30
    assert ledger.due_in("ns/a", existed=True, now=160) is None
    ledger.push_penalty("ns/a", "ns/w", {"cpu": Fraction(1)}, now=130)
    assert ledger.due_in("ns/a", existed=True, now=130) is None  # a penalty waits: sample now
    # An entry a penalty created before the status was read takes the status in once.
    ledger.push_penalty("ns/b", "ns/w", {"cpu": Fraction(1)}, now=0)
    assert ledger.seed("ns/b", {"cpu": Fraction(2)}, now=0) is True
    assert ledger.seed("ns/b", {"cpu": Fraction(2)}, now=0) is True
    assert ledger.entries["ns/b"].resources == {"cpu": Fraction(2)}


def test_half_life_zero_resets_consumed_usage_at_every_sample():
    ledger = UsageLedger(AfsConfig(half_life_seconds=0, sampling_interval_seconds=60))
    ledger.seed("ns/a", {"cpu": Fraction(5)}, now=0)
    assert ledger.sample("ns/a", {"cpu": Fraction(3)}, now=60) == {}
    assert ledger.usage("ns/a") == 0.0


def queued(name, lq, created, priority=0, cq="cq"):
    wl = workload(name, cq, cpu="1", created=created, priority=priority)
    wl.queue_name = lq
    return wl


def pop_order(queues, cq="cq"):
    out = []
    while (wl := queues.queues[cq].pop()) is not None:
        out.append(wl.name)
        queues.queues[cq].inflight = None
    return out


@pytest.mark.parametrize("usage_based", [True, False])
def test_a_usage_based_cluster_queue_orders_by_local_queue_usage(usage_based):
    ledger = UsageLedger(AfsConfig(half_life_seconds=HOUR))
    ledger.seed("default/heavy", {"cpu": Fraction(8)}, now=0)
    ledger.seed("default/light", {"cpu": Fraction(1)}, now=0)
    queues = QueueManager(afs_ledger=ledger)
    queues.ensure("cq", usage_based=usage_based)
    queues.push(queued("h-old-high", "heavy", created=1, priority=10))
    queues.push(queued("l-new", "light", created=9))
    queues.push(queued("l-old", "light", created=2))
    if usage_based:
        # The lighter LocalQueue first, whatever the priority and age; within a queue, as usual.
        assert pop_order(queues) == ["l-old", "l-new", "h-old-high"]
    else:
        assert pop_order(queues) == ["h-old-high", "l-old", "l-new"]


def test_the_order_follows_usage_changes_and_the_weights():
    ledger = UsageLedger(AfsConfig(half_life_seconds=HOUR, sampling_interval_seconds=HOUR))
    queues = QueueManager(afs_ledger=ledger)
    queues.ensure("cq", usage_based=True)
    queues.push(queued("a1", "a", created=1))
    queues.push(queued("b1", "b", created=2))
    assert queues.queues["cq"].peek().name == "a1"
    ledger.push_penalty("default/a", "default/a0", {"cpu": Fraction(4)}, now=0)  # a admitted something
    assert queues.queues["cq"].peek().name == "b1"
    assert [w.name for w in queues.queues["cq"].snapshot()] == ["b1", "a1"]
    ledger.push_penalty("default/b", "default/b0", {"cpu": Fraction(1)}, now=0)
    assert queues.queues["cq"].peek().name == "b1"  # usage 2 against 0.5
    ledger.set_weight("default/a", 100.0)  # a's weight makes its usage small: 0.02
    assert queues.queues["cq"].peek().name == "a1"
    ledger.set_weight("default/b", 0.0)
    ledger.set_weight("default/a", 1.0)
    assert queues.queues["cq"].peek().name == "a1"  # weight 0: b goes last


def test_parked_workloads_come_back_in_usage_order():
    ledger = UsageLedger(AfsConfig(half_life_seconds=HOUR))
    ledger.seed("default/heavy", {"cpu": Fraction(8)}, now=0)
    queues = QueueManager(afs_ledger=ledger)
    queues.ensure("cq", usage_based=True)
    for wl in (queued("h", "heavy", created=1), queued("l", "light", created=2)):
        queues.push(wl)
        queues.queues["cq"].pop()
        queues.requeue(wl, "NoFit")
    assert queues.queues["cq"].peek() is None
    queues.flush(["cq"])
    assert pop_order(queues) == ["l", "h"]


def test_an_admission_in_a_usage_based_cluster_queue_pushes_its_entry_penalty():
    config = AfsConfig(half_life_seconds=HOUR, sampling_interval_seconds=HOUR)
    cqs = [
        cluster_queue("usage", flavors={"default": {"cpu": "10"}}),
        cluster_queue("plain", flavors={"default": {"cpu": "10"}}),
    ]
    cqs[0]["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    snap = snapshot(cqs)
    ledger = UsageLedger(config)
    queues = QueueManager(afs_ledger=ledger)
    queues.ensure("usage", usage_based=True)
    queues.ensure("plain", usage_based=False)
    w1 = workload("w1", "usage", cpu="2", count=2)
    w1.queue_name = "team-a"
    w2 = workload("w2", "plain", cpu="2")
    w2.queue_name = "team-b"
    queues.push(w1)
    queues.push(w2)
    result = Scheduler(snap, queues).schedule(now=50.0)
    assert len(result.admitted) == 2
    # 4 cpus times 1 - 0.5^(1h/1h) = 0.5.
    assert ledger.entries["default/team-a"].penalties == {"default/w1": {"cpu": Fraction(2)}}
    assert ledger.entries["default/team-a"].last_update == 50.0
    assert "default/team-b" not in ledger.entries


@pytest.mark.parametrize(
    ("mode", "victim"), [("UsageBasedAdmissionFairSharing", "heavy-1"), (None, "light-1")]
)
def test_preemption_takes_from_the_local_queue_with_the_higher_usage_first(mode, victim):
    """Upstream's CandidatesOrdering: within one ClusterQueue, before priority, the workload of the
    LocalQueue with the higher usage is the first candidate."""
    cq = cluster_queue(
        "q", flavors={"default": {"cpu": "2"}}, preemption={"withinClusterQueue": "LowerPriority"}
    )
    if mode:
        cq["spec"]["admissionScope"] = {"admissionMode": mode}
    running = [
        admitted("light-1", "q", usage={"cpu": "1"}, priority=0, reserved_at=5),
        admitted("heavy-1", "q", usage={"cpu": "1"}, priority=1, reserved_at=1),
    ]
    running[0].queue_name, running[1].queue_name = "light", "heavy"
    snap = snapshot([cq], workloads=running)
    ledger = UsageLedger(AfsConfig(half_life_seconds=HOUR))
    ledger.seed("default/heavy", {"cpu": Fraction(8)}, now=0)
    preemptor = Preemptor(snap, afs_ledger=ledger)
    wl = workload("new", "q", cpu="1", priority=5)
    a = assign_flavors(wl, snap.cluster_queues["q"], snap.flavors, oracle=preemptor.oracle)
    assert a.representative_mode() == Mode.PREEMPT
    assert [t.workload.name for t in preemptor.get_targets(wl, a, snap.cluster_queues["q"])] == [victim]
