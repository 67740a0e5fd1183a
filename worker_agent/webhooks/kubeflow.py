"""The Kubeflow kinds' webhooks (training-operator v1: PyTorchJob, TFJob, XGBoostJob, PaddleJob,
JAXJob; the MPI Operator's MPIJob v2beta1): defaulting on create, validation on create and update.

All are the job framework's path (upstream's BaseWebhook and MpiJobWebhook) with suspend and
managedBy under `spec.runPolicy`: the namespace's default LocalQueue, the default
WorkloadPriorityClass, `spec.runPolicy.suspend: true` for a job Kueue will manage, and
`spec.runPolicy.managedBy: kueue.x-k8s.io/multikueue` when its LocalQueue feeds a ClusterQueue with a
MultiKueue AdmissionCheck (only over no managedBy or the operator's own value). Validation: queue
name, prebuilt Workload name, maximum execution time, and on update the label rules that depend on
the job being suspended. Upstream's other checks come from Topology-Aware Scheduling requests,
which this project does not implement.
"""

from __future__ import annotations

from typing import Any

from worker_agent.integrations import kubeflow, mpijob
from worker_agent.integrations.jobframework.templated import get_path
from worker_agent.webhooks.jobframework import JobWebhook

Obj = dict[str, Any]


def _suspended(obj: Obj) -> bool:
    return get_path(obj, kubeflow.SUSPEND_PATH) is True


def webhook_for(kind: kubeflow.KubeflowKind) -> JobWebhook:
    return JobWebhook(
        kind.resource.gvk,
        kind.managed_by_default,
        is_suspended=_suspended,
        suspend_path=kubeflow.SUSPEND_PATH,
        managed_by_path=kubeflow.MANAGED_BY_PATH,
        # upstream's supportedPrebuiltWlJobGVKs names every one but JAXJob
        prebuilt_supported=kind is not kubeflow.JAX_JOB,
    )


# Framework name -> its webhook.
WEBHOOKS = {kind.framework: webhook_for(kind) for kind in (*kubeflow.KINDS, mpijob.MPI_JOB)}
