"""manager.adapters.job: a running Job's progress is copied onto the manager's Job once it has
waited MIRROR_MIN_INTERVAL_SECONDS since first seen (the worker's job controller writes its status
several times within moments, and those changes go as one write); its end and a suspension are
copied at once. The manager's Job is marked suspended (upstream's condition) only when it is still
suspended an interval after its worker was seen running it."""

from __future__ import annotations

import copy
from typing import Any

from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.adapters import base as adapters_base
from manager.adapters.base import MIRROR_MIN_INTERVAL_SECONDS, waited
from manager.adapters.job import JobAdapter, progress_only, remote_job_copy, stopping_status
from manager.adapters.leaderworkerset import (
    ANNOTATION_WORKER_CLUSTER,
    LeaderWorkerSetAdapter,
    remote_lws_copy,
)

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
        self.preconditions: list[str | None] = []

    async def patch_status_merge(
        self, resource: api.Resource, name: str, patch: dict, namespace: str
    ) -> dict:
        self.patches.append(patch["status"])
        self.preconditions.append((patch.get("metadata") or {}).get("resourceVersion"))
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


async def test_progress_waits_an_interval_from_first_seen_and_goes_as_one_write():
    jobs, kube, clock = fleet({})
    remote = Remote(STARTED)
    # Held back: deferred, so the reconcile comes back; nothing written yet.
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS / 2)
    remote.job["status"] = copy.deepcopy(READY)  # the pod became ready within the wait
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    assert kube.patches == []
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS / 2)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    assert kube.patches == [READY]  # started and ready: one write
    assert jobs.local_job("team-a", "sample")["status"] == READY
    # The next change waits its own interval.
    remote.job["status"] = copy.deepcopy(UNCOUNTED)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    assert len(kube.patches) == 2 and jobs.local_job("team-a", "sample")["status"] == UNCOUNTED


async def test_the_end_of_the_run_is_copied_at_once():
    jobs, kube, _clock = fleet({})
    remote = Remote(READY)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True  # progress: held back
    remote.job["status"] = copy.deepcopy(COMPLETE)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    assert jobs.local_job("team-a", "sample")["status"] == COMPLETE
    assert len(kube.patches) == 1


async def test_a_suspension_is_copied_at_once_and_a_pod_not_yet_counted_waits():
    jobs, kube, clock = fleet({})
    remote = Remote(READY)
    await jobs.sync_job(remote, "team-a", "sample", "wl-1")
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
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


def suspended_here(jobs: JobAdapter) -> None:
    local = jobs.local_job("team-a", "sample")
    local["spec"]["suspend"] = True


async def test_the_manager_job_is_marked_suspended_only_if_still_suspended_after_an_interval():
    jobs, kube, clock = fleet({})
    suspended_here(jobs)
    remote = Remote(STARTED)
    # The worker runs it while the manager's Job waits to be unsuspended (its Workload was just
    # admitted): no condition yet, the reconcile comes back.
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    assert kube.patches == []
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    (marked,) = kube.patches
    (condition,) = marked["conditions"]
    assert (condition["type"], condition["status"]) == ("Suspended", "True")
    assert (condition["reason"], condition["message"]) == ("MultiKueueAdapter", "Set by MultiKueue adapter")
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    assert len(kube.patches) == 1  # once


async def test_a_manager_job_unsuspended_within_the_interval_is_never_marked_suspended():
    jobs, kube, clock = fleet({})
    suspended_here(jobs)
    remote = Remote(READY)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True
    jobs.local_job("team-a", "sample")["spec"]["suspend"] = False  # the integration unsuspended it
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is True  # progress: its own wait
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    assert kube.patches == [READY]


def test_waits_of_jobs_that_left_unseen_are_forgotten():
    since: dict[str, float] = {}
    assert waited(since, "a/gone", 0.0) is False
    assert waited(since, "a/gone", MIRROR_MIN_INTERVAL_SECONDS) is True
    later = adapters_base.FORGET_AFTER_SECONDS + 1
    assert waited(since, "a/other", later) is False
    assert list(since) == ["a/other"]


# -- the LeaderWorkerSet adapter: the worker's LWS status, copied once a change has stood an interval


def manager_lws(status: dict) -> dict:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": "team-a", "uid": "u-2", "annotations": {}},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3}},
        "status": copy.deepcopy(status),
    }


class LocalLwsKube(LocalKube):
    async def patch_merge(self, resource: api.Resource, name: str, patch: dict, namespace: str) -> dict:
        self.jobs.obj["metadata"]["annotations"].update(patch["metadata"]["annotations"])
        return self.jobs.obj


class RemoteLws(Remote):
    def __init__(self, local: dict, status: dict) -> None:
        self.origin = ORIGIN
        self.name = "worker1"
        self.job = {**remote_lws_copy(local, ORIGIN), "status": copy.deepcopy(status)}


async def test_the_worker_lws_status_goes_once_a_change_has_stood_and_its_last_at_once():
    lws = Informer(manager_lws({}))
    kube = LocalLwsKube(lws)
    clock = FakeClock()
    adapter = LeaderWorkerSetAdapter(kube, lws, clock)  # type: ignore[arg-type]
    one_ready = {"replicas": 2, "readyReplicas": 1}
    remote = RemoteLws(lws.obj, one_ready)
    assert await adapter.sync_job(remote, "team-a", "serve", "wl-0") is True  # held back: deferred
    assert lws.obj["metadata"]["annotations"][ANNOTATION_WORKER_CLUSTER] == "worker1"
    remote.job["status"] = {"replicas": 2, "readyReplicas": 2}
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
    assert await adapter.sync_job(remote, "team-a", "serve", "wl-1") is False
    assert kube.patches == [{"replicas": 2, "readyReplicas": 2}]  # one write for both groups
    assert await adapter.sync_job(remote, "team-a", "serve", "wl-0") is False  # nothing new
    remote.job["status"] = {"replicas": 2, "readyReplicas": 1}
    assert await adapter.sync_finished(remote, "team-a", "serve") is True  # the last status: at once
    assert kube.patches[-1] == {"readyReplicas": 1} and len(kube.patches) == 2


def test_a_stopping_job_s_running_counts_only_go_down():
    # A stopped worker Job seen in a moment between two states (or one created anew) never puts
    # back running counts the manager's suspended Job has already dropped; the rest is copied.
    assert stopping_status({}, {"active": 1, "ready": 1, "terminating": 1}) == {"terminating": 1}
    assert stopping_status({"active": 2, "ready": 1}, {"active": 3, "ready": 2}) == {"active": 2, "ready": 1}
    assert stopping_status({"active": 2}, {"active": 1, "succeeded": 4}) == {"active": 1, "succeeded": 4}
    assert stopping_status({"active": 1}, {}) == {}


async def test_a_stopped_worker_job_never_raises_the_counts_of_a_suspended_manager_job():
    jobs, kube, _clock = fleet({"startTime": "2026-01-01T00:00:00Z"})  # the agent dropped its counts
    suspended_here(jobs)
    stopped = {"active": 1, "ready": 1, "conditions": [{"type": "Suspended", "status": "True"}]}
    remote = Remote(stopped)
    remote.job["spec"]["suspend"] = True
    assert await jobs.sync_job(remote, "team-a", "sample", "wl-1") is False
    local = jobs.local_job("team-a", "sample")["status"]
    assert "active" not in local and "ready" not in local
    assert local["conditions"] == stopped["conditions"]
    # Written only over the manager's Job as read: a stale copy gets a conflict, not a write.
    assert kube.preconditions == ["7"]


async def test_a_running_job_s_status_is_copied_without_a_precondition():
    jobs, kube, clock = fleet({})
    remote = Remote(READY)
    await jobs.sync_job(remote, "team-a", "sample", "wl-1")
    await clock.advance(MIRROR_MIN_INTERVAL_SECONDS)
    await jobs.sync_job(remote, "team-a", "sample", "wl-1")
    assert kube.patches == [READY] and kube.preconditions == [None]
