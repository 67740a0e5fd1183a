"""worker_agent.metrics: Kueue v0.19's metric names, types, labels and buckets, on a caller's registry,
and the helpers the controllers call, observed through the exported text."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kueue_domain.metrics import ClientRequestsCollector
from worker_agent import metrics as m
from worker_agent.metrics import Metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# Exported by ClientRequestsCollector, not defined in worker_agent.metrics.METRICS.
COLLECTED = {"kueue_worker_agent_api_requests_total": ("counter", ["client", "method", "resource", "code"])}

CQ_PC = ["cluster_queue", "priority_class", "replica_role"]
CQ_RESOURCE = ["cohort", "cluster_queue", "flavor", "resource", "replica_role"]
LQ = ["name", "namespace", "replica_role"]
LQ_PC = ["name", "namespace", "priority_class", "replica_role"]
LQ_RESOURCE = ["name", "namespace", "flavor", "resource", "replica_role"]

# Upstream Kueue v0.19 (pkg/metrics): name -> (type, label names in order).
EXPECTED = {
    "kueue_admission_attempts_total": ("counter", ["result", "replica_role"]),
    "kueue_admission_attempt_duration_seconds": ("histogram", ["result", "replica_role"]),
    "kueue_admission_cycle_preemption_skips": ("gauge", ["cluster_queue", "replica_role"]),
    "kueue_pending_workloads": ("gauge", ["cluster_queue", "status", "replica_role"]),
    "kueue_reserving_active_workloads": ("gauge", ["cluster_queue", "replica_role"]),
    "kueue_admitted_active_workloads": ("gauge", ["cluster_queue", "replica_role"]),
    "kueue_cluster_queue_status": ("gauge", ["cluster_queue", "status", "replica_role"]),
    "kueue_quota_reserved_workloads_total": ("counter", CQ_PC),
    "kueue_quota_reserved_wait_time_seconds": ("histogram", CQ_PC),
    "kueue_admitted_workloads_total": ("counter", CQ_PC),
    "kueue_admission_wait_time_seconds": ("histogram", CQ_PC),
    "kueue_admission_checks_wait_time_seconds": ("histogram", CQ_PC),
    "kueue_ready_wait_time_seconds": ("histogram", CQ_PC),
    "kueue_admitted_until_ready_wait_time_seconds": ("histogram", CQ_PC),
    "kueue_finished_workloads_total": ("counter", CQ_PC),
    "kueue_evicted_workloads_total": (
        "counter",
        ["cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"],
    ),
    "kueue_evicted_workloads_once_total": (
        "counter",
        ["cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"],
    ),
    "kueue_pods_ready_to_evicted_time_seconds": (
        "histogram",
        ["cluster_queue", "reason", "underlying_cause", "replica_role"],
    ),
    "kueue_preempted_workloads_total": ("counter", ["preempting_cluster_queue", "reason", "replica_role"]),
    "kueue_cluster_queue_resource_reservation": ("gauge", CQ_RESOURCE),
    "kueue_cluster_queue_resource_usage": ("gauge", CQ_RESOURCE),
    "kueue_cluster_queue_nominal_quota": ("gauge", CQ_RESOURCE),
    "kueue_cluster_queue_borrowing_limit": ("gauge", CQ_RESOURCE),
    "kueue_cluster_queue_lending_limit": ("gauge", CQ_RESOURCE),
    "kueue_cluster_queue_weighted_share": ("gauge", ["cluster_queue", "cohort", "replica_role"]),
    "kueue_cohort_weighted_share": ("gauge", ["cohort", "replica_role"]),
    "kueue_cohort_subtree_quota": ("gauge", ["cohort", "flavor", "resource", "replica_role"]),
    "kueue_cohort_subtree_resource_reservations": ("gauge", ["cohort", "flavor", "resource", "replica_role"]),
    "kueue_cohort_subtree_admitted_workloads_total": (
        "counter",
        ["cohort", "priority_class", "replica_role"],
    ),
    "kueue_cohort_subtree_admitted_active_workloads": ("gauge", ["cohort", "replica_role"]),
    "kueue_cohort_info": ("gauge", ["cohort", "parent_cohort", "root_cohort", "replica_role"]),
    "kueue_cluster_queue_info": ("gauge", ["cluster_queue", "parent_cohort", "root_cohort", "replica_role"]),
    "kueue_workload_creation_latency_seconds": ("histogram", ["job_kind", "replica_role"]),
    "kueue_local_queue_pending_workloads": ("gauge", ["name", "namespace", "status", "replica_role"]),
    "kueue_local_queue_reserving_active_workloads": ("gauge", LQ),
    "kueue_local_queue_admitted_active_workloads": ("gauge", LQ),
    "kueue_local_queue_status": ("gauge", ["name", "namespace", "active", "replica_role"]),
    "kueue_local_queue_quota_reserved_workloads_total": ("counter", LQ_PC),
    "kueue_local_queue_quota_reserved_wait_time_seconds": ("histogram", LQ_PC),
    "kueue_local_queue_admitted_workloads_total": ("counter", LQ_PC),
    "kueue_local_queue_admission_wait_time_seconds": ("histogram", LQ_PC),
    "kueue_local_queue_admission_checks_wait_time_seconds": ("histogram", LQ_PC),
    "kueue_local_queue_ready_wait_time_seconds": ("histogram", LQ_PC),
    "kueue_local_queue_admitted_until_ready_wait_time_seconds": ("histogram", LQ_PC),
    "kueue_local_queue_finished_workloads_total": ("counter", LQ_PC),
    "kueue_local_queue_evicted_workloads_total": (
        "counter",
        ["name", "namespace", "reason", "underlying_cause", "priority_class", "replica_role"],
    ),
    "kueue_local_queue_resource_reservation": ("gauge", LQ_RESOURCE),
    "kueue_local_queue_resource_usage": ("gauge", LQ_RESOURCE),
    "kueue_local_queue_admission_fair_sharing_usage": (
        "gauge",
        ["name", "namespace", "cluster_queue", "replica_role"],
    ),
    "kueue_worker_agent_scheduling_cycles_total": ("counter", []),
    "kueue_worker_agent_scheduling_decisions_total": ("counter", []),
    "kueue_worker_agent_engine_cpu_seconds_total": ("counter", []),
}

# Kueue's generateExponentialBuckets(n): 1, then 2.5 doubling.
BUCKETS_14 = [1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240]
BUCKETS_16 = [*BUCKETS_14, 20480, 40960]
# prometheus.ExponentialBuckets(0.01, 2, 11): kueue_workload_creation_latency_seconds.
CREATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24]
GO_DEF_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Metrics:
    return Metrics(registry)


def exported(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value, parsed from the exported text."""
    out = {}
    for family in text_string_to_metric_families(exported(registry)):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(registry: CollectorRegistry, sample_name: str, /, **labels: str) -> float | None:
    """One sample's value (replica_role defaults to standalone), or None when it is not exported."""
    labels.setdefault("replica_role", "standalone")
    return samples(registry).get((sample_name, frozenset(labels.items())))


def series_with(registry: CollectorRegistry, **labels: str) -> list[str]:
    return sorted(
        name
        for (name, sample_labels), _ in samples(registry).items()
        if set(labels.items()) <= set(sample_labels)
    )


def families_with(registry: CollectorRegistry, **labels: str) -> set[str]:
    """Names of the metrics with at least one series carrying `labels`."""
    names = set()
    for family in text_string_to_metric_families(exported(registry)):
        if any(set(labels.items()) <= set(sample.labels.items()) for sample in family.samples):
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def bucket_bounds(registry: CollectorRegistry, name: str) -> list[float]:
    bounds = {float(dict(lbls)["le"]) for (n, lbls), _ in samples(registry).items() if n == f"{name}_bucket"}
    return sorted(b for b in bounds if b != math.inf)


# ---------------------------------------------------------------------------------------------
# Definitions


def test_every_metric_has_the_upstream_name_type_and_labels():
    assert {d.name: (d.kind, list(d.labels)) for d in m.METRICS} == EXPECTED


def test_exported_types_and_help(registry: CollectorRegistry, metrics: Metrics):
    text = exported(registry)
    for name, (kind, _) in EXPECTED.items():
        assert f"# TYPE {name} {kind}\n" in text, name
        assert re.search(rf"^# HELP {name} \S", text, re.M), name


def test_histogram_buckets_are_upstreams(registry: CollectorRegistry, metrics: Metrics):
    assert list(m.exponential_buckets(14)) == BUCKETS_14
    metrics.admission_attempt("success", 0.01)
    metrics.quota_reserved("cq", 1)
    metrics.admitted("cq", 1)
    metrics.admission_checks_wait("cq", 1)
    metrics.local_queue_admitted("ns", "lq", 1)
    metrics.workload_created("Job", 0.3)
    assert bucket_bounds(registry, "kueue_admission_attempt_duration_seconds") == GO_DEF_BUCKETS
    assert bucket_bounds(registry, "kueue_workload_creation_latency_seconds") == CREATION_BUCKETS
    assert bucket_bounds(registry, "kueue_quota_reserved_wait_time_seconds") == BUCKETS_14
    assert bucket_bounds(registry, "kueue_admission_checks_wait_time_seconds") == BUCKETS_14
    assert bucket_bounds(registry, "kueue_admission_wait_time_seconds") == BUCKETS_16
    assert bucket_bounds(registry, "kueue_local_queue_admission_wait_time_seconds") == BUCKETS_14
    for definition in m.METRICS:
        assert (definition.kind == "histogram") == (definition.buckets is not None), definition.name


def test_metrics_live_on_the_callers_registry_only():
    first, second = CollectorRegistry(), CollectorRegistry()
    Metrics(first).admission_attempt("success", 0.1)
    Metrics(second)
    assert value(first, "kueue_admission_attempts_total", result="success") == 1
    assert value(second, "kueue_admission_attempts_total", result="success") is None
    assert "kueue_admission_attempts_total" not in generate_latest(REGISTRY).decode()


def test_no_created_series_are_exported(registry: CollectorRegistry, metrics: Metrics):
    metrics.admitted("cq", 1)
    metrics.evicted("cq", "Preempted")
    assert "_created" not in exported(registry)


def test_unknown_role_or_status_is_refused(registry: CollectorRegistry, metrics: Metrics):
    with pytest.raises(ValueError, match="replica_role"):
        Metrics(CollectorRegistry(), replica_role="primary")
    with pytest.raises(ValueError, match="pending"):
        metrics.report_cluster_queue_status("cq", "stopped")
    with pytest.raises(ValueError, match="True"):
        metrics.report_local_queue_status("ns", "lq", "yes")


# ---------------------------------------------------------------------------------------------
# Helpers change what is exported


def test_admission_attempts_and_engine_counters(registry: CollectorRegistry, metrics: Metrics):
    metrics.admission_attempt(m.ADMISSION_RESULT_SUCCESS, 0.02)
    metrics.admission_attempt(m.ADMISSION_RESULT_SUCCESS, 0.03)
    metrics.admission_attempt(m.ADMISSION_RESULT_INADMISSIBLE, 0.5)
    assert value(registry, "kueue_admission_attempts_total", result="success") == 2
    assert value(registry, "kueue_admission_attempts_total", result="inadmissible") == 1
    assert value(registry, "kueue_admission_attempt_duration_seconds_sum", result="success") == pytest.approx(
        0.05
    )
    assert (
        value(registry, "kueue_admission_attempt_duration_seconds_bucket", result="inadmissible", le="0.25")
        == 0
    )

    metrics.scheduling_cycle(3, 0.25)
    metrics.scheduling_cycle(0, 0.5)
    assert samples(registry)[("kueue_worker_agent_scheduling_cycles_total", frozenset())] == 2
    assert samples(registry)[("kueue_worker_agent_scheduling_decisions_total", frozenset())] == 3
    assert samples(registry)[("kueue_worker_agent_engine_cpu_seconds_total", frozenset())] == 0.75


def test_quota_reserved_admitted_and_waits(registry: CollectorRegistry, metrics: Metrics):
    metrics.quota_reserved("cq-a", 12.0)
    metrics.quota_reserved("cq-a", 3.0, priority_class="high")
    metrics.admitted("cq-a", 30.0, priority_class="high")
    metrics.admission_checks_wait("cq-a", 27.0, priority_class="high")
    metrics.ready_wait("cq-a", 40.0)
    metrics.admitted_until_ready("cq-a", 10.0)
    metrics.finished("cq-a")
    cq = {"cluster_queue": "cq-a"}
    assert value(registry, "kueue_quota_reserved_workloads_total", **cq, priority_class="") == 1
    assert value(registry, "kueue_quota_reserved_workloads_total", **cq, priority_class="high") == 1
    assert value(registry, "kueue_quota_reserved_wait_time_seconds_sum", **cq, priority_class="") == 12
    assert (
        value(registry, "kueue_quota_reserved_wait_time_seconds_bucket", **cq, priority_class="", le="10.0")
        == 0
    )
    assert (
        value(registry, "kueue_quota_reserved_wait_time_seconds_bucket", **cq, priority_class="", le="20.0")
        == 1
    )
    assert value(registry, "kueue_admitted_workloads_total", **cq, priority_class="high") == 1
    assert value(registry, "kueue_admission_wait_time_seconds_count", **cq, priority_class="high") == 1
    assert value(registry, "kueue_admission_checks_wait_time_seconds_sum", **cq, priority_class="high") == 27
    assert value(registry, "kueue_ready_wait_time_seconds_sum", **cq, priority_class="") == 40
    assert value(registry, "kueue_admitted_until_ready_wait_time_seconds_sum", **cq, priority_class="") == 10
    assert value(registry, "kueue_finished_workloads_total", **cq, priority_class="") == 1


def test_evictions_and_preemptions(registry: CollectorRegistry, metrics: Metrics):
    metrics.evicted("cq-a", "Preempted", "")
    metrics.evicted("cq-a", "PodsReadyTimeout", "WaitForStart", priority_class="low")
    metrics.evicted_once("cq-a", "Preempted")
    metrics.pods_ready_to_evicted("cq-a", 90.0, "Preempted")
    metrics.preempted("cq-b", "InCohortReclamation")
    evicted = "kueue_evicted_workloads_total"
    assert (
        value(
            registry,
            evicted,
            cluster_queue="cq-a",
            reason="Preempted",
            underlying_cause="",
            priority_class="",
        )
        == 1
    )
    assert (
        value(
            registry,
            evicted,
            cluster_queue="cq-a",
            reason="PodsReadyTimeout",
            underlying_cause="WaitForStart",
            priority_class="low",
        )
        == 1
    )
    assert (
        value(
            registry,
            "kueue_evicted_workloads_once_total",
            cluster_queue="cq-a",
            reason="Preempted",
            underlying_cause="",
            priority_class="",
        )
        == 1
    )
    assert (
        value(
            registry,
            "kueue_pods_ready_to_evicted_time_seconds_sum",
            cluster_queue="cq-a",
            reason="Preempted",
            underlying_cause="",
        )
        == 90
    )
    assert (
        value(
            registry,
            "kueue_preempted_workloads_total",
            preempting_cluster_queue="cq-b",
            reason="InCohortReclamation",
        )
        == 1
    )


def test_pending_cache_and_status_gauges(registry: CollectorRegistry, metrics: Metrics):
    metrics.report_pending("cq-a", 4, 1)
    metrics.report_reserving_admitted("cq-a", 3, 2)
    metrics.report_preemption_skips("cq-a", 2)
    assert value(registry, "kueue_pending_workloads", cluster_queue="cq-a", status="active") == 4
    assert value(registry, "kueue_pending_workloads", cluster_queue="cq-a", status="inadmissible") == 1
    assert value(registry, "kueue_reserving_active_workloads", cluster_queue="cq-a") == 3
    assert value(registry, "kueue_admitted_active_workloads", cluster_queue="cq-a") == 2
    assert value(registry, "kueue_admission_cycle_preemption_skips", cluster_queue="cq-a") == 2

    metrics.report_cluster_queue_status("cq-a", m.CQ_STATUS_PENDING)
    metrics.report_cluster_queue_status("cq-a", m.CQ_STATUS_ACTIVE)
    statuses = {
        status: value(registry, "kueue_cluster_queue_status", cluster_queue="cq-a", status=status)
        for status in ("pending", "active", "terminating")
    }
    assert statuses == {"pending": 0, "active": 1, "terminating": 0}


def test_quotas_and_usage_in_kueue_units(registry: CollectorRegistry, metrics: Metrics):
    metrics.report_cluster_queue_quotas("team", "cq-a", "on-demand", "cpu", 9000, None, 1500)
    metrics.report_cluster_queue_quotas("team", "cq-a", "on-demand", "memory", 2**30, 2**29, None)
    metrics.report_cluster_queue_usage("team", "cq-a", "on-demand", "cpu", 2500, 500)
    cpu = {"cohort": "team", "cluster_queue": "cq-a", "flavor": "on-demand", "resource": "cpu"}
    memory = {**cpu, "resource": "memory"}
    assert value(registry, "kueue_cluster_queue_nominal_quota", **cpu) == 9
    assert value(registry, "kueue_cluster_queue_borrowing_limit", **cpu) == math.inf
    assert value(registry, "kueue_cluster_queue_lending_limit", **cpu) == 1.5
    assert value(registry, "kueue_cluster_queue_nominal_quota", **memory) == 2**30
    assert value(registry, "kueue_cluster_queue_borrowing_limit", **memory) == 2**29
    assert value(registry, "kueue_cluster_queue_lending_limit", **memory) == math.inf
    assert value(registry, "kueue_cluster_queue_resource_reservation", **cpu) == 2.5
    assert value(registry, "kueue_cluster_queue_resource_usage", **cpu) == 0.5
    assert 'kueue_cluster_queue_borrowing_limit{cluster_queue="cq-a"' in exported(registry)

    metrics.clear_cluster_queue_flavor("cq-a", "on-demand", "cpu")
    assert value(registry, "kueue_cluster_queue_nominal_quota", **cpu) is None
    assert value(registry, "kueue_cluster_queue_nominal_quota", **memory) == 2**30
    metrics.clear_cluster_queue_flavor("cq-a", "on-demand")
    assert series_with(registry, flavor="on-demand") == []


def test_weighted_shares(registry: CollectorRegistry, metrics: Metrics):
    metrics.report_weighted_share("cq-a", "team", 250)
    metrics.report_weighted_share("cq-b", "team", math.nan)
    metrics.report_cohort_weighted_share("team", 125)
    assert value(registry, "kueue_cluster_queue_weighted_share", cluster_queue="cq-a", cohort="team") == 250
    assert math.isnan(
        value(registry, "kueue_cluster_queue_weighted_share", cluster_queue="cq-b", cohort="team")
    )
    assert value(registry, "kueue_cohort_weighted_share", cohort="team") == 125
    metrics.clear_cohort("team")
    assert value(registry, "kueue_cohort_weighted_share", cohort="team") is None


def test_local_queue_helpers(registry: CollectorRegistry, metrics: Metrics):
    lq = {"name": "user-queue", "namespace": "team-a"}
    metrics.report_local_queue("team-a", "user-queue", 5, 2, 1, True, inadmissible=2)
    assert value(registry, "kueue_local_queue_pending_workloads", **lq, status="active") == 3
    assert value(registry, "kueue_local_queue_pending_workloads", **lq, status="inadmissible") == 2
    assert value(registry, "kueue_local_queue_reserving_active_workloads", **lq) == 2
    assert value(registry, "kueue_local_queue_admitted_active_workloads", **lq) == 1
    active = {
        a: value(registry, "kueue_local_queue_status", **lq, active=a) for a in ("True", "False", "Unknown")
    }
    assert active == {"True": 1, "False": 0, "Unknown": 0}
    metrics.report_local_queue("team-a", "user-queue", 0, 0, 0, False)
    assert value(registry, "kueue_local_queue_status", **lq, active="False") == 1
    assert value(registry, "kueue_local_queue_pending_workloads", **lq, status="inadmissible") == 0
    metrics.report_local_queue_status("team-a", "user-queue", "Unknown")
    assert value(registry, "kueue_local_queue_status", **lq, active="Unknown") == 1

    metrics.local_queue_quota_reserved("team-a", "user-queue", 4.0)
    metrics.local_queue_admitted("team-a", "user-queue", 6.0, priority_class="high")
    metrics.local_queue_admission_checks_wait("team-a", "user-queue", 2.0, priority_class="high")
    metrics.local_queue_ready_wait("team-a", "user-queue", 8.0)
    metrics.local_queue_admitted_until_ready("team-a", "user-queue", 2.0)
    metrics.local_queue_finished("team-a", "user-queue")
    metrics.local_queue_evicted("team-a", "user-queue", "Preempted")
    metrics.report_local_queue_usage("team-a", "user-queue", "on-demand", "cpu", 1500, 500)
    assert value(registry, "kueue_local_queue_quota_reserved_workloads_total", **lq, priority_class="") == 1
    assert (
        value(registry, "kueue_local_queue_quota_reserved_wait_time_seconds_sum", **lq, priority_class="")
        == 4
    )
    assert value(registry, "kueue_local_queue_admitted_workloads_total", **lq, priority_class="high") == 1
    assert (
        value(registry, "kueue_local_queue_admission_wait_time_seconds_sum", **lq, priority_class="high") == 6
    )
    assert (
        value(
            registry, "kueue_local_queue_admission_checks_wait_time_seconds_sum", **lq, priority_class="high"
        )
        == 2
    )
    assert value(registry, "kueue_local_queue_ready_wait_time_seconds_sum", **lq, priority_class="") == 8
    assert (
        value(
            registry, "kueue_local_queue_admitted_until_ready_wait_time_seconds_sum", **lq, priority_class=""
        )
        == 2
    )
    assert value(registry, "kueue_local_queue_finished_workloads_total", **lq, priority_class="") == 1
    assert (
        value(
            registry,
            "kueue_local_queue_evicted_workloads_total",
            **lq,
            reason="Preempted",
            underlying_cause="",
            priority_class="",
        )
        == 1
    )
    usage = {**lq, "flavor": "on-demand", "resource": "cpu"}
    assert value(registry, "kueue_local_queue_resource_reservation", **usage) == 1.5
    assert value(registry, "kueue_local_queue_resource_usage", **usage) == 0.5


# ---------------------------------------------------------------------------------------------
# Removing the series of deleted queues


def fill_cluster_queue(metrics: Metrics, cq: str) -> None:
    metrics.report_pending(cq, 1, 1)
    metrics.report_reserving_admitted(cq, 1, 1)
    metrics.report_cluster_queue_status(cq, "active")
    metrics.report_preemption_skips(cq, 1)
    metrics.report_cluster_queue_quotas("team", cq, "f", "cpu", 1000, 1000, 1000)
    metrics.report_cluster_queue_usage("team", cq, "f", "cpu", 500, 500)
    metrics.report_weighted_share(cq, "team", 1)
    metrics.quota_reserved(cq, 1)
    metrics.admitted(cq, 1)
    metrics.admission_checks_wait(cq, 1)
    metrics.ready_wait(cq, 1)
    metrics.admitted_until_ready(cq, 1)
    metrics.finished(cq)
    metrics.evicted(cq, "Preempted")
    metrics.evicted_once(cq, "Preempted")
    metrics.pods_ready_to_evicted(cq, 1, "Preempted")
    metrics.preempted(cq, "InClusterQueue")
    metrics.report_cluster_queue_info(cq, "team", "team")
    metrics.report_local_queue_afs_usage("ns", "lq", cq, 1.5)


def test_clear_cluster_queue_removes_all_its_series(registry: CollectorRegistry, metrics: Metrics):
    fill_cluster_queue(metrics, "doomed")
    fill_cluster_queue(metrics, "kept")
    assert families_with(registry, cluster_queue="doomed") == {
        d.name for d in m.METRICS if "cluster_queue" in d.labels
    }
    assert families_with(registry, preempting_cluster_queue="doomed") == {"kueue_preempted_workloads_total"}

    metrics.clear_cluster_queue("doomed")
    assert series_with(registry, cluster_queue="doomed") == []
    assert series_with(registry, preempting_cluster_queue="doomed") == []
    assert value(registry, "kueue_pending_workloads", cluster_queue="kept", status="active") == 1
    kept_preemptions = {"preempting_cluster_queue": "kept", "reason": "InClusterQueue"}
    assert value(registry, "kueue_preempted_workloads_total", **kept_preemptions) == 1
    assert families_with(registry, cluster_queue="kept") == {
        d.name for d in m.METRICS if "cluster_queue" in d.labels
    }
    # A recreated ClusterQueue starts from zero.
    metrics.admitted("doomed", 1)
    assert value(registry, "kueue_admitted_workloads_total", cluster_queue="doomed", priority_class="") == 1


def fill_local_queue(metrics: Metrics, namespace: str, name: str) -> None:
    metrics.report_local_queue(namespace, name, 2, 1, 1, True, inadmissible=1)
    metrics.report_local_queue_usage(namespace, name, "f", "cpu", 1000, 1000)
    metrics.local_queue_quota_reserved(namespace, name, 1)
    metrics.local_queue_admitted(namespace, name, 1)
    metrics.local_queue_admission_checks_wait(namespace, name, 1)
    metrics.local_queue_ready_wait(namespace, name, 1)
    metrics.local_queue_admitted_until_ready(namespace, name, 1)
    metrics.local_queue_finished(namespace, name)
    metrics.local_queue_evicted(namespace, name, "Preempted")
    metrics.report_local_queue_afs_usage(namespace, name, "cq", 0.25)


def test_clear_local_queue_removes_only_that_queues_series(registry: CollectorRegistry, metrics: Metrics):
    fill_local_queue(metrics, "team-a", "user-queue")
    fill_local_queue(metrics, "team-b", "user-queue")  # same name, another namespace
    fill_local_queue(metrics, "team-a", "other-queue")
    before = len(series_with(registry, namespace="team-b"))
    local_queue_metrics = {d.name for d in m.METRICS if "namespace" in d.labels}
    assert families_with(registry, namespace="team-a", name="user-queue") == local_queue_metrics

    metrics.clear_local_queue("team-a", "user-queue")
    assert series_with(registry, namespace="team-a", name="user-queue") == []
    assert len(series_with(registry, namespace="team-b")) == before
    other = {"name": "other-queue", "namespace": "team-a"}
    assert value(registry, "kueue_local_queue_reserving_active_workloads", **other) == 1


def test_a_new_replica_role_drops_the_old_roles_gauges(registry: CollectorRegistry):
    metrics = Metrics(registry, replica_role=m.REPLICA_ROLE_FOLLOWER)
    metrics.report_pending("cq-a", 2, 0)
    metrics.admission_attempt("success", 0.1)
    metrics.set_replica_role(m.REPLICA_ROLE_LEADER)
    assert families_with(registry, replica_role="follower") == {
        "kueue_admission_attempts_total",
        "kueue_admission_attempt_duration_seconds",
    }
    metrics.report_pending("cq-a", 3, 0)
    assert (
        value(
            registry, "kueue_pending_workloads", cluster_queue="cq-a", status="active", replica_role="leader"
        )
        == 3
    )
    with pytest.raises(ValueError):
        metrics.set_replica_role("primary")


# ---------------------------------------------------------------------------------------------
# docs/metrics.md


def test_docs_table_lists_every_metric_with_its_type_and_labels():
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`kueue_"):
            labels = re.findall(r"`(\w+)`", cells[2])
            rows[cells[0].strip("`")] = (cells[1].lower(), labels)
    assert rows == EXPECTED | COLLECTED


def test_client_requests_are_exported_per_client_and_with_client_go_labels():
    class FakeClient:  # only what the collector reads: the host and the request counters
        def __init__(self, host, counts):
            self.host, self.request_counts = host, counts

    main = FakeClient("https://127.0.0.1:6443", {("PATCH", "workloads/status", "200"): 3})
    main.request_counts[("PATCH", "workloads/status", "409")] = 1
    events = FakeClient("https://127.0.0.1:6443", {("POST", "events", "201"): 2})
    registry = CollectorRegistry()
    registry.register(ClientRequestsCollector({"main": main, "events": events}))
    got = samples(registry)
    ours = "kueue_worker_agent_api_requests_total"
    assert (
        got[
            (
                ours,
                frozenset(
                    {
                        "client": "main",
                        "method": "PATCH",
                        "resource": "workloads/status",
                        "code": "409",
                    }.items()
                ),
            )
        ]
        == 1
    )
    assert (
        got[
            (
                ours,
                frozenset(
                    {"client": "events", "method": "POST", "resource": "events", "code": "201"}.items()
                ),
            )
        ]
        == 2
    )
    rest = "rest_client_requests_total"
    host = {"host": "127.0.0.1:6443"}
    assert got[(rest, frozenset({**host, "code": "200", "method": "PATCH"}.items()))] == 3
    assert got[(rest, frozenset({**host, "code": "201", "method": "POST"}.items()))] == 2
    # One client registered under two names is counted once.
    registry = CollectorRegistry()
    registry.register(ClientRequestsCollector({"main": main, "events": main}))
    assert samples(registry)[(rest, frozenset({**host, "code": "200", "method": "PATCH"}.items()))] == 3


def test_local_queue_metrics_gate_off_exports_no_local_queue_series():
    """LocalQueueMetrics=false: upstream registers no kueue_local_queue_* metric."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, local_queue_metrics=False)
    metrics.local_queue_admitted("ns", "lq", 1.0)
    metrics.report_local_queue_status("ns", "lq", True)
    metrics.admission_attempt("success", 0.1)
    names = {family.name for family in registry.collect()}
    assert "kueue_admission_attempts" in names
    assert not [name for name in names if name.startswith("kueue_local_queue_")]
