"""The snapshot's structure: quota trees rebuilt after a ClusterQueue, Cohort, ResourceFlavor or
AdmissionCheck change, and each ClusterQueue's Active state."""

from __future__ import annotations

from collections.abc import Iterable

from kube_runtime.informer import object_key
from kueue_domain import api
from kueue_domain import workload as wlstatus
from worker_agent.admission.core import Obj
from worker_agent.admission.informers import INDEX_CLUSTER_QUEUE, INDEX_QUEUE, AdmissionInformers
from worker_agent.engine import Scheduler, Snapshot


def cluster_queue_active_state(
    cq: Obj, flavors: Iterable[str], checks: dict[str, Obj]
) -> tuple[bool, str, str]:
    """(active, reason, message) of a ClusterQueue's Active condition."""
    if (cq.get("metadata") or {}).get("deletionTimestamp"):
        return False, api.CQ_REASON_TERMINATING, api.CQ_MSG_TERMINATING
    spec = cq.get("spec") or {}
    known_flavors = set(flavors)
    reasons: list[str] = []
    clauses: list[str] = []
    if (spec.get("stopPolicy") or api.STOP_POLICY_NONE) != api.STOP_POLICY_NONE:
        reasons.append(api.CQ_REASON_STOPPED)
        clauses.append(api.CQ_CLAUSE_STOPPED)
    missing_flavors: list[str] = []
    for rg in spec.get("resourceGroups") or ():
        for flavor in rg.get("flavors") or ():
            if flavor["name"] not in known_flavors and flavor["name"] not in missing_flavors:
                missing_flavors.append(flavor["name"])
    if missing_flavors:
        reasons.append(api.CQ_REASON_FLAVOR_NOT_FOUND)
        clauses.append(api.cq_clause_missing_flavors(missing_flavors))
    names = list(spec.get("admissionChecks") or ())
    for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ():
        if rule["name"] not in names:
            names.append(rule["name"])
    missing_checks = [n for n in names if n not in checks]
    if missing_checks:
        reasons.append(api.CQ_REASON_ADMISSION_CHECK_NOT_FOUND)
        clauses.append(api.cq_clause_missing_admission_checks(missing_checks))
    inactive = [
        n
        for n in names
        if n in checks and not wlstatus.is_status_condition_true_in(checks[n], api.CONDITION_ACTIVE)
    ]
    if inactive:
        reasons.append(api.CQ_REASON_ADMISSION_CHECK_INACTIVE)
        clauses.append(api.cq_clause_inactive_admission_checks(inactive))
    multikueue = [
        n
        for n in names
        if n in checks
        and (checks[n].get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME
    ]
    if len(multikueue) > 1:
        reasons.append(api.CQ_REASON_MULTIPLE_MULTIKUEUE_ADMISSION_CHECKS)
        clauses.append(api.cq_clause_multiple_multikueue_checks(multikueue))
    provisioning = sorted(
        n
        for n in names
        if n in checks
        and (checks[n].get("spec") or {}).get("controllerName") == api.PROVISIONING_REQUEST_CONTROLLER_NAME
    )
    if multikueue and provisioning:
        # Upstream: provisioning requests are not for a MultiKueue manager's ClusterQueue.
        reasons.append(api.CQ_REASON_MULTIKUEUE_WITH_PROVISIONING_REQUEST)
        clauses.append(
            api.cq_clause_multikueue_with_provisioning_request(
                ",".join(sorted(multikueue)), ",".join(provisioning)
            )
        )
    if not reasons:
        return True, api.CQ_REASON_READY, api.CQ_MSG_READY
    return False, reasons[0], api.cq_inactive_message(clauses)


class SnapshotStructure(AdmissionInformers):
    """Rebuilds the snapshot and the scheduler when the structure is dirty."""

    def _init_structure(self) -> None:
        self.structure_dirty = True
        self.cq_states: dict[str, tuple[bool, str, str]] = {}

    def rebuild(self) -> None:
        """Rebuild quota trees after a ClusterQueue, Cohort, ResourceFlavor or AdmissionCheck change."""
        self.structure_dirty = False
        checks = {ac["metadata"]["name"]: ac for ac in self.admission_checks.list()}
        flavor_names = self.flavors.store.keys()
        cq_objs = self.cluster_queues.list()
        snapshot = Snapshot.from_objects(
            cluster_queues=cq_objs,
            resource_flavors=self.flavors.list(),
            cohorts=self.cohorts.list(),
            workloads=list(self.snapshot.workloads.values()),
            requeuing_timestamp=self.requeuing_timestamp,
        )
        states = {}
        for obj in cq_objs:
            name = obj["metadata"]["name"]
            state = cluster_queue_active_state(obj, flavor_names, checks)
            states[name] = state
            if name in snapshot.cluster_queues:
                snapshot.cluster_queues[name].active = state[0]
            spec = obj.get("spec") or {}
            self.queues.ensure(
                name,
                spec.get("queueingStrategy") or api.QUEUEING_STRATEGY_BEST_EFFORT_FIFO,
                usage_based=(spec.get("admissionScope") or {}).get("admissionMode")
                == api.ADMISSION_MODE_USAGE_BASED,
            )
        changed = {n for n in set(states) | set(self.cq_states) if states.get(n) != self.cq_states.get(n)}
        self.cq_states = states
        in_flight = self.scheduler.preemptions_in_flight
        cycle = self.scheduler.cycle
        self.snapshot = snapshot
        self.scheduler = Scheduler(snapshot, self.queues, self.scheduler_config)
        self.scheduler.preemptions_in_flight = in_flight
        self.scheduler.cycle = cycle
        for name in changed:
            self._notify_cq(name)
            for lq in self.local_queues.by_index(INDEX_CLUSTER_QUEUE, name):
                self._notify_lq(object_key(lq))
                for wl in self.workloads.by_index(INDEX_QUEUE, object_key(lq)):
                    self._notify_wl(object_key(wl))

    def cluster_queue_active(self, name: str) -> bool:
        if self.structure_dirty:
            self.rebuild()
        state = self.cq_states.get(name)
        return bool(state and state[0])
