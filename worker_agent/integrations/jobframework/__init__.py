"""One reconciler for every job kind (upstream's pkg/controller/jobframework): a kind is a subclass of
`JobReconciler` that declares its resource, framework name and controller, and implements the
small per-kind hooks (`podsets`, `is_suspended`, `is_active`, `finished`, `pods_ready`,
`reclaimable_pods`, `run`, `stop`); everything else (owner lookups and indexes, the queue-name and
namespace rules, managedBy, the MultiKueue check, creating or adopting the Workload, the
equivalence check, finish, eviction, owner-gone and WorkloadPriorityClass) is here, once.

A managed object gets one Workload `<kind>-<name>-<hash5>`; it is started (`run`, with the
assigned flavors' node selectors and tolerations) when the Workload is Admitted, stopped (`stop`,
templates restored from the Workload) when it is evicted, and finishes the Workload when it ends.

Modules: `objects` (pure reads of an object and its Workloads), `routing` (informer events to
reconciles, the parent walk), `workloads` (the one matching Workload, creation, orphans, status
writes), `reconciler` (JobReconciler: declarations, hooks, the reconcile), `templated`
(TemplatedReconciler: run and stop for the kinds whose PodSets are named pod templates inside the
object and that suspend by one field; such a kind declares `suspend_path` and `pod_templates`).
"""

from worker_agent.integrations.jobframework.objects import (
    INDEX_JOB_UID_LABEL,
    annotations_of,
    condition_finished,
    controller_ref_of_kind,
    controlling_owner,
    job_uid_label_index,
    labels_of,
    max_execution_seconds,
    owner_indexes,
    pods_ready_condition,
    workload_matches,
)
from worker_agent.integrations.jobframework.reconciler import STOP_RECHECK_SECONDS, JobReconciler

__all__ = [
    "INDEX_JOB_UID_LABEL",
    "STOP_RECHECK_SECONDS",
    "JobReconciler",
    "annotations_of",
    "condition_finished",
    "controller_ref_of_kind",
    "controlling_owner",
    "job_uid_label_index",
    "labels_of",
    "max_execution_seconds",
    "owner_indexes",
    "pods_ready_condition",
    "workload_matches",
]
