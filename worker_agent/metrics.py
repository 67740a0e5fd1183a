"""Kueue's Prometheus metrics, as the worker_agent exports them.

Names, types, label names and histogram buckets follow Kueue v0.19 (`pkg/metrics`), so dashboards
and alerts written for Kueue work unchanged. Every series carries upstream's `replica_role` label
(`leader`, `follower` or `standalone`). The `kueue_local_queue_*` metrics are exported only with the
LocalQueueMetrics feature gate (on by default in v0.19), `kueue_cohort_info` and
`kueue_cluster_queue_info` only with MetricsForCohorts, `kueue_workload_creation_latency_seconds`
only with MetricForWorkloadCreationLatency (both on by default). Upstream fills the quota/usage gauges only
with `metrics.enableClusterQueueResources`; here they are always defined and the controllers decide
what to report. Three counters of our own (`kueue_worker_agent_*`) measure the engine.

Metrics live on the registry the caller passes, never on prometheus_client's global one, so tests
and several agents in one process do not share state. docs/metrics.md lists them all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# ---------------------------------------------------------------------------------------------
# Label values

LOCAL_QUEUE_PREFIX = "kueue_local_queue_"  # the series the LocalQueueMetrics gate turns on
COHORT_PREFIX = "kueue_cohort_"  # a Cohort's own series (cleared with it)

REPLICA_ROLE_LEADER = "leader"
REPLICA_ROLE_FOLLOWER = "follower"
REPLICA_ROLE_STANDALONE = "standalone"
REPLICA_ROLES = (REPLICA_ROLE_LEADER, REPLICA_ROLE_FOLLOWER, REPLICA_ROLE_STANDALONE)

ADMISSION_RESULT_SUCCESS = "success"
ADMISSION_RESULT_INADMISSIBLE = "inadmissible"

PENDING_STATUS_ACTIVE = "active"
PENDING_STATUS_INADMISSIBLE = "inadmissible"

CQ_STATUS_PENDING = "pending"
CQ_STATUS_ACTIVE = "active"
CQ_STATUS_TERMINATING = "terminating"
CQ_STATUSES = (CQ_STATUS_PENDING, CQ_STATUS_ACTIVE, CQ_STATUS_TERMINATING)

# kueue_local_queue_status{active=...}: the LocalQueue's Active condition status.
LQ_ACTIVE_VALUES = ("True", "False", "Unknown")

# ---------------------------------------------------------------------------------------------
# Label names

CLUSTER_QUEUE = "cluster_queue"
PREEMPTING_CLUSTER_QUEUE = "preempting_cluster_queue"
LQ_NAME = "name"
LQ_NAMESPACE = "namespace"
COHORT = "cohort"
FLAVOR = "flavor"
RESOURCE = "resource"
STATUS = "status"
ACTIVE = "active"
RESULT = "result"
REASON = "reason"
UNDERLYING_CAUSE = "underlying_cause"
PRIORITY_CLASS = "priority_class"
REPLICA_ROLE = "replica_role"
PARENT_COHORT = "parent_cohort"
ROOT_COHORT = "root_cohort"
JOB_KIND = "job_kind"

# ---------------------------------------------------------------------------------------------
# Histogram buckets (prometheus_client adds +Inf itself)


def exponential_buckets(count: int) -> tuple[float, ...]:
    """Kueue's wait-time buckets: 1 s, then `count - 1` boundaries doubling from 2.5 s."""
    return (1.0, *(2.5 * 2**i for i in range(count - 1)))


WAIT_TIME_BUCKETS = exponential_buckets(14)  # up to 10240 s (about 2.8 h)
ADMISSION_WAIT_TIME_BUCKETS = exponential_buckets(16)  # up to 40960 s (about 11.3 h), Kueue >= 0.16.2
# client_golang's DefBuckets: upstream sets no buckets on the admission attempt histogram.
GO_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# prometheus.ExponentialBuckets(0.01, 2, 11): 10 ms doubling to 10.24 s.
WORKLOAD_CREATION_LATENCY_BUCKETS = tuple(0.01 * 2**i for i in range(11))

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricDef:
    """One exported metric: its full exposition name, type, label names, help and buckets."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] | None = None


def _def(name: str, kind: str, labels: Iterable[str], help_text: str, buckets=None) -> MetricDef:
    return MetricDef(name, kind, tuple(labels), help_text, buckets)


_CQ = (CLUSTER_QUEUE, REPLICA_ROLE)
_CQ_PC = (CLUSTER_QUEUE, PRIORITY_CLASS, REPLICA_ROLE)
_CQ_RESOURCE = (COHORT, CLUSTER_QUEUE, FLAVOR, RESOURCE, REPLICA_ROLE)
_LQ = (LQ_NAME, LQ_NAMESPACE, REPLICA_ROLE)
_LQ_PC = (LQ_NAME, LQ_NAMESPACE, PRIORITY_CLASS, REPLICA_ROLE)
_LQ_RESOURCE = (LQ_NAME, LQ_NAMESPACE, FLAVOR, RESOURCE, REPLICA_ROLE)
_COHORT_RESOURCE = (COHORT, FLAVOR, RESOURCE, REPLICA_ROLE)

# Reported only with the MetricsForCohorts gate (worker_agent/cohort_metrics.py reports them all).
COHORT_INFO = "kueue_cohort_info"
CLUSTER_QUEUE_INFO = "kueue_cluster_queue_info"
# Registered only with the MetricForWorkloadCreationLatency gate.
WORKLOAD_CREATION_LATENCY = "kueue_workload_creation_latency_seconds"

METRICS: tuple[MetricDef, ...] = (
    # Scheduler health.
    _def(
        "kueue_admission_attempts_total",
        COUNTER,
        (RESULT, REPLICA_ROLE),
        "Scheduling cycles that tried to admit workloads; result=success if at least one was admitted.",
    ),
    _def(
        "kueue_admission_attempt_duration_seconds",
        HISTOGRAM,
        (RESULT, REPLICA_ROLE),
        "Latency of an admission attempt, by result.",
        GO_DEFAULT_BUCKETS,
    ),
    _def(
        "kueue_admission_cycle_preemption_skips",
        GAUGE,
        _CQ,
        "Workloads of the ClusterQueue that had preemption candidates but were skipped in the last cycle "
        "because another ClusterQueue needed the same resources.",
    ),
    # ClusterQueue: queue and cache state.
    _def(
        "kueue_pending_workloads",
        GAUGE,
        (CLUSTER_QUEUE, STATUS, REPLICA_ROLE),
        "Pending workloads per ClusterQueue; status=active (in the admission queue) or inadmissible.",
    ),
    _def("kueue_reserving_active_workloads", GAUGE, _CQ, "Workloads holding a quota reservation."),
    _def("kueue_admitted_active_workloads", GAUGE, _CQ, "Admitted workloads that have not finished."),
    _def(
        "kueue_cluster_queue_status",
        GAUGE,
        (CLUSTER_QUEUE, STATUS, REPLICA_ROLE),
        "1 for the ClusterQueue's current status (pending, active or terminating), 0 for the others.",
    ),
    # ClusterQueue: workload lifecycle.
    _def("kueue_quota_reserved_workloads_total", COUNTER, _CQ_PC, "Workloads that got a quota reservation."),
    _def(
        "kueue_quota_reserved_wait_time_seconds",
        HISTOGRAM,
        _CQ_PC,
        "Time from creation or last requeue until quota reservation.",
        WAIT_TIME_BUCKETS,
    ),
    _def("kueue_admitted_workloads_total", COUNTER, _CQ_PC, "Workloads that were admitted."),
    _def(
        "kueue_admission_wait_time_seconds",
        HISTOGRAM,
        _CQ_PC,
        "Time from creation or last requeue until admission.",
        ADMISSION_WAIT_TIME_BUCKETS,
    ),
    _def(
        "kueue_admission_checks_wait_time_seconds",
        HISTOGRAM,
        _CQ_PC,
        "Time from quota reservation until admission (admission checks).",
        WAIT_TIME_BUCKETS,
    ),
    _def(
        "kueue_ready_wait_time_seconds",
        HISTOGRAM,
        _CQ_PC,
        "Time from creation or last requeue until PodsReady.",
        WAIT_TIME_BUCKETS,
    ),
    _def(
        "kueue_admitted_until_ready_wait_time_seconds",
        HISTOGRAM,
        _CQ_PC,
        "Time from admission until PodsReady.",
        WAIT_TIME_BUCKETS,
    ),
    _def("kueue_finished_workloads_total", COUNTER, _CQ_PC, "Workloads that finished."),
    _def(
        "kueue_evicted_workloads_total",
        COUNTER,
        (CLUSTER_QUEUE, REASON, UNDERLYING_CAUSE, PRIORITY_CLASS, REPLICA_ROLE),
        "Evictions by reason (Preempted, PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, "
        "LocalQueueStopped, NodeFailures, Deactivated) and underlying cause.",
    ),
    _def(
        "kueue_evicted_workloads_once_total",
        COUNTER,
        (CLUSTER_QUEUE, REASON, UNDERLYING_CAUSE, PRIORITY_CLASS, REPLICA_ROLE),
        "Workloads evicted at least once, counted on their first eviction.",
    ),
    _def(
        "kueue_pods_ready_to_evicted_time_seconds",
        HISTOGRAM,
        (CLUSTER_QUEUE, REASON, UNDERLYING_CAUSE, REPLICA_ROLE),
        "Time from a workload's pods being ready until its eviction.",
        WAIT_TIME_BUCKETS,
    ),
    _def(
        "kueue_preempted_workloads_total",
        COUNTER,
        (PREEMPTING_CLUSTER_QUEUE, REASON, REPLICA_ROLE),
        "Workloads preempted, by the preempting ClusterQueue and reason (InClusterQueue, "
        "InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing).",
    ),
    # ClusterQueue: quota and usage per (flavor, resource); cpu in cores, other resources in base units.
    _def("kueue_cluster_queue_resource_reservation", GAUGE, _CQ_RESOURCE, "Quota reserved by workloads."),
    _def("kueue_cluster_queue_resource_usage", GAUGE, _CQ_RESOURCE, "Quota used by admitted workloads."),
    _def("kueue_cluster_queue_nominal_quota", GAUGE, _CQ_RESOURCE, "Nominal quota."),
    _def("kueue_cluster_queue_borrowing_limit", GAUGE, _CQ_RESOURCE, "Borrowing limit; +Inf when unset."),
    _def("kueue_cluster_queue_lending_limit", GAUGE, _CQ_RESOURCE, "Lending limit; +Inf when unset."),
    # Fair sharing.
    _def(
        "kueue_cluster_queue_weighted_share",
        GAUGE,
        (CLUSTER_QUEUE, COHORT, REPLICA_ROLE),
        "Largest ratio of usage above nominal quota to the cohort's lendable resources, divided by the "
        "weight; NaN for a zero weight while borrowing.",
    ),
    _def(
        "kueue_cohort_weighted_share",
        GAUGE,
        (COHORT, REPLICA_ROLE),
        "The same share for a Cohort within its parent.",
    ),
    # Cohorts (worker_agent/cohort_metrics.py): a cohort's subtree is itself, its ClusterQueues and
    # every cohort below it.
    _def(
        "kueue_cohort_subtree_quota",
        GAUGE,
        _COHORT_RESOURCE,
        "Nominal quota of the cohort's subtree per flavor and resource, lending limits applied.",
    ),
    _def(
        "kueue_cohort_subtree_resource_reservations",
        GAUGE,
        _COHORT_RESOURCE,
        "Quota reserved by the workloads of the cohort's subtree, per flavor and resource.",
    ),
    _def(
        "kueue_cohort_subtree_admitted_workloads_total",
        COUNTER,
        (COHORT, PRIORITY_CLASS, REPLICA_ROLE),
        "Workloads admitted in the cohort's subtree.",
    ),
    _def(
        "kueue_cohort_subtree_admitted_active_workloads",
        GAUGE,
        (COHORT, REPLICA_ROLE),
        "Admitted workloads of the cohort's subtree that have not finished.",
    ),
    _def(
        COHORT_INFO,
        GAUGE,
        (COHORT, PARENT_COHORT, ROOT_COHORT, REPLICA_ROLE),
        "1 per Cohort, labelled with its parent ('' for a root) and its root, for joins.",
    ),
    _def(
        CLUSTER_QUEUE_INFO,
        GAUGE,
        (CLUSTER_QUEUE, PARENT_COHORT, ROOT_COHORT, REPLICA_ROLE),
        "1 per ClusterQueue, labelled with its cohort and that cohort's root ('' without a cohort).",
    ),
    # Job framework.
    _def(
        WORKLOAD_CREATION_LATENCY,
        HISTOGRAM,
        (JOB_KIND, REPLICA_ROLE),
        "Time from a job's creation until its Workload's, per job kind; only jobs at generation 1.",
        WORKLOAD_CREATION_LATENCY_BUCKETS,
    ),
    # LocalQueue equivalents.
    _def(
        "kueue_local_queue_pending_workloads",
        GAUGE,
        (LQ_NAME, LQ_NAMESPACE, STATUS, REPLICA_ROLE),
        "Pending workloads per LocalQueue; status=active or inadmissible.",
    ),
    _def(
        "kueue_local_queue_reserving_active_workloads", GAUGE, _LQ, "Workloads holding a quota reservation."
    ),
    _def(
        "kueue_local_queue_admitted_active_workloads",
        GAUGE,
        _LQ,
        "Admitted workloads that have not finished.",
    ),
    _def(
        "kueue_local_queue_status",
        GAUGE,
        (LQ_NAME, LQ_NAMESPACE, ACTIVE, REPLICA_ROLE),
        "1 for the status of the LocalQueue's Active condition (True, False or Unknown), 0 for the others.",
    ),
    _def(
        "kueue_local_queue_quota_reserved_workloads_total",
        COUNTER,
        _LQ_PC,
        "Workloads that got a quota reservation.",
    ),
    _def(
        "kueue_local_queue_quota_reserved_wait_time_seconds",
        HISTOGRAM,
        _LQ_PC,
        "Time from creation or last requeue until quota reservation.",
        WAIT_TIME_BUCKETS,
    ),
    _def("kueue_local_queue_admitted_workloads_total", COUNTER, _LQ_PC, "Workloads that were admitted."),
    _def(
        "kueue_local_queue_admission_wait_time_seconds",
        HISTOGRAM,
        _LQ_PC,
        "Time from creation or last requeue until admission.",
        WAIT_TIME_BUCKETS,
    ),
    _def(
        "kueue_local_queue_admission_checks_wait_time_seconds",
        HISTOGRAM,
        _LQ_PC,
        "Time from quota reservation until admission (admission checks).",
        WAIT_TIME_BUCKETS,
    ),
    _def(
        "kueue_local_queue_ready_wait_time_seconds",
        HISTOGRAM,
        _LQ_PC,
        "Time from creation or last requeue until PodsReady.",
        WAIT_TIME_BUCKETS,
    ),
    _def(
        "kueue_local_queue_admitted_until_ready_wait_time_seconds",
        HISTOGRAM,
        _LQ_PC,
        "Time from admission until PodsReady.",
        WAIT_TIME_BUCKETS,
    ),
    _def("kueue_local_queue_finished_workloads_total", COUNTER, _LQ_PC, "Workloads that finished."),
    _def(
        "kueue_local_queue_evicted_workloads_total",
        COUNTER,
        (LQ_NAME, LQ_NAMESPACE, REASON, UNDERLYING_CAUSE, PRIORITY_CLASS, REPLICA_ROLE),
        "Evictions by reason and underlying cause, per LocalQueue.",
    ),
    _def("kueue_local_queue_resource_reservation", GAUGE, _LQ_RESOURCE, "Quota reserved by workloads."),
    _def("kueue_local_queue_resource_usage", GAUGE, _LQ_RESOURCE, "Quota used by admitted workloads."),
    _def(
        "kueue_local_queue_admission_fair_sharing_usage",
        GAUGE,
        (LQ_NAME, LQ_NAMESPACE, CLUSTER_QUEUE, REPLICA_ROLE),
        "Admission Fair Sharing usage: resource-weighted consumed resources plus pending penalties, "
        "divided by the LocalQueue's weight.",
    ),
    # Ours: the engine's work.
    _def("kueue_worker_agent_scheduling_cycles_total", COUNTER, (), "Scheduling cycles the engine ran."),
    _def(
        "kueue_worker_agent_scheduling_decisions_total",
        COUNTER,
        (),
        "Queue heads the engine decided on (admit, preempt or requeue).",
    ),
    _def(
        "kueue_worker_agent_engine_cpu_seconds_total",
        COUNTER,
        (),
        "Process CPU time spent inside the engine's scheduling cycles.",
    ),
)

METRICS_BY_NAME = {m.name: m for m in METRICS}

CPU_RESOURCE = "cpu"


def resource_value(resource: str, amount: float | None) -> float:
    """An engine amount as Kueue reports it: cpu millicores as cores, others unchanged; None is +Inf."""
    if amount is None:
        return math.inf
    return amount / 1000 if resource == CPU_RESOURCE else float(amount)


class Metrics:
    """The worker_agent's metrics on one registry, with the helpers the controllers call."""

    def __init__(
        self,
        registry: CollectorRegistry,
        replica_role: str = REPLICA_ROLE_STANDALONE,
        local_queue_metrics: bool = True,
        cohort_info: bool = True,
        workload_creation_latency: bool = True,
    ) -> None:
        """The three flags are the LocalQueueMetrics, MetricsForCohorts and
        MetricForWorkloadCreationLatency gates: off, those series are not exported."""
        if replica_role not in REPLICA_ROLES:
            raise ValueError(f"replica_role must be one of {REPLICA_ROLES}, not {replica_role!r}")
        # Kueue's Go client exports no *_created series; keep the exposition the same.
        disable_created_metrics()
        self.registry = registry
        self.replica_role = replica_role
        self._metrics: dict[str, Counter | Gauge | Histogram] = {}
        self.cohort_info = cohort_info
        self.workload_creation_latency = workload_creation_latency
        # A gate's series that are off go to a registry nobody scrapes: the helpers keep working
        # and /metrics shows what upstream shows.
        unexported = CollectorRegistry(auto_describe=True)
        for spec in METRICS:
            off = (
                (not local_queue_metrics and spec.name.startswith(LOCAL_QUEUE_PREFIX))
                or (not cohort_info and spec.name in (COHORT_INFO, CLUSTER_QUEUE_INFO))
                or (not workload_creation_latency and spec.name == WORKLOAD_CREATION_LATENCY)
            )
            self._metrics[spec.name] = _build(spec, unexported if off else registry)

    def __getitem__(self, name: str) -> Counter | Gauge | Histogram:
        return self._metrics[name]

    # -- scheduler ------------------------------------------------------------------------------

    def admission_attempt(self, result: str, seconds: float) -> None:
        """One admission attempt (`success` or `inadmissible`) and how long it took."""
        self._metrics["kueue_admission_attempts_total"].labels(result, self.replica_role).inc()
        self._metrics["kueue_admission_attempt_duration_seconds"].labels(result, self.replica_role).observe(
            seconds
        )

    def scheduling_cycle(self, decisions: int, cpu_seconds: float) -> None:
        """One engine cycle: the queue heads it decided on and the CPU time it took."""
        self._metrics["kueue_worker_agent_scheduling_cycles_total"].inc()
        self._metrics["kueue_worker_agent_scheduling_decisions_total"].inc(decisions)
        self._metrics["kueue_worker_agent_engine_cpu_seconds_total"].inc(cpu_seconds)

    def report_preemption_skips(self, cq: str, count: int) -> None:
        """Workloads of `cq` skipped in the last cycle because their preemption targets overlapped."""
        self._metrics["kueue_admission_cycle_preemption_skips"].labels(cq, self.replica_role).set(count)

    # -- ClusterQueue: workload lifecycle -------------------------------------------------------

    def quota_reserved(self, cq: str, wait_seconds: float, priority_class: str = "") -> None:
        """A workload got quota in `cq` after waiting `wait_seconds` since creation or requeue."""
        labels = (cq, priority_class, self.replica_role)
        self._metrics["kueue_quota_reserved_workloads_total"].labels(*labels).inc()
        self._metrics["kueue_quota_reserved_wait_time_seconds"].labels(*labels).observe(wait_seconds)

    def admitted(self, cq: str, wait_seconds: float, priority_class: str = "") -> None:
        """A workload was admitted in `cq` after waiting `wait_seconds` since creation or requeue."""
        labels = (cq, priority_class, self.replica_role)
        self._metrics["kueue_admitted_workloads_total"].labels(*labels).inc()
        self._metrics["kueue_admission_wait_time_seconds"].labels(*labels).observe(wait_seconds)

    def admission_checks_wait(self, cq: str, seconds: float, priority_class: str = "") -> None:
        """A workload of `cq` was admitted `seconds` after its quota reservation."""
        labels = (cq, priority_class, self.replica_role)
        self._metrics["kueue_admission_checks_wait_time_seconds"].labels(*labels).observe(seconds)

    def ready_wait(self, cq: str, seconds: float, priority_class: str = "") -> None:
        """A workload of `cq` got PodsReady `seconds` after creation or requeue."""
        labels = (cq, priority_class, self.replica_role)
        self._metrics["kueue_ready_wait_time_seconds"].labels(*labels).observe(seconds)

    def admitted_until_ready(self, cq: str, seconds: float, priority_class: str = "") -> None:
        """A workload of `cq` got PodsReady `seconds` after admission."""
        labels = (cq, priority_class, self.replica_role)
        self._metrics["kueue_admitted_until_ready_wait_time_seconds"].labels(*labels).observe(seconds)

    def finished(self, cq: str, priority_class: str = "") -> None:
        """A workload of `cq` finished."""
        self._metrics["kueue_finished_workloads_total"].labels(cq, priority_class, self.replica_role).inc()

    def evicted(self, cq: str, reason: str, underlying_cause: str = "", priority_class: str = "") -> None:
        """A workload of `cq` was evicted for `reason` (an Evicted condition reason)."""
        labels = (cq, reason, underlying_cause, priority_class, self.replica_role)
        self._metrics["kueue_evicted_workloads_total"].labels(*labels).inc()

    def evicted_once(
        self, cq: str, reason: str, underlying_cause: str = "", priority_class: str = ""
    ) -> None:
        """A workload of `cq` was evicted for the first time."""
        labels = (cq, reason, underlying_cause, priority_class, self.replica_role)
        self._metrics["kueue_evicted_workloads_once_total"].labels(*labels).inc()

    def pods_ready_to_evicted(self, cq: str, seconds: float, reason: str, underlying_cause: str = "") -> None:
        """A workload of `cq` was evicted `seconds` after its pods became ready."""
        labels = (cq, reason, underlying_cause, self.replica_role)
        self._metrics["kueue_pods_ready_to_evicted_time_seconds"].labels(*labels).observe(seconds)

    def preempted(self, preempting_cq: str, reason: str) -> None:
        """`preempting_cq` preempted a workload for `reason` (a Preempted condition reason)."""
        self._metrics["kueue_preempted_workloads_total"].labels(
            preempting_cq, reason, self.replica_role
        ).inc()

    # -- ClusterQueue: state --------------------------------------------------------------------

    def report_pending(self, cq: str, active: int, inadmissible: int) -> None:
        """Pending workloads of `cq`: in the active heap and set aside as inadmissible."""
        pending = self._metrics["kueue_pending_workloads"]
        pending.labels(cq, PENDING_STATUS_ACTIVE, self.replica_role).set(active)
        pending.labels(cq, PENDING_STATUS_INADMISSIBLE, self.replica_role).set(inadmissible)

    def report_reserving_admitted(self, cq: str, reserving: int, admitted: int) -> None:
        """Workloads of `cq` holding quota, and those of them admitted and not finished."""
        self._metrics["kueue_reserving_active_workloads"].labels(cq, self.replica_role).set(reserving)
        self._metrics["kueue_admitted_active_workloads"].labels(cq, self.replica_role).set(admitted)

    def report_cluster_queue_status(self, cq: str, status: str) -> None:
        """`cq` is `pending`, `active` or `terminating`: 1 on that series, 0 on the other two."""
        if status not in CQ_STATUSES:
            raise ValueError(f"ClusterQueue status must be one of {CQ_STATUSES}, not {status!r}")
        gauge = self._metrics["kueue_cluster_queue_status"]
        for candidate in CQ_STATUSES:
            gauge.labels(cq, candidate, self.replica_role).set(1 if candidate == status else 0)

    def report_cluster_queue_quotas(
        self,
        cohort: str,
        cq: str,
        flavor: str,
        resource: str,
        nominal: float,
        borrowing: float | None,
        lending: float | None,
    ) -> None:
        """Quota of `cq` for (flavor, resource) in engine units; an unset limit (None) is +Inf."""
        labels = (cohort, cq, flavor, resource, self.replica_role)
        self._metrics["kueue_cluster_queue_nominal_quota"].labels(*labels).set(
            resource_value(resource, nominal)
        )
        self._metrics["kueue_cluster_queue_borrowing_limit"].labels(*labels).set(
            resource_value(resource, borrowing)
        )
        self._metrics["kueue_cluster_queue_lending_limit"].labels(*labels).set(
            resource_value(resource, lending)
        )

    def report_cluster_queue_usage(
        self, cohort: str, cq: str, flavor: str, resource: str, reserved: float, used: float
    ) -> None:
        """Quota of `cq` reserved by all its workloads and used by the admitted ones, in engine units."""
        labels = (cohort, cq, flavor, resource, self.replica_role)
        reservation = resource_value(resource, reserved)
        self._metrics["kueue_cluster_queue_resource_reservation"].labels(*labels).set(reservation)
        self._metrics["kueue_cluster_queue_resource_usage"].labels(*labels).set(
            resource_value(resource, used)
        )

    def report_weighted_share(self, cq: str, cohort: str, share: float) -> None:
        """Fair-sharing weighted share of `cq` in `cohort` (NaN for a zero weight while borrowing)."""
        self._metrics["kueue_cluster_queue_weighted_share"].labels(cq, cohort, self.replica_role).set(share)

    def report_cohort_weighted_share(self, cohort: str, share: float) -> None:
        """Fair-sharing weighted share of `cohort` within its parent."""
        self._metrics["kueue_cohort_weighted_share"].labels(cohort, self.replica_role).set(share)

    def report_cohort_subtree(
        self, cohort: str, flavor: str, resource: str, quota: float, reservations: float
    ) -> None:
        """A cohort's subtree quota and reservations for (flavor, resource) in engine units; a
        series whose value is not above zero is removed, as upstream does."""
        labels = (cohort, flavor, resource, self.replica_role)
        for name, amount in (
            ("kueue_cohort_subtree_quota", quota),
            ("kueue_cohort_subtree_resource_reservations", reservations),
        ):
            spec = METRICS_BY_NAME[name]
            if amount > 0:
                self._metrics[name].labels(*labels).set(resource_value(resource, amount))
            else:
                match = {COHORT: cohort, FLAVOR: flavor, RESOURCE: resource}
                _remove_matching(self._metrics[name], spec, match)

    def cohort_subtree_admitted(self, cohorts: Iterable[str], priority_class: str = "") -> None:
        """A workload was admitted in a ClusterQueue below each of `cohorts`."""
        counter = self._metrics["kueue_cohort_subtree_admitted_workloads_total"]
        for cohort in cohorts:
            counter.labels(cohort, priority_class, self.replica_role).inc()

    def report_cohort_subtree_admitted_active(self, cohort: str, count: int) -> None:
        """Admitted, unfinished workloads of the cohort's subtree."""
        gauge = self._metrics["kueue_cohort_subtree_admitted_active_workloads"]
        gauge.labels(cohort, self.replica_role).set(count)

    def report_cohort_info(self, cohort: str, parent: str, root: str) -> None:
        """The cohort's place in its hierarchy (its previous series removed)."""
        self.remove_series(COHORT_INFO, {COHORT: cohort})
        self._metrics[COHORT_INFO].labels(cohort, parent, root, self.replica_role).set(1)

    def report_cluster_queue_info(self, cq: str, parent: str, root: str) -> None:
        """The ClusterQueue's cohort and root (its previous series removed)."""
        self.remove_series(CLUSTER_QUEUE_INFO, {CLUSTER_QUEUE: cq})
        self._metrics[CLUSTER_QUEUE_INFO].labels(cq, parent, root, self.replica_role).set(1)

    def remove_series(self, name: str, match: dict[str, str]) -> None:
        """Remove the series of metric `name` whose labels include `match`."""
        _remove_matching(self._metrics[name], METRICS_BY_NAME[name], match)

    def workload_created(self, job_kind: str, seconds: float) -> None:
        """A Workload was created `seconds` after its job (of kind `job_kind`)."""
        self._metrics[WORKLOAD_CREATION_LATENCY].labels(job_kind, self.replica_role).observe(seconds)

    def clear_cluster_queue_flavor(self, cq: str, flavor: str, resource: str = "") -> None:
        """Drop the quota and usage series of a flavor (or one of its resources) no longer in `cq`."""
        match = {CLUSTER_QUEUE: cq, FLAVOR: flavor} | ({RESOURCE: resource} if resource else {})
        for name, spec in METRICS_BY_NAME.items():
            if spec.labels == _CQ_RESOURCE:
                _remove_matching(self._metrics[name], spec, match)

    def clear_cluster_queue(self, cq: str) -> None:
        """Remove every series of a deleted ClusterQueue, including the preemptions it made."""
        for name, spec in METRICS_BY_NAME.items():
            if CLUSTER_QUEUE in spec.labels:
                _remove_matching(self._metrics[name], spec, {CLUSTER_QUEUE: cq})
            if PREEMPTING_CLUSTER_QUEUE in spec.labels:
                _remove_matching(self._metrics[name], spec, {PREEMPTING_CLUSTER_QUEUE: cq})

    def clear_cohort(self, cohort: str) -> None:
        """Remove every series of a Cohort that is gone (its admitted counter too)."""
        for name, spec in METRICS_BY_NAME.items():
            if name.startswith(COHORT_PREFIX):
                _remove_matching(self._metrics[name], spec, {COHORT: cohort})

    # -- LocalQueue -----------------------------------------------------------------------------

    def local_queue_quota_reserved(
        self, namespace: str, name: str, wait_seconds: float, priority_class: str = ""
    ) -> None:
        """A workload of LocalQueue namespace/name got quota after `wait_seconds`."""
        labels = (name, namespace, priority_class, self.replica_role)
        self._metrics["kueue_local_queue_quota_reserved_workloads_total"].labels(*labels).inc()
        self._metrics["kueue_local_queue_quota_reserved_wait_time_seconds"].labels(*labels).observe(
            wait_seconds
        )

    def local_queue_admitted(
        self, namespace: str, name: str, wait_seconds: float, priority_class: str = ""
    ) -> None:
        """A workload of LocalQueue namespace/name was admitted after `wait_seconds`."""
        labels = (name, namespace, priority_class, self.replica_role)
        self._metrics["kueue_local_queue_admitted_workloads_total"].labels(*labels).inc()
        self._metrics["kueue_local_queue_admission_wait_time_seconds"].labels(*labels).observe(wait_seconds)

    def local_queue_admission_checks_wait(
        self, namespace: str, name: str, seconds: float, priority_class: str = ""
    ) -> None:
        """A workload of LocalQueue namespace/name was admitted `seconds` after its quota reservation."""
        labels = (name, namespace, priority_class, self.replica_role)
        self._metrics["kueue_local_queue_admission_checks_wait_time_seconds"].labels(*labels).observe(seconds)

    def local_queue_ready_wait(
        self, namespace: str, name: str, seconds: float, priority_class: str = ""
    ) -> None:
        """A workload of LocalQueue namespace/name got PodsReady `seconds` after creation or requeue."""
        labels = (name, namespace, priority_class, self.replica_role)
        self._metrics["kueue_local_queue_ready_wait_time_seconds"].labels(*labels).observe(seconds)

    def local_queue_admitted_until_ready(
        self, namespace: str, name: str, seconds: float, priority_class: str = ""
    ) -> None:
        """A workload of LocalQueue namespace/name got PodsReady `seconds` after admission."""
        labels = (name, namespace, priority_class, self.replica_role)
        self._metrics["kueue_local_queue_admitted_until_ready_wait_time_seconds"].labels(*labels).observe(
            seconds
        )

    def local_queue_finished(self, namespace: str, name: str, priority_class: str = "") -> None:
        """A workload of LocalQueue namespace/name finished."""
        labels = (name, namespace, priority_class, self.replica_role)
        self._metrics["kueue_local_queue_finished_workloads_total"].labels(*labels).inc()

    def local_queue_evicted(
        self, namespace: str, name: str, reason: str, underlying_cause: str = "", priority_class: str = ""
    ) -> None:
        """A workload of LocalQueue namespace/name was evicted for `reason`."""
        labels = (name, namespace, reason, underlying_cause, priority_class, self.replica_role)
        self._metrics["kueue_local_queue_evicted_workloads_total"].labels(*labels).inc()

    def report_local_queue_pending(self, namespace: str, name: str, active: int, inadmissible: int) -> None:
        """Pending workloads of LocalQueue namespace/name: active and inadmissible."""
        pending = self._metrics["kueue_local_queue_pending_workloads"]
        pending.labels(name, namespace, PENDING_STATUS_ACTIVE, self.replica_role).set(active)
        pending.labels(name, namespace, PENDING_STATUS_INADMISSIBLE, self.replica_role).set(inadmissible)

    def report_local_queue_status(self, namespace: str, name: str, active: bool | str) -> None:
        """The LocalQueue's Active condition (True/False/Unknown, or a bool): 1 on it, 0 on the others."""
        value = ("True" if active else "False") if isinstance(active, bool) else active
        if value not in LQ_ACTIVE_VALUES:
            raise ValueError(f"LocalQueue active must be one of {LQ_ACTIVE_VALUES}, not {value!r}")
        gauge = self._metrics["kueue_local_queue_status"]
        for candidate in LQ_ACTIVE_VALUES:
            gauge.labels(name, namespace, candidate, self.replica_role).set(1 if candidate == value else 0)

    def report_local_queue(
        self,
        namespace: str,
        name: str,
        pending: int,
        reserving: int,
        admitted: int,
        active: bool | str,
        inadmissible: int = 0,
    ) -> None:
        """All LocalQueue gauges at once; `pending` is the total, of which `inadmissible` are set aside."""
        self.report_local_queue_pending(namespace, name, pending - inadmissible, inadmissible)
        self._metrics["kueue_local_queue_reserving_active_workloads"].labels(
            name, namespace, self.replica_role
        ).set(reserving)
        self._metrics["kueue_local_queue_admitted_active_workloads"].labels(
            name, namespace, self.replica_role
        ).set(admitted)
        self.report_local_queue_status(namespace, name, active)

    def report_local_queue_usage(
        self, namespace: str, name: str, flavor: str, resource: str, reserved: float, used: float
    ) -> None:
        """Quota reserved and used by the workloads of LocalQueue namespace/name, in engine units."""
        labels = (name, namespace, flavor, resource, self.replica_role)
        reservation = resource_value(resource, reserved)
        self._metrics["kueue_local_queue_resource_reservation"].labels(*labels).set(reservation)
        self._metrics["kueue_local_queue_resource_usage"].labels(*labels).set(resource_value(resource, used))

    def report_local_queue_afs_usage(
        self, namespace: str, name: str, cluster_queue: str, usage: float
    ) -> None:
        """The LocalQueue's Admission Fair Sharing usage, at each sample of its consumed resources."""
        self._metrics["kueue_local_queue_admission_fair_sharing_usage"].labels(
            name, namespace, cluster_queue, self.replica_role
        ).set(usage)

    def clear_local_queue(self, namespace: str, name: str) -> None:
        """Remove every series of a deleted LocalQueue."""
        match = {LQ_NAME: name, LQ_NAMESPACE: namespace}
        for metric_name, spec in METRICS_BY_NAME.items():
            if LQ_NAME in spec.labels and LQ_NAMESPACE in spec.labels:
                _remove_matching(self._metrics[metric_name], spec, match)

    # -- leader election ------------------------------------------------------------------------

    def set_replica_role(self, role: str) -> None:
        """Label new series with `role` after a leader election; gauges of the old role are dropped."""
        if role not in REPLICA_ROLES:
            raise ValueError(f"replica_role must be one of {REPLICA_ROLES}, not {role!r}")
        if role == self.replica_role:
            return
        old_role, self.replica_role = self.replica_role, role
        for name, spec in METRICS_BY_NAME.items():
            if spec.kind == GAUGE and REPLICA_ROLE in spec.labels:
                _remove_matching(self._metrics[name], spec, {REPLICA_ROLE: old_role})


def _build(spec: MetricDef, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
    if spec.kind == COUNTER:
        return Counter(spec.name, spec.help, spec.labels, registry=registry)
    if spec.kind == GAUGE:
        return Gauge(spec.name, spec.help, spec.labels, registry=registry)
    if spec.kind == HISTOGRAM:
        return Histogram(spec.name, spec.help, spec.labels, registry=registry, buckets=spec.buckets)
    raise ValueError(f"{spec.name}: unknown metric type {spec.kind!r}")


def _remove_matching(metric: Counter | Gauge | Histogram, spec: MetricDef, match: dict[str, str]) -> None:
    """Remove every child whose labels include `match` (client_golang's DeletePartialMatch)."""
    children: set[tuple[str, ...]] = set()
    for family in metric.collect():
        for sample in family.samples:
            if all(sample.labels.get(key) == value for key, value in match.items()):
                children.add(tuple(sample.labels[label] for label in spec.labels))
    for values in children:
        metric.remove(*values)
