"""The specs of upstream Kueue's MultiKueue e2e suites (KUEUE_VERSION of hack/versions.env) and which of
them apply to kueue-federation, with the reason for each that does not. Pure: no I/O.

A spec is named by its suite and its own text (ginkgo's `It`); `make conformance` skips the ones that
do not apply (by a `--ginkgo.skip` pattern) and reports them with their reason."""

from __future__ import annotations

import re
from dataclasses import dataclass

SUITES = ("baseline", "extended", "sequential", "dra")
# The short form, run by `make test`: the suites whose applicable specs need nothing but the fleet.
SHORT_SUITES = ("baseline", "extended")

# Reasons a spec does not apply, one per missing capability.
TAS = "TopologyAwareScheduling is not implemented"
DRA = "DynamicResourceAllocation (ResourceClaimTemplates in Workloads) is not implemented"
KUBEFLOW_V1 = "Kubeflow v1 jobs (training-operator) are not an integration of ours"
MPIJOB = "MPIJob (mpi-operator) is not an integration of ours"
WORKLOAD_SLICES = "ElasticJobsViaWorkloadSlices (workload slices, elastic jobs) is not implemented"
DOCKER = "the spec edits kind's node through `docker exec`: the fleet runs no containers"
CLUSTER_PROFILE_PLUGIN = "the spec runs a ClusterProfile credentials plugin from a container image"
ORCHESTRATED_PREEMPTION = "MultiKueueOrchestratedPreemption (alpha gate) is not implemented"


@dataclass(frozen=True)
class Spec:
    suite: str
    text: str
    reason: str = ""  # empty: the spec applies

    @property
    def applies(self) -> bool:
        return not self.reason


SPECS: tuple[Spec, ...] = (
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
    Spec("extended", "Should run a kubeflow PyTorchJob on worker if admitted", KUBEFLOW_V1),
    Spec("extended", "Should run a MPIJob on worker if admitted", MPIJOB),
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
EXTENDED_LABEL_FILTER = "!feature:pytorchjob && !feature:mpijob"


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
