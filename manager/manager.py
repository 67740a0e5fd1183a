"""The manager process: informers on the manager cluster, leader election, and the MultiKueue
controllers (clusters, admission checks, workloads, the Incremental dispatcher) plus the garbage
collector. Informers and the /metrics /healthz /readyz server run on every replica; connections
to workers and every write happen only on the leader. Losing the lease ends the process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Collection, Iterator
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from kube_runtime import api, features
from kube_runtime.client import KubeClient, KubeClientError, wait_until_served
from kube_runtime.clock import Clock
from kube_runtime.controller import Controller
from kube_runtime.events import EVENT_TYPES, EventRecorder
from kube_runtime.httpserver import HealthServer, MetricsServing, start_servers
from kube_runtime.informer import Informer, compact, object_key
from kube_runtime.leaderelection import LeaderElector
from kube_runtime.ownwrites import OwnWrites
from kueue_domain import workload as wlutil
from kueue_domain.bootstrap import leader_elector
from kueue_domain.config import Configuration
from kueue_domain.metrics import ClientRequestsCollector
from manager import kubeconfig as creds
from manager.adapters import Adapter, JobAdapter, OwnershipError
from manager.adapters.jobset import JobSetAdapter
from manager.adapters.leaderworkerset import LeaderWorkerSetAdapter
from manager.adapters.pod import INDEX_POD_GROUP, MANAGED_SELECTOR, PodAdapter
from manager.adapters.pod import group_index as pod_group_index
from manager.adapters.statefulset import StatefulSetAdapter
from manager.adapters.trainjob import TrainJobAdapter
from manager.admissioncheck import AdmissionCheckController, config_name_or_empty, is_multikueue_check
from manager.clusters import ClusterController, Remotes
from manager.config import ManagerOptions, feature_enabled
from manager.copies import DispatchError, remote_workload_cache_transform
from manager.dispatch import ALL_AT_ONCE, INCREMENTAL, LEAST_LOADED, is_external
from manager.dispatch.all_at_once import AllAtOnceDispatcher
from manager.dispatch.base import Dispatcher
from manager.dispatch.external import ExternalDispatcher
from manager.dispatch.incremental import IncrementalDispatcher, NoMoreWorkers
from manager.dispatch.least_loaded import LeastLoadedChoice
from manager.gc import GarbageCollector
from manager.groups import INDEX_GROUP, group_index
from manager.metrics import ManagerMetrics
from manager.quota_automation import (
    INDEX_CLUSTER_QUEUE,
    QuotaAutomation,
    lq_cluster_queue_index,
    remote_watches,
)
from manager.remote import RemoteClient, workload_keys
from manager.workload import WorkloadReconciler
from manager.workload_status import WorkloadStatus

log = structlog.get_logger("manager")

Obj = dict[str, Any]
EVENT_FLUSH_TIMEOUT = 5.0
LWS_FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"


class LeadershipLost(Exception):
    pass


def _active(obj: Obj | None) -> tuple[Any, ...]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == "Active":
            return c.get("status"), c.get("reason"), c.get("message")
    return ()


class CountedClients:
    """The clients whose requests /metrics counts: the manager cluster's, then each worker's current
    connection as `worker/<name>` (a worker's counts start again from 0 when it reconnects)."""

    def __init__(self, local: dict[str, KubeClient], remotes: Remotes) -> None:
        self.local = local
        self.remotes = remotes

    def items(self) -> Iterator[tuple[str, KubeClient]]:
        yield from self.local.items()
        for name, remote in list(self.remotes.clients.items()):
            if remote.kube is not None:
                yield f"worker/{name}", remote.kube


class Manager:
    def __init__(
        self,
        kube: KubeClient,
        config: Configuration,
        *,
        options: ManagerOptions | None = None,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        identity: str | None = None,
        metrics_bind_address: str | None = None,
        health_bind_address: str | None = None,
        metrics_serving: MetricsServing | None = None,
        events_kube: KubeClient | None = None,
        event_types: Collection[str] = EVENT_TYPES,
    ) -> None:
        self.kube = kube
        self.config = config
        self.options = options or ManagerOptions()
        self.clock = clock or Clock()
        self.registry = registry or CollectorRegistry()
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}"
        self.metrics = ManagerMetrics(self.registry, self.clock)
        events_kube = events_kube or kube
        self.workload_recorder = EventRecorder(
            events_kube, api.EVENT_RECORDER_WORKLOAD_CONTROLLER, self.identity, self.clock, types=event_types
        )
        self.cluster_recorder = EventRecorder(
            events_kube, api.EVENT_RECORDER_MULTIKUEUE_CLUSTER, self.identity, self.clock, types=event_types
        )
        self.metrics_bind_address = metrics_bind_address or config.metrics_bind_address
        self.health_bind_address = health_bind_address or config.health_probe_bind_address
        self.metrics_serving = metrics_serving or MetricsServing()
        mk = config.multikueue
        self.origin = mk.origin
        ns = config.namespace

        # -- informers on the manager cluster
        # Cached compact: no reader looks at managedFields (our writes are applies and patches built
        # from scratch), and strings are shared between objects (docs/benchmarks.md, "Scaling series").
        cached = compact
        self.workloads = Informer(kube, api.WORKLOAD, clock=self.clock, transform=cached)
        self.checks = Informer(kube, api.ADMISSION_CHECK, clock=self.clock, transform=cached)
        # v1beta2: the form with spec.quotaManagement (its only difference from v1beta1).
        self.configs = Informer(kube, api.MULTIKUEUE_CONFIG_V1BETA2, clock=self.clock, transform=cached)
        self.clusters = Informer(kube, api.MULTIKUEUE_CLUSTER, clock=self.clock, transform=cached)
        self.secrets = Informer(kube, api.SECRET, namespace=ns, clock=self.clock, transform=cached)
        self.jobs = Informer(kube, api.JOB, clock=self.clock, transform=cached)
        self.workloads.add_index(INDEX_GROUP, group_index)
        # A MultiKueue adapter exists for each enabled integration, as upstream (§3.0).
        lws_enabled = LWS_FRAMEWORK in config.frameworks
        self.leaderworkersets = (
            Informer(kube, api.LEADER_WORKER_SET, clock=self.clock, transform=cached) if lws_enabled else None
        )
        self.jobsets = (
            Informer(kube, api.JOB_SET, clock=self.clock, transform=cached)
            if api.FRAMEWORK_JOB_SET in config.frameworks
            else None
        )
        self.trainjobs = (
            Informer(kube, api.TRAIN_JOB, clock=self.clock, transform=cached)
            if api.FRAMEWORK_TRAIN_JOB in config.frameworks
            else None
        )
        # Plain pods, pod groups and a Deployment's pods (the deployment integration implies the pod
        # integration): the pods the pod webhook marked as Kueue's, by group.
        pods_enabled = {api.FRAMEWORK_POD, api.FRAMEWORK_DEPLOYMENT, api.FRAMEWORK_STATEFULSET} & set(
            config.frameworks
        )
        self.pods = (
            Informer(kube, api.POD, label_selector=MANAGED_SELECTOR, clock=self.clock, transform=cached)
            if pods_enabled
            else None
        )
        if self.pods is not None:
            self.pods.add_index(INDEX_POD_GROUP, pod_group_index)
        self.statefulsets = (
            Informer(kube, api.STATEFUL_SET, clock=self.clock, transform=cached)
            if api.FRAMEWORK_STATEFULSET in config.frameworks
            else None
        )
        profile_feature = feature_enabled(config, features.MULTIKUEUE_CLUSTER_PROFILE)
        self.profiles = (
            Informer(kube, api.CLUSTER_PROFILE, namespace=ns, clock=self.clock, transform=cached)
            if profile_feature
            else None
        )
        # The manager's queues, read only by quota automation (MultiKueueManagerQuotaAutomation).
        quota_automation = feature_enabled(config, features.MULTIKUEUE_MANAGER_QUOTA_AUTOMATION)
        self.cluster_queues = (
            Informer(kube, api.CLUSTER_QUEUE, clock=self.clock, transform=cached)
            if quota_automation
            else None
        )
        self.local_queues = (
            Informer(kube, api.LOCAL_QUEUE, clock=self.clock, transform=cached) if quota_automation else None
        )
        if self.local_queues is not None:
            self.local_queues.add_index(INDEX_CLUSTER_QUEUE, lq_cluster_queue_index)
        self.informers = [
            i
            for i in (
                self.workloads,
                self.checks,
                self.configs,
                self.clusters,
                self.secrets,
                self.jobs,
                self.profiles,
                self.leaderworkersets,
                self.jobsets,
                self.trainjobs,
                self.cluster_queues,
                self.local_queues,
                self.pods,
                self.statefulsets,
            )
            if i is not None
        ]

        # -- adapters, connections, controllers
        job_adapter = JobAdapter(kube, self.jobs, self.clock)
        self.adapters: dict[str, Adapter] = {api.JOB.gvk: job_adapter}
        if self.leaderworkersets is not None:
            self.adapters[api.LEADER_WORKER_SET.gvk] = LeaderWorkerSetAdapter(
                kube, self.leaderworkersets, self.clock
            )
        if self.jobsets is not None:
            self.adapters[api.JOB_SET.gvk] = JobSetAdapter(kube, self.jobsets)
        if self.trainjobs is not None:
            self.adapters[api.TRAIN_JOB.gvk] = TrainJobAdapter(kube, self.trainjobs)
        if self.pods is not None:
            self.adapters[api.POD.gvk] = PodAdapter(kube, self.pods)
        if self.statefulsets is not None:
            self.adapters[api.STATEFUL_SET.gvk] = StatefulSetAdapter(self.statefulsets)
        self.remotes = Remotes()
        self.registry.register(
            ClientRequestsCollector(CountedClients({"main": kube, "events": events_kube}, self.remotes))
        )
        self.ac_controller = AdmissionCheckController(
            kube, self.checks, self.configs, self.clusters, self.clock
        )
        self.cluster_controller = ClusterController(
            kube,
            namespace=ns,
            clusters=self.clusters,
            secrets=self.secrets,
            profiles=self.profiles,
            remotes=self.remotes,
            new_client=self._new_remote_client,
            recorder=self.cluster_recorder,
            clock=self.clock,
            path_validation=feature_enabled(config, features.MULTIKUEUE_KUBECONFIG_PATH_VALIDATION),
            path_prefix=self.options.kubeconfig_path_prefix,
            profile_feature=profile_feature,
            access_providers=creds.parse_access_providers(mk.cluster_profile),
            on_connection_change=self._connection_changed,
        )
        own_writes = OwnWrites(clock=self.clock.monotonic)
        self.workload_status = WorkloadStatus(
            kube, self.checks, self.clock, own_writes, external_nominations=is_external(mk.dispatcher_name)
        )
        self.incremental: IncrementalDispatcher | None = None
        if mk.dispatcher_name == INCREMENTAL:
            self.incremental = self._incremental_dispatcher()
        self.reconciler = WorkloadReconciler(
            kube,
            workloads=self.workloads,
            checks=self.checks,
            ac_controller=self.ac_controller,
            remotes=self.remotes,
            adapters=self.adapters,
            recorder=self.workload_recorder,
            metrics=self.metrics,
            clock=self.clock,
            origin=self.origin,
            worker_lost_timeout=mk.worker_lost_timeout_seconds,
            dispatcher=self._dispatcher(),
            enqueue=lambda key: self.workload_ctl.enqueue_after(key, self.options.remote_event_batch_seconds),
            status=self.workload_status,
        )
        self.gc = GarbageCollector(self.workloads, self.remotes, self.adapters, self.origin, self.clock)
        # Errors a reconcile reports and retries with backoff, logged without a traceback.
        expected = (KubeClientError, DispatchError, OwnershipError, LookupError, NoMoreWorkers)
        self.cluster_ctl = Controller(
            "multikueue_cluster",
            self.cluster_controller.reconcile,
            clock=self.clock,
            expected_errors=expected,
        )
        self.ac_ctl = Controller("multikueue_admissioncheck", self.ac_controller.reconcile, clock=self.clock)
        self.workload_ctl = Controller(
            "multikueue_workload",
            self.reconciler.reconcile,
            concurrency=self.options.workload_concurrency,
            clock=self.clock,
            expected_errors=expected,
        )
        self.controllers = [self.cluster_ctl, self.ac_ctl, self.workload_ctl]
        self.quota: QuotaAutomation | None = None
        if self.cluster_queues is not None and self.local_queues is not None:
            self.quota = QuotaAutomation(
                kube,
                cluster_queues=self.cluster_queues,
                local_queues=self.local_queues,
                checks=self.checks,
                configs=self.configs,
                ac_controller=self.ac_controller,
                remotes=self.remotes,
                clock=self.clock,
            )
            self.quota_ctl = Controller(
                "multikueue_clusterqueue", self.quota.reconcile, clock=self.clock, expected_errors=expected
            )
            self.controllers.append(self.quota_ctl)
        if self.incremental is not None:
            self.incremental_ctl = Controller(
                "multikueue_incremental_dispatcher",
                self.incremental.reconcile,
                clock=self.clock,
                expected_errors=expected,
            )
            self.controllers.append(self.incremental_ctl)
        self._wire_handlers()
        self.servers: list[HealthServer] = []
        self.elector: LeaderElector | None = None
        self._background: list[asyncio.Task[None]] = []
        self._api_waiters: list[asyncio.Task[None]] = []
        self._deferred: list[Informer] = []  # informers waiting for their kind to be served
        self.leading = asyncio.Event()
        self.ready = asyncio.Event()

    def _dispatcher(self) -> Dispatcher:
        """The dispatcher the Configuration names (`multiKueue.dispatcherName`)."""
        name = self.config.multikueue.dispatcher_name
        if name == ALL_AT_ONCE:
            return AllAtOnceDispatcher()
        if name == LEAST_LOADED:
            return LeastLoadedChoice(self.remotes, self.clock, self.options.least_loaded_round_seconds)
        if self.incremental is not None:
            return self.incremental
        return ExternalDispatcher()

    def _incremental_dispatcher(self) -> IncrementalDispatcher:
        mk = self.config.multikueue
        step = (
            mk.incremental_step_size
            if feature_enabled(self.config, features.MULTIKUEUE_INCREMENTAL_DISPATCHER_CONFIG)
            else 3
        )
        return IncrementalDispatcher(
            self.workloads,
            self.ac_controller,
            self.workload_status,
            self.clock,
            step_size=step,
            round_timeout=self.options.incremental_round_seconds,
            respect_config_order=feature_enabled(
                self.config, features.MULTIKUEUE_INCREMENTAL_DISPATCHER_RESPECT_CONFIG_ORDER
            ),
        )

    # -- wiring ------------------------------------------------------------------------------

    def _new_remote_client(self, name: str) -> RemoteClient:
        watched = [(api.WORKLOAD, workload_keys)]
        watched += [(a.resource, a.workload_keys_for) for a in self.adapters.values()]
        transforms = {
            a.resource: a.remote_cache_transform
            for a in self.adapters.values()
            if hasattr(a, "remote_cache_transform")
        }
        transforms[api.WORKLOAD] = remote_workload_cache_transform
        return RemoteClient(
            name,
            self.origin,
            watched,
            self.clock,
            on_event=self._remote_event,
            on_lost=self._remote_lost,
            qps=self.config.qps,
            burst=self.config.burst,
            inactivity_timeout=self.options.watch_inactivity_timeout,
            liveness=self.options.worker_liveness,
            on_reachable=self.cluster_ctl.enqueue,
            transforms=transforms,
            unfiltered=remote_watches(self.quota),
        )

    def _remote_event(self, _cluster: str, keys: list[str]) -> None:
        for key in keys:
            if self.workloads.get(key) is not None or key in self.reconciler.deleted:
                self.workload_ctl.enqueue_after(key, self.options.remote_event_batch_seconds)

    def _remote_lost(self, cluster: str) -> None:
        self.cluster_ctl.enqueue(cluster)
        self._connection_changed(cluster)

    def _connection_changed(self, cluster: str) -> None:
        """A worker came or went: AllAtOnce nominations and worker-lost grace periods change."""
        client = self.remotes.get(cluster)
        self.metrics.set_cluster_connected(cluster, client.connected if client is not None else None)
        if self.quota is not None:
            self.quota.cluster_changed(cluster)
        for key in self._multikueue_workload_keys():
            self.workload_ctl.enqueue_after(key, self.options.remote_event_batch_seconds)

    def _multikueue_workload_keys(self, check_names: set[str] | None = None) -> list[str]:
        if check_names is None:
            check_names = {c["metadata"]["name"] for c in self.checks.list() if is_multikueue_check(c)}
        return [
            object_key(wl)
            for wl in self.workloads.list()
            if any(
                s.get("name") in check_names for s in (wl.get("status") or {}).get("admissionChecks") or ()
            )
        ]

    def _wire_handlers(self) -> None:
        def workload_changed(obj: Obj, *_: Any) -> None:
            new = _[-1] if _ else obj
            key = object_key(new)
            self.workload_ctl.enqueue(key)
            if self.incremental is not None:
                self.incremental_ctl.enqueue(key)
            if _ and (
                (obj.get("status") or {}).get("clusterName") != (new.get("status") or {}).get("clusterName")
                or wlutil.has_quota_reservation(obj) != wlutil.has_quota_reservation(new)
            ):
                # Group members follow each other's placement: a member waiting (with backoff) for
                # its siblings' worker must not wait out its backoff when that placement changes,
                # and a primary waits for every member's quota reservation.
                self.reconciler.enqueue_siblings(new)

        def workload_deleted(obj: Obj) -> None:
            self.reconciler.remember_deleted(obj)
            workload_changed(obj)
            self.reconciler.enqueue_siblings(obj)

        def workload_added(obj: Obj) -> None:
            workload_changed(obj)
            self.reconciler.enqueue_siblings(obj)  # a primary may be waiting for this member

        self.workloads.add_handler(
            on_add=workload_added, on_update=workload_changed, on_delete=workload_deleted
        )

        batch = self.options.remote_event_batch_seconds

        def lws_changed(old: Obj, new: Obj) -> None:
            # A new spec (replicas, templates) goes to the worker through any member's SyncJob.
            if (old.get("metadata") or {}).get("generation") != new["metadata"].get("generation"):
                meta = new["metadata"]
                key = f"{meta['namespace']}/{api.LEADER_WORKER_SET.gvk}/{meta['name']}"
                for member in self.workloads.by_index(INDEX_GROUP, key):
                    self.workload_ctl.enqueue(object_key(member))

        if self.leaderworkersets is not None:
            self.leaderworkersets.add_handler(on_update=lws_changed)

        def check_changed(old: Obj | None, new: Obj) -> None:
            self.ac_ctl.enqueue(new["metadata"]["name"])
            if is_multikueue_check(new) and (
                old is None or config_name_or_empty(old) != config_name_or_empty(new)
            ):
                for key in self._multikueue_workload_keys({new["metadata"]["name"]}):
                    self.workload_ctl.enqueue_after(key, batch)

        self.checks.add_handler(
            on_add=lambda o: check_changed(None, o),
            on_update=check_changed,
            on_delete=lambda o: self.ac_ctl.enqueue(o["metadata"]["name"]),
        )

        def config_changed(old: Obj | None, new: Obj, deleted: bool = False) -> None:
            names = self.ac_controller.checks_for_config(new["metadata"]["name"])
            for name in names:
                self.ac_ctl.enqueue(name)
            if deleted or (
                old is not None
                and (old.get("spec") or {}).get("clusters") != (new.get("spec") or {}).get("clusters")
            ):
                for key in self._multikueue_workload_keys(set(names)):
                    self.workload_ctl.enqueue_after(key, batch)

        self.configs.add_handler(
            on_add=lambda o: config_changed(None, o),
            on_update=config_changed,
            on_delete=lambda o: config_changed(None, o, deleted=True),
        )

        def cluster_changed(old: Obj | None, new: Obj) -> None:
            meta, old_meta = new["metadata"], (old or {}).get("metadata") or {}
            if (
                old is None
                or meta.get("generation") != old_meta.get("generation")
                or meta.get("deletionTimestamp")
            ):
                self.cluster_ctl.enqueue(meta["name"])
            if old is None or _active(old) != _active(new):
                for name in self.ac_controller.checks_for_cluster(meta["name"]):
                    self.ac_ctl.enqueue(name)
                if self.quota is not None:
                    self.quota.cluster_changed(meta["name"])

        def cluster_deleted(obj: Obj) -> None:
            self.cluster_ctl.enqueue(obj["metadata"]["name"])
            for name in self.ac_controller.checks_for_cluster(obj["metadata"]["name"]):
                self.ac_ctl.enqueue(name)
            if self.quota is not None:
                self.quota.cluster_changed(obj["metadata"]["name"])

        self.clusters.add_handler(
            on_add=lambda o: cluster_changed(None, o), on_update=cluster_changed, on_delete=cluster_deleted
        )

        def credentials_changed(obj: Obj, *rest: Obj) -> None:
            current = rest[-1] if rest else obj
            finder = (
                self.cluster_controller.clusters_for_profile
                if current.get("kind") == api.CLUSTER_PROFILE.kind
                else self.cluster_controller.clusters_for_secret
            )
            for name in finder(current):
                self.cluster_ctl.enqueue(name)

        for informer in (self.secrets, self.profiles):
            if informer is not None:
                informer.add_handler(
                    on_add=credentials_changed, on_update=credentials_changed, on_delete=credentials_changed
                )

        if self.quota is not None:
            self.quota.wire(self.quota_ctl.enqueue, lambda name: self.quota_ctl.enqueue_after(name, batch))

    # -- running -----------------------------------------------------------------------------

    async def _start_servers(self) -> None:
        self.servers = await start_servers(
            self.metrics_bind_address,
            self.health_bind_address,
            self.registry,
            self._synced,
            serving=self.metrics_serving,
            kube=self.kube,
        )

    async def _synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

    async def _defer_missing_apis(self) -> None:
        """An enabled integration whose kind the manager cluster does not serve (its CRD not
        installed: LeaderWorkerSet, JobSet, TrainJob) or a ClusterProfile API that is absent must
        not hold the manager back: its informer starts once the kind is served, as upstream defers
        a job framework whose API is missing. Until then no object of that kind can exist here."""
        optional = (self.leaderworkersets, self.jobsets, self.trainjobs, self.profiles)
        for informer in [i for i in optional if i is not None]:
            resource = informer.resource
            try:
                if await self.kube.serves(resource):
                    continue
            except KubeClientError as exc:  # cannot tell now: start it, its watch retries as before
                log.warning("cannot ask the server for an API", resource=resource.plural, error=str(exc))
                continue
            log.info(
                "No matching API in the server for job framework, deferring setting up controller",
                gvk=f"{resource.group}/{resource.version}, Kind={resource.kind}",
            )
            self.informers.remove(informer)
            self._deferred.append(informer)
            self._api_waiters.append(
                asyncio.get_running_loop().create_task(
                    self._when_served(informer), name=f"wait-{resource.plural}"
                )
            )

    async def _when_served(self, informer: Informer) -> None:
        resource = informer.resource
        await wait_until_served(self.kube, resource, self.clock)
        log.info("API now available, starting controller", gvk=f"{resource.group}/{resource.version}")
        informer.start()
        await informer.wait_synced()
        self.informers.append(informer)

    async def run(self) -> None:
        """Run until cancelled or until leadership is lost."""
        await self._start_servers()
        try:
            await self._defer_missing_apis()
            for informer in self.informers:
                informer.start()
            for informer in self.informers:
                await informer.wait_synced()
            log.info("caches synced", workloads=len(self.workloads.store), clusters=len(self.clusters.store))
            self.ready.set()
            lost = asyncio.Event()
            self.elector = leader_elector(self.kube, self.config, self.identity, self.clock, lost.set)
            if self.elector is not None:
                self.elector.start()
                self.metrics.replica_role = "follower"
                log.info("waiting for leadership", lease=self.config.leader_election_id)
                await self.elector.wait_leading()
            self.metrics.replica_role = "leader"
            log.info("leading: connecting to workers and starting controllers", origin=self.origin)
            for controller in self.controllers:
                controller.start()
            self._enqueue_everything()
            loop = asyncio.get_running_loop()
            self._background = [
                loop.create_task(
                    self.gc.run(self.config.multikueue.gc_interval_seconds), name="multikueue-gc"
                ),
                loop.create_task(
                    self.cluster_controller.watch_paths(
                        self.cluster_ctl.enqueue, self.options.path_poll_interval
                    ),
                    name="kubeconfig-paths",
                ),
            ]
            self.leading.set()
            await lost.wait()
            log.error("lost leadership; exiting")
            raise LeadershipLost()
        finally:
            await self.shutdown()

    def _enqueue_everything(self) -> None:
        for name in self.clusters.store.keys():
            self.cluster_ctl.enqueue(name)
        for name in self.checks.store.keys():
            self.ac_ctl.enqueue(name)
        if self.cluster_queues is not None:
            for name in self.cluster_queues.store.keys():
                self.quota_ctl.enqueue(name)
        for key in self.workloads.store.keys():
            self.workload_ctl.enqueue(key)
            if self.incremental is not None:
                self.incremental_ctl.enqueue(key)

    async def shutdown(self) -> None:
        for task in self._background + self._api_waiters:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for controller in self.controllers:
            await controller.stop()
        for client in list(self.remotes.clients.values()):
            await client.close()
        self.remotes.clients.clear()
        for informer in self.informers + [i for i in self._deferred if i not in self.informers]:
            await informer.stop()
        if self.elector is not None:
            await self.elector.stop()
        for recorder in (self.workload_recorder, self.cluster_recorder):
            await recorder.close(flush_seconds=EVENT_FLUSH_TIMEOUT)
        for server in self.servers:
            await server.stop()
