"""Job integrations: they turn user objects (batch/v1 Jobs, LeaderWorkerSets, pod groups, JobSets,
TrainJobs, Kubeflow's PyTorchJobs, TFJobs, XGBoostJobs, PaddleJobs, JAXJobs and MPIJobs,
StatefulSets; a Deployment only through its pods) into
Workloads and start or stop them as the Workloads are admitted or evicted.

Each integration is a class taking the Agent; its constructor builds informers and controllers
and hands them to `agent.register(...)`. Job, JobSet, TrainJob and the Kubeflow kinds are subclasses of
`jobframework.JobReconciler`: declarations and per-kind hooks over one reconcile.
"""

from __future__ import annotations

import importlib
from typing import Any

# framework name -> "module:Class", imported only when the framework is enabled.
INTEGRATIONS = {
    "batch/job": "worker_agent.integrations.job:JobIntegration",
    "pod": "worker_agent.integrations.podgroup:PodGroupIntegration",
    "leaderworkerset.x-k8s.io/leaderworkerset": (
        "worker_agent.integrations.leaderworkerset:LeaderWorkerSetIntegration"
    ),
    "jobset.x-k8s.io/jobset": "worker_agent.integrations.jobset:JobSetIntegration",
    "trainer.kubeflow.org/trainjob": "worker_agent.integrations.trainjob:TrainJobIntegration",
    "kubeflow.org/pytorchjob": "worker_agent.integrations.kubeflow:PyTorchJobIntegration",
    "kubeflow.org/tfjob": "worker_agent.integrations.kubeflow:TFJobIntegration",
    "kubeflow.org/xgboostjob": "worker_agent.integrations.kubeflow:XGBoostJobIntegration",
    "kubeflow.org/paddlejob": "worker_agent.integrations.kubeflow:PaddleJobIntegration",
    "kubeflow.org/jaxjob": "worker_agent.integrations.kubeflow:JAXJobIntegration",
    "kubeflow.org/mpijob": "worker_agent.integrations.mpijob:MPIJobIntegration",
    "ray.io/rayjob": "worker_agent.integrations.rayjob:RayJobIntegration",
    "ray.io/raycluster": "worker_agent.integrations.raycluster:RayClusterIntegration",
    "ray.io/rayservice": "worker_agent.integrations.rayservice:RayServiceIntegration",
    "workload.codeflare.dev/appwrapper": "worker_agent.integrations.appwrapper:AppWrapperIntegration",
    "deployment": "worker_agent.integrations.deployment:DeploymentIntegration",
    "statefulset": "worker_agent.integrations.statefulset:StatefulSetIntegration",
}
# LeaderWorkerSet and StatefulSet run as pod groups and a Deployment's pods are single pods, so
# all three implicitly enable the pod integration.
IMPLIED = {
    "leaderworkerset.x-k8s.io/leaderworkerset": ("pod",),
    "deployment": ("pod",),
    "statefulset": ("pod",),
}


def enabled_frameworks(frameworks: tuple[str, ...]) -> list[str]:
    result: list[str] = []
    for name in frameworks:
        for implied in (*IMPLIED.get(name, ()), name):
            if implied in INTEGRATIONS and implied not in result:
                result.append(implied)
    return result


def setup_integrations(agent: Any) -> list[Any]:
    integrations = []
    for name in enabled_frameworks(agent.config.frameworks):
        module_name, _, class_name = INTEGRATIONS[name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # not built yet
        integrations.append(getattr(module, class_name)(agent))
    return integrations
