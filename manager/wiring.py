"""The manager's informer handlers: which reconciles each change on the manager cluster enqueues."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kube_runtime.informer import object_key
from kueue_domain import api, naming
from kueue_domain import workload as wlutil
from manager.admissioncheck import config_name_or_empty, is_multikueue_check
from manager.groups import INDEX_GROUP

if TYPE_CHECKING:
    from manager.manager import Manager

Obj = dict[str, Any]


def _active(obj: Obj | None) -> tuple[Any, ...]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == "Active":
            return c.get("status"), c.get("reason"), c.get("message")
    return ()


def wire_handlers(m: Manager) -> None:
    _wire_workloads(m)
    _wire_checks_and_configs(m)
    _wire_clusters(m)
    if m.quota is not None:
        batch = m.options.remote_event_batch_seconds
        m.quota.wire(m.quota_ctl.enqueue, lambda name: m.quota_ctl.enqueue_after(name, batch))


def _wire_workloads(m: Manager) -> None:
    def workload_changed(obj: Obj, *_: Any) -> None:
        new = _[-1] if _ else obj
        key = object_key(new)
        m.workload_ctl.enqueue(key)
        if m.incremental is not None:
            m.incremental_ctl.enqueue(key)
        if _ and (
            (obj.get("status") or {}).get("clusterName") != (new.get("status") or {}).get("clusterName")
            or wlutil.has_quota_reservation(obj) != wlutil.has_quota_reservation(new)
        ):
            # Group members follow each other's placement: a member waiting (with backoff) for
            # its siblings' worker must not wait out its backoff when that placement changes,
            # and a primary waits for every member's quota reservation.
            m.reconciler.enqueue_siblings(new)

    def workload_deleted(obj: Obj) -> None:
        m.reconciler.remember_deleted(obj)
        workload_changed(obj)
        m.reconciler.enqueue_siblings(obj)

    def workload_added(obj: Obj) -> None:
        workload_changed(obj)
        m.reconciler.enqueue_siblings(obj)  # a primary may be waiting for this member

    m.workloads.add_handler(on_add=workload_added, on_update=workload_changed, on_delete=workload_deleted)

    def lws_changed(old: Obj, new: Obj) -> None:
        # A new spec (replicas, templates) goes to the worker through any member's SyncJob.
        if (old.get("metadata") or {}).get("generation") != new["metadata"].get("generation"):
            meta = new["metadata"]
            key = f"{meta['namespace']}/{api.LEADER_WORKER_SET.gvk}/{meta['name']}"
            for member in m.workloads.by_index(INDEX_GROUP, key):
                m.workload_ctl.enqueue(object_key(member))

    if m.leaderworkersets is not None:
        m.leaderworkersets.add_handler(on_update=lws_changed)

    def spec_synced_changed(old: Obj, new: Obj) -> None:
        # A kind whose spec edits go to its worker copy (RayService's serveConfigV2): its Workload's
        # SyncJob forwards them.
        if (old.get("metadata") or {}).get("generation") != new["metadata"].get("generation"):
            meta, kind = new["metadata"], api.RAY_SERVICE
            wl_name = naming.workload_name(meta["name"], meta.get("uid", ""), kind.kind, kind.group)
            m.workload_ctl.enqueue(f"{meta.get('namespace', '')}/{wl_name}")

    services = m.caches.mirrored.get(api.FRAMEWORK_RAY_SERVICE)
    if services is not None:
        services.add_handler(on_update=spec_synced_changed)


def _wire_checks_and_configs(m: Manager) -> None:
    batch = m.options.remote_event_batch_seconds

    def check_changed(old: Obj | None, new: Obj) -> None:
        m.ac_ctl.enqueue(new["metadata"]["name"])
        if is_multikueue_check(new) and (
            old is None or config_name_or_empty(old) != config_name_or_empty(new)
        ):
            for key in m.multikueue_workload_keys({new["metadata"]["name"]}):
                m.workload_ctl.enqueue_after(key, batch)

    m.checks.add_handler(
        on_add=lambda o: check_changed(None, o),
        on_update=check_changed,
        on_delete=lambda o: m.ac_ctl.enqueue(o["metadata"]["name"]),
    )

    def config_changed(old: Obj | None, new: Obj, deleted: bool = False) -> None:
        names = m.ac_controller.checks_for_config(new["metadata"]["name"])
        for name in names:
            m.ac_ctl.enqueue(name)
        if deleted or (
            old is not None
            and (old.get("spec") or {}).get("clusters") != (new.get("spec") or {}).get("clusters")
        ):
            for key in m.multikueue_workload_keys(set(names)):
                m.workload_ctl.enqueue_after(key, batch)

    m.configs.add_handler(
        on_add=lambda o: config_changed(None, o),
        on_update=config_changed,
        on_delete=lambda o: config_changed(None, o, deleted=True),
    )


def _wire_clusters(m: Manager) -> None:
    def cluster_changed(old: Obj | None, new: Obj) -> None:
        meta, old_meta = new["metadata"], (old or {}).get("metadata") or {}
        if (
            old is None
            or meta.get("generation") != old_meta.get("generation")
            or meta.get("deletionTimestamp")
        ):
            m.cluster_ctl.enqueue(meta["name"])
        if old is None or _active(old) != _active(new):
            for name in m.ac_controller.checks_for_cluster(meta["name"]):
                m.ac_ctl.enqueue(name)
            if m.quota is not None:
                m.quota.cluster_changed(meta["name"])

    def cluster_deleted(obj: Obj) -> None:
        m.cluster_ctl.enqueue(obj["metadata"]["name"])
        for name in m.ac_controller.checks_for_cluster(obj["metadata"]["name"]):
            m.ac_ctl.enqueue(name)
        if m.quota is not None:
            m.quota.cluster_changed(obj["metadata"]["name"])

    m.clusters.add_handler(
        on_add=lambda o: cluster_changed(None, o), on_update=cluster_changed, on_delete=cluster_deleted
    )

    def credentials_changed(obj: Obj, *rest: Obj) -> None:
        current = rest[-1] if rest else obj
        finder = (
            m.cluster_controller.clusters_for_profile
            if current.get("kind") == api.CLUSTER_PROFILE.kind
            else m.cluster_controller.clusters_for_secret
        )
        for name in finder(current):
            m.cluster_ctl.enqueue(name)

    for informer in (m.secrets, m.profiles):
        if informer is not None:
            informer.add_handler(
                on_add=credentials_changed, on_update=credentials_changed, on_delete=credentials_changed
            )
