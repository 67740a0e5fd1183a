"""kueue_workload_creation_latency_seconds (MetricForWorkloadCreationLatency): a job's creation to
its Workload's, by job kind, only for jobs at generation 1, as upstream's jobframework records it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from worker_agent.integrations.framework import record_creation_latency
from worker_agent.metrics import Metrics

NAME = "kueue_workload_creation_latency_seconds"


def job(kind: str, created: str, generation: int | None = 1) -> dict:
    meta = {"name": "j", "namespace": "ns", "creationTimestamp": created}
    if generation is not None:
        meta["generation"] = generation
    return {"kind": kind, "metadata": meta}


def workload(created: str) -> dict:
    return {"metadata": {"name": "wl", "namespace": "ns", "creationTimestamp": created}}


def text(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_the_latency_is_observed_per_job_kind():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    record_creation_latency(metrics, job("Job", "2026-01-01T00:00:00Z"), workload("2026-01-01T00:00:02Z"))
    record_creation_latency(
        metrics, job("JobSet", "2026-01-01T00:00:00Z", None), workload("2026-01-01T00:00:00Z")
    )
    out = text(registry)
    assert f'{NAME}_count{{job_kind="Job",replica_role="standalone"}} 1.0' in out
    assert f'{NAME}_sum{{job_kind="Job",replica_role="standalone"}} 2.0' in out
    assert f'{NAME}_bucket{{job_kind="Job",le="1.28",replica_role="standalone"}} 0.0' in out
    assert f'{NAME}_bucket{{job_kind="Job",le="2.56",replica_role="standalone"}} 1.0' in out
    assert f'{NAME}_bucket{{job_kind="JobSet",le="0.01",replica_role="standalone"}} 1.0' in out


def test_a_job_past_generation_1_is_not_timed():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    record_creation_latency(
        metrics, job("Job", "2026-01-01T00:00:00Z", generation=2), workload("2026-01-01T00:05:00Z")
    )
    assert f"{NAME}_count" not in text(registry)


def test_gate_off_exports_no_such_metric():
    registry = CollectorRegistry()
    metrics = Metrics(registry, workload_creation_latency=False)
    record_creation_latency(metrics, job("Job", "2026-01-01T00:00:00Z"), workload("2026-01-01T00:00:01Z"))
    assert NAME not in text(registry)
    assert "kueue_admission_attempts_total" in text(registry)
    record_creation_latency(None, job("Job", "2026-01-01T00:00:00Z"), workload("2026-01-01T00:00:01Z"))
