"""JobSets (jobset.x-k8s.io/v1alpha2, integration `jobset.x-k8s.io/jobset`): one Workload
`jobset-<name>-<hash5>` per managed JobSet, with one PodSet per replicatedJob (named after it, count
replicas x min(parallelism, completions), the pod template of its Job template).

The JobSet starts (`spec.suspend: false`, the assigned flavors' nodeSelector and tolerations and the
admission checks' podSetUpdates merged into every replicatedJob's pod template) when its Workload is
Admitted, and is stopped (suspended, templates restored from the Workload's PodSets, in one update:
the JobSet webhook lets a JobSet being suspended change them) when the Workload is evicted; the
reservation is released once no Job of the JobSet is active. A JobSet `Completed` or `Failed`
finishes its Workload with that condition's message. Replicated Jobs that succeeded are reclaimable.

Which JobSets are managed, and MultiKueue, as for batch/v1 Jobs: one whose `spec.managedBy` is
`kueue.x-k8s.io/multikueue` is unsuspended on admission but never run here (the JobSet controller
leaves it alone; MultiKueue runs it on a worker and mirrors the status back); one of a MultiKueue
ClusterQueue with any other managedBy is never started here. A JobSet managed by a controller other
than the JobSet controller or MultiKueue is left alone.

The Jobs of a managed JobSet are not top-level jobs: the batch/v1 Job integration leaves them to
their JobSet's Workload (`manages_child`). Nor is a JobSet whose TrainJob Kueue manages (the
TrainJob integration's `manages_child`): it and its Jobs are left to the TrainJob's Workload.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any

import structlog

from kube_runtime.client import Conflict, NotFound
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kube_runtime.labels import selector_matches
from kube_runtime.ownwrites import CACHE_LAG_RECHECK_SECONDS, OwnWrites
from kueue_domain import api, naming
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework

log = structlog.get_logger("worker_agent.jobset")

Obj = dict[str, Any]
JOB_SET_KIND = api.JOB_SET.kind
JOB_SET_GROUP = api.JOB_SET.group
INDEX_JOB_SET_OWNER_UID = "jobSetOwnerUID"  # Workloads by the UID of the JobSet controlling them
INDEX_JOB_SET_OWNER_KEY = "jobSetOwnerKey"  # Workloads by "<namespace>/<name>" of that JobSet
INDEX_JOB_SET_NAMESPACE = "namespace"  # JobSets by namespace


# ------------------------------------------------------------------------------------------------
# Pure parts: reading a JobSet


def _labels(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _annotations(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def replicated_jobs(job_set: Obj) -> list[Obj]:
    return list((job_set.get("spec") or {}).get("replicatedJobs") or ())


def job_spec(replicated_job: Obj) -> Obj:
    return (replicated_job.get("template") or {}).get("spec") or {}


def replicas(replicated_job: Obj) -> int:
    """`replicas`, 1 when unset (the CRD's default)."""
    value = replicated_job.get("replicas")
    return 1 if value is None else int(value)


def pods_count_per_replica(replicated_job: Obj) -> int:
    """Pods one Job of the replicatedJob runs at once: min(parallelism, completions), parallelism 1
    when unset (PodsCountPerReplica)."""
    spec = job_spec(replicated_job)
    parallelism = 1 if spec.get("parallelism") is None else int(spec["parallelism"])
    completions = spec.get("completions")
    if completions is not None and int(completions) < parallelism:
        return int(completions)
    return parallelism


def pods_count(replicated_job: Obj) -> int:
    return replicas(replicated_job) * pods_count_per_replica(replicated_job)


def job_set_podsets(job_set: Obj) -> list[Obj]:
    """One PodSet per replicatedJob, in order: its name, its pod count, its Job's pod template."""
    return [
        {
            "name": rj.get("name", ""),
            "count": pods_count(rj),
            "template": framework.template_for_podset(job_spec(rj).get("template")),
        }
        for rj in replicated_jobs(job_set)
    ]


def is_suspended(job_set: Obj) -> bool:
    return (job_set.get("spec") or {}).get("suspend") is True


def is_active(job_set: Obj) -> bool:
    """A Job of the JobSet has active pods (ReplicatedJobsStatus[].active)."""
    return any(
        int(s.get("active") or 0) > 0 for s in (job_set.get("status") or {}).get("replicatedJobsStatus") or ()
    )


def finished(job_set: Obj) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the JobSet's `Completed`, then `Failed`, condition."""
    conditions = (job_set.get("status") or {}).get("conditions") or ()
    for ctype, succeeded in ((api.JOB_SET_CONDITION_COMPLETED, True), (api.JOB_SET_CONDITION_FAILED, False)):
        for c in conditions:
            if c.get("type") == ctype and c.get("status") == api.CONDITION_TRUE:
                return True, succeeded, c.get("message") or ""
    return False, False, ""


def pods_ready(job_set: Obj) -> bool:
    """Every replicated Job is ready or succeeded: the sum of replicas equals the sum of the
    replicatedJobsStatus' ready + succeeded Jobs."""
    wanted = sum(replicas(rj) for rj in replicated_jobs(job_set))
    statuses = (job_set.get("status") or {}).get("replicatedJobsStatus") or ()
    return wanted == sum(int(s.get("ready") or 0) + int(s.get("succeeded") or 0) for s in statuses)


def reclaimable_pods(job_set: Obj) -> list[Obj]:
    """Per replicatedJob with 0 < succeeded Jobs <= replicas: succeeded x pods per replica."""
    statuses = {s.get("name"): s for s in (job_set.get("status") or {}).get("replicatedJobsStatus") or ()}
    if not statuses:
        return []
    result = []
    for rj in replicated_jobs(job_set):
        status = statuses.get(rj.get("name"))
        succeeded = int((status or {}).get("succeeded") or 0)
        if status is not None and 0 < succeeded <= replicas(rj):
            result.append({"name": rj.get("name", ""), "count": succeeded * pods_count_per_replica(rj)})
    return result


def managed_by(job_set: Obj) -> str:
    return (job_set.get("spec") or {}).get("managedBy") or api.JOB_SET_MANAGED_BY_DEFAULT


def max_execution_seconds(job_set: Obj) -> int | None:
    value = _labels(job_set).get(api.LABEL_MAX_EXEC_TIME_SECONDS)
    if value and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def pod_priority_class(job_set: Obj) -> str | None:
    """The first pod template's priorityClassName, in replicatedJob order."""
    for rj in replicated_jobs(job_set):
        name = ((job_spec(rj).get("template") or {}).get("spec") or {}).get("priorityClassName")
        if name:
            return name
    return None


def workload_name(job_set: Obj) -> str:
    """GetWorkloadNameForOwnerWithGVK with the JobSet GVK."""
    meta = job_set["metadata"]
    return naming.workload_name(meta["name"], meta["uid"], JOB_SET_KIND, JOB_SET_GROUP)


def prebuilt_workload_name(job_set: Obj) -> str | None:
    """Annotation first, then the label (WorkloadIdentifierAnnotations on)."""
    return naming.prebuilt_workload_name(job_set) or None


def equivalent(job_set: Obj, wl: Obj, flavors: Mapping[str, Obj]) -> bool:
    """Does the Workload describe this JobSet? (As for Jobs: a running JobSet is compared with the
    PodSets as started, tolerations ignored once admitted.)"""
    spec = wl.get("spec") or {}
    if spec.get("maximumExecutionTimeSeconds") != max_execution_seconds(job_set):
        return False
    ours = job_set_podsets(job_set)
    if [p["name"] for p in ours] != [p.get("name") for p in spec.get("podSets") or ()]:
        return False
    admitted = wlstatus.is_admitted(wl)
    running = framework.expected_running_podsets(wl, flavors)
    if running is not None:
        if framework.podsets_equivalent(ours, running, ignore_tolerations=admitted):
            return True
        if not is_suspended(job_set):
            return False
    return framework.podsets_equivalent(ours, spec.get("podSets") or [], ignore_tolerations=admitted)


def pods_ready_condition(job_set: Obj, wl: Obj) -> tuple[str, str, str]:
    """(status, reason, message) of the Workload's PodsReady condition (as for Jobs)."""
    previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
    previous_reason = (previous or {}).get("reason")
    if not wlstatus.is_admitted(wl):
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START
    if pods_ready(job_set):
        recovering = previous_reason in (api.REASON_WAIT_FOR_RECOVERY, api.REASON_RECOVERED)
        reason = api.REASON_RECOVERED if recovering else api.REASON_STARTED
        return api.CONDITION_TRUE, reason, api.MSG_PODS_READY
    if (previous or {}).get(
        "status"
    ) == api.CONDITION_TRUE or previous_reason == api.REASON_WAIT_FOR_RECOVERY:
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_RECOVERY, api.MSG_WAIT_FOR_RECOVERY
    return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START


# ------------------------------------------------------------------------------------------------
# Pure parts: the JobSet as it is started and stopped


def _pod_template(replicated_job: Obj) -> Obj:
    return replicated_job.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})


def started_job_set(job_set: Obj, infos: Mapping[str, Obj]) -> Obj | None:
    """RunWithPodSetsInfo: the JobSet unsuspended with each replicatedJob's podset info merged into
    its pod template. None when it is not suspended. Raises PodSetInfoConflict on a conflicting key
    or when the admission has no info for a replicatedJob."""
    if not is_suspended(job_set):
        return None
    result = copy.deepcopy(job_set)
    for rj in replicated_jobs(result):
        info = infos.get(rj.get("name", ""))
        if info is None or len(infos) != len(replicated_jobs(job_set)):
            # podset.BadPodSetsInfoLenError
            raise framework.PodSetInfoConflict(
                f"invalid podset infos: expecting {len(replicated_jobs(job_set))} podset, got {len(infos)}"
            )
        merged = framework.merge_into_template(_pod_template(rj), info)
        rj["template"]["spec"]["template"] = merged
    result["spec"]["suspend"] = False
    return result


def stopped_job_set(job_set: Obj, wl: Obj | None) -> Obj | None:
    """Suspend and RestorePodSetsInfo in one: suspended, and every replicatedJob's pod template
    labels, annotations, nodeSelector, tolerations and scheduling gates taken back from the
    Workload's PodSet of that name (left as they are without a Workload, or when the PodSets do not
    match the replicatedJobs). None when there is nothing to change."""
    result = copy.deepcopy(job_set)
    result.setdefault("spec", {})["suspend"] = True
    podsets = {p.get("name"): p for p in ((wl or {}).get("spec") or {}).get("podSets") or ()}
    rjs = replicated_jobs(result)
    if podsets and len(podsets) == len(rjs) and all(rj.get("name") in podsets for rj in rjs):
        for rj in rjs:
            original = podsets[rj.get("name")].get("template") or {}
            rj["template"]["spec"]["template"] = framework.restore_template(_pod_template(rj), original)
    return None if result == job_set else result


# ------------------------------------------------------------------------------------------------
# The integration


def controlling_job_set(wl: Obj) -> Obj | None:
    """The Workload's controller owner reference when it is a JobSet."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or ():
        if (
            ref.get("controller")
            and ref.get("kind") == JOB_SET_KIND
            and ref.get("apiVersion") == api.JOB_SET.api_version
        ):
            return ref
    return None


def _owner_uid_index(wl: Obj) -> tuple[str, ...]:
    ref = controlling_job_set(wl)
    return (ref["uid"],) if ref and ref.get("uid") else ()


def _owner_key_index(wl: Obj) -> tuple[str, ...]:
    ref = controlling_job_set(wl)
    return (f"{wl['metadata'].get('namespace', '')}/{ref['name']}",) if ref and ref.get("name") else ()


def _namespace_index(job_set: Obj) -> tuple[str, ...]:
    return (job_set["metadata"].get("namespace", ""),)


def controller_job_set_ref(obj: Obj) -> Obj | None:
    """The object's controller owner reference when it is a JobSet (the Jobs a JobSet creates)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            group = (ref.get("apiVersion") or "").rpartition("/")[0]
            return ref if (group, ref.get("kind")) == (JOB_SET_GROUP, JOB_SET_KIND) else None
    return None


class JobSetIntegration(framework.WorkloadWrites):
    name = api.FRAMEWORK_JOB_SET

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.kube = agent.kube
        self.state = agent.state
        self.config = agent.config
        self.recorder = agent.recorder
        self.jobsets = Informer(self.kube, api.JOB_SET, name="jobsets")
        self.jobsets.add_index(INDEX_JOB_SET_NAMESPACE, _namespace_index)
        self.state.workloads.add_index(INDEX_JOB_SET_OWNER_UID, _owner_uid_index)
        self.state.workloads.add_index(INDEX_JOB_SET_OWNER_KEY, _owner_key_index)
        self.controller = Controller("jobset", self.reconcile, concurrency=3, clock=agent.clock)
        self._own_writes = OwnWrites()  # JobSet versions our writes replaced, until the watch shows them
        self.jobsets.add_handler(
            on_add=self._enqueue_object,
            on_update=lambda old, new: self._enqueue_object(new),
            on_delete=self._enqueue_object,
        )
        self.state.workloads.add_handler(
            on_add=self._enqueue_for_workload,
            on_update=lambda old, new: self._enqueue_for_workload(new),
            on_delete=self._enqueue_for_workload,
        )
        self.state.local_queues.add_handler(on_add=self._enqueue_for_local_queue)
        agent.register(
            informers=[self.jobsets],
            controllers=[self.controller],
            on_leading=self._enqueue_all,
            requires=api.JOB_SET,
        )

    # -- event routing ---------------------------------------------------------------------------

    def _enqueue_object(self, job_set: Obj) -> None:
        self.controller.enqueue(object_key(job_set))

    def _enqueue_for_workload(self, wl: Obj) -> None:
        for key in _owner_key_index(wl):
            self.controller.enqueue(key)

    def _enqueue_for_local_queue(self, lq: Obj) -> None:
        if lq["metadata"]["name"] == api.DEFAULT_NAME:
            namespace = lq["metadata"].get("namespace", "")
            for key in self.jobsets.store.index_keys(INDEX_JOB_SET_NAMESPACE, namespace):
                self.controller.enqueue(key)

    def _enqueue_all(self) -> None:
        for key in self.jobsets.store.keys():
            self.controller.enqueue(key)
        for key in self.state.workloads.store.index_values(INDEX_JOB_SET_OWNER_KEY):
            self.controller.enqueue(key)

    # -- the batch/v1 Job integration asks this ------------------------------------------------

    def manages_child(self, job: Obj) -> bool | None:
        """Whether `job` belongs to a JobSet Kueue manages (FindAncestorJobManagedByKueue: its
        controller is a JobSet with a queue name, or any JobSet with manageJobsWithoutQueueName).
        None when the JobSet is not in the cache yet: ask again later."""
        ref = controller_job_set_ref(job)
        if ref is None:
            return False
        job_set = self.jobsets.get(f"{job['metadata'].get('namespace', '')}/{ref.get('name')}")
        if job_set is None:
            return None  # not seen yet, or gone (its Jobs go too): upstream retries as well
        if job_set["metadata"].get("uid") != ref.get("uid"):
            return False  # a stale reference: the walk stops, the Job is a top-level one
        if _labels(job_set).get(api.LABEL_QUEUE_NAME) or self.config.manage_jobs_without_queue_name:
            return True
        return self._parent_managed(job_set)  # the walk goes on: a TrainJob's JobSet

    def _parent_managed(self, job_set: Obj) -> bool | None:
        """Whether another enabled integration manages the JobSet's parent (a TrainJob's
        `manages_child`); None: not known yet."""
        integrations = getattr(getattr(self, "agent", None), "integrations", ())
        verdicts = [
            i.manages_child(job_set) for i in integrations if i is not self and hasattr(i, "manages_child")
        ]
        return True if True in verdicts else None if None in verdicts else False

    # -- reads -----------------------------------------------------------------------------------

    def _flavors(self) -> dict[str, Obj]:
        return {f["metadata"]["name"]: f for f in self.state.flavors.list()}

    def _namespace_managed(self, namespace: str) -> bool:
        return selector_matches(
            self.config.managed_jobs_namespace_selector, self.state.namespace_labels.get(namespace, {})
        )

    def _queue_name(self, job_set: Obj, owned: list[Obj]) -> str | None:
        """The LocalQueue the JobSet goes to; None when it is not managed."""
        label = _labels(job_set).get(api.LABEL_QUEUE_NAME)
        if label:
            return label
        if owned:
            return (owned[0].get("spec") or {}).get("queueName") or ""
        namespace = job_set["metadata"].get("namespace", "")
        if (
            is_suspended(job_set)
            and self.state.local_queues.get(f"{namespace}/{api.DEFAULT_NAME}") is not None
        ):
            return api.DEFAULT_NAME
        if self.config.manage_jobs_without_queue_name:
            return ""
        return None

    def _owned_workloads(self, job_set: Obj) -> list[Obj]:
        owned = self.state.workloads.by_index(INDEX_JOB_SET_OWNER_UID, job_set["metadata"]["uid"])
        return sorted(
            owned, key=lambda w: (w["metadata"].get("creationTimestamp", ""), w["metadata"]["name"])
        )

    def _held_back(self, job_set: Obj, wl: Obj) -> bool:
        """As for Jobs: a JobSet of a MultiKueue ClusterQueue that the JobSet controller would run
        here is never started; one managed by MultiKueue is unsuspended (nothing runs here)."""
        if managed_by(job_set) == api.MULTIKUEUE_CONTROLLER_NAME:
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
        job_set = self.jobsets.get(key)
        live_uid = job_set["metadata"]["uid"] if job_set is not None else None
        await self._release_orphans(key, live_uid)
        if job_set is None or job_set["metadata"].get("deletionTimestamp"):
            self._own_writes.forget(key)
            return None
        if self._own_writes.lagging(key, job_set):
            return Result(requeue_after=CACHE_LAG_RECHECK_SECONDS)  # the watch has not shown our write
        if not self._namespace_managed(namespace):
            return None
        if managed_by(job_set) not in (api.JOB_SET_MANAGED_BY_DEFAULT, api.MULTIKUEUE_CONTROLLER_NAME):
            return None  # run by another controller
        parent_managed = self._parent_managed(job_set)
        if parent_managed is None:
            return Result(requeue=True)  # its parent (a TrainJob) is not in the cache yet
        if parent_managed:
            return None  # not a top-level job: its TrainJob's Workload covers it
        owned = self._owned_workloads(job_set)
        queue = self._queue_name(job_set, owned)
        if queue is None:
            return None

        prebuilt = prebuilt_workload_name(job_set)
        if prebuilt:
            wl = await self._prebuilt_workload(job_set, prebuilt)
        else:
            wl, retry = await self._ensure_one_workload(job_set, owned)
            if retry:
                return Result(requeue=True)

        # 1. Workload finished: let it go.
        if wl is not None and wlstatus.is_finished(wl):
            if api.FINALIZER_RESOURCE_IN_USE in (wl["metadata"].get("finalizers") or ()):
                await self._remove_finalizer(wl)
            return None
        # 2. Workload being deleted: stop the JobSet and let the Workload go.
        if wl is not None and wl["metadata"].get("deletionTimestamp"):
            await self._stop(job_set, wl, api.MSG_WORKLOAD_DELETED)
            await self._remove_finalizer(wl)
            return None
        # 3. JobSet finished: finish the Workload.
        done, succeeded, message = finished(job_set)
        if done:
            if wl is not None:
                await self._finish_workload(
                    wl, api.REASON_SUCCEEDED if succeeded else api.REASON_FAILED, message, job_set
                )
            return None
        if wl is None:
            if prebuilt:
                await self._stop(job_set, None, api.MSG_MISSING_PREBUILT_WORKLOAD)
            elif not is_active(job_set):
                await self._create_workload(job_set, queue)
            return None
        # 4. Replicated Jobs that succeeded.
        wl = await self._sync_reclaimable_pods(job_set, wl)
        # 5. PodsReady.
        if self.config.wait_for_pods_ready is not None:
            wl = await self._sync_pods_ready(job_set, wl)
        # 6. Evicted: stop, then release the quota once nothing runs.
        evicted = wlstatus.condition(wl, api.WORKLOAD_EVICTED)
        if evicted is not None and evicted.get("status") == api.CONDITION_TRUE:
            await self._stop(job_set, wl, evicted.get("message", ""))
            if wlstatus.has_quota_reservation(wl) and not await self._still_active(job_set):
                current = wlstatus.working_copy(wl)
                if wlstatus.clear_reservation_after_eviction(
                    current, self.agent.clock.now(), self.agent.config.features
                ):
                    await self._apply_admission_status(current)
            return None
        # 7. Suspended: start when admitted, else keep the Workload's queue in step.
        if is_suspended(job_set):
            if wlstatus.is_admitted(wl):
                if not self._held_back(job_set, wl):
                    await self._start(job_set, wl)
                return None
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
        # 8. Running without admission.
        if not wlstatus.is_admitted(wl):
            await self._stop(job_set, wl, api.MSG_NOT_ADMITTED)
        return None

    # -- Workload lookup, creation and clean-up ------------------------------------------------

    async def _ensure_one_workload(self, job_set: Obj, owned: list[Obj]) -> tuple[Obj | None, bool]:
        """(the matching Workload, retry): stops a running JobSet without a match and deletes the
        Workloads that do not match."""
        flavors = self._flavors()
        match = next((wl for wl in owned if equivalent(job_set, wl, flavors)), None)
        others = [wl for wl in owned if wl is not match]
        if match is None and not is_suspended(job_set) and not finished(job_set)[0]:
            previous = others[0] if len(others) == 1 else None
            message = api.MSG_NO_MATCHING_WORKLOAD if previous is not None else api.MSG_MISSING_WORKLOAD
            await self._stop(job_set, previous, message)
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
                job_set,
                api.EVENT_DELETED_WORKLOAD,
                api.deleted_not_matching_workload_message(meta["namespace"], meta["name"]),
            )
        if deleted:
            return match, True
        if match is not None:
            # A changed priority-class label: the Workload takes the new class and value.
            match, ok = await self._follow_priority_label(
                job_set,
                match,
                _labels(job_set).get(api.LABEL_PRIORITY_CLASS) or "",
                lambda: self._priority(job_set),
            )
            if not ok:
                return None, True
        return match, False

    async def _prebuilt_workload(self, job_set: Obj, name: str) -> Obj | None:
        """A Workload created for the JobSet beforehand (by MultiKueue): adopted, or None."""
        return await self._adopt_prebuilt(
            job_set, name, self._owner_reference(job_set), lambda wl: equivalent(job_set, wl, self._flavors())
        )

    def _owner_reference(self, job_set: Obj) -> Obj:
        return framework.owner_reference(
            {**job_set, "apiVersion": api.JOB_SET.api_version, "kind": JOB_SET_KIND}
        )

    def _priority_label(self, job_set: Obj) -> str:
        """The JobSet's `kueue.x-k8s.io/priority-class`, or the default WorkloadPriorityClass."""
        name = _labels(job_set).get(api.LABEL_PRIORITY_CLASS) or ""
        if not name and self.state.priority_classes.get(api.DEFAULT_NAME) is not None:
            name = api.DEFAULT_NAME
        return name

    def _priority(self, job_set: Obj) -> tuple[Obj, str | None]:
        labels = {api.LABEL_PRIORITY_CLASS: self._priority_label(job_set)}
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        return framework.priority_for(labels, wpcs, pod_priority_class(job_set), {})

    async def _create_workload(self, job_set: Obj, queue: str) -> None:
        priority, error = self._priority(job_set)
        if error:
            await self._event(job_set, api.EVENT_WORKLOAD_PRIORITY_CLASS_NOT_FOUND, error, warning=True)
            return
        body = framework.new_workload(
            {**job_set, "apiVersion": api.JOB_SET.api_version, "kind": JOB_SET_KIND},
            workload_name(job_set),
            job_set_podsets(job_set),
            queue,
            priority=priority,
            label_keys_to_copy=self.config.label_keys_to_copy,
        )
        meta = body["metadata"]
        try:
            await self.kube.create(api.WORKLOAD, body, namespace=meta["namespace"])
        except Conflict:
            return  # already there; the informer has not seen it yet
        await self._event(
            job_set,
            api.EVENT_CREATED_WORKLOAD,
            api.created_workload_event_message(meta["namespace"], meta["name"]),
        )

    async def _release_orphans(self, key: str, live_uid: str | None) -> None:
        """Workloads of deleted JobSets named `key` (not of the live one): finished (OwnerNotFound,
        releasing their quota), then let go."""
        for wl in self.state.workloads.by_index(INDEX_JOB_SET_OWNER_KEY, key):
            if (controlling_job_set(wl) or {}).get("uid") == live_uid:
                continue
            await self._finish_orphan(wl)

    # -- Workload status -------------------------------------------------------------------------

    async def _sync_reclaimable_pods(self, job_set: Obj, wl: Obj) -> Obj:
        desired = reclaimable_pods(job_set)
        current = [
            {"name": r.get("name"), "count": int(r.get("count") or 0)}
            for r in (wl.get("status") or {}).get("reclaimablePods") or ()
        ]
        if sorted(desired, key=lambda r: r["name"]) == sorted(current, key=lambda r: r["name"] or ""):
            return wl
        return await self._apply_status(wl, {"reclaimablePods": desired}, api.FIELD_MANAGER_RECLAIMABLE_PODS)

    async def _sync_pods_ready(self, job_set: Obj, wl: Obj) -> Obj:
        wanted = pods_ready_condition(job_set, wl)
        previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
        if (
            previous is not None
            and (previous.get("status"), previous.get("reason"), previous.get("message")) == wanted
        ):
            return wl
        current = wlstatus.working_copy(wl)
        wlstatus.set_condition(current, api.WORKLOAD_PODS_READY, *wanted, self.agent.clock.now())
        condition = wlstatus.condition(current, api.WORKLOAD_PODS_READY)
        return await self._apply_status(wl, {"conditions": [condition]}, api.FIELD_MANAGER_PODS_READY)

    # -- starting and stopping the JobSet --------------------------------------------------------

    async def _start(self, job_set: Obj, wl: Obj) -> None:
        try:
            infos = framework.podset_infos(wl, self._flavors())
            started = started_job_set(job_set, infos)
        except framework.PodSetInfoConflict as exc:
            # Permanent: the JobSet can never start with this admission.
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
        if started is None:
            return
        try:
            written = await self.kube.replace(api.JOB_SET, started)
        except (Conflict, NotFound):
            return  # the JobSet's next event brings us back
        self._own_writes.wrote(object_key(job_set), job_set, written)
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        await self._event(job_set, api.EVENT_STARTED, api.started_event_message(cq))

    async def _stop(self, job_set: Obj, wl: Obj | None, message: str) -> None:
        """Suspend with the templates restored from the Workload, in one update."""
        stopped = stopped_job_set(job_set, wl)
        if stopped is None:
            return
        was_running = not is_suspended(job_set)
        written = await self.kube.replace(api.JOB_SET, stopped)  # a Conflict is retried with backoff
        self._own_writes.wrote(object_key(job_set), job_set, written)
        if was_running:
            await self._event(job_set, api.EVENT_STOPPED, message)

    async def _still_active(self, job_set: Obj) -> bool:
        """Active Jobs, read from the API: the cache may lag behind the stop just written."""
        if is_active(job_set):
            return True
        meta = job_set["metadata"]
        try:
            fresh = await self.kube.get(api.JOB_SET, meta["name"], namespace=meta["namespace"])
        except NotFound:
            return False
        return is_active(fresh) or not is_suspended(fresh)

    async def _event(self, job_set: Obj, reason: str, note: str, warning: bool = False) -> None:
        if self.recorder is None:
            return
        regarding = {**job_set, "apiVersion": api.JOB_SET.api_version, "kind": JOB_SET_KIND}
        if warning:
            await self.recorder.warning(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
        else:
            await self.recorder.normal(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
