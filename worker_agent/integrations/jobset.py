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

from collections.abc import Mapping
from typing import Any

import structlog

from kueue_domain import api, naming
from worker_agent.integrations import framework, jobframework
from worker_agent.integrations.jobframework import templated

log = structlog.get_logger("worker_agent.jobset")

Obj = dict[str, Any]
JOB_SET_KIND = api.JOB_SET.kind
JOB_SET_GROUP = api.JOB_SET.group
SUSPEND = ("spec", "suspend")


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


def pod_templates(job_set: Obj) -> list[tuple[str, Obj]]:
    """Each replicatedJob's pod template, by the replicatedJob's name (its PodSet's)."""
    return [(rj.get("name", ""), _pod_template(rj)) for rj in replicated_jobs(job_set)]


def started_job_set(job_set: Obj, infos: Mapping[str, Obj]) -> Obj | None:
    """RunWithPodSetsInfo: the JobSet unsuspended with each replicatedJob's podset info merged into
    its pod template. None when it is not suspended. Raises PodSetInfoConflict on a conflicting key
    or when the admission has no info for a replicatedJob."""
    return templated.started_object(job_set, pod_templates, infos, SUSPEND)


def stopped_job_set(job_set: Obj, wl: Obj | None) -> Obj | None:
    """Suspend and RestorePodSetsInfo in one (templated.stopped_object). None when there is nothing
    to change."""
    return templated.stopped_object(job_set, pod_templates, wl, SUSPEND)


# ------------------------------------------------------------------------------------------------
# The integration


def controlling_job_set(wl: Obj) -> Obj | None:
    """The Workload's controller owner reference when it is a JobSet."""
    return jobframework.controlling_owner(api.JOB_SET, wl)


class JobSetIntegration(templated.TemplatedReconciler):
    """The Jobs of a managed JobSet are left to its Workload (`manages_child`, asked by the batch/v1
    Job integration)."""

    name = api.FRAMEWORK_JOB_SET
    resource = api.JOB_SET
    index_prefix = "jobSet"
    managed_by_default = api.JOB_SET_MANAGED_BY_DEFAULT

    podsets = staticmethod(job_set_podsets)
    pod_templates = staticmethod(pod_templates)
    is_active = staticmethod(is_active)
    finished = staticmethod(finished)
    pods_ready = staticmethod(pods_ready)

    def reclaimable_pods(self, job_set: Obj, wl: Obj) -> list[Obj]:
        return reclaimable_pods(job_set)

    def pod_priority_class(self, job_set: Obj, podsets: list[Obj]) -> str | None:
        return pod_priority_class(job_set)
