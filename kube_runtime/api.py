"""Every upstream API string, defined once: resources, labels, annotations, finalizers, gates,
condition types, reasons, messages, event reasons, field managers, metric names and constants.

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line: its API types, its admission engine's and MultiKueue's conditions, reasons and messages): other
Kueue components and users' tooling match on them. Messages with parameters are small functions, so
callers cannot get the punctuation wrong.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# =============================================================================================
# Groups, versions, resources

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
CORE_GROUP = ""


@dataclass(frozen=True)
class Resource:
    """One REST resource: enough to build its URLs and name its kind."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """`v1` for the core group, `group/version` otherwise (the objects' apiVersion)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gvk(self) -> str:
        """Go's `GroupVersionKind.String()`: `batch/v1, Kind=Job`; core renders as `/v1, Kind=Pod`."""
        return f"{self.group}/{self.version}, Kind={self.kind}"

    @property
    def group_prefix(self) -> str:
        """`/api/v1` for the core group, `/apis/<group>/<version>` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def api_path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """URL path of a collection or one object; a namespaced collection without a namespace spans all."""
        parts = [self.group_prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.kind} {name!r} is namespaced: a namespace is required")
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError(f"{self.kind}: empty name")
            parts.append(name)
            if subresource:
                parts.append(subresource)
        elif subresource:
            raise ValueError(f"{self.kind}: a subresource needs an object name")
        return "/".join(parts)


def parse_api_path(path: str) -> tuple[str, str, str]:
    """(group/version, resource, subresource) of a request path, the inverse of `api_path`:
    `/apis/kueue.x-k8s.io/v1beta1/namespaces/n/workloads/w/status` gives
    ("kueue.x-k8s.io/v1beta1", "workloads", "status"), `/api/v1/namespaces/n` ("v1", "namespaces", "").
    Other paths (discovery, /version) give their first two segments as the group/version."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        group_version, rest = parts[1:2], parts[2:]
    elif parts[0] == "apis":
        group_version, rest = parts[1:3], parts[3:]
    else:
        return "/".join(parts[:2]), "", ""
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]  # namespaces/<ns>/<resource>...
    resource = rest[0] if rest else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return "/".join(group_version), resource, subresource


# Kueue kinds (served as v1beta1).
RESOURCE_FLAVOR = Resource(GROUP, VERSION, "resourceflavors", "ResourceFlavor", False)
CLUSTER_QUEUE = Resource(GROUP, VERSION, "clusterqueues", "ClusterQueue", False)
LOCAL_QUEUE = Resource(GROUP, VERSION, "localqueues", "LocalQueue", True)
COHORT = Resource(GROUP, VERSION, "cohorts", "Cohort", False)
WORKLOAD = Resource(GROUP, VERSION, "workloads", "Workload", True)
WORKLOAD_PRIORITY_CLASS = Resource(GROUP, VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", False)
ADMISSION_CHECK = Resource(GROUP, VERSION, "admissionchecks", "AdmissionCheck", False)
MULTIKUEUE_CONFIG = Resource(GROUP, VERSION, "multikueueconfigs", "MultiKueueConfig", False)
MULTIKUEUE_CLUSTER = Resource(GROUP, VERSION, "multikueueclusters", "MultiKueueCluster", False)
# MultiKueueConfig read as v1beta2, the only version with `spec.quotaManagement` (v1beta1 drops it).
MULTIKUEUE_CONFIG_V1BETA2 = Resource(GROUP, "v1beta2", "multikueueconfigs", "MultiKueueConfig", False)

# Kinds owned by others that we read or write.
POD = Resource(CORE_GROUP, "v1", "pods", "Pod", True)
NAMESPACE = Resource(CORE_GROUP, "v1", "namespaces", "Namespace", False)
SECRET = Resource(CORE_GROUP, "v1", "secrets", "Secret", True)
CONFIG_MAP = Resource(CORE_GROUP, "v1", "configmaps", "ConfigMap", True)
NODE = Resource(CORE_GROUP, "v1", "nodes", "Node", False)
LIMIT_RANGE = Resource(CORE_GROUP, "v1", "limitranges", "LimitRange", True)
EVENT = Resource("events.k8s.io", "v1", "events", "Event", True)
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
JOB = Resource("batch", "v1", "jobs", "Job", True)
STATEFUL_SET = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment", True)
LEADER_WORKER_SET = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True)
JOB_SET = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True)
# Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2 pkg/apis/trainer/v1alpha1).
TRAIN_JOB = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", True)
TRAINING_RUNTIME = Resource("trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime", True)
CLUSTER_TRAINING_RUNTIME = Resource(
    "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", False
)
RUNTIME_CLASS = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
PRIORITY_CLASS = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
CLUSTER_PROFILE = Resource("multicluster.x-k8s.io", "v1alpha1", "clusterprofiles", "ClusterProfile", True)

KUEUE_RESOURCES = (
    RESOURCE_FLAVOR,
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    COHORT,
    WORKLOAD,
    WORKLOAD_PRIORITY_CLASS,
    ADMISSION_CHECK,
    MULTIKUEUE_CONFIG,
    MULTIKUEUE_CLUSTER,
)

# Names of our CustomResourceDefinitions (`<plural>.<group>`); they convert through the agent's
# /convert webhook.
CUSTOM_RESOURCE_DEFINITION = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
KUEUE_CRD_NAMES = tuple(f"{r.plural}.{r.group}" for r in KUEUE_RESOURCES)

# =============================================================================================
# Go formatting helpers (messages embed Go's %q and %v renderings)

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's `%q` / strconv.Quote: double quotes, backslash escapes, non-printables as \\x, \\u, \\U."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_list(items: Iterable[str]) -> str:
    """Go's `%v` of a []string: `[a b]`."""
    return "[" + " ".join(items) + "]"


# =============================================================================================
# Condition status values and shared condition types

CONDITION_TRUE = "True"
CONDITION_FALSE = "False"
CONDITION_UNKNOWN = "Unknown"

# ClusterQueue, LocalQueue, AdmissionCheck and MultiKueueCluster all report `Active`.
CONDITION_ACTIVE = "Active"

# Truncation limits (pkg/util/api); truncation appends TRUNCATION_SUFFIX.
EVENT_MESSAGE_LIMIT_BYTES = 1024
CONDITION_MESSAGE_LIMIT_BYTES = 32768
TRUNCATION_SUFFIX = " ..."

# =============================================================================================
# Labels and annotations

LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
LABEL_MAX_EXEC_TIME_SECONDS = "kueue.x-k8s.io/max-exec-time-seconds"
# Written as an annotation (WorkloadIdentifierAnnotations, default) and read from the label too.
LABEL_PREBUILT_WORKLOAD_NAME = "kueue.x-k8s.io/prebuilt-workload-name"
ANNOTATION_PREBUILT_WORKLOAD_NAME = LABEL_PREBUILT_WORKLOAD_NAME
LABEL_JOB_UID = "kueue.x-k8s.io/job-uid"
ANNOTATION_ADMISSION_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
ANNOTATION_ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"
ANNOTATION_WORKLOAD_SLICE_REPLACEMENT_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
ANNOTATION_JOB_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM = "kueue.x-k8s.io/job-completions-equal-parallelism"
ANNOTATION_STOPPING = "kueue.x-k8s.io/stopping"
ANNOTATION_PRIORITY_BOOST = "kueue.x-k8s.io/priority-boost"
LABEL_MANAGED = "kueue.x-k8s.io/managed"
LABEL_PODSET = "kueue.x-k8s.io/podset"
LABEL_LOCAL_QUEUE_NAME = "kueue.x-k8s.io/local-queue-name"
LABEL_CLUSTER_QUEUE_NAME = "kueue.x-k8s.io/cluster-queue-name"
# Annotation by default, label when WorkloadIdentifierAnnotations is off; readers accept both.
ANNOTATION_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
LABEL_POD_GROUP_NAME = ANNOTATION_POD_GROUP_NAME
ANNOTATION_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ANNOTATION_POD_GROUP_FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
ANNOTATION_POD_GROUP_SERVING = "kueue.x-k8s.io/pod-group-serving"
ANNOTATION_ROLE_HASH = "kueue.x-k8s.io/role-hash"
ANNOTATION_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"
ANNOTATION_IS_GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
ANNOTATION_POD_SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
ANNOTATION_JOB_OWNER_GVK = "kueue.x-k8s.io/job-owner-gvk"
ANNOTATION_JOB_OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
ANNOTATION_COMPONENT_WORKLOAD_INDEX = "kueue.x-k8s.io/component-workload-index"
ANNOTATION_WORKLOAD = "kueue.x-k8s.io/workload"  # TAS: the Workload name on pods
ANNOTATION_POD_INDEX_OFFSET = "kueue.x-k8s.io/pod-index-offset"
ANNOTATION_POD_GROUP_POD_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index-label"
LABEL_POD_GROUP_POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
ANNOTATION_PROVREQ_PREFIX = "provreq.kueue.x-k8s.io/"  # job annotations copied onto the Workload

# Values of the keys above.
VALUE_TRUE = "true"
VALUE_FALSE = "false"
ROLE_LEADER = "leader"
ROLE_WORKER = "worker"
ROLE_MAIN = "main"
DEFAULT_PODSET_NAME = ROLE_MAIN
POD_INDEX_OFFSET_WITH_LEADER = "1"
DEFAULT_NAME = "default"  # the default LocalQueue of a namespace and the default WorkloadPriorityClass
UNKNOWN_JOB_UID = "UNKNOWN"

# LeaderWorkerSet's own keys (set by the LWS controller, read by us).
LWS_KEY_PREFIX = "leaderworkerset.sigs.k8s.io"
LWS_LABEL_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_ANNOTATION_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"

# Go GroupVersionKind strings written into ANNOTATION_JOB_OWNER_GVK and used as adapter keys.
JOB_OWNER_GVK_LEADER_WORKER_SET = "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet"
JOB_OWNER_GVK_STATEFUL_SET = "apps/v1, Kind=StatefulSet"

# Integration (framework) names: Configuration.integrations.frameworks and the suspending-parent value.
FRAMEWORK_BATCH_JOB = "batch/job"
FRAMEWORK_POD = "pod"
FRAMEWORK_DEPLOYMENT = "deployment"
FRAMEWORK_STATEFULSET = "statefulset"
FRAMEWORK_LEADER_WORKER_SET = "leaderworkerset.x-k8s.io/leaderworkerset"
POD_SUSPENDING_PARENT_LEADER_WORKER_SET = FRAMEWORK_LEADER_WORKER_SET
FRAMEWORK_JOB_SET = "jobset.x-k8s.io/jobset"

# JobSet (sigs.k8s.io/jobset api/jobset/v1alpha2): its controller's managedBy value, condition types.
JOB_SET_MANAGED_BY_DEFAULT = "jobset.sigs.k8s.io/jobset-controller"
JOB_SET_CONDITION_COMPLETED = "Completed"
JOB_SET_CONDITION_FAILED = "Failed"
JOB_SET_LABEL_NAME = "jobset.sigs.k8s.io/jobset-name"
FRAMEWORK_TRAIN_JOB = "trainer.kubeflow.org/trainjob"

# TrainJob (Kubeflow Trainer v2): its controller's managedBy value, condition types, the label naming a
# runtime's replicated Job's role and the trainer container's name (pkg/constants), and the manager
# name of the runtime patch Kueue writes podset info into (upstream's runtimePatchManagerName).
TRAIN_JOB_MANAGED_BY_DEFAULT = "trainer.kubeflow.org/trainjob-controller"
TRAIN_JOB_CONDITION_COMPLETE = "Complete"
TRAIN_JOB_CONDITION_FAILED = "Failed"
TRAIN_JOB_LABEL_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAIN_JOB_ANCESTOR_TRAINER = "trainer"
TRAIN_JOB_ANCESTOR_DATASET_INITIALIZER = "dataset-initializer"
TRAIN_JOB_ANCESTOR_MODEL_INITIALIZER = "model-initializer"
TRAIN_JOB_CONTAINER_NODE = "node"
TRAIN_JOB_RUNTIME_PATCH_MANAGER = "kueue.x-k8s.io/manager"

# v1beta1 Workload spec.priorityClassSource values.
PRIORITY_CLASS_SOURCE_WORKLOAD = "kueue.x-k8s.io/workloadpriorityclass"
PRIORITY_CLASS_SOURCE_POD = "scheduling.k8s.io/priorityclass"

# =============================================================================================
# Finalizers and pod scheduling gates

FINALIZER_RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
FINALIZER_MANAGED = LABEL_MANAGED  # pods: the same string as the managed label

SCHEDULING_GATE_ADMISSION = "kueue.x-k8s.io/admission"
SCHEDULING_GATE_TOPOLOGY = "kueue.x-k8s.io/topology"
SCHEDULING_GATE_ELASTIC_JOB = ANNOTATION_ELASTIC_JOB

# =============================================================================================
# Spec enum values

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
DEFAULT_KUEUE_NAMESPACE = "kueue-system"

# =============================================================================================
# Validation messages (CEL and webhooks)

MSG_FIELD_IS_IMMUTABLE = "field is immutable"
MSG_BORROWING_LIMIT_NEEDS_COHORT = "must be nil when cohort is empty"
MSG_LENDING_LIMIT_ABOVE_NOMINAL = "must be less than or equal to the nominalQuota"
MSG_LIMIT_NEEDS_PARENT = "must be nil when parent is empty"
MSG_FAIR_SHARING_WEIGHT_TOO_SMALL = "When not 0, weight must be > 10e-9"
MSG_PODS_RESOURCE_RESERVED = "the key is reserved for internal kueue use"
MSG_MUST_BE_UNIQUE = "must be unique"
MSG_CLUSTER_SOURCE_EXACTLY_ONE = "exactly one of the fields in [kubeConfig clusterProfileRef] must be set"
MSG_CLUSTER_NAME_IMMUTABLE = "clusterName is immutable once set"
MSG_CLUSTER_NAME_EXCLUSIVE = "clusterName and nominatedClusterNames are mutually exclusive"
MSG_CLUSTER_NAME_NOT_NOMINATED = "when setting clusterName it must be one of the nominatedClusterNames"

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


# =============================================================================================
# Event reasons, and the messages that go with some of them

EVENT_NORMAL = "Normal"
EVENT_WARNING = "Warning"

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
# MultiKueue names

# One string, several roles: the AdmissionCheck controllerName, the ACS field manager, the
# spec.managedBy value of jobs run remotely, and the orchestrated-preemption gate name.
MULTIKUEUE_CONTROLLER_NAME = "kueue.x-k8s.io/multikueue"
FIELD_MANAGER_MULTIKUEUE = MULTIKUEUE_CONTROLLER_NAME
# The manager's Finished=True, copied from the worker's copy (upstream's field owner for it).
FIELD_MANAGER_MULTIKUEUE_FINISH = MULTIKUEUE_CONTROLLER_NAME + "-finish"
# Ours: the manager's MultiKueueManagerQuotaAutomation condition and quotas on a manager ClusterQueue
# (upstream writes them with a plain update; a field manager of our own keeps them apart from the
# worker_agent's status apply of the Active condition).
FIELD_MANAGER_MULTIKUEUE_QUOTA = "kueue-multikueue-clusterqueue"
MANAGED_BY_MULTIKUEUE = MULTIKUEUE_CONTROLLER_NAME
PREEMPTION_GATE_MULTIKUEUE = MULTIKUEUE_CONTROLLER_NAME

DISPATCHER_ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
DISPATCHER_INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
# Ours (manager/dispatch/least_loaded.py); upstream reads any other name as an external dispatcher.
DISPATCHER_LEAST_LOADED = "kueue-federation.dev/multikueue-dispatcher-least-loaded"
LEAST_LOADED_ROUND_TIMEOUT = 10.0

LABEL_MULTIKUEUE_ORIGIN = "kueue.x-k8s.io/multikueue-origin"
LABEL_MULTIKUEUE_WORKER_WORKLOAD_POD = "kueue.x-k8s.io/multikueue-worker-workload-pod"
ANNOTATION_MULTIKUEUE_ORIGIN_UID = "kueue.x-k8s.io/multikueue-origin-uid"
# Ours: the copies of one group's Workloads are admitted on a worker as one (worker_agent/engine/gang.py).
ANNOTATION_MULTIKUEUE_GROUP_PRIMARY = "kueue-federation.dev/multikueue-group-primary"
ANNOTATION_MULTIKUEUE_GROUP_MEMBERS = "kueue-federation.dev/multikueue-group-members"


MSG_WAITING_FOR_GROUP_PRIMARY = "Waiting to be admitted together with its group's primary workload"
MSG_WAITING_FOR_GROUP_MEMBERS = "Waiting for the other workloads of its group to be queued:"


def waiting_for_group_primary_message(primary: str) -> str:
    return f"{MSG_WAITING_FOR_GROUP_PRIMARY} {go_quote(primary)}"


def waiting_for_group_members_message(missing: list[str]) -> str:
    return f"{MSG_WAITING_FOR_GROUP_MEMBERS} {go_list(sorted(missing))}"


def is_waiting_for_group(message: str) -> bool:
    """A copy pending only until the rest of its group arrives (not for want of room)."""
    return message.startswith((MSG_WAITING_FOR_GROUP_PRIMARY, MSG_WAITING_FOR_GROUP_MEMBERS))


def group_does_not_fit_message(count: int, message: str) -> str:
    return f"The group of {count} workloads does not fit as a whole: {message}"


# --- MultiKueueCluster `Active`
MKC_REASON_ACTIVE = "Active"
MKC_MSG_CONNECTED = "Connected"
MKC_REASON_BAD_KUBECONFIG = "BadKubeConfig"
MKC_REASON_INSECURE_KUBECONFIG = "InsecureKubeConfig"
MKC_REASON_BAD_CLUSTER_PROFILE = "BadClusterProfile"
MKC_REASON_BAD_REST_CONFIG = "BadRestConfig"
MKC_REASON_CLUSTER_PROFILE_FEATURE_DISABLED = "MultiKueueClusterProfileFeatureDisabled"
MKC_REASON_CLIENT_CONNECTION_FAILED = "ClientConnectionFailed"


def load_client_config_failed_message(error: str) -> str:
    """Message of every credential-loading failure (BadKubeConfig ... FeatureDisabled)."""
    return f"load client config failed: {error}"


def connection_attempts_suffix(attempts: int, next_attempt_rfc3339: str) -> str:
    """Appended to a False message when the remote client has failed at least once."""
    return f"; connection attempts: {attempts}, next connection attempt: {next_attempt_rfc3339}"


# Error texts inside load_client_config_failed_message (Go error strings).
def err_secret_not_found(name: str) -> str:
    return f"Secret {go_quote(name)} not found"


def err_secret_key_not_found(secret_name: str) -> str:
    return f"key {go_quote(KUBECONFIG_SECRET_KEY)} not found in secret {go_quote(secret_name)}"


ERR_KUBECONFIG_REF_NIL = "kubeconfig reference is nil"
ERR_KUBECONFIG_PATH_EMPTY = "kubeconfig path must not be empty"
ERR_KUBECONFIG_PATH_PREFIX = "kubeconfig path is not under the allowed prefix"
ERR_KUBECONFIG_PATH_DOTDOT = f'{ERR_KUBECONFIG_PATH_PREFIX}: path contains ".."'
ERR_KUBECONFIG_PATH_NOT_ABSOLUTE = f"{ERR_KUBECONFIG_PATH_PREFIX}: path must be absolute"


def err_kubeconfig_path_outside_prefix(resolved: str, prefix: str) -> str:
    return f"{ERR_KUBECONFIG_PATH_PREFIX}: {go_quote(resolved)} is not under {go_quote(prefix)}"


def err_kubeconfig_symlinks(error: str) -> str:
    return f"cannot resolve kubeconfig path symlinks: {error}"


def err_kubeconfig_parse(error: str) -> str:
    return f"failed to parse kubeconfig(apiconfig): {error}"


ERR_TOKEN_FILE_NOT_ALLOWED = "tokenFile is not allowed"
ERR_BEARER_TOKEN_FILE_NOT_ALLOWED = "bearerTokenFile is not allowed"
ERR_UNTRUSTED_SERVER_ENDPOINT = "untrusted server endpoint"
ERR_BASIC_AUTH_NOT_ALLOWED = "basic auth is not allowed"
ERR_EXEC_PLUGINS_NOT_ALLOWED = "exec plugins are not allowed"
ERR_AUTH_PROVIDERS_NOT_ALLOWED = "auth providers are not allowed"


def err_insecure_tls(cluster: str) -> str:
    return f"insecure TLS verification is not allowed for cluster {cluster}"


def err_ca_file_not_allowed(cluster: str) -> str:
    return (
        "certificate-authority file paths are not allowed, use certificate-authority-data "
        f"for cluster {cluster}"
    )


def err_server_url_required(cluster: str) -> str:
    return f"server URL is required for cluster {cluster}"


def err_cluster_profile_not_found(name: str) -> str:
    return f"ClusterProfile.multicluster.x-k8s.io {go_quote(name)} not found"


ERR_NO_ACCESS_PROVIDER = "no access provider configured"


def err_no_matching_cluster_accessor(profile: str) -> str:
    return f"no matching cluster accessor found for cluster profile {go_quote(profile)}"


def err_no_exec_config(provider: str) -> str:
    return f"no exec config found for provider {go_quote(provider)}"


ERR_CLUSTER_PROFILE_FEATURE_DISABLED = "MultiKueueClusterProfile feature gate is disabled"

# --- AdmissionCheck `Active` (multikueue checks)
AC_REASON_ACTIVE = "Active"
AC_MSG_ACTIVE = "The admission check is active"
AC_REASON_BAD_CONFIG = "BadConfig"
AC_REASON_SOME_ACTIVE_CLUSTERS = "SomeActiveClusters"  # status True
AC_REASON_NO_USABLE_CLUSTERS = "NoUsableClusters"  # status False


def ac_bad_config_message(error: str) -> str:
    return f"Cannot load the AdmissionChecks parameters: {error}"


def err_multikueue_config_not_found(name: str) -> str:
    return f"MultiKueueConfig.kueue.x-k8s.io {go_quote(name)} not found"


ERR_BAD_PARAMETERS_REF = "bad parameters reference"
ERR_MISSING_PARAMETERS_REF = "missing parameters reference"
ERR_EMPTY_PARAMETERS_NAME = f"empty name: {ERR_BAD_PARAMETERS_REF}"


def err_wrong_parameters_group(group: str) -> str:
    return f"wrong group {go_quote(group)}, expecting {go_quote(GROUP)}: {ERR_BAD_PARAMETERS_REF}"


def err_wrong_parameters_kind(kind: str) -> str:
    return (
        f"wrong kind {go_quote(kind)}, expecting {go_quote(MULTIKUEUE_CONFIG.kind)}: {ERR_BAD_PARAMETERS_REF}"
    )


def ac_clusters_message(missing: list[str], inactive: list[str]) -> str:
    """`Missing clusters: [a b], Inactive clusters: [c]`, each part only when non-empty."""
    parts = []
    if missing:
        parts.append(f"Missing clusters: {go_list(missing)}")
    if inactive:
        parts.append(f"Inactive clusters: {go_list(inactive)}")
    return ", ".join(parts)


# --- ClusterQueue `MultiKueueManagerQuotaAutomation` (alpha)
CONDITION_MULTIKUEUE_MANAGER_QUOTA_AUTOMATION = "MultiKueueManagerQuotaAutomation"
QUOTA_AUTOMATION_REASON_AUTOMATED = "QuotaAutomated"
QUOTA_AUTOMATION_REASON_NOT_REQUESTED = "NotRequested"
QUOTA_AUTOMATION_REASON_UNSUPPORTED = "UnsupportedConfiguration"
QUOTA_AUTOMATION_MSG_AUTOMATED = "ClusterQueue quota is automatically managed based on MultiKueue workers."
QUOTA_AUTOMATION_MSG_NOT_REQUESTED = "MultiKueue manager quota automation has not been requested."
QUOTA_AUTOMATION_MSG_CONFIG_NOT_FOUND = "The referenced MultiKueueConfig was not found."
QUOTA_AUTOMATION_MSG_ONE_FLAVOR = (
    "Quota automation requires that the manager-side ClusterQueue has exactly one ResourceFlavor"
)


def quota_automation_missing_resources_message(resources: list[str]) -> str:
    return f"manager-side coveredResources is missing resources configured on workers: {go_list(resources)}"


# --- Workload admission check state (ACS) messages written by MultiKueue


# Ours: a Retry check on a Workload that no longer holds quota goes back to Pending.
MSG_RETRY_WITHOUT_QUOTA = "The workload holds no quota any more and may be placed again"


def acs_update_message(message: str, old_state: str) -> str:
    """updateACS: `<msg>, Previously: "<old state>"` (Go %q)."""
    return f"{message}, Previously: {go_quote(old_state)}"


def no_adapter_for_owner_message(owner_gvk: str) -> str:
    return f"No multikueue adapter found for owner kind {go_quote(owner_gvk)}"


MSG_NO_ADAPTER = "No multikueue adapter found"


def owner_not_managed_message(reason: str) -> str:
    return f"The owner is not managed by Kueue: {reason}"


def expecting_managed_by_message(actual: str) -> str:
    return f"Expecting spec.managedBy to be {go_quote(MANAGED_BY_MULTIKUEUE)} not {go_quote(actual)}"


MSG_ADMITTING_REMOTE_LOST = "Admitting remote lost"
MSG_ADMITTING_REMOTE_GONE = "Admitting remote no longer exists"
MSG_READY_WITHOUT_CLUSTER = (
    "Admission check is Ready but no admitting cluster is recorded; this is unexpected, please report it"
)


def remote_out_of_sync_message(worker: str) -> str:
    return (
        f"Remote workload on worker cluster {go_quote(worker)} is out of sync with its user job, "
        "resetting for re-dispatch"
    )


def name_conflict_message(kind: str, namespace: str, name: str, worker: str) -> str:
    """Ours (upstream has no message, kubernetes-sigs/kueue#12404): a worker excluded for a Workload
    because a job object of its name there was not created by this manager."""
    return (
        f"{kind} {namespace}/{name} already exists on {go_quote(worker)} and is not managed by this manager"
    )


def kind_not_served_message(resource: Resource, worker: str) -> str:
    """Ours: a worker excluded for a Workload because it does not serve its job's kind (no CRD)."""
    crd = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    version = f"{resource.group}/{resource.version}" if resource.group else resource.version
    return (
        f"{resource.kind} is not served on {go_quote(worker)}: the CRD {crd} ({version}) "
        "is not installed there"
    )


def admitted_on_worker_message(worker: str) -> str:
    """ACS Ready message (no Previously suffix) and the Normal `MultiKueue` event."""
    return f"The workload was admitted on {go_quote(worker)}"


def evicted_on_worker_message(worker: str) -> str:
    """ACS Retry after a worker-side eviction (note the period before Previously)."""
    return (
        f"Workload evicted on worker cluster: {go_quote(worker)}, resetting for re-admission. "
        f"Previously: {go_quote(CHECK_STATE_READY)}"
    )


def not_admitted_by_workers_message(reasons: list[tuple[str, str]]) -> str:
    """Ours: the Pending check's message while no worker admits the copies."""
    parts = "; ".join(f"{go_quote(cluster)}: {message}" for cluster, message in reasons)
    return f"Not admitted by any worker cluster yet: {parts}"


def group_member_left_message(member: str, worker: str) -> str:
    """Ours: the Retry of the other members when one member of a group leaves its worker."""
    return (
        f"Group member {go_quote(member)} left worker cluster {go_quote(worker)}, re-placing the whole group"
    )


def evicted_on_manager_message(local_evicted_message: str) -> str:
    """Remote DeactivationTarget (reason EvictedOnManagerCluster) when the local workload is evicted."""
    return f"Evicted on manager: {local_evicted_message}"


# batch/Job adapter: the JobSuspended condition kept on the local Job until it may mirror status.
JOB_CONDITION_SUSPENDED = "Suspended"  # batchv1.JobSuspended
REASON_MULTIKUEUE_ADAPTER = "MultiKueueAdapter"
MSG_SET_BY_MULTIKUEUE_ADAPTER = "Set by MultiKueue adapter"

# --- Events
EVENT_MULTIKUEUE = "MultiKueue"  # reason and action
# Ours, not upstream's: one event per dispatch decision (its own reason, so that the events API
# does not fold it into the same series as upstream's `MultiKueue` events).
EVENT_MULTIKUEUE_DISPATCHED = "MultiKueueDispatched"
EVENT_ACTION_DISPATCH = "Dispatch"
EVENT_MULTIKUEUE_DISPATCH_FAILED = "MultiKueueDispatchFailed"
EVENT_DEPRECATED_PATH_USAGE = "DeprecatedPathUsage"  # reason and action
MSG_DEPRECATED_PATH_USAGE = (
    "Using locationType=Path without MultiKueueKubeConfigPathValidation feature gate is deprecated and will "
    "be removed in a future release. Enable the MultiKueueKubeConfigPathValidation feature gate and place "
    "kubeconfig files under /etc/multikueue/kubeconfigs/."
)
EVENT_RECORDER_WORKLOAD_CONTROLLER = "kueue-workload-controller"
EVENT_RECORDER_MULTIKUEUE_CLUSTER = "multikueue-cluster"

# --- Metrics (subsystem `multikueue`)
METRICS_SUBSYSTEM_MULTIKUEUE = "multikueue"
METRIC_MULTIKUEUE_WORKLOADS_DISPATCHED_TOTAL = "multikueue_workloads_dispatched_total"
METRIC_MULTIKUEUE_WORKLOADS_ADMITTED_TOTAL = "multikueue_workloads_admitted_total"
METRIC_LABEL_CLUSTER_QUEUE = "cluster_queue"
METRIC_LABEL_CLUSTER = "cluster"
METRIC_LABEL_REPLICA_ROLE = "replica_role"

# =============================================================================================
# MultiKueue defaults and constants; durations in seconds

DEFAULT_GC_INTERVAL = 60.0
DEFAULT_ORIGIN = "multikueue"
DEFAULT_WORKER_LOST_TIMEOUT = 15 * 60.0
DEFAULT_DISPATCHER_NAME = DISPATCHER_ALL_AT_ONCE
DEFAULT_INCREMENTAL_STEP_SIZE = 3
INCREMENTAL_ROUND_TIMEOUT = 5 * 60.0
UPDATES_BATCH_PERIOD = 1.0
RECONNECT_BASE_DELAY = 5.0
RECONNECT_MAX_STEPS = 7
WATCH_ESTABLISH_BASE_TIMEOUT = 60.0
WATCH_ESTABLISH_MAX_TIMEOUT = 10 * 60.0
DEFERRED_SYNC_REQUEUE_AFTER = 2.0
SINGLE_CLUSTER_PREEMPTION_TIMEOUT = 5 * 60.0
REMOTE_EVENT_BUFFER_SIZE = 10
KUBECONFIG_FS_WATCH_BATCH_DELAY = 0.1
KUBECONFIG_PATH_PREFIX = "/etc/multikueue/kubeconfigs"
KUBECONFIG_SECRET_KEY = "kubeconfig"


def reconnect_delay(failed_attempts: int) -> float:
    """retryAfter(n) = 5s * 2^(n-1), n capped at 7: 5, 10, 20, 40, 80, 160, 320 s."""
    n = min(max(failed_attempts, 1), RECONNECT_MAX_STEPS)
    return RECONNECT_BASE_DELAY * 2 ** (n - 1)


def watch_establish_timeout(failed_attempts: int) -> float:
    """1m, 2m, 4m, 8m, then 10m: the time allowed for a remote watch's first response."""
    return min(
        WATCH_ESTABLISH_BASE_TIMEOUT * 2 ** min(max(failed_attempts, 0), 10), WATCH_ESTABLISH_MAX_TIMEOUT
    )


# ---------------------------------------------------------------------------
# Scheduler (engine) requeue reasons and inadmissible messages

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


# ---------------------------------------------------------------------------
# batch/v1 Job integration

# Labels the Job controller puts on pod templates; the first three are left out of a Workload's
# PodSet template (`batch.kubernetes.io/job-name` is kept), and must survive a template restore.
LABEL_JOB_NAME_LEGACY = "job-name"
LABEL_CONTROLLER_UID_LEGACY = "controller-uid"
LABEL_BATCH_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
JOB_TEMPLATE_LEGACY_LABELS = (LABEL_JOB_NAME_LEGACY, LABEL_CONTROLLER_UID_LEGACY, LABEL_BATCH_CONTROLLER_UID)
LABEL_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # TAS pod index label

# batch/v1 Job strings.
JOB_MANAGED_BY_DEFAULT = "kubernetes.io/job-controller"  # spec.managedBy of the built-in controller
JOB_CONDITION_COMPLETE = "Complete"
JOB_CONDITION_FAILED = "Failed"
JOB_COMPLETION_MODE_INDEXED = "Indexed"

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


# ---------------------------------------------------------------------------
# Admission webhooks: registration names, paths and messages

API_SERVICE = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", False)
MUTATING_WEBHOOK_CONFIGURATION = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
VALIDATING_WEBHOOK_CONFIGURATION = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
ADMISSION_REVIEW_API_VERSION = "admission.k8s.io/v1"
ADMISSION_REVIEW_KIND = "AdmissionReview"
ADMISSION_PATCH_TYPE_JSON = "JSONPatch"

# Object names, as upstream's kustomize prefix renders them.
MUTATING_WEBHOOK_CONFIGURATION_NAME = "kueue-mutating-webhook-configuration"
VALIDATING_WEBHOOK_CONFIGURATION_NAME = "kueue-validating-webhook-configuration"
DEFAULT_WEBHOOK_SERVICE_NAME = "kueue-webhook-service"
DEFAULT_WEBHOOK_SECRET_NAME = "kueue-webhook-server-cert"
DEFAULT_WEBHOOK_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"

# controller-runtime's CRD conversion webhook path (the CRDs' spec.conversion points here).
WEBHOOK_PATH_CONVERT = "/convert"
# Paths (controller-runtime's /mutate-<group with dots as dashes>-<version>-<lowercase kind>).
WEBHOOK_PATH_MUTATE_JOB = "/mutate-batch-v1-job"
WEBHOOK_PATH_VALIDATE_JOB = "/validate-batch-v1-job"
WEBHOOK_PATH_MUTATE_POD = "/mutate--v1-pod"
WEBHOOK_PATH_VALIDATE_POD = "/validate--v1-pod"
WEBHOOK_PATH_MUTATE_LEADER_WORKER_SET = "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset"
WEBHOOK_PATH_VALIDATE_LEADER_WORKER_SET = "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset"
WEBHOOK_PATH_MUTATE_JOB_SET = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
WEBHOOK_PATH_VALIDATE_JOB_SET = "/validate-jobset-x-k8s-io-v1alpha2-jobset"
WEBHOOK_PATH_MUTATE_TRAIN_JOB = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"
WEBHOOK_PATH_VALIDATE_TRAIN_JOB = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
WEBHOOK_PATH_MUTATE_DEPLOYMENT = "/mutate-apps-v1-deployment"
WEBHOOK_PATH_VALIDATE_DEPLOYMENT = "/validate-apps-v1-deployment"
WEBHOOK_PATH_MUTATE_STATEFUL_SET = "/mutate-apps-v1-statefulset"
WEBHOOK_PATH_VALIDATE_STATEFUL_SET = "/validate-apps-v1-statefulset"
# Webhook names inside the configurations.
WEBHOOK_NAME_MUTATE_JOB = "mjob.kb.io"
WEBHOOK_NAME_VALIDATE_JOB = "vjob.kb.io"
WEBHOOK_NAME_MUTATE_POD = "mpod.kb.io"
WEBHOOK_NAME_VALIDATE_POD = "vpod.kb.io"
WEBHOOK_NAME_MUTATE_LEADER_WORKER_SET = "mleaderworkerset.kb.io"
WEBHOOK_NAME_VALIDATE_LEADER_WORKER_SET = "vleaderworkerset.kb.io"
WEBHOOK_NAME_MUTATE_JOB_SET = "mjobset.kb.io"
WEBHOOK_NAME_VALIDATE_JOB_SET = "vjobset.kb.io"
WEBHOOK_NAME_MUTATE_TRAIN_JOB = "mtrainjob.kb.io"
WEBHOOK_NAME_VALIDATE_TRAIN_JOB = "vtrainjob.kb.io"

# Secret keys of the self-managed webhook certificates (as open-policy-agent/cert-controller).
SECRET_KEY_CA_CERT = "ca.crt"
SECRET_KEY_CA_KEY = "ca.key"
SECRET_KEY_TLS_CERT = "tls.crt"
SECRET_KEY_TLS_KEY = "tls.key"

# Feature gate names, defaults and stages: kube_runtime/features.py.

LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set by the apiserver on every Namespace

# field.ErrorList details (k8s.io/apimachinery validation and Kueue's jobframework).
MSG_QUEUE_NAME_EMPTY_WITH_DEFAULT_QUEUE = "queue-name must not be empty in namespace with default queue"
MSG_WPC_ADDED_TO_RUNNING = "WorkloadPriorityClass cannot be added to a non-suspended workload"
MSG_WPC_REMOVED = "WorkloadPriorityClass cannot be removed from a workload"
MSG_SHOULD_BE_GREATER_THAN_ZERO = "should be greater than 0"
MSG_PARTIAL_ADMISSION_PARALLELISM = (
    "cannot change when partial admission is enabled and the job is not suspended"
)
MSG_SYNC_COMPLETIONS_NON_INDEXED = "should not be enabled for NonIndexed jobs"
MSG_MANAGED_LABEL_VALUE = "managed label value can only be 'true'"
MSG_PREBUILT_NOT_GROUP = "prebuilt workload and pod group should be equal"
MSG_UNRETRIABLE_GROUP = "unretriable pod group can't be converted to retriable"
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
MSG_DNS1123_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LWS_MAX_REPLICAS = 1_000_000


def msg_max_length(limit: int) -> str:
    return f"must be no more than {limit} characters"


def msg_min_parallelism_range(pods_count: int) -> str:
    return f"should be between 0 and {pods_count - 1}"


def msg_sync_completions_parallelism(annotation: str) -> str:
    return f"should be equal to parallelism when {annotation} is annotation is true"


def msg_prebuilt_not_supported(gvk: str) -> str:
    return f"Is not supported for {go_quote(gvk)}"


def msg_group_metadata_both(total_count_key: str, group_name_key: str) -> str:
    return f"both the '{total_count_key}' annotation and the '{group_name_key}' label should be set"


def msg_group_total_count_not_positive(key: str, value: str) -> str:
    return f"incorrect annotation value '{key}={value}': group total count should be greater than zero"


def msg_inclusive_range(low: int, high: int) -> str:
    return f"must be between {low} and {high}, inclusive"


def msg_elastic_not_supported(gvk: str) -> str:
    return f"elastic job is not supported for {go_quote(gvk)}"


def warning_pod_managed_label_with_managed_owner() -> str:
    return (
        f"pod owner is managed by kueue, label '{LABEL_MANAGED}={VALUE_TRUE}' "
        "might lead to unexpected behaviour"
    )


# =============================================================================================
# ClusterProfile credentials (`multiKueue.clusterProfile`)

# A ClusterProfile cluster extension whose data becomes the exec plugin's cluster config.
CLUSTER_PROFILE_EXEC_EXTENSION = "client.authentication.k8s.io/exec"
EXEC_INTERACTIVE_MODE_NEVER = "Never"
EXEC_INTERACTIVE_MODES = (EXEC_INTERACTIVE_MODE_NEVER, "IfAvailable", "Always")
MSG_MUST_BE_SPECIFIED = "must be specified"
MSG_CREDENTIALS_PROVIDERS_EXCLUSIVE = "must not be specified when accessProviders is specified"
