"""The admission state's informers, their indexes, and the listeners told what changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kube_runtime.client import KubeClient
from kube_runtime.informer import Informer
from kueue_domain import api
from worker_agent.admission.core import AdmissionCore, Obj

INDEX_QUEUE = "queue"  # workloads by "<namespace>/<queueName>"
INDEX_NAMESPACE = "namespace"
INDEX_CLUSTER_QUEUE = "clusterQueue"  # local queues by spec.clusterQueue
INDEX_PRIORITY_CLASS = "priorityClass"  # workloads by WorkloadPriorityClass name


def _queue_index(obj: Obj) -> tuple[str, ...]:
    queue = (obj.get("spec") or {}).get("queueName")
    return (f"{obj['metadata'].get('namespace', '')}/{queue}",) if queue else ()


def _namespace_index(obj: Obj) -> tuple[str, ...]:
    return (obj["metadata"].get("namespace", ""),)


def _lq_cluster_queue_index(obj: Obj) -> tuple[str, ...]:
    cq = (obj.get("spec") or {}).get("clusterQueue")
    return (cq,) if cq else ()


def _priority_class_index(obj: Obj) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if spec.get("priorityClassSource") == api.PRIORITY_CLASS_SOURCE_WORKLOAD and spec.get(
        "priorityClassName"
    ):
        return (spec["priorityClassName"],)
    return ()


def spec_changed(old: Obj, new: Obj) -> bool:
    """Whether an update touched what the engine reads of a queue or flavor object: its spec or
    its deletion. Status updates (mostly our own status writes) are ignored."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    return old.get("spec") != new.get("spec") or old_meta.get("deletionTimestamp") != new_meta.get(
        "deletionTimestamp"
    )


def on_spec_change(handler: Callable[[Obj], Any]) -> Callable[[Obj, Obj], None]:
    """An informer update handler that calls `handler(new)` only when `spec_changed`."""

    def on_update(old: Obj, new: Obj) -> None:
        if spec_changed(old, new):
            handler(new)

    return on_update


class AdmissionInformers(AdmissionCore):
    """The objects the admission state is fed from, and who is told which of them changed."""

    def _init_informers(self, kube: KubeClient) -> None:
        self.flavors = Informer(kube, api.RESOURCE_FLAVOR)
        self.cluster_queues = Informer(kube, api.CLUSTER_QUEUE)
        self.local_queues = Informer(kube, api.LOCAL_QUEUE)
        self.cohorts = Informer(kube, api.COHORT)
        self.workloads = Informer(kube, api.WORKLOAD)
        self.admission_checks = Informer(kube, api.ADMISSION_CHECK)
        self.namespaces = Informer(kube, api.NAMESPACE)
        self.limit_ranges = Informer(kube, api.LIMIT_RANGE)
        self.runtime_classes = Informer(kube, api.RUNTIME_CLASS)
        self.priority_classes = Informer(kube, api.WORKLOAD_PRIORITY_CLASS)
        self.workloads.add_index(INDEX_QUEUE, _queue_index)
        self.workloads.add_index(INDEX_NAMESPACE, _namespace_index)
        self.workloads.add_index(INDEX_PRIORITY_CLASS, _priority_class_index)
        self.local_queues.add_index(INDEX_CLUSTER_QUEUE, _lq_cluster_queue_index)
        self.limit_ranges.add_index(INDEX_NAMESPACE, _namespace_index)
        # Listeners told which CQ / LQ keys changed (status controllers).
        self.on_cluster_queue_changed: list[Callable[[str], None]] = []
        self.on_local_queue_changed: list[Callable[[str], None]] = []
        self.on_workload_changed: list[Callable[[str], None]] = []

    @property
    def informers(self) -> list[Informer]:
        return [
            self.flavors,
            self.cluster_queues,
            self.local_queues,
            self.cohorts,
            self.admission_checks,
            self.namespaces,
            self.limit_ranges,
            self.runtime_classes,
            self.priority_classes,
            self.workloads,
        ]

    def start_informers(self) -> None:
        for informer in self.informers:
            informer.start()

    async def wait_synced(self) -> None:
        for informer in self.informers:
            await informer.wait_synced()

    async def stop(self) -> None:
        for informer in self.informers:
            await informer.stop()
        for task in list(self._tasks):
            task.cancel()

    def _notify_cq(self, name: str) -> None:
        for fn in self.on_cluster_queue_changed:
            fn(name)

    def _notify_lq(self, key: str) -> None:
        for fn in self.on_local_queue_changed:
            fn(key)

    def _notify_wl(self, key: str) -> None:
        for fn in self.on_workload_changed:
            fn(key)
