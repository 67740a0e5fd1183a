"""The ProvisioningRequest admission check: Kueue's `kueue.x-k8s.io/provisioning-request` controller
and ProvisioningRequestConfig, and cluster-autoscaler's `autoscaling.x-k8s.io/v1`
ProvisioningRequest it creates. Strings as upstream Kueue v0.19.2 and the autoscaler's API have them.
"""

from __future__ import annotations

from kube_runtime.gofmt import go_quote
from kube_runtime.resources import Resource
from kueue_domain.api.multikueue import ERR_BAD_PARAMETERS_REF
from kueue_domain.api.resources import GROUP, PROVISIONING_REQUEST_CONFIG

PROVISIONING_REQUEST_CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
# The event recorder upstream's controller writes with; its status writes' field manager.
PROVISIONING_EVENT_SOURCE = "kueue-provisioning-request-controller"
FIELD_MANAGER_PROVISIONING = PROVISIONING_REQUEST_CONTROLLER_NAME

AUTOSCALING_GROUP = "autoscaling.x-k8s.io"
PROVISIONING_REQUEST = Resource(AUTOSCALING_GROUP, "v1", "provisioningrequests", "ProvisioningRequest", True)
POD_TEMPLATE = Resource("", "v1", "podtemplates", "PodTemplate", True)

# ProvisioningRequest condition types (autoscaling.x-k8s.io/v1).
PR_ACCEPTED = "Accepted"
PR_BOOKING_EXPIRED = "BookingExpired"
PR_CAPACITY_REVOKED = "CapacityRevoked"
PR_PROVISIONED = "Provisioned"
PR_FAILED = "Failed"
PROVISIONING_CLASS_CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
PROVISIONING_CLASS_BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
# What the pods of a provisioned Workload carry (the autoscaler's ProvisioningRequestPodAnnotationKey
# and ProvisioningClassPodAnnotationKey).
ANNOTATION_CONSUME_PROVISIONING_REQUEST = "autoscaling.x-k8s.io/consume-provisioning-request"
ANNOTATION_PROVISIONING_CLASS_NAME = "autoscaling.x-k8s.io/provisioning-class-name"

# ProvisioningRequestConfig defaults (its CRD's, and upstream's when retryStrategy is null).
PRC_DEFAULT_BACKOFF_LIMIT_COUNT = 3
PRC_DEFAULT_BACKOFF_BASE_SECONDS = 60
PRC_DEFAULT_BACKOFF_MAX_SECONDS = 1800
MERGE_IDENTICAL_POD_TEMPLATES = "IdenticalPodTemplates"
MERGE_IDENTICAL_SCHEDULING_REQUIREMENTS = "IdenticalWorkloadSchedulingRequirements"

# Object names: ProvisioningRequest `<workload>-<check>-<attempt>`, PodTemplate
# `ppt-<request>-<podset>`, cut to 247 characters plus `-` and 5 hex digits of their SHA-1.
POD_TEMPLATES_PREFIX = "ppt"
OBJ_NAME_HASH_LENGTH = 5
OBJ_NAME_MAX_PREFIX_LENGTH = 252 - OBJ_NAME_HASH_LENGTH

# Admission check state messages.
MSG_CHECK_INACTIVE = "the check is not active"
MSG_NO_REQUEST_NEEDED = "the provisioning request is not needed"
AC_REASON_BAD_PARAMETERS_REF = "BadParametersRef"

# Events on the Workload.
EVENT_PROVISIONING_REQUEST_CREATED = "ProvisioningRequestCreated"
EVENT_FAILED_CREATE = "FailedCreate"
EVENT_ADMISSION_CHECK_UPDATED = "AdmissionCheckUpdated"


def retrying_after_failure_message(message: str) -> str:
    return f"Retrying after failure: {message}"


def retrying_after_booking_expired_message(message: str) -> str:
    return f"Retrying after booking expired: {message}"


def provisioning_request_created_message(name: str) -> str:
    return f"Created ProvisioningRequest: {go_quote(name)}"


def error_creating_message(kind: str, name: str, error: str) -> str:
    """`Error creating PodTemplate "<name>": <error>` (or ProvisioningRequest)."""
    return f"Error creating {kind} {go_quote(name)}: {error}"


def admission_check_updated_message(check: str, old: str, new: str, message: str) -> str:
    text = f"Admission check {check} updated state from {old} to {new}"
    return f"{text} with message: {message}" if message else text


def err_provisioning_config_not_found(name: str) -> str:
    """What upstream's cached client says for a ProvisioningRequestConfig it does not have."""
    return f"ProvisioningRequestConfig.kueue.x-k8s.io {go_quote(name)} not found"


def err_wrong_parameters_group_for_config(group: str) -> str:
    return f"wrong group {go_quote(group)}, expecting {go_quote(GROUP)}: {ERR_BAD_PARAMETERS_REF}"


def err_wrong_parameters_kind_for_config(kind: str) -> str:
    expected = PROVISIONING_REQUEST_CONFIG.kind
    return f"wrong kind {go_quote(kind)}, expecting {go_quote(expected)}: {ERR_BAD_PARAMETERS_REF}"
