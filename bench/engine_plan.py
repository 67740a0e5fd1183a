"""bench.engine's generator plan: upstream's baseline configuration (generator.yaml), the API shape
of each engine (our v1beta1, upstream's v1beta2) and the objects the generator creates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.common import Obj

# Upstream harness strings (test/performance/scheduler/runner): labels, the runner's condition texts.
LABEL_CLASS = "kueue.x-k8s.io/performance-scheduler-class"
LABEL_RUNNING_MS = "kueue.x-k8s.io/performance-scheduler-running-ms"
LABEL_CLEANUP = "kueue.x-k8s.io/performance-scheduler-cleanup"
RUNNER_FIELD_MANAGER = "kueue-perf-runner"
FINISHED_REASON = "ByTest"
FINISHED_MESSAGE = "By test runner"
EVICTION_CLEARED_REASON = "Pending"
EVICTION_CLEARED_MESSAGE = "Evicted by the test runner"
NO_RESERVATION_REASON = "NoReservation"
NO_RESERVATION_MESSAGE = "The workload has no reservation"
GROUP = "kueue.x-k8s.io"


# ==============================================================================================
# The generator's configuration (upstream's generator.yaml, baseline) and the objects it creates
# ==============================================================================================


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    count: int  # per ClusterQueue
    interval_ms: int
    cpu: int
    runtime_ms: int
    priority: int


@dataclass(frozen=True)
class BenchConfig:
    cohorts: int = 5
    queues_per_cohort: int = 6
    queue_class: str = "cq"
    cohort_class: str = "cohort"
    nominal_cpu: int = 20
    borrowing_limit_cpu: int = 100
    reclaim_within_cohort: str = "Any"
    within_cluster_queue: str = "LowerPriority"
    flavor: str = "rf"
    classes: tuple[WorkloadClass, ...] = (
        WorkloadClass("small", 350, 100, 1, 200, 50),
        WorkloadClass("medium", 100, 500, 5, 500, 100),
        WorkloadClass("large", 50, 1200, 20, 1000, 200),
    )

    @property
    def cluster_queue_count(self) -> int:
        return self.cohorts * self.queues_per_cohort

    @property
    def workloads_per_queue(self) -> int:
        return sum(c.count for c in self.classes)

    @property
    def total_workloads(self) -> int:
        return self.cluster_queue_count * self.workloads_per_queue

    @property
    def is_full_baseline(self) -> bool:
        return self == BenchConfig()


def scaled_count(count: int, scale: float) -> int:
    """At least one workload per set, so every class is measured at any scale."""
    return max(1, round(count * scale))


def baseline_config(scale: float = 1.0, cohorts: int = 5, queues_per_cohort: int = 6) -> BenchConfig:
    if scale <= 0:
        raise ValueError("--scale must be greater than 0")
    if cohorts < 1 or queues_per_cohort < 1:
        raise ValueError("--cohorts and --queues-per-cohort must be at least 1")
    base = BenchConfig()
    classes = tuple(
        WorkloadClass(c.name, scaled_count(c.count, scale), c.interval_ms, c.cpu, c.runtime_ms, c.priority)
        for c in base.classes
    )
    return BenchConfig(cohorts=cohorts, queues_per_cohort=queues_per_cohort, classes=classes)


@dataclass(frozen=True)
class ApiShape:
    """Our CRDs serve v1beta1; upstream's CRDs store v1beta2 and convert nothing without the webhook."""

    version: str

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    @property
    def cohort_field(self) -> str:
        return "cohort" if self.version == "v1beta1" else "cohortName"

    def resource(self, plural: str, kind: str, namespaced: bool) -> Any:
        from kueue_domain.api import Resource

        return Resource(GROUP, self.version, plural, kind, namespaced)

    @property
    def workloads(self) -> Any:
        return self.resource("workloads", "Workload", True)

    @property
    def cluster_queues(self) -> Any:
        return self.resource("clusterqueues", "ClusterQueue", False)

    @property
    def local_queues(self) -> Any:
        return self.resource("localqueues", "LocalQueue", True)

    @property
    def resource_flavors(self) -> Any:
        return self.resource("resourceflavors", "ResourceFlavor", False)


OURS = ApiShape("v1beta1")
UPSTREAM = ApiShape("v1beta2")


@dataclass(frozen=True)
class QueuePlan:
    name: str  # ClusterQueue, its Namespace and its LocalQueue share it
    cohort: str


def plan_queues(config: BenchConfig) -> list[QueuePlan]:
    """Upstream's names: `<queue class>-<queue set index>-<index>-<cohort>`, cohort `<class>-<index>`."""
    plans = []
    for k in range(config.cohorts):
        cohort = f"{config.cohort_class}-{k}"
        for i in range(config.queues_per_cohort):
            plans.append(QueuePlan(f"{config.queue_class}-0-{i}-{cohort}", cohort))
    return plans


def workload_name(cls: WorkloadClass, set_index: int, serial: int) -> str:
    """Upstream's `<class>-<workload set index>-<serial>-<template index>` (one template per set here)."""
    return f"{cls.name}-{set_index}-{serial}-0"


def resource_flavor_object(shape: ApiShape, config: BenchConfig) -> Obj:
    return {
        "apiVersion": shape.api_version,
        "kind": "ResourceFlavor",
        "metadata": {"name": config.flavor, "labels": {LABEL_CLEANUP: "true"}},
        "spec": {},
    }


def cluster_queue_object(shape: ApiShape, config: BenchConfig, queue: QueuePlan) -> Obj:
    return {
        "apiVersion": shape.api_version,
        "kind": "ClusterQueue",
        "metadata": {
            "name": queue.name,
            "labels": {LABEL_CLASS: config.queue_class, LABEL_CLEANUP: "true"},
        },
        "spec": {
            shape.cohort_field: queue.cohort,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": config.flavor,
                            "resources": [
                                {
                                    "name": "cpu",
                                    "nominalQuota": str(config.nominal_cpu),
                                    "borrowingLimit": str(config.borrowing_limit_cpu),
                                }
                            ],
                        }
                    ],
                }
            ],
            "preemption": {
                "reclaimWithinCohort": config.reclaim_within_cohort,
                "withinClusterQueue": config.within_cluster_queue,
            },
        },
    }


def namespace_object(queue: QueuePlan) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": queue.name, "labels": {LABEL_CLEANUP: "true"}},
    }


def local_queue_object(shape: ApiShape, queue: QueuePlan) -> Obj:
    return {
        "apiVersion": shape.api_version,
        "kind": "LocalQueue",
        "metadata": {"name": queue.name, "namespace": queue.name},
        "spec": {"clusterQueue": queue.name},
    }


def workload_object(
    shape: ApiShape, queue: QueuePlan, cls: WorkloadClass, set_index: int, serial: int
) -> Obj:
    """A bare Workload like upstream's MakeWorkload(...).Queue().Label().Priority().Request(cpu)."""
    return {
        "apiVersion": shape.api_version,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(cls, set_index, serial),
            "namespace": queue.name,
            "labels": {LABEL_RUNNING_MS: str(cls.runtime_ms), LABEL_CLASS: cls.name},
        },
        "spec": {
            "queueName": queue.name,
            "priority": cls.priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cls.cpu)}}}],
                        }
                    },
                }
            ],
        },
    }


def plan_objects(shape: ApiShape, config: BenchConfig) -> dict[str, list[Obj]]:
    """Every object one run creates, by kind (the generator creates them lazily, in this shape)."""
    queues = plan_queues(config)
    return {
        "ResourceFlavor": [resource_flavor_object(shape, config)],
        "ClusterQueue": [cluster_queue_object(shape, config, q) for q in queues],
        "Namespace": [namespace_object(q) for q in queues],
        "LocalQueue": [local_queue_object(shape, q) for q in queues],
        "Workload": [
            workload_object(shape, q, cls, set_index, serial)
            for q in queues
            for set_index, cls in enumerate(config.classes)
            for serial in range(cls.count)
        ],
    }


def demand_cpu_seconds(config: BenchConfig) -> float:
    """cpu x runtime of one ClusterQueue's workloads (baseline: 70 + 250 + 1,000 = 1,320 cpu*s)."""
    return sum(c.count * c.cpu * c.runtime_ms / 1000 for c in config.classes)
