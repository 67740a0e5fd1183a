"""The configuration file of both processes: Kueue's `config.kueue.x-k8s.io/v1beta1` Configuration.

A user's existing Kueue v1beta1 config file is accepted as-is. Every field is checked at start:
an unknown field or a bad value stops the process with a message that names the field (and
suggests the intended name for a typo), instead of being silently ignored.
"""

from __future__ import annotations

import copy
import dataclasses
import decimal
import difflib
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kube_runtime.tlsoptions import TLSOptions, parse_tls_options
from kueue_domain import api, features
from kueue_domain.features import DEFAULT_GATES, FeatureGateError, FeatureGates
from kueue_domain.resources import RequestConfig

API_VERSION = "config.kueue.x-k8s.io/v1beta1"
# Upstream v0.19's own manifests ship this version; it is read with its own semantics (below).
API_VERSION_V1BETA2 = "config.kueue.x-k8s.io/v1beta2"
# v1beta2's WaitForPodsReady defaults (on unless DisableWaitForPodsReady; v1beta1's timeout is 5m).
V1BETA2_PODS_READY_TIMEOUT = "30m"
KIND = "Configuration"

# v1beta1 defaults (Kueue's apis/config/v1beta1 defaults).
DEFAULT_NAMESPACE = "kueue-system"
DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
DEFAULT_WEBHOOK_PORT = 9443
DEFAULT_WEBHOOK_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
DEFAULT_WEBHOOK_SERVICE_NAME = "kueue-webhook-service"
DEFAULT_WEBHOOK_SECRET_NAME = "kueue-webhook-server-cert"
DEFAULT_HEALTH_PROBE_BIND_ADDRESS = ":8081"
DEFAULT_METRICS_BIND_ADDRESS = ":8443"  # HTTPS, authenticated (kube_runtime/httpserver.py), as upstream
DEFAULT_LEADER_ELECTION_ID = "c1f6bfd2.kueue.x-k8s.io"
DEFAULT_PODS_READY_TIMEOUT = 300.0
DEFAULT_BACKOFF_BASE_SECONDS = 60
DEFAULT_BACKOFF_MAX_SECONDS = 3600
DEFAULT_FRAMEWORKS = ("batch/job",)
DEFAULT_FAIR_SHARING_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
DEFAULT_MULTIKUEUE_GC_INTERVAL = 60.0
DEFAULT_AFS_SAMPLING_INTERVAL = 300.0
DEFAULT_MULTIKUEUE_ORIGIN = "multikueue"
DEFAULT_MULTIKUEUE_WORKER_LOST_TIMEOUT = 900.0
DEFAULT_MULTIKUEUE_DISPATCHER = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"

KNOWN_FRAMEWORKS = frozenset(
    {
        "batch/job",
        "kubeflow.org/mpijob",
        "kubeflow.org/paddlejob",
        "kubeflow.org/pytorchjob",
        "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob",
        "kubeflow.org/jaxjob",
        "ray.io/rayjob",
        "ray.io/rayservice",
        "ray.io/raycluster",
        "jobset.x-k8s.io/jobset",
        "trainer.kubeflow.org/trainjob",
        "workload.codeflare.dev/appwrapper",
        "sparkoperator.k8s.io/sparkapplication",
        "pod",
        "deployment",
        "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    }
)
# Frameworks this project implements today; others are accepted in the file but reported.
SUPPORTED_FRAMEWORKS = frozenset(
    {
        "batch/job",
        "pod",
        "leaderworkerset.x-k8s.io/leaderworkerset",
        "jobset.x-k8s.io/jobset",
        "trainer.kubeflow.org/trainjob",
        "kubeflow.org/pytorchjob",
        "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob",
        "kubeflow.org/paddlejob",
        "kubeflow.org/jaxjob",
        "kubeflow.org/mpijob",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "ray.io/rayservice",
        "workload.codeflare.dev/appwrapper",
        "deployment",
        "statefulset",
    }
)
ALLOWED_FAIR_SHARING_STRATEGIES = (
    ("LessThanOrEqualToFinalShare",),
    ("LessThanInitialShare",),
    ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
)


class ConfigError(Exception):
    """The configuration file is unusable; `problems` lists every field that is wrong."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"invalid configuration {source}:\n" + "\n".join(f"  - {p}" for p in problems))


# ------------------------------------------------------------------------------------------
# The accepted shape of a v1beta1 file. Leaves name a type; dicts are nested objects; MAP(x) is a
# map with free keys whose values have shape x; LIST(x) a list of x; ANY a value we pass through.


class _Any:
    pass


@dataclass(frozen=True)
class _Map:
    values: Any


@dataclass(frozen=True)
class _List:
    items: Any


ANY = _Any()
LABEL_SELECTOR = {
    "matchLabels": _Map(str),
    "matchExpressions": _List({"key": str, "operator": str, "values": _List(str)}),
}
DURATION = "duration"

SCHEMA: dict[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "namespace": str,
    "manageJobsWithoutQueueName": bool,
    "managedJobsNamespaceSelector": LABEL_SELECTOR,
    "webhook": {"port": int, "host": str, "certDir": str},
    "leaderElection": {
        "leaderElect": bool,
        "resourceName": str,
        "resourceNamespace": str,
        "resourceLock": str,
        "leaseDuration": DURATION,
        "renewDeadline": DURATION,
        "retryPeriod": DURATION,
    },
    "metrics": {
        "bindAddress": str,
        "enableClusterQueueResources": bool,
        "localQueueMetrics": {"enable": bool, "localQueueSelector": LABEL_SELECTOR},
        "customLabels": _List(
            {
                "name": str,
                "sourceLabelKey": str,
                "sourceAnnotationKey": str,
                "sourceKind": str,
                "trackedValues": _List(str),
            }
        ),
    },
    "tls": {"minVersion": str, "cipherSuites": _List(str), "curvePreferences": _List(int)},
    "visibilityServer": {"bindAddress": str, "bindPort": int},
    "health": {"healthProbeBindAddress": str, "readinessEndpointName": str, "livenessEndpointName": str},
    "controller": {"groupKindConcurrency": _Map(int), "cacheSyncTimeout": DURATION},
    "pprofBindAddress": str,
    "internalCertManagement": {"enable": bool, "webhookServiceName": str, "webhookSecretName": str},
    "waitForPodsReady": {
        "enable": bool,
        "timeout": DURATION,
        "blockAdmission": bool,
        "recoveryTimeout": DURATION,
        "requeuingStrategy": {
            "timestamp": str,
            "backoffLimitCount": int,
            "backoffBaseSeconds": int,
            "backoffMaxSeconds": int,
        },
    },
    "clientConnection": {"qps": float, "burst": int},
    "integrations": {
        "frameworks": _List(str),
        "externalFrameworks": _List(str),
        "podOptions": {"namespaceSelector": LABEL_SELECTOR, "podSelector": LABEL_SELECTOR},
        "labelKeysToCopy": _List(str),
    },
    "queueVisibility": {"updateIntervalSeconds": int, "clusterQueues": {"maxCount": int}},
    "multiKueue": {
        "gcInterval": DURATION,
        "origin": str,
        "workerLostTimeout": DURATION,
        "dispatcherName": str,
        "externalFrameworks": _List({"name": str}),
        # v1beta2 fields, accepted here too: the manager reads them.
        "incrementalDispatcherConfig": {"stepSize": int},
        "clusterProfile": {"accessProviders": _List(ANY), "credentialsProviders": _List(ANY)},
    },
    "fairSharing": {"enable": bool, "preemptionStrategies": _List(str)},
    "admissionFairSharing": {
        "usageHalfLifeTime": DURATION,
        "usageSamplingInterval": DURATION,
        "resourceWeights": _Map(float),
    },
    "resources": {
        "excludeResourcePrefixes": _List(str),
        "transformations": _List({"input": str, "strategy": str, "multiplyBy": ANY, "outputs": _Map(ANY)}),
        "quotaCheckStrategy": str,
    },
    "featureGates": _Map(bool),
    "objectRetentionPolicies": {
        "workloads": {"afterFinished": DURATION, "afterDeactivatedByKueue": DURATION}
    },
}

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration ("1h30m", "300ms", "-2s", "0") in seconds; ValueError if malformed."""
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}: use Go syntax such as 30s, 5m, 1h30m")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if not s:
        raise ValueError(f"invalid duration {text!r}: use Go syntax such as 30s, 5m, 1h30m")
    return sign * total


def _type_name(expected: Any) -> str:
    if expected is DURATION:
        return "a duration (e.g. 5m)"
    if isinstance(expected, dict):
        return "an object"
    if isinstance(expected, _Map):
        return "a map"
    if isinstance(expected, _List):
        return "a list"
    return {str: "a string", bool: "true or false", int: "an integer", float: "a number"}.get(
        expected, "a value"
    )


def _check(value: Any, expected: Any, path: str, problems: list[str]) -> None:
    if expected is ANY:
        return
    if isinstance(expected, dict):
        if not isinstance(value, dict):
            problems.append(f"{path}: must be {_type_name(expected)}")
            return
        for key, sub in value.items():
            sub_path = f"{path}.{key}" if path else str(key)
            if key not in expected:
                hint = difflib.get_close_matches(str(key), list(expected), n=1)
                problems.append(
                    f'unknown field "{sub_path}"' + (f' (did you mean "{hint[0]}"?)' if hint else "")
                )
                continue
            _check(sub, expected[key], sub_path, problems)
        return
    if isinstance(expected, _Map):
        if not isinstance(value, dict):
            problems.append(f"{path}: must be {_type_name(expected)}")
            return
        for key, sub in value.items():
            _check(sub, expected.values, f"{path}[{key}]", problems)
        return
    if isinstance(expected, _List):
        if not isinstance(value, list):
            problems.append(f"{path}: must be {_type_name(expected)}")
            return
        for i, sub in enumerate(value):
            _check(sub, expected.items, f"{path}[{i}]", problems)
        return
    if expected is DURATION:
        if not isinstance(value, str):
            problems.append(f"{path}: must be {_type_name(expected)}")
            return
        try:
            parse_duration(value)
        except ValueError as e:
            problems.append(f"{path}: {e}")
        return
    ok = (
        isinstance(value, bool)
        if expected is bool
        else isinstance(value, int) and not isinstance(value, bool)
        if expected is int
        else isinstance(value, (int, float)) and not isinstance(value, bool)
        if expected is float
        else isinstance(value, expected)
    )
    if not ok:
        problems.append(f"{path}: must be {_type_name(expected)}, got {value!r}")


# ------------------------------------------------------------------------------------------
# The typed result


@dataclass(frozen=True)
class RequeuingStrategy:
    timestamp: str = "Eviction"
    backoff_limit_count: int | None = None
    backoff_base_seconds: int = DEFAULT_BACKOFF_BASE_SECONDS
    backoff_max_seconds: int = DEFAULT_BACKOFF_MAX_SECONDS


@dataclass(frozen=True)
class WaitForPodsReady:
    timeout_seconds: float = DEFAULT_PODS_READY_TIMEOUT
    block_admission: bool = True
    recovery_timeout_seconds: float | None = None
    requeuing: RequeuingStrategy = field(default_factory=RequeuingStrategy)


@dataclass(frozen=True)
class FairSharing:
    preemption_strategies: tuple[str, ...] = DEFAULT_FAIR_SHARING_STRATEGIES


@dataclass(frozen=True)
class AdmissionFairSharing:
    """`admissionFairSharing` (with the AdmissionFairSharing gate on): usageHalfLifeTime (no
    default: 0 resets the consumed usage at every sample), usageSamplingInterval (default 5m) and
    resourceWeights (a resource not named weighs 1)."""

    half_life_seconds: float = 0.0
    sampling_interval_seconds: float = DEFAULT_AFS_SAMPLING_INTERVAL
    resource_weights: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadRetention:
    """`objectRetentionPolicies.workloads` (ObjectRetentionPolicies): seconds after a Workload's
    Finished condition before it is deleted, and after Kueue deactivated it (Evicted with a
    `DeactivatedDueTo...` reason) before its job is deleted; None leaves them be."""

    after_finished_seconds: float | None = None
    after_deactivated_by_kueue_seconds: float | None = None


@dataclass(frozen=True)
class MultiKueueSettings:
    gc_interval_seconds: float = DEFAULT_MULTIKUEUE_GC_INTERVAL
    origin: str = DEFAULT_MULTIKUEUE_ORIGIN
    worker_lost_timeout_seconds: float = DEFAULT_MULTIKUEUE_WORKER_LOST_TIMEOUT
    dispatcher_name: str = DEFAULT_MULTIKUEUE_DISPATCHER
    incremental_step_size: int = 3
    # `multiKueue.clusterProfile` as written (access providers are parsed by the manager).
    cluster_profile: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Configuration:
    namespace: str = DEFAULT_NAMESPACE
    manage_jobs_without_queue_name: bool = False
    managed_jobs_namespace_selector: dict[str, Any] = field(default_factory=dict)
    wait_for_pods_ready: WaitForPodsReady | None = None
    frameworks: tuple[str, ...] = DEFAULT_FRAMEWORKS
    external_frameworks: tuple[str, ...] = ()
    label_keys_to_copy: tuple[str, ...] = ()
    fair_sharing: FairSharing | None = None
    # `admissionFairSharing` as written (see `admission_fair_sharing_enabled`).
    admission_fair_sharing: AdmissionFairSharing | None = None
    workload_retention: WorkloadRetention = field(default_factory=WorkloadRetention)
    # `tls`, as written (see `server_tls`).
    tls: TLSOptions | None = None
    # `visibilityServer` as host:port (None: not written; --visibility-bind-address wins).
    visibility_bind_address: str | None = None
    # `resources` (excludeResourcePrefixes, transformations) as the engine's request computation uses it.
    requests: RequestConfig = field(default_factory=RequestConfig)
    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST
    multikueue: MultiKueueSettings = field(default_factory=MultiKueueSettings)
    # `featureGates` as written (or `--feature-gates`); `features` applies them to upstream's defaults.
    feature_gates: dict[str, bool] = field(default_factory=dict)
    features: FeatureGates = DEFAULT_GATES
    leader_elect: bool = True
    leader_election_id: str = DEFAULT_LEADER_ELECTION_ID
    leader_election_namespace: str = DEFAULT_NAMESPACE
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    metrics_bind_address: str = DEFAULT_METRICS_BIND_ADDRESS
    health_probe_bind_address: str = DEFAULT_HEALTH_PROBE_BIND_ADDRESS
    # `webhook` and `internalCertManagement`. Port 0 turns the webhook server off (our addition:
    # upstream would serve on 9443); an empty host listens on every address.
    webhook_port: int = DEFAULT_WEBHOOK_PORT
    webhook_host: str = ""
    webhook_cert_dir: str = DEFAULT_WEBHOOK_CERT_DIR
    internal_cert_management: bool = True
    webhook_service_name: str = DEFAULT_WEBHOOK_SERVICE_NAME
    webhook_secret_name: str = DEFAULT_WEBHOOK_SECRET_NAME
    warnings: tuple[str, ...] = ()

    @property
    def server_tls(self) -> TLSOptions | None:
        """The TLS settings our servers (webhooks, metrics, visibility API) apply: `tls` while the
        TLSOptions gate is on (upstream's default)."""
        return self.tls if self.features.enabled("TLSOptions") else None

    @property
    def admission_fair_sharing_enabled(self) -> AdmissionFairSharing | None:
        """`admissionFairSharing` while the AdmissionFairSharing gate is on (upstream's
        afs.Enabled), else None."""
        if self.admission_fair_sharing is None or not self.features.enabled(features.ADMISSION_FAIR_SHARING):
            return None
        return self.admission_fair_sharing

    @property
    def pod_integration_enabled(self) -> bool:
        """Enabling LeaderWorkerSet implicitly enables the pod integration, as upstream."""
        return "pod" in self.frameworks or "leaderworkerset.x-k8s.io/leaderworkerset" in self.frameworks


def default_namespace_selector(namespace: str) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", namespace]}
        ]
    }


def _valid_label_value(value: str) -> bool:
    return (
        len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value) is not None
    )


def parse_config(data: Any, source: str = "<config>") -> Configuration:
    """Validate and default a v1beta1 Configuration given as a dict; ConfigError lists every problem."""
    if data is None:
        data = {}
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError(source, ["the file must hold one YAML object (a Configuration)"])
    if data.get("apiVersion") == API_VERSION_V1BETA2:
        data = _from_v1beta2(data, problems)
    elif data.get("apiVersion", API_VERSION) != API_VERSION:
        problems.append(
            f'apiVersion: must be "{API_VERSION}" or "{API_VERSION_V1BETA2}", got {data.get("apiVersion")!r}'
        )
    if data.get("kind", KIND) != KIND:
        problems.append(f'kind: must be "{KIND}", got {data.get("kind")!r}')
    _check(data, SCHEMA, "", problems)
    if problems:
        raise ConfigError(source, problems)

    warnings: list[str] = []
    namespace = data.get("namespace") or DEFAULT_NAMESPACE

    wait_for_pods_ready = _parse_wait_for_pods_ready(data, problems)

    integrations = data.get("integrations") or {}
    frameworks = _parse_frameworks(integrations, problems, warnings)

    fair_sharing = _parse_fair_sharing(data, problems)
    admission_fair_sharing = _parse_admission_fair_sharing(data, problems)
    workload_retention = _parse_workload_retention(data, problems)
    tls, tls_problems = parse_tls_options(data.get("tls"))
    problems.extend(tls_problems)
    visibility_bind_address = _parse_visibility_server(data, problems)
    requests = _parse_resources(data, problems)

    client = data.get("clientConnection") or {}
    qps, burst = float(client.get("qps", DEFAULT_QPS)), int(client.get("burst", DEFAULT_BURST))
    if qps <= 0 or burst <= 0:
        problems.append("clientConnection: qps and burst must be greater than 0")

    multikueue = _parse_multikueue(data, problems)

    selector = data.get("managedJobsNamespaceSelector") or default_namespace_selector(namespace)
    leader_election = _parse_leader_election(data, namespace, problems)
    webhook = _parse_webhook(data, problems)
    gates = DEFAULT_GATES
    try:
        gates = features.build(data.get("featureGates") or {})
    except FeatureGateError as e:
        problems.append(f"featureGates: {e}")
    warnings.extend(gates.warnings())
    if problems:
        raise ConfigError(source, problems)
    return Configuration(
        namespace=namespace,
        manage_jobs_without_queue_name=bool(data.get("manageJobsWithoutQueueName", False)),
        managed_jobs_namespace_selector=selector,
        wait_for_pods_ready=wait_for_pods_ready,
        frameworks=frameworks,
        external_frameworks=tuple(integrations.get("externalFrameworks") or ()),
        label_keys_to_copy=tuple(integrations.get("labelKeysToCopy") or ()),
        fair_sharing=fair_sharing,
        admission_fair_sharing=admission_fair_sharing,
        workload_retention=workload_retention,
        tls=tls,
        visibility_bind_address=visibility_bind_address,
        requests=requests,
        qps=qps,
        burst=burst,
        multikueue=multikueue,
        feature_gates=dict(gates.overrides),
        features=gates,
        metrics_bind_address=(data.get("metrics") or {}).get("bindAddress") or DEFAULT_METRICS_BIND_ADDRESS,
        health_probe_bind_address=(data.get("health") or {}).get("healthProbeBindAddress")
        or DEFAULT_HEALTH_PROBE_BIND_ADDRESS,
        warnings=tuple(warnings),
        **leader_election,
        **webhook,
    )


# Fields v1beta2 removed (dotted paths): a v1beta2 file that sets one is refused, as upstream's
# strict decoding refuses an unknown field.
V1BETA1_ONLY = ("fairSharing.enable", "waitForPodsReady.enable", "queueVisibility", "integrations.podOptions")


def _from_v1beta2(data: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """A v1beta2 Configuration in v1beta1's shape, with v1beta2's meaning: `fairSharing` present
    turns fair sharing on; `waitForPodsReady` is on whether present or not (30m timeout,
    `blockAdmission: false`, `recoveryTimeout` = the timeout) unless the DisableWaitForPodsReady
    gate is set."""
    out = copy.deepcopy(data)
    out["apiVersion"] = API_VERSION
    for dotted in V1BETA1_ONLY:
        parent_key, _, key = dotted.rpartition(".")
        parent = out.get(parent_key) if parent_key else out
        if isinstance(parent, dict) and key in parent:
            problems.append(f"{dotted}: unknown field in {API_VERSION_V1BETA2} (it is a {API_VERSION} field)")
    if isinstance(out.get("fairSharing"), dict):
        out["fairSharing"]["enable"] = True
    gates = out.get("featureGates") or {}
    if gates.get("DisableWaitForPodsReady") is not True:
        wfpr = out.get("waitForPodsReady")
        wfpr = dict(wfpr) if isinstance(wfpr, dict) else {}
        wfpr["enable"] = True
        wfpr.setdefault("timeout", V1BETA2_PODS_READY_TIMEOUT)
        wfpr.setdefault("blockAdmission", False)
        wfpr.setdefault("recoveryTimeout", wfpr["timeout"])
        out["waitForPodsReady"] = wfpr
    else:
        out.pop("waitForPodsReady", None)
    return out


def _parse_wait_for_pods_ready(data: dict[str, Any], problems: list[str]) -> WaitForPodsReady | None:
    """`waitForPodsReady` with its requeuing strategy (None unless enabled)."""
    wfpr_raw = data.get("waitForPodsReady") or {}
    wait_for_pods_ready = None
    if wfpr_raw.get("enable", False):
        timeout = parse_duration(wfpr_raw.get("timeout", "5m"))
        if timeout <= 0:
            problems.append("waitForPodsReady.timeout: must be greater than 0")
        rs_raw = wfpr_raw.get("requeuingStrategy") or {}
        timestamp = rs_raw.get("timestamp", "Eviction")
        if timestamp not in ("Eviction", "Creation"):
            problems.append(
                "waitForPodsReady.requeuingStrategy.timestamp: "
                f'must be "Eviction" or "Creation", got {timestamp!r}'
            )
        for key in ("backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"):
            if rs_raw.get(key, 0) < 0:
                problems.append(
                    f"waitForPodsReady.requeuingStrategy.{key}: must be greater than or equal to 0"
                )
        recovery = wfpr_raw.get("recoveryTimeout")
        wait_for_pods_ready = WaitForPodsReady(
            timeout_seconds=timeout,
            block_admission=wfpr_raw.get("blockAdmission", True),
            recovery_timeout_seconds=parse_duration(recovery) if recovery is not None else None,
            requeuing=RequeuingStrategy(
                timestamp=timestamp,
                backoff_limit_count=rs_raw.get("backoffLimitCount"),
                backoff_base_seconds=rs_raw.get("backoffBaseSeconds", DEFAULT_BACKOFF_BASE_SECONDS),
                backoff_max_seconds=rs_raw.get("backoffMaxSeconds", DEFAULT_BACKOFF_MAX_SECONDS),
            ),
        )
    return wait_for_pods_ready


def _parse_frameworks(
    integrations: dict[str, Any], problems: list[str], warnings: list[str]
) -> tuple[str, ...]:
    """`integrations.frameworks` (defaulted), each known and once; warnings for what is ignored."""
    frameworks = tuple(integrations.get("frameworks") or DEFAULT_FRAMEWORKS)
    seen: set[str] = set()
    for i, name in enumerate(frameworks):
        if name in seen:
            problems.append(f'integrations.frameworks[{i}]: duplicate framework "{name}"')
        seen.add(name)
        if name not in KNOWN_FRAMEWORKS:
            hint = difflib.get_close_matches(name, sorted(KNOWN_FRAMEWORKS), n=1)
            problems.append(
                f'integrations.frameworks[{i}]: unknown framework "{name}"'
                + (f' (did you mean "{hint[0]}"?)' if hint else "")
            )
        elif name not in SUPPORTED_FRAMEWORKS:
            warnings.append(
                f'integrations.frameworks: "{name}" is not implemented by this agent and is ignored'
            )
    if "podOptions" in integrations:
        warnings.append("integrations.podOptions is deprecated and ignored; use managedJobsNamespaceSelector")
    return frameworks


def _parse_fair_sharing(data: dict[str, Any], problems: list[str]) -> FairSharing | None:
    """`fairSharing` with its preemption strategies (None unless enabled)."""
    fair_sharing = None
    fs_raw = data.get("fairSharing") or {}
    if fs_raw.get("enable", False):
        strategies = tuple(fs_raw.get("preemptionStrategies") or DEFAULT_FAIR_SHARING_STRATEGIES)
        if strategies not in ALLOWED_FAIR_SHARING_STRATEGIES:
            allowed = "; ".join("[" + ", ".join(s) + "]" for s in ALLOWED_FAIR_SHARING_STRATEGIES)
            problems.append(
                f"fairSharing.preemptionStrategies: must be one of {allowed}, got {list(strategies)}"
            )
        fair_sharing = FairSharing(strategies)
    return fair_sharing


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() of a whole number of nanoseconds ("1h0m0s", "-5m0s", "1.5s")."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign, nanos = ("-" if nanos < 0 else ""), abs(nanos)
    if nanos < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if nanos >= size or unit == "ns":
                return sign + _go_fraction(nanos, size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    text = _go_fraction(rest, 10**9) + "s"
    if hours or minutes:
        text = f"{minutes}m" + text
    if hours:
        text = f"{hours}h" + text
    return sign + text


def _go_fraction(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def _go_json_float(value: float) -> str:
    """encoding/json's form of a float64 (-1, -0.5, 1e-07)."""
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    if 1e-6 <= abs(value) < 1e21:
        return format(decimal.Decimal(repr(value)), "f")
    mantissa, _, exponent = repr(value).partition("e")
    return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0')}"


def _parse_admission_fair_sharing(data: dict[str, Any], problems: list[str]) -> AdmissionFairSharing | None:
    """`admissionFairSharing` defaulted and validated as upstream's (pkg/config/validation.go,
    with its messages: the usageSamplingInterval message shows usageHalfLifeTime's value, as
    upstream's does)."""
    raw = data.get("admissionFairSharing")
    if raw is None:
        return None
    half_life = parse_duration(raw.get("usageHalfLifeTime", "0s"))
    sampling = parse_duration(raw.get("usageSamplingInterval", "0s")) or DEFAULT_AFS_SAMPLING_INTERVAL
    weights = {name: float(w) for name, w in (raw.get("resourceWeights") or {}).items()}
    path = "admissionFairSharing"
    if half_life < 0:
        problems.append(
            f'{path}.usageHalfLifeTime: Invalid value: "{go_duration(half_life)}": '
            "must be greater than or equal to 0"
        )
    if sampling <= 0:
        problems.append(
            f'{path}.usageSamplingInterval: Invalid value: "{go_duration(half_life)}": must be greater than 0'
        )
    weights_json = "{" + ",".join(f'"{n}":{_go_json_float(w)}' for n, w in sorted(weights.items())) + "}"
    for name, weight in sorted(weights.items()):
        if weight < 0:
            problems.append(
                f"{path}.resourceWeights[{name}]: Invalid value: {weights_json}: "
                "must be greater than or equal to 0"
            )
    return AdmissionFairSharing(half_life, sampling, weights)


def _parse_workload_retention(data: dict[str, Any], problems: list[str]) -> WorkloadRetention:
    """`objectRetentionPolicies.workloads`: durations of 0 or more (0 deletes at once)."""
    raw = (data.get("objectRetentionPolicies") or {}).get("workloads") or {}
    seconds: dict[str, float | None] = {}
    for key in ("afterFinished", "afterDeactivatedByKueue"):
        text = raw.get(key)
        seconds[key] = None if text is None else parse_duration(text)
        if seconds[key] is not None and seconds[key] < 0:
            problems.append(
                f'objectRetentionPolicies.workloads.{key}: Invalid value: "{text}": '
                "must be greater than or equal to 0"
            )
    return WorkloadRetention(seconds["afterFinished"], seconds["afterDeactivatedByKueue"])


def _parse_visibility_server(data: dict[str, Any], problems: list[str]) -> str | None:
    """`visibilityServer` (bindAddress, an IP, default every address; bindPort, default 8082)."""
    raw = data.get("visibilityServer")
    if raw is None:
        return None
    host, port = raw.get("bindAddress"), raw.get("bindPort", 8082)
    if host is not None:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            problems.append(
                f'visibilityServer.bindAddress: Invalid value: "{host}": must be a valid IP address'
            )
    if not 1 <= port <= 65535:
        problems.append(
            f"visibilityServer.bindPort: Invalid value: {port}: must be a valid port number (1-65535)"
        )
    if host and ":" in host:
        host = f"[{host}]"
    return f"{host or ''}:{port}"


def _parse_resources(data: dict[str, Any], problems: list[str]) -> RequestConfig:
    """`resources.transformations`, each input once (the defaults when there are problems)."""
    resources = data.get("resources") or {}
    inputs: set[str] = set()
    for i, t in enumerate(resources.get("transformations") or []):
        if "input" not in t:
            problems.append(f"resources.transformations[{i}].input: required")
            continue
        if t["input"] in inputs:
            problems.append(f'resources.transformations[{i}].input: duplicate input "{t["input"]}"')
        inputs.add(t["input"])
        if t.get("strategy", "Retain") not in ("Retain", "Replace"):
            problems.append(f'resources.transformations[{i}].strategy: must be "Retain" or "Replace"')
    requests = RequestConfig()
    if not problems:
        try:
            requests = RequestConfig.from_dict(resources)
        except ValueError as e:
            problems.append(f"resources.transformations: {e}")
    return requests


def _parse_multikueue(data: dict[str, Any], problems: list[str]) -> MultiKueueSettings:
    """`multiKueue` with v1beta1 defaults."""
    mk_raw = data.get("multiKueue") or {}
    multikueue = MultiKueueSettings(
        gc_interval_seconds=parse_duration(mk_raw.get("gcInterval", "1m")),
        origin=mk_raw.get("origin", DEFAULT_MULTIKUEUE_ORIGIN),
        worker_lost_timeout_seconds=parse_duration(mk_raw.get("workerLostTimeout", "15m")),
        dispatcher_name=mk_raw.get("dispatcherName", DEFAULT_MULTIKUEUE_DISPATCHER),
        incremental_step_size=int((mk_raw.get("incrementalDispatcherConfig") or {}).get("stepSize", 3)),
        cluster_profile=dict(mk_raw.get("clusterProfile") or {}),
    )
    if mk_raw.get("incrementalDispatcherConfig") is not None:
        if multikueue.dispatcher_name != api.DISPATCHER_INCREMENTAL:
            problems.append(
                "multiKueue.incrementalDispatcherConfig: may only be set when dispatcherName is "
                f"{api.DISPATCHER_INCREMENTAL!r}"
            )
        if multikueue.incremental_step_size < 1:
            problems.append(
                "multiKueue.incrementalDispatcherConfig.stepSize: must be greater than or equal to 1"
            )
    if multikueue.gc_interval_seconds < 0:
        problems.append("multiKueue.gcInterval: must be greater than or equal to 0")
    if multikueue.worker_lost_timeout_seconds < 0:
        problems.append("multiKueue.workerLostTimeout: must be greater than or equal to 0")
    if not multikueue.origin or not _valid_label_value(multikueue.origin):
        problems.append(f"multiKueue.origin: {multikueue.origin!r} is not a valid label value")
    return multikueue


def _parse_leader_election(data: dict[str, Any], namespace: str, problems: list[str]) -> dict[str, Any]:
    """`leaderElection` with v1beta1 defaults, as Configuration's keyword arguments."""
    le_raw = data.get("leaderElection") or {}

    def duration(key: str, default: str) -> float:
        # A zero duration is defaulted as a missing one, as upstream's defaulting does (a
        # Configuration marshalled from Go, as upstream's e2e suites write it, has "0s" for unset ones).
        return parse_duration(le_raw.get(key) or "0s") or parse_duration(default)

    leader_election = {
        "leader_elect": bool(le_raw.get("leaderElect", True)),
        "leader_election_id": le_raw.get("resourceName") or DEFAULT_LEADER_ELECTION_ID,
        "leader_election_namespace": le_raw.get("resourceNamespace") or namespace,
        "lease_duration_seconds": duration("leaseDuration", "15s"),
        "renew_deadline_seconds": duration("renewDeadline", "10s"),
        "retry_period_seconds": duration("retryPeriod", "2s"),
    }
    if not (
        leader_election["lease_duration_seconds"]
        > leader_election["renew_deadline_seconds"]
        > leader_election["retry_period_seconds"]
        > 0
    ):
        problems.append("leaderElection: leaseDuration > renewDeadline > retryPeriod > 0 must hold")
    return leader_election


def _parse_webhook(data: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """`webhook` {port, host, certDir} and `internalCertManagement` {enable, webhookServiceName,
    webhookSecretName}, with v1beta1 defaults."""
    raw = data.get("webhook") or {}
    certs = data.get("internalCertManagement") or {}
    port = raw.get("port", DEFAULT_WEBHOOK_PORT)
    if not 0 <= port <= 65535:
        problems.append(f"webhook.port: must be between 0 and 65535, got {port}")
    cert_dir = raw.get("certDir") or DEFAULT_WEBHOOK_CERT_DIR
    service = certs.get("webhookServiceName") or DEFAULT_WEBHOOK_SERVICE_NAME
    secret = certs.get("webhookSecretName") or DEFAULT_WEBHOOK_SECRET_NAME
    if not _valid_dns_label(service):
        problems.append(f"internalCertManagement.webhookServiceName: {service!r} is not a valid Service name")
    if not _valid_dns_subdomain(secret):
        problems.append(f"internalCertManagement.webhookSecretName: {secret!r} is not a valid Secret name")
    return {
        "webhook_port": port,
        "webhook_host": raw.get("host") or "",
        "webhook_cert_dir": cert_dir,
        "internal_cert_management": bool(certs.get("enable", True)),
        "webhook_service_name": service,
        "webhook_secret_name": secret,
    }


def _valid_dns_label(value: str) -> bool:
    return len(value) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value) is not None


def _valid_dns_subdomain(value: str) -> bool:
    label = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    return len(value) <= 253 and re.fullmatch(rf"{label}(\.{label})*", value) is not None


def with_feature_gate_flag(config: Configuration, flag: str | None) -> Configuration:
    """Apply `--feature-gates Name=true,...` (upstream's manager flag) to a loaded configuration."""
    if not flag:
        return config
    try:
        gates = features.build(features.merge(config.feature_gates, features.parse_flag(flag)))
    except FeatureGateError as e:
        raise ConfigError("--feature-gates", [str(e)]) from e
    warnings = tuple(w for w in config.warnings if not w.startswith("featureGates:"))
    return dataclasses.replace(
        config,
        feature_gates=dict(gates.overrides),
        features=gates,
        warnings=warnings + tuple(gates.warnings()),
    )


def load_config(
    path: str | Path | None, parse: Callable[[Any, str], Configuration] | None = None
) -> Configuration:
    """Read and validate the file given with --config; no file means all defaults. `parse` is the
    role's parser (the manager defaults a few fields differently), `parse_config` by default."""
    parse = parse or parse_config
    if path is None:
        # Upstream v0.19 defaults a missing file as a v1beta2 Configuration (waitForPodsReady on).
        return parse({"apiVersion": API_VERSION_V1BETA2, "kind": KIND}, "<defaults>")
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(source, [f"cannot read the file: {e.strerror}"]) from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(source, [f"not valid YAML: {e}"]) from e
    return parse(data, source)
