"""Kueue's admission webhooks: object names, paths, webhook names, and the validation messages
of its CEL rules and webhooks.

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line); other Kueue components and users' tooling match on them.
"""

from __future__ import annotations

from kube_runtime.gofmt import go_quote
from kueue_domain.api.labels import LABEL_MANAGED, VALUE_TRUE

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
WEBHOOK_PATH_MUTATE_RAY_JOB = "/mutate-ray-io-v1-rayjob"
WEBHOOK_PATH_VALIDATE_RAY_JOB = "/validate-ray-io-v1-rayjob"
WEBHOOK_PATH_MUTATE_RAY_CLUSTER = "/mutate-ray-io-v1-raycluster"
WEBHOOK_PATH_VALIDATE_RAY_CLUSTER = "/validate-ray-io-v1-raycluster"
WEBHOOK_PATH_MUTATE_RAY_SERVICE = "/mutate-ray-io-v1-rayservice"
WEBHOOK_PATH_VALIDATE_RAY_SERVICE = "/validate-ray-io-v1-rayservice"
WEBHOOK_PATH_MUTATE_APPWRAPPER = "/mutate-workload-codeflare-dev-v1beta2-appwrapper"
WEBHOOK_PATH_VALIDATE_APPWRAPPER = "/validate-workload-codeflare-dev-v1beta2-appwrapper"
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
WEBHOOK_NAME_MUTATE_RAY_JOB = "mrayjob.kb.io"
WEBHOOK_NAME_VALIDATE_RAY_JOB = "vrayjob.kb.io"
WEBHOOK_NAME_MUTATE_RAY_CLUSTER = "mraycluster.kb.io"
WEBHOOK_NAME_VALIDATE_RAY_CLUSTER = "vraycluster.kb.io"
WEBHOOK_NAME_MUTATE_RAY_SERVICE = "mrayservice.kb.io"
WEBHOOK_NAME_VALIDATE_RAY_SERVICE = "vrayservice.kb.io"
WEBHOOK_NAME_MUTATE_APPWRAPPER = "mappwrapper.kb.io"
WEBHOOK_NAME_VALIDATE_APPWRAPPER = "vappwrapper.kb.io"

# Validation messages (CEL and webhooks).

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

# field.ErrorList details (Kueue's jobframework).
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
LWS_MAX_REPLICAS = 1_000_000


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


def msg_elastic_not_supported(gvk: str) -> str:
    return f"elastic job is not supported for {go_quote(gvk)}"


def warning_pod_managed_label_with_managed_owner() -> str:
    return (
        f"pod owner is managed by kueue, label '{LABEL_MANAGED}={VALUE_TRUE}' "
        "might lead to unexpected behaviour"
    )


# The StatefulSet webhook's scale-up-from-zero checks.
MSG_STS_SCALE_DOWN_IN_PROGRESS = "scaling down is still in progress"
MSG_STS_WORKLOAD_STILL_DELETED = "workload from previous scale-down is still being deleted"
