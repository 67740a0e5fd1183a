"""MPIJob adapter (kubeflow.org/v2beta1; upstream's mpijob_multikueue_adapter): the Kubeflow
adapter's copy, status mirror and deletion (manager.adapters.kubeflow), with upstream's own reason
for an MPIJob not managed by MultiKueue (`Expecting spec.runPolicy.managedBy to be ...`)."""

from __future__ import annotations

from kube_runtime.client import KubeClient
from kube_runtime.informer import Informer
from kueue_domain import api
from manager.adapters.kubeflow import KubeflowJobAdapter


class MPIJobAdapter(KubeflowJobAdapter):
    def __init__(self, local_kube: KubeClient, local_objects: Informer) -> None:
        super().__init__(local_kube, local_objects, api.MPI_JOB)

    def not_managed_message(self, managed_by: str) -> str:
        return api.expecting_run_policy_managed_by_message(managed_by)
