from fractions import Fraction

from engine_builders import admitted, cluster_queue, snapshot

from worker_agent.engine import dominant_resource_share
from worker_agent.engine.fairsharing import MAX_INT64


def test_drs_and_weighted_share():
    cqs = [
        cluster_queue("a", cohort="c", flavors={"default": {"cpu": "4", "memory": "4Gi"}}, weight="2"),
        cluster_queue("b", cohort="c", flavors={"default": {"cpu": "4", "memory": "4Gi"}}),
        cluster_queue("z", cohort="c", flavors={"default": {"cpu": "4", "memory": "4Gi"}}, weight="0"),
    ]
    snap = snapshot(
        cqs,
        workloads=[
            admitted("a1", "a", usage={"cpu": "6", "memory": "5Gi"}),
            admitted("b1", "b", usage={"cpu": "1"}),
        ],
    )
    share = dominant_resource_share(snap.cluster_queues["a"])
    # cpu borrowed 2 of lendable 12 -> 166.67 (unrounded, as upstream v0.19's float); memory 1Gi of
    # 12Gi -> 83.3. Dominant: cpu; weight 2 -> 83.3, written rounded up: 84.
    assert (share.ratio, share.resource) == (Fraction(2000, 12), "cpu")
    assert share.value == Fraction(1000, 12)
    assert share.weighted_share == 84
    assert dominant_resource_share(snap.cluster_queues["b"]).weighted_share == 0
    assert dominant_resource_share(snap.cohorts["c"]).weighted_share == 0  # a root has share 0
    snap.add_workload(admitted("z1", "z", usage={"cpu": "5"}))
    inf = dominant_resource_share(snap.cluster_queues["z"])
    assert inf.infinite and inf.weighted_share == MAX_INT64
    assert inf > share


def test_the_weighted_share_rounds_the_unrounded_ratio_up():
    # Upstream's e2e "should update the ClusterQueue.status.fairSharing.weightedShare": three CQs of
    # 9 CPU in a cohort, one using 12: 3 borrowed of 27 lendable -> 111.1, written 112 (not 111).
    cqs = [cluster_queue(n, cohort="c", flavors={"default": {"cpu": "9"}}) for n in ("cq1", "cq2", "cq3")]
    snap = snapshot(cqs, workloads=[admitted("j", "cq1", usage={"cpu": "12"})])
    assert dominant_resource_share(snap.cluster_queues["cq1"]).weighted_share == 112
    assert dominant_resource_share(snap.cluster_queues["cq2"]).weighted_share == 0
