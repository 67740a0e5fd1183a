"""batch/v1 Jobs: one Workload `job-<name>-<hash5>` per managed Job, with one PodSet `main`. The Job
starts (unsuspended, flavor nodeSelector and tolerations injected) when its Workload is Admitted and
is stopped (suspended, template restored) when the Workload is evicted; the reservation is released
once no pod of the Job is active. A finished Job finishes its Workload.

A Job is managed when its namespace matches `managedJobsNamespaceSelector`, it is run by the
built-in Job controller (or is a MultiKueue job, `spec.managedBy: kueue.x-k8s.io/multikueue`), and
it names a LocalQueue (label `kueue.x-k8s.io/queue-name`), or its namespace has a LocalQueue named
`default` (what the defaulting webhook does), or `manageJobsWithoutQueueName` is on.

A Job whose ClusterQueue carries a MultiKueue admission check runs on a worker cluster: one with
`spec.managedBy: kueue.x-k8s.io/multikueue` is unsuspended on admission (no pod starts: the Job
controller ignores it, and MultiKueue mirrors the worker's status onto it); any other is never
started here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import structlog

from kube_runtime.client import Conflict, Invalid
from kube_runtime.informer import Informer, object_key
from kueue_domain import api, naming
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework, jobframework

log = structlog.get_logger("worker_agent.job")

Obj = dict[str, Any]
JOB_KIND = api.JOB.kind
JOB_GROUP = api.JOB.group
UPDATE_ATTEMPTS = 3  # re-read and retry a Job write this often on a conflict before backing off
# Labels of the template that the Job's selector needs: never dropped when restoring a template.
SELECTOR_LABELS = (*api.JOB_TEMPLATE_LEGACY_LABELS, api.LABEL_BATCH_JOB_NAME)


# ------------------------------------------------------------------------------------------------
# Pure parts: reading a Job


def controlling_job(wl: Obj) -> Obj | None:
    """The Workload's controller owner reference when it is a batch/v1 Job."""
    return jobframework.controlling_owner(api.JOB, wl)


_owner_uid_index, _owner_key_index = jobframework.owner_indexes(api.JOB)
_job_uid_label_index = jobframework.job_uid_label_index
_annotations = jobframework.annotations_of


def parallelism(job: Obj) -> int:
    value = (job.get("spec") or {}).get("parallelism")
    return 1 if value is None else int(value)


def completions(job: Obj) -> int | None:
    value = (job.get("spec") or {}).get("completions")
    return None if value is None else int(value)


def pods_count(job: Obj) -> int:
    """Pods the Job runs at once: min(parallelism, completions)."""
    count = parallelism(job)
    total = completions(job)
    return count if total is None else min(count, total)


def is_indexed(job: Obj) -> bool:
    return (job.get("spec") or {}).get("completionMode") == api.JOB_COMPLETION_MODE_INDEXED


def is_suspended(job: Obj) -> bool:
    """Suspended, and not in the middle of being stopped by us."""
    return (job.get("spec") or {}).get("suspend") is True and _annotations(job).get(
        api.ANNOTATION_STOPPING
    ) != api.VALUE_TRUE


def is_active(job: Obj) -> bool:
    return int((job.get("status") or {}).get("active") or 0) > 0


def finished(job: Obj) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the Job's Complete or Failed condition."""
    for c in (job.get("status") or {}).get("conditions") or ():
        if (
            c.get("type") in (api.JOB_CONDITION_COMPLETE, api.JOB_CONDITION_FAILED)
            and c.get("status") == "True"
        ):
            return True, c.get("type") != api.JOB_CONDITION_FAILED, c.get("message") or ""
    return False, False, ""


def pods_ready(job: Obj) -> bool:
    """succeeded + ready + uncounted succeeded >= the pods the Job runs."""
    status = job.get("status") or {}
    uncounted = len((status.get("uncountedTerminatedPods") or {}).get("succeeded") or ())
    done = int(status.get("succeeded") or 0) + int(status.get("ready") or 0) + uncounted
    return done >= pods_count(job)


def min_count(job: Obj) -> int | None:
    """Partial admission: `kueue.x-k8s.io/job-min-parallelism`, when it is a count in 1..podsCount."""
    value = _annotations(job).get(api.ANNOTATION_JOB_MIN_PARALLELISM)
    if value is None or not value.strip().isdigit():
        return None
    count = int(value)
    return count if 1 <= count <= pods_count(job) else None


def syncs_completions(job: Obj) -> bool:
    """Partial admission also sets completions (Indexed Jobs with completions == parallelism)."""
    return (
        _annotations(job).get(api.ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM) == api.VALUE_TRUE
        and is_indexed(job)
        and completions(job) == parallelism(job)
    )


def job_podsets(job: Obj) -> list[Obj]:
    """One PodSet `main`: count min(parallelism, completions), the template minus legacy labels."""
    template = framework.template_for_podset(
        (job.get("spec") or {}).get("template"), drop_label_keys=api.JOB_TEMPLATE_LEGACY_LABELS
    )
    podset: Obj = {"name": api.DEFAULT_PODSET_NAME, "count": pods_count(job), "template": template}
    minimum = min_count(job)
    if minimum is not None:
        podset["minCount"] = minimum
    return [podset]


def parse_indexes(text: str | None) -> set[int]:
    """A Job's completedIndexes / failedIndexes (`1,3-5,7`) as a set."""
    result: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            result.update(range(int(first), int(last or first) + 1))
    return result


def reclaimable_count(job: Obj) -> int:
    """Pods that will not run again: parallelism - max(completions - terminal, 0), when smaller."""
    running = parallelism(job)
    if running <= 1:
        return 0
    total = completions(job)
    if total is None:
        total = running
    status = job.get("status") or {}
    if is_indexed(job):
        indexes = parse_indexes(status.get("completedIndexes")) | parse_indexes(status.get("failedIndexes"))
        terminal = sum(1 for i in indexes if i < total)
    else:
        terminal = int(status.get("succeeded") or 0)
    if terminal == 0:
        return 0
    remaining = max(total - terminal, 0)
    return running - remaining if remaining < running else 0


def desired_reclaimable_pods(job: Obj, wl: Obj) -> list[Obj]:
    """The Workload's reclaimablePods for this Job: capped at the PodSet count, never lowered while
    the Workload holds quota."""
    podsets = (wl.get("spec") or {}).get("podSets") or ()
    cap = int(podsets[0].get("count", 1)) if podsets else 0
    count = min(reclaimable_count(job), cap)
    current = {
        r.get("name"): int(r.get("count") or 0) for r in (wl.get("status") or {}).get("reclaimablePods") or ()
    }
    if wlstatus.has_quota_reservation(wl):
        count = max(count, current.get(api.DEFAULT_PODSET_NAME, 0))
    return [{"name": api.DEFAULT_PODSET_NAME, "count": count}] if count else []


def pods_ready_condition(job: Obj, wl: Obj) -> tuple[str, str, str]:
    """(status, reason, message) of the Workload's PodsReady condition."""
    return jobframework.pods_ready_condition(pods_ready(job), wl)


def equivalent(job: Obj, wl: Obj, flavors: dict[str, Obj]) -> bool:
    """Does the Workload describe this Job? (PodSet names are not compared.)"""
    max_exec = jobframework.max_execution_seconds(job)
    return jobframework.workload_matches(
        job_podsets(job), is_suspended(job), max_exec, wl, flavors, compare_names=False
    )


# ------------------------------------------------------------------------------------------------
# Pure parts: the Job as it is started and stopped


def started_job(job: Obj, podset: Obj, info: Obj) -> Obj | None:
    """The Job unsuspended with the podset info merged into its template; partial admission sets
    parallelism (and completions). None when it is not suspended. Raises PodSetInfoConflict."""
    if not is_suspended(job):
        return None
    result = copy.deepcopy(job)
    spec = result["spec"]
    spec["template"] = framework.merge_into_template(spec.get("template") or {}, info)
    spec["suspend"] = False
    count = info.get("count")
    if podset.get("minCount") is not None and count is not None and int(count) != pods_count(job):
        sync = syncs_completions(job)
        spec["parallelism"] = int(count)
        if sync:
            spec["completions"] = int(count)
    return result


def start_patch(job: Obj, started: Obj) -> list[Obj]:
    """`started` (started_job's result) as one RFC 6902 patch of `job`. Its tests pin what the start
    was computed from (the Job's uid, suspend, its template and the counts it changes) instead of
    the whole object's resourceVersion: the job controller's status writes, which come within moments
    of a Job's creation, then no longer make the start fail (a PUT answered 409, a read-back and a
    second PUT, about one start in three on a busy worker), while a change to what the start read
    still does (a failed test)."""
    spec, new = job.get("spec") or {}, started["spec"]
    ops: list[Obj] = [
        {"op": "test", "path": "/metadata/uid", "value": job["metadata"]["uid"]},
        {"op": "test", "path": "/spec/suspend", "value": True},
        {"op": "test", "path": "/spec/template", "value": spec.get("template") or {}},
    ]
    if new["template"] != spec.get("template"):
        ops.append({"op": "replace", "path": "/spec/template", "value": new["template"]})
    for key in ("parallelism", "completions"):
        if new.get(key) != spec.get(key):
            if spec.get(key) is not None:  # a test of a missing member fails: unset is not tested
                ops.append({"op": "test", "path": f"/spec/{key}", "value": spec[key]})
            ops.append({"op": "add", "path": f"/spec/{key}", "value": new[key]})  # add: set or replace
    ops.append({"op": "replace", "path": "/spec/suspend", "value": False})
    return ops


def suspending_job(job: Obj) -> Obj | None:
    """Stop step 1: suspended and marked as being stopped. None when already so."""
    spec = job.get("spec") or {}
    if spec.get("suspend") is True and _annotations(job).get(api.ANNOTATION_STOPPING) == api.VALUE_TRUE:
        return None
    result = copy.deepcopy(job)
    result["spec"]["suspend"] = True
    annotations = result["metadata"].setdefault("annotations", {})
    annotations[api.ANNOTATION_STOPPING] = api.VALUE_TRUE
    return result


def restored_job(job: Obj, podset: Obj | None) -> Obj:
    """Stop step 3: the template (and, after partial admission, parallelism) as the Workload keeps
    them, and the stopping mark removed."""
    result = copy.deepcopy(job)
    annotations = result["metadata"].get("annotations") or {}
    annotations.pop(api.ANNOTATION_STOPPING, None)
    result["metadata"]["annotations"] = annotations
    spec = result["spec"]
    spec["suspend"] = True
    if podset is not None:
        spec["template"] = framework.restore_template(
            spec.get("template") or {}, podset.get("template") or {}, keep_label_keys=SELECTOR_LABELS
        )
        if podset.get("minCount") is not None and parallelism(job) != int(podset.get("count", 1)):
            sync = syncs_completions(job)
            spec["parallelism"] = int(podset.get("count", 1))
            if sync:
                spec["completions"] = spec["parallelism"]
    return result


def main_podset(wl: Obj | None) -> Obj | None:
    for podset in ((wl or {}).get("spec") or {}).get("podSets") or ():
        if podset.get("name", api.DEFAULT_PODSET_NAME) == api.DEFAULT_PODSET_NAME:
            return podset
    return None


def prebuilt_workload_name(job: Obj) -> str | None:
    """Annotation first, then the label (WorkloadIdentifierAnnotations on)."""
    return naming.prebuilt_workload_name(job) or None


# ------------------------------------------------------------------------------------------------
# The integration


class JobIntegration(jobframework.JobReconciler):
    name = api.FRAMEWORK_BATCH_JOB
    resource = api.JOB
    index_prefix = "batchJob"
    managed_by_default = api.JOB_MANAGED_BY_DEFAULT
    concurrency = 5
    requires_crd = False
    compare_podset_names = False
    follows_gc_orphans = True
    updates_mismatching_workload = True
    finished_event_on_release = True

    def watch_more(self) -> list[Informer]:
        self._pod_priority_classes = Informer(self.kube, api.PRIORITY_CLASS, name="priorityclasses")
        return [self._pod_priority_classes]

    # -- the kind's hooks ------------------------------------------------------------------------

    podsets = staticmethod(job_podsets)
    is_suspended = staticmethod(is_suspended)
    is_active = staticmethod(is_active)
    finished = staticmethod(finished)
    pods_ready = staticmethod(pods_ready)
    reclaimable_pods = staticmethod(desired_reclaimable_pods)

    def pod_priority_class(self, job: Obj, podsets: list[Obj]) -> str | None:
        return ((job["spec"].get("template") or {}).get("spec") or {}).get("priorityClassName")

    def pod_priority_classes(self) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o for o in self._pod_priority_classes.list()}

    async def on_pending(self, key: str, job: Obj, wl: Obj) -> None:
        if wlstatus.has_quota_reservation(wl):
            await self._record_admission_check_messages(key, job, wl)

    async def _record_admission_check_messages(self, key: str, job: Obj, wl: Obj) -> None:
        pending = [
            (c["name"], c["message"])
            for c in wlstatus.check_states(wl)
            if c.get("state") == api.CHECK_STATE_PENDING and c.get("message")
        ]
        message = api.pending_admission_checks_message(pending)
        if not message or self._admission_check_messages.get(key) == message:
            return
        self._admission_check_messages[key] = message
        await self._event(job, api.EVENT_UPDATED_ADMISSION_CHECK, message)

    # -- starting and stopping the Job -----------------------------------------------------------

    async def run(self, job: Obj, wl: Obj, infos: Any) -> bool:
        podset = main_podset(wl)
        info = infos.get(api.DEFAULT_PODSET_NAME)
        if podset is None or info is None:
            log.warning("admission has no pod set main", job=object_key(job))
            return False
        started_job(job, podset, info)  # fail on a conflicting key before writing anything
        if (job.get("status") or {}).get("startTime"):
            # The template of a suspended Job is mutable only while it has no startTime.
            job = await self._clear_start_time(job, job)
        return await self._patch_started(job, podset, info) is not None

    async def _clear_start_time(self, job: Obj, current: Obj) -> Obj:
        meta = job["metadata"]
        cleared = await self.kube.patch_status_merge(
            api.JOB, meta["name"], {"status": {"startTime": None}}, namespace=meta["namespace"]
        )
        self._own_writes.wrote(object_key(job), current, cleared)
        return cleared

    async def _patch_started(self, job: Obj, podset: Obj, info: Obj) -> Obj | None:
        """Start `job` with one patch (start_patch); when what the start read changed meanwhile (a
        failed test, 422), from a fresh read with optimistic concurrency as before. Returns the
        written Job, or None when it was started already."""
        started = self._started_or_none(job, podset, info)
        if started is None:
            return None
        meta = job["metadata"]
        try:
            written = await self.kube.patch_json(
                api.JOB, meta["name"], start_patch(job, started), namespace=meta["namespace"]
            )
        except Invalid:
            fresh = await self.kube.get(api.JOB, meta["name"], namespace=meta["namespace"])
            written = await self._update_job(fresh, lambda j: self._started_or_none(j, podset, info))
            if written is None:
                return None
        self._own_writes.wrote(object_key(job), job, written)
        return written

    @staticmethod
    def _started_or_none(job: Obj, podset: Obj, info: Obj) -> Obj | None:
        try:
            return started_job(job, podset, info)
        except framework.PodSetInfoConflict:
            return None

    async def stop(self, job: Obj, wl: Obj | None, message: str) -> bool:
        """Suspend (marked as stopping), clear startTime, then restore the template from the
        Workload. The API accepts the restored template only once the Job's pods are gone, so until
        then the Job keeps the stopping mark and this returns False; the Job's status update that
        follows brings the reconcile back to finish the stop."""
        if is_suspended(job):
            return True
        current = job
        suspended_now = await self._update_job(job, suspending_job)
        if suspended_now is not None:
            current = suspended_now
            await self._event(job, api.EVENT_STOPPED, message)
        if (current.get("status") or {}).get("startTime"):
            current = await self._clear_start_time(job, current)
        if is_active(current):
            return False
        podset = main_podset(wl)
        try:
            await self._update_job(current, lambda j: restored_job(j, podset))
        except Invalid as exc:
            log.info("template not restorable yet", job=object_key(job), error=str(exc)[:200])
            return False
        return True

    async def _update_job(self, job: Obj, change: Callable[[Obj], Obj | None]) -> Obj | None:
        """PUT `change(job)` with optimistic concurrency; on a conflict, re-read and try again.
        Returns the written Job, or None when `change` had nothing to do."""
        meta = job["metadata"]
        current = job
        for attempt in range(UPDATE_ATTEMPTS):
            desired = change(current)
            if desired is None:
                return None
            try:
                written = await self.kube.replace(api.JOB, desired)
            except Conflict:
                if attempt == UPDATE_ATTEMPTS - 1:
                    raise
                current = await self.kube.get(api.JOB, meta["name"], namespace=meta["namespace"])
                continue
            # The cache may still show `job` (the copy this reconcile read) or `current`.
            self._own_writes.wrote(object_key(job), job, written)
            self._own_writes.wrote(object_key(job), current, written)
            return written
        return None
