"""The fair-sharing tournament's order with FairSharingPrioritizeNonBorrowing on (upstream's default)
and off: upstream's entryComparer.less (pkg/scheduler/fair_sharing_iterator.go)."""

import pytest
from engine_builders import admitted, cluster_queue, snapshot, workload
from test_engine_scheduler import make

from worker_agent.engine import QueueManager, Scheduler, SchedulerConfig


def two_queues():
    """a borrows gpu (3 of its 2) from the cohort, but its new workload asks only for cpu, within its
    quota; b's new workload makes b borrow 1 cpu. DRS: a 250 (1 gpu of 4 lendable), b 125 (1 of 8)."""
    quota = {"default": {"cpu": "4", "gpu": "2"}}
    cqs = [cluster_queue("a", cohort="c", flavors=quota), cluster_queue("b", cohort="c", flavors=quota)]
    running = [admitted("a0", "a", usage={"gpu": "3"}), admitted("b0", "b", usage={"cpu": "4"})]
    pending = [workload("wa", "a", cpu="1", created=2), workload("wb", "b", cpu="1", created=1)]
    return cqs, pending, running


@pytest.mark.parametrize(
    ("gate", "order"),
    [(True, ["default/wa", "default/wb"]), (False, ["default/wb", "default/wa"])],
)
def test_non_borrowing_on_the_requested_flavors_goes_first(gate, order):
    cqs, pending, running = two_queues()
    config = SchedulerConfig(fair_sharing=True, prioritize_non_borrowing=gate)
    _snap, _queues, sched = make(cqs, pending, running, config)
    result = sched.schedule()
    # Both fit; the decisions come in the tournament's order.
    assert [d.workload_key for d in result.admitted] == order


@pytest.mark.parametrize("gate", [True, False])
def test_both_non_borrowing_falls_through_to_fifo(gate):
    quota = {"default": {"cpu": "4"}}
    cqs = [cluster_queue("a", cohort="c", flavors=quota), cluster_queue("b", cohort="c", flavors=quota)]
    pending = [workload("newer", "a", cpu="1", created=5), workload("older", "b", cpu="1", created=1)]
    config = SchedulerConfig(fair_sharing=True, prioritize_non_borrowing=gate)
    _snap, _queues, sched = make(cqs, pending, config=config)
    assert [d.workload_key for d in sched.schedule().admitted] == ["default/older", "default/newer"]


def hierarchy():
    """Root r with cohorts left (CQ l) and right (CQ q). left as a whole borrows gpu from r, through
    l's running workload; l's new workload asks for cpu within l's and left's quota. q's new workload
    makes q, and right, borrow cpu a little: right's DRS (1 cpu of 16 lendable, 62) is below left's
    (1 gpu of 4, 250), yet left does not borrow on what its workload asks for."""
    quota = {"default": {"cpu": "8", "gpu": "2"}}
    cqs = [
        cluster_queue("l", cohort="left", flavors=quota),
        cluster_queue("q", cohort="right", flavors=quota),
    ]
    cohorts = [
        {"metadata": {"name": "left"}, "spec": {"parentName": "r"}},
        {"metadata": {"name": "right"}, "spec": {"parentName": "r"}},
    ]
    running = [admitted("l0", "l", usage={"gpu": "3"}), admitted("q0", "q", usage={"cpu": "8"})]
    pending = [workload("wl", "l", cpu="1", created=2), workload("wq", "q", cpu="1", created=1)]
    return cqs, cohorts, running, pending


@pytest.mark.parametrize(
    ("gate", "order"),
    [(True, ["default/wl", "default/wq"]), (False, ["default/wq", "default/wl"])],
)
def test_hierarchical_non_borrowing_subtree_first(gate, order):
    cqs, cohorts, running, pending = hierarchy()
    snap = snapshot(cqs, workloads=running, cohorts=cohorts)
    queues = QueueManager()
    for cq in cqs:
        queues.ensure(cq["metadata"]["name"])
    for wl in pending:
        queues.push(wl)
    sched = Scheduler(snap, queues, SchedulerConfig(fair_sharing=True, prioritize_non_borrowing=gate))
    assert [d.workload_key for d in sched.schedule().admitted] == order
