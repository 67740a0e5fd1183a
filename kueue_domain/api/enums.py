"""Enum values of Kueue's API specs and of its Configuration (config.kueue.x-k8s.io).

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line); other Kueue components and users' tooling match on them.
"""

from __future__ import annotations

QUEUEING_STRATEGY_STRICT_FIFO = "StrictFIFO"
QUEUEING_STRATEGY_BEST_EFFORT_FIFO = "BestEffortFIFO"

STOP_POLICY_NONE = "None"
STOP_POLICY_HOLD = "Hold"
STOP_POLICY_HOLD_AND_DRAIN = "HoldAndDrain"

PREEMPTION_NEVER = "Never"
PREEMPTION_LOWER_PRIORITY = "LowerPriority"
PREEMPTION_LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
PREEMPTION_ANY = "Any"

FLAVOR_FUNGIBILITY_MAY_STOP_SEARCH = "MayStopSearch"
FLAVOR_FUNGIBILITY_TRY_NEXT_FLAVOR = "TryNextFlavor"
FLAVOR_FUNGIBILITY_BORROW = "Borrow"  # deprecated v1beta1 value, means MayStopSearch
FLAVOR_FUNGIBILITY_PREEMPT = "Preempt"  # deprecated v1beta1 value, means MayStopSearch
FLAVOR_FUNGIBILITY_BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
FLAVOR_FUNGIBILITY_PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"

ADMISSION_MODE_USAGE_BASED_FAIR_SHARING = "UsageBasedAdmissionFairSharing"
ADMISSION_MODE_NO_FAIR_SHARING = "NoAdmissionFairSharing"

DELAYED_TOPOLOGY_REQUEST_PENDING = "Pending"
DELAYED_TOPOLOGY_REQUEST_READY = "Ready"

# Workload status.admissionChecks[].state
CHECK_STATE_PENDING = "Pending"
CHECK_STATE_READY = "Ready"
CHECK_STATE_RETRY = "Retry"
CHECK_STATE_REJECTED = "Rejected"

# MultiKueueCluster kubeConfig.locationType and MultiKueueConfig quotaManagement
LOCATION_TYPE_SECRET = "Secret"
LOCATION_TYPE_PATH = "Path"
QUOTA_MANAGEMENT_MANUAL = "Manual"
QUOTA_MANAGEMENT_AUTOMATED = "Automated"

# Configuration (config.kueue.x-k8s.io) enum values
FAIR_SHARING_LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
FAIR_SHARING_LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
REQUEUING_TIMESTAMP_EVICTION = "Eviction"
REQUEUING_TIMESTAMP_CREATION = "Creation"
RESOURCE_TRANSFORMATION_RETAIN = "Retain"
RESOURCE_TRANSFORMATION_REPLACE = "Replace"
QUOTA_CHECK_BLOCK_UNDECLARED = "BlockUndeclared"
QUOTA_CHECK_IGNORE_UNDECLARED = "IgnoreUndeclared"
# ClusterQueue spec.admissionScope.admissionMode (Admission Fair Sharing)
ADMISSION_MODE_USAGE_BASED = "UsageBasedAdmissionFairSharing"
ADMISSION_MODE_NONE = "NoAdmissionFairSharing"
DEFAULT_KUEUE_NAMESPACE = "kueue-system"
