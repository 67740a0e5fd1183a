"""The MPI Operator's MPIJobs (kubeflow.org/v2beta1, integration `kubeflow.org/mpijob`): one Workload
`mpijob-<name>-<hash5>` per managed MPIJob, with the PodSets `launcher` and `worker` (the replica
types present in `spec.mpiReplicaSpecs`, in that order; count `replicas`, 1 when unset).

An MPIJob reads like the training-operator's kinds (worker_agent.integrations.kubeflow): suspended
by `spec.runPolicy.suspend`, finished by its `Succeeded` or `Failed` condition, pods ready when
`Running` is True, active while a replicaStatus has active pods, the priority class from
`runPolicy.schedulingPolicy.priorityClass` then the Launcher's, then the Worker's pod template.
Its own controller's managedBy is `kubeflow.org/mpi-operator`.

The MPI Operator runs the launcher as a batch/v1 Job it owns: that Job is not a top-level job, the
batch/v1 Job integration leaves it to the MPIJob's Workload (`manages_child`).
"""

from __future__ import annotations

from kueue_domain import api
from worker_agent.integrations.kubeflow import KubeflowJobReconciler, KubeflowKind

MPI_JOB = KubeflowKind(
    api.FRAMEWORK_MPI_JOB,
    api.MPI_JOB,
    "mpiReplicaSpecs",
    (api.REPLICA_LAUNCHER, api.REPLICA_WORKER),
    managed_by_default=api.MPI_JOB_MANAGED_BY_DEFAULT,
)


class MPIJobIntegration(KubeflowJobReconciler):
    kind = MPI_JOB
