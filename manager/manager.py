"""The manager process: informers on the manager cluster, leader election, and the MultiKueue
controllers (clusters, admission checks, workloads, the Incremental dispatcher) plus the garbage
collector. Informers and the /metrics /healthz /readyz server run on every replica; connections
to workers and every write happen only on the leader. Losing the lease ends the process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import structlog

from kube_runtime.client import KubeClient, KubeClientError, wait_until_served
from kube_runtime.controller import Controller
from kube_runtime.informer import Informer, object_key
from kube_runtime.ownwrites import OwnWrites
from kube_runtime.shell import LeadershipLost, ShellProcess
from kueue_domain import api, features
from kueue_domain.bootstrap import process_shell
from kueue_domain.config import Configuration
from kueue_domain.metrics import ClientRequestsCollector
from manager import kubeconfig as creds
from manager.adapters import OwnershipError
from manager.admissioncheck import AdmissionCheckController, is_multikueue_check
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
from manager.informers import build_adapters, build_informers
from manager.metrics import ManagerMetrics
from manager.quota_automation import QuotaAutomation, remote_watches
from manager.remote import RemoteClient, workload_keys
from manager.wiring import wire_handlers
from manager.workload import WorkloadReconciler
from manager.workload_status import WorkloadStatus

log = structlog.get_logger("manager")

Obj = dict[str, Any]
__all__ = ["LeadershipLost", "Manager"]

# Errors a reconcile reports and retries with backoff, logged without a traceback.
EXPECTED_ERRORS = (KubeClientError, DispatchError, OwnershipError, LookupError, NoMoreWorkers)


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


class Manager(ShellProcess):
    def __init__(
        self,
        kube: KubeClient,
        config: Configuration,
        *,
        options: ManagerOptions | None = None,
        **shell: Any,
    ) -> None:
        """`shell`: the process shell's options, as kueue_domain.bootstrap.process_shell takes them
        (clock, registry, identity, the addresses, metrics_serving, events_kube, event_types)."""
        super().__init__(process_shell(kube, config, log=log, **shell))
        self.config = config
        self.options = options or ManagerOptions()
        self.metrics = ManagerMetrics(self.registry, self.clock)
        self.workload_recorder = self.shell.recorder(api.EVENT_RECORDER_WORKLOAD_CONTROLLER)
        self.cluster_recorder = self.shell.recorder(api.EVENT_RECORDER_MULTIKUEUE_CLUSTER)
        self.origin = config.multikueue.origin
        self._take_informers()
        self.adapters = build_adapters(kube, self.caches, self.clock)
        self.remotes = Remotes()
        self.registry.register(
            ClientRequestsCollector(
                CountedClients({"main": kube, "events": self.shell.events_kube}, self.remotes)
            )
        )
        self._build_controllers()
        wire_handlers(self)
        self._deferred: list[Informer] = []  # informers waiting for their kind to be served

    def _take_informers(self) -> None:
        caches = self.caches = build_informers(self.kube, self.config, self.clock)
        self.workloads, self.checks, self.configs = caches.workloads, caches.checks, caches.configs
        self.clusters, self.secrets, self.jobs = caches.clusters, caches.secrets, caches.jobs
        self.leaderworkersets, self.jobsets, self.trainjobs = (
            caches.leaderworkersets, caches.jobsets, caches.trainjobs,
        )  # fmt: skip
        self.pods, self.statefulsets, self.profiles = caches.pods, caches.statefulsets, caches.profiles
        self.cluster_queues, self.local_queues = caches.cluster_queues, caches.local_queues
        self.informers = caches.present()

    def _build_controllers(self) -> None:
        kube, mk = self.kube, self.config.multikueue
        self.ac_controller = AdmissionCheckController(
            kube, self.checks, self.configs, self.clusters, self.clock
        )
        self.cluster_controller = ClusterController(
            kube,
            namespace=self.config.namespace,
            clusters=self.clusters,
            secrets=self.secrets,
            profiles=self.profiles,
            remotes=self.remotes,
            new_client=self._new_remote_client,
            recorder=self.cluster_recorder,
            clock=self.clock,
            path_validation=feature_enabled(self.config, features.MULTIKUEUE_KUBECONFIG_PATH_VALIDATION),
            path_prefix=self.options.kubeconfig_path_prefix,
            profile_feature=self.profiles is not None,
            access_providers=creds.parse_access_providers(mk.cluster_profile),
            on_connection_change=self._connection_changed,
        )
        self._build_workload_reconciler()
        self.gc = GarbageCollector(self.workloads, self.remotes, self.adapters, self.origin, self.clock)
        self.cluster_ctl = self._controller("multikueue_cluster", self.cluster_controller.reconcile)
        self.ac_ctl = Controller("multikueue_admissioncheck", self.ac_controller.reconcile, clock=self.clock)
        self.workload_ctl = self._controller(
            "multikueue_workload", self.reconciler.reconcile, concurrency=self.options.workload_concurrency
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
            self.quota_ctl = self._controller("multikueue_clusterqueue", self.quota.reconcile)
            self.controllers.append(self.quota_ctl)
        if self.incremental is not None:
            self.incremental_ctl = self._controller(
                "multikueue_incremental_dispatcher", self.incremental.reconcile
            )
            self.controllers.append(self.incremental_ctl)

    def _controller(self, name: str, reconcile: Any, concurrency: int = 1) -> Controller:
        return Controller(
            name, reconcile, concurrency=concurrency, clock=self.clock, expected_errors=EXPECTED_ERRORS
        )

    def _build_workload_reconciler(self) -> None:
        mk = self.config.multikueue
        own_writes = OwnWrites(clock=self.clock.monotonic)
        self.workload_status = WorkloadStatus(
            self.kube,
            self.checks,
            self.clock,
            own_writes,
            external_nominations=is_external(mk.dispatcher_name),
        )
        self.incremental: IncrementalDispatcher | None = None
        if mk.dispatcher_name == INCREMENTAL:
            self.incremental = self._incremental_dispatcher()
        self.reconciler = WorkloadReconciler(
            self.kube,
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
        for key in self.multikueue_workload_keys():
            self.workload_ctl.enqueue_after(key, self.options.remote_event_batch_seconds)

    def multikueue_workload_keys(self, check_names: set[str] | None = None) -> list[str]:
        if check_names is None:
            check_names = {c["metadata"]["name"] for c in self.checks.list() if is_multikueue_check(c)}
        return [
            object_key(wl)
            for wl in self.workloads.list()
            if any(
                s.get("name") in check_names for s in (wl.get("status") or {}).get("admissionChecks") or ()
            )
        ]

    # -- running -----------------------------------------------------------------------------

    async def _synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

    async def _defer_missing_apis(self) -> None:
        """An enabled integration whose kind the manager cluster does not serve (its CRD not
        installed: LeaderWorkerSet, JobSet, TrainJob, the Kubeflow, Ray and AppWrapper kinds) or a
        ClusterProfile API that is absent must not hold the manager back: its informer starts once
        the kind is served, as upstream defers a job framework whose API is missing. Until then no object of
        that kind can exist here."""
        optional = (self.leaderworkersets, self.jobsets, self.trainjobs, self.profiles)
        optional += (*self.caches.kubeflow_jobs.values(), *self.caches.mirrored.values())
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
            self.shell.spawn(self._when_served(informer), name=f"wait-{resource.plural}")

    async def _when_served(self, informer: Informer) -> None:
        resource = informer.resource
        await wait_until_served(self.kube, resource, self.clock)
        log.info("API now available, starting controller", gvk=f"{resource.group}/{resource.version}")
        informer.start()
        await informer.wait_synced()
        self.informers.append(informer)

    async def run(self) -> None:
        """Run until cancelled or until leadership is lost."""
        await self.shell.start_servers(self._synced)
        try:
            await self._defer_missing_apis()
            for informer in self.informers:
                informer.start()
            for informer in self.informers:
                await informer.wait_synced()
            log.info("caches synced", workloads=len(self.workloads.store), clusters=len(self.clusters.store))
            self.ready.set()
            await self.shell.campaign(on_follower=self._as_follower)
            self.metrics.replica_role = "leader"
            log.info("leading: connecting to workers and starting controllers", origin=self.origin)
            for controller in self.controllers:
                controller.start()
            self._enqueue_everything()
            self.shell.spawn(self.gc.run(self.config.multikueue.gc_interval_seconds), name="multikueue-gc")
            self.shell.spawn(
                self.cluster_controller.watch_paths(
                    self.cluster_ctl.enqueue, self.options.path_poll_interval
                ),
                name="kubeconfig-paths",
            )
            self.leading.set()
            await self.shell.lost.wait()
            log.error("lost leadership; exiting")
            raise LeadershipLost()
        finally:
            await self.shutdown()

    def _as_follower(self) -> None:
        self.metrics.replica_role = "follower"

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
        await self.shell.stop_background()
        for controller in self.controllers:
            await controller.stop()
        for client in list(self.remotes.clients.values()):
            await client.close()
        self.remotes.clients.clear()
        for informer in self.informers + [i for i in self._deferred if i not in self.informers]:
            await informer.stop()
        await self.shell.stop_elector()
        await self.shell.close_recorders()
        await self.shell.stop_servers()
