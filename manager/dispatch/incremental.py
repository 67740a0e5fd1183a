"""The Incremental dispatcher (multikueue-spec §3.5.2): nominate `stepSize` more workers (in the
MultiKueueConfig's order) every round of 5 minutes until one admits the Workload. Round start
times live in memory, as upstream's do: a restarted manager starts a new round at once."""

from __future__ import annotations

from collections.abc import Callable

from kube_runtime.clock import Clock
from kube_runtime.controller import Result
from kube_runtime.informer import Informer
from kueue_domain import api
from kueue_domain import workload as wlutil
from manager.admissioncheck import AdmissionCheckController
from manager.dispatch.base import KeepNominations, Nominations


class NoMoreWorkers(Exception):
    pass


class IncrementalDispatcher(KeepNominations):
    """Nominations come from this dispatcher's own controller (`reconcile`); the Workload's
    reconcile keeps copies on the workers nominated so far (KeepNominations)."""

    def __init__(
        self,
        workloads: Informer,
        ac_controller: AdmissionCheckController,
        nominations: Nominations,
        clock: Clock,
        step_size: int = api.DEFAULT_INCREMENTAL_STEP_SIZE,
        round_timeout: float = api.INCREMENTAL_ROUND_TIMEOUT,
        respect_config_order: bool = True,
        on_nominated: Callable[[str], None] | None = None,
    ) -> None:
        self.workloads = workloads
        self.ac_controller = ac_controller
        self.nominations = nominations
        self.clock = clock
        self.step_size = step_size
        self.round_timeout = round_timeout
        self.respect_config_order = respect_config_order
        self.on_nominated = on_nominated
        self.round_started: dict[str, float] = {}

    async def reconcile(self, key: str) -> Result | None:
        wl = self.workloads.get(key)
        if wl is None or wl["metadata"].get("deletionTimestamp"):
            self.round_started.pop(key, None)
            return None
        found = self.nominations.multikueue_check(wl)
        status = wl.get("status") or {}
        if found is None or found[1].get("state") != api.CHECK_STATE_PENDING or status.get("clusterName"):
            return None
        clusters = self.ac_controller.config_clusters(found[0]) or []
        if not clusters:
            raise NoMoreWorkers("no active clusters")
        if wlutil.is_finished(wl) or not wlutil.has_quota_reservation(wl):
            self.round_started.pop(key, None)
            return None
        started = self.round_started.get(key)
        if started is not None:
            remaining = self.round_timeout - (self.clock.monotonic() - started)
            if remaining > 0:
                return Result(requeue_after=remaining)
        nominated = list(status.get("nominatedClusterNames") or ())
        fresh = self.next_workers(key, clusters, nominated)
        if not fresh:
            raise NoMoreWorkers("no more workers to nominate")
        await self.nominations.set_nominated(wl, nominated + fresh)
        self.round_started[key] = self.clock.monotonic()
        if self.on_nominated is not None:
            self.on_nominated(key)
        return Result(requeue_after=self.round_timeout)

    def next_workers(self, key: str, clusters: list[str], nominated: list[str]) -> list[str]:
        """The workers this round adds: the next `stepSize` in the MultiKueueConfig's order (sorted
        by name with MultiKueueIncrementalDispatcherRespectConfigOrder off)."""
        order = clusters if self.respect_config_order else sorted(clusters)
        return [c for c in order if c not in nominated][: self.step_size]
