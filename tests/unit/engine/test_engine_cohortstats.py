"""engine.cohortstats: the subtree quota, reservations and workload counts upstream's cohort
metrics report, and the hierarchy of the info metrics. The tree is the one of upstream's
fair-sharing metrics integration test (root with ch1, ch2 and ch3 below it)."""

from __future__ import annotations

from typing import Any

from engine_builders import admitted, cluster_queue, resource_flavor

from worker_agent.engine.cohortstats import (
    ancestors,
    cluster_queue_ancestors,
    in_cycle,
    lineage,
    subtree_stats,
)
from worker_agent.engine.snapshot import Snapshot

GI = 1024**3


def cohort(name: str, parent: str | None = None, flavors: dict[str, dict[str, Any]] | None = None) -> dict:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if flavors:
        groups = cluster_queue("x", flavors=flavors)["spec"]["resourceGroups"]
        spec["resourceGroups"] = groups
    return {"metadata": {"name": name}, "spec": spec}


def tree(workloads=()) -> Snapshot:
    cqs = [
        cluster_queue("cqa", cohort="ch1", flavors={"default": {"cpu": "10", "memory": "10Gi"}}),
        cluster_queue("cqb", cohort="ch1", flavors={"default": {"cpu": "5", "memory": "5Gi"}}),
        cluster_queue("cqd", cohort="ch2", flavors={"default": {"cpu": "5", "memory": "5Gi"}}),
        cluster_queue("cqe", cohort="ch2", flavors={"default": {"cpu": "5", "memory": "5Gi"}}),
        cluster_queue("cqg", cohort="ch3", flavors={"flavor2": {"cpu": "1", "memory": "1Gi"}}),
        cluster_queue("lone", flavors={"default": {"cpu": "1"}}),
    ]
    cohorts = [
        cohort("root", flavors={"flavor1": {"cpu": "20", "nvidia.com/gpu": "5"}}),
        cohort("ch1", "root", {"default": {"cpu": "15", "memory": "15Gi"}}),
        cohort("ch2", "root", {"default": {"cpu": "10", "memory": "10Gi"}}),
        cohort("ch3", "root", {"flavor1": {"cpu": "5", "nvidia.com/gpu": "1"}}),
    ]
    return Snapshot.from_objects(
        cluster_queues=cqs,
        cohorts=cohorts,
        resource_flavors=[resource_flavor(f) for f in ("default", "flavor1", "flavor2")],
        workloads=list(workloads),
    )


def test_subtree_quota_adds_up_the_cohort_its_queues_and_its_children():
    stats = subtree_stats(tree().cohorts.values())
    assert stats["ch1"].quota == {("default", "cpu"): 30_000, ("default", "memory"): 30 * GI}
    assert stats["ch2"].quota == {("default", "cpu"): 20_000, ("default", "memory"): 20 * GI}
    assert stats["ch3"].quota == {
        ("flavor1", "cpu"): 5_000,
        ("flavor1", "nvidia.com/gpu"): 1,
        ("flavor2", "cpu"): 1_000,
        ("flavor2", "memory"): GI,
    }
    assert stats["root"].quota == {
        ("default", "cpu"): 50_000,
        ("default", "memory"): 50 * GI,
        ("flavor1", "cpu"): 25_000,
        ("flavor1", "nvidia.com/gpu"): 6,
        ("flavor2", "cpu"): 1_000,
        ("flavor2", "memory"): GI,
    }
    assert stats["root"].reservations == {}
    assert stats["root"].flavor_resources()[0] == ("default", "cpu")


def test_lending_limits_keep_the_guaranteed_part_out_of_the_quota_but_not_the_reservations():
    snap = Snapshot.from_objects(
        cluster_queues=[
            cluster_queue("a", cohort="team", flavors={"default": {"cpu": ("10", None, "4")}}),
            cluster_queue("b", cohort="team", flavors={"default": {"cpu": "5"}}),
        ],
        resource_flavors=[resource_flavor("default")],
        workloads=[admitted("w", "a", usage={"cpu": "2"})],
    )
    stats = subtree_stats(snap.cohorts.values())["team"]
    assert stats.quota == {("default", "cpu"): 9_000}
    # Upstream sums the queues' usage, not only what they use of the cohort's quota: the 2 cpu
    # fit in a's guaranteed 6, so the cohort's own usage is 0.
    assert snap.cohorts["team"].usage.get(("default", "cpu"), 0) == 0
    assert stats.reservations == {("default", "cpu"): 2_000}


def test_reservations_add_up_the_usage_of_every_queue_of_the_subtree():
    snap = tree(
        workloads=[
            admitted("w1", "cqa", usage={"cpu": "2"}),
            admitted("w2", "cqa", usage={"cpu": "1", "memory": "1Gi"}),
            admitted("w3", "cqd", usage={"cpu": "3"}),
            admitted("w4", "cqg", flavor="flavor2", usage={"cpu": "500m"}),
        ]
    )
    counts = {"cqa": 1, "cqd": 1}
    stats = subtree_stats(snap.cohorts.values(), lambda cq: counts.get(cq.name, 0))
    assert stats["ch1"].reservations == {("default", "cpu"): 3_000, ("default", "memory"): GI}
    assert stats["ch2"].reservations == {("default", "cpu"): 3_000}
    assert stats["root"].reservations == {
        ("default", "cpu"): 6_000,
        ("default", "memory"): GI,
        ("flavor2", "cpu"): 500,
    }
    assert (stats["ch1"].reserving, stats["ch1"].admitted) == (2, 1)
    assert (stats["ch3"].reserving, stats["ch3"].admitted) == (1, 0)
    assert (stats["root"].reserving, stats["root"].admitted) == (4, 2)


def test_a_cohort_and_its_ancestors():
    snap = tree()
    assert [c.name for c in ancestors(snap, "ch1")] == ["ch1", "root"]
    assert [c.name for c in ancestors(snap, "root")] == ["root"]
    assert ancestors(snap, "nope") == [] and ancestors(snap, None) == []
    assert [c.name for c in cluster_queue_ancestors(snap, "cqd")] == ["ch2", "root"]
    assert cluster_queue_ancestors(snap, "lone") == [] and cluster_queue_ancestors(snap, "gone") == []
    only_path = subtree_stats(ancestors(snap, "ch3"))
    assert set(only_path) == {"ch3", "root"}


def test_lineage_names_each_cohorts_and_queues_parent_and_root():
    info = lineage(tree())
    assert info.cohorts == {
        "root": ("", "root"),
        "ch1": ("root", "root"),
        "ch2": ("root", "root"),
        "ch3": ("root", "root"),
    }
    assert info.cluster_queues == {
        "cqa": ("ch1", "root"),
        "cqb": ("ch1", "root"),
        "cqd": ("ch2", "root"),
        "cqe": ("ch2", "root"),
        "cqg": ("ch3", "root"),
        "lone": ("", ""),
    }


def test_an_implicit_cohort_is_its_own_root():
    snap = Snapshot.from_objects(
        cluster_queues=[cluster_queue("cqa", cohort="ch1", flavors={"default": {"cpu": "10"}})],
        resource_flavors=[resource_flavor("default")],
    )
    assert lineage(snap).cohorts == {"ch1": ("", "ch1")}
    assert lineage(snap).cluster_queues == {"cqa": ("ch1", "ch1")}
    assert subtree_stats(snap.cohorts.values())["ch1"].quota == {("default", "cpu"): 10_000}


def test_cohorts_in_a_cycle_have_no_stats_and_their_queues_no_cohort():
    snap = Snapshot.from_objects(
        cluster_queues=[cluster_queue("cq", cohort="a", flavors={"default": {"cpu": "1"}})],
        cohorts=[cohort("a", "b"), cohort("b", "a"), cohort("fine")],
        resource_flavors=[resource_flavor("default")],
    )
    assert in_cycle(snap.cohorts["a"]) and in_cycle(snap.cohorts["b"])
    assert not in_cycle(snap.cohorts["fine"])
    assert set(subtree_stats(snap.cohorts.values())) == {"fine"}
    assert ancestors(snap, "a") == []
    info = lineage(snap)
    assert info.cohorts == {"fine": ("", "fine")}
    assert info.cluster_queues == {"cq": ("", "")}
