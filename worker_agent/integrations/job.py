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

import contextlib
import copy
from collections.abc import Callable
from typing import Any

import structlog

from kube_runtime.client import Conflict, Invalid, NotFound
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kube_runtime.labels import selector_matches
from kube_runtime.ownwrites import CACHE_LAG_RECHECK_SECONDS, OwnWrites
from kueue_domain import api, naming
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework

log = structlog.get_logger("worker_agent.job")

Obj = dict[str, Any]
JOB_KIND = "Job"
JOB_GROUP = "batch"
INDEX_JOB_OWNER_UID = "batchJobOwnerUID"  # Workloads by the UID of the batch/v1 Job controlling them
INDEX_JOB_OWNER_KEY = "batchJobOwnerKey"  # Workloads by "<namespace>/<name>" of that Job
INDEX_JOB_UID_LABEL = "batchJobUIDLabel"  # Workloads by their kueue.x-k8s.io/job-uid label
INDEX_JOB_NAMESPACE = "namespace"  # Jobs by namespace
INDEX_JOB_PRIORITY_CLASS = "workloadPriorityClass"  # Jobs by their WorkloadPriorityClass label
UPDATE_ATTEMPTS = 3  # re-read and retry a Job write this often on a conflict before backing off
STOP_RECHECK_SECONDS = 2.0  # a stop waiting for the Job's pods to go is looked at again after this
# Labels of the template that the Job's selector needs: never dropped when restoring a template.
SELECTOR_LABELS = (*api.JOB_TEMPLATE_LEGACY_LABELS, api.LABEL_BATCH_JOB_NAME)


# ------------------------------------------------------------------------------------------------
# Pure parts: reading a Job


def controlling_job(wl: Obj) -> Obj | None:
    """The Workload's controller owner reference when it is a batch/v1 Job."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or ():
        if (
            ref.get("controller")
            and ref.get("kind") == JOB_KIND
            and ref.get("apiVersion") == api.JOB.api_version
        ):
            return ref
    return None


def _owner_uid_index(wl: Obj) -> tuple[str, ...]:
    ref = controlling_job(wl)
    return (ref["uid"],) if ref and ref.get("uid") else ()


def _owner_key_index(wl: Obj) -> tuple[str, ...]:
    ref = controlling_job(wl)
    return (f"{wl['metadata'].get('namespace', '')}/{ref['name']}",) if ref and ref.get("name") else ()


def _job_uid_label_index(wl: Obj) -> tuple[str, ...]:
    uid = ((wl.get("metadata") or {}).get("labels") or {}).get(api.LABEL_JOB_UID)
    return (uid,) if uid else ()


def _namespace_index(job: Obj) -> tuple[str, ...]:
    return (job["metadata"].get("namespace", ""),)


def _priority_class_index(job: Obj) -> tuple[str, ...]:
    name = (job["metadata"].get("labels") or {}).get(api.LABEL_PRIORITY_CLASS)
    return (name,) if name else ()


def _labels(job: Obj) -> dict[str, str]:
    return (job.get("metadata") or {}).get("labels") or {}


def _annotations(job: Obj) -> dict[str, str]:
    return (job.get("metadata") or {}).get("annotations") or {}


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


def max_execution_seconds(job: Obj) -> int | None:
    value = _labels(job).get(api.LABEL_MAX_EXEC_TIME_SECONDS)
    if value and value.isdigit() and int(value) > 0:
        return int(value)
    return None


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
    previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
    previous_reason = (previous or {}).get("reason")
    if not wlstatus.is_admitted(wl):
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START
    if pods_ready(job):
        recovering = previous_reason in (api.REASON_WAIT_FOR_RECOVERY, api.REASON_RECOVERED)
        reason = api.REASON_RECOVERED if recovering else api.REASON_STARTED
        return api.CONDITION_TRUE, reason, api.MSG_PODS_READY
    if (previous or {}).get(
        "status"
    ) == api.CONDITION_TRUE or previous_reason == api.REASON_WAIT_FOR_RECOVERY:
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_RECOVERY, api.MSG_WAIT_FOR_RECOVERY
    return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START


def managed_by(job: Obj) -> str:
    return (job.get("spec") or {}).get("managedBy") or api.JOB_MANAGED_BY_DEFAULT


def equivalent(job: Obj, wl: Obj, flavors: dict[str, Obj]) -> bool:
    """Does the Workload describe this Job?"""
    spec = wl.get("spec") or {}
    if spec.get("maximumExecutionTimeSeconds") != max_execution_seconds(job):
        return False
    ours = job_podsets(job)
    admitted = wlstatus.is_admitted(wl)
    running = framework.expected_running_podsets(wl, flavors)
    if running is not None:
        if framework.podsets_equivalent(ours, running, ignore_tolerations=admitted):
            return True
        if not is_suspended(job):
            return False
    return framework.podsets_equivalent(ours, spec.get("podSets") or [], ignore_tolerations=admitted)


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


class JobIntegration(framework.WorkloadWrites):
    name = api.FRAMEWORK_BATCH_JOB

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.kube = agent.kube
        self.state = agent.state
        self.config = agent.config
        self.recorder = agent.recorder
        self.jobs = Informer(self.kube, api.JOB, name="jobs")
        self.jobs.add_index(INDEX_JOB_NAMESPACE, _namespace_index)
        self.jobs.add_index(INDEX_JOB_PRIORITY_CLASS, _priority_class_index)
        self.pod_priority_classes = Informer(self.kube, api.PRIORITY_CLASS, name="priorityclasses")
        self.state.workloads.add_index(INDEX_JOB_OWNER_UID, _owner_uid_index)
        self.state.workloads.add_index(INDEX_JOB_OWNER_KEY, _owner_key_index)
        self.state.workloads.add_index(INDEX_JOB_UID_LABEL, _job_uid_label_index)
        self.controller = Controller("job", self.reconcile, concurrency=5, clock=agent.clock)
        self._admission_check_messages: dict[str, str] = {}
        # UIDs of deleted Jobs by key: a Workload orphaned by the garbage collector has lost its
        # owner reference and is found by its job-uid label instead.
        self._gone_job_uids: dict[str, str] = {}
        # Job versions our own writes replaced, until the watch shows the write (no second start
        # from a stale copy, which would meet a 409 and read the Job back).
        self._own_writes = OwnWrites()
        self.jobs.add_handler(
            on_add=self._enqueue_object,
            on_update=lambda old, new: self._enqueue_object(new),
            on_delete=self._on_job_deleted,
        )
        self.state.workloads.add_handler(
            on_add=self._enqueue_for_workload,
            on_update=self._on_workload_updated,
            on_delete=self._enqueue_for_workload,
        )
        self.state.local_queues.add_handler(on_add=self._enqueue_for_local_queue)
        self.state.namespaces.add_handler(
            on_add=self._enqueue_namespace_object,
            on_update=lambda old, new: self._enqueue_namespace_object(new),
        )
        self.state.priority_classes.add_handler(on_add=self._enqueue_for_priority_class)
        agent.register(
            informers=[self.jobs, self.pod_priority_classes],
            controllers=[self.controller],
            on_leading=self._enqueue_all,
        )

    # -- event routing ---------------------------------------------------------------------------

    def _enqueue_object(self, job: Obj) -> None:
        self.controller.enqueue(object_key(job))

    def _on_job_deleted(self, job: Obj) -> None:
        key = object_key(job)
        if job["metadata"].get("uid"):
            self._gone_job_uids[key] = job["metadata"]["uid"]
        self.controller.enqueue(key)

    def _on_workload_updated(self, old: Obj, new: Obj) -> None:
        previous, current = controlling_job(old), controlling_job(new)
        if previous is not None and current is None:
            key = f"{new['metadata'].get('namespace', '')}/{previous['name']}"
            self._gone_job_uids[key] = previous["uid"]
            self.controller.enqueue(key)
        self._enqueue_for_workload(new)

    def _enqueue_for_workload(self, wl: Obj) -> None:
        ref = controlling_job(wl)
        if ref is not None:
            self.controller.enqueue(f"{wl['metadata'].get('namespace', '')}/{ref['name']}")

    def _enqueue_namespace(self, namespace: str) -> None:
        for key in self.jobs.store.index_keys(INDEX_JOB_NAMESPACE, namespace):
            self.controller.enqueue(key)

    def _enqueue_namespace_object(self, ns: Obj) -> None:
        self._enqueue_namespace(ns["metadata"]["name"])

    def _enqueue_for_local_queue(self, lq: Obj) -> None:
        if lq["metadata"]["name"] == api.DEFAULT_NAME:
            self._enqueue_namespace(lq["metadata"].get("namespace", ""))

    def _enqueue_for_priority_class(self, wpc: Obj) -> None:
        for key in self.jobs.store.index_keys(INDEX_JOB_PRIORITY_CLASS, wpc["metadata"]["name"]):
            self.controller.enqueue(key)

    def _enqueue_all(self) -> None:
        for key in self.jobs.store.keys():
            self.controller.enqueue(key)
        for wl in self.state.workloads.list():
            self._enqueue_for_workload(wl)

    # -- reads -----------------------------------------------------------------------------------

    def _flavors(self) -> dict[str, Obj]:
        return {f["metadata"]["name"]: f for f in self.state.flavors.list()}

    def _namespace_managed(self, namespace: str) -> bool:
        return selector_matches(
            self.config.managed_jobs_namespace_selector, self.state.namespace_labels.get(namespace, {})
        )

    def _queue_name(self, job: Obj, owned: list[Obj]) -> str | None:
        """The LocalQueue the Job goes to; None when the Job is not managed."""
        label = _labels(job).get(api.LABEL_QUEUE_NAME)
        if label:
            return label
        if owned:
            return (owned[0].get("spec") or {}).get("queueName") or ""
        namespace = job["metadata"].get("namespace", "")
        # What the defaulting webhook does at creation; a Job already running is left alone.
        if is_suspended(job) and self.state.local_queues.get(f"{namespace}/{api.DEFAULT_NAME}") is not None:
            return api.DEFAULT_NAME
        if self.config.manage_jobs_without_queue_name:
            return ""
        return None

    def _owned_workloads(self, job: Obj) -> list[Obj]:
        owned = self.state.workloads.by_index(INDEX_JOB_OWNER_UID, job["metadata"]["uid"])
        return sorted(
            owned, key=lambda w: (w["metadata"].get("creationTimestamp", ""), w["metadata"]["name"])
        )

    def _workloads_of_gone_job(self, key: str, live_uid: str | None) -> list[Obj]:
        """Workloads of a deleted Job named `key`: still referring to it, or orphaned by the garbage
        collector and labelled with its UID. With a live Job of that name (`live_uid`), only those
        of a Job seen deleted: the Job cache may be behind the Workload cache."""
        gone_uid = self._gone_job_uids.get(key)
        found = [
            wl
            for wl in self.state.workloads.by_index(INDEX_JOB_OWNER_KEY, key)
            if (uid := controlling_job(wl)["uid"]) != live_uid and (live_uid is None or uid == gone_uid)
        ]
        if gone_uid:
            namespace = key.partition("/")[0]
            found += [
                wl
                for wl in self.state.workloads.by_index(INDEX_JOB_UID_LABEL, gone_uid)
                if controlling_job(wl) is None and wl["metadata"].get("namespace") == namespace
            ]
        return found

    def _parent_managed(self, job: Obj) -> bool | None:
        """Whether an enabled integration manages the Job's parent (`manages_child`); None: not known yet."""
        integrations = getattr(self.agent, "integrations", ())
        verdicts = [i.manages_child(job) for i in integrations if hasattr(i, "manages_child")]
        return True if True in verdicts else None if None in verdicts else False

    def _held_back(self, job: Obj, wl: Obj) -> bool:
        """A Job of a MultiKueue ClusterQueue (or Workload) that the Job controller would run here
        is never started. A Job managed by MultiKueue is unsuspended, as upstream does: the Job
        controller leaves it alone, so it only shows the worker's status."""
        if managed_by(job) == api.MULTIKUEUE_CONTROLLER_NAME:
            return False
        names = {c.get("name") for c in wlstatus.check_states(wl)}
        cq_name = self.state.cluster_queue_for(wl)
        cq = self.state.cluster_queues.get(cq_name) if cq_name else None
        if cq is not None:
            spec = cq.get("spec") or {}
            names.update(spec.get("admissionChecks") or ())
            for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ():
                names.add(rule.get("name"))
        for name in names:
            check = self.state.admission_checks.get(name) if name else None
            if check and (check.get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME:
                return True
        return False

    # -- reconcile -------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        namespace = key.partition("/")[0]
        job = self.jobs.get(key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            self._admission_check_messages.pop(key, None)
            self._own_writes.forget(key)
            await self._release_orphans(key, None)
            return None
        if self._own_writes.lagging(key, job):
            return Result(requeue_after=CACHE_LAG_RECHECK_SECONDS)
        # Workloads of an earlier Job of the same name lost their owner.
        await self._release_orphans(key, job["metadata"]["uid"])
        if not self._namespace_managed(namespace):
            return None
        owner = managed_by(job)
        if owner not in (api.JOB_MANAGED_BY_DEFAULT, api.MULTIKUEUE_CONTROLLER_NAME):
            return None  # run by another controller
        parent_managed = self._parent_managed(job)
        if parent_managed is None:
            return Result(requeue=True)  # its parent is not in the cache yet
        if parent_managed:
            return None  # not a top-level job: its parent's Workload covers it (e.g. a JobSet's Jobs)
        owned = self._owned_workloads(job)
        queue = self._queue_name(job, owned)
        if queue is None:
            return None

        prebuilt = prebuilt_workload_name(job)
        if prebuilt:
            wl = await self._prebuilt_workload(job, prebuilt)
        else:
            wl, retry = await self._ensure_one_workload(job, owned, queue)
            if retry:
                return Result(requeue=True)

        # 1. Workload finished: release it.
        if wl is not None and wlstatus.is_finished(wl):
            if api.FINALIZER_RESOURCE_IN_USE in (wl["metadata"].get("finalizers") or ()):
                await self._event(
                    job,
                    api.EVENT_FINISHED_WORKLOAD,
                    api.finished_workload_event_message(namespace, wl["metadata"]["name"]),
                )
                await self._remove_finalizer(wl)
            return None
        # 2. Workload being deleted: stop the Job and let the Workload go.
        if wl is not None and wl["metadata"].get("deletionTimestamp"):
            if not await self._stop(job, wl, api.MSG_WORKLOAD_DELETED):
                return Result(requeue_after=STOP_RECHECK_SECONDS)  # the template is restored from it
            await self._remove_finalizer(wl)
            return None
        # 3. Job finished: finish the Workload.
        done, succeeded, message = finished(job)
        if done:
            if wl is not None:
                reason = api.REASON_SUCCEEDED if succeeded else api.REASON_FAILED
                await self._finish_workload(wl, reason, message, job)
            return None
        if wl is None:
            if prebuilt:
                await self._stop(job, None, api.MSG_MISSING_PREBUILT_WORKLOAD)
            elif not is_active(job):
                await self._create_workload(job, queue)
            return None
        # 4. Pods that will not run again.
        wl = await self._sync_reclaimable_pods(job, wl)
        # 5. PodsReady.
        if self.config.wait_for_pods_ready is not None:
            wl = await self._sync_pods_ready(job, wl)
        # 6. Evicted: stop, then release the quota once nothing runs.
        evicted = wlstatus.condition(wl, api.WORKLOAD_EVICTED)
        if evicted is not None and evicted.get("status") == api.CONDITION_TRUE:
            if not await self._stop(job, wl, evicted.get("message", "")):
                return Result(requeue_after=STOP_RECHECK_SECONDS)
            if wlstatus.has_quota_reservation(wl) and not await self._still_active(job):
                current = wlstatus.working_copy(wl)
                if wlstatus.clear_reservation_after_eviction(
                    current, self.agent.clock.now(), self.agent.config.features
                ):
                    await self._apply_admission_status(current)
            return None
        # 7./8. Suspended: start when admitted, else keep the Workload's queue in step.
        if is_suspended(job):
            if wlstatus.is_admitted(wl):
                if not self._held_back(job, wl):
                    await self._start(job, wl)
                return None
            if wlstatus.has_quota_reservation(wl):
                await self._record_admission_check_messages(key, job, wl)
            if (wl.get("spec") or {}).get("queueName", "") != queue and not wlstatus.has_quota_reservation(
                wl
            ):
                with contextlib.suppress(NotFound):
                    await self.kube.patch_merge(
                        api.WORKLOAD,
                        wl["metadata"]["name"],
                        {"spec": {"queueName": queue or None}},
                        namespace=namespace,
                    )
            return None
        # 9. Running without admission.
        if not wlstatus.is_admitted(wl) and not await self._stop(job, wl, api.MSG_NOT_ADMITTED):
            return Result(requeue_after=STOP_RECHECK_SECONDS)
        return None

    # -- Workload lookup, creation and clean-up ------------------------------------------------

    async def _ensure_one_workload(self, job: Obj, owned: list[Obj], queue: str) -> tuple[Obj | None, bool]:
        """(the matching Workload, retry): rewrites an unreserved mismatching Workload of a
        suspended Job, stops a running Job without a match and deletes the other Workloads."""
        flavors = self._flavors()
        match: Obj | None = None
        others: list[Obj] = []
        for wl in owned:
            if match is None and equivalent(job, wl, flavors):
                match = wl
            else:
                others.append(wl)
        to_update = None
        if match is None and others and is_suspended(job) and not wlstatus.has_quota_reservation(others[0]):
            to_update, others = others[0], others[1:]
        if match is None and not is_suspended(job) and not finished(job)[0]:
            previous = others[0] if len(others) == 1 else None
            message = api.MSG_NO_MATCHING_WORKLOAD if previous is not None else api.MSG_MISSING_WORKLOAD
            await self._stop(job, previous, message)
        deleted = 0
        for wl in others:
            meta = wl["metadata"]
            await self._remove_finalizer(wl)
            try:
                await self.kube.delete(api.WORKLOAD, meta["name"], namespace=meta["namespace"])
            except NotFound:
                continue
            deleted += 1
            await self._event(
                job,
                api.EVENT_DELETED_WORKLOAD,
                api.deleted_not_matching_workload_message(meta["namespace"], meta["name"]),
            )
        if deleted:
            return None, True
        if to_update is not None:
            return await self._update_workload_to_match(job, to_update, queue), False
        if match is not None:
            # A changed priority-class label: the Workload takes the new class and value. The label
            # as it is decides whether it changed (a default class created later is not taken up).
            match, ok = await self._follow_priority_label(
                job, match, _labels(job).get(api.LABEL_PRIORITY_CLASS) or "", lambda: self._priority(job)
            )
            if not ok:
                return None, True
        return match, False

    async def _update_workload_to_match(self, job: Obj, wl: Obj, queue: str) -> Obj | None:
        body, _ = self._workload_body(job, queue)
        if body is None:
            return None
        updated = copy.deepcopy(wl)
        spec = body["spec"]
        if (wl.get("spec") or {}).get("active") is False:
            spec["active"] = False
        updated["spec"] = spec
        try:
            result = await self.kube.replace(api.WORKLOAD, updated)
        except (NotFound, Conflict):
            return None
        meta = wl["metadata"]
        await self._event(
            job,
            api.EVENT_UPDATED_WORKLOAD,
            api.updated_not_matching_workload_message(meta["namespace"], meta["name"]),
        )
        return result

    async def _prebuilt_workload(self, job: Obj, name: str) -> Obj | None:
        """A Workload created for the Job beforehand (e.g. by MultiKueue): adopted, or None."""
        return await self._adopt_prebuilt(
            job, name, self._owner_reference(job), lambda wl: equivalent(job, wl, self._flavors())
        )

    def _owner_reference(self, job: Obj) -> Obj:
        return framework.owner_reference({**job, "apiVersion": api.JOB.api_version, "kind": JOB_KIND})

    def _priority_label(self, job: Obj) -> str:
        """The Job's `kueue.x-k8s.io/priority-class`, or the default WorkloadPriorityClass the
        defaulting webhook gives a Job without one."""
        name = _labels(job).get(api.LABEL_PRIORITY_CLASS) or ""
        if not name and self.state.priority_classes.get(api.DEFAULT_NAME) is not None:
            name = api.DEFAULT_NAME
        return name

    def _priority(self, job: Obj) -> tuple[Obj, str | None]:
        """(the Workload's priority fields, None) or ({}, error) when its priority class is missing."""
        labels = dict(_labels(job))
        labels[api.LABEL_PRIORITY_CLASS] = self._priority_label(job)
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        pod_priority_class = ((job["spec"].get("template") or {}).get("spec") or {}).get("priorityClassName")
        pcs = {o["metadata"]["name"]: o for o in self.pod_priority_classes.list()}
        return framework.priority_for(labels, wpcs, pod_priority_class, pcs)

    def _workload_body(self, job: Obj, queue: str) -> tuple[Obj | None, str | None]:
        """(the Workload for the Job, None) or (None, error) when its priority class is missing."""
        priority, error = self._priority(job)
        if error:
            return None, error
        meta = job["metadata"]
        name = naming.workload_name(meta["name"], meta["uid"], JOB_KIND, JOB_GROUP)
        return framework.new_workload(
            {**job, "apiVersion": api.JOB.api_version, "kind": JOB_KIND},
            name,
            job_podsets(job),
            queue,
            priority=priority,
            label_keys_to_copy=self.config.label_keys_to_copy,
        ), None

    async def _create_workload(self, job: Obj, queue: str) -> None:
        body, error = self._workload_body(job, queue)
        if body is None:
            await self._event(job, api.EVENT_WORKLOAD_PRIORITY_CLASS_NOT_FOUND, error or "", warning=True)
            return
        meta = body["metadata"]
        try:
            await self.kube.create(api.WORKLOAD, body, namespace=meta["namespace"])
        except Conflict:
            return  # already there; the informer has not seen it yet
        await self._event(
            job,
            api.EVENT_CREATED_WORKLOAD,
            api.created_workload_event_message(meta["namespace"], meta["name"]),
        )

    async def _release_orphans(self, key: str, live_uid: str | None) -> None:
        """Finish and let go the Workloads of deleted Jobs named `key` (not those of the live one)."""
        orphans = self._workloads_of_gone_job(key, live_uid)
        await self._finish_orphans(orphans)
        if not any(api.FINALIZER_RESOURCE_IN_USE in (w["metadata"].get("finalizers") or ()) for w in orphans):
            self._gone_job_uids.pop(key, None)  # nothing left to release

    async def _finish_orphans(self, workloads: list[Obj]) -> None:
        """Workloads whose Job is gone: finished (OwnerNotFound, releasing quota), then let go."""
        for wl in workloads:
            await self._finish_orphan(wl)

    # -- Workload status -------------------------------------------------------------------------

    async def _sync_reclaimable_pods(self, job: Obj, wl: Obj) -> Obj:
        desired = desired_reclaimable_pods(job, wl)
        current = [
            {"name": r.get("name"), "count": int(r.get("count") or 0)}
            for r in (wl.get("status") or {}).get("reclaimablePods") or ()
        ]
        if desired == current:
            return wl
        body = {
            "apiVersion": api.API_VERSION,
            "kind": api.WORKLOAD.kind,
            "metadata": {"name": wl["metadata"]["name"], "namespace": wl["metadata"]["namespace"]},
            "status": {"reclaimablePods": desired},
        }
        try:
            return await self.kube.apply_status(
                api.WORKLOAD, body, api.FIELD_MANAGER_RECLAIMABLE_PODS, force=True
            )
        except NotFound:
            return wl

    async def _sync_pods_ready(self, job: Obj, wl: Obj) -> Obj:
        wanted = pods_ready_condition(job, wl)
        previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
        if (
            previous is not None
            and (previous.get("status"), previous.get("reason"), previous.get("message")) == wanted
        ):
            return wl
        current = wlstatus.working_copy(wl)
        wlstatus.set_condition(current, api.WORKLOAD_PODS_READY, *wanted, self.agent.clock.now())
        body = {
            "apiVersion": api.API_VERSION,
            "kind": api.WORKLOAD.kind,
            "metadata": {"name": wl["metadata"]["name"], "namespace": wl["metadata"]["namespace"]},
            "status": {"conditions": [wlstatus.condition(current, api.WORKLOAD_PODS_READY)]},
        }
        try:
            return await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_PODS_READY, force=True)
        except NotFound:
            return wl

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

    async def _start(self, job: Obj, wl: Obj) -> None:
        podset = main_podset(wl)
        try:
            infos = framework.podset_infos(wl, self._flavors())
            info = infos.get(api.DEFAULT_PODSET_NAME)
            if podset is None or info is None:
                log.warning("admission has no pod set main", job=object_key(job))
                return
            # Fail on a conflicting key before writing anything.
            started_job(job, podset, info)
        except framework.PodSetInfoConflict as exc:
            # Permanent: the Job can never start with this admission.
            current = wlstatus.working_copy(wl)
            wlstatus.set_condition(
                current,
                api.WORKLOAD_FINISHED,
                api.CONDITION_TRUE,
                api.REASON_FAILED_TO_START,
                str(exc),
                self.agent.clock.now(),
            )
            await self._apply_admission_status(current)
            return
        if (job.get("status") or {}).get("startTime"):
            # The template of a suspended Job is mutable only while it has no startTime.
            cleared = await self.kube.patch_status_merge(
                api.JOB,
                job["metadata"]["name"],
                {"status": {"startTime": None}},
                namespace=job["metadata"]["namespace"],
            )
            self._own_writes.wrote(object_key(job), job, cleared)
            job = cleared
        written = await self._patch_started(job, podset, info)
        if written is not None:
            cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
            await self._event(job, api.EVENT_STARTED, api.started_event_message(cq))

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

    async def _stop(self, job: Obj, wl: Obj | None, message: str) -> bool:
        """Suspend (marked as stopping), clear startTime, then restore the template from the
        Workload. The API accepts the restored template only once the Job's pods are gone, so until
        then the Job keeps the stopping mark and this returns False; the Job's status update that
        follows brings the reconcile back to finish the stop."""
        if is_suspended(job):
            return True
        meta = job["metadata"]
        current = job
        suspended_now = await self._update_job(job, suspending_job)
        if suspended_now is not None:
            current = suspended_now
            await self._event(job, api.EVENT_STOPPED, message)
        if (current.get("status") or {}).get("startTime"):
            cleared = await self.kube.patch_status_merge(
                api.JOB, meta["name"], {"status": {"startTime": None}}, namespace=meta["namespace"]
            )
            self._own_writes.wrote(object_key(job), current, cleared)
            current = cleared
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

    async def _still_active(self, job: Obj) -> bool:
        """Active pods, read from the API: the cache may lag behind the stop just written."""
        if is_active(job):
            return True
        meta = job["metadata"]
        try:
            fresh = await self.kube.get(api.JOB, meta["name"], namespace=meta["namespace"])
        except NotFound:
            return False
        return is_active(fresh) or not is_suspended(fresh)

    async def _event(self, job: Obj, reason: str, note: str, warning: bool = False) -> None:
        if self.recorder is None:
            return
        regarding = {**job, "apiVersion": api.JOB.api_version, "kind": JOB_KIND}
        if warning:
            await self.recorder.warning(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
        else:
            await self.recorder.normal(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
