"""Condition types, reasons and messages of ClusterQueues, LocalQueues and Workloads. Messages
with parameters are small functions, so callers cannot get the punctuation wrong.

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line); other Kueue components and users' tooling match on them.
"""

from __future__ import annotations

from collections.abc import Iterable

from kube_runtime.gofmt import go_quote
from kueue_domain.api.labels import UNKNOWN_JOB_UID

# ClusterQueue, LocalQueue, AdmissionCheck and MultiKueueCluster all report `Active`.
CONDITION_ACTIVE = "Active"

# =============================================================================================
# ClusterQueue `Active`

CQ_REASON_READY = "Ready"
CQ_REASON_TERMINATING = "Terminating"
CQ_REASON_STOPPED = "Stopped"
CQ_REASON_FLAVOR_NOT_FOUND = "FlavorNotFound"
CQ_REASON_ADMISSION_CHECK_NOT_FOUND = "AdmissionCheckNotFound"
CQ_REASON_ADMISSION_CHECK_INACTIVE = "AdmissionCheckInactive"
CQ_REASON_MULTIPLE_MULTIKUEUE_ADMISSION_CHECKS = "MultipleMultiKueueAdmissionChecks"
CQ_REASON_MULTIKUEUE_ADMISSION_CHECK_APPLIED_PER_FLAVOR = "MultiKueueAdmissionCheckAppliedPerFlavor"
CQ_REASON_MULTIKUEUE_WITH_PROVISIONING_REQUEST = "MultiKueueWithProvisioningRequest"
CQ_REASON_TOPOLOGY_NOT_FOUND = "TopologyNotFound"
CQ_REASON_UNKNOWN = "Unknown"
# When several hold, the reason is the first of this list that applies.
CQ_INACTIVE_REASONS_IN_ORDER = (
    CQ_REASON_STOPPED,
    CQ_REASON_FLAVOR_NOT_FOUND,
    CQ_REASON_ADMISSION_CHECK_NOT_FOUND,
    CQ_REASON_ADMISSION_CHECK_INACTIVE,
    CQ_REASON_MULTIPLE_MULTIKUEUE_ADMISSION_CHECKS,
    CQ_REASON_MULTIKUEUE_ADMISSION_CHECK_APPLIED_PER_FLAVOR,
    CQ_REASON_MULTIKUEUE_WITH_PROVISIONING_REQUEST,
    CQ_REASON_TOPOLOGY_NOT_FOUND,
)

CQ_MSG_READY = "Can admit new workloads"
CQ_MSG_TERMINATING = "Can't admit new workloads; clusterQueue is terminating"
CQ_CLAUSE_STOPPED = "is stopped"


def cq_inactive_message(clauses: Iterable[str]) -> str:
    """`Can't admit new workloads: <a, b>.` with every applicable clause."""
    return "Can't admit new workloads: " + ", ".join(clauses) + "."


def cq_clause_missing_flavors(names: Iterable[str]) -> str:
    return "references missing ResourceFlavor(s): " + ",".join(names)


def cq_clause_missing_admission_checks(names: Iterable[str]) -> str:
    return "references missing AdmissionCheck(s): " + ",".join(names)


def cq_clause_inactive_admission_checks(names: Iterable[str]) -> str:
    return "references inactive AdmissionCheck(s): " + ",".join(names)


def cq_clause_multiple_multikueue_checks(names: Iterable[str]) -> str:
    return "Cannot use multiple MultiKueue AdmissionChecks on the same ClusterQueue, found: " + ",".join(
        names
    )


def cq_clause_multikueue_check_per_flavor(names: Iterable[str]) -> str:
    return "Cannot specify MultiKueue AdmissionCheck per flavor, found: " + ",".join(names)


def cq_clause_multikueue_with_provisioning_request(multikueue_check: str, provisioning_check: str) -> str:
    return (
        "Cannot use both MultiKueue and ProvisioningRequest AdmissionChecks together, found: "
        f"{multikueue_check}, {provisioning_check}"
    )


# =============================================================================================
# LocalQueue `Active`

LQ_REASON_READY = "Ready"
LQ_REASON_STOPPED = "Stopped"
LQ_REASON_CLUSTER_QUEUE_IS_INACTIVE = "ClusterQueueIsInactive"
LQ_REASON_CLUSTER_QUEUE_DOES_NOT_EXIST = "ClusterQueueDoesNotExist"

LQ_MSG_READY = "Can submit new workloads to localQueue"
LQ_MSG_STOPPED = "LocalQueue is stopped"
LQ_MSG_CLUSTER_QUEUE_INACTIVE = "Can't submit new workloads to clusterQueue"  # also when it does not exist

# =============================================================================================
# Workload condition types

WORKLOAD_QUOTA_RESERVED = "QuotaReserved"
WORKLOAD_ADMITTED = "Admitted"
WORKLOAD_EVICTED = "Evicted"
WORKLOAD_PREEMPTED = "Preempted"
WORKLOAD_REQUEUED = "Requeued"
WORKLOAD_PODS_READY = "PodsReady"
WORKLOAD_FINISHED = "Finished"
WORKLOAD_DEACTIVATION_TARGET = "DeactivationTarget"
WORKLOAD_WAITING_FOR_REPLACEMENT_PODS = "WaitingForReplacementPods"
WORKLOAD_BLOCKED_ON_PREEMPTION_GATES = "BlockedOnPreemptionGates"

# The conditions the `kueue-admission` status apply carries.
ADMISSION_STATUS_CONDITION_TYPES = (
    WORKLOAD_QUOTA_RESERVED,
    WORKLOAD_BLOCKED_ON_PREEMPTION_GATES,
    WORKLOAD_EVICTED,
    WORKLOAD_ADMITTED,
    WORKLOAD_PREEMPTED,
    WORKLOAD_REQUEUED,
    WORKLOAD_DEACTIVATION_TARGET,
    WORKLOAD_FINISHED,
    WORKLOAD_PODS_READY,
)

# --- QuotaReserved
REASON_QUOTA_RESERVED = WORKLOAD_QUOTA_RESERVED
REASON_PENDING_EVALUATION = "PendingEvaluation"
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_NO_MATCHING_FLAVOR = "NoMatchingFlavor"
REASON_EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
REASON_TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
REASON_WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
REASON_MISCONFIGURED = "Misconfigured"
REASON_SUSPENDED = "Suspended"
REASON_WAITING_FOR_PODS_READY = "WaitingForPodsReady"
REASON_ADMISSION_GATED = "AdmissionGated"
REASON_DEACTIVATED = "Deactivated"  # also an Evicted and Requeued reason
REASON_ON_HOLD = "OnHold"
MSG_STATEFUL_SET_ON_HOLD = "StatefulSet scaled to zero; workload on hold"
MSG_NO_LONGER_ON_HOLD = "Workload no longer on hold; waiting for quota reservation"
# Legacy False reasons (UnadmittedWorkloadsObservability off).
REASON_PENDING = "Pending"
# The workload controller's QuotaReserved=False message for a workload parked because an equivalent
# one failed to schedule (SchedulingEquivalenceHashing); the reason is that requeue reason.
MSG_BYPASSED_SCHEDULING = "Bypassed scheduling evaluation because an equivalent workload recently failed"
REASON_WAITING = "Waiting"
REASON_INADMISSIBLE = "Inadmissible"


def quota_reserved_message(cluster_queue: str) -> str:
    return f"Quota reserved in ClusterQueue {cluster_queue}"


def previously_message(old_message: str) -> str:
    """Evicted/Preempted/BlockedOnPreemptionGates set False with reason QuotaReserved on re-reservation."""
    return f"Previously: {old_message}"


# --- Admitted
REASON_ADMITTED = WORKLOAD_ADMITTED
REASON_NO_RESERVATION = "NoReservation"
REASON_UNSATISFIED_ADMISSION_CHECKS = "UnsatisfiedAdmissionChecks"
REASON_PENDING_DELAYED_TOPOLOGY_REQUESTS = "PendingDelayedTopologyRequests"
REASON_NO_RESERVATION_UNSATISFIED_CHECKS = "NoReservationUnsatisfiedChecks"  # legacy
REASON_UNSATISFIED_CHECKS = "UnsatisfiedChecks"  # legacy
MSG_ADMITTED = "The workload is admitted"
MSG_NO_RESERVATION = "The workload has no reservation"
MSG_UNSATISFIED_ADMISSION_CHECKS = "The workload has not all checks ready"

# --- Evicted (and the Requeued=False reasons that copy them)
REASON_PREEMPTED = WORKLOAD_PREEMPTED
REASON_PODS_READY_TIMEOUT = "PodsReadyTimeout"
REASON_ADMISSION_CHECK = "AdmissionCheck"
REASON_CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
REASON_LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
REASON_NODE_FAILURES = "NodeFailures"
REASON_FLAVOR_MIGRATION = "FlavorMigration"
REASON_EVICTED_ON_MANAGER_CLUSTER = "EvictedOnManagerCluster"


def deactivated_due_to(cause: str) -> str:
    """Evicted reason after a DeactivationTarget: `DeactivatedDueTo<Cause>`."""
    return f"{REASON_DEACTIVATED}DueTo{cause}"


# Evicted reasons of a Workload Kueue deactivated (IsEvictedDueToDeactivationByKueue).
REASON_DEACTIVATED_DUE_TO_PREFIX = deactivated_due_to("")


def reset_to_pending_after_eviction_message(previous_state: str) -> str:
    """Admission check state message on eviction (previous state unquoted)."""
    return f"Reset to Pending after eviction. Previously: {previous_state}"


def _checks_with_messages(checks: Iterable[tuple[str, str]]) -> tuple[str, str]:
    items = list(checks)
    suffix = "s" if len(items) > 1 else ""
    return suffix, "; ".join(f"{go_quote(name)} ({message})" for name, message in items)


def evicted_due_to_admission_check_retry_message(checks: Iterable[tuple[str, str]]) -> str:
    """`Evicted due to AdmissionCheck in Retry state: "<ac>" (<msg>)`; plural and `; `-joined for several."""
    suffix, joined = _checks_with_messages(checks)
    return f"Evicted due to AdmissionCheck{suffix} in Retry state: {joined}"


def admission_check_rejected_message(checks: Iterable[tuple[str, str]]) -> str:
    """`AdmissionCheck in Rejected state: "<ac>" (<msg>)`; plural and `; `-joined for several."""
    suffix, joined = _checks_with_messages(checks)
    return f"AdmissionCheck{suffix} in Rejected state: {joined}"


# --- Preempted
REASON_IN_CLUSTER_QUEUE = "InClusterQueue"
REASON_IN_COHORT_RECLAMATION = "InCohortReclamation"
REASON_IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
REASON_IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
PREEMPTION_HUMAN_REASONS = {
    REASON_IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    REASON_IN_COHORT_RECLAMATION: "reclamation within the cohort",
    REASON_IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    REASON_IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}


def preempted_message(
    preemptor_uid: str, preemptor_job_uid: str, reason: str, preemptor_path: str, preemptee_path: str
) -> str:
    """Preempted (and Evicted) message; paths are `/<root cohort>/.../<cq>`; reason is a Preempted reason."""
    job_uid = preemptor_job_uid or UNKNOWN_JOB_UID
    return (
        f"Preempted to accommodate a workload (UID: {preemptor_uid}, JobUID: {job_uid}) due to "
        f"{PREEMPTION_HUMAN_REASONS[reason]}; preemptor path: {preemptor_path}; "
        f"preemptee path: {preemptee_path}"
    )


# --- Requeued
REASON_BACKOFF_FINISHED = "BackoffFinished"
REASON_REACTIVATED = "Reactivated"
REASON_CLUSTER_QUEUE_RESTARTED = "ClusterQueueRestarted"
REASON_LOCAL_QUEUE_RESTARTED = "LocalQueueRestarted"
MSG_BACKOFF_FINISHED = "The workload backoff was finished"
MSG_REACTIVATED = "The workload was reactivated"

# --- PodsReady
REASON_STARTED = "Started"
REASON_RECOVERED = "Recovered"
REASON_WAIT_FOR_START = "WaitForStart"
REASON_WAIT_FOR_RECOVERY = "WaitForRecovery"
REASON_PODS_READY = WORKLOAD_PODS_READY  # legacy, treated like WaitForStart
MSG_PODS_READY = "All pods reached readiness and the workload is running"
MSG_WAIT_FOR_START = "Not all pods are ready or succeeded"
MSG_WAIT_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"

# --- Finished
REASON_SUCCEEDED = "Succeeded"
REASON_FAILED = "Failed"
REASON_OUT_OF_SYNC = "OutOfSync"
REASON_OWNER_NOT_FOUND = "OwnerNotFound"
REASON_FAILED_TO_START = "FailedToStart"
REASON_WORKLOAD_SLICE_REPLACED = "WorkloadSliceReplaced"

# --- DeactivationTarget
REASON_REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
REASON_MAXIMUM_EXECUTION_TIME_EXCEEDED = "MaximumExecutionTimeExceeded"
MSG_REQUEUING_LIMIT_EXCEEDED = "exceeding the maximum number of re-queuing retries"
MSG_MAXIMUM_EXECUTION_TIME_EXCEEDED = "exceeding the maximum execution time"
# REASON_ADMISSION_CHECK with admission_check_rejected_message(...)

# --- WaitingForReplacementPods
REASON_PODS_FAILED = "PodsFailed"
MSG_PODS_FAILED = "Some Failed pods need replacement"
MSG_NO_PODS_NEED_REPLACEMENT = "No pods need replacement"  # False, reason REASON_PODS_READY

# --- BlockedOnPreemptionGates
REASON_PREEMPTION_GATED = "PreemptionGated"


# --- Stop policies and missing queues
def cluster_queue_stopped_message(cluster_queue: str) -> str:
    """QuotaReserved=False/Suspended for a reserving, unadmitted workload of a stopped CQ."""
    return f"ClusterQueue {cluster_queue} is stopped"


def local_queue_stopped_message(local_queue: str) -> str:
    return f"LocalQueue {local_queue} is stopped"


MSG_CLUSTER_QUEUE_STOPPED = "The ClusterQueue is stopped"  # Evicted/ClusterQueueStopped (HoldAndDrain)
MSG_LOCAL_QUEUE_STOPPED = "The LocalQueue is stopped"


def local_queue_missing_message(local_queue: str) -> str:
    return f"LocalQueue {local_queue} is terminating or missing"


def cluster_queue_missing_message(cluster_queue: str) -> str:
    return f"ClusterQueue {cluster_queue} is terminating or missing"
