"""Helpers for admission integration tests: a worker_agent running in-process against the manager
cluster of the test fleet, object builders, and polling helpers.

Every test creates its own ClusterQueues and ResourceFlavors with unique names and deletes them
afterwards (`Cleanup`), so one agent per test sees only leftovers that are already gone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kube_runtime.client import KubeClient, NotFound
from kube_runtime.conditions import find_status_condition
from kueue_domain import api
from kueue_domain.config import parse_config
from worker_agent.agent import Agent

Obj = dict[str, Any]
TEST_FIELD_MANAGER = "admission-test"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# The granular QuotaReserved=False reasons (WaitingForQuota, NoMatchingFlavor, Misconfigured, ...)
# that the admission tests check are written only with this gate; upstream v0.19 has it off.
GRANULAR_REASONS = {"UnadmittedWorkloadsObservability": True}


@contextlib.asynccontextmanager
async def running_agent(
    kube: KubeClient, config: Obj | None = None, metrics: Any = None, gates: dict[str, bool] | None = None
):
    """An Agent (leader election off, no HTTP servers) for the duration of the block."""
    data = {"leaderElection": {"leaderElect": False}, "webhook": {"port": 0}, **(config or {})}
    if gates:
        data["featureGates"] = {**(data.get("featureGates") or {}), **gates}
    agent = Agent(
        kube, parse_config(data), metrics_bind_address="0", health_bind_address="0", metrics=metrics
    )
    task = asyncio.get_running_loop().create_task(agent.run())
    try:
        async with asyncio.timeout(30):
            await agent.leading.wait()
        yield agent
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Cleanup:
    """Deletes the cluster-scoped objects a test created (ClusterQueues release their finalizer
    only once no workload reserves quota, so workloads' namespaces are deleted first)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.objects: list[tuple[api.Resource, str]] = []

    def add(self, resource: api.Resource, name: str) -> None:
        self.objects.append((resource, name))

    async def run(self) -> None:
        for resource, name in reversed(self.objects):
            with contextlib.suppress(NotFound):
                await self.kube.delete(resource, name)
            # Drop our finalizer: the agent that would have released it is stopping with the test.
            with contextlib.suppress(NotFound):
                await self.kube.patch_merge(resource, name, {"metadata": {"finalizers": None}})


def resource_flavor(name: str, node_labels: Obj | None = None, taints: list[Obj] | None = None) -> Obj:
    spec: Obj = {}
    if node_labels:
        spec["nodeLabels"] = node_labels
    if taints:
        spec["nodeTaints"] = taints
    return {"apiVersion": api.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(
    name: str,
    flavors: dict[str, dict[str, str | tuple[str, str | None, str | None]]],
    *,
    cohort: str | None = None,
    strategy: str | None = None,
    preemption: Obj | None = None,
    admission_checks: list[str] | None = None,
    stop_policy: str | None = None,
    namespace_selector: Obj | None = None,
    flavor_fungibility: Obj | None = None,
) -> Obj:
    """`flavors`: {flavor: {resource: nominal | (nominal, borrowingLimit, lendingLimit)}} in one group."""
    covered: list[str] = []
    flavor_items = []
    for flavor, resources in flavors.items():
        items = []
        for rname, quota in resources.items():
            if rname not in covered:
                covered.append(rname)
            nominal, borrowing, lending = quota if isinstance(quota, tuple) else (quota, None, None)
            item: Obj = {"name": rname, "nominalQuota": nominal}
            if borrowing is not None:
                item["borrowingLimit"] = borrowing
            if lending is not None:
                item["lendingLimit"] = lending
            items.append(item)
        flavor_items.append({"name": flavor, "resources": items})
    spec: Obj = {
        "namespaceSelector": namespace_selector if namespace_selector is not None else {},
        "resourceGroups": [{"coveredResources": covered, "flavors": flavor_items}],
    }
    if cohort:
        spec["cohort"] = cohort
    if strategy:
        spec["queueingStrategy"] = strategy
    if preemption:
        spec["preemption"] = preemption
    if admission_checks:
        spec["admissionChecks"] = admission_checks
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    if flavor_fungibility:
        spec["flavorFungibility"] = flavor_fungibility
    return {"apiVersion": api.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, name: str, cq: str, stop_policy: str | None = None) -> Obj:
    spec: Obj = {"clusterQueue": cq}
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    return {
        "apiVersion": api.API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def workload(
    namespace: str,
    name: str,
    queue: str,
    requests: Obj | None = None,
    *,
    count: int = 1,
    priority: int | None = None,
    limits: Obj | None = None,
    node_selector: Obj | None = None,
    tolerations: list[Obj] | None = None,
    active: bool | None = None,
    max_exec_seconds: int | None = None,
    priority_class: str | None = None,
) -> Obj:
    container: Obj = {"name": "c", "image": "busybox", "resources": {"requests": requests or {"cpu": "1"}}}
    if limits:
        container["resources"]["limits"] = limits
    pod_spec: Obj = {"restartPolicy": "Never", "containers": [container]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    spec: Obj = {
        "queueName": queue,
        "podSets": [{"name": "main", "count": count, "template": {"spec": pod_spec}}],
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
        spec["priorityClassSource"] = api.PRIORITY_CLASS_SOURCE_WORKLOAD
    if active is not None:
        spec["active"] = active
    if max_exec_seconds is not None:
        spec["maximumExecutionTimeSeconds"] = max_exec_seconds
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def condition(obj: Obj | None, ctype: str) -> Obj | None:
    if obj is None:
        return None
    return find_status_condition((obj.get("status") or {}).get("conditions"), ctype)


def condition_is(obj: Obj | None, ctype: str, status: str = "True", reason: str | None = None) -> bool:
    c = condition(obj, ctype)
    return c is not None and c.get("status") == status and (reason is None or c.get("reason") == reason)


async def eventually(
    check: Callable[[], Awaitable[Any]],
    timeout: float = 20,  # noqa: ASYNC109 - a polling deadline, reported with the last value seen
    interval: float = 0.2,
) -> Any:
    """Poll until `check()` returns something truthy; return it. On timeout raise with the last value."""
    last: Any = None
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        last = await check()
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            # Where every task of the in-process agents and manager waits, for a failure seen once.
            print(task_dump())
            raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")
        await asyncio.sleep(interval)


def task_dump() -> str:
    """The event loop's tasks grouped by where each is suspended (its top coroutine, then the
    innermost frame it waits in): a test that timed out shows whether a controller or the scheduler
    was stuck, and where."""
    places: collections.Counter[str] = collections.Counter()
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        frames = []
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                code = frame.f_code
                frames.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {code.co_name}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        where = " -> ".join(dict.fromkeys([frames[0], frames[-1]])) if frames else "running"
        places[f"{re.sub(r'-[0-9]+$', '', task.get_name())}: {where}"] += 1
    lines = [f"  {count:3d} x {place}" for place, count in sorted(places.items())]
    return "tasks at the timeout:\n" + "\n".join(lines)


async def consistently(
    check: Callable[[], Awaitable[Any]], duration: float = 2, interval: float = 0.2
) -> None:
    deadline = asyncio.get_running_loop().time() + duration
    while asyncio.get_running_loop().time() < deadline:
        value = await check()
        assert value, f"condition stopped holding: {value!r}"
        await asyncio.sleep(interval)


class Cluster:
    """Shortcuts over one namespace of the test cluster."""

    def __init__(self, kube: KubeClient, namespace: str, cleanup: Cleanup) -> None:
        self.kube = kube
        self.namespace = namespace
        self.cleanup = cleanup

    async def create(self, obj: Obj) -> Obj:
        resource = {
            "ResourceFlavor": api.RESOURCE_FLAVOR,
            "ClusterQueue": api.CLUSTER_QUEUE,
            "LocalQueue": api.LOCAL_QUEUE,
            "Workload": api.WORKLOAD,
            "WorkloadPriorityClass": api.WORKLOAD_PRIORITY_CLASS,
            "AdmissionCheck": api.ADMISSION_CHECK,
            "Cohort": api.COHORT,
            "ClusterTrainingRuntime": api.CLUSTER_TRAINING_RUNTIME,
        }[obj["kind"]]
        created = await self.kube.create(resource, obj, namespace=obj["metadata"].get("namespace"))
        if not resource.namespaced:
            self.cleanup.add(resource, obj["metadata"]["name"])
        return created

    async def active_admission_check(self, name: str, controller: str = "example.com/test") -> None:
        """An AdmissionCheck whose (imaginary) controller reports it Active=True."""
        await self.create(
            {
                "apiVersion": api.API_VERSION,
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "spec": {"controllerName": controller},
            }
        )
        active = {
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        await self.kube.patch_status_merge(api.ADMISSION_CHECK, name, {"status": {"conditions": [active]}})

    async def wl(self, name: str) -> Obj | None:
        try:
            return await self.kube.get(api.WORKLOAD, name, namespace=self.namespace)
        except NotFound:
            return None

    async def cq(self, name: str) -> Obj:
        return await self.kube.get(api.CLUSTER_QUEUE, name)

    async def lq(self, name: str) -> Obj:
        return await self.kube.get(api.LOCAL_QUEUE, name, namespace=self.namespace)

    async def admitted(self, name: str) -> bool:
        return condition_is(await self.wl(name), api.WORKLOAD_ADMITTED)

    async def reserved(self, name: str) -> bool:
        return condition_is(await self.wl(name), api.WORKLOAD_QUOTA_RESERVED)

    async def pending_reason(self, name: str) -> tuple[str, str] | None:
        c = condition(await self.wl(name), api.WORKLOAD_QUOTA_RESERVED)
        if c is None or c.get("status") != "False":
            return None
        return c.get("reason", ""), c.get("message", "")

    async def set_conditions(self, name: str, *conditions: Obj) -> None:
        """Write conditions with the test's own field manager (what a job integration would write)."""
        body = {
            "apiVersion": api.API_VERSION,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": self.namespace},
            "status": {
                "conditions": [{"lastTransitionTime": "2026-01-01T00:00:00Z", **c} for c in conditions]
            },
        }
        await self.kube.apply_status(api.WORKLOAD, body, TEST_FIELD_MANAGER, force=True)

    async def finish(self, name: str) -> None:
        await self.kube.patch_status_merge(
            api.WORKLOAD,
            name,
            {
                "status": {
                    "conditions": await self._with_condition(
                        name,
                        {
                            "type": api.WORKLOAD_FINISHED,
                            "status": "True",
                            "reason": "ByTest",
                            "message": "done",
                        },
                    )
                }
            },
            namespace=self.namespace,
        )

    async def release_evicted(self, name: str) -> None:
        """The job integration's step after eviction: clear the reservation, set Requeued."""
        from kube_runtime.clock import Clock
        from kueue_domain import workload as wlstatus

        current = await self.wl(name)
        assert current is not None
        wlstatus.clear_reservation_after_eviction(current, Clock().now())
        await self.kube.apply_status(
            api.WORKLOAD, wlstatus.admission_apply_body(current), api.FIELD_MANAGER_ADMISSION, force=True
        )

    async def _with_condition(self, name: str, new: Obj) -> list[Obj]:
        current = await self.wl(name)
        conditions = [
            c
            for c in ((current or {}).get("status") or {}).get("conditions") or ()
            if c["type"] != new["type"]
        ]
        conditions.append({"lastTransitionTime": "2026-01-01T00:00:00Z", **new})
        return conditions

    async def set_check_state(
        self, name: str, check: str, state: str, message: str = "", **extra: Any
    ) -> None:
        current = await self.wl(name)
        assert current is not None
        checks = [dict(c) for c in (current.get("status") or {}).get("admissionChecks") or ()]
        for c in checks:
            if c["name"] == check:
                c.update(
                    {
                        "state": state,
                        "message": message,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                        **extra,
                    }
                )
        await self.kube.patch_status_merge(
            api.WORKLOAD, name, {"status": {"admissionChecks": checks}}, namespace=self.namespace
        )


# --- WorkloadPriorityClasses and the `kueue.x-k8s.io/priority-class` label ------------------------------


async def priority_classes(cluster: Any) -> dict[str, str]:
    """A high (300) and a low (100) WorkloadPriorityClass of unique names: {"high": .., "low": ..}."""
    classes = {}
    for role, value in (("high", 300), ("low", 100)):
        classes[role] = unique(f"wpc-{role}")
        body = {
            "apiVersion": api.API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": classes[role]},
        }
        await cluster.create({**body, "value": value})
    return classes


async def relabel_priority(
    kube: KubeClient, resource: Any, name: str, namespace: str, priority_class: str
) -> None:
    """Change a job's `kueue.x-k8s.io/priority-class` label."""
    patch = {"metadata": {"labels": {api.LABEL_PRIORITY_CLASS: priority_class}}}
    await kube.patch_merge(resource, name, patch, namespace=namespace)


def priority_of(wl: Obj) -> tuple[str | None, int | None]:
    """A Workload's (spec.priorityClassName, spec.priority)."""
    return wl["spec"].get("priorityClassName"), wl["spec"].get("priority")


async def with_priority(cluster: Any, names: list[str], priority_class: str, value: int) -> list[Obj] | None:
    """The Workloads `names` once every one has this class and value (for `eventually`), else None."""
    found = [await cluster.wl(name) for name in names]
    return found if all(priority_of(w) == (priority_class, value) for w in found) else None
