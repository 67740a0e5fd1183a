"""manager.admissioncheck: resolving a check's MultiKueueConfig with upstream's error texts, and
the `Active` condition the controller writes (upstream admissioncheck_test.go)."""

from __future__ import annotations

import pytest

from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.admissioncheck import AdmissionCheckController, ParametersError, config_name

PARAMS = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "mkc-config"}


def check(
    name: str = "mk-check", params: dict | None = PARAMS, controller: str = "kueue.x-k8s.io/multikueue"
):
    spec: dict = {"controllerName": controller}
    if params is not None:
        spec["parameters"] = params
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "AdmissionCheck",
        "metadata": {"name": name, "generation": 3, "resourceVersion": "10"},
        "spec": spec,
    }


def mk_config(name: str, clusters: list[str]) -> dict:
    return {"metadata": {"name": name}, "spec": {"clusters": clusters}}


def mk_cluster(name: str, active: bool) -> dict:
    condition = {"type": "Active", "status": "True" if active else "False", "reason": "R", "message": "m"}
    return {"metadata": {"name": name}, "status": {"conditions": [condition]}}


class FakeInformer:
    def __init__(self, *objects: dict) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}

    def get(self, name: str) -> dict | None:
        return self.objects.get(name)

    def list(self) -> list[dict]:
        return list(self.objects.values())


class FakeKube:
    def __init__(self) -> None:
        self.replaced: list[tuple[api.Resource, dict]] = []

    async def replace_status(self, resource: api.Resource, obj: dict) -> dict:
        self.replaced.append((resource, obj))
        return obj


# -- config_name -------------------------------------------------------------------------------


def test_config_name_of_a_valid_reference() -> None:
    assert config_name(check()) == "mkc-config"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (None, "missing parameters reference"),
        (
            {**PARAMS, "apiGroup": "example.com"},
            'wrong group "example.com", expecting "kueue.x-k8s.io": bad parameters reference',
        ),
        (
            {"kind": "MultiKueueConfig", "name": "c"},
            'wrong group "", expecting "kueue.x-k8s.io": bad parameters reference',
        ),
        (
            {**PARAMS, "kind": "ProvisioningRequestConfig"},
            'wrong kind "ProvisioningRequestConfig", expecting "MultiKueueConfig": bad parameters reference',
        ),
        ({**PARAMS, "name": ""}, "empty name: bad parameters reference"),
    ],
)
def test_config_name_refuses_unusable_references_with_upstream_texts(
    params: dict | None, message: str
) -> None:
    with pytest.raises(ParametersError) as caught:
        config_name(check(params=params))
    assert str(caught.value) == message


# -- reconcile ---------------------------------------------------------------------------------


def controller(
    checks: list[dict], configs: list[dict], clusters: list[dict]
) -> tuple[AdmissionCheckController, FakeKube]:
    kube = FakeKube()
    ctl = AdmissionCheckController(
        kube,  # type: ignore[arg-type]
        FakeInformer(*checks),  # type: ignore[arg-type]
        FakeInformer(*configs),  # type: ignore[arg-type]
        FakeInformer(*clusters),  # type: ignore[arg-type]
        FakeClock(),
    )
    return ctl, kube


def written_active(kube: FakeKube) -> tuple[str, str, str]:
    assert len(kube.replaced) == 1
    resource, obj = kube.replaced[0]
    assert resource == api.ADMISSION_CHECK
    (condition,) = [c for c in obj["status"]["conditions"] if c["type"] == "Active"]
    assert condition["observedGeneration"] == 3
    return condition["status"], condition["reason"], condition["message"]


async def test_all_clusters_active() -> None:
    ctl, kube = controller(
        [check()], [mk_config("mkc-config", ["w1", "w2"])], [mk_cluster("w1", True), mk_cluster("w2", True)]
    )
    await ctl.reconcile("mk-check")
    assert written_active(kube) == ("True", "Active", "The admission check is active")


async def test_missing_config_is_a_bad_config() -> None:
    ctl, kube = controller([check()], [], [])
    await ctl.reconcile("mk-check")
    assert written_active(kube) == (
        "False",
        "BadConfig",
        'Cannot load the AdmissionChecks parameters: MultiKueueConfig.kueue.x-k8s.io "mkc-config" not found',
    )


async def test_bad_parameters_reference_is_a_bad_config() -> None:
    ctl, kube = controller([check(params={**PARAMS, "kind": "Other"})], [mk_config("mkc-config", ["w1"])], [])
    await ctl.reconcile("mk-check")
    assert written_active(kube) == (
        "False",
        "BadConfig",
        'Cannot load the AdmissionChecks parameters: wrong kind "Other", expecting "MultiKueueConfig": '
        "bad parameters reference",
    )


async def test_some_clusters_missing_or_inactive() -> None:
    ctl, kube = controller(
        [check()],
        [mk_config("mkc-config", ["a", "b", "c", "d"])],
        [mk_cluster("c", False), mk_cluster("d", True)],
    )
    await ctl.reconcile("mk-check")
    assert written_active(kube) == (
        "True",
        "SomeActiveClusters",
        "Missing clusters: [a b], Inactive clusters: [c]",
    )


async def test_one_missing_cluster_among_active_ones() -> None:
    ctl, kube = controller([check()], [mk_config("mkc-config", ["w1", "w2"])], [mk_cluster("w2", True)])
    await ctl.reconcile("mk-check")
    assert written_active(kube) == ("True", "SomeActiveClusters", "Missing clusters: [w1]")


async def test_a_cluster_without_an_active_condition_is_inactive() -> None:
    no_condition = {"metadata": {"name": "w2"}}
    ctl, kube = controller(
        [check()], [mk_config("mkc-config", ["w1", "w2"])], [mk_cluster("w1", True), no_condition]
    )
    await ctl.reconcile("mk-check")
    assert written_active(kube) == ("True", "SomeActiveClusters", "Inactive clusters: [w2]")


async def test_no_usable_clusters() -> None:
    ctl, kube = controller([check()], [mk_config("mkc-config", ["a", "b", "c"])], [mk_cluster("c", False)])
    await ctl.reconcile("mk-check")
    assert written_active(kube) == (
        "False",
        "NoUsableClusters",
        "Missing clusters: [a b], Inactive clusters: [c]",
    )


async def test_no_write_when_the_condition_is_unchanged() -> None:
    current = check()
    current["status"] = {
        "conditions": [
            {
                "type": "Active",
                "status": "True",
                "reason": "Active",
                "message": "The admission check is active",
                "lastTransitionTime": "2025-12-31T00:00:00Z",
                "observedGeneration": 3,
            }
        ]
    }
    ctl, kube = controller([current], [mk_config("mkc-config", ["w1"])], [mk_cluster("w1", True)])
    await ctl.reconcile("mk-check")
    assert kube.replaced == []


async def test_a_changed_message_is_written_without_moving_the_transition_time() -> None:
    current = check()
    current["status"] = {
        "conditions": [
            {
                "type": "Active",
                "status": "True",
                "reason": "Active",
                "message": "The admission check is active",
                "lastTransitionTime": "2025-12-31T00:00:00Z",
            }
        ]
    }
    ctl, kube = controller([current], [mk_config("mkc-config", ["w1", "w2"])], [mk_cluster("w1", True)])
    await ctl.reconcile("mk-check")
    assert written_active(kube) == ("True", "SomeActiveClusters", "Missing clusters: [w2]")
    condition = kube.replaced[0][1]["status"]["conditions"][0]
    assert condition["lastTransitionTime"] == "2025-12-31T00:00:00Z"
    assert current["status"]["conditions"][0]["reason"] == "Active"  # the cached object is not edited


async def test_checks_of_other_controllers_and_missing_checks_are_ignored() -> None:
    ctl, kube = controller(
        [check(controller="kueue.x-k8s.io/provisioning-request")], [mk_config("mkc-config", ["w1"])], []
    )
    await ctl.reconcile("mk-check")
    await ctl.reconcile("no-such-check")
    assert kube.replaced == []


def test_which_checks_a_config_or_cluster_change_reaches() -> None:
    ctl, _ = controller(
        [
            check("ac-1"),
            check("ac-2", params={**PARAMS, "name": "other"}),
            check("ac-3", controller="kueue.x-k8s.io/provisioning-request"),
        ],
        [mk_config("mkc-config", ["w1", "w2"]), mk_config("other", ["w3"])],
        [],
    )
    assert ctl.checks_for_config("mkc-config") == ["ac-1"]
    assert ctl.checks_for_cluster("w2") == ["ac-1"]
    assert ctl.checks_for_cluster("w3") == ["ac-2"]
    assert ctl.checks_for_cluster("w9") == []
    assert ctl.config_clusters(check()) == ["w1", "w2"]
    assert ctl.config_clusters(check(params={**PARAMS, "name": "absent"})) is None
