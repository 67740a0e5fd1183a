"""The kubectl plugin's views (no cluster): stages and reasons of manager Workloads, queue usage,
worker rows, tables, durations and token expiry. The plugin against a fleet: tests/e2e/test_make_up.py."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from kubectl_multikueue import identity, views
from kubectl_multikueue.__main__ import table

REPO = Path(__file__).resolve().parents[2]
CHECK = "sample-multikueue"


def cond(ctype: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": ctype, "status": status, "reason": reason, "message": message}


def wl(name: str = "job-a", conditions=(), cluster: str = "", check: dict | None = None, active=True) -> dict:
    status: dict = {"conditions": list(conditions)}
    if cluster:
        status["clusterName"] = cluster
    if check is not None:
        status["admissionChecks"] = [{"name": CHECK, **check}]
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [{"kind": "Job", "name": "a", "controller": True, "uid": "u"}],
        },
        "spec": {"active": active, "queueName": "user-queue"},
        "status": status,
    }


def test_a_workload_without_quota_on_the_manager_says_why():
    row = views.workload_row(
        wl(conditions=[cond("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set main")]),
        [CHECK],
    )
    assert (row.stage, row.worker, row.job) == ("Pending", "-", "Job/a")
    assert row.why == "couldn't assign flavors to pod set main"


def test_a_dispatched_workload_merges_each_workers_reason_and_position():
    manager = wl(
        conditions=[cond("QuotaReserved")],
        check={"state": "Pending", "message": "Not admitted by any worker"},
    )
    copies = {
        "multikueue-test-worker2": wl(
            conditions=[cond("QuotaReserved", "False", "Pending", "insufficient quota")]
        ),
        "multikueue-test-worker1": wl(
            conditions=[cond("QuotaReserved", "False", "Pending", "no flavor fits")]
        ),
        "multikueue-test-worker3": None,
    }
    row = views.workload_row(manager, [CHECK], copies, {"multikueue-test-worker1": 3})
    assert row.stage == "Dispatching"
    assert row.why == (
        "Not admitted by any worker; "
        "multikueue-test-worker1: no flavor fits (position 3 in its ClusterQueue); "
        "multikueue-test-worker2: insufficient quota"
    )


def test_a_reason_the_manager_already_quotes_is_not_repeated():
    message = 'Not admitted by any worker cluster yet: "w1": no flavor fits'
    manager = wl(conditions=[cond("QuotaReserved")], check={"state": "Pending", "message": message})
    copies = {"w1": wl(conditions=[cond("QuotaReserved", "False", "Pending", "no flavor fits")])}
    assert views.workload_row(manager, [CHECK], copies).why == message
    row = views.workload_row(manager, [CHECK], copies, {"w1": 0})
    assert row.why == f"{message}; w1: position 0 in its ClusterQueue"


def test_an_admitted_workload_runs_once_its_copy_reports_pods_ready():
    admitted = wl(
        conditions=[cond("QuotaReserved"), cond("Admitted")],
        cluster="w1",
        check={"state": "Ready", "message": 'The workload was admitted on "w1"'},
    )
    assert (
        views.workload_row(admitted, [CHECK], {"w1": wl(conditions=[cond("Admitted")])}).stage == "Admitted"
    )
    row = views.workload_row(admitted, [CHECK], {"w1": wl(conditions=[cond("Admitted"), cond("PodsReady")])})
    assert (row.stage, row.worker, row.why) == ("Running", "w1", 'The workload was admitted on "w1"')


@pytest.mark.parametrize(
    ("conditions", "active", "stage", "why"),
    [
        ([cond("QuotaReserved"), cond("Finished", message="Job finished successfully")], True, "Finished",
         "Job finished successfully"),
        ([cond("Evicted", reason="AdmissionCheck", message="Admitting remote lost")], True, "Evicted",
         "Admitting remote lost"),
        ([], False, "Inactive", "spec.active is false: it will not be admitted until reactivated"),
    ],
)  # fmt: skip
def test_terminal_and_stopped_stages(conditions, active, stage, why):
    row = views.workload_row(wl(conditions=conditions, active=active), [CHECK])
    assert (row.stage, row.why) == (stage, why)


def test_usage_against_nominal_quota():
    cq = {
        "metadata": {"name": "cluster-queue"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {"name": "default-flavor", "resources": [
                            {"name": "cpu", "nominalQuota": 32}, {"name": "memory", "nominalQuota": "128Gi"}]}
                    ],
                }
            ]
        },
        "status": {
            "pendingWorkloads": 2,
            "admittedWorkloads": 1,
            "flavorsUsage": [{"name": "default-flavor", "resources": [{"name": "cpu", "total": "1500m"}]}],
            "conditions": [cond("Active", reason="Ready")],
        },
    }  # fmt: skip
    row = views.queue_row("multikueue-test-worker1", cq)
    assert (row.pending, row.admitted, row.active) == (2, 1, "True")
    assert row.usage == "cpu 1500m/32, memory 0/128Gi"


def test_worker_rows_name_where_the_kubeconfig_comes_from():
    mkc = {
        "metadata": {"name": "multikueue-test-worker1"},
        "spec": {"kubeConfig": {"locationType": "Secret", "location": "worker1-secret"}},
        "status": {"conditions": [cond("Active", "False", "BadConfig", 'secret "worker1-secret" not found')]},
    }
    row = views.worker_row(mkc, "kueue-system")
    assert (row.active, row.reason, row.source) == (
        "False",
        "BadConfig",
        "Secret kueue-system/worker1-secret",
    )
    assert views.worker_row({"metadata": {"name": "x"}}, "kueue-system").active == "Unknown"


def test_remote_readiness_of_each_kind():
    job = {"status": {"active": 1, "ready": 1, "conditions": [cond("Complete", "False")]}}
    assert views.remote_readiness("Job", job) == "active 1, ready 1, succeeded 0, failed 0"
    lws = {"spec": {"replicas": 2}, "status": {"readyReplicas": 1}}
    assert views.remote_readiness("LeaderWorkerSet", lws) == "ready 1/2 groups"
    assert views.remote_readiness("Job", None) == "no copy"


def test_tables_are_laid_out_as_kubectl_does():
    assert table(["NAME", "STAGE"], [["job-a", "Running"], ["job-long-name", None]]).splitlines() == [
        "NAME            STAGE",
        "job-a           Running",
        "job-long-name",
    ]


@pytest.mark.parametrize(("text", "seconds"), [("8760h", 31536000), ("1h30m", 5400), ("600s", 600)])
def test_durations(text, seconds):
    assert identity.parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "1d", "5m", "h"])
def test_bad_durations_are_refused(bad):
    with pytest.raises(identity.IdentityError, match="--duration"):
        identity.parse_duration(bad)


def test_token_expiry_reads_the_exp_claim():
    payload = base64.urlsafe_b64encode(json.dumps({"exp": 1800000000}).encode()).rstrip(b"=").decode()
    assert identity.token_expiry(f"h.{payload}.s") == "2027-01-15T08:00:00Z"
    assert identity.token_expiry("not-a-jwt") == ""


def test_the_kubeconfig_is_self_contained():
    text = identity.worker_kubeconfig(
        "worker1", "https://127.0.0.1:6443", b"CA", "kueue-system/multikueue-sa", "t"
    )
    config = yaml.safe_load(text)
    (cluster,) = config["clusters"]
    assert cluster["cluster"] == {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="}
    assert config["users"] == [{"name": "kueue-system/multikueue-sa", "user": {"token": "t"}}]
    assert config["current-context"] == "worker1"


def test_the_packaged_role_is_the_deployed_one():
    assert (
        identity.ROLE_FILE.read_text()
        == (REPO / "deploy/rbac/multikueue-worker-clusterrole.yaml").read_text()
    )
