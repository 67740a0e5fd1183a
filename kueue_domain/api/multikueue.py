"""MultiKueue's names: controller, field managers, dispatchers, labels, the conditions, reasons and
messages of MultiKueueClusters, AdmissionChecks, quota automation and admission check states,
events, metrics, defaults, and ClusterProfile credentials.

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line); other Kueue components and users' tooling match on them.
"""

from __future__ import annotations

from kube_runtime.gofmt import go_list, go_quote
from kube_runtime.resources import Resource
from kueue_domain.api.enums import CHECK_STATE_READY
from kueue_domain.api.resources import GROUP, MULTIKUEUE_CONFIG

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


# batch/Job adapter: the JobSuspended condition (kube_runtime.constants.JOB_CONDITION_SUSPENDED) kept
# on the local Job until it may mirror status.
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


# =============================================================================================
# ClusterProfile credentials (`multiKueue.clusterProfile`)

# A ClusterProfile cluster extension whose data becomes the exec plugin's cluster config.
CLUSTER_PROFILE_EXEC_EXTENSION = "client.authentication.k8s.io/exec"
EXEC_INTERACTIVE_MODE_NEVER = "Never"
EXEC_INTERACTIVE_MODES = (EXEC_INTERACTIVE_MODE_NEVER, "IfAvailable", "Always")
MSG_MUST_BE_SPECIFIED = "must be specified"
MSG_CREDENTIALS_PROVIDERS_EXCLUSIVE = "must not be specified when accessProviders is specified"
