"""What the plugin shows, computed from API objects alone (no I/O): a worker's connection, a
ClusterQueue's usage, where a manager Workload stands on its way from submitted to running and
why it waits, and the rows of `describe`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from kueue_domain import api
from kueue_domain import workload as wlutil

Obj = dict[str, Any]

# Stages of a manager Workload, in the order it goes through them.
PENDING = "Pending"  # no quota on the manager yet
INACTIVE = "Inactive"  # spec.active false: it will not be admitted until reactivated
DISPATCHING = "Dispatching"  # quota reserved; copies on workers, none admitted yet
ADMITTED = "Admitted"  # a worker admitted its copy; the job is being started there
RUNNING = "Running"  # the worker's copy reports its pods ready
EVICTED = "Evicted"  # evicted; on its way back to the queue
FINISHED = "Finished"


def condition(obj: Obj | None, ctype: str) -> Obj:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return c
    return {}


def is_true(obj: Obj | None, ctype: str) -> bool:
    return condition(obj, ctype).get("status") == "True"


# -- workers ------------------------------------------------------------------------------------


@dataclasses.dataclass
class WorkerRow:
    name: str
    active: str  # "True", "False" or "Unknown"
    reason: str
    message: str
    source: str  # where the manager reads its kubeconfig: "Secret kueue-system/worker1-secret"


def worker_row(mkc: Obj, secrets_namespace: str) -> WorkerRow:
    active = condition(mkc, "Active")
    spec = mkc.get("spec") or {}
    if (spec.get("clusterProfileRef") or {}).get("name"):
        source = f"ClusterProfile {spec['clusterProfileRef']['name']}"
    else:
        ref = spec.get("kubeConfig") or {}
        kind = ref.get("locationType") or "Secret"
        where = (
            f"{secrets_namespace}/{ref.get('location', '')}" if kind == "Secret" else ref.get("location", "")
        )
        source = f"{kind} {where}"
    return WorkerRow(
        name=mkc["metadata"]["name"],
        active=active.get("status") or "Unknown",
        reason=active.get("reason") or "",
        message=active.get("message") or "no Active condition yet (is the manager running?)",
        source=source,
    )


# -- ClusterQueues --------------------------------------------------------------------------------


@dataclasses.dataclass
class QueueRow:
    cluster: str
    name: str
    pending: int
    admitted: int
    usage: str  # "cpu 2/32, memory 400Mi/128Gi"
    active: str


def quota_of(cq: Obj) -> dict[str, dict[str, str]]:
    """flavor -> resource -> nominalQuota."""
    quota: dict[str, dict[str, str]] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for r in flavor.get("resources") or ():
                quota.setdefault(flavor["name"], {})[r["name"]] = str(r.get("nominalQuota", "0"))
    return quota


def usage_text(cq: Obj) -> str:
    """Each resource's use against its nominal quota, flavor by flavor (the flavor is named when the
    queue has more than one)."""
    quota = quota_of(cq)
    used: dict[str, dict[str, str]] = {}
    for flavor in (cq.get("status") or {}).get("flavorsUsage") or ():
        for r in flavor.get("resources") or ():
            used.setdefault(flavor["name"], {})[r["name"]] = str(r.get("total", "0"))
    parts = []
    for flavor, resources in quota.items():
        prefix = f"{flavor}: " if len(quota) > 1 else ""
        parts.append(
            prefix
            + ", ".join(
                f"{name} {used.get(flavor, {}).get(name, '0')}/{nominal}"
                for name, nominal in resources.items()
            )
        )
    return "; ".join(parts) or "no quota"


def queue_row(cluster: str, cq: Obj) -> QueueRow:
    status = cq.get("status") or {}
    return QueueRow(
        cluster=cluster,
        name=cq["metadata"]["name"],
        pending=int(status.get("pendingWorkloads") or 0),
        admitted=int(status.get("admittedWorkloads") or 0),
        usage=usage_text(cq),
        active=condition(cq, "Active").get("status") or "Unknown",
    )


# -- manager Workloads ------------------------------------------------------------------------------


def multikueue_check(wl: Obj, multikueue_checks: Iterable[str]) -> Obj:
    """The Workload's state of its MultiKueue admission check ({} when it has none)."""
    names = set(multikueue_checks)
    for state in (wl.get("status") or {}).get("admissionChecks") or ():
        if state.get("name") in names:
            return state
    return {}


def job_of(wl: Obj) -> str:
    """`kind/name` of the job the Workload belongs to."""
    meta = wl.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return f"{ref['kind']}/{ref['name']}"
    annotations = meta.get("annotations") or {}
    gvk, name = annotations.get(api.ANNOTATION_JOB_OWNER_GVK), annotations.get(api.ANNOTATION_JOB_OWNER_NAME)
    if gvk and name:
        return f"{gvk.rsplit('Kind=', 1)[-1]}/{name}"
    return "-"


@dataclasses.dataclass
class WorkloadRow:
    namespace: str
    name: str
    job: str
    stage: str
    worker: str
    why: str  # why it waits (or where it runs), merged from the manager and the workers


def copy_waits_because(cluster: str, copy: Obj, position: int | None, named: bool = False) -> str:
    """One worker's own reason for not admitting its copy and its place in that worker's queue;
    `named`: the manager's check message already quotes that worker's reason, so only the place."""
    where = f"position {position} in its ClusterQueue" if position is not None else ""
    if named:
        return f"{cluster}: {where}" if where else ""
    message = condition(copy, "QuotaReserved").get("message") or "not admitted yet"
    return f"{cluster}: {message}" + (f" ({where})" if where else "")


def workload_row(
    wl: Obj,
    multikueue_checks: Iterable[str],
    copies: dict[str, Obj | None] | None = None,
    positions: dict[str, int] | None = None,
    job_running: bool = False,
) -> WorkloadRow:
    """Where a manager Workload stands. `copies` maps each worker to the Workload's copy there (None
    when the worker has none or could not be read), `positions` a worker to the copy's position in
    its ClusterQueue; `job_running`: the manager's job object shows the worker's pods ready (its
    status is mirrored from the worker)."""
    copies, positions = copies or {}, positions or {}
    meta, status = wl["metadata"], wl.get("status") or {}
    check = multikueue_check(wl, multikueue_checks)
    worker = status.get("clusterName") or ""
    row = WorkloadRow(meta.get("namespace", ""), meta["name"], job_of(wl), PENDING, worker or "-", "")
    if wlutil.is_finished(wl):
        row.stage, row.why = FINISHED, condition(wl, "Finished").get("message", "")
    elif not wlutil.is_active(wl):
        row.stage, row.why = INACTIVE, "spec.active is false: it will not be admitted until reactivated"
    elif wlutil.is_admitted(wl) and worker:
        remote = copies.get(worker)
        running = job_running or (remote is not None and is_true(remote, "PodsReady"))
        row.stage = RUNNING if running else ADMITTED
        row.why = check.get("message") or f'The workload was admitted on "{worker}"'
    elif is_true(wl, "Evicted"):
        row.stage, row.why = EVICTED, condition(wl, "Evicted").get("message", "")
    elif wlutil.has_quota_reservation(wl):
        row.stage = DISPATCHING
        message = check.get("message") or ""
        waits = [
            copy_waits_because(cluster, copy, positions.get(cluster), named=f'"{cluster}"' in message)
            for cluster, copy in sorted(copies.items())
            if copy is not None and not wlutil.has_quota_reservation(copy)
        ]
        admitted_elsewhere = [
            c for c, copy in copies.items() if copy is not None and wlutil.is_admitted(copy)
        ]
        if admitted_elsewhere and not waits:
            row.why = f"admitted on {', '.join(sorted(admitted_elsewhere))}; the manager is placing it there"
        else:
            row.why = "; ".join(part for part in [message, *waits] if part) or "waiting for a worker"
    else:
        reserved = condition(wl, "QuotaReserved")
        row.why = reserved.get("message") or "waiting for quota on the manager"
    return row


def job_running(kind: str, obj: Obj | None) -> bool:
    """The job object (the manager's, its status mirrored from the worker) has pods ready: a Job
    with ready pods, a LeaderWorkerSet with every group ready, a JobSet with a ready Job."""
    status = (obj or {}).get("status") or {}
    if kind == "Job":
        return int(status.get("ready") or 0) > 0
    if kind == "LeaderWorkerSet":
        replicas = ((obj or {}).get("spec") or {}).get("replicas", 1)
        return int(status.get("readyReplicas") or 0) >= replicas > 0
    if kind == "JobSet":
        return any(int(j.get("ready") or 0) > 0 for j in status.get("replicatedJobsStatus") or ())
    return False


def remote_readiness(kind: str, obj: Obj | None) -> str:
    """A one-line account of a job object on a worker."""
    if obj is None:
        return "no copy"
    status = obj.get("status") or {}
    if kind == "Job":
        counts = {k: int(status.get(k) or 0) for k in ("active", "ready", "succeeded", "failed")}
        state = next((c["type"] for c in status.get("conditions") or () if c.get("status") == "True"), "")
        text = ", ".join(f"{k} {v}" for k, v in counts.items())
        return f"{text}{'; ' + state if state else ''}"
    if kind == "LeaderWorkerSet":
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        return f"ready {int(status.get('readyReplicas') or 0)}/{replicas} groups"
    if kind == "JobSet":
        state = next(
            (c["type"] for c in status.get("conditions") or () if c.get("status") == "True"), "running"
        )
        jobs = status.get("replicatedJobsStatus") or ()
        ready = sum(int(j.get("ready") or 0) for j in jobs)
        return f"{ready} jobs ready; {state}"
    return "present"
