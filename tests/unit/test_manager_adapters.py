"""manager.adapters: the batch/v1 Job copy a worker gets, whether a manager Job is handed to
MultiKueue, which local Workload a remote Job belongs to, and the ownership check that keeps the
manager off objects it did not create."""

from __future__ import annotations

import copy

import pytest

from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.adapters import JobAdapter, OwnershipError, check_ownership
from manager.adapters.job import merge_patch, mirrored_status, remote_job_copy

PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"


def local_job(managed_by: str | None = "kueue.x-k8s.io/multikueue") -> dict:
    spec: dict = {
        "parallelism": 2,
        "completions": 2,
        "suspend": True,
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "abc-123"}},
        "template": {
            "metadata": {
                "labels": {
                    "controller-uid": "abc-123",
                    "batch.kubernetes.io/controller-uid": "abc-123",
                    "job-name": "sample",
                    "batch.kubernetes.io/job-name": "sample",
                    "app": "trainer",
                }
            },
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
        },
    }
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample",
            "namespace": "team-a",
            "uid": "abc-123",
            "resourceVersion": "99",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
            "annotations": {"team": "ml"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}],
            "finalizers": ["example.com/keep"],
        },
        "spec": spec,
        "status": {"active": 0},
    }


class FakeInformer:
    def __init__(self, *objects: dict) -> None:
        self.objects = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objects}

    def get(self, key: str) -> dict | None:
        return self.objects.get(key)

    def list(self) -> list[dict]:
        return list(self.objects.values())


def adapter(*jobs: dict) -> JobAdapter:
    return JobAdapter(None, FakeInformer(*jobs), FakeClock())  # type: ignore[arg-type]


# -- remote_job_copy ---------------------------------------------------------------------------


def test_remote_job_copy() -> None:
    remote = remote_job_copy(local_job(), "job-sample-1a2b3", "manager-east")
    assert remote == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue", ORIGIN_LABEL: "manager-east"},
            "annotations": {"team": "ml", PREBUILT: "job-sample-1a2b3"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "suspend": True,
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def test_remote_job_copy_leaves_the_local_job_untouched() -> None:
    local = local_job()
    before = copy.deepcopy(local)
    remote = remote_job_copy(local, "job-sample-1a2b3", "multikueue")
    remote["spec"]["template"]["spec"]["containers"][0]["image"] = "changed"
    remote["metadata"]["labels"]["x"] = "y"
    remote["metadata"]["annotations"]["x"] = "y"
    assert local == before


def test_remote_job_copy_of_a_job_without_labels_or_template_labels() -> None:
    local = {
        "metadata": {"name": "bare", "namespace": "ns"},
        "spec": {"template": {"spec": {"containers": []}}},
    }
    remote = remote_job_copy(local, "job-bare-x", "multikueue")
    assert remote["metadata"]["labels"] == {ORIGIN_LABEL: "multikueue"}
    assert remote["metadata"]["annotations"] == {PREBUILT: "job-bare-x"}
    assert remote["spec"] == {"template": {"spec": {"containers": []}}}


# -- JobAdapter.is_managed / workload_keys_for ---------------------------------------------------


def test_the_manager_keeps_of_a_remote_job_what_it_reads() -> None:
    remote = remote_job_copy(local_job(), "sample-abc12", "origin-a")
    remote["metadata"].update(
        {"resourceVersion": "7", "uid": "u-1", "managedFields": [{"manager": "kube-controller-manager"}]}
    )
    remote["status"] = {"active": 2, "conditions": [{"type": "Suspended", "status": "False"}]}

    cached = JobAdapter.remote_cache_transform(copy.deepcopy(remote))

    assert "template" not in cached["spec"] and "managedFields" not in cached["metadata"]
    assert cached["spec"]["suspend"] is True and cached["spec"]["parallelism"] == 2
    assert cached["status"] == remote["status"]
    assert cached["metadata"] == {k: v for k, v in remote["metadata"].items() if k != "managedFields"}
    assert adapter().workload_keys_for(cached) == ["team-a/sample-abc12"]
    check_ownership(cached, api.JOB, "origin-a")


def test_a_job_managed_by_multikueue_is_managed() -> None:
    assert adapter(local_job()).is_managed("team-a", "sample") == (True, "")


@pytest.mark.parametrize(
    ("managed_by", "message"),
    [
        (None, 'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not ""'),
        (
            "kueue.x-k8s.io/other",
            'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not "kueue.x-k8s.io/other"',
        ),
    ],
)
def test_a_job_not_managed_by_multikueue_says_why(managed_by: str | None, message: str) -> None:
    assert adapter(local_job(managed_by)).is_managed("team-a", "sample") == (False, message)


def test_a_job_missing_from_the_cache_is_an_error_not_unmanaged() -> None:
    with pytest.raises(LookupError):
        adapter().is_managed("team-a", "sample")


def test_workload_keys_for_a_remote_job_with_the_prebuilt_annotation() -> None:
    remote = remote_job_copy(local_job(), "job-sample-1a2b3", "multikueue")
    assert adapter().workload_keys_for(remote) == ["team-a/job-sample-1a2b3"]


def test_workload_keys_for_a_remote_job_with_the_prebuilt_label() -> None:
    remote = {"metadata": {"name": "sample", "namespace": "team-a", "labels": {PREBUILT: "wl-from-label"}}}
    assert adapter().workload_keys_for(remote) == ["team-a/wl-from-label"]


def test_workload_keys_for_a_remote_job_without_a_prebuilt_workload() -> None:
    remote = {"metadata": {"name": "sample", "namespace": "team-a", "labels": {ORIGIN_LABEL: "multikueue"}}}
    assert adapter().workload_keys_for(remote) == []


# -- check_ownership ---------------------------------------------------------------------------


def remote_obj(origin: str | None) -> dict:
    labels = {ORIGIN_LABEL: origin} if origin is not None else {}
    return {"metadata": {"name": "sample", "namespace": "team-a", "labels": labels}}


def test_a_missing_remote_object_is_fine() -> None:
    check_ownership(None, api.JOB, "multikueue")


def test_a_remote_object_of_our_origin_is_fine() -> None:
    check_ownership(remote_obj("multikueue"), api.JOB, "multikueue")


@pytest.mark.parametrize("foreign", ["manager-west", None], ids=["other-origin", "no-origin"])
def test_a_foreign_remote_object_is_refused(foreign: str | None) -> None:
    with pytest.raises(OwnershipError) as caught:
        check_ownership(remote_obj(foreign), api.JOB, "multikueue")
    assert str(caught.value) == (
        'remote object is not owned by MultiKueue: expected "kueue.x-k8s.io/multikueue-origin"="multikueue" '
        "on Job team-a/sample"
    )


def test_an_empty_origin_is_refused() -> None:
    with pytest.raises(OwnershipError, match=r"^multikueue origin is empty$"):
        check_ownership(None, api.JOB, "")
    with pytest.raises(OwnershipError, match=r"^multikueue origin is empty$"):
        check_ownership(remote_obj(""), api.WORKLOAD, "")


def test_merge_patch_clears_keys_gone_from_nested_objects() -> None:
    running = {"active": 1, "uncountedTerminatedPods": {"succeeded": ["uid-1"]}, "ready": 1}
    finished = {
        "succeeded": 1,
        "uncountedTerminatedPods": {},
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    patch = merge_patch(running, finished)
    assert patch == {
        "active": None,
        "ready": None,
        "succeeded": 1,
        "uncountedTerminatedPods": {"succeeded": None},
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    assert merge_patch(finished, finished) == {}
    assert merge_patch({}, {"a": {"b": 1}}) == {"a": {"b": 1}}


def test_a_running_job_keeps_its_start_time_when_the_worker_suspends_its_copy() -> None:
    started = "2026-11-26T23:26:06Z"
    running = {"spec": {"suspend": False}, "status": {"startTime": started, "active": 1}}
    evicted_there = {"conditions": [{"type": "Suspended", "status": "True"}]}
    # The apiserver refuses startTime: null on an unsuspended Job: the patch must not carry it.
    status = mirrored_status(running, evicted_there)
    assert status["startTime"] == started
    assert merge_patch(running["status"], status) == {
        "active": None,
        "conditions": evicted_there["conditions"],
    }
    # Once the manager's Job is suspended too, the worker's status is copied as it is.
    suspended = {"spec": {"suspend": True}, "status": {"startTime": started, "active": 1}}
    assert mirrored_status(suspended, evicted_there) == evicted_there
    # A start time the worker reports is always taken.
    later = "2026-11-26T23:30:00Z"
    assert mirrored_status(running, {"startTime": later})["startTime"] == later


def test_the_remote_job_copy_has_no_ttl_the_manager_job_keeps_it() -> None:
    """The worker must not delete its copy before the manager has copied its end (upstream #14734)."""
    local = local_job()
    local["spec"]["ttlSecondsAfterFinished"] = 0
    remote = remote_job_copy(local, "job-sample-1a2b3", "manager-east")
    assert "ttlSecondsAfterFinished" not in remote["spec"]
    assert local["spec"]["ttlSecondsAfterFinished"] == 0


def test_the_name_conflict_message_names_the_object_and_the_worker() -> None:
    assert (
        api.name_conflict_message("Job", "team-a", "sample", "worker1")
        == 'Job team-a/sample already exists on "worker1" and is not managed by this manager'
    )
