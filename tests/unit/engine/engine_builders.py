"""Builders for engine tests: API-shaped dicts for ClusterQueues, ResourceFlavors and Workloads."""

from __future__ import annotations

from typing import Any

from worker_agent.engine import WorkloadInfo
from worker_agent.engine.snapshot import ClusterQueue, Snapshot

T0 = "2026-01-01T00:00:00Z"


def ts(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def cluster_queue(
    name: str,
    *,
    cohort: str | None = None,
    flavors: dict[str, dict[str, Any]] | None = None,
    groups: list[dict[str, Any]] | None = None,
    preemption: dict[str, Any] | None = None,
    fungibility: dict[str, Any] | None = None,
    strategy: str | None = None,
    weight: str | None = None,
    namespace_selector: dict[str, Any] | None = None,
    stop_policy: str | None = None,
) -> dict[str, Any]:
    """`flavors` maps flavor -> resource -> nominal or (nominal, borrowingLimit, lendingLimit)."""
    if groups is None:
        flavors = flavors if flavors is not None else {"default": {"cpu": "10"}}
        covered: list[str] = []
        for resources in flavors.values():
            for rname in resources:
                if rname not in covered:
                    covered.append(rname)
        groups = [{"coveredResources": covered, "flavors": [_flavor_quota(f, r) for f, r in flavors.items()]}]
    spec: dict[str, Any] = {"resourceGroups": groups, "namespaceSelector": namespace_selector or {}}
    if cohort:
        spec["cohort"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if fungibility:
        spec["flavorFungibility"] = fungibility
    if strategy:
        spec["queueingStrategy"] = strategy
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    return {"metadata": {"name": name}, "spec": spec}


def _flavor_quota(flavor: str, resources: dict[str, Any]) -> dict[str, Any]:
    out = []
    for rname, quota in resources.items():
        if isinstance(quota, tuple):
            nominal, borrowing, lending = ([*list(quota), None, None])[:3]
        else:
            nominal, borrowing, lending = quota, None, None
        entry: dict[str, Any] = {"name": rname, "nominalQuota": nominal}
        if borrowing is not None:
            entry["borrowingLimit"] = borrowing
        if lending is not None:
            entry["lendingLimit"] = lending
        out.append(entry)
    return {"name": flavor, "resources": out}


def resource_flavor(
    name: str,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if labels:
        spec["nodeLabels"] = labels
    if taints:
        spec["nodeTaints"] = taints
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name}, "spec": spec}


def pod_template(requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": requests}
    return {"spec": {"containers": [container], **spec}}


def workload_obj(
    name: str,
    *,
    cpu: str | None = "1",
    count: int = 1,
    priority: int = 0,
    created: int = 0,
    namespace: str = "default",
    podsets: list[dict[str, Any]] | None = None,
    requests: dict[str, str] | None = None,
    min_count: int | None = None,
    **template_spec: Any,
) -> dict[str, Any]:
    if podsets is None:
        reqs = dict(requests or {})
        if cpu is not None:
            reqs.setdefault("cpu", cpu)
        podset: dict[str, Any] = {
            "name": "main",
            "count": count,
            "template": pod_template(reqs, **template_spec),
        }
        if min_count is not None:
            podset["minCount"] = min_count
        podsets = [podset]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": ts(created),
        },
        "spec": {"queueName": "lq", "priority": priority, "podSets": podsets},
    }


def workload(name: str, cq: str, **kwargs: Any) -> WorkloadInfo:
    return WorkloadInfo.from_dict(workload_obj(name, **kwargs), cluster_queue=cq)


def admitted_obj(
    name: str,
    cq: str,
    *,
    flavor: str = "default",
    usage: dict[str, str] | None = None,
    count: int = 1,
    priority: int = 0,
    created: int = 0,
    reserved_at: int = 0,
    namespace: str = "default",
) -> dict[str, Any]:
    usage = usage or {"cpu": "1"}
    obj = workload_obj(
        name, cpu=None, requests=None, count=count, priority=priority, created=created, namespace=namespace
    )
    obj["status"] = {
        "admission": {
            "clusterQueue": cq,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": dict.fromkeys(usage, flavor),
                    "resourceUsage": usage,
                    "count": count,
                }
            ],
        },
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "lastTransitionTime": ts(reserved_at),
            }
        ],
    }
    return obj


def admitted(name: str, cq: str, **kwargs: Any) -> WorkloadInfo:
    return WorkloadInfo.from_dict(admitted_obj(name, cq, **kwargs))


def snapshot(
    cqs: list[dict], flavors: list[dict] | None = None, workloads: list | None = None, **kw: Any
) -> Snapshot:
    if flavors is None:
        names = {f["name"] for cq in cqs for g in cq["spec"]["resourceGroups"] for f in g["flavors"]}
        flavors = [resource_flavor(n) for n in sorted(names)]
    return Snapshot.from_objects(
        cluster_queues=cqs, resource_flavors=flavors, workloads=workloads or [], **kw
    )


def cq_of(snap: Snapshot, name: str) -> ClusterQueue:
    return snap.cluster_queues[name]
