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
    # cpu borrowed 2 of lendable 12 -> 166; memory 1Gi of 12Gi -> 83. Dominant: cpu; weight 2 -> 83.
    assert (share.ratio, share.resource) == (166, "cpu")
    assert share.value == Fraction(83)
    assert share.weighted_share == 83
    assert dominant_resource_share(snap.cluster_queues["b"]).weighted_share == 0
    assert dominant_resource_share(snap.cohorts["c"]).weighted_share == 0  # a root has share 0
    snap.add_workload(admitted("z1", "z", usage={"cpu": "5"}))
    inf = dominant_resource_share(snap.cluster_queues["z"])
    assert inf.infinite and inf.weighted_share == MAX_INT64
    assert inf > share
