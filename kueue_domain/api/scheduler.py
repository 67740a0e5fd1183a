"""The admission engine's requeue reasons and inadmissible messages, flavor assignment reasons, and
the workload controller's messages for queues, deactivation and PodsReady timeouts.

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line); other Kueue components and users' tooling match on them.
"""

from __future__ import annotations

# Requeue reasons (RequeueIfNotPresent). Internal to the queue manager, not written to the API.
REQUEUE_GENERIC = "Generic"
REQUEUE_NO_FIT = "NoFit"
REQUEUE_NAMESPACE_MISMATCH = "NamespaceMismatch"
REQUEUE_FAILED_AFTER_NOMINATION = "FailedAfterNomination"
REQUEUE_PENDING_PREEMPTION = "PendingPreemption"
REQUEUE_PENDING_MIGRATION = "PendingMigration"
REQUEUE_PREEMPTION_FAILED = "PreemptionFailed"
REQUEUE_PREEMPTION_NO_CANDIDATES = "PreemptionNoCandidates"

# BestEffortFIFO requeues these immediately; StrictFIFO everything but NamespaceMismatch.
IMMEDIATE_BEST_EFFORT_REASONS = frozenset(
    {
        REQUEUE_FAILED_AFTER_NOMINATION,
        REQUEUE_PENDING_PREEMPTION,
        REQUEUE_PENDING_MIGRATION,
        REQUEUE_PREEMPTION_FAILED,
    }
)

MSG_FAILED_ADMISSION_CHECKS = "The workload has failed admission checks"
MSG_NAMESPACE_MISMATCH = "workload namespace doesn't match ClusterQueue selector"
MSG_OVERLAPPING_PREEMPTION_TARGETS = "Workload has overlapping preemption targets with another workload"
MSG_NO_LONGER_FITS = "Workload no longer fits after processing another workload"
MSG_WAITING_FOR_PODS_READY = "waiting for all admitted workloads to be in PodsReady condition"
MSG_EQUIVALENT_WORKLOAD_FAILED = (
    "Bypassed scheduling evaluation because an equivalent workload recently failed"
)


def cluster_queue_inactive(cq: str) -> str:
    return f"ClusterQueue {cq} is inactive"


def cluster_queue_not_found(cq: str) -> str:
    return f"ClusterQueue {cq} not found"


def pending_preemption_suffix(count: int) -> str:
    """Appended to the assignment message when preemptions are issued."""
    return f". Pending the preemption of {count} workload(s)"


# --- flavor assignment reasons (joined per PodSet)


def couldnt_assign_flavors(podset: str, reasons: str) -> str:
    return f"couldn't assign flavors to pod set {podset}: {reasons}"


def insufficient_unused_quota(resource: str, flavor: str, more_needed: str) -> str:
    return f"insufficient unused quota for {resource} in flavor {flavor}, {more_needed} more needed"


def insufficient_quota(resource: str, flavor: str, previous: str, current: str, maximum: str) -> str:
    return (
        f"insufficient quota for {resource} in flavor {flavor}, previously considered podsets requests "
        f"({previous}) + current podset request ({current}) > maximum capacity ({maximum})"
    )


def untolerated_taint(taint: str, flavor: str) -> str:
    return f"untolerated taint {taint} in flavor {flavor}"


def flavor_doesnt_match_node_affinity(flavor: str) -> str:
    return f"flavor {flavor} doesn't match node affinity"


def flavor_not_found(flavor: str) -> str:
    return f"flavor {flavor} not found"


def resource_unavailable(resource: str) -> str:
    return f"resource {resource} unavailable in ClusterQueue"


# --- Workload controller messages for queues, deactivation and PodsReady timeouts


def lq_missing_message(name: str) -> str:
    return f"LocalQueue {name} doesn't exist"


def lq_inactive_message(name: str) -> str:
    return f"LocalQueue {name} is inactive"


def cq_missing_message(name: str) -> str:
    return f"ClusterQueue {name} doesn't exist"


def deactivated_message(cause_message: str = "") -> str:
    return "The workload is deactivated" + (f" due to {cause_message}" if cause_message else "")


def pods_ready_timeout_message(namespace: str, name: str) -> str:
    return f"Exceeded the PodsReady timeout {namespace}/{name}"
