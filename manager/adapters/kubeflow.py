"""Kubeflow job adapters (upstream's kubeflowjob_multikueue_adapter, one per kind: PyTorchJob,
TFJob, XGBoostJob, PaddleJob, JAXJob; and MPIJob in manager.adapters.mpijob): the admitting worker
gets a copy of the manager's job (metadata labels and annotations, the whole spec) with the
MultiKueue origin label and the prebuilt Workload name, `spec.runPolicy.managedBy` cleared so that
the worker's operator runs it; the worker's whole status (conditions, replicaStatuses with their
selectors, start and completion times) is mirrored onto the manager's job; the copy is deleted
when the Workload finishes, is evicted or is garbage-collected."""

from __future__ import annotations

import copy
from typing import Any

from kube_runtime.client import KubeClient
from kube_runtime.informer import Informer
from kueue_domain import api
from manager.adapters.base import set_multikueue_meta
from manager.adapters.mirrored import MirroredStatusAdapter

Obj = dict[str, Any]
# The kinds' replicaSpecs fields: templates the manager never reads in a worker's copy.
REPLICA_SPECS_FIELDS = (
    "pytorchReplicaSpecs",
    "tfReplicaSpecs",
    "xgbReplicaSpecs",
    "paddleReplicaSpecs",
    "jaxReplicaSpecs",
    "mpiReplicaSpecs",
)


def kubeflow_job_finished(obj: Obj) -> bool:
    """A `Succeeded` or `Failed` condition is True."""
    return any(
        c.get("type") in (api.KUBEFLOW_CONDITION_SUCCEEDED, api.KUBEFLOW_CONDITION_FAILED)
        and c.get("status") == api.CONDITION_TRUE
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


def run_policy_managed_by(obj: Obj) -> str:
    return ((obj.get("spec") or {}).get("runPolicy") or {}).get("managedBy") or ""


def remote_kubeflow_copy(local: Obj, workload_name: str, origin: str) -> Obj:
    """What is created on the worker (CloneObjectMetaForCreation + the spec, runPolicy.managedBy
    cleared)."""
    meta = local["metadata"]
    spec = copy.deepcopy(local.get("spec") or {})
    run_policy = spec.get("runPolicy")
    if isinstance(run_policy, dict):
        run_policy.pop("managedBy", None)
    obj: Obj = {
        "apiVersion": local.get("apiVersion"),
        "kind": local.get("kind"),
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": spec,
    }
    set_multikueue_meta(obj, workload_name, origin)
    return obj


def released_status_patch(local: Obj) -> Obj | None:
    """Every replicaStatus's active count set to 0; None when none is active."""
    statuses = (local.get("status") or {}).get("replicaStatuses") or {}
    if not any(int((s or {}).get("active") or 0) for s in statuses.values()):
        return None
    return {"status": {"replicaStatuses": {t: {**(s or {}), "active": 0} for t, s in statuses.items()}}}


class KubeflowJobAdapter(MirroredStatusAdapter):
    """The adapter of one Kubeflow kind (its resource given at construction)."""

    cached_spec_drops = REPLICA_SPECS_FIELDS
    finished = staticmethod(kubeflow_job_finished)

    def __init__(self, local_kube: KubeClient, local_objects: Informer, resource: api.Resource) -> None:
        super().__init__(local_kube, local_objects)
        self.resource = resource

    @staticmethod
    def remote_copy(local: Obj, workload_name: str, origin: str) -> Obj:
        return remote_kubeflow_copy(local, workload_name, origin)

    def managed_by(self, obj: Obj) -> str:
        return run_policy_managed_by(obj)

    def released_status_patch(self, local: Obj) -> Obj | None:
        return released_status_patch(local)


# The training-operator's kinds, each with its own adapter.
KUBEFLOW_RESOURCES = {
    api.FRAMEWORK_PYTORCH_JOB: api.PYTORCH_JOB,
    api.FRAMEWORK_TF_JOB: api.TF_JOB,
    api.FRAMEWORK_XGBOOST_JOB: api.XGBOOST_JOB,
    api.FRAMEWORK_PADDLE_JOB: api.PADDLE_JOB,
    api.FRAMEWORK_JAX_JOB: api.JAX_JOB,
}
