"""The ProvisioningRequest admission check's decisions (worker_agent.engine.provisioning), as upstream
Kueue v0.19.2's provisioning controller makes them, and the ClusterQueue it makes inactive next to a
MultiKueue check."""

from __future__ import annotations

import random

import pytest

from kueue_domain import api
from worker_agent.admission.structure import cluster_queue_active_state
from worker_agent.engine import provisioning as prov

CLASS = api.PROVISIONING_CLASS_CHECK_CAPACITY


def config(**spec) -> dict:
    return {"metadata": {"name": "prc"}, "spec": {"provisioningClassName": CLASS, **spec}}


def check(parameters: dict | None = None) -> dict:
    spec: dict = {"controllerName": api.PROVISIONING_REQUEST_CONTROLLER_NAME}
    if parameters is not None:
        spec["parameters"] = parameters
    return {"metadata": {"name": "prov"}, "spec": spec}


def podset(name: str, count: int = 1, requests: dict | None = None) -> dict:
    container = {"name": "c", "resources": {"requests": requests or {"cpu": "1"}}}
    return {"name": name, "count": count, "template": {"spec": {"containers": [container]}}}


def workload(*podsets: dict, counts: dict | None = None, conditions: list | None = None, **meta) -> dict:
    assignments = [
        {"name": ps["name"], "count": (counts or {}).get(ps["name"], ps["count"]), "flavors": {"cpu": "f"}}
        for ps in podsets
    ]
    return {
        "metadata": {"name": "wl", "namespace": "ns", "uid": "u1", **meta},
        "spec": {"podSets": list(podsets)},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
            "conditions": conditions or [{"type": "QuotaReserved", "status": "True"}],
        },
    }


def request(attempt: int = 1, *conds: tuple[str, str, str], **status) -> dict:
    return {
        "metadata": {"name": f"wl-prov-{attempt}", "namespace": "ns", "uid": f"pr{attempt}"},
        "spec": {
            "provisioningClassName": CLASS,
            "podSets": [{"podTemplateRef": {"name": f"ppt-wl-prov-{attempt}-main"}, "count": 2}],
        },
        "status": {
            "conditions": [{"type": t, "status": s, "message": m} for t, s, m in conds],
            **status,
        },
    }


PENDING = {"name": "prov", "state": "Pending", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}


# --- names ------------------------------------------------------------------------------------


def test_names_and_attempts_as_upstream():
    assert prov.request_name("wl", "prov", 3) == "wl-prov-3"
    assert prov.pod_template_name("wl-prov-3", "main") == "ppt-wl-prov-3-main"
    assert prov.attempt_of("wl-prov-12", "wl", "prov") == 12
    assert prov.attempt_of("wl-prov-x", "wl", "prov") is None
    assert prov.attempt_of("other-prov-1", "wl", "prov") is None


def test_long_names_are_cut_with_a_hash():
    name = prov.request_name("w" * 300, "prov", 1)
    assert len(name) == 253 and name[247] == "-"
    assert name == prov.limit_object_name("w" * 300 + "-prov-1")
    assert name != prov.request_name("w" * 300, "prov", 2)


# --- the config and the check's Active condition -----------------------------------------------


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (None, "missing parameters reference"),
        (
            {"apiGroup": api.GROUP, "kind": "ProvisioningRequestConfig", "name": ""},
            "empty name: bad parameters reference",
        ),
        (
            {"apiGroup": "example.com", "kind": "ProvisioningRequestConfig", "name": "prc"},
            'wrong group "example.com", expecting "kueue.x-k8s.io": bad parameters reference',
        ),
        (
            {"apiGroup": api.GROUP, "kind": "MultiKueueConfig", "name": "prc"},
            'wrong kind "MultiKueueConfig", expecting "ProvisioningRequestConfig": bad parameters reference',
        ),
        (
            {"apiGroup": api.GROUP, "kind": "ProvisioningRequestConfig", "name": "missing"},
            'ProvisioningRequestConfig.kueue.x-k8s.io "missing" not found',
        ),
    ],
)
def test_bad_parameters_make_the_check_inactive(parameters, message):
    assert prov.active_condition(check(parameters), {}.get) == ("False", "BadParametersRef", message)


def test_a_check_with_its_config_is_active():
    ref = {"apiGroup": api.GROUP, "kind": "ProvisioningRequestConfig", "name": "prc"}
    assert prov.active_condition(check(ref), {"prc": config()}.get) == (
        "True",
        "Active",
        "The admission check is active",
    )


# --- which PodSets ------------------------------------------------------------------------------


def test_managed_resources_filter_podsets():
    wl = workload(podset("cpu"), podset("gpu", 2, {"cpu": "1", "example.com/gpu": "1"}))
    gpu_only = config(managedResources=["example.com/gpu"])
    assert [m.name for m in prov.merge_podsets(wl, gpu_only)] == ["gpu"]
    assert [m.name for m in prov.merge_podsets(wl, config())] == ["cpu", "gpu"]
    assert prov.request_is_needed(wl, gpu_only)
    assert not prov.request_is_needed(workload(podset("cpu")), gpu_only)
    # Admitted with zero pods (partial admission): nothing to provision.
    assert not prov.request_is_needed(
        workload(podset("gpu", 2, {"example.com/gpu": "1"}), counts={"gpu": 0}), gpu_only
    )


def test_merge_policy_adds_the_counts_of_identical_podsets():
    wl = workload(podset("a", 2), podset("b", 3), podset("c", 1, {"cpu": "2"}))
    merged = prov.merge_podsets(wl, config(podSetMergePolicy="IdenticalPodTemplates"))
    assert [(m.name, m.count) for m in merged] == [("a", 5), ("c", 1)]
    assert len(prov.merge_podsets(wl, config())) == 3


def test_missing_assignment_is_an_error():
    wl = workload(podset("a"))
    wl["status"]["admission"]["podSetAssignments"] = []
    with pytest.raises(prov.InconsistentAssignments):
        prov.request_is_needed(wl, config())


def test_request_body_has_class_parameters_podsets_and_owner():
    wl = workload(podset("main"), annotations={"provreq.kueue.x-k8s.io/ValidUntilSeconds": "60", "x": "y"})
    body = prov.request_body(wl, "wl-prov-1", config(parameters={"a": "b"}), [("ppt-wl-prov-1-main", 4)])
    assert body["apiVersion"] == "autoscaling.x-k8s.io/v1" and body["kind"] == "ProvisioningRequest"
    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert body["metadata"]["ownerReferences"][0]["controller"] is True
    assert body["spec"] == {
        "provisioningClassName": CLASS,
        "podSets": [{"podTemplateRef": {"name": "ppt-wl-prov-1-main"}, "count": 4}],
        "parameters": {"a": "b", "ValidUntilSeconds": "60"},
    }


def test_active_or_last_takes_the_highest_attempt_in_line_with_the_config():
    wl = workload(podset("main"))
    old, new = request(1), request(2)
    assert prov.active_or_last(wl, {"prov": config()}, [new, old]) == {"prov": new}
    other_class = config()
    other_class["spec"]["provisioningClassName"] = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    assert prov.active_or_last(wl, {"prov": other_class}, [old, new]) == {}
    assert prov.active_or_last(wl, {"prov": None}, [old]) == {}


def test_next_attempt():
    wl = workload(podset("main"))
    assert prov.next_attempt(wl, PENDING, None, "prov") == 1
    assert prov.next_attempt(wl, {**PENDING, "retryCount": 2}, None, "prov") == 3
    failed = request(1, ("Failed", "True", "no"))
    assert prov.next_attempt(wl, PENDING, failed, "prov") == 2
    assert prov.next_attempt(wl, {**PENDING, "state": "Retry"}, failed, "prov") is None
    assert prov.next_attempt(wl, PENDING, request(1, ("Accepted", "True", "")), "prov") is None


# --- the check state ------------------------------------------------------------------------------


def state_for(pr, wl=None, cfg=None, state=PENDING):
    return prov.next_check_state(
        wl or workload(podset("main")), dict(state), cfg or config(), pr, random.Random(1)
    )


def test_provisioned_makes_the_check_ready_with_the_annotations():
    pr = request(
        1,
        ("Accepted", "True", ""),
        ("Provisioned", "True", "Provisioning Request was successfully provisioned."),
    )
    new = state_for(pr)
    assert new["state"] == "Ready"
    assert new["message"] == "Provisioning Request was successfully provisioned."
    assert new["podSetUpdates"] == [
        {
            "name": "main",
            "annotations": {
                "autoscaling.x-k8s.io/consume-provisioning-request": "wl-prov-1",
                "autoscaling.x-k8s.io/provisioning-class-name": CLASS,
            },
        }
    ]


def test_node_selector_from_provisioning_class_details():
    cfg = config(
        podSetUpdates={
            "nodeSelector": [
                {"key": "pool", "valueFromProvisioningClassDetail": "poolName"},
                {"key": "absent", "valueFromProvisioningClassDetail": "nothing"},
            ]
        }
    )
    pr = request(1, ("Provisioned", "True", "ok"), provisioningClassDetails={"poolName": "p1"})
    assert state_for(pr, cfg=cfg)["podSetUpdates"][0]["nodeSelector"] == {"pool": "p1"}


def test_accepted_passes_the_eta_and_no_condition_clears_the_message():
    pr = request(1, ("Accepted", "True", ""), ("Provisioned", "False", "ETA 10m"))
    assert (state_for(pr)["state"], state_for(pr)["message"]) == ("Pending", "ETA 10m")
    assert state_for(request(1), state={**PENDING, "message": "Error creating"})["message"] == ""


def test_failed_is_retried_with_backoff_then_rejected():
    cfg = config(retryStrategy={"backoffLimitCount": 2, "backoffBaseSeconds": 10, "backoffMaxSeconds": 30})
    first = state_for(request(1, ("Failed", "True", "out of stock")), cfg=cfg)
    assert first["state"] == "Retry" and first["message"] == "Retrying after failure: out of stock"
    assert first["requeueAfterSeconds"] == 10
    second = state_for(
        request(2, ("Failed", "True", "out of stock")), cfg=cfg, state={**PENDING, "retryCount": 1}
    )
    assert second["state"] == "Retry" and second["requeueAfterSeconds"] == 20
    # An old request of an attempt the check already counted: the message only.
    old = state_for(request(1, ("Failed", "True", "x")), cfg=cfg, state={**PENDING, "retryCount": 1})
    assert old["state"] == "Pending" and old["message"] == "Retrying after failure: x"
    third = state_for(request(3, ("Failed", "True", "gone")), cfg=cfg, state={**PENDING, "retryCount": 2})
    assert third["state"] == "Rejected" and third["message"] == "gone"
    assert (
        state_for(request(1, ("Failed", "True", "no")), cfg=config(retryStrategy={"backoffLimitCount": 0}))[
            "state"
        ]
        == "Rejected"
    )


def test_backoff_is_capped():
    strategy = prov.RetryStrategy(limit=10, base_seconds=60, max_seconds=1800)
    assert [prov.requeue_after_seconds(n, strategy, random.Random(0)) for n in range(7)] == [
        60,
        120,
        240,
        480,
        960,
        1800,
        1800,
    ]


def test_booking_expired_retries_only_before_admission():
    pr = request(1, ("Provisioned", "True", ""), ("BookingExpired", "True", "expired"))
    assert state_for(pr)["message"] == "Retrying after booking expired: expired"
    admitted = workload(
        podset("main"),
        conditions=[{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
    )
    ready = {**PENDING, "state": "Ready", "message": "ok"}
    assert state_for(pr, wl=admitted, state=ready)["state"] == "Ready"


def test_capacity_revoked_rejects_an_active_workload():
    pr = request(1, ("Provisioned", "True", ""), ("CapacityRevoked", "True", "nodes gone"))
    ready = {**PENDING, "state": "Ready"}
    assert (state_for(pr, state=ready)["state"], state_for(pr, state=ready)["message"]) == (
        "Rejected",
        "nodes gone",
    )


def test_inactive_check_and_no_request_needed():
    assert prov.next_check_state(workload(podset("main")), dict(PENDING), None, None) == {
        **PENDING,
        "message": "the check is not active",
    }
    gpu_only = config(managedResources=["example.com/gpu"])
    new = prov.next_check_state(workload(podset("main")), dict(PENDING), gpu_only, None)
    assert (new["state"], new["message"]) == ("Ready", "the provisioning request is not needed")
    assert prov.next_check_state(workload(podset("main")), dict(PENDING), config(), None) is None


# --- MultiKueue -------------------------------------------------------------------------------------


def test_cluster_queue_with_multikueue_and_provisioning_checks_is_inactive():
    active = {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
    checks = {
        "mk": {
            "metadata": {"name": "mk"},
            "spec": {"controllerName": api.MULTIKUEUE_CONTROLLER_NAME},
            **active,
        },
        "prov": {**check(), **active},
    }
    cq = {"metadata": {"name": "cq"}, "spec": {"admissionChecks": ["prov", "mk"]}}
    assert cluster_queue_active_state(cq, [], checks) == (
        False,
        "MultiKueueWithProvisioningRequest",
        "Can't admit new workloads: Cannot use both MultiKueue and ProvisioningRequest AdmissionChecks "
        "together, found: mk, prov.",
    )
    only_prov = {"metadata": {"name": "cq"}, "spec": {"admissionChecks": ["prov"]}}
    assert cluster_queue_active_state(only_prov, [], checks)[0] is True


# --- the cluster-autoscaler stand-in ------------------------------------------------------------


class _Kube:
    def __init__(self) -> None:
        self.written: list[dict] = []

    async def replace_status(self, resource, obj):
        self.written.append(obj)
        return obj


async def _answers(outcome: str, steps: int) -> list[tuple[str, str]]:
    from localfleet.autoscaler_standin import AutoscalerStandIn

    kube = _Kube()
    standin = AutoscalerStandIn(kube, outcome, after=0)  # type: ignore[arg-type]
    pr = request(1)
    pr["status"] = {}
    for _ in range(steps):
        standin.informer.store.upsert(pr)
        await standin.reconcile("ns/wl-prov-1")
        pr = kube.written[-1] if kube.written else pr
    return [(c["type"], c["reason"]) for c in pr["status"]["conditions"]]


async def test_standin_answers_as_cluster_autoscaler():
    assert await _answers("Provisioned", 3) == [
        ("Accepted", "Accepted"),
        ("Provisioned", "CapacityIsProvisioned"),
    ]
    assert await _answers("Failed", 3) == [("Accepted", "Accepted"), ("Failed", "FailedToBookCapacity")]
    assert await _answers("BookingExpired", 4) == [
        ("Accepted", "Accepted"),
        ("Provisioned", "CapacityIsProvisioned"),
        ("BookingExpired", "CapacityReservationTimeExpired"),
    ]
