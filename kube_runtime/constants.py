"""Kubernetes' own strings any controller uses: condition status values, event types, message
limits, batch/v1 Job labels and conditions, AdmissionReview, Secret keys and apimachinery's
validation messages."""

from __future__ import annotations

# Condition status values.
CONDITION_TRUE = "True"
CONDITION_FALSE = "False"
CONDITION_UNKNOWN = "Unknown"

# Message limits of events.k8s.io/v1 Events and metav1.Conditions; truncation (Kueue's
# pkg/util/api) appends TRUNCATION_SUFFIX.
EVENT_MESSAGE_LIMIT_BYTES = 1024
CONDITION_MESSAGE_LIMIT_BYTES = 32768
TRUNCATION_SUFFIX = " ..."

# Event types.
EVENT_NORMAL = "Normal"
EVENT_WARNING = "Warning"

# Labels the Job controller puts on pod templates.
LABEL_JOB_NAME_LEGACY = "job-name"
LABEL_CONTROLLER_UID_LEGACY = "controller-uid"
LABEL_BATCH_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # TAS pod index label

# batch/v1 Job strings.
JOB_MANAGED_BY_DEFAULT = "kubernetes.io/job-controller"  # spec.managedBy of the built-in controller
JOB_CONDITION_COMPLETE = "Complete"
JOB_CONDITION_FAILED = "Failed"
JOB_COMPLETION_MODE_INDEXED = "Indexed"
JOB_CONDITION_SUSPENDED = "Suspended"  # batchv1.JobSuspended

# AdmissionReview (admission.k8s.io/v1).
ADMISSION_REVIEW_API_VERSION = "admission.k8s.io/v1"
ADMISSION_REVIEW_KIND = "AdmissionReview"
ADMISSION_PATCH_TYPE_JSON = "JSONPatch"

# Secret keys of TLS certificates (as open-policy-agent/cert-controller writes them).
SECRET_KEY_CA_CERT = "ca.crt"
SECRET_KEY_CA_KEY = "ca.key"
SECRET_KEY_TLS_CERT = "tls.crt"
SECRET_KEY_TLS_KEY = "tls.key"

LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set by the apiserver on every Namespace

# apimachinery validation messages.
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
MSG_DNS1123_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def msg_max_length(limit: int) -> str:
    return f"must be no more than {limit} characters"


def msg_inclusive_range(low: int, high: int) -> str:
    return f"must be between {low} and {high}, inclusive"
