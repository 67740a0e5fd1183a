"""The least-loaded dispatcher (ours, `kueue-federation.dev/multikueue-dispatcher-least-loaded`):
one copy, to a worker with room and the least load; every worker (as AllAtOnce) when none has room,
when that worker refuses the copy, or when it has not admitted it within the round.

AllAtOnce sends a copy to every worker and keeps the first to reserve quota: on N workers each
Workload costs N copies created, N quota reservations, N-1 copies deleted and the events of each.
When a worker has room the first copy is admitted at once, so the others were work for nothing.

Room is read from the manager's watch cache of its copies (no extra request). A worker has no
room while it keeps a copy refused (its `QuotaReserved` condition False: the worker's scheduler
tried and could not admit it), or for a round after its watch last showed one refused (whatever
Workload it was, and however that Workload was placed in the end). Among the workers with room,
the one with the fewest copies waiting (those not yet tried there, plus the nominations of the
last seconds that its watch has not shown yet, so that a burst spreads instead of landing on one
worker), then the fewest holding quota, then the MultiKueueConfig's order. The choice is made in
the Workload's own reconcile, in the write that nominates it, as AllAtOnce's is.

Once widened, a Workload stays on every worker until one admits it. Choices live in memory: a
restarted manager widens the Workloads it finds nominated to a single worker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_runtime.clock import Clock
from kueue_domain import api
from manager.clusters import Remotes
from manager.remote import COPY_REFUSED, copy_state

Obj = dict[str, Any]

# A nomination counts against its worker until the worker's watch shows the copy, or this long.
UNSEEN_NOMINATION_SECONDS = 3.0


def refused(copy: Obj | None) -> bool:
    """The worker tried to admit this copy and could not: `QuotaReserved` False, not finished."""
    return copy is not None and copy_state(copy) == (COPY_REFUSED,)


class LeastLoadedChoice:
    every_worker = False
    external = False

    def __init__(
        self, remotes: Remotes, clock: Clock, round_timeout: float = api.LEAST_LOADED_ROUND_TIMEOUT
    ) -> None:
        self.remotes = remotes
        self.clock = clock
        self.round_timeout = round_timeout
        # Workload key -> (the one worker it was sent to, monotonic time of that choice)
        self.chosen: dict[str, tuple[str, float]] = {}
        # worker -> {Workload key: monotonic time of its nomination there}
        self.unseen: dict[str, dict[str, float]] = {}

    def nominate(
        self, key: str, current: list[str], everyone: list[str], copies: Mapping[str, Obj | None]
    ) -> tuple[list[str], float | None]:
        """(the workers to nominate, seconds until this choice is to be looked at again, or None).
        `everyone`: the connected workers that may get a copy, in the MultiKueueConfig's order;
        `copies`: this Workload's copy on each worker (None where it has none)."""
        now = self.clock.monotonic()
        if len(everyone) < 2 or set(everyone) <= set(current):
            self.chosen.pop(key, None)
            return everyone, None
        picked = self.chosen.get(key)
        if picked is None:
            if current:  # chosen by a manager before a restart, or before a widening seen late
                return everyone, None
            cluster = self._best(everyone, now)
            if cluster is None:
                return everyone, None
            self.chosen[key] = (cluster, now)
            self.unseen.setdefault(cluster, {})[key] = now
            return [cluster], self.round_timeout
        cluster, since = picked
        left = self.round_timeout - (now - since)
        if cluster not in everyone or left <= 0 or refused(copies.get(cluster)):
            self.chosen.pop(key, None)
            return everyone, None
        return [cluster], left

    def forget(self, key: str) -> None:
        self.chosen.pop(key, None)

    def _best(self, everyone: list[str], now: float) -> str | None:
        """The worker with room and the least load, or None when no worker has room."""
        loads = {name: (*self.load(name, now), i) for i, name in enumerate(everyone)}
        best = min(everyone, key=loads.__getitem__)
        return None if loads[best][0] else best

    def load(self, cluster: str, now: float) -> tuple[int, int, int]:
        """(no room, copies waiting + unseen nominations, copies holding quota)."""
        client = self.remotes.available(cluster)
        if client is None:
            self.unseen.pop(cluster, None)
            return (1, 0, 0)
        waiting, holding, refusing = client.copy_counts()
        last_refusal = client.last_refusal
        recently = last_refusal is not None and now - last_refusal < self.round_timeout
        return (int(bool(refusing) or recently), waiting + self._unseen(cluster, client, now), holding)

    def _unseen(self, cluster: str, client: Any, now: float) -> int:
        marks = self.unseen.get(cluster)
        if not marks:
            return 0
        for key in list(marks):
            namespace, _, name = key.partition("/")
            if now - marks[key] >= UNSEEN_NOMINATION_SECONDS or client.remote_workload(namespace, name):
                del marks[key]
        return len(marks)
