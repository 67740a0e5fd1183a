from engine_builders import admitted, cluster_queue, snapshot

from worker_agent.engine.snapshot import (
    add_usage,
    available,
    borrowing_level,
    potential_available,
    remove_usage,
)

CPU = ("default", "cpu")


def test_worked_example_borrowing_limit():
    snap = snapshot(
        [
            cluster_queue("a", cohort="c", flavors={"default": {"cpu": "5"}}),
            cluster_queue("b", cohort="c", flavors={"default": {"cpu": ("5", "10")}}),
        ]
    )
    a, b = snap.cluster_queues["a"], snap.cluster_queues["b"]
    assert potential_available(b, CPU) == 10_000
    assert available(b, CPU) == 10_000
    assert snap.cohorts["c"].subtree_quota[CPU] == 10_000
    # A takes 3: B can only get the 7 left in the cohort.
    add_usage(a, CPU, 3000)
    assert available(b, CPU) == 7000
    assert snap.cohorts["c"].usage[CPU] == 3000
    remove_usage(a, CPU, 3000)
    assert snap.cohorts["c"].usage[CPU] == 0


def test_worked_example_lending_limit():
    snap = snapshot(
        [
            cluster_queue("a", cohort="c", flavors={"default": {"cpu": ("5", None, "2")}}),
            cluster_queue("b", cohort="c", flavors={"default": {"cpu": ("5", "10")}}),
        ]
    )
    a, b = snap.cluster_queues["a"], snap.cluster_queues["b"]
    assert a.local_quota[CPU] == 3000
    assert snap.cohorts["c"].subtree_quota[CPU] == 7000
    assert potential_available(b, CPU) == 7000
    assert potential_available(a, CPU) == 10_000
    # A's first 3 stay local; only the excess reaches the cohort.
    add_usage(a, CPU, 4000)
    assert a.usage[CPU] == 4000 and snap.cohorts["c"].usage[CPU] == 1000
    assert available(b, CPU) == 6000
    assert available(a, CPU) == 6000
    remove_usage(a, CPU, 2000)
    assert a.usage[CPU] == 2000 and snap.cohorts["c"].usage[CPU] == 0


def test_borrowing_limit_caps_available():
    snap = snapshot(
        [
            cluster_queue("a", cohort="c", flavors={"default": {"cpu": "10"}}),
            cluster_queue("b", cohort="c", flavors={"default": {"cpu": ("4", "2")}}),
        ]
    )
    b = snap.cluster_queues["b"]
    assert available(b, CPU) == 6000 and potential_available(b, CPU) == 6000
    add_usage(b, CPU, 5000)
    assert available(b, CPU) == 1000


def test_standalone_cq():
    snap = snapshot([cluster_queue("solo", flavors={"default": {"cpu": "4"}})], workloads=[])
    solo = snap.cluster_queues["solo"]
    snap.add_workload(admitted("w", "solo", usage={"cpu": "3"}))
    assert available(solo, CPU) == 1000 and potential_available(solo, CPU) == 4000
    assert borrowing_level(solo, CPU, 2000) == (0, False)
    snap.remove_workload("default/w")
    assert available(solo, CPU) == 4000


def test_borrowing_level_flat_cohort():
    snap = snapshot(
        [
            cluster_queue("a", cohort="c", flavors={"default": {"cpu": "5"}}),
            cluster_queue("b", cohort="c", flavors={"default": {"cpu": "5"}}),
        ]
    )
    a = snap.cluster_queues["a"]
    assert borrowing_level(a, CPU, 5000) == (0, True)
    assert borrowing_level(a, CPU, 6000) == (1, False)
    assert borrowing_level(a, CPU, 11_000) == (1, False)


def test_hierarchical_cohorts():
    cohorts = [
        {
            "metadata": {"name": "root"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}],
                    }
                ]
            },
        },
        {"metadata": {"name": "left"}, "spec": {"parentName": "root"}},
    ]
    snap = snapshot(
        [
            cluster_queue("a", cohort="left", flavors={"default": {"cpu": "2"}}),
            cluster_queue("b", cohort="root", flavors={"default": {"cpu": "2"}}),
        ],
        cohorts=cohorts,
    )
    root, left = snap.cohorts["root"], snap.cohorts["left"]
    a = snap.cluster_queues["a"]
    assert left.subtree_quota[CPU] == 2000 and root.subtree_quota[CPU] == 8000
    assert root.height() == 2 and left.height() == 1
    assert potential_available(a, CPU) == 8000
    assert borrowing_level(a, CPU, 2000) == (0, True)
    assert borrowing_level(a, CPU, 3000) == (2, False)
    assert a.path_from_root() == "/root/left/a"


def test_admitted_usage_scaled_by_reclaimable_pods():
    obj = {
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"podSets": [{"name": "main", "count": 4, "template": {"spec": {}}}]},
        "status": {
            "admission": {
                "clusterQueue": "q",
                "podSetAssignments": [
                    {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "4"}, "count": 4}
                ],
            },
            "reclaimablePods": [{"name": "main", "count": 1}],
        },
    }
    snap = snapshot([cluster_queue("q", flavors={"default": {"cpu": "10"}})], workloads=[obj])
    assert snap.cluster_queues["q"].usage[CPU] == 3000
