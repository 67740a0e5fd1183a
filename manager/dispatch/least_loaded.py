"""The least-loaded dispatcher (ours, `kueue-federation.dev/multikueue-dispatcher-least-loaded`):
one worker per round, the one whose queues have the most room now, and the next one only when
that worker has not admitted the Workload within the round.

AllAtOnce sends a copy to every worker and keeps the first to reserve quota: on N workers each
Workload costs N copies created, N quota reservations, N-1 copies deleted and the events of each.
When a worker has room the first copy is admitted at once, so the others were work for nothing.
The load of a worker is read from the manager's watch cache of its copies (no extra request):
the copies still waiting for quota there (a worker that keeps copies waiting is full), plus the
copies nominated there in the last seconds that its watch has not shown yet (a burst of
Workloads spreads instead of landing on one worker); then the copies holding quota there; then
the MultiKueueConfig's order. Workers not connected come last. The rounds are those of the
Incremental dispatcher (round start times in memory; a restarted manager starts a new round)."""

from __future__ import annotations

from manager.clusters import Remotes
from manager.dispatch.incremental import IncrementalDispatcher

# A nomination counts against its worker until the worker's watch shows the copy, or this long.
UNSEEN_NOMINATION_SECONDS = 3.0


class LeastLoadedDispatcher(IncrementalDispatcher):
    def __init__(self, *args, remotes: Remotes, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs.setdefault("step_size", 1)
        super().__init__(*args, **kwargs)
        self.remotes = remotes
        # worker -> {Workload key: monotonic time of its nomination there}
        self.unseen: dict[str, dict[str, float]] = {}

    def next_workers(self, key: str, clusters: list[str], nominated: list[str]) -> list[str]:
        candidates = [c for c in clusters if c not in nominated]
        if not candidates:
            return []
        order = {name: i for i, name in enumerate(clusters)}
        chosen = sorted(candidates, key=lambda c: (*self.load(c), order[c]))[: self.step_size]
        now = self.clock.monotonic()
        for cluster in chosen:
            self.unseen.setdefault(cluster, {})[key] = now
        return chosen

    def load(self, cluster: str) -> tuple[int, int, int]:
        """(not connected, copies waiting for quota + unseen nominations, copies holding quota)."""
        client = self.remotes.available(cluster)
        if client is None:
            self.unseen.pop(cluster, None)
            return (1, 0, 0)
        waiting, holding = client.copy_counts()
        return (0, waiting + self._unseen(cluster, client), holding)

    def _unseen(self, cluster: str, client) -> int:  # type: ignore[no-untyped-def]
        marks = self.unseen.get(cluster)
        if not marks:
            return 0
        now = self.clock.monotonic()
        for key in list(marks):
            namespace, _, name = key.partition("/")
            if now - marks[key] >= UNSEEN_NOMINATION_SECONDS or client.remote_workload(namespace, name):
                del marks[key]
        return len(marks)
