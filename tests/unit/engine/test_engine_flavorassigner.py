from engine_builders import cluster_queue, resource_flavor, snapshot, workload

from worker_agent.engine import Mode, assign_flavors

SPOT_TAINT = {"key": "instance", "value": "spot", "effect": "NoSchedule"}


def two_flavors(fungibility=None, cohort=None, on_demand=("10", None), spot=("10", None)):
    cq = cluster_queue(
        "cq",
        cohort=cohort,
        fungibility=fungibility,
        flavors={"on-demand": {"cpu": on_demand}, "spot": {"cpu": spot}},
    )
    flavors = [
        resource_flavor("on-demand", labels={"instance": "on-demand"}),
        resource_flavor("spot", labels={"instance": "spot"}, taints=[SPOT_TAINT]),
    ]
    return cq, flavors


def test_first_flavor_fits():
    cq, flavors = two_flavors()
    snap = snapshot([cq], flavors)
    a = assign_flavors(workload("w", "cq", cpu="3"), snap.cluster_queues["cq"], snap.flavors)
    assert a.representative_mode() == Mode.FIT
    assert a.to_admission("cq").to_api()["podSetAssignments"] == [
        {"name": "main", "flavors": {"cpu": "on-demand"}, "resourceUsage": {"cpu": "3"}, "count": 1}
    ]
    assert a.usage == {("on-demand", "cpu"): 3000}


def test_taint_blocks_second_flavor_unless_tolerated():
    cq, flavors = two_flavors(on_demand=("2", None))
    snap = snapshot([cq], flavors)
    a = assign_flavors(workload("w", "cq", cpu="3"), snap.cluster_queues["cq"], snap.flavors)
    assert a.representative_mode() == Mode.NO_FIT
    assert a.message() == (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor on-demand, previously "
        "considered podsets requests (0) + current podset request (3) > maximum capacity (2), "
        "untolerated taint {instance spot NoSchedule <nil>} in flavor spot"
    )
    assert a.no_fit_reason == "ExceedsMaxQuota"

    tolerating = workload(
        "t",
        "cq",
        cpu="3",
        tolerations=[{"key": "instance", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}],
    )
    a = assign_flavors(tolerating, snap.cluster_queues["cq"], snap.flavors)
    assert a.representative_mode() == Mode.FIT
    assert a.podsets[0].flavors["cpu"].name == "spot"


def test_flavor_tolerations_tolerate_own_taints():
    cq = cluster_queue("cq", flavors={"tainted": {"cpu": "4"}})
    flavors = [
        resource_flavor(
            "tainted", taints=[SPOT_TAINT], tolerations=[{"key": "instance", "operator": "Exists"}]
        )
    ]
    snap = snapshot([cq], flavors)
    assert (
        assign_flavors(workload("w", "cq"), snap.cluster_queues["cq"], snap.flavors).representative_mode()
        == Mode.FIT
    )


def test_prefer_no_schedule_is_ignored():
    cq = cluster_queue("cq", flavors={"soft": {"cpu": "4"}})
    flavors = [resource_flavor("soft", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}])]
    snap = snapshot([cq], flavors)
    assert (
        assign_flavors(workload("w", "cq"), snap.cluster_queues["cq"], snap.flavors).representative_mode()
        == Mode.FIT
    )


def test_node_selector_and_affinity():
    cq, flavors = two_flavors()
    snap = snapshot([cq], flavors)
    tol = [{"key": "instance", "operator": "Exists"}]
    wl = workload("w", "cq", cpu="1", nodeSelector={"instance": "spot", "zone": "a"}, tolerations=tol)
    a = assign_flavors(wl, snap.cluster_queues["cq"], snap.flavors)
    # `zone` is not a label of any flavor: ignored.
    assert a.podsets[0].flavors["cpu"].name == "spot"
    assert a.podsets[0].reasons == []

    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "instance", "operator": "NotIn", "values": ["on-demand"]}]}
                ]
            }
        }
    }
    wl = workload("x", "cq", cpu="1", affinity=affinity, tolerations=tol)
    assert (
        assign_flavors(wl, snap.cluster_queues["cq"], snap.flavors).podsets[0].flavors["cpu"].name == "spot"
    )

    wl = workload("y", "cq", cpu="1", nodeSelector={"instance": "gpu"})
    a = assign_flavors(wl, snap.cluster_queues["cq"], snap.flavors)
    assert a.message() == (
        "couldn't assign flavors to pod set main: flavor on-demand doesn't match node affinity, "
        "untolerated taint {instance spot NoSchedule <nil>} in flavor spot"
    )
    assert a.no_fit_reason == "NoMatchingFlavor"


def test_missing_flavor_and_undeclared_resource():
    cq = cluster_queue("cq", flavors={"ghost": {"cpu": "4"}})
    snap = snapshot([cq], flavors=[])
    a = assign_flavors(workload("w", "cq"), snap.cluster_queues["cq"], snap.flavors)
    assert a.message() == "couldn't assign flavors to pod set main: flavor ghost not found"
    snap = snapshot([cq])
    a = assign_flavors(
        workload("w", "cq", requests={"nvidia.com/gpu": "1"}), snap.cluster_queues["cq"], snap.flavors
    )
    assert (
        a.message()
        == "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue"
    )
    assert a.no_fit_reason == "NoMatchingFlavor"
    a = assign_flavors(
        workload("w", "cq", requests={"nvidia.com/gpu": "1"}),
        snap.cluster_queues["cq"],
        snap.flavors,
        quota_check_strategy="IgnoreUndeclared",
    )
    assert a.representative_mode() == Mode.FIT
    # Zero-quantity undeclared requests are always skipped.
    a = assign_flavors(
        workload("w", "cq", requests={"nvidia.com/gpu": "0"}), snap.cluster_queues["cq"], snap.flavors
    )
    assert a.representative_mode() == Mode.FIT


def test_borrowing_default_may_stop_search_vs_try_next_flavor():
    def setup(fungibility):
        cq = cluster_queue(
            "cq", cohort="co", fungibility=fungibility, flavors={"a": {"cpu": "2"}, "b": {"cpu": "4"}}
        )
        lender = cluster_queue("lender", cohort="co", flavors={"a": {"cpu": "10"}, "b": {"cpu": "0"}})
        return snapshot([cq, lender])

    snap = setup(None)
    a = assign_flavors(workload("w", "cq", cpu="3"), snap.cluster_queues["cq"], snap.flavors)
    assert a.podsets[0].flavors["cpu"].name == "a" and a.borrowing == 1
    snap = setup({"whenCanBorrow": "TryNextFlavor"})
    a = assign_flavors(workload("w", "cq", cpu="3"), snap.cluster_queues["cq"], snap.flavors)
    assert a.podsets[0].flavors["cpu"].name == "b" and a.borrowing == 0
    # v1beta1 `Borrow` means MayStopSearch.
    snap = setup({"whenCanBorrow": "Borrow"})
    a = assign_flavors(workload("w", "cq", cpu="3"), snap.cluster_queues["cq"], snap.flavors)
    assert a.podsets[0].flavors["cpu"].name == "a"


def test_preempt_mode_and_try_next_flavor():
    from engine_builders import admitted

    cq = cluster_queue(
        "cq",
        flavors={"a": {"cpu": "4"}, "b": {"cpu": "4"}},
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    snap = snapshot([cq], workloads=[admitted("low", "cq", flavor="a", usage={"cpu": "4"}, priority=0)])
    from worker_agent.engine import Preemptor

    preemptor = Preemptor(snap)
    a = assign_flavors(
        workload("w", "cq", cpu="2", priority=10),
        snap.cluster_queues["cq"],
        snap.flavors,
        oracle=preemptor.oracle,
    )
    # Default whenCanPreempt=TryNextFlavor: b fits outright.
    assert a.podsets[0].flavors["cpu"].name == "b" and a.representative_mode() == Mode.FIT
    snap.cluster_queues["cq"].flavor_fungibility = type(snap.cluster_queues["cq"].flavor_fungibility)(
        when_can_preempt="MayStopSearch"
    )
    a = assign_flavors(
        workload("w", "cq", cpu="2", priority=10),
        snap.cluster_queues["cq"],
        snap.flavors,
        oracle=preemptor.oracle,
    )
    assert a.podsets[0].flavors["cpu"].name == "a" and a.representative_mode() == Mode.PREEMPT
    expected = (
        "couldn't assign flavors to pod set main: "
        + "insufficient unused quota for cpu in flavor a, 2 more needed"
    )
    assert a.message() == expected


def test_resource_group_assigned_together_and_pods_resource():
    cq = cluster_queue(
        "cq",
        flavors={
            "small": {"cpu": "2", "memory": "4Gi", "pods": "10"},
            "big": {"cpu": "8", "memory": "32Gi", "pods": "10"},
        },
    )
    snap = snapshot([cq])
    a = assign_flavors(
        workload("w", "cq", cpu="1", count=2, requests={"memory": "4Gi"}),
        snap.cluster_queues["cq"],
        snap.flavors,
    )
    ps = a.podsets[0]
    assert {r: c.name for r, c in ps.flavors.items()} == {"cpu": "big", "memory": "big", "pods": "big"}
    assert a.to_admission("cq").to_api()["podSetAssignments"][0]["resourceUsage"] == {
        "cpu": "2",
        "memory": "8Gi",
        "pods": "2",
    }


def test_previous_podsets_count_against_the_flavor():
    cq = cluster_queue("cq", flavors={"default": {"cpu": "5"}})
    snap = snapshot([cq])
    podsets = [
        {
            "name": "leader",
            "count": 1,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
        },
        {
            "name": "workers",
            "count": 2,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
        },
    ]
    a = assign_flavors(workload("w", "cq", podsets=podsets), snap.cluster_queues["cq"], snap.flavors)
    assert a.representative_mode() == Mode.NO_FIT
    assert a.message() == (
        "couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor default, "
        "previously considered podsets requests (2) + current podset request (4) > maximum capacity (5)"
    )
