from engine_builders import workload

from kueue_domain import api
from worker_agent.engine import ClusterQueuePending, QueueManager, WorkloadInfo
from worker_agent.engine.workloads import queue_order_time


def test_priority_then_timestamp_then_uid():
    q = ClusterQueuePending("cq")
    q.push_or_update(workload("old-low", "cq", priority=0, created=1))
    q.push_or_update(workload("new-high", "cq", priority=5, created=9))
    q.push_or_update(workload("old-high", "cq", priority=5, created=2))
    q.push_or_update(workload("b", "cq", priority=0, created=1))
    order = [q.pop().name for _ in range(4)]
    assert order == ["old-high", "new-high", "b", "old-low"]  # uid-b < uid-old-low


def test_queue_order_timestamp_uses_eviction_for_pods_ready_timeout():
    obj = {
        "metadata": {"name": "w", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "conditions": [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "PodsReadyTimeout",
                    "lastTransitionTime": "2026-01-01T01:00:00Z",
                }
            ]
        },
    }
    assert queue_order_time(obj) - queue_order_time({"metadata": obj["metadata"]}) == 3600
    assert queue_order_time(obj, "Creation") == queue_order_time({"metadata": obj["metadata"]})
    obj["status"]["conditions"][0]["reason"] = "AdmissionCheck"
    assert queue_order_time(obj, "Creation") - queue_order_time({"metadata": obj["metadata"]}) == 3600


def test_best_effort_parks_failed_head_and_strict_repushes():
    best = ClusterQueuePending("cq")
    best.push_or_update(workload("a", "cq", cpu="5", created=1))
    best.push_or_update(workload("b", "cq", cpu="1", created=2))
    head = best.pop()
    assert head.name == "a"
    assert best.requeue_if_not_present(head, api.REQUEUE_NO_FIT) is False
    assert best.pop().name == "b"
    assert "default/a" in best.inadmissible
    best.flush_inadmissible()
    assert best.pop().name == "a"

    strict = ClusterQueuePending("cq", "StrictFIFO")
    strict.push_or_update(workload("a", "cq", cpu="5", created=1))
    strict.push_or_update(workload("b", "cq", cpu="1", created=2))
    head = strict.pop()
    assert strict.requeue_if_not_present(head, api.REQUEUE_NO_FIT) is True
    assert strict.pop().name == "a"  # blocks the queue
    assert strict.requeue_if_not_present(head, api.REQUEUE_NAMESPACE_MISMATCH) is False


def test_queue_manager_push_and_requeue_keep_strict_fifo():
    queues = QueueManager()
    queues.ensure("cq", "StrictFIFO")
    queues.push(workload("a", "cq", cpu="5", created=1))
    queues.push(workload("b", "cq", cpu="1", created=2))
    assert queues.queues["cq"].strategy == "StrictFIFO"
    (head,) = queues.heads()
    # A StrictFIFO head that does not fit goes straight back and keeps blocking the queue.
    assert queues.requeue(head, api.REQUEUE_NO_FIT) is True
    assert queues.queues["cq"].strategy == "StrictFIFO"
    assert [w.name for w in queues.heads()] == ["a"]
    queues.ensure("cq", "BestEffortFIFO")
    assert queues.queues["cq"].strategy == "BestEffortFIFO"


def test_equivalent_workloads_bulk_moved_on_no_fit():
    q = ClusterQueuePending("cq")
    for i in range(3):
        q.push_or_update(workload(f"same-{i}", "cq", cpu="5", created=i))
    q.push_or_update(workload("other", "cq", cpu="1", created=9))
    head = q.pop()
    q.requeue_if_not_present(head, api.REQUEUE_NO_FIT)
    assert len(q.inadmissible) == 3
    assert q.pop().name == "other"
    # A new equivalent workload goes straight to inadmissible until a flush.
    q.push_or_update(workload("same-9", "cq", cpu="5", created=10))
    assert "default/same-9" in q.inadmissible
    assert q.flush_inadmissible() == 4


def test_sticky_preemptor_and_backoff():
    q = ClusterQueuePending("cq")
    q.push_or_update(workload("low", "cq", priority=0, created=0))
    q.push_or_update(workload("high", "cq", priority=9, created=1))
    high = q.pop()
    assert q.requeue_if_not_present(high, api.REQUEUE_PENDING_PREEMPTION) is True
    q.push_or_update(workload("higher", "cq", priority=20, created=2))
    assert q.pop().name == "high"  # sticky preemptor first

    q = ClusterQueuePending("cq")
    backoff: WorkloadInfo = workload("backoff", "cq", created=0)
    backoff.requeue_at = 100.0
    q.push_or_update(backoff, now=50.0)
    assert "default/backoff" in q.inadmissible and q.inadmissible_count() == 1
    q.flush_inadmissible(now=50.0)
    assert q.pop() is None, "still backing off at the flush's time"
    assert q.inadmissible_count() == 1
    q.push_or_update(workload("later", "cq", created=5))
    q.flush_inadmissible(now=100.0)
    assert q.inadmissible_count() == 0, "released by the flush: counted as active"
    assert [q.pop().name, q.pop().name] == ["backoff", "later"], "released in queue order"
    assert not q.inadmissible
    requeued_false = workload("rf", "cq")
    requeued_false.requeued_false = True
    q.push_or_update(requeued_false)
    assert "default/rf" in q.inadmissible


def test_parked_heaps_do_not_grow_with_updates_of_parked_workloads():
    q = ClusterQueuePending("cq")
    parked = workload("parked", "cq")
    parked.requeue_at = 100.0
    for _ in range(1000):  # every event re-parks it (still backing off)
        q.push_or_update(parked, now=0.0)
    assert len(q._parked) <= 64 + 3
    q.flush_inadmissible(now=0.0)  # released, still backing off: parked again when its turn comes
    for _ in range(1000):
        q.push_or_update(parked, now=0.0)
    assert len(q._parked) + len(q._released) <= 2 * (64 + 3)
    q.flush_inadmissible(now=100.0)
    assert q.pop().name == "parked"


def test_a_parked_workload_updated_in_place_stays_parked_until_a_flush():
    """Kueue's PushOrUpdate: an update that cannot make it admissible keeps it parked."""
    q = ClusterQueuePending("cq")
    q.push_or_update(workload("large", "cq", cpu="5", priority=200, created=1))
    q.push_or_update(workload("small", "cq", cpu="1", created=2))
    head = q.pop()
    assert q.requeue_if_not_present(head, api.REQUEUE_NO_FIT) is False
    newer = workload("large", "cq", cpu="5", priority=200, created=1)
    assert q.update_parked(newer) is True
    assert q.inadmissible["default/large"] is newer
    assert q.pop().name == "small"  # the large one did not come back with the update
    assert q.update_parked(workload("other", "cq")) is False  # not parked: nothing to update
    q.flush_inadmissible()
    assert q.pop() is newer


def test_queue_manager_updates_in_place_only_in_the_workloads_own_cluster_queue():
    queues = QueueManager()
    queues.push(workload("w", "cq-a", created=1))
    head = queues.queues["cq-a"].pop()
    queues.queues["cq-a"].requeue_if_not_present(head, api.REQUEUE_NO_FIT)
    assert queues.update_parked(workload("w", "cq-b", created=1)) is False
    assert queues.update_parked(workload("w", "cq-a", created=1)) is True
