"""The worker_agent process: informers, leader election, controllers and the scheduling loop.

Informers and the /metrics /healthz /readyz server run on every replica; controllers and the
scheduler run only on the leader. Losing the lease ends the process (a fresh start rebuilds all
state from the API, like controller-runtime managers do).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import structlog

from kube_runtime.client import KubeClient, wait_until_served
from kube_runtime.controller import Controller
from kube_runtime.httpserver import HealthServer, parse_bind_address
from kube_runtime.informer import Informer, object_key
from kube_runtime.shell import LeadershipLost, ShellProcess
from kueue_domain import api, features
from kueue_domain.api import Resource
from kueue_domain.bootstrap import process_shell
from kueue_domain.config import Configuration
from kueue_domain.metrics import ClientRequestsCollector
from worker_agent.admission import AdmissionState, on_spec_change
from worker_agent.controllers.provisioning import ProvisioningController
from worker_agent.controllers.queues import WORKLOAD_EVENT_BATCH_SECONDS, QueueStatusControllers
from worker_agent.controllers.workload import WorkloadController
from worker_agent.integrations import setup_integrations
from worker_agent.metrics import Metrics
from worker_agent.visibility import PendingWorkloads, VisibilityServer
from worker_agent.webhooks import make_certificates, setup_webhooks

log = structlog.get_logger("worker_agent")

REPORTING_CONTROLLER = "kueue-admission"
__all__ = ["Agent", "LeadershipLost"]


class Agent(ShellProcess):
    def __init__(
        self,
        kube: KubeClient,
        config: Configuration,
        *,
        metrics: Any = None,
        decision_log: TextIO | None = None,
        visibility_bind_address: str | None = None,
        **shell: Any,
    ) -> None:
        """`shell`: the process shell's options (as the Manager takes them)."""
        super().__init__(process_shell(kube, config, log=log, **shell))
        self.config = config
        if metrics is None:
            metrics = Metrics(
                self.registry,
                local_queue_metrics=config.features.enabled(features.LOCAL_QUEUE_METRICS),
                cohort_info=config.features.enabled(features.METRICS_FOR_COHORTS),
                workload_creation_latency=config.features.enabled(
                    features.METRIC_FOR_WORKLOAD_CREATION_LATENCY
                ),
            )
        self.metrics = metrics
        self.recorder = self.shell.recorder(REPORTING_CONTROLLER)
        self.registry.register(ClientRequestsCollector({"main": kube, "events": self.shell.events_kube}))
        self.state = AdmissionState(
            kube, config, self.clock, self.metrics, self.recorder, decision_log=decision_log
        )
        self.workload_controller = WorkloadController(
            kube, self.state, self.clock, self.recorder, self.metrics
        )
        self.queue_controllers = QueueStatusControllers(kube, self.state, self.clock, self.metrics)
        self.controllers: list[Controller] = []
        # Job integrations (worker_agent/integrations) register informers and controllers here.
        self.integration_informers: list[Informer] = []
        self.integration_controllers: list[Controller] = []
        self.integrations: list[Any] = []
        self._on_leading: list[Callable[[], Any]] = []
        # Integrations whose kind may not be served (yet): registered once it is (_defer_missing_apis).
        self._deferrable: list[
            tuple[Resource | tuple[Resource, ...], list[Informer], list[Controller], Callable[[], Any] | None]
        ] = []
        self.integrations = setup_integrations(self)
        # The kueue.x-k8s.io/provisioning-request admission check (waits for the autoscaler's CRD).
        self.provisioning = ProvisioningController(self)
        # After the integrations: the webhooks reuse their Job and LWS caches.
        self.certificates = make_certificates(self)
        self.webhook_server = setup_webhooks(self)
        self.visibility_server = self._visibility_server(visibility_bind_address)
        self.webhooks_only = False

    @property
    def servers(self) -> list[HealthServer]:
        return self.shell.servers

    def _visibility_server(self, address: str | None) -> VisibilityServer | None:
        """The visibility API (`--visibility-bind-address`, off when None or "0"; and only with the
        VisibilityOnDemand gate on, as upstream)."""
        if not address or not self.config.features.enabled(features.VISIBILITY_ON_DEMAND):
            return None
        host, port = parse_bind_address(address, default_host="")
        if port < 0:
            return None
        server = VisibilityServer(
            self.kube, PendingWorkloads(self.state), self.certificates, host=host, port=port, clock=self.clock
        )
        server.tls_options = self.config.server_tls
        return server

    # ---------------------------------------------------------------------------------------------

    async def _synced(self) -> bool:
        if self.webhooks_only:
            return True
        return all(i.has_synced for i in self.state.informers + self.integration_informers)

    def register(
        self,
        informers: Iterable[Informer] = (),
        controllers: Iterable[Controller] = (),
        on_leading: Callable[[], Any] | None = None,
        requires: Resource | tuple[Resource, ...] | None = None,
    ) -> None:
        """For integrations: informers run on every replica, controllers only on the leader;
        `on_leading` runs once leadership is acquired (e.g. to enqueue every object). With `requires`
        (the integration's own kind), all of it waits until the server serves that kind: a cluster
        without the JobSet CRD runs every other integration, as upstream defers a framework whose
        API is missing (several kinds: all of them)."""
        if requires is not None:
            self._deferrable.append((requires, list(informers), list(controllers), on_leading))
            return
        self.integration_informers.extend(informers)
        self.integration_controllers.extend(controllers)
        if on_leading is not None:
            self._on_leading.append(on_leading)

    async def _defer_missing_apis(self) -> None:
        """Before the informers start: an integration whose kind is not served waits for it in the
        background (polling with a backoff); the others join the agent now."""
        for requires, informers, controllers, on_leading in self._deferrable:
            kinds = requires if isinstance(requires, tuple) else (requires,)
            missing = [r for r in kinds if not await self.kube.serves(r)]
            if not missing:
                self.register(informers, controllers, on_leading)
                continue
            log.info(
                "No matching API in the server for job framework, deferring setting up controller",
                gvk=f"{missing[0].group}/{missing[0].version}, Kind={missing[0].kind}",
            )
            self.shell.spawn(
                self._when_served(requires, informers, controllers, on_leading),
                name=f"wait-{missing[0].plural}",
            )
        self._deferrable.clear()

    async def _when_served(
        self,
        requires: Resource | tuple[Resource, ...],
        informers: list[Informer],
        controllers: list[Controller],
        on_leading: Callable[[], Any] | None,
    ) -> None:
        for kind in requires if isinstance(requires, tuple) else (requires,):
            await wait_until_served(self.kube, kind, self.clock)
            log.info("API now available, starting controller", gvk=f"{kind.group}/{kind.version}")
        self.register(informers, controllers, on_leading)
        for informer in informers:
            informer.start()
        for informer in informers:
            await informer.wait_synced()
        await self.leading.wait()
        for controller in controllers:
            controller.start()
        if on_leading is not None:
            on_leading()

    def _make_controllers(self) -> None:
        qc = self.queue_controllers
        self.workload_ctl = Controller(
            "workload", self.workload_controller.reconcile, concurrency=5, clock=self.clock
        )
        self.cq_ctl = Controller("clusterqueue", qc.reconcile_cluster_queue, concurrency=1, clock=self.clock)
        self.lq_ctl = Controller("localqueue", qc.reconcile_local_queue, concurrency=1, clock=self.clock)
        self.rf_ctl = Controller(
            "resourceflavor", qc.reconcile_resource_flavor, concurrency=1, clock=self.clock
        )
        self.ac_ctl = Controller(
            "admissioncheck", qc.reconcile_admission_check, concurrency=1, clock=self.clock
        )
        self.wpc_ctl = Controller("workloadpriorityclass", qc.reconcile_priority_class, clock=self.clock)
        self.cohort_ctl = Controller("cohort", qc.reconcile_cohort, clock=self.clock)
        self.controllers = [
            self.cohort_ctl,
            self.workload_ctl,
            self.cq_ctl,
            self.lq_ctl,
            self.rf_ctl,
            self.ac_ctl,
            self.wpc_ctl,
        ]

        state = self.state
        state.on_workload_changed.append(self.workload_ctl.enqueue)
        state.on_cluster_queue_changed.append(
            lambda name: self.cq_ctl.enqueue_after(name, WORKLOAD_EVENT_BATCH_SECONDS)
        )

        def by_name(ctl: Controller):
            return lambda obj, *_: ctl.enqueue(obj["metadata"]["name"])

        if self.config.fair_sharing is not None:

            def cohorts_changed(cq_name: str) -> None:
                for cohort in qc.cohorts_above(cq_name):
                    self.cohort_ctl.enqueue_after(cohort, WORKLOAD_EVENT_BATCH_SECONDS)

            state.on_cluster_queue_changed.append(cohorts_changed)
        # Cohort objects: their metrics always, their status with fair sharing.
        cohort_changed = by_name(self.cohort_ctl)
        state.cohorts.add_handler(
            on_add=cohort_changed, on_update=on_spec_change(cohort_changed), on_delete=cohort_changed
        )
        state.on_local_queue_changed.append(
            lambda key: self.lq_ctl.enqueue_after(key, WORKLOAD_EVENT_BATCH_SECONDS)
        )

        def rf_or_ac_for_all_cqs(*_: Any) -> None:
            for name in state.flavors.store.keys():
                self.rf_ctl.enqueue(name)
            for name in state.admission_checks.store.keys():
                self.ac_ctl.enqueue(name)

        state.flavors.add_handler(
            on_add=by_name(self.rf_ctl), on_update=lambda o, n: self.rf_ctl.enqueue(n["metadata"]["name"])
        )
        state.admission_checks.add_handler(
            on_add=by_name(self.ac_ctl), on_update=lambda o, n: self.ac_ctl.enqueue(n["metadata"]["name"])
        )

        def cq_changed(obj: dict[str, Any]) -> None:
            self.cq_ctl.enqueue(obj["metadata"]["name"])
            rf_or_ac_for_all_cqs()

        state.cluster_queues.add_handler(
            on_add=cq_changed, on_update=on_spec_change(cq_changed), on_delete=cq_changed
        )

        def lq_changed(obj: dict[str, Any]) -> None:
            self.lq_ctl.enqueue(object_key(obj))

        state.local_queues.add_handler(
            on_add=lq_changed, on_update=on_spec_change(lq_changed), on_delete=lq_changed
        )
        state.priority_classes.add_handler(
            on_add=by_name(self.wpc_ctl), on_update=lambda o, n: self.wpc_ctl.enqueue(n["metadata"]["name"])
        )
        state.workloads.add_handler(on_add=self._new_workload_priority)

    def _new_workload_priority(self, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        if spec.get("priorityClassSource") == api.PRIORITY_CLASS_SOURCE_WORKLOAD and spec.get(
            "priorityClassName"
        ):
            self.wpc_ctl.enqueue(spec["priorityClassName"])

    def _enqueue_everything(self) -> None:
        state = self.state
        for key in state.workloads.store.keys():
            self.workload_ctl.enqueue(key)
        for name in state.cluster_queues.store.keys():
            self.cq_ctl.enqueue(name)
        for key in state.local_queues.store.keys():
            self.lq_ctl.enqueue(key)
        for name in state.flavors.store.keys():
            self.rf_ctl.enqueue(name)
        for name in state.admission_checks.store.keys():
            self.ac_ctl.enqueue(name)
        for name in state.priority_classes.store.keys():
            self.wpc_ctl.enqueue(name)
        for name in state.cohorts.store.keys():
            self.cohort_ctl.enqueue(name)

    # ---------------------------------------------------------------------------------------------

    async def serve_webhooks_only(self) -> None:
        """`--webhooks-only`: the webhook server (CRD conversion, and admission without cache
        lookups) and the health and metrics endpoints; no informers, no controllers. For a
        cluster whose admission runs elsewhere that still needs `/convert` for v1beta1 clients."""
        self.webhooks_only = True
        await self.shell.start_servers(self._synced)
        if self.webhook_server is None:
            raise ValueError("--webhooks-only needs the webhook server: webhook.port must not be 0")
        await self.webhook_server.start()
        self.ready.set()
        log.info("serving webhooks only: no controllers run")
        try:
            await asyncio.Event().wait()
        finally:
            await self.webhook_server.stop()
            await self.shell.stop_servers()

    async def run(self) -> None:
        """Run until cancelled or until leadership is lost."""
        self._make_controllers()
        await self.shell.start_servers(self._synced)
        if self.webhook_server is not None:
            await self.webhook_server.start()
        if self.visibility_server is not None:
            await self.visibility_server.start()
        await self._defer_missing_apis()
        self.state.start_informers()
        for informer in self.integration_informers:
            informer.start()
        try:
            await self.state.wait_synced()
            for informer in self.integration_informers:
                await informer.wait_synced()
            self.state.rebuild()
            log.info("caches synced", workloads=len(self.state.workloads.store))
            self.ready.set()
            if await self.shell.campaign(on_follower=lambda: self.metrics.set_replica_role("follower")):
                self.metrics.set_replica_role("leader")
            log.info("leading: starting controllers and the scheduler")
            for controller in self.controllers + self.integration_controllers:
                controller.start()
            self._enqueue_everything()
            for callback in self._on_leading:
                callback()
            self.leading.set()
            scheduler = self.shell.spawn(self.state.run_scheduler(), name="scheduler")
            lost = self.shell.lost
            lost_wait = asyncio.ensure_future(lost.wait())
            done, _ = await asyncio.wait({scheduler, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
            lost_wait.cancel()
            if scheduler in done:
                scheduler.result()  # re-raises a scheduler crash
            if lost.is_set():
                log.error("lost leadership; exiting")
                raise LeadershipLost()
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        await self.shell.stop_background()
        for controller in self.controllers + self.integration_controllers:
            await controller.stop()
        for informer in self.integration_informers:
            await informer.stop()
        await self.shell.stop_elector()
        await self.state.stop()
        await self.shell.close_recorders()
        if self.webhook_server is not None:
            await self.webhook_server.stop()
        if self.visibility_server is not None:
            await self.visibility_server.stop()
        await self.shell.stop_servers()
