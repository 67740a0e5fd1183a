"""One process's shell, the same for every controller process built on kube_runtime: its clock,
metrics registry and identity, its event recorders, the /metrics /healthz /readyz servers, the
leader election and the background tasks, each stopped by the process in the order it needs.
What a process runs inside the shell (informers, controllers) is its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.events import EVENT_TYPES, EventRecorder
from kube_runtime.httpserver import HealthServer, MetricsServing, start_servers
from kube_runtime.leaderelection import LeaderElector

# Seconds a stopping process spends writing queued events before it drops them.
EVENT_FLUSH_TIMEOUT = 5.0


class LeadershipLost(Exception):
    """The Lease was lost: the process ends (a fresh start rebuilds all state from the API)."""


@dataclass(frozen=True)
class LeaderElection:
    """Which Lease a process campaigns for, and its timings (seconds)."""

    namespace: str
    name: str
    lease_duration: float
    renew_deadline: float
    retry_period: float


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class ShellProcess:
    """What runs inside a process shell: its client, clock, registry, identity and the events
    `leading` and `ready` are the shell's."""

    def __init__(self, shell: ProcessShell) -> None:
        self.shell = shell
        self.kube = shell.kube
        self.clock, self.registry, self.identity = shell.clock, shell.registry, shell.identity
        self.leading, self.ready = shell.leading, shell.ready


class ProcessShell:
    def __init__(
        self,
        kube: KubeClient,
        *,
        metrics_bind_address: str,
        health_bind_address: str,
        log: Any,
        election: LeaderElection | None = None,
        events_kube: KubeClient | None = None,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        identity: str | None = None,
        metrics_serving: MetricsServing | None = None,
        event_types: Collection[str] = EVENT_TYPES,
    ) -> None:
        self.kube = kube
        # Events go through their own client (own rate limit), as client-go's event broadcaster
        # does, so that they never slow down the controllers' writes.
        self.events_kube = events_kube or kube
        self.clock = clock or Clock()
        self.registry = registry or CollectorRegistry()
        self.identity = identity or default_identity()
        self.metrics_bind_address = metrics_bind_address
        self.health_bind_address = health_bind_address
        self.metrics_serving = metrics_serving or MetricsServing()
        self.event_types = event_types
        self.election = election
        self.log = log
        self.recorders: list[EventRecorder] = []
        self.servers: list[HealthServer] = []
        self.elector: LeaderElector | None = None
        self.background: list[asyncio.Task[Any]] = []
        self.lost = asyncio.Event()
        self.leading = asyncio.Event()
        self.ready = asyncio.Event()

    def recorder(self, reporting_controller: str) -> EventRecorder:
        """An event recorder under `reporting_controller`, flushed when the process stops."""
        recorder = EventRecorder(
            self.events_kube, reporting_controller, self.identity, self.clock, types=self.event_types
        )
        self.recorders.append(recorder)
        return recorder

    async def start_servers(self, synced: Callable[[], Awaitable[bool]]) -> None:
        """The metrics and probe servers; /readyz answers from `synced`."""
        self.servers = await start_servers(
            self.metrics_bind_address,
            self.health_bind_address,
            self.registry,
            synced,
            serving=self.metrics_serving,
            kube=self.kube,
        )

    async def campaign(self, on_follower: Callable[[], None]) -> bool:
        """Returns once this replica may lead: at once without leader election (False), else once
        it holds the Lease (True). `on_follower` runs as the campaign starts; `lost` is set when
        the Lease is lost."""
        election = self.election
        if election is None:
            return False
        self.elector = LeaderElector(
            self.kube,
            election.namespace,
            election.name,
            self.identity,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
            clock=self.clock,
            on_stopped_leading=self.lost.set,
        )
        self.elector.start()
        on_follower()
        self.log.info("waiting for leadership", lease=election.name)
        await self.elector.wait_leading()
        return True

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A background task, cancelled by `stop_background`."""
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self.background.append(task)
        return task

    async def stop_background(self) -> None:
        for task in self.background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def stop_elector(self) -> None:
        if self.elector is not None:
            await self.elector.stop()

    async def close_recorders(self) -> None:
        for recorder in self.recorders:
            await recorder.close(flush_seconds=EVENT_FLUSH_TIMEOUT)

    async def stop_servers(self) -> None:
        for server in self.servers:
            await server.stop()
