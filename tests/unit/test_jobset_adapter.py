"""manager.adapters.jobset: the JobSet copy a worker gets, the status mirrored back, whether a manager
JobSet is handed to MultiKueue; and what the manager says about a Workload of a kind it has no
adapter for."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.adapters.jobset import (
    JobSetAdapter,
    job_set_finished,
    released_status_patch,
    remote_job_set_copy,
    status_patch,
)
from manager.remote import finished_state
from manager.workload import WorkloadReconciler

ORIGIN = "multikueue"


def local_job_set(managed_by: str | None = "kueue.x-k8s.io/multikueue", status: dict | None = None) -> dict:
    spec: dict = {
        "suspend": False,
        "replicatedJobs": [
            {
                "name": "workers",
                "replicas": 2,
                "template": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}},
            }
        ],
    }
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "trainer",
            "namespace": "team-a",
            "uid": "uid-manager",
            "resourceVersion": "12",
            "generation": 2,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
            "annotations": {"team": "ml"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}],
            "finalizers": ["example.com/keep"],
        },
        "spec": spec,
        "status": status or {},
    }


RUNNING = {
    "restarts": 0,
    "replicatedJobsStatus": [{"name": "workers", "active": 2, "ready": 2, "succeeded": 0, "failed": 0}],
}
COMPLETED = {
    "restarts": 0,
    "terminalState": "Completed",
    "conditions": [{"type": "Completed", "status": "True", "message": "jobset completed successfully"}],
    "replicatedJobsStatus": [{"name": "workers", "active": 0, "ready": 0, "succeeded": 2, "failed": 0}],
}


class FakeInformer:
    def __init__(self, *objects: dict) -> None:
        self.objects = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objects}

    def get(self, key: str) -> dict | None:
        return self.objects.get(key)


class FakeKube:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def create(self, resource: api.Resource, body: dict) -> dict:
        self.calls.append(("create", (resource, body)))
        return body

    async def patch_status_merge(
        self, resource: api.Resource, name: str, patch: dict, namespace: str
    ) -> dict:
        self.calls.append(("patch_status", (resource, name, patch, namespace)))
        return patch

    async def apply_status(
        self, resource: api.Resource, body: dict, manager: str, force: bool = False
    ) -> dict:
        self.calls.append(("apply_status", (resource, body, manager)))
        return body


class FakeRemote:
    def __init__(self, *remote_objects: dict, gone: dict | None = None) -> None:
        self.origin = ORIGIN
        self.kube = FakeKube()
        self.informer = FakeInformer(*remote_objects)
        self.gone = gone

    def cache(self, resource: api.Resource) -> FakeInformer | None:
        return self.informer if resource == api.JOB_SET else None

    def finished_gone(self, resource: api.Resource, namespace: str, name: str) -> dict | None:
        return self.gone

    # RemoteClient's memory of its creates the watch has not shown yet (tested in test_remote_client.py).
    def remember_created(self, resource: api.Resource, obj: dict) -> None:
        self.created = obj

    def created_unseen(self, resource: api.Resource, namespace: str, name: str) -> dict | None:
        return getattr(self, "created", None)


def adapter(*job_sets: dict) -> tuple[JobSetAdapter, FakeKube]:
    kube = FakeKube()
    return JobSetAdapter(kube, FakeInformer(*job_sets)), kube  # type: ignore[arg-type]


# -- the copy --------------------------------------------------------------------------------------


def test_the_remote_copy_carries_origin_and_prebuilt_workload_and_no_managed_by():
    local = local_job_set()
    remote = remote_job_set_copy(local, "jobset-trainer-abcde", ORIGIN)
    assert remote["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and remote["kind"] == "JobSet"
    assert remote["metadata"] == {
        "name": "trainer",
        "namespace": "team-a",
        "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/multikueue-origin": ORIGIN},
        "annotations": {"team": "ml", "kueue.x-k8s.io/prebuilt-workload-name": "jobset-trainer-abcde"},
    }
    assert "managedBy" not in remote["spec"]
    assert remote["spec"]["replicatedJobs"] == local["spec"]["replicatedJobs"]
    assert "status" not in remote
    assert local == local_job_set()  # the manager's JobSet is left alone


async def test_sync_creates_the_copy_on_the_worker_when_missing():
    jobsets, local_kube = adapter(local_job_set())
    remote = FakeRemote()
    assert await jobsets.sync_job(remote, "team-a", "trainer", "wl-1") is False
    ((verb, (resource, body)),) = remote.kube.calls
    assert (verb, resource) == ("create", api.JOB_SET)
    assert body["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"] == "wl-1"
    assert body["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == ORIGIN
    assert local_kube.calls == []


async def test_a_copy_created_but_not_yet_shown_by_the_watch_is_not_created_again():
    jobsets, local_kube = adapter(local_job_set(status=RUNNING))
    remote = FakeRemote()
    assert await jobsets.sync_job(remote, "team-a", "trainer", "wl-1") is False
    # The watch has not shown it yet: not created again, and its empty status is not copied (deferred).
    assert await jobsets.sync_job(remote, "team-a", "trainer", "wl-1") is True
    assert [verb for verb, _ in remote.kube.calls] == ["create"]
    assert local_kube.calls == []


async def test_sync_mirrors_the_whole_worker_status_onto_the_manager_jobset():
    jobsets, local_kube = adapter(local_job_set(status=RUNNING))
    worker_copy = remote_job_set_copy(local_job_set(), "wl-1", ORIGIN)
    worker_copy["status"] = COMPLETED
    await jobsets.sync_job(FakeRemote(worker_copy), "team-a", "trainer", "wl-1")
    ((verb, (resource, name, patch, namespace)),) = local_kube.calls
    assert (verb, resource, name, namespace) == ("patch_status", api.JOB_SET, "trainer", "team-a")
    mirrored = copy.deepcopy(RUNNING)
    mirrored.update(patch["status"])
    assert mirrored == COMPLETED


async def test_sync_writes_nothing_when_the_status_is_already_mirrored():
    jobsets, local_kube = adapter(local_job_set(status=RUNNING))
    worker_copy = {**remote_job_set_copy(local_job_set(), "wl-1", ORIGIN), "status": RUNNING}
    await jobsets.sync_job(FakeRemote(worker_copy), "team-a", "trainer", "wl-1")
    assert local_kube.calls == []
    assert status_patch(local_job_set(status=RUNNING), RUNNING) is None


async def test_a_finished_copy_the_worker_deleted_is_mirrored_not_recreated():
    jobsets, local_kube = adapter(local_job_set(status=RUNNING))
    gone = {**remote_job_set_copy(local_job_set(), "wl-1", ORIGIN), "status": COMPLETED}
    remote = FakeRemote(gone=gone)
    assert await jobsets.sync_job(remote, "team-a", "trainer", "wl-1") is False
    assert remote.kube.calls == []
    assert [c[0] for c in local_kube.calls] == ["patch_status"]
    assert await jobsets.sync_finished(remote, "team-a", "trainer") is True


async def test_sync_finished_waits_for_the_copy_to_finish():
    jobsets, _ = adapter(local_job_set(status=RUNNING))
    running = {**remote_job_set_copy(local_job_set(), "wl-1", ORIGIN), "status": RUNNING}
    assert await jobsets.sync_finished(FakeRemote(running), "team-a", "trainer") is False


def test_finished_means_completed_or_failed():
    assert job_set_finished({"status": COMPLETED})
    assert job_set_finished({"status": {"conditions": [{"type": "Failed", "status": "True"}]}})
    assert not job_set_finished({"status": RUNNING})
    assert finished_state(api.JOB_SET, {"status": COMPLETED})
    assert not finished_state(api.JOB_SET, {"status": RUNNING})


def test_release_zeroes_the_mirrored_active_and_ready_counts():
    patch = released_status_patch(local_job_set(status=RUNNING))
    assert patch == {
        "status": {
            "replicatedJobsStatus": [
                {"name": "workers", "active": 0, "ready": 0, "succeeded": 0, "failed": 0}
            ]
        }
    }
    assert released_status_patch(local_job_set(status=COMPLETED)) is None
    assert released_status_patch(local_job_set()) is None


def test_the_manager_keeps_metadata_status_and_suspend_of_a_remote_jobset():
    remote = {**remote_job_set_copy(local_job_set(), "wl-1", ORIGIN), "status": RUNNING}
    kept = JobSetAdapter.remote_cache_transform(remote)
    assert "replicatedJobs" not in kept["spec"] and kept["spec"]["suspend"] is False
    assert kept["status"] == RUNNING
    assert JobSetAdapter.workload_keys_for(None, remote) == ["team-a/wl-1"]  # type: ignore[arg-type]


# -- handed to MultiKueue? -----------------------------------------------------------------------


def test_a_jobset_managed_by_multikueue_is_managed():
    assert adapter(local_job_set())[0].is_managed("team-a", "trainer") == (True, "")


@pytest.mark.parametrize(
    ("managed_by", "message"),
    [
        (None, 'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not ""'),
        (
            "jobset.sigs.k8s.io/jobset-controller",
            'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" '
            'not "jobset.sigs.k8s.io/jobset-controller"',
        ),
    ],
)
def test_a_jobset_not_managed_by_multikueue_says_why(managed_by, message):
    assert adapter(local_job_set(managed_by))[0].is_managed("team-a", "trainer") == (False, message)


def test_a_jobset_missing_from_the_cache_is_looked_up_again_not_rejected():
    with pytest.raises(LookupError):
        adapter()[0].is_managed("team-a", "trainer")


# -- a kind without an adapter -------------------------------------------------------------------


def reconciler(adapters: dict, kube: FakeKube, wl: dict) -> WorkloadReconciler:
    check = {"metadata": {"name": "mk"}, "spec": {"controllerName": "kueue.x-k8s.io/multikueue"}}
    return WorkloadReconciler(
        kube,  # type: ignore[arg-type]
        workloads=FakeInformer(wl),  # type: ignore[arg-type]
        checks={"mk": check},  # type: ignore[arg-type]
        ac_controller=None,  # type: ignore[arg-type]
        remotes=None,  # type: ignore[arg-type]
        adapters=adapters,
        recorder=None,  # type: ignore[arg-type]
        metrics=None,  # type: ignore[arg-type]
        clock=FakeClock(),
        origin=ORIGIN,
        worker_lost_timeout=900.0,
        all_at_once=True,
    )


def jobset_workload() -> dict:
    return {
        "metadata": {
            "name": "jobset-trainer-abcde",
            "namespace": "team-a",
            "resourceVersion": "3",
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": "trainer",
                    "uid": "uid-manager",
                    "controller": True,
                }
            ],
        },
        "spec": {"queueName": "user-queue"},
        "status": {"admissionChecks": [{"name": "mk", "state": "Pending"}]},
    }


async def test_a_workload_of_a_kind_without_adapter_is_rejected_with_upstreams_message():
    kube = FakeKube()
    wl = jobset_workload()
    assert await reconciler({}, kube, wl).reconcile("team-a/jobset-trainer-abcde") is None
    ((verb, (resource, body, manager)),) = kube.calls
    assert (verb, resource, manager) == ("apply_status", api.WORKLOAD, "kueue.x-k8s.io/multikueue")
    (state,) = body["status"]["admissionChecks"]
    assert state["state"] == "Rejected"
    assert state["message"] == (
        'No multikueue adapter found for owner kind "jobset.x-k8s.io/v1alpha2, Kind=JobSet", '
        'Previously: "Pending"'
    )


async def test_with_the_jobset_adapter_an_unmanaged_jobset_is_rejected_with_the_reason():
    kube = FakeKube()
    jobsets, _ = adapter(local_job_set(managed_by=None))
    await reconciler({api.JOB_SET.gvk: jobsets}, kube, jobset_workload()).reconcile(
        "team-a/jobset-trainer-abcde"
    )
    ((_, (_, body, _)),) = kube.calls
    (state,) = body["status"]["admissionChecks"]
    assert state["state"] == "Rejected"
    assert state["message"] == (
        "The owner is not managed by Kueue: "
        'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not "", Previously: "Pending"'
    )
