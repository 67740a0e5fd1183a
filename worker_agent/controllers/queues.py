"""ClusterQueue and LocalQueue status, ResourceFlavor/AdmissionCheck/ClusterQueue finalizers, and
WorkloadPriorityClass propagation.

Status is derived from the admission state (the cache and the queue manager), never from a
second bookkeeping, and written with server-side apply only when it differs.
"""

from __future__ import annotations

from typing import Any

import structlog

from kube_runtime.apply import apply_status_if_changed, set_finalizer
from kube_runtime.client import KubeClient, NotFound
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition, format_time, set_status_condition
from kube_runtime.controller import Result
from kueue_domain import api
from kueue_domain import workload as wlstatus
from kueue_domain.resources import format_amount
from worker_agent.admission import INDEX_CLUSTER_QUEUE, INDEX_PRIORITY_CLASS, AdmissionState
from worker_agent.cohort_metrics import CohortMetrics
from worker_agent.engine import ClusterQueue, dominant_resource_share
from worker_agent.engine.admissionfairsharing import amounts_from_api, amounts_to_api

log = structlog.get_logger("worker_agent.queues")

Obj = dict[str, Any]

# Status writes of these controllers; Kueue's own ClusterQueue/LocalQueue controllers use plain
# updates, which record the binary's name as manager.
FIELD_MANAGER_QUEUES = "kueue"
WORKLOAD_EVENT_BATCH_SECONDS = 1.0  # workload-driven queue status updates are batched


def _flavor_usage(
    cq_spec: Obj, usage: dict[tuple[str, str], int], nominal: dict[tuple[str, str], int] | None
) -> list[Obj]:
    """[{name, resources:[{name,total[,borrowed]}]}] per flavor x covered resource in group order."""
    out = []
    has_cohort = bool(cq_spec.get("cohort") or cq_spec.get("cohortName"))
    for rg in cq_spec.get("resourceGroups") or ():
        covered = sorted(rg.get("coveredResources") or ())
        for flavor in rg.get("flavors") or ():
            resources = []
            for rname in covered:
                total = usage.get((flavor["name"], rname), 0)
                item: Obj = {"name": rname, "total": format_amount(rname, total)}
                if nominal is not None:
                    borrowed = total - nominal.get((flavor["name"], rname), 0) if has_cohort else 0
                    item["borrowed"] = format_amount(rname, max(0, borrowed))
                resources.append(item)
            out.append({"name": flavor["name"], "resources": resources})
    return out


def _add(usage: dict[tuple[str, str], int], more: dict[tuple[str, str], int]) -> None:
    for fr, val in more.items():
        usage[fr] = usage.get(fr, 0) + val


class QueueStatusControllers:
    """Reconcilers for ClusterQueues, LocalQueues, ResourceFlavors, AdmissionChecks and WPCs."""

    def __init__(
        self, kube: KubeClient, state: AdmissionState, clock: Clock | None = None, metrics: Any = None
    ):
        self.kube = kube
        self.state = state
        self.clock = clock or Clock()
        self.metrics = metrics
        # Admitted quota holders per ClusterQueue, as last counted for its status.
        self._admitted_counts: dict[str, int] = {}
        self.cohort_metrics = CohortMetrics(metrics, self._admitted_count) if metrics is not None else None

    def _admitted_count(self, cq: ClusterQueue) -> int:
        count = self._admitted_counts.get(cq.name)
        if count is None:
            count = 0
            for info in cq.workloads.values():
                obj = self.state.workloads.get(info.key)
                if obj is not None and wlstatus.is_admitted(obj):
                    count += 1
            self._admitted_counts[cq.name] = count
        return count

    def _cohort_metrics_for_cluster_queue(self, name: str) -> None:
        if self.cohort_metrics is None:
            return
        if self.state.structure_dirty:
            self.state.rebuild()
        self.cohort_metrics.cluster_queue_changed(self.state.snapshot, name)

    # -- ClusterQueue ----------------------------------------------------------------------------

    def cluster_queue_counts(self, name: str) -> tuple[int, int, int, int, int]:
        """(pending, active, inadmissible, reserving, admitted)."""
        pending_queue = self.state.queues.queues.get(name)
        pending = pending_queue.pending() if pending_queue is not None else 0
        inadmissible = pending_queue.inadmissible_count() if pending_queue is not None else 0
        reserving = admitted = 0
        for info in self._reserving(name):
            reserving += 1
            obj = self.state.workloads.get(info.key)
            if obj is not None and wlstatus.is_admitted(obj):
                admitted += 1
        return pending, pending - inadmissible, inadmissible, reserving, admitted

    def _reserving(self, cq_name: str):
        cq = self.state.snapshot.cluster_queues.get(cq_name)
        if cq is not None:
            return list(cq.workloads.values())
        return [w for w in self.state.snapshot.workloads.values() if w.cluster_queue == cq_name]

    def cluster_queue_status(self, cq: Obj) -> Obj:
        name = cq["metadata"]["name"]
        spec = cq.get("spec") or {}
        if self.state.structure_dirty:
            self.state.rebuild()
        pending, active, inadmissible, reserving, admitted = self.cluster_queue_counts(name)
        self._admitted_counts[name] = admitted
        reserved_usage: dict[tuple[str, str], int] = {}
        admitted_usage: dict[tuple[str, str], int] = {}
        for info in self._reserving(name):
            _add(reserved_usage, info.usage)
            obj = self.state.workloads.get(info.key)
            if obj is not None and wlstatus.is_admitted(obj):
                _add(admitted_usage, info.usage)
        snap_cq = self.state.snapshot.cluster_queues.get(name)
        nominal = {fr: q.nominal for fr, q in snap_cq.quotas.items()} if snap_cq else {}
        is_active, reason, message = self.state.cq_states.get(name) or (False, api.CQ_REASON_UNKNOWN, "")
        conditions = list(((cq.get("status") or {}).get("conditions")) or ())
        conditions = [dict(c) for c in conditions if c.get("type") == api.CONDITION_ACTIVE]
        set_status_condition(
            conditions,
            {
                "type": api.CONDITION_ACTIVE,
                "status": "True" if is_active else "False",
                "reason": reason,
                "message": message,
                "observedGeneration": int(cq["metadata"].get("generation") or 0),
            },
            self.clock.now(),
        )
        status: Obj = {
            "conditions": conditions,
            "pendingWorkloads": pending,
            "reservingWorkloads": reserving,
            "admittedWorkloads": admitted,
            "flavorsReservation": _flavor_usage(spec, reserved_usage, nominal),
            "flavorsUsage": _flavor_usage(spec, admitted_usage, nominal),
        }
        if self.state.config.fair_sharing is not None and snap_cq is not None:
            share = dominant_resource_share(snap_cq)
            status["fairSharing"] = {"weightedShare": share.weighted_share}
        if self.metrics is not None:
            self.metrics.report_pending(name, active, inadmissible)
            self.metrics.report_cluster_queue_status(
                name,
                "terminating"
                if reason == api.CQ_REASON_TERMINATING
                else ("active" if is_active else "pending"),
            )
            self.metrics.report_reserving_admitted(name, reserving, admitted)
            cohort = spec.get("cohort") or spec.get("cohortName") or ""
            for (flavor, resource), value in nominal.items():
                quota = snap_cq.quotas[(flavor, resource)] if snap_cq else None
                self.metrics.report_cluster_queue_quotas(
                    cohort,
                    name,
                    flavor,
                    resource,
                    value,
                    quota.borrowing_limit if quota else None,
                    quota.lending_limit if quota else None,
                )
                self.metrics.report_cluster_queue_usage(
                    cohort,
                    name,
                    flavor,
                    resource,
                    reserved_usage.get((flavor, resource), 0),
                    admitted_usage.get((flavor, resource), 0),
                )
        return status

    async def reconcile_cluster_queue(self, name: str) -> Result | None:
        cq = self.state.cluster_queues.get(name)
        if cq is None:
            self._admitted_counts.pop(name, None)
            if self.metrics is not None:
                self.metrics.clear_cluster_queue(name)
            self._cohort_metrics_for_cluster_queue(name)
            return None
        if cq["metadata"].get("deletionTimestamp"):
            if not self._reserving(name) and await set_finalizer(
                self.kube, api.CLUSTER_QUEUE, cq, api.FINALIZER_RESOURCE_IN_USE, present=False
            ):
                return None
        else:
            # The finalizer and the status in one pass: the finalizer's own update is no spec change,
            # so nothing else would bring a new ClusterQueue back here for its Active condition.
            await set_finalizer(self.kube, api.CLUSTER_QUEUE, cq, api.FINALIZER_RESOURCE_IN_USE, present=True)
        status = self.cluster_queue_status(cq)
        self._cohort_metrics_for_cluster_queue(name)
        try:
            await apply_status_if_changed(self.kube, api.CLUSTER_QUEUE, cq, status, FIELD_MANAGER_QUEUES)
        except NotFound:
            return None
        return None

    # -- Cohort ----------------------------------------------------------------------------------

    async def reconcile_cohort(self, name: str) -> Result | None:
        """The cohort metrics of a Cohort object (and of its ancestors), and its
        `status.fairSharing.weightedShare` when fair sharing is on."""
        cohort = self.state.cohorts.get(name)
        if self.state.structure_dirty:
            self.state.rebuild()
        if self.cohort_metrics is not None:
            if cohort is None:
                self.cohort_metrics.cohort_deleted(self.state.snapshot, name)
            else:
                self.cohort_metrics.cohort_changed(self.state.snapshot, name)
        if cohort is None or self.state.config.fair_sharing is None:
            return None
        node = self.state.snapshot.cohorts.get(name)
        if node is None:
            return None
        drs = dominant_resource_share(node)
        status = {"fairSharing": {"weightedShare": drs.weighted_share}}
        if self.metrics is not None:
            self.metrics.report_cohort_weighted_share(name, drs.precise)
        try:
            await apply_status_if_changed(self.kube, api.COHORT, cohort, status, FIELD_MANAGER_QUEUES)
        except NotFound:
            return None
        return None

    def cohorts_above(self, cq_name: str) -> list[str]:
        """The cohort of a ClusterQueue and every ancestor (their shares change with its usage)."""
        cq = self.state.snapshot.cluster_queues.get(cq_name)
        names = []
        node = cq.parent if cq is not None else None
        while node is not None:
            names.append(node.name)
            node = node.parent
        return names

    # -- LocalQueue ------------------------------------------------------------------------------

    def local_queue_status(self, lq: Obj) -> Obj:
        namespace, name = lq["metadata"]["namespace"], lq["metadata"]["name"]
        spec = lq.get("spec") or {}
        cq_name = spec.get("clusterQueue", "")
        cq = self.state.cluster_queues.get(cq_name)
        if (spec.get("stopPolicy") or api.STOP_POLICY_NONE) != api.STOP_POLICY_NONE:
            status_value, reason, message = "False", api.LQ_REASON_STOPPED, api.LQ_MSG_STOPPED
        elif cq is None:
            status_value, reason, message = (
                "False",
                api.LQ_REASON_CLUSTER_QUEUE_DOES_NOT_EXIST,
                api.LQ_MSG_CLUSTER_QUEUE_INACTIVE,
            )
        elif not self.state.cluster_queue_active(cq_name):
            status_value, reason, message = (
                "False",
                api.LQ_REASON_CLUSTER_QUEUE_IS_INACTIVE,
                api.LQ_MSG_CLUSTER_QUEUE_INACTIVE,
            )
        else:
            status_value, reason, message = "True", api.LQ_REASON_READY, api.LQ_MSG_READY
        pending = 0
        pending_queue = self.state.queues.queues.get(cq_name)
        if pending_queue is not None:
            candidates = list(pending_queue.items.values()) + list(pending_queue.inadmissible.values())
            if pending_queue.inflight is not None:
                candidates.append(pending_queue.inflight)
            pending = sum(1 for w in candidates if w.namespace == namespace and w.queue_name == name)
        reserving = admitted = 0
        reserved_usage: dict[tuple[str, str], int] = {}
        admitted_usage: dict[tuple[str, str], int] = {}
        for info in self._reserving(cq_name):
            if info.namespace != namespace or info.queue_name != name:
                continue
            reserving += 1
            _add(reserved_usage, info.usage)
            obj = self.state.workloads.get(info.key)
            if obj is not None and wlstatus.is_admitted(obj):
                admitted += 1
                _add(admitted_usage, info.usage)
        conditions = [
            dict(c)
            for c in ((lq.get("status") or {}).get("conditions") or ())
            if c.get("type") == api.CONDITION_ACTIVE
        ]
        set_status_condition(
            conditions,
            {
                "type": api.CONDITION_ACTIVE,
                "status": status_value,
                "reason": reason,
                "message": message,
                "observedGeneration": int(lq["metadata"].get("generation") or 0),
            },
            self.clock.now(),
        )
        cq_spec = (cq or {}).get("spec") or {}
        status: Obj = {
            "conditions": conditions,
            "pendingWorkloads": pending,
            "reservingWorkloads": reserving,
            "admittedWorkloads": admitted,
            "flavorsReservation": _flavor_usage(cq_spec, reserved_usage, None),
            "flavorUsage": _flavor_usage(cq_spec, admitted_usage, None),
        }
        if self.metrics is not None:
            self.metrics.report_local_queue(
                namespace, name, pending, reserving, admitted, status_value == "True"
            )
        return status

    async def reconcile_local_queue(self, key: str) -> Result | None:
        lq = self.state.local_queues.get(key)
        if lq is None:
            if self.metrics is not None:
                namespace, _, name = key.partition("/")
                self.metrics.clear_local_queue(namespace, name)
            return None
        status = self.local_queue_status(lq)
        requeue_after = self._admission_fair_sharing_status(key, lq, status)
        try:
            await apply_status_if_changed(self.kube, api.LOCAL_QUEUE, lq, status, FIELD_MANAGER_QUEUES)
        except NotFound:
            return None
        return Result(requeue_after=requeue_after) if requeue_after is not None else None

    def _admission_fair_sharing_status(self, key: str, lq: Obj, status: Obj) -> float | None:
        """`status.fairSharing.admissionFairSharingStatus` of an active LocalQueue while Admission
        Fair Sharing is on, as upstream's LocalQueue controller keeps it: the persisted
        consumedResources taken in once, then every usageSamplingInterval (and at every reconcile
        while an entry penalty waits to be settled) decayed towards the queue's admitted usage,
        with lastUpdate. Returns when to come back."""
        previous = (lq.get("status") or {}).get("fairSharing")
        if previous is not None:
            status["fairSharing"] = previous  # kept as written until the next sample
        ledger = self.state.afs_ledger
        active = find_status_condition(status.get("conditions"), api.CONDITION_ACTIVE) or {}
        if ledger is None or active.get("status") != "True":
            return None
        now = self.clock.now()
        written = (previous or {}).get("admissionFairSharingStatus") or None
        existed = ledger.seed(
            key, amounts_from_api(written.get("consumedResources")) if written else None, now.timestamp()
        )
        wait = ledger.due_in(key, existed, now.timestamp())
        if wait is not None:
            return wait
        cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
        consumed = ledger.sample(key, self.state.afs_admitted_usage(key, cq_name), now.timestamp())
        if self.metrics is not None:
            namespace, _, name = key.partition("/")
            self.metrics.report_local_queue_afs_usage(namespace, name, cq_name, ledger.usage(key))
        status["fairSharing"] = {
            "weightedShare": int((previous or {}).get("weightedShare") or 0),
            "admissionFairSharingStatus": {
                "consumedResources": amounts_to_api(consumed),
                "lastUpdate": format_time(now),
            },
        }
        return ledger.config.sampling_interval_seconds

    # -- ResourceFlavor and AdmissionCheck finalizers ---------------------------------------------

    def _cq_references(self, kind: str, name: str) -> bool:
        for cq in self.state.cluster_queues.list():
            spec = cq.get("spec") or {}
            if kind == "flavor":
                if any(
                    f["name"] == name
                    for rg in spec.get("resourceGroups") or ()
                    for f in rg.get("flavors") or ()
                ):
                    return True
            else:
                names = set(spec.get("admissionChecks") or ())
                names |= {
                    r["name"]
                    for r in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ()
                }
                if name in names:
                    return True
        return False

    async def reconcile_resource_flavor(self, name: str) -> Result | None:
        return await self._reconcile_in_use(api.RESOURCE_FLAVOR, self.state.flavors.get(name), "flavor")

    async def reconcile_admission_check(self, name: str) -> Result | None:
        return await self._reconcile_in_use(
            api.ADMISSION_CHECK, self.state.admission_checks.get(name), "check"
        )

    async def _reconcile_in_use(self, resource: api.Resource, obj: Obj | None, kind: str) -> Result | None:
        if obj is None:
            return None
        deleting = bool(obj["metadata"].get("deletionTimestamp"))
        if deleting and self._cq_references(kind, obj["metadata"]["name"]):
            return None
        await set_finalizer(self.kube, resource, obj, api.FINALIZER_RESOURCE_IN_USE, present=not deleting)
        return None

    # -- WorkloadPriorityClass -------------------------------------------------------------------

    async def reconcile_priority_class(self, name: str) -> Result | None:
        """A WPC's value is copied to `spec.priority` of every Workload that references it."""
        wpc = self.state.priority_classes.get(name)
        if wpc is None:
            return None
        value = int(wpc.get("value") or 0)
        for wl in self.state.workloads.by_index(INDEX_PRIORITY_CLASS, name):
            if (wl.get("spec") or {}).get("priority") == value:
                continue
            meta = wl["metadata"]
            try:
                await self.kube.patch_merge(
                    api.WORKLOAD, meta["name"], {"spec": {"priority": value}}, namespace=meta["namespace"]
                )
            except NotFound:
                continue
        return None


def active_condition(obj: Obj) -> Obj | None:
    return find_status_condition((obj.get("status") or {}).get("conditions"), api.CONDITION_ACTIVE)


__all__ = ["INDEX_CLUSTER_QUEUE", "QueueStatusControllers", "active_condition"]
