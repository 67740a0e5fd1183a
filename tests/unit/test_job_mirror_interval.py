"""manager.adapters.job: a running Job's progress is copied onto the manager's Job at most once per
MIRROR_MIN_INTERVAL_SECONDS (the worker's job controller writes its status several times within
moments); its end and a suspension are copied at once."""

from __future__ import annotations

import copy
from typing import Any

from kube_runtime import api
from kube_runtime.clock import FakeClock
from manager.adapters.job import MIRROR_MIN_INTERVAL_SECONDS, JobAdapter, progress_only, remote_job_copy

ORIGIN = "multikueue"
STARTED = {"startTime": "2026-01-01T00:00:00Z", "active": 1}
READY = {"startTime": "2026-01-01T00:00:00Z", "active": 1, "ready": 1}
UNCOUNTED = {**READY, "uncountedTerminatedPods": {"succeeded": ["pod-uid"]}}
COMPLETE = {
    "startTime": "2026-01-01T00:00:00Z",
    "completionTime": "2026-01-01T00:00:09Z",
    "succeeded": 1,
    "ready": 0,
    "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True"},
        {"type": "Complete", "status": "True"},
    ],
}


def manager_job(status: dict) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sample", "namespace": "team-a", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"suspend": False, "managedBy": api.MANAGED_BY_MULTIKUEUE, "template": {}},
        "status": copy.deepcopy(status),
    }


class Informer:
    def __init__(self, obj: dict | None = None) -> None:
        self.obj = obj

    def get(self, key: str) -> dict | None:
        return self.obj


class LocalKube:
    """The manager cluster: a status merge patch lands on the cached Job, as its watch would show."""

    def __init__(self, jobs: Informer) -> None:
        self.jobs = jobs
        self.patches: list[dict] = []

    async def patch_status_merge(
        self, resource: api.Resource, name: str, patch: dict, namespace: str
    ) -> dict:
        self.patches.append(patch["status"])
        status = self.jobs.obj.setdefault("status", {})
        for key, value in patch["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        return self.jobs.obj


class Remote:
    def __init__(self, status: dict) -> None:
        self.origin = ORIGIN
        self.job = {**remote_job_copy(manager_job({}), "wl-1", ORIGIN), "status": copy.deepcopy(status)}
        self.job["spec"]["suspend"] = False

    def cache(self, resource: api.Resource) -> Any:
        return Informer(self.job)

    def finished_gone(self, resource: api.Resource, namespace: str, name: str) -> None:
        return None

    def created_unseen(self, resource: api.Resource, namespace: str, name: str) -> None:
        return None  # the worker's Job is in its watch cache


def fleet(local_status: dict) -> tuple[JobAdapter, LocalKube, FakeClock]:
    jobs = Informer(manager_job(local_status))
    kube = LocalKube(jobs)
    clock = FakeClock()
    return JobAdapter(kube, jobs, clock), kube, clock  # type: ignore[arg-type]


async def test_progress_within_the_interval_waits_and_is_copied_once_it_is_over():
    jobs, kube, clock = fleet({})
    remote = Remote(STARTED)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False  # the first copy goes at once
    assert kube.patches == [STARTED]
    remote.job["status"] = copy.deepcopy(READY)
    # Held back: deferred, so the reconcile comes back; nothing written yet.
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    assert len(kube.patches) == 1
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    assert kube.patches[-1] == {"ready": 1}
    assert jobs.local_job("team-a", "sample")["status"] == READY


async def test_the_end_of_the_run_is_copied_at_once():
    jobs, kube, _clock = fleet({})
    remote = Remote(READY)
    await jobs.sync_job(remote, "team-a", "sample", "wl-1")
    remote.job["status"] = copy.deepcopy(UNCOUNTED)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True  # progress: held back
    remote.job["status"] = copy.deepcopy(COMPLETE)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    assert jobs.local_job("team-a", "sample")["status"] == COMPLETE
    assert len(kube.patches) == 2


async def test_a_suspension_is_copied_at_once_and_a_pod_not_yet_counted_waits():
    jobs, kube, _clock = fleet({})
    remote = Remote(READY)
    await jobs.sync_job(remote, "team-a", "sample", "wl-1")
    remote.job["status"] = copy.deepcopy(UNCOUNTED) | {"active": 0, "ready": 0}
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    evicted = {"startTime": "2026-01-01T00:00:00Z", "conditions": [{"type": "Suspended", "status": "True"}]}
    remote.job["status"] = copy.deepcopy(evicted)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    assert jobs.local_job("team-a", "sample")["status"] == evicted
    assert len(kube.patches) == 2
    assert not progress_only(manager_job(READY), evicted)


async def test_the_end_copied_by_sync_finished_is_never_held_back():
    jobs, _kube, _clock = fleet({})
    remote = Remote(READY)
    await jobs.sync_job(remote, "team-a", "sample", "wl-1")
    remote.job["status"] = copy.deepcopy(COMPLETE)
    assert await jobs.sync_finished(remote, "team-a", "sample") is True
    assert jobs.local_job("team-a", "sample")["status"] == COMPLETE
