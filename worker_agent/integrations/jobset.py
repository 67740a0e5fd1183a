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

import copy
from collections.abc import Mapping
from typing import Any

import structlog

from kube_runtime.client import Conflict, NotFound
from kube_runtime.informer import object_key
from kueue_domain import api, naming
from worker_agent.integrations import framework, jobframework

log = structlog.get_logger("worker_agent.jobset")

Obj = dict[str, Any]
JOB_SET_KIND = api.JOB_SET.kind
JOB_SET_GROUP = api.JOB_SET.group


# ------------------------------------------------------------------------------------------------
# Pure parts: reading a JobSet


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


def replicated_jobs_podsets(rjobs: list[Obj]) -> list[Obj]:
    """One PodSet per replicated Job, in order: its name, its pod count, its Job's pod template."""
    return [
        {
            "name": rj.get("name", ""),
            "count": pods_count(rj),
            "template": framework.template_for_podset(job_spec(rj).get("template")),
        }
        for rj in rjobs
    ]


def job_set_podsets(job_set: Obj) -> list[Obj]:
    return replicated_jobs_podsets(replicated_jobs(job_set))


def is_suspended(job_set: Obj) -> bool:
    return (job_set.get("spec") or {}).get("suspend") is True


def is_active(job_set: Obj) -> bool:
    """A Job of the JobSet has active pods (ReplicatedJobsStatus[].active)."""
    return any(
        int(s.get("active") or 0) > 0 for s in (job_set.get("status") or {}).get("replicatedJobsStatus") or ()
    )


def finished(job_set: Obj) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the JobSet's `Completed`, then `Failed`, condition."""
    return jobframework.condition_finished(
        job_set, api.JOB_SET_CONDITION_COMPLETED, api.JOB_SET_CONDITION_FAILED
    )


def replicated_jobs_ready(rjobs: list[Obj], statuses: list[Obj]) -> bool:
    """Every replicated Job is ready or succeeded: the sum of replicas equals the sum of the
    statuses' ready + succeeded Jobs."""
    wanted = sum(replicas(rj) for rj in rjobs)
    return wanted == sum(int(s.get("ready") or 0) + int(s.get("succeeded") or 0) for s in statuses)


def replicated_jobs_reclaimable(rjobs: list[Obj], statuses: list[Obj]) -> list[Obj]:
    """Per replicated Job with 0 < succeeded Jobs <= replicas: succeeded x pods per replica."""
    by_name = {s.get("name"): s for s in statuses}
    if not by_name:
        return []
    result = []
    for rj in rjobs:
        status = by_name.get(rj.get("name"))
        succeeded = int((status or {}).get("succeeded") or 0)
        if status is not None and 0 < succeeded <= replicas(rj):
            result.append({"name": rj.get("name", ""), "count": succeeded * pods_count_per_replica(rj)})
    return result


def _statuses(job_set: Obj) -> list[Obj]:
    return list((job_set.get("status") or {}).get("replicatedJobsStatus") or ())


def pods_ready(job_set: Obj) -> bool:
    return replicated_jobs_ready(replicated_jobs(job_set), _statuses(job_set))


def reclaimable_pods(job_set: Obj) -> list[Obj]:
    return replicated_jobs_reclaimable(replicated_jobs(job_set), _statuses(job_set))


def managed_by(job_set: Obj) -> str:
    return (job_set.get("spec") or {}).get("managedBy") or api.JOB_SET_MANAGED_BY_DEFAULT


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
    """Does the Workload describe this JobSet? (As for Jobs, and the PodSets' names too.)"""
    max_exec = jobframework.max_execution_seconds(job_set)
    return jobframework.workload_matches(
        job_set_podsets(job_set), is_suspended(job_set), max_exec, wl, flavors
    )


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
    return jobframework.controlling_owner(api.JOB_SET, wl)


class JobSetIntegration(jobframework.JobReconciler):
    """The Jobs of a managed JobSet are left to its Workload (`manages_child`, asked by the batch/v1
    Job integration)."""

    name = api.FRAMEWORK_JOB_SET
    resource = api.JOB_SET
    index_prefix = "jobSet"
    managed_by_default = api.JOB_SET_MANAGED_BY_DEFAULT

    podsets = staticmethod(job_set_podsets)
    is_active = staticmethod(is_active)
    finished = staticmethod(finished)
    pods_ready = staticmethod(pods_ready)

    def reclaimable_pods(self, job_set: Obj, wl: Obj) -> list[Obj]:
        return reclaimable_pods(job_set)

    def pod_priority_class(self, job_set: Obj, podsets: list[Obj]) -> str | None:
        return pod_priority_class(job_set)

    async def run(self, job_set: Obj, wl: Obj, infos: Mapping[str, Obj]) -> bool:
        started = started_job_set(job_set, infos)
        if started is None:
            return False
        try:
            written = await self.kube.replace(api.JOB_SET, started)
        except (Conflict, NotFound):
            return False  # the JobSet's next event brings us back
        self._own_writes.wrote(object_key(job_set), job_set, written)
        return True

    async def stop(self, job_set: Obj, wl: Obj | None, message: str) -> bool:
        """Suspend with the templates restored from the Workload, in one update."""
        stopped = stopped_job_set(job_set, wl)
        if stopped is None:
            return True
        was_running = not is_suspended(job_set)
        written = await self.kube.replace(api.JOB_SET, stopped)  # a Conflict is retried with backoff
        self._own_writes.wrote(object_key(job_set), job_set, written)
        if was_running:
            await self._event(job_set, api.EVENT_STOPPED, message)
        return True
