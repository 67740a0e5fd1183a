"""The job framework's event routing: which object's reconcile an informer event enqueues, and the
parent walk (`manages_child`) that keeps a managed parent's children out of Kueue."""

from __future__ import annotations

from typing import Any

from kube_runtime.controller import Controller
from kube_runtime.informer import Informer, object_key
from kueue_domain import api
from kueue_domain.api import Resource
from worker_agent.integrations.jobframework.objects import (
    INDEX_NAMESPACE,
    INDEX_PRIORITY_CLASS,
    controller_ref_of_kind,
    controlling_owner,
    labels_of,
)

Obj = dict[str, Any]


class EventRouting:
    """Mixin of JobReconciler: handlers on the kind's informer and the shared caches."""

    resource: Resource
    objects: Informer
    controller: Controller
    state: Any
    config: Any
    follows_gc_orphans: bool
    _gone_uids: dict[str, str]
    _index_owner_key: str

    def _route_events(self) -> None:
        self.objects.add_handler(
            on_add=self._enqueue_object,
            on_update=lambda old, new: self._enqueue_object(new),
            on_delete=self._on_object_deleted,
        )
        self.state.workloads.add_handler(
            on_add=self._enqueue_for_workload,
            on_update=self._on_workload_updated,
            on_delete=self._enqueue_for_workload,
        )
        self.state.local_queues.add_handler(on_add=self._enqueue_for_local_queue)
        self.state.namespaces.add_handler(
            on_add=self._enqueue_namespace_object,
            on_update=lambda old, new: self._enqueue_namespace_object(new),
        )
        self.state.priority_classes.add_handler(on_add=self._enqueue_for_priority_class)

    # -- event routing ---------------------------------------------------------------------------

    def controlling(self, wl: Obj) -> Obj | None:
        return controlling_owner(self.resource, wl)

    def _enqueue_object(self, obj: Obj) -> None:
        self.controller.enqueue(object_key(obj))

    def _on_object_deleted(self, obj: Obj) -> None:
        key = object_key(obj)
        if self.follows_gc_orphans and obj["metadata"].get("uid"):
            self._gone_uids[key] = obj["metadata"]["uid"]
        self.controller.enqueue(key)

    def _on_workload_updated(self, old: Obj, new: Obj) -> None:
        previous, current = self.controlling(old), self.controlling(new)
        if self.follows_gc_orphans and previous is not None and current is None:
            key = f"{new['metadata'].get('namespace', '')}/{previous['name']}"
            self._gone_uids[key] = previous["uid"]
            self.controller.enqueue(key)
        self._enqueue_for_workload(new)

    def _enqueue_for_workload(self, wl: Obj) -> None:
        ref = self.controlling(wl)
        if ref is not None and ref.get("name"):
            self.controller.enqueue(f"{wl['metadata'].get('namespace', '')}/{ref['name']}")

    def _enqueue_namespace(self, namespace: str) -> None:
        for key in self.objects.store.index_keys(INDEX_NAMESPACE, namespace):
            self.controller.enqueue(key)

    def _enqueue_namespace_object(self, ns: Obj) -> None:
        self._enqueue_namespace(ns["metadata"]["name"])

    def _enqueue_for_local_queue(self, lq: Obj) -> None:
        if lq["metadata"]["name"] == api.DEFAULT_NAME:
            self._enqueue_namespace(lq["metadata"].get("namespace", ""))

    def _enqueue_for_priority_class(self, wpc: Obj) -> None:
        for key in self.objects.store.index_keys(INDEX_PRIORITY_CLASS, wpc["metadata"]["name"]):
            self.controller.enqueue(key)

    def _enqueue_all(self) -> None:
        for key in self.objects.store.keys():
            self.controller.enqueue(key)
        for key in self.state.workloads.store.index_values(self._index_owner_key):
            self.controller.enqueue(key)

    # -- parents and children --------------------------------------------------------------------

    def manages_child(self, child: Obj) -> bool | None:
        """Whether `child` belongs to an object of this kind that Kueue manages
        (FindAncestorJobManagedByKueue: its controller has a queue name, or any with
        manageJobsWithoutQueueName; else the walk goes on to that object's parent). None when the
        parent is not in the cache yet: ask again later."""
        ref = controller_ref_of_kind(self.resource, child)
        if ref is None:
            return False
        parent = self.objects.get(f"{child['metadata'].get('namespace', '')}/{ref.get('name')}")
        if parent is None:
            return None  # not seen yet, or gone (its children go too): upstream retries as well
        if parent["metadata"].get("uid") != ref.get("uid"):
            return False  # a stale reference: the walk stops, the child is a top-level one
        if labels_of(parent).get(api.LABEL_QUEUE_NAME) or self.config.manage_jobs_without_queue_name:
            return True
        return self._parent_managed(parent)

    def _parent_managed(self, obj: Obj) -> bool | None:
        """Whether another enabled integration manages the object's parent (`manages_child`);
        None: not known yet."""
        integrations = getattr(getattr(self, "agent", None), "integrations", ())
        verdicts = [
            i.manages_child(obj) for i in integrations if i is not self and hasattr(i, "manages_child")
        ]
        return True if True in verdicts else None if None in verdicts else False
