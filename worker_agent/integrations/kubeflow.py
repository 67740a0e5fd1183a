"""Kubeflow's training-operator kinds (kubeflow.org/v1 PyTorchJob, TFJob, XGBoostJob, PaddleJob,
JAXJob; integrations `kubeflow.org/pytorchjob`, ...): one Workload `<kind>-<name>-<hash5>` per
managed job, with one PodSet per replica type present in its replicaSpecs, in upstream's order
(PyTorchJob, XGBoostJob, PaddleJob: Master, Worker; TFJob: Chief, Master, PS, Worker, Evaluator;
JAXJob: Worker), named after it in lower case (`master`, `worker`), count `replicas` (1 when unset),
the replica's pod template.

The kinds differ only in their `KubeflowKind` (GVK, framework name, replicaSpecs field, replica-type
order); the MPI Operator's MPIJob (worker_agent.integrations.mpijob) is one more of them. Upstream's
kubeflowjob package, on the job framework:

- suspended by `spec.runPolicy.suspend`; run and stop (the assigned flavors' nodeSelector and
  tolerations merged into each replica's pod template, restored from the Workload on stop) are the
  TemplatedReconciler's;
- finished when a `Succeeded` or `Failed` condition is True (its message is the Workload's); pods
  ready when `Running` is True; active while a replicaStatus has active pods; no reclaimable pods;
- the priority class: `spec.runPolicy.schedulingPolicy.priorityClass`, else the first replica's
  pod priorityClassName in replica-type order;
- `spec.runPolicy.managedBy`: the operator's own value (`kubeflow.org/training-operator`) or
  MultiKueue's; one of MultiKueue is unsuspended on admission and never run here (the operator
  leaves it alone since v1.9.0; MultiKueue runs it on a worker and mirrors its status back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kueue_domain import api
from kueue_domain.api import Resource
from worker_agent.integrations import framework, jobframework
from worker_agent.integrations.jobframework import templated

Obj = dict[str, Any]
SUSPEND_PATH = ("spec", "runPolicy", "suspend")
MANAGED_BY_PATH = ("spec", "runPolicy", "managedBy")


@dataclass(frozen=True)
class KubeflowKind:
    framework: str
    resource: Resource
    replica_specs_field: str  # spec.<field>: replica type -> ReplicaSpec
    replica_types: tuple[str, ...]  # upstream's OrderedReplicaTypes
    managed_by_default: str = api.KUBEFLOW_MANAGED_BY_DEFAULT


MASTER_WORKER = (api.REPLICA_MASTER, api.REPLICA_WORKER)
PYTORCH_JOB = KubeflowKind(api.FRAMEWORK_PYTORCH_JOB, api.PYTORCH_JOB, "pytorchReplicaSpecs", MASTER_WORKER)
TF_JOB = KubeflowKind(
    api.FRAMEWORK_TF_JOB,
    api.TF_JOB,
    "tfReplicaSpecs",
    (api.REPLICA_CHIEF, api.REPLICA_MASTER, api.REPLICA_PS, api.REPLICA_WORKER, api.REPLICA_EVALUATOR),
)
XGBOOST_JOB = KubeflowKind(api.FRAMEWORK_XGBOOST_JOB, api.XGBOOST_JOB, "xgbReplicaSpecs", MASTER_WORKER)
PADDLE_JOB = KubeflowKind(api.FRAMEWORK_PADDLE_JOB, api.PADDLE_JOB, "paddleReplicaSpecs", MASTER_WORKER)
JAX_JOB = KubeflowKind(api.FRAMEWORK_JAX_JOB, api.JAX_JOB, "jaxReplicaSpecs", (api.REPLICA_WORKER,))
KINDS = (PYTORCH_JOB, TF_JOB, XGBOOST_JOB, PADDLE_JOB, JAX_JOB)


# ------------------------------------------------------------------------------------------------
# Pure parts: reading a job


def run_policy(obj: Obj) -> Obj:
    return (obj.get("spec") or {}).get("runPolicy") or {}


def replica_specs(obj: Obj, kind: KubeflowKind) -> dict[str, Obj]:
    return (obj.get("spec") or {}).get(kind.replica_specs_field) or {}


def replica_types(obj: Obj, kind: KubeflowKind) -> list[str]:
    """The replica types present (a non-null spec), in the kind's order."""
    specs = replica_specs(obj, kind)
    return [t for t in kind.replica_types if specs.get(t) is not None]


def replicas(spec: Obj) -> int:
    value = spec.get("replicas")
    return 1 if value is None else int(value)


def podset_name(replica_type: str) -> str:
    """kueue.NewPodSetReference: the replica type in lower case."""
    return replica_type.lower()


def podsets(obj: Obj, kind: KubeflowKind) -> list[Obj]:
    specs = replica_specs(obj, kind)
    return [
        {
            "name": podset_name(t),
            "count": replicas(specs[t]),
            "template": framework.template_for_podset(specs[t].get("template")),
        }
        for t in replica_types(obj, kind)
    ]


def pod_templates(obj: Obj, kind: KubeflowKind) -> list[tuple[str, Obj]]:
    specs = replica_specs(obj, kind)
    return [(podset_name(t), specs[t].setdefault("template", {})) for t in replica_types(obj, kind)]


def is_active(obj: Obj) -> bool:
    statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
    return any(int((s or {}).get("active") or 0) != 0 for s in statuses.values())


def finished(obj: Obj) -> tuple[bool, bool, str]:
    succeeded, failed = api.KUBEFLOW_CONDITION_SUCCEEDED, api.KUBEFLOW_CONDITION_FAILED
    return jobframework.condition_finished(obj, succeeded, failed)


def pods_ready(obj: Obj) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return any(
        c.get("type") == api.KUBEFLOW_CONDITION_RUNNING and c.get("status") == api.CONDITION_TRUE
        for c in conditions
    )


def priority_class(obj: Obj, kind: KubeflowKind) -> str | None:
    """runPolicy.schedulingPolicy.priorityClass, else the first replica's pod priorityClassName."""
    scheduling = run_policy(obj).get("schedulingPolicy") or {}
    if scheduling.get("priorityClass"):
        return scheduling["priorityClass"]
    specs = replica_specs(obj, kind)
    for t in replica_types(obj, kind):
        name = ((specs[t].get("template") or {}).get("spec") or {}).get("priorityClassName")
        if name:
            return name
    return None


def managed_by(obj: Obj, kind: KubeflowKind) -> str:
    return templated.get_path(obj, MANAGED_BY_PATH) or kind.managed_by_default


# ------------------------------------------------------------------------------------------------
# The integrations


class KubeflowJobReconciler(templated.TemplatedReconciler):
    """A Kubeflow kind on the job framework; a subclass names its `kind`."""

    kind: KubeflowKind
    suspend_path = SUSPEND_PATH

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind is not None:
            cls.name = kind.framework
            cls.resource = kind.resource
            cls.index_prefix = kind.resource.kind.lower()
            cls.managed_by_default = kind.managed_by_default

    def podsets(self, obj: Obj) -> list[Obj]:
        return podsets(obj, self.kind)

    def pod_templates(self, obj: Obj) -> list[tuple[str, Obj]]:
        return pod_templates(obj, self.kind)

    def managed_by(self, obj: Obj) -> str:
        return managed_by(obj, self.kind)

    is_active = staticmethod(is_active)
    finished = staticmethod(finished)
    pods_ready = staticmethod(pods_ready)

    def reclaimable_pods(self, obj: Obj, wl: Obj) -> list[Obj]:
        return []

    def pod_priority_class(self, obj: Obj, podsets: list[Obj]) -> str | None:
        return priority_class(obj, self.kind)


class PyTorchJobIntegration(KubeflowJobReconciler):
    kind = PYTORCH_JOB


class TFJobIntegration(KubeflowJobReconciler):
    kind = TF_JOB


class XGBoostJobIntegration(KubeflowJobReconciler):
    kind = XGBOOST_JOB


class PaddleJobIntegration(KubeflowJobReconciler):
    kind = PADDLE_JOB


class JAXJobIntegration(KubeflowJobReconciler):
    kind = JAX_JOB
