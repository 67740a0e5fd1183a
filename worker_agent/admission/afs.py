"""Admission Fair Sharing's bookkeeping from informer events, as upstream's LocalQueue and Workload
controllers keep the usage ledger (engine/admissionfairsharing.py): a LocalQueue's weight, the
entry penalty of an admission settled when the Workload becomes Admitted, and dropped when it can
no longer be (the admission write failed; the Workload deleted, finished, moved to another
LocalQueue, or deactivated without a reservation)."""

from __future__ import annotations

from kube_runtime.informer import object_key
from kueue_domain import api
from kueue_domain import workload as wlstatus
from kueue_domain.resources import QuantityError, parse_quantity
from worker_agent.admission.core import Obj
from worker_agent.admission.lookups import WorkloadLookups
from worker_agent.engine.admissionfairsharing import Amounts, base_amounts
from worker_agent.engine.workloads import holds_quota


def local_queue_weight(lq: Obj) -> float:
    """`spec.fairSharing.weight` (default 1)."""
    weight = ((lq.get("spec") or {}).get("fairSharing") or {}).get("weight")
    if weight is None:
        return 1.0
    try:
        return float(parse_quantity(weight))
    except QuantityError:
        return 1.0


def _lq_key(wl: Obj) -> str:
    return f"{wl['metadata']['namespace']}/{(wl.get('spec') or {}).get('queueName', '')}"


class AdmissionFairSharingEvents(WorkloadLookups):
    """Keeps `afs_ledger` (None unless the gate is on and `admissionFairSharing` is configured)."""

    def afs_usage_based(self, cq_name: str) -> bool:
        cq = self.snapshot.cluster_queues.get(cq_name)
        return cq is not None and cq.admission_mode == api.ADMISSION_MODE_USAGE_BASED

    def afs_admitted_usage(self, lq_key: str, cq_name: str) -> Amounts:
        """The LocalQueue's admitted usage per resource (flavors summed), in base units."""
        cq = self.snapshot.cluster_queues.get(cq_name)
        totals: dict[str, int] = {}
        for info in cq.workloads.values() if cq is not None else ():
            if f"{info.namespace}/{info.queue_name}" != lq_key:
                continue
            obj = self.workloads.get(info.key)
            if obj is None or not wlstatus.is_admitted(obj):
                continue
            for (_flavor, name), amount in info.usage.items():
                totals[name] = totals.get(name, 0) + amount
        return base_amounts(totals)

    def _afs_local_queue(self, lq: Obj, deleted: bool = False) -> None:
        if self.afs_ledger is None:
            return
        if deleted:
            self.afs_ledger.delete(object_key(lq))
        else:
            self.afs_ledger.set_weight(object_key(lq), local_queue_weight(lq))

    def _afs_workload(self, old: Obj | None, new: Obj) -> None:
        ledger = self.afs_ledger
        if ledger is None or old is None:
            return
        key, lq = object_key(new), _lq_key(new)
        active, now = wlstatus.is_active(new), self.clock.now().timestamp()
        cq = self.cluster_queue_for(new) or ""
        if (
            active
            and wlstatus.is_admitted(new)
            and not wlstatus.is_admitted(old)
            and self.afs_usage_based(cq)
        ):
            ledger.settle(lq, key, self.afs_admitted_usage(lq, cq), now)
        if (old.get("spec") or {}).get("queueName") != (new.get("spec") or {}).get("queueName"):
            ledger.sub_penalty(_lq_key(old), key)
        inactive_unreserved = not active and not holds_quota(new)
        was_active_or_reserved = wlstatus.is_active(old) or holds_quota(old)
        finished_now = wlstatus.is_finished(new) and not wlstatus.is_finished(old)
        if (inactive_unreserved and was_active_or_reserved) or finished_now:
            ledger.sub_penalty(lq, key)

    def _afs_workload_gone(self, wl: Obj) -> None:
        """Deleted, or its admission write failed: its penalty will never be settled."""
        if self.afs_ledger is not None:
            self.afs_ledger.sub_penalty(_lq_key(wl), object_key(wl))
