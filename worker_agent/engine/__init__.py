"""Pure admission engine: snapshot, request computation, quota math, flavor assignment, queue
ordering, preemption and fair sharing. No I/O, no asyncio, no Kubernetes client imports."""

from .fairsharing import Share, dominant_resource_share
from .flavorassigner import Assignment, FlavorAssigner, Mode, PreemptionMode, assign_flavors
from .ordering import (
    REQUEUE_BATCH_SECONDS,
    REQUEUE_LONG_BATCH_SECONDS,
    ClusterQueuePending,
    QueueManager,
    RequeueBatcher,
    queue_order_key,
    requeue_scope,
)
from .preemption import Preemptor, Target, policy_allows
from .requests import (
    LimitRangeDefaults,
    PodSetRequests,
    pod_requests,
    podset_requests,
)
from .scheduler import Admit, CycleResult, Preempt, Requeue, Scheduler, SchedulerConfig, run_until_idle
from .snapshot import (
    ClusterQueue,
    Cohort,
    ResourceFlavor,
    Snapshot,
    available,
    borrowing_level,
    potential_available,
)
from .workloads import Admission, PodSetAssignment, WorkloadInfo

__all__ = [
    "REQUEUE_BATCH_SECONDS",
    "REQUEUE_LONG_BATCH_SECONDS",
    "Admission",
    "Admit",
    "Assignment",
    "ClusterQueue",
    "ClusterQueuePending",
    "Cohort",
    "CycleResult",
    "FlavorAssigner",
    "LimitRangeDefaults",
    "Mode",
    "PodSetAssignment",
    "PodSetRequests",
    "Preempt",
    "PreemptionMode",
    "Preemptor",
    "QueueManager",
    "Requeue",
    "RequeueBatcher",
    "ResourceFlavor",
    "Scheduler",
    "SchedulerConfig",
    "Share",
    "Snapshot",
    "Target",
    "WorkloadInfo",
    "assign_flavors",
    "available",
    "borrowing_level",
    "dominant_resource_share",
    "pod_requests",
    "podset_requests",
    "policy_allows",
    "potential_available",
    "queue_order_key",
    "requeue_scope",
    "run_until_idle",
]
