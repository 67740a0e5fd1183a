"""Kueue's event reasons and the messages that go with them (on Workloads, jobs and pods), the job
reconciler's stop messages, and its field managers.

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line); other Kueue components and users' tooling match on them.
"""

from __future__ import annotations

from collections.abc import Iterable

from kueue_domain.api.conditions import (
    REASON_ADMISSION_GATED,
    REASON_MAXIMUM_EXECUTION_TIME_EXCEEDED,
    REASON_STARTED,
    REASON_SUSPENDED,
    WORKLOAD_ADMITTED,
    WORKLOAD_PREEMPTED,
    WORKLOAD_QUOTA_RESERVED,
)

# On Workloads.
EVENT_QUOTA_RESERVED = WORKLOAD_QUOTA_RESERVED
EVENT_ADMITTED = WORKLOAD_ADMITTED
EVENT_PREEMPTED = WORKLOAD_PREEMPTED
EVENT_PREEMPTED_WORKLOAD = "PreemptedWorkload"
EVENT_ADMISSION_CHECK_REJECTED = "AdmissionCheckRejected"
EVENT_MAXIMUM_EXECUTION_TIME_EXCEEDED = REASON_MAXIMUM_EXECUTION_TIME_EXCEEDED
EVENT_ADMISSION_GATED = REASON_ADMISSION_GATED
EVENT_ADMISSION_GATE_CLEARED = "AdmissionGateCleared"
EVENT_SECOND_PASS_FAILED = "SecondPassFailed"
EVENT_DELETED = "Deleted"  # retention (Workloads) and jobs
# Pending workloads: the Warning event reason equals the QuotaReserved=False reason.


def evicted_due_to_event(reason: str) -> str:
    """`EvictedDueTo<Reason>`, e.g. EvictedDueToPreempted."""
    return f"EvictedDueTo{reason}"


def quota_reserved_event_message(
    cluster_queue: str, wait_seconds: float, flavors_considered: str = ""
) -> str:
    """`Quota reserved in ClusterQueue X, wait time since queued was Ns[; Flavors considered: ...]`."""
    message = (
        f"Quota reserved in ClusterQueue {cluster_queue}, wait time since queued was {wait_seconds:.0f}s"
    )
    return f"{message}; Flavors considered: {flavors_considered}" if flavors_considered else message


def admitted_event_message(cluster_queue: str, wait_seconds: float) -> str:
    return f"Admitted by ClusterQueue {cluster_queue}, wait time since reservation was {wait_seconds:.0f}s"


def maximum_execution_time_exceeded_event_message(seconds: int) -> str:
    return f"The maximum execution time ({seconds}s) exceeded"


# On jobs.
EVENT_CREATED_WORKLOAD = "CreatedWorkload"
EVENT_STARTED = REASON_STARTED
EVENT_STOPPED = "Stopped"
EVENT_SUSPENDED = REASON_SUSPENDED
EVENT_DELETED_WORKLOAD = "DeletedWorkload"
EVENT_UPDATED_WORKLOAD = "UpdatedWorkload"
EVENT_FINISHED_WORKLOAD = "FinishedWorkload"
EVENT_ERR_WORKLOAD_COMPOSE = "ErrWorkloadCompose"
EVENT_UPDATED_ADMISSION_CHECK = "UpdatedAdmissionCheck"
EVENT_JOB_NESTING_TOO_DEEP = "JobNestingTooDeep"
EVENT_WORKLOAD_PRIORITY_CLASS_NOT_FOUND = "WorkloadPriorityClassNotFound"


def created_workload_event_message(namespace: str, name: str) -> str:
    return f"Created Workload: {namespace}/{name}"


def started_event_message(cluster_queue: str) -> str:
    return f"Admitted by clusterQueue {cluster_queue}"


def finished_workload_event_message(namespace: str, name: str) -> str:
    return f"Workload '{namespace}/{name}' is declared finished"


# On pods.
EVENT_EXCESS_POD_DELETED = "ExcessPodDeleted"
EVENT_OWNER_REFERENCES_ADDED = "OwnerReferencesAdded"
EVENT_WORKLOAD_NAME_CONFLICT = "WorkloadNameConflict"

# =============================================================================================
# Field managers

FIELD_MANAGER_ADMISSION = "kueue-admission"
FIELD_MANAGER_PODS_READY = "kueue-job-controller-PodsReady"
FIELD_MANAGER_JOB_FINISHED = "kueue-job-controller-Finished"  # a job integration's Finished=True
FIELD_MANAGER_RECLAIMABLE_PODS = "kueue-reclaimable-pods"

# =============================================================================================
# The job reconciler's event action and stop messages

# The action of every event the job integrations write (events.k8s.io/v1 requires one).
EVENT_ACTION_RECONCILE = "Reconcile"

# Stop messages (event `Stopped`) and Finished conditions written by the job reconciler.
MSG_WORKLOAD_DELETED = "Workload is deleted"
MSG_NOT_ADMITTED = "Not admitted by cluster queue"
MSG_MISSING_WORKLOAD = "Missing Workload; unable to restore pod templates"
MSG_NO_MATCHING_WORKLOAD = "No matching Workload; restoring pod templates according to existent Workload"
MSG_MISSING_PREBUILT_WORKLOAD = "missing workload"
MSG_PREBUILT_WORKLOAD_OUT_OF_SYNC = "The prebuilt workload is out of sync with its user job"
MSG_OWNER_NOT_FOUND = "The workload's owner no longer exists"
# ObjectRetentionPolicies: the events of the deletions (action "Deleted").
EVENT_ACTION_DELETED = "Deleted"
MSG_DELETED_FINISHED_WORKLOAD = "Deleted finished workload due to elapsed retention"
MSG_DELETED_DEACTIVATED_JOB = "Deleted job: deactivation retention period expired"
MSG_CHILD_JOB_SUSPENDED = "Kueue managed child job suspended"


def deleted_not_matching_workload_message(namespace: str, name: str) -> str:
    """Event `DeletedWorkload` on a job whose Workload no longer matches it."""
    return f"Deleted not matching Workload: {namespace}/{name}"


def updated_workload_priority_message(namespace: str, name: str) -> str:
    """Event `UpdatedWorkload`: the job's priority-class label changed and its Workload follows."""
    return f"Updated workload priority class: {namespace}/{name}"


def updated_not_matching_workload_message(namespace: str, name: str) -> str:
    """Event `UpdatedWorkload`: a suspended job's unreserved Workload rewritten to match the job."""
    return f"Updated not matching Workload for suspended job: {namespace}/{name}"


def pending_admission_checks_message(checks: Iterable[tuple[str, str]]) -> str:
    """Event `UpdatedAdmissionCheck`: `<check>: <message>` of every Pending check, `; `-joined."""
    return "; ".join(f"{name}: {message}" for name, message in checks)
