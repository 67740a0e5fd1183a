"""The specs of upstream Kueue's MultiKueue e2e suites (KUEUE_VERSION of hack/versions.env) and which of
them apply to kueue-federation, with the reason for each that does not. Pure: no I/O.

A spec is named by its suite and its own text (ginkgo's `It`); `make conformance` skips the ones that
do not apply (by a `--ginkgo.skip` pattern) and reports them with their reason."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The suite families: upstream's test/e2e/multikueue/* (suites named by their directory, run on a
# manager and two workers), test/e2e/singlecluster/* and test/e2e/sequential/* (named family-directory,
# run on one cluster with our worker_agent as Kueue).
MULTIKUEUE, SINGLECLUSTER, SEQUENTIAL = "multikueue", "singlecluster", "sequential"
FAMILIES = {
    MULTIKUEUE: ("baseline", "extended", "sequential", "dra"),
    SINGLECLUSTER: ("singlecluster-baseline", "singlecluster-extended"),
    SEQUENTIAL: ("sequential-baseline", "sequential-extended"),
}
SUITES = tuple(s for suites in FAMILIES.values() for s in suites)
# What `make conformance` runs unless told (--suites): the sequential family is run on request.
DEFAULT_FAMILIES = (MULTIKUEUE, SINGLECLUSTER)
# The short form, run by `make test`: the suites whose applicable specs need nothing but the fleet.
SHORT_SUITES = ("baseline", "extended")

# Reasons a spec does not apply, one per missing capability.
TAS = "TopologyAwareScheduling is not implemented"
DRA = "DynamicResourceAllocation (ResourceClaimTemplates in Workloads) is not implemented"
# The single-cluster Kubeflow v1 and MPIJob specs: the kinds are integrated (docs/kubeflow.md) and their
# MultiKueue specs pass, but these were not yet run against the single-cluster harness.
KUBEFLOW_V1 = "Kubeflow v1 jobs: not yet run against the single-cluster harness"
MPIJOB = "MPIJob: not yet run against the single-cluster harness"
WORKLOAD_SLICES = "ElasticJobsViaWorkloadSlices (workload slices, elastic jobs) is not implemented"
DOCKER = "the spec edits kind's node through `docker exec`: the fleet runs no containers"
CLUSTER_PROFILE_PLUGIN = "the spec runs a ClusterProfile credentials plugin from a container image"
ORCHESTRATED_PREEMPTION = "MultiKueueOrchestratedPreemption (alpha gate) is not implemented"
# The single-cluster families' reasons.
PROMETHEUS = "an environment limit: it queries a Prometheus server scraping Kueue; the fleet runs none"
METRICS_EXEC = (
    "an environment limit: it reads Kueue's /metrics by exec'ing curl in a pod through the "
    "kueue-controller-manager-metrics-service Service; the fleet's pods are kwok's and reach no Service"
)
CONCURRENT_ADMISSION = (
    "ConcurrentAdmission (alpha gate, on in upstream's e2e Configuration) is not implemented"
)
SPARK = "SparkApplication (spark-operator) is not an integration of ours"
RAY_SERVE_TRAFFIC = (
    "an environment limit: it sends HTTP to the Serve application and expects its answer (Python "
    "code in a Ray container); kwok runs no container (the RayService itself becomes Ready)"
)
REDIS = "an environment limit: it runs a Redis server in a container for GCS fault tolerance; kwok runs none"


@dataclass(frozen=True)
class Spec:
    suite: str
    text: str
    reason: str = ""  # empty: the spec applies

    @property
    def applies(self) -> bool:
        return not self.reason


MULTIKUEUE_SPECS: tuple[Spec, ...] = (
    Spec("baseline", "Should create a pod on worker if admitted"),
    Spec(
        "baseline",
        "Should overwrite the manager Pod's SchedulingGated condition once it runs on the worker",
    ),
    Spec("baseline", "Should create pods on worker if the deployment is admitted"),
    Spec("baseline", "Should sync a StatefulSet to worker if admitted"),
    Spec("baseline", "Should create a pod group on worker if admitted"),
    Spec("baseline", "Should run a job on worker if admitted"),
    Spec(
        "baseline",
        "Should preempt a running low-priority workload when a high-priority workload is admitted "
        "(same worker)",
    ),
    Spec("baseline", "Should re-do admission process when workload gets evicted in the worker"),
    Spec(
        "baseline",
        "Should preempt a running low-priority workload when a high-priority workload is admitted "
        "(other workers)",
    ),
    Spec(
        "baseline",
        "Should preempt a running low-priority workload on a worker when a high-priority workload is "
        "admitted to it by manager",
    ),
    Spec("baseline", "Should allow to mutate kueue.x-k8s.io/priority-class (other workers)"),
    Spec("baseline", "Should keep workload priority event if job reconcile"),
    Spec("baseline", "should allow to run a MultiKueue and a regular Job on the same cluster"),
    Spec("baseline", "should automatically aggregate quotas from active worker ClusterQueues"),
    Spec("baseline", "Should admit a Job and assign topology in the worker cluster", TAS),
    Spec("baseline", "Should handle implicit TAS", TAS),
    Spec("baseline", "Should route a TAS Job with preferred topology to worker1 deterministically", TAS),
    Spec("baseline", "Should admit a TAS Job with required hostname topology", TAS),
    Spec("dra", "Should admit and run a DRA job across MultiKueue clusters", DRA),
    Spec("dra", "Should handle workload when ResourceClaimTemplate is missing on worker", DRA),
    Spec("dra", "Should route DRA job to worker that has ResourceClaimTemplate", DRA),
    Spec("dra", "Should correctly account for DRA resources from multiple pods", DRA),
    Spec("extended", "Should sync a LeaderWorkerSet and run replicas on worker cluster"),
    Spec("extended", "Should dispatch all LeaderWorkerSet workloads to the same worker"),
    Spec("extended", "Should run a jobSet on worker if admitted"),
    Spec("extended", "Should run an appwrapper containing a job on worker if admitted"),
    Spec("extended", "Should run a kubeflow PyTorchJob on worker if admitted"),
    Spec("extended", "Should run a MPIJob on worker if admitted"),
    Spec("extended", "Should run a TrainJob on worker if admitted"),
    Spec("extended", "Should run a RayJob on worker if admitted"),
    Spec("extended", "Should run a RayCluster on worker if admitted"),
    Spec("extended", "Should scale an elastic RayCluster on worker if admitted", WORKLOAD_SLICES),
    Spec("extended", "Should run a RayService on worker if admitted"),
    Spec("sequential", "Should run a job on worker if admitted"),
    Spec("sequential", "Should update the cluster status to reflect the connection state", DOCKER),
    Spec("sequential", "uses ClusterProfile as way to connect worker cluster"),
    Spec(
        "sequential",
        "Should be able to use ClusterProfile as way to connect worker cluster",
        CLUSTER_PROFILE_PLUGIN,
    ),
    Spec("sequential", "should not trigger concurrent preemptions", ORCHESTRATED_PREEMPTION),
)

# The ginkgo labels of the extended suite's operators: its BeforeSuite waits for each operator whose
# label the filter lets through, so the ones we do not run are filtered out by label as well as by name.
# Empty: the fleet runs every operator the suite waits for.
EXTENDED_LABEL_FILTER = ""

# test/e2e/singlecluster/{baseline,extended}: one cluster, our worker_agent as Kueue
# (conformance/singlecluster.py).
SINGLECLUSTER_SPECS: tuple[Spec, ...] = (
    Spec("singlecluster-baseline", "should admit workloads that fits"),
    Spec("singlecluster-baseline", "should admit workloads after change queue-name if AvailableReplicas = 0"),
    Spec("singlecluster-baseline", "when StatefulSet created should admit group that fits"),
    Spec("singlecluster-baseline", "should allow to update the PodTemplate in StatefulSet"),
    Spec("singlecluster-baseline", "should delete all pods on scale down to zero"),
    Spec("singlecluster-baseline", "should create pods after scale up from zero"),
    Spec("singlecluster-baseline", "should allow to scale up after scale down to zero"),
    Spec("singlecluster-baseline", "should allow to change queue name if ReadyReplicas=0"),
    Spec(
        "singlecluster-baseline",
        "should allow to change queue name after scale up from zero (two-phase pattern)",
    ),
    Spec(
        "singlecluster-baseline",
        "should delete all Pods if StatefulSet was deleted after being partially ready",
    ),
    Spec("singlecluster-baseline", "should preempt low-priority StatefulSet"),
    Spec("singlecluster-baseline", "shouldn't delete deactivated Workload"),
    Spec(
        "singlecluster-baseline",
        "should set the workload OnHold on scale-to-zero and clear it on scale-up",
    ),
    Spec("singlecluster-baseline", "Should have resolvable OpenAPI v2 references"),
    Spec(
        "singlecluster-baseline",
        "Kueue v1beta1 when Creating a Job without a matching LocalQueue Should stay in suspended",
    ),
    Spec(
        "singlecluster-baseline",
        "Kueue v1beta1 when Creating a Job With Queueing Should unsuspend a job and set nodeSelectors",
    ),
    Spec(
        "singlecluster-baseline",
        "Should create one Parent Workload and one Variant per flavor",
        CONCURRENT_ADMISSION,
    ),
    Spec(
        "singlecluster-baseline",
        "Should migrate Job to more favorable flavor when its quota becomes available",
        CONCURRENT_ADMISSION,
    ),
    Spec("singlecluster-baseline", "should admit workloads through hierarchical borrowing"),
    Spec("singlecluster-baseline", "should update the ClusterQueue.status.fairSharing.weightedShare"),
    Spec("singlecluster-baseline", "Should create a local queue and list it back"),
    Spec("singlecluster-baseline", "when Single CQ should admit group that fits"),
    Spec("singlecluster-baseline", "Should only admit a complete group"),
    Spec("singlecluster-baseline", "Failed Pod can be replaced in group"),
    Spec("singlecluster-baseline", "Unscheduled Pod which is deleted can be replaced in group"),
    Spec("singlecluster-baseline", "should allow to schedule a group of diverse pods"),
    Spec("singlecluster-baseline", "should allow to preempt the lower priority group"),
    Spec("singlecluster-baseline", "Pod should be admitted after the group labels are added"),
    Spec("singlecluster-baseline", "should admit a Job via TAS", TAS),
    Spec("singlecluster-baseline", "should admit a single Pod via TAS", TAS),
    Spec("singlecluster-baseline", "should admit a Pod group via TAS", TAS),
    Spec(
        "singlecluster-baseline",
        "Should allow fetching information about pending workloads in ClusterQueue (v1beta1)",
    ),
    Spec(
        "singlecluster-baseline",
        "Should allow fetching information about pending workloads in ClusterQueue",
    ),
    Spec(
        "singlecluster-baseline",
        "Should allow fetching information about position of pending workloads in ClusterQueue",
    ),
    Spec("singlecluster-baseline", "Should allow fetching information about pending workloads in LocalQueue"),
    Spec(
        "singlecluster-baseline",
        "Should allow fetching information about position of pending workloads from different LocalQueues",
    ),
    Spec(
        "singlecluster-baseline",
        "Should fetch information about the position of pending workloads with the same localQueue "
        "name in different namespaces",
    ),
    Spec(
        "singlecluster-baseline",
        "Should allow fetching information about position of pending workloads from different "
        "LocalQueues from different Namespaces",
    ),
    Spec("singlecluster-baseline", "Should only expose pending workloads from the caller's own Namespace"),
    Spec(
        "singlecluster-baseline",
        "when A subject is bound to kueue-batch-admin-role Should return an appropriate error",
    ),
    Spec(
        "singlecluster-baseline",
        "when A subject is bound to kueue-batch-user-role, but not to kueue-batch-admin-role "
        "Should return an appropriate error",
    ),
    Spec(
        "singlecluster-baseline",
        "when A subject is not bound to kueue-batch-user-role, nor to kueue-batch-admin-role "
        "Should return an appropriate error",
    ),
    Spec("singlecluster-baseline", "should discover Kueue target and report it as up", PROMETHEUS),
    Spec("singlecluster-baseline", "should scrape kueue_build_info metric via PromQL", PROMETHEUS),
    Spec("singlecluster-baseline", "should report workload admission metrics via PromQL", PROMETHEUS),
    Spec(
        "singlecluster-baseline",
        "Kueue when Creating a Job without a matching LocalQueue Should stay in suspended",
    ),
    Spec("singlecluster-baseline", "Should allow to schedule Jobs via CronJob"),
    Spec(
        "singlecluster-baseline",
        "Kueue when Creating a Job With Queueing Should unsuspend a job and set nodeSelectors",
    ),
    Spec(
        "singlecluster-baseline",
        "Should finish workload if the job is deleted with PropagationPolicy=DeletePropagationOrphan",
    ),
    Spec("singlecluster-baseline", "Should run with prebuilt workload"),
    Spec(
        "singlecluster-baseline",
        "Should readmit preempted job with workloadPriorityClass into a separate flavor",
    ),
    Spec("singlecluster-baseline", "Should partially admit the Job if configured and not fully fits"),
    Spec("singlecluster-baseline", "Should allow updating the workload's priority through the job"),
    Spec("singlecluster-baseline", "Should deduplicate env variables"),
    Spec("singlecluster-baseline", "Should not allow removing the workload's priority through the job"),
    Spec("singlecluster-baseline", "Should unsuspend a job only after all checks are cleared"),
    Spec("singlecluster-baseline", "Should suspend a job when its checks become invalid"),
    Spec(
        "singlecluster-baseline",
        "should inject flavor nodeLabels and tolerations into the Job and pods at admission and "
        "after scale-up",
        WORKLOAD_SLICES,
    ),
    Spec("singlecluster-baseline", "keeps the reserved quota equal to the running pods"),
    Spec("singlecluster-baseline", "should ensure the default metrics are available", METRICS_EXEC),
    Spec("singlecluster-baseline", "should ensure the admission check metrics are available", METRICS_EXEC),
    Spec(
        "singlecluster-baseline",
        "should ensure the eviction and preemption metrics are available",
        METRICS_EXEC,
    ),
    Spec("singlecluster-extended", "when PyTorch created should admit group with leader only", KUBEFLOW_V1),
    Spec("singlecluster-extended", "Should admit Workload for Job"),
    Spec("singlecluster-extended", "Should admit Workload for Deployment Pods"),
    Spec("singlecluster-extended", "Should run a MPIJob if admitted", MPIJOB),
    Spec(
        "singlecluster-extended",
        "Should allow to suspend a MPIJob when the ClusterQueue is stopped with the HoldAndDrain policy",
        MPIJOB,
    ),
    Spec("singlecluster-extended", "Should run a rayjob if admitted"),
    Spec("singlecluster-extended", "Should run a rayjob with InTreeAutoscaling", WORKLOAD_SLICES),
    Spec("singlecluster-extended", "Should run a rayjob with multi scale-up steps", WORKLOAD_SLICES),
    Spec(
        "singlecluster-extended",
        "Should account for the SidecarMode submitter in the head PodSet quota",
    ),
    Spec("singlecluster-extended", "Should run a RayCluster on worker if admitted"),
    Spec(
        "singlecluster-extended",
        "Should account for the autoscaler sidecar in the head PodSet quota when in-tree "
        "autoscaling is enabled",
        WORKLOAD_SLICES,
    ),
    Spec("singlecluster-extended", "Should run a RayService if admitted", RAY_SERVE_TRAFFIC),
    Spec(
        "singlecluster-extended",
        "Should run the Redis cleanup Job when a GCS fault-tolerant RayService is deleted",
        REDIS,
    ),
    Spec("singlecluster-extended", "Should run a rayservice with InTreeAutoscaling", WORKLOAD_SLICES),
    Spec("singlecluster-extended", "Should run a jobSet if admitted"),
    Spec("singlecluster-extended", "Should allow to suspend a JobSet when injected nodeSelector"),
    Spec("singlecluster-extended", "when JAX created should admit group with leader only", KUBEFLOW_V1),
    Spec("singlecluster-extended", "when LeaderWorkerSet created should admit group with leader only"),
    Spec("singlecluster-extended", "should admit group with leader and workers"),
    Spec("singlecluster-extended", "should admit group with multiple leaders and workers that fits"),
    Spec("singlecluster-extended", "should allow to scale up LeaderCreatedStartupPolicy"),
    Spec("singlecluster-extended", "should allow to scale up LeaderReadyStartupPolicy"),
    Spec("singlecluster-extended", "should allow to scale down LeaderCreatedStartupPolicy"),
    Spec("singlecluster-extended", "should allow to scale down LeaderReadyStartupPolicy"),
    Spec("singlecluster-extended", "should allow to scale up, scale down fast LeaderCreatedStartupPolicy"),
    Spec("singlecluster-extended", "should allow to scale up, scale down fast LeaderReadyStartupPolicy"),
    Spec(
        "singlecluster-extended",
        "should admit group with multiple leaders and workers that fits and have different "
        "resource needs LeaderCreatedStartupPolicy",
    ),
    Spec(
        "singlecluster-extended",
        "should admit group with multiple leaders and workers that fits and have different "
        "resource needs LeaderReadyStartupPolicy",
    ),
    Spec(
        "singlecluster-extended",
        "when LeaderWorkerSet created should allow to update the PodTemplate in LeaderWorkerSet",
    ),
    Spec(
        "singlecluster-extended",
        "Rolling update with maxSurge creates workloads for surge pods and completes successfully",
    ),
    Spec(
        "singlecluster-extended",
        "should admit and evict correctly when queue-name is set on pod templates",
    ),
    Spec("singlecluster-extended", "should allow to change queue-name if ReadyReplicas=0"),
    Spec(
        "singlecluster-extended",
        "when LeaderWorkerSet created with WorkloadPriorityClass should allow to update the "
        "PodTemplate in LeaderWorkerSet",
    ),
    Spec("singlecluster-extended", "should allow to update the workload priority in LeaderWorkerSet"),
    Spec("singlecluster-extended", "should recreate pods when policy is set to RecreateGroupOnPodRestart"),
    Spec(
        "singlecluster-extended",
        "should only recreate the deleted pod when policy is set to NoneRestartPolicy",
    ),
    Spec("singlecluster-extended", "shouldn't delete deactivated Workload"),
    Spec("singlecluster-extended", "Should scale RayCluster worker groups independently", WORKLOAD_SLICES),
    Spec("singlecluster-extended", "Should run a TrainJob if admitted"),
    Spec("singlecluster-extended", "Should allow to suspend a TrainJob when injected nodeSelector"),
)
SINGLECLUSTER_EXTENDED_LABEL_FILTER = "!feature:pytorchjob && !feature:jaxjob && !feature:mpijob"

# test/e2e/sequential/{baseline,extended}: the same cluster; the specs change Kueue's Configuration and
# restart it (conformance/bridge.py).
SEQUENTIAL_SPECS: tuple[Spec, ...] = (
    Spec("sequential-baseline", "should continue running workload if pod recovers before recoveryTimeout"),
    Spec("sequential-baseline", "should delete the Workload"),
    Spec("sequential-baseline", "shouldn't delete the Job or the Workload"),
    Spec("sequential-baseline", "should prioritize LocalQueues with lower usage"),
    Spec("sequential-baseline", "should preempt workloads when reclaiming quota from cohort"),
    Spec("sequential-baseline", "should rotate the certificates for the CRD resources"),
    Spec("sequential-baseline", "Should use the RBAC identity from the provided kubeconfig"),
    Spec("sequential-baseline", "should evict and requeue workload when pods readiness timeout is surpassed"),
    Spec("sequential-baseline", "should ensure the localqueue metrics are available"),
    Spec("sequential-baseline", "should ensure the localqueue metrics are not available"),
    Spec("sequential-baseline", "should delete Job"),
    Spec("sequential-baseline", "should evict and requeue workload when pod failure causes recovery timeout"),
    Spec("sequential-baseline", "should not report metrics for resource usage for undeclared resources"),
    Spec("sequential-baseline", "should preempt workloads with undeclared resource that have lower priority"),
    Spec("sequential-baseline", "should not suspend a job"),
    Spec("sequential-baseline", "should suspend a job"),
    Spec("sequential-baseline", "should suspend a pod created in the test namespace"),
    Spec("sequential-baseline", "should NOT suspend a pod created in the kube-system namespace"),
    Spec("sequential-baseline", "should suspend the pods of a deployment created in the test namespace"),
    Spec(
        "sequential-baseline",
        "should not suspend the pods created by a deployment in the kube-system namespace",
    ),
    Spec(
        "sequential-baseline",
        "should suspend the pods created by a StatefulSet in the test namespace without queue-name label",
    ),
    Spec(
        "sequential-baseline",
        "should not suspend the pods created by a StatefulSet in the kube-system namespace",
    ),
    Spec("sequential-baseline", "should successfully run StatefulSets when pod integration is auto-enabled"),
    Spec("sequential-baseline", "should not manage pods without queue names regardless of auto-enablement"),
    Spec("sequential-baseline", "should unblock foreground deletion during a kubelet outage"),
    Spec("sequential-baseline", "Should use the custom port from the visibilityServer configuration API"),
    Spec(
        "sequential-baseline",
        "should default the WorkloadPriorityClass and admit a job with the defaulted priority",
    ),
    Spec("sequential-baseline", "should not override an existing WorkloadPriorityClass label"),
    Spec("sequential-baseline", "should not reconcile a job in the default (unmanaged) namespace"),
    Spec("sequential-baseline", "should reconcile a job in managed namespace and create a workload"),
    Spec("sequential-baseline", "should not reconcile a pod in the default (unmanaged) namespace"),
    Spec("sequential-baseline", "Should allow to bootstrap certificates"),
    Spec(
        "sequential-baseline",
        "should admit a workload after leader failover when a previously admitted workload was deleted",
    ),
    Spec(
        "sequential-baseline",
        "should admit a high-priority workload after lower-priority workload-1 removal and leader "
        "failover with preemption of existing lower-priority workload-2",
    ),
    Spec(
        "sequential-baseline",
        "should delete the Workload after enabling the ObjectRetentionPolicies feature gate",
    ),
    Spec("sequential-baseline", "should successfully copy labels and annotations for a single pod"),
    Spec("sequential-baseline", "should successfully copy labels and annotations for a pod group"),
    Spec(
        "sequential-baseline",
        "should not create workload for a pod group if there is a custom annotation mismatch",
    ),
    Spec("sequential-extended", "should not suspend Jobs from unmanaged JobSet"),
    Spec("sequential-extended", "should not suspend child jobs of admitted jobs"),
    Spec("sequential-extended", "should not suspend grandchildren jobs of admitted jobs"),
    Spec(
        "sequential-extended",
        "should not admit child jobs and jobset even if the child job and jobset has a queue-name label",
    ),
    Spec("sequential-extended", "should not admit child jobs even if the child job has a queue-name label"),
    Spec("sequential-extended", "Should suspend Pods of a created Deployment in the test namespace"),
    Spec(
        "sequential-extended",
        "should not suspend the pods created by a LeaderWorkerSet in the test namespace with "
        "queue-name label",
    ),
    Spec(
        "sequential-extended",
        "should suspend the pods created by a LeaderWorkerSet in the test namespace without queue-name label",
    ),
    Spec(
        "sequential-extended",
        "should suspend the pods created by a LeaderWorkerSet without queue-name label and "
        "unsuspend after set queue-name",
    ),
    Spec("sequential-extended", "should create only one workload for parent job"),
    Spec("sequential-extended", "should admit group with 50-character lws name"),
    Spec("sequential-extended", "should run if admitted", SPARK),
    Spec("sequential-extended", "should admit a SparkApplication via TAS", SPARK),
)


SPECS: tuple[Spec, ...] = MULTIKUEUE_SPECS + SINGLECLUSTER_SPECS + SEQUENTIAL_SPECS

# Each suite's --ginkgo.label-filter. A suite's BeforeSuite waits for the Deployment of every operator
# (or Prometheus) whose label the filter lets through, so the ones the fleet does not run are filtered
# out by label as well as skipped by name.
LABEL_FILTERS = {
    "extended": EXTENDED_LABEL_FILTER,
    "singlecluster-baseline": "!feature:prometheus",
    "singlecluster-extended": SINGLECLUSTER_EXTENDED_LABEL_FILTER,
    "sequential-extended": "!feature:spark",
}


def family(suite: str) -> str:
    return next(f for f, suites in FAMILIES.items() if suite in suites)


def of_suite(suite: str, specs: tuple[Spec, ...] = SPECS) -> list[Spec]:
    return [s for s in specs if s.suite == suite]


def skip_pattern(suite: str, specs: tuple[Spec, ...] = SPECS) -> str:
    """A `--ginkgo.skip` regular expression matching exactly the suite's specs that do not apply
    ("" when all apply). Ginkgo matches it against the spec's full text, which ends with its own."""
    texts = [re.escape(s.text) + "$" for s in of_suite(suite, specs) if not s.applies]
    return "|".join(texts)


def find(suite: str, full_text: str, specs: tuple[Spec, ...] = SPECS) -> Spec | None:
    """The table's spec whose text ends `full_text` (a JUnit test case name: containers, then the spec)."""
    matches = [s for s in of_suite(suite, specs) if full_text.rstrip().endswith(s.text)]
    return max(matches, key=lambda s: len(s.text)) if matches else None
