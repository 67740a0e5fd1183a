"""Kubeflow's job kinds: the training-operator's v1 kinds (github.com/kubeflow/training-operator v1.9.3,
pkg/apis/kubeflow.org/v1) and the MPI Operator's MPIJob (github.com/kubeflow/mpi-operator v0.8.2,
pkg/apis/kubeflow/v2beta1), with Kueue's framework names and webhook paths for them (upstream
Kueue v0.19.2 pkg/controller/jobs/kubeflow and pkg/controller/jobs/mpijob)."""

from __future__ import annotations

from kube_runtime.gofmt import go_quote
from kube_runtime.resources import Resource

KUBEFLOW_GROUP = "kubeflow.org"
PYTORCH_JOB = Resource(KUBEFLOW_GROUP, "v1", "pytorchjobs", "PyTorchJob", True)
TF_JOB = Resource(KUBEFLOW_GROUP, "v1", "tfjobs", "TFJob", True)
XGBOOST_JOB = Resource(KUBEFLOW_GROUP, "v1", "xgboostjobs", "XGBoostJob", True)
PADDLE_JOB = Resource(KUBEFLOW_GROUP, "v1", "paddlejobs", "PaddleJob", True)
JAX_JOB = Resource(KUBEFLOW_GROUP, "v1", "jaxjobs", "JAXJob", True)
MPI_JOB = Resource(KUBEFLOW_GROUP, "v2beta1", "mpijobs", "MPIJob", True)

# Integration (framework) names.
FRAMEWORK_PYTORCH_JOB = "kubeflow.org/pytorchjob"
FRAMEWORK_TF_JOB = "kubeflow.org/tfjob"
FRAMEWORK_XGBOOST_JOB = "kubeflow.org/xgboostjob"
FRAMEWORK_PADDLE_JOB = "kubeflow.org/paddlejob"
FRAMEWORK_JAX_JOB = "kubeflow.org/jaxjob"
FRAMEWORK_MPI_JOB = "kubeflow.org/mpijob"

# runPolicy.managedBy of the kinds' own controllers (KubeflowJobsController, KubeflowJobController).
KUBEFLOW_MANAGED_BY_DEFAULT = "kubeflow.org/training-operator"
MPI_JOB_MANAGED_BY_DEFAULT = "kubeflow.org/mpi-operator"

# Replica types (the replicaSpecs keys), and each kind's field of them.
REPLICA_MASTER = "Master"
REPLICA_WORKER = "Worker"
REPLICA_CHIEF = "Chief"
REPLICA_PS = "PS"
REPLICA_EVALUATOR = "Evaluator"
REPLICA_LAUNCHER = "Launcher"

# JobConditionType values of both operators' status.conditions.
KUBEFLOW_CONDITION_RUNNING = "Running"
KUBEFLOW_CONDITION_SUCCEEDED = "Succeeded"
KUBEFLOW_CONDITION_FAILED = "Failed"

# The labels both operators put on the pods they create.
KUBEFLOW_LABEL_JOB_NAME = "training.kubeflow.org/job-name"
KUBEFLOW_LABEL_OPERATOR_NAME = "training.kubeflow.org/operator-name"

# Kueue's webhook paths and names for them.
WEBHOOK_PATH_MUTATE_PYTORCH_JOB = "/mutate-kubeflow-org-v1-pytorchjob"
WEBHOOK_PATH_VALIDATE_PYTORCH_JOB = "/validate-kubeflow-org-v1-pytorchjob"
WEBHOOK_PATH_MUTATE_TF_JOB = "/mutate-kubeflow-org-v1-tfjob"
WEBHOOK_PATH_VALIDATE_TF_JOB = "/validate-kubeflow-org-v1-tfjob"
WEBHOOK_PATH_MUTATE_XGBOOST_JOB = "/mutate-kubeflow-org-v1-xgboostjob"
WEBHOOK_PATH_VALIDATE_XGBOOST_JOB = "/validate-kubeflow-org-v1-xgboostjob"
WEBHOOK_PATH_MUTATE_PADDLE_JOB = "/mutate-kubeflow-org-v1-paddlejob"
WEBHOOK_PATH_VALIDATE_PADDLE_JOB = "/validate-kubeflow-org-v1-paddlejob"
WEBHOOK_PATH_MUTATE_JAX_JOB = "/mutate-kubeflow-org-v1-jaxjob"
WEBHOOK_PATH_VALIDATE_JAX_JOB = "/validate-kubeflow-org-v1-jaxjob"
WEBHOOK_PATH_MUTATE_MPI_JOB = "/mutate-kubeflow-org-v2beta1-mpijob"
WEBHOOK_PATH_VALIDATE_MPI_JOB = "/validate-kubeflow-org-v2beta1-mpijob"

# Framework name -> (mutating path, validating path).
KUBEFLOW_WEBHOOK_PATHS = {
    FRAMEWORK_PYTORCH_JOB: (WEBHOOK_PATH_MUTATE_PYTORCH_JOB, WEBHOOK_PATH_VALIDATE_PYTORCH_JOB),
    FRAMEWORK_TF_JOB: (WEBHOOK_PATH_MUTATE_TF_JOB, WEBHOOK_PATH_VALIDATE_TF_JOB),
    FRAMEWORK_XGBOOST_JOB: (WEBHOOK_PATH_MUTATE_XGBOOST_JOB, WEBHOOK_PATH_VALIDATE_XGBOOST_JOB),
    FRAMEWORK_PADDLE_JOB: (WEBHOOK_PATH_MUTATE_PADDLE_JOB, WEBHOOK_PATH_VALIDATE_PADDLE_JOB),
    FRAMEWORK_JAX_JOB: (WEBHOOK_PATH_MUTATE_JAX_JOB, WEBHOOK_PATH_VALIDATE_JAX_JOB),
    FRAMEWORK_MPI_JOB: (WEBHOOK_PATH_MUTATE_MPI_JOB, WEBHOOK_PATH_VALIDATE_MPI_JOB),
}


def expecting_run_policy_managed_by_message(actual: str) -> str:
    """The MPIJob adapter's IsJobManagedByKueue reason (the training-operator kinds' adapter says
    `spec.managedBy`, as expecting_managed_by_message)."""
    multikueue = go_quote("kueue.x-k8s.io/multikueue")
    return f"Expecting spec.runPolicy.managedBy to be {multikueue} not {go_quote(actual)}"
