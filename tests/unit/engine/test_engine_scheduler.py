from engine_builders import admitted, cluster_queue, snapshot, workload

from worker_agent.engine import Admit, Preempt, QueueManager, Requeue, Scheduler, SchedulerConfig


def make(cqs, pending, admitted_wls=(), config=None, flavors=None):
    snap = snapshot(cqs, flavors=flavors, workloads=list(admitted_wls))
    queues = QueueManager()
    for cq in cqs:
        queues.ensure(cq["metadata"]["name"], cq["spec"].get("queueingStrategy", "BestEffortFIFO"))
    for wl in pending:
        queues.push(wl)
    return snap, queues, Scheduler(snap, queues, config)


def test_one_head_per_cq_and_later_entries_see_usage():
    cqs = [
        cluster_queue("a", cohort="c", flavors={"default": {"cpu": "2"}}),
        cluster_queue("b", cohort="c", flavors={"default": {"cpu": "2"}}),
    ]
    pending = [
        workload("a1", "a", cpu="3", priority=1),
        workload("a2", "a", cpu="1"),
        workload("b1", "b", cpu="2"),
    ]
    snap, _queues, sched = make(cqs, pending)
    result = sched.schedule()
    assert result.heads == 2
    # b1 does not borrow (level 0) so it goes first; a1 then needs 3 of the 2 left.
    assert [type(d).__name__ for d in result.decisions] == ["Admit", "Requeue"]
    assert result.decisions[0] == Admit(
        "default/b1",
        {
            "clusterQueue": "b",
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "2"}, "count": 1}
            ],
        },
    )
    requeue = result.decisions[1]
    # a1 was nominated as Fit (borrowing) but b1 took the quota first in the same cycle.
    assert requeue == Requeue(
        "default/a1",
        "WaitingForQuota",
        "Workload no longer fits after processing another workload",
        "FailedAfterNomination",
    )
    assert snap.cluster_queues["b"].usage[("default", "cpu")] == 2000
    # FailedAfterNomination is immediate: a1 is the head again, now NoFit, and gets parked.
    result = sched.schedule()
    assert [(d.workload_key, d.requeue_reason) for d in result.requeued] == [("default/a1", "NoFit")]
    # BestEffortFIFO: the next cycle tries a2.
    result = sched.schedule()
    assert [d.workload_key for d in result.admitted] == ["default/a2"]


def test_exceeds_max_quota_and_no_matching_flavor_reasons():
    cqs = [cluster_queue("a", flavors={"default": {"cpu": "2"}})]
    _, _, sched = make(cqs, [workload("big", "a", cpu="3")])
    (requeue,) = sched.schedule().decisions
    assert requeue.reason == "ExceedsMaxQuota"
    assert requeue.requeue_reason == "NoFit"
    _snap, _queues, sched = make(cqs, [workload("gpu", "a", requests={"nvidia.com/gpu": "1"})])
    (requeue,) = sched.schedule().decisions
    assert requeue == Requeue(
        "default/gpu",
        "NoMatchingFlavor",
        "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue",
        "NoFit",
    )


def test_inactive_missing_cq_and_namespace_mismatch():
    cqs = [
        cluster_queue("held", flavors={"default": {"cpu": "2"}}, stop_policy="Hold"),
        cluster_queue(
            "picky", flavors={"default": {"cpu": "2"}}, namespace_selector={"matchLabels": {"team": "x"}}
        ),
    ]
    snap, queues, sched = make(cqs, [workload("w", "held"), workload("p", "picky"), workload("m", "missing")])
    result = sched.schedule(namespace_labels={"default": {"team": "y"}})
    by_key = {d.workload_key: d for d in result.decisions}
    # Inactive CQs are not popped at all.
    assert "default/w" not in by_key
    assert by_key["default/p"].reason == "Misconfigured"
    assert by_key["default/p"].message == "workload namespace doesn't match ClusterQueue selector"
    snap.cluster_queues["held"].active = True
    queues.queues["held"].inflight = None


def test_preemption_decisions_and_no_double_preemption():
    cqs = [
        cluster_queue(
            "q", flavors={"default": {"cpu": "4"}}, preemption={"withinClusterQueue": "LowerPriority"}
        )
    ]
    running = [admitted("low", "q", usage={"cpu": "4"}, priority=0)]
    snap, _queues, sched = make(cqs, [workload("high", "q", cpu="2", priority=10)], running)
    result = sched.schedule()
    preempt = [d for d in result.decisions if isinstance(d, Preempt)]
    assert preempt == [
        Preempt(
            "default/low",
            "InClusterQueue",
            "Preempted to accommodate a workload (UID: uid-high, JobUID: UNKNOWN) due to prioritization "
            "in the ClusterQueue; preemptor path: /q; preemptee path: /q",
            "default/high",
        )
    ]
    (requeue,) = result.requeued
    assert requeue.reason == "WaitingForPreemptedWorkloads"
    assert requeue.message.endswith(". Pending the preemption of 1 workload(s)")
    # The preemptor is sticky; the victim is not preempted again while the preemption is in flight.
    result = sched.schedule()
    assert result.preempted == []
    # The victim leaves; the preemptor is admitted.
    snap.remove_workload("default/low")
    sched.observe_removed("default/low")
    result = sched.schedule()
    assert [d.workload_key for d in result.admitted] == ["default/high"]


def test_a_waiting_preemptor_is_not_recomputed_while_its_quota_tree_is_unchanged():
    cqs = [
        cluster_queue(
            "q",
            cohort="c",
            flavors={"default": {"cpu": "4"}},
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
        cluster_queue("other", cohort="c", flavors={"default": {"cpu": "0"}}),
    ]
    running = [admitted("low", "q", usage={"cpu": "4"}, priority=0)]
    snap, _queues, sched = make(cqs, [workload("high", "q", cpu="2", priority=10)], running)
    first = sched.schedule()
    assert [d.victim_key for d in first.preempted] == ["default/low"] and sched.nominations_reused == 0
    for _ in range(3):  # nothing in the tree changed: the nomination is reused, with the same result
        again = sched.schedule()
        assert again.requeued == first.requeued and again.admitted == []
    assert sched.nominations_reused == 3
    # Any workload of the tree added or removed (here the victim updated, e.g. seen Evicted)
    # makes the next cycle recompute it.
    snap.add_workload(snap.workloads["default/low"])
    assert sched.schedule().requeued == first.requeued
    assert sched.nominations_reused == 3
    sched.schedule()
    assert sched.nominations_reused == 4
    snap.remove_workload("default/low")
    sched.observe_removed("default/low")
    assert [d.workload_key for d in sched.schedule().admitted] == ["default/high"]


def test_preemptor_keeps_its_flavor_while_victims_are_pending():
    """whenCanPreempt MayStopSearch reclaims in the first flavor; the sticky preemptor must not resume
    its flavor scan after that flavor in the next cycles and take the second one."""
    cqs = [
        cluster_queue(
            "main",
            cohort="c",
            flavors={"f1": {"cpu": "4"}, "f2": {"cpu": "4"}},
            preemption={"reclaimWithinCohort": "Any"},
            fungibility={"whenCanPreempt": "MayStopSearch"},
        ),
        cluster_queue("other", cohort="c", flavors={"f1": {"cpu": "0"}}),
    ]
    running = [admitted("borrower", "other", flavor="f1", usage={"cpu": "4"})]
    snap, _queues, sched = make(cqs, [workload("owner", "main", cpu="4")], running)
    result = sched.schedule()
    assert [d.victim_key for d in result.preempted] == ["default/borrower"]
    for _ in range(3):
        result = sched.schedule()
        assert result.admitted == []
        assert [d.reason for d in result.requeued] == ["WaitingForPreemptedWorkloads"]
    snap.remove_workload("default/borrower")
    sched.observe_removed("default/borrower")
    (admit,) = sched.schedule().admitted
    assert admit.admission["podSetAssignments"][0]["flavors"] == {"cpu": "f1"}


def test_overlapping_targets_are_skipped():
    preemption = {"reclaimWithinCohort": "Any"}
    cqs = [
        cluster_queue("a", cohort="c", flavors={"default": {"cpu": "2"}}, preemption=preemption),
        cluster_queue("b", cohort="c", flavors={"default": {"cpu": "2"}}, preemption=preemption),
        cluster_queue("hog", cohort="c", flavors={"default": {"cpu": "0"}}),
    ]
    running = [admitted("hog1", "hog", usage={"cpu": "4"})]
    _snap, _queues, sched = make(cqs, [workload("wa", "a", cpu="2"), workload("wb", "b", cpu="2")], running)
    result = sched.schedule()
    assert [d.victim_key for d in result.preempted] == ["default/hog1"]
    reasons = {d.workload_key: d.reason for d in result.requeued}
    # wb's target overlaps wa's; with hog1 gone wb fits: DeferredFit, waiting for the same preemption.
    assert reasons == {
        "default/wa": "WaitingForPreemptedWorkloads",
        "default/wb": "WaitingForPreemptedWorkloads",
    }


def test_partial_admission():
    cqs = [cluster_queue("q", flavors={"default": {"cpu": "5"}})]
    _snap, _queues, sched = make(cqs, [workload("p", "q", cpu="1", count=8, min_count=2)])
    (admit,) = sched.schedule().admitted
    psa = admit.admission["podSetAssignments"][0]
    assert psa["count"] == 5 and psa["resourceUsage"] == {"cpu": "5"}


def test_fair_sharing_orders_by_share():
    cqs = [
        cluster_queue("a", cohort="c", flavors={"default": {"cpu": "2"}}),
        cluster_queue("b", cohort="c", flavors={"default": {"cpu": "2"}}),
    ]
    running = [admitted("a0", "a", usage={"cpu": "3"})]
    pending = [workload("wa", "a", cpu="1", priority=100), workload("wb", "b", cpu="1")]
    _snap, _queues, sched = make(cqs, pending, running, SchedulerConfig(fair_sharing=True))
    result = sched.schedule()
    assert [d.workload_key for d in result.admitted] == ["default/wb"]


def test_block_admission_admits_at_most_one_workload_per_cycle():
    cqs = [
        cluster_queue("a", flavors={"default": {"cpu": "4"}}),
        cluster_queue("b", flavors={"default": {"cpu": "4"}}),
    ]
    pending = [workload("wa", "a", cpu="1"), workload("wb", "b", cpu="1")]
    _, _, sched = make(cqs, pending, config=SchedulerConfig(block_admission=True))
    result = sched.schedule()
    assert len(result.admitted) == 1
    (blocked,) = result.requeued
    assert (blocked.reason, blocked.message, blocked.requeue_reason) == (
        "WaitingForPodsReady",
        "waiting for all admitted workloads to be in PodsReady condition",
        "FailedAfterNomination",
    )
    # Without blockAdmission both are admitted in one cycle.
    _, _, sched = make(cqs, [workload("wa", "a", cpu="1"), workload("wb", "b", cpu="1")])
    assert len(sched.schedule().admitted) == 2
