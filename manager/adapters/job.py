"""batch/v1 Job adapter (multikueue-spec §3.7): the worker gets a copy of the manager's Job that
adopts the prebuilt remote Workload; the worker's Job status is mirrored onto the manager's Job."""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any

from kube_runtime.client import KubeClient, NotFound
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition, format_time
from kube_runtime.informer import Informer, compact, object_key
from kueue_domain import api
from kueue_domain.naming import prebuilt_workload_name
from manager.adapters.base import (
    clone_for_creation,
    create_remote,
    delete_if_owned,
    just_created,
    owned_by,
    remote_object,
    remote_or_finished_gone,
    waited,
)

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]

# Pod counts a running Job reports; a suspended Job whose pods are gone reports none.
_POD_COUNTS = ("active", "ready", "terminating")
# The counts by which the manager's agent tells a Job still running (active) from a stopped one.
_RUNNING_COUNTS = ("active", "ready")

# A running Job's progress (pods active, ready, counted as they end) is copied once it has stood
# for base.MIRROR_MIN_INTERVAL_SECONDS, so at most once per interval: the worker's job controller
# writes its status several times within moments (the pod started, then ready; at its end the pod
# uncounted, counted, then the Job's conditions), and each copy is a write on the manager cluster
# that the manager cluster's worker_agent reconciles again. A held-back change is written when its
# wait is over (the reconcile is requeued as deferred) or with the next change that is not held
# back: the end of a run and a suspension go at once.

# Labels the Job controller adds to the pod template; the worker's apiserver adds its own.
_GENERATED_TEMPLATE_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)


def job_finished(job: Obj) -> bool:
    conditions = (job.get("status") or {}).get("conditions")
    return any(
        (c.get("type") in ("Complete", "Failed")) and c.get("status") == "True" for c in conditions or ()
    )


def suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def merge_patch(current: Obj, desired: Obj) -> Obj:
    """The JSON merge patch (RFC 7386) that turns `current` into `desired`: nested objects are
    patched key by key, so a key gone from one (`uncountedTerminatedPods: {}`) is set to null."""
    patch: Obj = {}
    for key in {*current, *desired}:
        if key not in desired:
            patch[key] = None
        elif isinstance(current.get(key), dict) and isinstance(desired[key], dict):
            nested = merge_patch(current[key], desired[key])
            if nested:
                patch[key] = nested
        elif key not in current or current[key] != desired[key]:
            patch[key] = desired[key]
    return patch


def mirrored_status(local: Obj, remote_status: Obj) -> Obj:
    """The status the manager's Job takes from its worker's. The apiserver refuses to clear
    `startTime` on an unsuspended Job; the worker clears it when it suspends its copy (an eviction
    there), which the manager may see before the eviction itself. The running Job keeps its own
    `startTime` until it is suspended too, instead of failing the whole status copy."""
    status = dict(remote_status)
    start = (local.get("status") or {}).get("startTime")
    if start and not suspended(local) and not status.get("startTime"):
        status["startTime"] = start
    return status


def stopping_status(local_status: Obj, remote_status: Obj) -> Obj:
    """The status a suspended manager Job takes from its stopped (or finished) worker copy: its
    pods only go, so its active and ready counts never rise. The manager's agent releases the
    quota of an evicted Workload once its Job counts no active pod; a count raised after that,
    from a worker's Job seen in a moment between two states, would be left on a Job that no
    worker runs and nothing would lower it again."""
    status = dict(remote_status)
    for key in _RUNNING_COUNTS:
        held = local_status.get(key) or 0
        if (status.get(key) or 0) > held:
            if held:
                status[key] = held
            else:
                status.pop(key, None)
    return status


def progress_only(local: Obj, remote_status: Obj) -> bool:
    """Whether copying `remote_status` onto the manager's Job only moves a running Job on: no end
    (Complete, Failed) and no suspension on either side. A pod that ended but is not counted yet
    is progress: the end follows within moments, and is written at once."""
    if suspended(local) or job_finished({"status": remote_status}):
        return False
    return not any(
        c.get("type") == api.JOB_CONDITION_SUSPENDED and c.get("status") == "True"
        for c in remote_status.get("conditions") or ()
    )


def remote_job_copy(local_job: Obj, workload_name: str, origin: str) -> Obj:
    spec = copy.deepcopy(local_job.get("spec") or {})
    spec.pop("selector", None)
    spec.pop("managedBy", None)
    # The worker must not delete its copy before the manager has seen it finish: the manager's Job
    # keeps the TTL and goes when it expires there (upstream's
    # MultiKueueBatchJobClearingTTLSecondsAfterFinishedOnWorkerCluster, on by default since v0.20).
    spec.pop("ttlSecondsAfterFinished", None)
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    for key in _GENERATED_TEMPLATE_LABELS:
        if template_labels:
            template_labels.pop(key, None)
    return clone_for_creation(api.JOB, local_job, spec, workload_name, origin)


class JobAdapter:
    resource = api.JOB
    # The manager cluster's Job integration finishes the Workload once the Job shows the end that
    # sync_finished copied: the manager leaves Finished to it (and writes it only as a fallback).
    finished_by_local_integration = True

    def __init__(self, local_kube: KubeClient, local_jobs: Informer, clock: Clock) -> None:
        self.local_kube = local_kube
        self.local_jobs = local_jobs
        self.clock = clock
        # Job key -> when a change held back was first seen: progress not yet copied, and the
        # manager's Job seen suspended while its worker runs it. Oldest first.
        self._progress_since: dict[str, float] = {}
        self._suspended_since: dict[str, float] = {}

    def is_managed(self, namespace: str, name: str) -> tuple[bool, str]:
        job = self.local_job(namespace, name)
        if job is None:  # not in the cache yet (or being deleted): look again, do not reject
            raise LookupError(f"Job {namespace}/{name} not found on the manager cluster")
        managed_by = (job.get("spec") or {}).get("managedBy") or ""
        if managed_by == api.MANAGED_BY_MULTIKUEUE:
            return True, ""
        return False, api.expecting_managed_by_message(managed_by)

    def local_job(self, namespace: str, name: str) -> Obj | None:
        return self.local_jobs.get(f"{namespace}/{name}")

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        local = self.local_job(namespace, name)
        if local is None:
            raise LookupError(f"Job {namespace}/{name} not found on the manager cluster")
        remote_job = await remote_object(remote, api.JOB, namespace, name)
        if remote_job is None:
            ended = remote.finished_gone(api.JOB, namespace, name)
            if ended is not None:
                # It ran and finished, then the worker deleted it: its end is copied, never re-run;
                # the Workload copy's Finished (or its disappearance) follows.
                await self._mirror_status(local, ended.get("status") or {})
                return False
            await create_remote(remote, api.JOB, remote_job_copy(local, workload_name, remote.origin))
            return False
        if just_created(remote, api.JOB, remote_job):
            return True
        if not suspended(local) or suspended(remote_job) or job_finished(remote_job):
            return not await self._mirror_status(local, remote_job.get("status") or {})
        # The manager's Job is still suspended while the worker runs it. Its Workload was usually
        # admitted moments ago and the Job is about to be unsuspended: upstream's condition is
        # written only when that has not happened within the interval.
        if waited(self._suspended_since, object_key(local), self.clock.monotonic()):
            await self._mark_suspended(local)
        return True

    async def sync_finished(self, remote: RemoteClient, namespace: str, name: str) -> bool:
        local = self.local_job(namespace, name)
        remote_job = await remote_or_finished_gone(remote, api.JOB, namespace, name)
        if local is None or remote_job is None or not owned_by(remote_job, remote.origin):
            return True  # nothing to copy (a run over while we could not see it leaves nothing)
        if not job_finished(remote_job):
            return False
        await self._mirror_status(local, remote_job.get("status") or {})
        return True

    async def release_local(self, namespace: str, name: str) -> None:
        """The agent suspends the evicted manager Job and releases its quota once the Job reports
        no active pod; with its worker copy gone or unreachable, nothing would ever lower the count
        mirrored last."""
        local = self.local_job(namespace, name)
        status = (local or {}).get("status") or {}
        if local is None or not any(status.get(key) for key in _POD_COUNTS):
            return
        meta = local["metadata"]
        patch = {"status": dict.fromkeys(_POD_COUNTS)}
        with contextlib.suppress(NotFound):
            await self.local_kube.patch_status_merge(api.JOB, meta["name"], patch, meta["namespace"])

    async def _mirror_status(self, local: Obj, remote_status: Obj) -> bool:
        """Copy the worker's status; False when a progress-only change is held back (an end is
        never: a finished Job's status is not progress)."""
        local_status = local.get("status") or {}
        remote_status = mirrored_status(local, remote_status)
        stopping = suspended(local)
        if stopping:
            remote_status = stopping_status(local_status, remote_status)
        if local_status == remote_status:
            self._progress_since.pop(object_key(local), None)
            return True
        meta = local["metadata"]
        key = object_key(local)
        if progress_only(local, remote_status) and not waited(
            self._progress_since, key, self.clock.monotonic()
        ):
            return False
        body: Obj = {"status": merge_patch(local_status, remote_status)}
        if stopping and meta.get("resourceVersion"):
            # Written only over the Job this copy was made from: a stale cache (a stop written
            # meanwhile) gets a conflict and the reconcile reads again, instead of putting back
            # counts that were already lowered.
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        await self.local_kube.patch_status_merge(api.JOB, meta["name"], body, meta["namespace"])
        self._progress_since.pop(key, None)
        self._suspended_since.pop(key, None)
        return True

    async def _mark_suspended(self, local: Obj) -> None:
        self._suspended_since.pop(object_key(local), None)
        conditions = list((local.get("status") or {}).get("conditions") or ())
        current = find_status_condition(conditions, api.JOB_CONDITION_SUSPENDED)
        if current is not None and current.get("status") == "True":
            return
        now = format_time(self.clock.now())
        conditions = [c for c in conditions if c.get("type") != api.JOB_CONDITION_SUSPENDED]
        conditions.append(
            {
                "type": api.JOB_CONDITION_SUSPENDED,
                "status": "True",
                "reason": api.REASON_MULTIKUEUE_ADAPTER,
                "message": api.MSG_SET_BY_MULTIKUEUE_ADAPTER,
                "lastProbeTime": now,
                "lastTransitionTime": now,
            }
        )
        meta = local["metadata"]
        await self.local_kube.patch_status_merge(
            api.JOB, meta["name"], {"status": {"conditions": conditions}}, meta["namespace"]
        )

    async def delete_remote(self, remote: RemoteClient, namespace: str, name: str) -> None:
        await delete_if_owned(remote, api.JOB, namespace, name, propagation="Background")

    @staticmethod
    def remote_cache_transform(remote_job: Obj) -> Obj:
        """What the manager keeps of a worker's Job: its metadata, status and spec.suspend are all
        it reads (sync_job, the ownership checks, the garbage collector); the pod template, most
        of the spec, is dropped."""
        job = compact(remote_job)
        spec = job.get("spec")
        if isinstance(spec, dict):
            spec.pop("template", None)
            spec.pop("selector", None)
        return job

    def workload_keys_for(self, remote_obj: Obj) -> list[str]:
        name = prebuilt_workload_name(remote_obj)
        return [f"{remote_obj['metadata']['namespace']}/{name}"] if name else []
