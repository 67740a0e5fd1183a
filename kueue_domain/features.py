"""Kueue's feature gates, with upstream v0.19.x names, defaults and stages, in one registry that
both processes read (docs/feature-gates.md is the same table for people).

A gate is set in the Configuration's `featureGates` map or with `--feature-gates Name=true,...`
(upstream's manager accepts either, not both). A name upstream v0.19 does not know is refused; so
is a locked gate set away from its default. A known gate we do not implement is accepted and left
at upstream's default; setting it to the other value gives a start-up warning, because then our
behaviour differs from what the user asked for.

`honoured` says where a gate is read; an empty string means we do not implement a switch for it
(the behaviour is either upstream's default one, fixed, or absent: `behaviour` says which).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ALPHA = "Alpha"
BETA = "Beta"
GA = "GA"
DEPRECATED = "Deprecated"

# What we do for a gate we have no switch for.
FIXED_AT_DEFAULT = "fixed"  # we always behave as upstream does with the default value
ABSENT = "absent"  # the feature is not implemented (the default-off behaviour, or out of scope)


@dataclass(frozen=True)
class Gate:
    name: str
    default: bool  # upstream v0.19.x default
    stage: str
    locked: bool = False  # LockToDefault upstream: any other value is refused
    honoured: str = ""  # where we read it; "" when we have no switch for it
    behaviour: str = FIXED_AT_DEFAULT  # for a gate without a switch
    effect: str = ""  # what it changes that a user can see (docs/feature-gates.md)

    @property
    def implemented(self) -> bool:
        return bool(self.honoured)


# Gate names the code reads (every other name below is only validated and documented).
UNADMITTED_WORKLOADS_OBSERVABILITY = "UnadmittedWorkloadsObservability"
LOCAL_QUEUE_METRICS = "LocalQueueMetrics"
METRICS_FOR_COHORTS = "MetricsForCohorts"
METRIC_FOR_WORKLOAD_CREATION_LATENCY = "MetricForWorkloadCreationLatency"
VISIBILITY_ON_DEMAND = "VisibilityOnDemand"
LOCAL_QUEUE_DEFAULTING = "LocalQueueDefaulting"
WORKLOAD_PRIORITY_CLASS_DEFAULTING = "WorkloadPriorityClassDefaulting"
PARTIAL_ADMISSION = "PartialAdmission"
MULTIKUEUE = "MultiKueue"
MULTIKUEUE_CLUSTER_PROFILE = "MultiKueueClusterProfile"
MULTIKUEUE_KUBECONFIG_PATH_VALIDATION = "MultiKueueKubeConfigPathValidation"
MULTIKUEUE_INCREMENTAL_DISPATCHER_CONFIG = "MultiKueueIncrementalDispatcherConfig"
MULTIKUEUE_INCREMENTAL_DISPATCHER_RESPECT_CONFIG_ORDER = "MultiKueueIncrementalDispatcherRespectConfigOrder"
MULTIKUEUE_MANAGER_QUOTA_AUTOMATION = "MultiKueueManagerQuotaAutomation"
SCHEDULING_EQUIVALENCE_HASHING = "SchedulingEquivalenceHashing"
LWS_IMMUTABLE_GROUP_SIZE = "LWSImmutableGroupSize"
CLEANUP_PROVISIONING_REQUESTS_ON_EVICTION = "CleanupProvisioningRequestsOnEviction"
SCHEDULER_LONG_REQUEUE_INTERVAL = "SchedulerLongRequeueInterval"
ASSIGN_QUEUE_LABELS_FOR_PODS = "AssignQueueLabelsForPods"
FAIR_SHARING_PRIORITIZE_NON_BORROWING = "FairSharingPrioritizeNonBorrowing"
ADMISSION_FAIR_SHARING = "AdmissionFairSharing"

_AGENT = "worker_agent"
_MANAGER = "manager"

# Upstream v0.19.x: pkg/features/kube_features.go on the release line (the last versioned spec of
# each gate, which is the one a v0.19 binary applies). Sorted by name.
GATES: dict[str, Gate] = {
    g.name: g
    for g in (
        Gate(
            ADMISSION_FAIR_SHARING,
            True,
            BETA,
            honoured=f"{_AGENT}: queues, scheduler, LocalQueue status",
            effect="with the Configuration's admissionFairSharing: LocalQueue usage decayed into "
            "status.fairSharing.admissionFairSharingStatus; a UsageBasedAdmissionFairSharing "
            "ClusterQueue admits from the LocalQueue with the lowest usage first",
        ),
        Gate("AdmissionGatedBy", True, BETA, effect="the kueue.x-k8s.io/admission-gated-by annotation"),
        Gate(
            ASSIGN_QUEUE_LABELS_FOR_PODS,
            True,
            BETA,
            honoured=f"{_AGENT}: job start",
            effect="kueue.x-k8s.io/local-queue-name and cluster-queue-name labels on the pods Kueue starts",
        ),
        Gate(
            CLEANUP_PROVISIONING_REQUESTS_ON_EVICTION,
            True,
            BETA,
            honoured=f"{_AGENT}: the provisioning-request admission check",
            effect="an evicted Workload's ProvisioningRequests are deleted",
        ),
        Gate("ConcurrentAdmission", False, ALPHA, behaviour=ABSENT),
        Gate("CustomMetricLabels", False, ALPHA, behaviour=ABSENT),
        Gate("DeferRayServiceFinalizationForRedisCleanup", True, BETA, behaviour=ABSENT),
        Gate(
            "DisableWaitForPodsReady",
            False,
            ALPHA,
            honoured="both processes: a v1beta2 Configuration",
            effect="waitForPodsReady off in a v1beta2 Configuration (or with no file)",
        ),
        Gate("ElasticJobsViaWorkloadSlices", True, BETA, behaviour=ABSENT, effect="elastic Jobs"),
        Gate("ElasticJobsViaWorkloadSlicesWithTAS", False, ALPHA, behaviour=ABSENT),
        Gate("FailureRecoveryPolicy", False, ALPHA, behaviour=ABSENT),
        Gate("FairSharingPreemptWithinNominal", True, BETA, effect="fair-sharing preemption"),
        Gate(
            FAIR_SHARING_PRIORITIZE_NON_BORROWING,
            True,
            BETA,
            honoured=f"{_AGENT}: scheduler",
            effect="fair-sharing admission order: a workload whose subtree does not borrow on the "
            "flavors it requests goes first, at every cohort level, before the shares are compared",
        ),
        Gate("FastQuotaReleaseInPodIntegration", False, ALPHA, behaviour=ABSENT),
        Gate("FinishOrphanedWorkloads", True, BETA, effect="Workloads whose owner is gone are finished"),
        Gate("FlavorFungibility", True, BETA, effect="flavorFungibility in ClusterQueues"),
        Gate("HierarchicalCohorts", True, GA, locked=True, effect="Cohort objects with parents"),
        Gate("KueueDRAIntegration", True, BETA, behaviour=ABSENT, effect="DRA quota"),
        Gate("KueueDRAIntegrationConsumableCapacity", False, ALPHA, behaviour=ABSENT),
        Gate("KueueDRAIntegrationExtendedResource", True, BETA, behaviour=ABSENT),
        Gate("KueueDRAIntegrationPartitionableDevices", True, BETA, behaviour=ABSENT),
        Gate("KueueDRARejectWorkloadsWhenDRADisabled", True, BETA, behaviour=ABSENT),
        Gate(
            LOCAL_QUEUE_DEFAULTING,
            True,
            BETA,
            honoured=f"{_AGENT}: webhooks",
            effect="queue-name `default` on jobs in a namespace with a LocalQueue `default`",
        ),
        Gate(
            LOCAL_QUEUE_METRICS,
            True,
            BETA,
            honoured=f"{_AGENT}: metrics",
            effect="the kueue_local_queue_* metrics",
        ),
        Gate("ManagedJobsNamespaceSelectorAlwaysRespected", True, GA, locked=True),
        Gate(
            METRIC_FOR_WORKLOAD_CREATION_LATENCY,
            True,
            BETA,
            honoured=f"{_AGENT}: metrics",
            effect="the kueue_workload_creation_latency_seconds metric",
        ),
        Gate(
            METRICS_FOR_COHORTS,
            True,
            BETA,
            honoured=f"{_AGENT}: metrics",
            effect="the kueue_cohort_info and kueue_cluster_queue_info metrics",
        ),
        Gate(
            MULTIKUEUE,
            True,
            BETA,
            honoured=f"{_AGENT}: Job webhook; {_MANAGER}",
            effect="MultiKueue: the manager's controllers, spec.managedBy on Jobs",
        ),
        Gate("MultiKueueAdaptersForCustomJobs", True, BETA, behaviour=ABSENT),
        Gate("MultiKueueAllowInsecureKubeconfigs", False, DEPRECATED, locked=True),
        Gate(
            MULTIKUEUE_CLUSTER_PROFILE,
            False,
            ALPHA,
            honoured=_MANAGER,
            effect="MultiKueueCluster spec.clusterSource.clusterProfileRef",
        ),
        Gate(
            MULTIKUEUE_INCREMENTAL_DISPATCHER_CONFIG,
            True,
            BETA,
            honoured=_MANAGER,
            effect="multiKueue.incrementalDispatcherConfig.stepSize (3 when off)",
        ),
        Gate(
            MULTIKUEUE_INCREMENTAL_DISPATCHER_RESPECT_CONFIG_ORDER,
            True,
            BETA,
            honoured=_MANAGER,
            effect="Incremental dispatcher order: MultiKueueConfig order (alphabetical when off)",
        ),
        Gate(
            MULTIKUEUE_KUBECONFIG_PATH_VALIDATION,
            False,
            ALPHA,
            honoured=_MANAGER,
            effect="locationType: Path must be under /etc/multikueue/kubeconfigs/",
        ),
        Gate(
            MULTIKUEUE_MANAGER_QUOTA_AUTOMATION,
            False,
            ALPHA,
            honoured=_MANAGER,
            effect="MultiKueueConfig quotaManagement: Automated sums the workers' quotas into the "
            "manager ClusterQueue (its MultiKueueManagerQuotaAutomation condition)",
        ),
        Gate("MultiKueueOrchestratedPreemption", False, ALPHA, behaviour=ABSENT),
        Gate(
            "MultiKueueRemoteSpecSync",
            True,
            BETA,
            effect="a RayService's serveConfigV2 edited on the manager goes to its worker copy in place",
        ),
        Gate("MultiKueueRedoAdmissionOnEvictionInWorker", True, GA, locked=True),
        Gate("MultiKueueWaitForWorkloadAdmitted", True, GA, locked=True),
        Gate(
            "ObjectRetentionPolicies",
            True,
            GA,
            locked=True,
            effect="objectRetentionPolicies.workloads: afterFinished, afterDeactivatedByKueue",
        ),
        Gate(
            PARTIAL_ADMISSION,
            True,
            BETA,
            honoured=f"{_AGENT}: scheduler",
            effect="Jobs with kueue.x-k8s.io/job-min-parallelism admitted with fewer pods",
        ),
        Gate("PriorityBoost", False, ALPHA, behaviour=ABSENT),
        Gate("PrioritySortingWithinCohort", True, BETA, effect="queue ordering across a cohort"),
        Gate("PropagateBatchJobLabelsToWorkload", True, GA, locked=True),
        Gate("QuotaCheckStrategy", True, BETA, effect="resources.quotaCheckStrategy"),
        Gate("ReclaimablePods", True, BETA, effect="status.reclaimablePods frees quota"),
        Gate("RejectUpdatesToCQWithInvalidOnFlavors", False, ALPHA, behaviour=ABSENT),
        Gate("RemoveFinalizersWithStrictPatch", True, BETA),
        Gate("SchedulerLibraryIntegration", False, ALPHA, behaviour=ABSENT),
        Gate(
            SCHEDULER_LONG_REQUEUE_INTERVAL,
            False,
            ALPHA,
            honoured=f"{_AGENT}: scheduler",
            effect="parked Workloads retried 10 s after a change instead of 1 s",
        ),
        Gate("SchedulerTimestampPreemptionBuffer", False, ALPHA, behaviour=ABSENT),
        Gate(
            SCHEDULING_EQUIVALENCE_HASHING,
            True,
            BETA,
            effect="equivalent workloads skipped after one fails to fit",
        ),
        Gate("ShortWorkloadNames", False, ALPHA, behaviour=ABSENT),
        Gate("SkipFinalizersForPodsSuspendedByParent", True, GA, locked=True),
        Gate("SkipReassignmentForPodOwnedWorkloads", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("SparkApplicationIntegration", False, ALPHA, behaviour=ABSENT),
        Gate("TASAssignmentsEncodingByHostnamePrefix", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASBalancedPlacement", False, ALPHA, behaviour=ABSENT),
        Gate("TASCacheNodeMatchResults", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASCachingRemainingResources", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASFailedNodeReplacement", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASFailedNodeReplacementFailFast", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASHandleOverlappingFlavors", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASMultiLayerTopology", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASProfileMixed", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASRecomputeAssignmentWithinSchedulingCycle", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASReplaceNodeDueToNotReadyOverFixedTime", False, DEPRECATED, behaviour=ABSENT),
        Gate("TASReplaceNodeOnNodeTaints", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASReplaceNodeOnPodTermination", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate("TASRespectNodeAffinityPreferred", False, ALPHA, behaviour=ABSENT),
        Gate(
            "TLSOptions",
            True,
            BETA,
            honoured="both processes: webhook, metrics and visibility servers",
            effect="the Configuration's tls (minVersion, cipherSuites, curvePreferences)",
        ),
        Gate("TopologyAwareScheduling", True, BETA, behaviour=ABSENT, effect="TAS"),
        Gate(
            "UnadmittedWorkloadsExplicitStatus",
            False,
            BETA,
            behaviour=ABSENT,
            effect="QuotaReserved/Admitted=False written on a new Workload",
        ),
        Gate(
            UNADMITTED_WORKLOADS_OBSERVABILITY,
            False,
            BETA,
            honoured=f"{_AGENT}: scheduler, Workload controller",
            effect="granular QuotaReserved=False reasons (WaitingForQuota, NoMatchingFlavor, ...); "
            "off: Pending and Inadmissible",
        ),
        Gate(
            "ValidateRayAndSparkJobUpdates",
            True,
            BETA,
            honoured=f"{_AGENT}: webhooks",
            effect="a RayJob or RayCluster that had a queue name is validated on update",
        ),
        Gate("VectorizedResourceRequests", True, BETA, effect="internal (no visible change)"),
        Gate(
            VISIBILITY_ON_DEMAND,
            True,
            BETA,
            honoured=f"{_AGENT}: visibility API server",
            effect="the visibility API server (pending workloads, docs/visibility.md)",
        ),
        Gate("WorkloadIdentifierAnnotations", True, BETA, effect="prebuilt-workload-name as an annotation"),
        Gate(
            WORKLOAD_PRIORITY_CLASS_DEFAULTING,
            False,
            ALPHA,
            honoured=f"{_AGENT}: webhooks",
            effect="priority-class `default` on jobs when a WorkloadPriorityClass `default` exists",
        ),
        Gate("WorkloadRequestUseMergePatch", False, ALPHA, behaviour=ABSENT),
        # Not a v0.19 gate (upstream adds it in v0.20, on); kept so the LWS webhook's size check
        # can be switched off as in v0.20.
        Gate(
            LWS_IMMUTABLE_GROUP_SIZE,
            True,
            "Beta (v0.20)",
            honoured=f"{_AGENT}: LeaderWorkerSet webhook",
            effect="spec.leaderWorkerTemplate.size immutable on a managed LeaderWorkerSet",
        ),
    )
}


class FeatureGateError(ValueError):
    """A `featureGates` map or `--feature-gates` value that cannot be applied."""


def parse_flag(value: str) -> dict[str, bool]:
    """`Name=true,Other=false` as upstream's `--feature-gates` accepts it (spaces around items are
    ignored; values are Go booleans)."""
    gates: dict[str, bool] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep:
            raise FeatureGateError(f"missing bool value for {name}")
        parsed = _go_bool(raw.strip())
        if parsed is None:
            raise FeatureGateError(f"invalid value of {name}={raw.strip()}, must be true or false")
        gates[name] = parsed
    return gates


def _go_bool(raw: str) -> bool | None:
    if raw in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if raw in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


@dataclass(frozen=True)
class FeatureGates:
    """The effective gates: upstream's defaults with the user's settings applied."""

    overrides: Mapping[str, bool]

    def enabled(self, name: str) -> bool:
        gate = GATES.get(name)
        if gate is None:
            raise KeyError(f"feature gate {name} is not in kueue_domain.features.GATES")
        return bool(self.overrides.get(name, gate.default))

    def warnings(self) -> list[str]:
        """Settings we accept but cannot honour."""
        out = []
        for name, value in sorted(self.overrides.items()):
            gate = GATES[name]
            if gate.implemented or value == gate.default:
                continue
            if gate.behaviour == ABSENT:
                what = "this feature is not implemented here"
            else:
                what = f"we always behave as upstream does with {name}={str(gate.default).lower()}"
            out.append(f"featureGates: {name}={str(value).lower()} is not honoured: {what}")
        return out


DEFAULT_GATES = FeatureGates({})


def build(overrides: Mapping[str, object] | None) -> FeatureGates:
    """Validate the user's settings; every problem is listed in one error."""
    problems = []
    clean: dict[str, bool] = {}
    for name, value in (overrides or {}).items():
        gate = GATES.get(name)
        if gate is None:
            problems.append(f"unrecognized feature gate: {name}")
            continue
        if not isinstance(value, bool):
            problems.append(f"invalid value of {name}={value!r}, must be true or false")
            continue
        if gate.locked and value != gate.default:
            problems.append(
                f"cannot set feature gate {name} to {str(value).lower()}, "
                f"feature is locked to {str(gate.default).lower()}"
            )
            continue
        clean[name] = value
    if problems:
        raise FeatureGateError("; ".join(problems))
    return FeatureGates(clean)


def merge(from_config: Mapping[str, bool], from_flag: Mapping[str, bool]) -> Mapping[str, bool]:
    """Upstream's manager takes gates from the flag or from the Configuration, not both."""
    if from_config and from_flag:
        raise FeatureGateError(
            "feature gates are set both with --feature-gates and in the Configuration's featureGates: "
            "use one of them"
        )
    return from_flag or from_config


def table(gates: Iterable[Gate] | None = None) -> list[Gate]:
    return sorted(gates if gates is not None else GATES.values(), key=lambda g: g.name)
