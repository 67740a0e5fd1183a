"""MultiKueue manager quota automation, the pure part: which check a ClusterQueue uses, how the
workers' quotas add up (with apimachinery's Quantity formatting), and what upstream's reconcile
concludes (condition status, reason, message, the flavor's new resources)."""

from __future__ import annotations

from typing import Any

import pytest

from kueue_domain import api, features
from kueue_domain.resources import format_quantity, parse_quantity, quantity_format, sum_quantities
from manager.quota_automation import (
    WorkerQueues,
    aggregate,
    check_names,
    decide,
    multikueue_check,
    same_resources,
)

Obj = dict[str, Any]
GPU_H, GPU_L = "example.com/gpu-h100", "example.com/gpu-v100s"


def cq(
    name: str, flavors: dict[str, dict[str, str]], checks: list[str] | None = None, strategy: bool = True
) -> Obj:
    covered = sorted({r for quotas in flavors.values() for r in quotas})
    spec: Obj = {
        "resourceGroups": [
            {
                "coveredResources": covered,
                "flavors": [
                    {"name": f, "resources": [{"name": r, "nominalQuota": q[r]} for r in covered if r in q]}
                    for f, q in flavors.items()
                ],
            }
        ]
    }
    if checks and strategy:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    elif checks:
        spec["admissionChecks"] = checks
    return {"metadata": {"name": name, "generation": 1}, "spec": spec}


def lq(namespace: str, name: str, cluster_queue: str) -> Obj:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"clusterQueue": cluster_queue}}


def check(name: str, controller: str = api.MULTIKUEUE_CONTROLLER_NAME) -> Obj:
    return {"metadata": {"name": name}, "spec": {"controllerName": controller}}


def config(mode: str | None) -> Obj:
    spec: Obj = {"clusters": ["w1", "w2"]}
    if mode is not None:
        spec["quotaManagement"] = mode
    return {"metadata": {"name": "cfg"}, "spec": spec}


# -- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # upstream's e2e spec: worker1 + worker2
        (["2", "1200m"], "3200m"),
        (["1G", "4G"], "5G"),
        (["15G", "5G"], "20G"),
        (["2", "1"], "3"),
        (["1", "2"], "3"),
        ([], "0"),
        (["0", "0"], "0"),
        (["500m", "500m"], "1"),
        (["1Gi", "512Mi"], "1536Mi"),
        (["1Gi", "1Gi"], "2Gi"),
        (["1Gi", "1"], "1073741825"),  # BinarySI integer without a 1024 factor: plain digits
        (["512", "256"], "768"),  # BinarySI would be below 1024: DecimalSI
        (["0", "1Gi", "1G"], "2073741824"),  # the first non-zero summand decides the format
        (["1G", "1Gi"], "2073741824"),
        (["1e3", "1e3"], "2e3"),
        (["1.5", "1.5"], "3"),
        (["100M", "900M"], "1G"),
    ],
)
def test_sum_quantities_prints_as_apimachinery(values: list[str], expected: str) -> None:
    assert sum_quantities(values) == expected


def test_quantity_formats() -> None:
    assert quantity_format("1Gi") == "BinarySI"
    assert quantity_format("1G") == "DecimalSI"
    assert quantity_format("5") == "DecimalSI"
    assert quantity_format("1e3") == "DecimalExponent"
    assert format_quantity(parse_quantity("1500m"), "DecimalExponent") == "1500e-3"
    assert format_quantity(parse_quantity("2Ki"), "BinarySI") == "2Ki"


# -- the check and the aggregation ---------------------------------------------------------------


def test_check_names_read_both_v1beta1_forms() -> None:
    assert check_names(cq("a", {"f": {"cpu": "1"}}, ["x"], strategy=True)) == ["x"]
    assert check_names(cq("a", {"f": {"cpu": "1"}}, ["x", "y"], strategy=False)) == ["x", "y"]
    assert check_names(cq("a", {"f": {"cpu": "1"}})) == []


def test_multikueue_check_is_the_first_multikueue_one_by_name() -> None:
    checks = [check("b"), check("a"), check("prov", "kueue.x-k8s.io/provisioning-request")]
    assert (
        multikueue_check(cq("q", {"f": {"cpu": "1"}}, ["prov", "b", "a"]), checks)["metadata"]["name"] == "a"
    )
    assert multikueue_check(cq("q", {"f": {"cpu": "1"}}, ["prov"]), checks) is None
    assert multikueue_check(cq("q", {"f": {"cpu": "1"}}, ["missing"]), checks) is None


def test_aggregate_sums_the_worker_queues_behind_matching_local_queues() -> None:
    keys = {"ns/main"}
    w1 = WorkerQueues(
        local_queues=[lq("ns", "main", "cq1"), lq("other", "main", "unrelated")],
        cluster_queues=[
            cq("cq1", {"f1": {"cpu": "2", "memory": "1G"}, "f2": {"cpu": "1"}}),
            cq("unrelated", {"f": {"cpu": "100"}}),
        ],
    )
    w2 = WorkerQueues(
        local_queues=[lq("ns", "main", "cq2"), lq("ns", "second", "cq2")],
        cluster_queues=[cq("cq2", {"f": {"cpu": "1200m", GPU_H: "1"}})],
    )
    # cq2 counts once although two of its LocalQueues exist (only one matches a manager one anyway).
    assert aggregate(keys, [w1, w2]) == {"cpu": "4200m", "memory": "1G", GPU_H: "1"}
    assert aggregate(keys, [w2]) == {"cpu": "1200m", GPU_H: "1"}
    assert aggregate(keys, []) == {}
    assert aggregate(set(), [w1, w2]) == {}


# -- what the reconcile concludes ----------------------------------------------------------------


def manager_cq(resources: dict[str, str] | None = None, flavors: int = 1) -> Obj:
    resources = resources or {"cpu": "0", "memory": "0", GPU_H: "0", GPU_L: "0"}
    return cq("mgr", {f"f{i}": dict(resources) for i in range(flavors)}, ["mk"])


def test_decide_config_missing_and_not_requested() -> None:
    d = decide(manager_cq(), None, lambda: pytest.fail("no aggregation"))
    assert (d.status, d.reason, d.message, d.resources) == (
        "False",
        "UnsupportedConfiguration",
        "The referenced MultiKueueConfig was not found.",
        None,
    )
    for mode in (None, "Manual"):
        d = decide(manager_cq(), config(mode), lambda: pytest.fail("no aggregation"))
        assert (d.status, d.reason, d.message, d.resources) == (
            "False",
            "NotRequested",
            "MultiKueue manager quota automation has not been requested.",
            None,
        )


def test_decide_needs_exactly_one_flavor() -> None:
    d = decide(manager_cq(flavors=2), config("Automated"), lambda: {})
    assert (d.status, d.reason, d.message) == (
        "False",
        "UnsupportedConfiguration",
        "Quota automation requires that the manager-side ClusterQueue has exactly one ResourceFlavor",
    )


def test_decide_refuses_worker_resources_the_manager_does_not_cover() -> None:
    d = decide(
        manager_cq({"cpu": "0"}), config("Automated"), lambda: {"cpu": "3", GPU_L: "1", "memory": "1G"}
    )
    assert (d.status, d.reason, d.message, d.resources) == (
        "False",
        "UnsupportedConfiguration",
        f"manager-side coveredResources is missing resources configured on workers: [{GPU_L} memory]",
        None,
    )


def test_decide_automated_sets_every_covered_resource() -> None:
    d = decide(manager_cq(), config("Automated"), lambda: {"cpu": "3200m", GPU_H: "3"})
    assert (d.status, d.reason, d.message) == (
        "True",
        "QuotaAutomated",
        "ClusterQueue quota is automatically managed based on MultiKueue workers.",
    )
    # coveredResources order; a resource no worker has is 0.
    assert d.resources == [
        {"name": "cpu", "nominalQuota": "3200m"},
        {"name": GPU_H, "nominalQuota": "3"},
        {"name": GPU_L, "nominalQuota": "0"},
        {"name": "memory", "nominalQuota": "0"},
    ]


def test_same_resources_compares_values_and_limits() -> None:
    want = [{"name": "cpu", "nominalQuota": "3200m"}, {"name": "memory", "nominalQuota": "5G"}]
    assert same_resources(
        [{"name": "cpu", "nominalQuota": "3.2"}, {"name": "memory", "nominalQuota": "5000M"}], want
    )
    assert not same_resources(
        [{"name": "cpu", "nominalQuota": "3"}, {"name": "memory", "nominalQuota": "5G"}], want
    )
    assert not same_resources(want[:1], want)
    assert not same_resources(list(reversed(want)), want)
    limited = [{"name": "cpu", "nominalQuota": "3200m", "borrowingLimit": "1"}, want[1]]
    assert not same_resources(limited, want)


def test_the_gate_is_alpha_off_and_read_by_the_manager() -> None:
    gate = features.GATES[features.MULTIKUEUE_MANAGER_QUOTA_AUTOMATION]
    assert (gate.default, gate.stage, gate.implemented) == (False, features.ALPHA, True)
    assert not features.DEFAULT_GATES.enabled(features.MULTIKUEUE_MANAGER_QUOTA_AUTOMATION)
    assert features.build({"MultiKueueManagerQuotaAutomation": True}).warnings() == []
