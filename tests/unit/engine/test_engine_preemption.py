from engine_builders import admitted, cluster_queue, snapshot, workload

from worker_agent.engine import Mode, Preemptor, assign_flavors
from worker_agent.engine.preemption import policy_allows


def targets_for(snap, wl, fair=False, strategies=None):
    kwargs = {"fair_sharing": fair}
    if strategies:
        kwargs["fair_sharing_strategies"] = strategies
    preemptor = Preemptor(snap, **kwargs)
    cq = snap.cluster_queues[wl.cluster_queue]
    a = assign_flavors(wl, cq, snap.flavors, oracle=preemptor.oracle, fair_sharing=fair)
    if a.representative_mode() != Mode.PREEMPT:
        return a, []
    return a, [(t.workload.name, t.reason) for t in preemptor.get_targets(wl, a, cq)]


def test_policies():
    hi = workload("hi", "q", priority=5, created=1)
    assert policy_allows("LowerPriority", hi, workload("lo", "q", priority=4))
    assert not policy_allows("LowerPriority", hi, workload("eq", "q", priority=5, created=2))
    assert policy_allows("LowerOrNewerEqualPriority", hi, workload("eq", "q", priority=5, created=2))
    assert not policy_allows("LowerOrNewerEqualPriority", hi, workload("eq", "q", priority=5, created=0))
    assert policy_allows("Any", hi, workload("x", "q", priority=99))
    assert not policy_allows("Never", hi, workload("lo", "q", priority=0))


def test_within_cluster_queue_lower_priority_minimal_set():
    cq = cluster_queue(
        "q", flavors={"default": {"cpu": "6"}}, preemption={"withinClusterQueue": "LowerPriority"}
    )
    snap = snapshot(
        [cq],
        workloads=[
            admitted("p1", "q", usage={"cpu": "2"}, priority=1, reserved_at=1),
            admitted("p0-old", "q", usage={"cpu": "2"}, priority=0, reserved_at=1),
            admitted("p0-new", "q", usage={"cpu": "2"}, priority=0, reserved_at=5),
        ],
    )
    _, targets = targets_for(snap, workload("w", "q", cpu="3", priority=3))
    # Lowest priority first, most recently reserved first; 2 victims free 4 >= 3.
    assert targets == [("p0-new", "InClusterQueue"), ("p0-old", "InClusterQueue")]
    _, targets = targets_for(snap, workload("w", "q", cpu="2", priority=3))
    assert targets == [("p0-new", "InClusterQueue")]
    # Equal priority is never preempted under LowerPriority.
    _, targets = targets_for(snap, workload("w", "q", cpu="2", priority=0))
    assert targets == []


def test_lower_or_newer_equal_priority():
    cq = cluster_queue(
        "q", flavors={"default": {"cpu": "2"}}, preemption={"withinClusterQueue": "LowerOrNewerEqualPriority"}
    )
    snap = snapshot([cq], workloads=[admitted("newer", "q", usage={"cpu": "2"}, priority=1, created=50)])
    _, targets = targets_for(snap, workload("w", "q", cpu="2", priority=1, created=10))
    assert targets == [("newer", "InClusterQueue")]
    _, targets = targets_for(snap, workload("w", "q", cpu="2", priority=1, created=60))
    assert targets == []


def test_reclaim_within_cohort():
    cqs = [
        cluster_queue(
            "q", cohort="c", flavors={"default": {"cpu": "4"}}, preemption={"reclaimWithinCohort": "Any"}
        ),
        cluster_queue("borrower", cohort="c", flavors={"default": {"cpu": "4"}}),
    ]
    snap = snapshot(
        cqs,
        workloads=[
            admitted("b1", "borrower", usage={"cpu": "3"}, priority=10, reserved_at=1),
            admitted("b2", "borrower", usage={"cpu": "3"}, priority=10, reserved_at=2),
        ],
    )
    a, targets = targets_for(snap, workload("w", "q", cpu="4"))
    assert a.representative_mode() == Mode.PREEMPT
    # Only the borrowed part needs freeing: one victim, the most recently reserved.
    assert targets == [("b2", "InCohortReclamation")]


def test_reclaim_lower_priority_and_within_nominal_cqs_are_safe():
    cqs = [
        cluster_queue(
            "q",
            cohort="c",
            flavors={"default": {"cpu": "4"}},
            preemption={"reclaimWithinCohort": "LowerPriority"},
        ),
        cluster_queue("borrower", cohort="c", flavors={"default": {"cpu": "4"}}),
        cluster_queue("modest", cohort="c", flavors={"default": {"cpu": "4"}}),
    ]
    snap = snapshot(
        cqs,
        workloads=[
            admitted("hi", "borrower", usage={"cpu": "6"}, priority=10),
            admitted("m", "modest", usage={"cpu": "4"}, priority=0),
        ],
    )
    _, targets = targets_for(snap, workload("w", "q", cpu="4", priority=5))
    assert targets == []
    snap2 = snapshot(
        cqs,
        workloads=[
            admitted("lo", "borrower", usage={"cpu": "6"}, priority=0),
            admitted("m", "modest", usage={"cpu": "4"}),
        ],
    )
    _, targets = targets_for(snap2, workload("w", "q", cpu="4", priority=5))
    assert targets == [("lo", "InCohortReclamation")]


def test_borrow_within_cohort_with_threshold():
    preemption = {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 5},
    }
    cqs = [
        cluster_queue("q", cohort="c", flavors={"default": {"cpu": "2"}}, preemption=preemption),
        cluster_queue("other", cohort="c", flavors={"default": {"cpu": "4"}}),
    ]
    # other uses 5 of its 4 (borrowing 1); q wants 3 = 2 nominal + 1 borrowed.
    snap = snapshot(cqs, workloads=[admitted("low", "other", usage={"cpu": "5"}, priority=3)])
    _, targets = targets_for(snap, workload("w", "q", cpu="3", priority=8))
    assert targets == [("low", "InCohortReclaimWhileBorrowing")]
    # Above the threshold: only reclaim without borrowing, which cannot make room for 3.
    snap = snapshot(cqs, workloads=[admitted("mid", "other", usage={"cpu": "5"}, priority=6)])
    _, targets = targets_for(snap, workload("w", "q", cpu="3", priority=8))
    assert targets == []


def test_fair_sharing_preemption_strategies():
    cqs = [
        cluster_queue(
            "a", cohort="c", flavors={"default": {"cpu": "3"}}, preemption={"reclaimWithinCohort": "Any"}
        ),
        cluster_queue("b", cohort="c", flavors={"default": {"cpu": "3"}}),
    ]
    workloads = [admitted(f"b{i}", "b", usage={"cpu": "1"}, reserved_at=i) for i in range(6)]
    snap = snapshot(cqs, workloads=workloads)
    # a is within nominal after admitting 1: preempt unconditionally.
    _, targets = targets_for(snap, workload("w", "a", cpu="1"), fair=True)
    assert targets == [("b5", "InCohortReclamation")]
    workloads = [admitted(f"b{i}", "b", usage={"cpu": "1"}, reserved_at=i) for i in range(4)]
    workloads += [admitted(f"a{i}", "a", usage={"cpu": "1"}, reserved_at=i) for i in range(2)]
    snap = snapshot(cqs, workloads=workloads)
    # a: 2 used, wants 2 more (borrow 1). Share a (with it) = 1/6 = 166; b borrowing 1 -> after removal 0.
    _, targets = targets_for(
        snap, workload("w", "a", cpu="2"), fair=True, strategies=["LessThanOrEqualToFinalShare"]
    )
    assert targets == []
    _, targets = targets_for(
        snap, workload("w", "a", cpu="2"), fair=True, strategies=["LessThanInitialShare"]
    )
    assert targets == []
    # Three CQs (cohort 9). b borrows 3 (share 3000*1000/9000 = 333); a is full and wants 1 more (share 111).
    cqs3 = [*cqs, cluster_queue("c", cohort="c", flavors={"default": {"cpu": "3"}})]
    workloads = [admitted(f"b{i}", "b", usage={"cpu": "1"}, reserved_at=i) for i in range(6)]
    workloads += [admitted("a0", "a", usage={"cpu": "3"})]
    snap = snapshot(cqs3, workloads=workloads)
    for strategy in ("LessThanInitialShare", "LessThanOrEqualToFinalShare"):
        _, targets = targets_for(snap, workload("w", "a", cpu="1"), fair=True, strategies=[strategy])
        assert targets == [("b5", "InCohortFairSharing")]
    # a would borrow as much as b: neither strategy lets it preempt.
    _, targets = targets_for(snap, workload("w", "a", cpu="3"), fair=True)
    assert targets == []
