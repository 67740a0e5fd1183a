"""The manager's informers on the manager cluster, and the MultiKueue adapter of each enabled
integration (multikueue-spec §3.0), built from the Configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.informer import Informer, compact
from kueue_domain import api, features
from kueue_domain.config import Configuration
from manager.adapters import Adapter, JobAdapter
from manager.adapters.appwrapper import AppWrapperAdapter
from manager.adapters.jobset import JobSetAdapter
from manager.adapters.kubeflow import KUBEFLOW_RESOURCES, KubeflowJobAdapter
from manager.adapters.leaderworkerset import LeaderWorkerSetAdapter
from manager.adapters.mpijob import MPIJobAdapter
from manager.adapters.pod import INDEX_POD_GROUP, MANAGED_SELECTOR, PodAdapter
from manager.adapters.pod import group_index as pod_group_index
from manager.adapters.raycluster import RayClusterAdapter
from manager.adapters.rayjob import RayJobAdapter
from manager.adapters.rayservice import RayServiceAdapter
from manager.adapters.statefulset import StatefulSetAdapter
from manager.adapters.trainjob import TrainJobAdapter
from manager.config import feature_enabled
from manager.groups import INDEX_GROUP, group_index
from manager.quota_automation import INDEX_CLUSTER_QUEUE, lq_cluster_queue_index

Obj = dict[str, Any]
LWS_FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
# Kinds whose adapter is a MirroredStatusAdapter over one informer of the kind, by framework name:
# each gets its informer and adapter when its integration is enabled.
MIRRORED_KINDS: dict[str, type[Any]] = {
    api.FRAMEWORK_RAY_JOB: RayJobAdapter,
    api.FRAMEWORK_RAY_CLUSTER: RayClusterAdapter,
    api.FRAMEWORK_RAY_SERVICE: RayServiceAdapter,
    api.FRAMEWORK_APPWRAPPER: AppWrapperAdapter,
}


@dataclass
class ManagerInformers:
    workloads: Informer
    checks: Informer
    configs: Informer
    clusters: Informer
    secrets: Informer
    jobs: Informer
    leaderworkersets: Informer | None
    jobsets: Informer | None
    trainjobs: Informer | None
    pods: Informer | None
    statefulsets: Informer | None
    profiles: Informer | None
    cluster_queues: Informer | None
    local_queues: Informer | None
    # The Kubeflow kinds (training-operator's and MPIJob) enabled, by framework name.
    kubeflow_jobs: dict[str, Informer] = field(default_factory=dict)
    # The enabled MIRRORED_KINDS' informers, by framework name.
    mirrored: dict[str, Informer] = field(default_factory=dict)

    def present(self) -> list[Informer]:
        """The informers this Configuration runs, in the order they start."""
        every = (
            self.workloads,
            self.checks,
            self.configs,
            self.clusters,
            self.secrets,
            self.jobs,
            self.profiles,
            self.leaderworkersets,
            self.jobsets,
            self.trainjobs,
            self.cluster_queues,
            self.local_queues,
            self.pods,
            self.statefulsets,
            *self.kubeflow_jobs.values(),
            *self.mirrored.values(),
        )
        return [i for i in every if i is not None]


def build_informers(kube: KubeClient, config: Configuration, clock: Clock) -> ManagerInformers:
    # Cached compact: no reader looks at managedFields (our writes are applies and patches built
    # from scratch), and strings are shared between objects (docs/benchmarks.md, "Scaling series").
    def informer(resource: api.Resource, enabled: bool = True, **kwargs: Any) -> Informer | None:
        return Informer(kube, resource, clock=clock, transform=compact, **kwargs) if enabled else None

    frameworks = set(config.frameworks)
    # The manager's queues, read only by quota automation (MultiKueueManagerQuotaAutomation).
    quota_automation = feature_enabled(config, features.MULTIKUEUE_MANAGER_QUOTA_AUTOMATION)
    # Plain pods, pod groups and a Deployment's pods (the deployment integration implies the pod
    # integration): the pods the pod webhook marked as Kueue's, by group.
    pods_enabled = bool({api.FRAMEWORK_POD, api.FRAMEWORK_DEPLOYMENT, api.FRAMEWORK_STATEFULSET} & frameworks)
    ns = config.namespace
    informers = ManagerInformers(
        workloads=Informer(kube, api.WORKLOAD, clock=clock, transform=compact),
        checks=Informer(kube, api.ADMISSION_CHECK, clock=clock, transform=compact),
        # v1beta2: the form with spec.quotaManagement (its only difference from v1beta1).
        configs=Informer(kube, api.MULTIKUEUE_CONFIG_V1BETA2, clock=clock, transform=compact),
        clusters=Informer(kube, api.MULTIKUEUE_CLUSTER, clock=clock, transform=compact),
        secrets=Informer(kube, api.SECRET, namespace=ns, clock=clock, transform=compact),
        jobs=Informer(kube, api.JOB, clock=clock, transform=compact),
        # A MultiKueue adapter exists for each enabled integration, as upstream (§3.0).
        leaderworkersets=informer(api.LEADER_WORKER_SET, LWS_FRAMEWORK in frameworks),
        jobsets=informer(api.JOB_SET, api.FRAMEWORK_JOB_SET in frameworks),
        trainjobs=informer(api.TRAIN_JOB, api.FRAMEWORK_TRAIN_JOB in frameworks),
        pods=informer(api.POD, pods_enabled, label_selector=MANAGED_SELECTOR),
        statefulsets=informer(api.STATEFUL_SET, api.FRAMEWORK_STATEFULSET in frameworks),
        profiles=informer(
            api.CLUSTER_PROFILE, feature_enabled(config, features.MULTIKUEUE_CLUSTER_PROFILE), namespace=ns
        ),
        cluster_queues=informer(api.CLUSTER_QUEUE, quota_automation),
        local_queues=informer(api.LOCAL_QUEUE, quota_automation),
        kubeflow_jobs={
            name: Informer(kube, resource, clock=clock, transform=compact)
            for name, resource in {**KUBEFLOW_RESOURCES, api.FRAMEWORK_MPI_JOB: api.MPI_JOB}.items()
            if name in frameworks
        },
    )
    informers.mirrored = {
        name: Informer(kube, adapter.resource, clock=clock, transform=compact)
        for name, adapter in MIRRORED_KINDS.items()
        if name in frameworks
    }
    informers.workloads.add_index(INDEX_GROUP, group_index)
    if informers.pods is not None:
        informers.pods.add_index(INDEX_POD_GROUP, pod_group_index)
    if informers.local_queues is not None:
        informers.local_queues.add_index(INDEX_CLUSTER_QUEUE, lq_cluster_queue_index)
    return informers


def build_adapters(kube: KubeClient, informers: ManagerInformers, clock: Clock) -> dict[str, Adapter]:
    """The adapters, keyed by their kind's GVK string, of the integrations whose informer runs."""
    adapters: dict[str, Adapter] = {api.JOB.gvk: JobAdapter(kube, informers.jobs, clock)}
    if informers.leaderworkersets is not None:
        adapters[api.LEADER_WORKER_SET.gvk] = LeaderWorkerSetAdapter(kube, informers.leaderworkersets, clock)
    if informers.jobsets is not None:
        adapters[api.JOB_SET.gvk] = JobSetAdapter(kube, informers.jobsets)
    if informers.trainjobs is not None:
        adapters[api.TRAIN_JOB.gvk] = TrainJobAdapter(kube, informers.trainjobs)
    if informers.pods is not None:
        adapters[api.POD.gvk] = PodAdapter(kube, informers.pods)
    if informers.statefulsets is not None:
        adapters[api.STATEFUL_SET.gvk] = StatefulSetAdapter(informers.statefulsets)
    for name, objects in informers.kubeflow_jobs.items():
        if name == api.FRAMEWORK_MPI_JOB:
            adapters[api.MPI_JOB.gvk] = MPIJobAdapter(kube, objects)
        else:
            adapters[objects.resource.gvk] = KubeflowJobAdapter(kube, objects, objects.resource)
    for name, informer in informers.mirrored.items():
        adapters[informer.resource.gvk] = MIRRORED_KINDS[name](kube, informer)
    return adapters
