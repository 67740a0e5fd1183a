"""What the workload reconciler asks of a dispatcher (multikueue-spec §3.5), and what a dispatcher
that writes nominations from a controller of its own may ask of the manager's Workloads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

Obj = dict[str, Any]


class Dispatcher(Protocol):
    """Which workers get a copy of a Workload, decided in the Workload's own reconcile."""

    # Every connected worker gets a copy (no nominations narrow them): AllAtOnce.
    every_worker: bool
    # nominatedClusterNames are another controller's, under its own field manager: our applies
    # cannot drop them, and clusterName may not be set beside them (the CRD's rule).
    external: bool

    def nominate(
        self, key: str, current: list[str], everyone: list[str], copies: Mapping[str, Obj | None]
    ) -> tuple[list[str], float | None]:
        """(the workers to nominate, seconds until the choice is to be looked at again, or None).
        `current`: the nominations on the Workload; `everyone`: the connected workers that may get
        a copy, in the MultiKueueConfig's order; `copies`: the Workload's copy on each worker."""
        ...

    def forget(self, key: str) -> None:
        """The Workload is no longer tracked."""
        ...


class Nominations(Protocol):
    """The manager Workloads as a dispatcher with a controller of its own sees them."""

    def multikueue_check(self, wl: Obj) -> tuple[Obj, Obj] | None:
        """(AdmissionCheck, its state on `wl`) for the first check state whose check is ours."""
        ...

    async def set_nominated(self, wl: Obj, nominated: list[str]) -> None: ...


class StatelessDispatcher:
    """A dispatcher that keeps nothing per Workload."""

    every_worker = False
    external = False

    def forget(self, key: str) -> None:
        return None


class KeepNominations(StatelessDispatcher):
    """A dispatcher that leaves nominatedClusterNames as they are: copies go to the nominated workers."""

    def nominate(
        self, key: str, current: list[str], everyone: list[str], copies: Mapping[str, Obj | None]
    ) -> tuple[list[str], float | None]:
        return current, None
