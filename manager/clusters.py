"""MultiKueueCluster connections (multikueue-spec §3.1): load and validate the worker's
credentials (a Secret, a file Path, or an OCM ClusterProfile), connect with backoff, and report
the `Active` condition with upstream's reasons and messages."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Callable
from typing import Any

import structlog

from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.controller import Result
from kube_runtime.events import EventRecorder
from kube_runtime.informer import Informer
from kueue_domain import api
from manager import kubeconfig as creds
from manager.remote import RemoteClient
from manager.status import write_active

log = structlog.get_logger("manager.clusters")

Obj = dict[str, Any]
SECRET = "Secret"
PATH = "Path"


def kubeconfig_source(mkc: Obj) -> tuple[str, str]:
    """(locationType, location) of a v1beta1 MultiKueueCluster; location "" when it uses a profile."""
    ref = (mkc.get("spec") or {}).get("kubeConfig") or {}
    return ref.get("locationType") or SECRET, ref.get("location") or ""


def cluster_profile_name(mkc: Obj) -> str:
    return ((mkc.get("spec") or {}).get("clusterProfileRef") or {}).get("name") or ""


class Remotes:
    """The shared map cluster name -> RemoteClient (owned by the cluster controller; the workload
    reconciler, the GC and the AdmissionCheck controller read it)."""

    def __init__(self) -> None:
        self.clients: dict[str, RemoteClient] = {}
        self._absent_since: dict[str, dt.datetime] = {}

    def get(self, name: str) -> RemoteClient | None:
        return self.clients.get(name)

    def lost_since(self, name: str, now: dt.datetime) -> dt.datetime:
        """Since when the worker has been unusable: its client's loss time, or for a worker with
        no client (its MultiKueueCluster deleted) the first time this was asked, so that the
        worker-lost grace period runs out instead of starting again at every reconcile."""
        client = self.clients.get(name)
        if client is not None:
            self._absent_since.pop(name, None)
            return client.disconnected_since or now
        return self._absent_since.setdefault(name, now)

    def available(self, name: str) -> RemoteClient | None:
        client = self.clients.get(name)
        return client if client is not None and client.connected and client.kube is not None else None

    def connected(self) -> list[RemoteClient]:
        return [c for c in self.clients.values() if c.connected and c.kube is not None]


class ClusterController:
    def __init__(
        self,
        kube: KubeClient,
        *,
        namespace: str,
        clusters: Informer,
        secrets: Informer,
        profiles: Informer | None,
        remotes: Remotes,
        new_client: Callable[[str], RemoteClient],
        recorder: EventRecorder,
        clock: Clock,
        path_validation: bool,
        path_prefix: str,
        profile_feature: bool,
        access_providers: list[creds.AccessProvider],
        on_connection_change: Callable[[str], None],
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.clusters = clusters
        self.secrets = secrets
        self.profiles = profiles
        self.remotes = remotes
        self.new_client = new_client
        self.recorder = recorder
        self.clock = clock
        self.path_validation = path_validation
        self.path_prefix = path_prefix
        self.profile_feature = profile_feature
        self.access_providers = access_providers
        self.on_connection_change = on_connection_change

    # -- the reconcile -----------------------------------------------------------------------

    async def reconcile(self, name: str) -> Result | None:
        mkc = self.clusters.get(name)
        location_type, _ = kubeconfig_source(mkc or {})
        if mkc is not None and location_type == PATH and not self.path_validation:
            self.recorder.record(
                mkc, "Warning", api.EVENT_DEPRECATED_PATH_USAGE, api.EVENT_DEPRECATED_PATH_USAGE,
                api.MSG_DEPRECATED_PATH_USAGE,
            )  # fmt: skip
        if mkc is None or mkc["metadata"].get("deletionTimestamp"):
            client = self.remotes.clients.pop(name, None)
            if client is not None:
                await client.close()
                self.on_connection_change(name)
            return None
        try:
            kubeconfig = await self.load_kubeconfig(mkc)
        except creds.CredentialError as exc:
            if self.remotes.get(name) is None:
                # Unusable since now (a restarted manager never connected to it): its admitted
                # Workloads get the lost worker's grace period, then go elsewhere (upstream #13238).
                self.remotes.clients[name] = self.new_client(name)
            await self._disconnect(name)
            message = api.load_client_config_failed_message(exc.error) + self._suffix(name)
            await write_active(
                self.kube, api.MULTIKUEUE_CLUSTER, mkc, "False", exc.reason, message, self.clock
            )
            log.info("cannot load worker credentials", cluster=name, reason=exc.reason, error=exc.error)
            if exc.not_found:
                return None  # the Secret / ClusterProfile watch brings us back
            return Result(requeue=True)
        client = self.remotes.get(name)
        if client is None:
            client = self.remotes.clients[name] = self.new_client(name)
        async with client.lock:
            was_connected = client.connected
            delay, error = await client.refresh(kubeconfig)
        if error:
            await self._disconnect(name)
            message = error + client.attempts_suffix()
            await write_active(
                self.kube, api.MULTIKUEUE_CLUSTER, mkc, "False", api.MKC_REASON_CLIENT_CONNECTION_FAILED,
                message, self.clock,
            )  # fmt: skip
            log.info("cannot connect to a worker", cluster=name, error=error, retry_in=delay)
            return Result(requeue_after=delay)
        if delay:
            return Result(requeue_after=delay)
        await write_active(
            self.kube,
            api.MULTIKUEUE_CLUSTER,
            mkc,
            "True",
            api.MKC_REASON_ACTIVE,
            api.MKC_MSG_CONNECTED,
            self.clock,
        )
        if not was_connected:
            log.info("connected to a worker", cluster=name)
            self.on_connection_change(name)
        return None

    def _suffix(self, name: str) -> str:
        client = self.remotes.get(name)
        return client.attempts_suffix() if client is not None else ""

    async def _disconnect(self, name: str) -> None:
        client = self.remotes.get(name)
        if client is None:
            return
        async with client.lock:
            was = client.mark_disconnected()
            await client.stop_watches()
        if was:
            self.on_connection_change(name)

    # -- credentials -------------------------------------------------------------------------

    async def load_kubeconfig(self, mkc: Obj) -> Obj:
        profile = cluster_profile_name(mkc)
        location_type, location = kubeconfig_source(mkc)
        if profile and not location:
            found = self.profiles.get(f"{self.namespace}/{profile}") if self.profiles is not None else None
            return creds.kubeconfig_from_cluster_profile(
                found, profile, self.access_providers, self.profile_feature
            )
        if location_type == PATH:
            raw = await asyncio.to_thread(self._read_path, location)
        else:
            raw = creds.kubeconfig_from_secret(self.secrets.get(f"{self.namespace}/{location}"), location)
        return creds.validate_kubeconfig(raw)

    def _read_path(self, location: str) -> bytes:
        path = creds.resolve_kubeconfig_path(location, self.path_prefix, self.path_validation)
        return creds.read_kubeconfig_file(path)

    # -- what triggers a reconcile -----------------------------------------------------------

    def clusters_for_secret(self, secret: Obj) -> list[str]:
        meta = secret["metadata"]
        if meta.get("namespace") != self.namespace:
            return []
        return [
            c["metadata"]["name"]
            for c in self.clusters.list()
            if kubeconfig_source(c) == (SECRET, meta["name"])
        ]

    def clusters_for_profile(self, profile: Obj) -> list[str]:
        meta = profile["metadata"]
        if meta.get("namespace") != self.namespace:
            return []
        return [
            c["metadata"]["name"] for c in self.clusters.list() if cluster_profile_name(c) == meta["name"]
        ]

    async def watch_paths(self, enqueue: Callable[[str], None], interval: float) -> None:
        """Kubeconfig files (locationType: Path) are polled: a change of the file (or of what a
        symlink points at) reconnects, without a restart and without inotify."""
        seen: dict[str, tuple[Any, ...] | None] = {}
        while True:
            for mkc in self.clusters.list():
                location_type, location = kubeconfig_source(mkc)
                name = mkc["metadata"]["name"]
                if location_type != PATH or not location:
                    seen.pop(name, None)
                    continue
                signature = await asyncio.to_thread(_file_signature, location)
                if name in seen and seen[name] != signature:
                    enqueue(name)
                seen[name] = signature
            await self.clock.sleep(interval)


def _file_signature(path: str) -> tuple[Any, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)
