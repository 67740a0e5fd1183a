"""MultiKueue manager quota automation (feature gate `MultiKueueManagerQuotaAutomation`, alpha, off
by default; upstream KEP 9988, pkg/controller/admissionchecks/multikueue/clusterqueue.go).

With the gate on, every ClusterQueue of the manager cluster that uses a MultiKueue AdmissionCheck
carries the condition `MultiKueueManagerQuotaAutomation`. When the check's MultiKueueConfig says
`spec.quotaManagement: Automated` (a v1beta2 field), the ClusterQueue's one flavor gets, for each
covered resource, the sum of the nominal quotas of the worker ClusterQueues that serve it: a worker
ClusterQueue counts when one of its LocalQueues has the namespace and name of a manager LocalQueue
of that ClusterQueue, on every worker of the config whose connection is up. Borrowing and lending
limits of the manager flavor are dropped, as upstream's update drops them.

The pure part (which check, what to write) is in functions; `QuotaAutomation` reads the manager's
caches and the workers' queue caches (unfiltered ClusterQueue and LocalQueue watches that each
worker connection opens when the gate is on) and writes the quotas (a merge patch with the cached
resourceVersion) and the condition (a status apply as our own field manager, so the worker_agent's
apply of `Active` and ours never remove each other's condition).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from kube_runtime.apply import apply_body
from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition, set_status_condition
from kube_runtime.controller import Result
from kube_runtime.informer import Informer, object_key
from kueue_domain import api
from kueue_domain.resources import QuantityError, parse_quantity, sum_quantities
from manager.admissioncheck import AdmissionCheckController, config_name_or_empty, is_multikueue_check
from manager.clusters import Remotes

log = structlog.get_logger("manager.quota_automation")

Obj = dict[str, Any]
CONDITION = api.CONDITION_MULTIKUEUE_MANAGER_QUOTA_AUTOMATION
# LocalQueues by spec.clusterQueue, on the manager and in each worker's queue cache.
INDEX_CLUSTER_QUEUE = "spec.clusterQueue"


def lq_cluster_queue(lq: Obj) -> str:
    return (lq.get("spec") or {}).get("clusterQueue") or ""


def lq_cluster_queue_index(lq: Obj) -> list[str]:
    name = lq_cluster_queue(lq)
    return [name] if name else []


def check_names(cq: Obj) -> list[str]:
    """The AdmissionChecks a ClusterQueue names (v1beta1 `admissionChecks` and the strategy's)."""
    spec = cq.get("spec") or {}
    names = list(spec.get("admissionChecks") or ())
    for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ():
        if rule.get("name"):
            names.append(rule["name"])
    return names


def multikueue_check(cq: Obj, checks: Iterable[Obj]) -> Obj | None:
    """The first (by name) MultiKueue AdmissionCheck the ClusterQueue uses, or None."""
    names = set(check_names(cq))
    found = [c for c in checks if is_multikueue_check(c) and c["metadata"]["name"] in names]
    return min(found, key=lambda c: c["metadata"]["name"]) if found else None


def quota_management(config: Obj) -> str:
    return (config.get("spec") or {}).get("quotaManagement") or api.QUOTA_MANAGEMENT_MANUAL


@dataclass(frozen=True)
class WorkerQueues:
    """One connected worker's queues: its LocalQueues and ClusterQueues (any order)."""

    local_queues: list[Obj]
    cluster_queues: list[Obj]


def aggregate(local_queue_keys: set[str], workers: Iterable[WorkerQueues]) -> dict[str, str]:
    """resource -> the sum (a canonical quantity string) of the nominal quotas, over every flavor,
    of each worker ClusterQueue that a LocalQueue with one of `local_queue_keys` (namespace/name)
    points to on that worker. Workers in the config's order, their ClusterQueues by name."""
    amounts: dict[str, list[str]] = {}
    for worker in workers:
        served = {lq_cluster_queue(lq) for lq in worker.local_queues if object_key(lq) in local_queue_keys}
        for cq in sorted(worker.cluster_queues, key=lambda c: c["metadata"]["name"]):
            if cq["metadata"]["name"] not in served:
                continue
            for group in (cq.get("spec") or {}).get("resourceGroups") or ():
                for flavor in group.get("flavors") or ():
                    for quota in flavor.get("resources") or ():
                        amounts.setdefault(quota["name"], []).append(quota.get("nominalQuota", "0"))
    return {name: sum_quantities(values) for name, values in amounts.items()}


@dataclass(frozen=True)
class Decision:
    """The condition to show, and the flavor's new `resources` when the quotas are to be set."""

    status: str
    reason: str
    message: str
    resources: list[Obj] | None = None


def unsupported(message: str) -> Decision:
    return Decision(api.CONDITION_FALSE, api.QUOTA_AUTOMATION_REASON_UNSUPPORTED, message)


def decide(cq: Obj, config: Obj | None, totals: Callable[[], dict[str, str]]) -> Decision:
    """What upstream's reconcile of a manager ClusterQueue with a MultiKueue check concludes.
    `config` None: the check's MultiKueueConfig does not exist. `totals`: the workers' sums."""
    if config is None:
        return unsupported(api.QUOTA_AUTOMATION_MSG_CONFIG_NOT_FOUND)
    if quota_management(config) != api.QUOTA_MANAGEMENT_AUTOMATED:
        return Decision(
            api.CONDITION_FALSE,
            api.QUOTA_AUTOMATION_REASON_NOT_REQUESTED,
            api.QUOTA_AUTOMATION_MSG_NOT_REQUESTED,
        )
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    if len(groups) != 1 or len(groups[0].get("flavors") or ()) != 1:
        return unsupported(api.QUOTA_AUTOMATION_MSG_ONE_FLAVOR)
    covered = list(groups[0].get("coveredResources") or ())
    sums = totals()
    missing = sorted(set(sums) - set(covered))
    if missing:
        return unsupported(api.quota_automation_missing_resources_message(missing))
    resources = [{"name": name, "nominalQuota": sums.get(name, "0")} for name in covered]
    return Decision(
        api.CONDITION_TRUE,
        api.QUOTA_AUTOMATION_REASON_AUTOMATED,
        api.QUOTA_AUTOMATION_MSG_AUTOMATED,
        resources,
    )


def _same_value(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except (QuantityError, TypeError, AttributeError):
        return a == b


def same_resources(current: list[Obj], desired: list[Obj]) -> bool:
    """Semantic equality of two flavor `resources` lists (quantities by value; a borrowing or
    lending limit on the current side is a difference, since the desired list has none)."""
    if len(current) != len(desired):
        return False
    for have, want in zip(current, desired, strict=True):
        if set(have) - {"name", "nominalQuota"} or have.get("name") != want["name"]:
            return False
        if not _same_value(have.get("nominalQuota", "0"), want["nominalQuota"]):
            return False
    return True


class QuotaAutomation:
    """The reconcile of manager ClusterQueues (keyed by name) and what enqueues them."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        cluster_queues: Informer,
        local_queues: Informer,
        checks: Informer,
        configs: Informer,
        ac_controller: AdmissionCheckController,
        remotes: Remotes,
        clock: Clock,
    ) -> None:
        self.kube = kube
        self.cluster_queues = cluster_queues
        self.local_queues = local_queues
        self.checks = checks
        self.configs = configs
        self.ac_controller = ac_controller
        self.remotes = remotes
        self.clock = clock
        self._enqueue_later: Callable[[str], None] = lambda name: None

    # -- the reconcile -----------------------------------------------------------------------

    async def reconcile(self, name: str) -> Result | None:
        cq = self.cluster_queues.get(name)
        if cq is None:
            return None
        check = multikueue_check(cq, self.checks.list())
        if check is None:
            await self._remove_condition(cq)
            return None
        config_name = config_name_or_empty(check)
        if not config_name:
            return None  # upstream fails this reconcile; the check's next change brings it back
        config = self.configs.get(config_name)
        decision = decide(cq, config, lambda: self.totals(cq, config or {}))
        if decision.resources is not None:
            group = (cq.get("spec") or {}).get("resourceGroups")[0]
            if not same_resources(group["flavors"][0].get("resources") or [], decision.resources):
                cq = await self._write_quotas(cq, decision.resources)
        await self._write_condition(cq, decision)
        return None

    def totals(self, cq: Obj, config: Obj) -> dict[str, str]:
        keys = {
            object_key(lq) for lq in self.local_queues.by_index(INDEX_CLUSTER_QUEUE, cq["metadata"]["name"])
        }
        workers = []
        for cluster in (config.get("spec") or {}).get("clusters") or ():
            remote = self.remotes.available(cluster)
            lqs = remote.cache(api.LOCAL_QUEUE) if remote is not None else None
            cqs = remote.cache(api.CLUSTER_QUEUE) if remote is not None else None
            if lqs is None or cqs is None:
                log.debug("worker skipped in quota aggregation: not connected", cluster=cluster)
                continue
            workers.append(WorkerQueues(lqs.list(), cqs.list()))
        return aggregate(keys, workers)

    async def _write_quotas(self, cq: Obj, resources: list[Obj]) -> Obj:
        group = copy.deepcopy(cq["spec"]["resourceGroups"][0])
        group["flavors"][0]["resources"] = resources
        patch = {
            "metadata": {"resourceVersion": cq["metadata"].get("resourceVersion")},
            "spec": {"resourceGroups": [group]},
        }
        log.info("setting manager ClusterQueue quotas from workers", clusterQueue=cq["metadata"]["name"])
        return await self.kube.patch_merge(
            api.CLUSTER_QUEUE, cq["metadata"]["name"], patch, field_manager=api.FIELD_MANAGER_MULTIKUEUE_QUOTA
        )

    async def _write_condition(self, cq: Obj, decision: Decision) -> None:
        current = find_status_condition((cq.get("status") or {}).get("conditions"), CONDITION)
        generation = int(cq["metadata"].get("generation") or 0)
        if current is not None and (
            current.get("status"),
            current.get("reason"),
            current.get("message"),
            current.get("observedGeneration"),
        ) == (decision.status, decision.reason, decision.message, generation):
            return  # written already, for this generation (a quota write since moves it on)
        conditions = [dict(current)] if current is not None else []
        set_status_condition(
            conditions,
            {
                "type": CONDITION,
                "status": decision.status,
                "reason": decision.reason,
                "message": decision.message,
                "observedGeneration": generation,
            },
            self.clock.now(),
        )
        body = apply_body(api.CLUSTER_QUEUE, cq["metadata"]["name"], status={"conditions": conditions})
        await self.kube.apply_status(api.CLUSTER_QUEUE, body, api.FIELD_MANAGER_MULTIKUEUE_QUOTA, force=True)

    async def _remove_condition(self, cq: Obj) -> None:
        conditions = (cq.get("status") or {}).get("conditions") or []
        for i, condition in enumerate(conditions):
            if condition.get("type") == CONDITION:
                path = f"/status/conditions/{i}"
                await self.kube.patch_json(
                    api.CLUSTER_QUEUE,
                    cq["metadata"]["name"],
                    [
                        {"op": "test", "path": f"{path}/type", "value": CONDITION},
                        {"op": "remove", "path": path},
                    ],
                    subresource="status",
                )
                return

    # -- what enqueues a ClusterQueue --------------------------------------------------------

    def queues_for_checks(self, names: Iterable[str]) -> list[str]:
        wanted = set(names)
        return [
            cq["metadata"]["name"]
            for cq in self.cluster_queues.list()
            if wanted.intersection(check_names(cq))
        ]

    def queues_for_config(self, config_name: str) -> list[str]:
        return self.queues_for_checks(self.ac_controller.checks_for_config(config_name))

    def queues_for_cluster(self, cluster_name: str) -> list[str]:
        return self.queues_for_checks(self.ac_controller.checks_for_cluster(cluster_name))

    def queues_for_remote_local_queues(self, remote_lqs: Iterable[Obj]) -> list[str]:
        """The manager ClusterQueues of the manager LocalQueues that share a worker LocalQueue's key."""
        names = []
        for lq in remote_lqs:
            local = self.local_queues.get(object_key(lq))
            if local is not None and lq_cluster_queue(local):
                names.append(lq_cluster_queue(local))
        return names

    def wire(self, enqueue: Callable[[str], None], enqueue_later: Callable[[str], None]) -> None:
        """Handlers on the manager's caches. `enqueue_later`: batched (upstream's events batch)."""

        def each(names: Iterable[str]) -> None:
            for name in set(names):
                enqueue_later(name)

        def generation_changed(old: Obj, new: Obj) -> bool:
            return (old.get("metadata") or {}).get("generation") != (new.get("metadata") or {}).get(
                "generation"
            )

        def cq_updated(old: Obj, new: Obj) -> None:
            if generation_changed(old, new):
                enqueue(new["metadata"]["name"])

        self.cluster_queues.add_handler(on_add=lambda o: enqueue(o["metadata"]["name"]), on_update=cq_updated)

        def lq_event(obj: Obj) -> None:
            if lq_cluster_queue(obj):
                enqueue_later(lq_cluster_queue(obj))

        self.local_queues.add_handler(on_add=lq_event, on_delete=lq_event)

        def for_check(obj: Obj) -> None:
            each(self.queues_for_checks([obj["metadata"]["name"]]))

        self.checks.add_handler(
            on_add=for_check,
            on_update=lambda old, new: for_check(new) if generation_changed(old, new) else None,
            on_delete=for_check,
        )

        def for_config(obj: Obj) -> None:
            each(self.queues_for_config(obj["metadata"]["name"]))

        self.configs.add_handler(
            on_add=for_config,
            on_update=lambda old, new: for_config(new) if generation_changed(old, new) else None,
            on_delete=for_config,
        )
        self._enqueue_later = enqueue_later

    def cluster_changed(self, cluster_name: str) -> None:
        """A MultiKueueCluster came, went, or its connection (Active) changed."""
        for name in set(self.queues_for_cluster(cluster_name)):
            self._enqueue_later(name)

    def setup_remote_informer(self, cluster: str, informer: Informer) -> None:
        """Indexes and handlers of one worker's unfiltered ClusterQueue or LocalQueue cache."""
        if informer.resource.kind == api.LOCAL_QUEUE.kind:
            informer.add_index(INDEX_CLUSTER_QUEUE, lq_cluster_queue_index)

            def lq_event(obj: Obj) -> None:
                for name in set(self.queues_for_remote_local_queues([obj])):
                    self._enqueue_later(name)

            # A LocalQueue's clusterQueue is immutable: only adds and deletes matter.
            informer.add_handler(on_add=lq_event, on_delete=lq_event)
            return

        def cq_event(obj: Obj) -> None:
            remote = self.remotes.get(cluster)
            lqs = remote.cache(api.LOCAL_QUEUE) if remote is not None else None
            if lqs is None:
                return
            served = lqs.by_index(INDEX_CLUSTER_QUEUE, obj["metadata"]["name"])
            for name in set(self.queues_for_remote_local_queues(served)):
                self._enqueue_later(name)

        def cq_updated(old: Obj, new: Obj) -> None:
            if (old.get("spec") or {}).get("resourceGroups") != (new.get("spec") or {}).get("resourceGroups"):
                cq_event(new)

        informer.add_handler(on_add=cq_event, on_update=cq_updated, on_delete=cq_event)


def remote_watches(
    automation: QuotaAutomation | None,
) -> list[tuple[api.Resource, Callable[[str, Informer], None]]]:
    """The unfiltered watches a worker connection opens for quota automation (none when it is off)."""
    if automation is None:
        return []
    return [
        (api.LOCAL_QUEUE, automation.setup_remote_informer),
        (api.CLUSTER_QUEUE, automation.setup_remote_informer),
    ]
