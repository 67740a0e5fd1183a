"""Inadmissible flushes are batched per cohort tree for 1 s, as upstream's requeuer does.

Retrying parked workloads sooner lets them borrow the capacity a finishing preemptor frees, only
to be evicted by the next preemptor that reclaims it: on the baseline mix that was most of our
extra evictions against upstream (docs/differential.md, "What the baseline mix shows").
"""

from pathlib import Path

from engine_builders import cluster_queue, snapshot, workload
from engine_replay import load, replay

from kueue_domain import api
from worker_agent.engine import (
    REQUEUE_BATCH_SECONDS,
    Admit,
    Preempt,
    QueueManager,
    RequeueBatcher,
    Scheduler,
    requeue_scope,
)

REPO = Path(__file__).resolve().parents[3]
BASELINE_MINI = REPO / "tests" / "scenarios" / "long" / "baseline-mini.yaml"
# Upstream v0.19.2 evicted 9 times on baseline-mini (docs/differential.md); issue 10 accepts 2x.
UPSTREAM_BASELINE_MINI_EVICTIONS = 9


def test_batch_period_is_upstreams():
    assert REQUEUE_BATCH_SECONDS == 1.0
    assert RequeueBatcher().period == 1.0


def test_requests_join_the_open_window_of_their_scope_and_do_not_postpone_it():
    batcher = RequeueBatcher()
    assert batcher.request("Cohort/c", "a", now=10.0) == 11.0
    assert batcher.request("Cohort/c", "b", now=10.5) is None, "joins the open window"
    assert batcher.request("Cohort/c", "a", now=10.9) is None
    assert batcher.due_at("Cohort/c") == 11.0, "later requests do not postpone the flush"
    assert batcher.request("ClusterQueue/x", "x", now=10.5) == 11.5, "another scope has its own window"
    assert batcher.take_due(10.99) == set()
    assert batcher.take_due(11.0) == {"a", "b"}
    assert batcher.pending() == 1
    assert batcher.request("Cohort/c", "b", now=11.2) == 12.2, "a request after the flush opens a new window"
    assert batcher.take("ClusterQueue/x") == {"x"}
    assert batcher.take("ClusterQueue/x") == set()


def test_scope_is_the_root_cohort_or_the_lone_cluster_queue():
    cqs = [
        cluster_queue("a", cohort="left"),
        cluster_queue("b", cohort="right"),
        cluster_queue("alone"),
    ]
    cohorts = [
        {"metadata": {"name": "left"}, "spec": {"parentName": "root"}},
        {"metadata": {"name": "right"}, "spec": {"parentName": "root"}},
        {"metadata": {"name": "root"}, "spec": {}},
    ]
    snap = snapshot(cqs, cohorts=cohorts)
    assert requeue_scope(snap, "a") == requeue_scope(snap, "b") == "Cohort/root"
    assert requeue_scope(snap, "alone") == "ClusterQueue/alone"
    assert requeue_scope(snap, "unknown") == "ClusterQueue/unknown"


def _cohort_of_three():
    return [
        cluster_queue(
            name,
            cohort="cohort",
            flavors={"default": {"cpu": ("20", "100")}},
            preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        )
        for name in ("cq-0", "cq-1", "cq-2")
    ]


def _cycles(scheduler: Scheduler, now: float) -> list:
    """Cycles at `now` until one makes no progress; every decision taken."""
    decisions = []
    while True:
        result = scheduler.schedule(now)
        decisions += result.decisions
        if not result.progressed():
            return decisions


def test_parked_borrowers_wait_for_the_window_and_the_next_preemptor_evicts_nothing():
    """The baseline's churn in small: three large workloads fill the cohort, small ones park
    (no preemption candidates). The large ones finish at t=1; new large ones arrive at t=1.2.
    The small ones are retried only at t=2 (first finish + 1 s), so the new large ones find the
    cohort free and nothing is evicted."""
    snap = snapshot(_cohort_of_three())
    queues = QueueManager()
    for name in ("cq-0", "cq-1", "cq-2"):
        queues.ensure(name, "BestEffortFIFO")
    scheduler = Scheduler(snap, queues)
    batcher = RequeueBatcher()

    for i in range(3):
        queues.push(workload(f"large-0-{i}", f"cq-{i}", cpu="20", priority=200, created=0), now=0.0)
    assert len([d for d in _cycles(scheduler, 0.0) if isinstance(d, Admit)]) == 3
    for i in range(3):
        for j in range(2):
            queues.push(workload(f"small-{i}-{j}", f"cq-{i}", cpu="1", priority=50, created=1), now=0.5)
    decisions = _cycles(scheduler, 0.5)
    assert not [d for d in decisions if isinstance(d, Admit | Preempt)]
    assert {d.requeue_reason for d in decisions} == {api.REQUEUE_PREEMPTION_NO_CANDIDATES}
    assert sum(len(q.inadmissible) for q in queues.queues.values()) == 6, "all parked"

    # t=1.0: the large workloads finish; each finish requests a flush of the cohort tree.
    for i in range(3):
        snap.remove_workload(f"default/large-0-{i}")
        batcher.request(requeue_scope(snap, f"cq-{i}"), f"cq-{i}", now=1.0)
    assert batcher.take_due(1.1) == set(), "not retried 0.1 s later"
    assert _cycles(scheduler, 1.1) == [], "nothing to pop: the small ones stay parked"

    # t=1.2: new large workloads arrive and take their nominal quota without preempting.
    for i in range(3):
        queues.push(workload(f"large-1-{i}", f"cq-{i}", cpu="20", priority=200, created=2), now=1.2)
    decisions = _cycles(scheduler, 1.2)
    assert not [d for d in decisions if isinstance(d, Preempt)]
    assert sorted(d.workload_key for d in decisions if isinstance(d, Admit)) == [
        f"default/large-1-{i}" for i in range(3)
    ]

    # t=2.0: the window closes; the parked small workloads are tried again (and still do not fit).
    names = batcher.take_due(2.0)
    assert names == {"cq-0", "cq-1", "cq-2"}
    queues.flush(names, now=2.0)
    decisions = _cycles(scheduler, 2.0)
    assert {d.workload_key for d in decisions} >= {f"default/small-{i}-0" for i in range(3)}
    assert not [d for d in decisions if isinstance(d, Admit | Preempt)]


def test_baseline_mini_replay_evicts_about_as_often_as_upstream():
    """A deterministic replay of tests/scenarios/long/baseline-mini.yaml on the engine, with the
    driver's batching: within issue 10's bound of twice upstream's evictions (it evicted 67
    times with flushes 0.1 s after a change)."""
    result = replay(load(BASELINE_MINI))
    assert len(result.finished) == 150
    assert sum(result.evictions.values()) <= 2 * UPSTREAM_BASELINE_MINI_EVICTIONS
    assert max(result.evictions.values(), default=0) == 1, "no Workload evicted twice"
    # Only the first large workloads (t=1.2 s) find borrowers to evict; later ones find the
    # cohort free because the parked borrowers wait for the batch window.
    preemptors = {preemptor for _, _, preemptor in result.preemptions}
    assert preemptors <= {f"cq-{i}/large-0" for i in range(3)}
    assert len([k for k in result.admitted_at if "/large-" in k]) == 15
