"""Prometheus metrics of the manager: upstream's MultiKueue counters (same names and labels) and
histograms of each dispatch stage, measured on the manager's monotonic clock."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from kube_runtime.clock import Clock
from kueue_domain import api

# The stages of one dispatch, in order; each histogram observes the time since the previous one.
STAGES = ("quota_reserved", "dispatched", "remote_admitted", "check_ready", "status_mirrored")
_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class ManagerMetrics:
    def __init__(self, registry: CollectorRegistry, clock: Clock) -> None:
        disable_created_metrics()  # upstream exports no *_created samples
        self.clock = clock
        self.replica_role = "leader"
        self.dispatched_total = Counter(
            api.METRIC_MULTIKUEUE_WORKLOADS_DISPATCHED_TOTAL.removesuffix("_total"),
            "Workload copies created on worker clusters",
            [api.METRIC_LABEL_CLUSTER_QUEUE, api.METRIC_LABEL_CLUSTER, api.METRIC_LABEL_REPLICA_ROLE],
            registry=registry,
        )
        self.admitted_total = Counter(
            api.METRIC_MULTIKUEUE_WORKLOADS_ADMITTED_TOTAL.removesuffix("_total"),
            "Workloads whose MultiKueue admission check became Ready",
            [api.METRIC_LABEL_CLUSTER_QUEUE, api.METRIC_LABEL_CLUSTER, api.METRIC_LABEL_REPLICA_ROLE],
            registry=registry,
        )
        self.cluster_status = Gauge(
            "multikueue_cluster_status",
            "1 for the current connection state of each worker cluster",
            ["cluster", "status"],
            registry=registry,
        )
        self.stage_seconds = Histogram(
            "kueue_federation_multikueue_dispatch_stage_seconds",
            "Seconds from the previous dispatch stage to this one (stage order: " + ", ".join(STAGES) + ")",
            ["stage"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self._stage_times: dict[str, tuple[int, float]] = {}

    def dispatched(self, cluster_queue: str, cluster: str) -> None:
        self.dispatched_total.labels(cluster_queue, cluster, self.replica_role).inc()

    def admitted(self, cluster_queue: str, cluster: str) -> None:
        self.admitted_total.labels(cluster_queue, cluster, self.replica_role).inc()

    def set_cluster_connected(self, cluster: str, connected: bool | None) -> None:
        for status in ("active", "inactive"):
            if connected is None:
                try:
                    self.cluster_status.remove(cluster, status)
                except KeyError:
                    pass
            else:
                self.cluster_status.labels(cluster, status).set(1 if connected == (status == "active") else 0)

    def stage(self, key: str, stage: str) -> None:
        """Record that `key` reached `stage`; each stage is observed once, in order."""
        index = STAGES.index(stage)
        now = self.clock.monotonic()
        previous = self._stage_times.get(key)
        if previous is None:
            if index == 0:
                self._stage_times[key] = (0, now)
            return
        last_index, since = previous
        if index != last_index + 1:
            return
        self.stage_seconds.labels(stage).observe(now - since)
        if index == len(STAGES) - 1:
            self._stage_times.pop(key, None)
        else:
            self._stage_times[key] = (index, now)

    def forget(self, key: str) -> None:
        self._stage_times.pop(key, None)
