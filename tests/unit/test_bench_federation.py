"""bench.federation's pure parts (and bench.prom's, bench.stats's): Prometheus text, histogram
quantiles, percentiles, the recorder, fleet sizing, the targets and the table."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the package bench/, as `python -m bench.<name>` from the root finds it
from bench import federation_result, federation_run, fleet, lws_mix, procfs, prom, stats  # noqa: E402

INF = math.inf

EXPOSITION = """\
# HELP kueue_federation_multikueue_dispatch_stage_seconds Seconds from the previous dispatch stage
# TYPE kueue_federation_multikueue_dispatch_stage_seconds histogram
kueue_federation_multikueue_dispatch_stage_seconds_bucket{le="0.1",stage="dispatched"} 2.0
kueue_federation_multikueue_dispatch_stage_seconds_bucket{le="0.5",stage="dispatched"} 6.0
kueue_federation_multikueue_dispatch_stage_seconds_bucket{le="1.0",stage="dispatched"} 10.0
kueue_federation_multikueue_dispatch_stage_seconds_bucket{le="+Inf",stage="dispatched"} 10.0
kueue_federation_multikueue_dispatch_stage_seconds_count{stage="dispatched"} 10.0
kueue_federation_multikueue_dispatch_stage_seconds_sum{stage="dispatched"} 4.5
kueue_federation_multikueue_dispatch_stage_seconds_bucket{le="0.1",stage="check_ready"} 0.0
kueue_federation_multikueue_dispatch_stage_seconds_bucket{le="+Inf",stage="check_ready"} 0.0
# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 7.0
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 3.0
rest_client_requests_total{code="201",host="127.0.0.1:7443",method="POST"} 5.0
multikueue_workloads_dispatched_total{cluster="worker1",cluster_queue="cq",replica_role="leader"} 4.0
multikueue_workloads_dispatched_total{cluster="worker2",cluster_queue="cq",replica_role="leader"} 6.0
process_start_time_seconds 1.7e+09
odd_metric{msg="a \\"quoted\\", comma\\\\ and\\nnewline",x="1"} 1 1700000000000
"""


# -- Prometheus text ---------------------------------------------------------------------------------


def test_parse_prometheus_text_reads_names_labels_values_and_skips_comments():
    samples = prom.parse_prometheus_text(EXPOSITION)
    names = {s.name for s in samples}
    assert "rest_client_requests_total" in names
    assert not any(s.name.startswith("#") for s in samples)
    start = next(s for s in samples if s.name == "process_start_time_seconds")
    assert start.labels == {} and start.value == 1.7e9
    bucket = next(
        s for s in samples if s.labels.get("le") == "+Inf" and s.labels.get("stage") == "dispatched"
    )
    assert bucket.value == 10.0


def test_parse_prometheus_text_unescapes_label_values_and_ignores_timestamps():
    odd = next(s for s in prom.parse_prometheus_text(EXPOSITION) if s.name == "odd_metric")
    assert odd.labels == {"msg": 'a "quoted", comma\\ and\nnewline', "x": "1"}
    assert odd.value == 1.0


def test_parse_prometheus_text_skips_malformed_lines():
    samples = prom.parse_prometheus_text('good 1\nbad{le="1" 2\nnot_a_number x\n{x="1"} 3\n')
    assert [(s.name, s.value) for s in samples] == [("good", 1.0)]


def test_metric_sum_and_by_label_filter_on_labels():
    samples = prom.parse_prometheus_text(EXPOSITION)
    assert prom.metric_sum(samples, "multikueue_workloads_dispatched_total") == 10.0
    assert prom.metric_sum(samples, "multikueue_workloads_dispatched_total", cluster="worker2") == 6.0
    assert prom.metric_sum(samples, "absent_total") == 0.0
    assert prom.metric_by_label(samples, "rest_client_requests_total", "host") == {
        "127.0.0.1:6443": 10.0,
        "127.0.0.1:7443": 5.0,
    }


def test_counter_delta_counts_a_reset_counter_from_zero():
    before = {"manager": 10.0, "worker1": 50.0}
    after = {"manager": 25.0, "worker1": 4.0, "worker2": 3.0}
    assert prom.counter_delta(before, after) == {"manager": 15.0, "worker1": 4.0, "worker2": 3.0}


# -- histogram quantiles -----------------------------------------------------------------------------


def test_histogram_buckets_are_sorted_and_per_stage():
    samples = prom.parse_prometheus_text(EXPOSITION)
    assert prom.histogram_buckets(samples, federation_run.METRIC_STAGE, stage="dispatched") == [
        (0.1, 2.0),
        (0.5, 6.0),
        (1.0, 10.0),
        (INF, 10.0),
    ]
    assert prom.histogram_buckets(samples, federation_run.METRIC_STAGE, stage="absent") == []


def test_histogram_quantile_interpolates_linearly_inside_the_bucket():
    buckets = [(0.1, 2.0), (0.5, 6.0), (1.0, 10.0), (INF, 10.0)]
    # rank 5 of 10 falls in (0.1, 0.5] holding ranks 3..6: 0.1 + 0.4 * (5 - 2) / 4
    assert prom.histogram_quantile(0.5, buckets) == pytest.approx(0.4)
    # rank 1 in the first bucket, which starts at 0
    assert prom.histogram_quantile(0.1, buckets) == pytest.approx(0.05)
    # rank 9.9 in (0.5, 1]: 0.5 + 0.5 * 3.9 / 4
    assert prom.histogram_quantile(0.99, buckets) == pytest.approx(0.9875)
    assert prom.histogram_quantile(1.0, buckets) == pytest.approx(1.0)


def test_histogram_quantile_in_the_inf_bucket_is_the_largest_finite_bound():
    buckets = [(0.1, 1.0), (1.0, 2.0), (INF, 10.0)]
    assert prom.histogram_quantile(0.99, buckets) == 1.0


def test_histogram_quantile_skips_empty_buckets_to_the_one_holding_the_rank():
    buckets = [(0.1, 0.0), (0.5, 0.0), (1.0, 4.0), (INF, 4.0)]
    assert prom.histogram_quantile(0.5, buckets) == pytest.approx(0.75)


def test_histogram_quantile_without_observations_or_inf_bucket_is_none():
    assert prom.histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None
    assert prom.histogram_quantile(0.5, []) is None
    assert prom.histogram_quantile(0.5, [(0.1, 3.0)]) is None
    with pytest.raises(ValueError):
        prom.histogram_quantile(1.5, [(INF, 1.0)])


def test_buckets_delta_keeps_only_the_observations_between_scrapes():
    before = [(0.1, 2.0), (1.0, 3.0), (INF, 3.0)]
    after = [(0.1, 2.0), (1.0, 7.0), (INF, 8.0)]
    assert prom.buckets_delta(before, after) == [(0.1, 0.0), (1.0, 4.0), (INF, 5.0)]
    assert prom.buckets_delta([], after) == after


def test_histogram_distribution_has_count_mean_and_quantiles():
    buckets = [(0.1, 2.0), (0.5, 6.0), (1.0, 10.0), (INF, 10.0)]
    d = stats.histogram_distribution(buckets, total_seconds=4.5)
    assert d.count == 10 and d.mean == pytest.approx(0.45)
    assert d.p50 == pytest.approx(0.4) and d.p99 == pytest.approx(0.9875)
    assert stats.histogram_distribution([(INF, 0.0)]) == stats.Distribution()


# -- percentiles -------------------------------------------------------------------------------------


def test_percentile_interpolates_between_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert stats.percentile(values, 0.0) == 1.0
    assert stats.percentile(values, 0.5) == 3.0
    assert stats.percentile(values, 1.0) == 5.0
    assert stats.percentile(values, 0.95) == pytest.approx(4.8)
    assert stats.percentile(list(range(1, 101)), 0.99) == pytest.approx(99.01)


def test_percentile_edge_cases():
    assert stats.percentile([], 0.5) is None
    assert stats.percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError):
        stats.percentile([1.0], -0.1)


def test_distribution():
    d = stats.distribution([1.0, 2.0, 3.0, 4.0])
    assert (d.count, d.mean, d.p50, d.max) == (4, 2.5, 2.5, 4.0)
    assert stats.distribution([]) == stats.Distribution()


# -- the recorder ------------------------------------------------------------------------------------


def workload(job: str, *conditions: str) -> dict:
    return {
        "metadata": {
            "name": f"job-{job}-abcde",
            "namespace": "default",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True}],
        },
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def test_recorder_times_submitted_to_admitted_and_ignores_other_jobs():
    rec = federation_result.Recorder(["a", "b"])
    rec.submitted("a", 10.0, {"spec": {"managedBy": federation_run.MANAGED_BY_MULTIKUEUE}}, started=9.9)
    rec.submitted("b", 10.5, {"spec": {}})
    assert rec.observe_workload(workload("other", "Admitted"), 11.0) is None
    rec.observe_workload(workload("a", "QuotaReserved"), 11.0)
    rec.observe_workload(workload("a", "QuotaReserved", "Admitted"), 12.0)
    rec.observe_workload(workload("a", "Admitted", "Finished"), 15.0)  # a later event changes nothing
    a = rec.jobs["a"]
    assert (a.workload_seen, a.admitted, a.finished, a.managed_by) == (
        11.0,
        12.0,
        15.0,
        federation_run.MANAGED_BY_MULTIKUEUE,
    )
    assert rec.jobs["b"].managed_by is None
    assert rec.admitted_count == 1 and rec.done_count == 1 and not rec.all_done()
    # b finished before its admission was seen: done, but without a latency
    rec.observe_workload(workload("b", "Finished"), 13.0)
    assert rec.all_done() and rec.admitted_count == 1
    assert federation_result.latencies(rec.jobs.values()) == [2.0]
    assert federation_result.latencies(rec.jobs.values(), "submitted", start="create_started") == [
        pytest.approx(0.1)
    ]


def test_job_owner_name_needs_a_batch_job_owner():
    assert federation_result.job_owner_name(workload("a")) == "a"
    wl = workload("a")
    wl["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1"
    assert federation_result.job_owner_name(wl) is None
    assert federation_result.job_owner_name({"metadata": {}}) is None


def test_throughput_is_admitted_over_first_submitted_to_last_admitted():
    records = [
        federation_result.JobRecord("a", submitted=100.0, admitted=101.0),
        federation_result.JobRecord("b", submitted=100.5, admitted=104.0),
        federation_result.JobRecord("c", submitted=101.0),
    ]
    assert federation_result.throughput(records) == pytest.approx(2 / 4.0)
    assert federation_result.throughput([federation_result.JobRecord("a", submitted=1.0)]) is None


def test_job_object_and_names():
    names = federation_run.job_names("abc123", 1000)
    assert names[0] == "fb-abc123-000" and names[-1] == "fb-abc123-999" and len(set(names)) == 1000
    job = federation_run.job_object("fb-x-1", "x", keep_running=False, managed_by=False)
    assert job["metadata"]["labels"][fleet.LABEL_QUEUE_NAME] == "user-queue"
    assert job["metadata"]["namespace"] == "default"
    assert job["spec"]["suspend"] is True and "managedBy" not in job["spec"]
    assert job["spec"]["template"]["metadata"] == {}
    requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "100m", "memory": "10Mi"}
    kept = federation_run.job_object("fb-x-1", "x", keep_running=True, managed_by=True)
    assert kept["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert kept["spec"]["template"]["metadata"]["annotations"] == {
        federation_run.KEEP_RUNNING_ANNOTATION: "true"
    }


# -- fleet sizing ------------------------------------------------------------------------------------


def test_node_size_lets_one_worker_fit_every_job():
    size = fleet.node_size(1000, nodes=4)
    assert size == fleet.NodeSize(4, "28", "32Gi", "285")
    assert size.nodes * int(size.cpu) * 1000 >= 1000 * fleet.JOB_CPU_MILLI
    assert size.nodes * int(size.pods) >= 1000
    big = fleet.node_size(10_000, nodes=4)
    assert int(big.cpu) * 4 >= 1000 and int(big.pods) * 4 >= 10_000
    assert int(big.memory.removesuffix("Gi")) * 4 * 1024 >= 10_000 * fleet.JOB_MEMORY_MI


def test_node_size_never_goes_below_localfleets_defaults():
    assert fleet.node_size(10) == fleet.NodeSize(4, "8", "32Gi", "110")
    with pytest.raises(ValueError):
        fleet.node_size(0)


# -- targets and the table ---------------------------------------------------------------------------


def result(**kwargs) -> federation_result.RunResult:
    base = {"mode": "dispatch", "jobs": 1000, "rate_target": 50.0, "clients": 4, "concurrency": 32}
    return federation_result.RunResult(keep_running=False, **{**base, **kwargs})


def by_name(r: federation_result.RunResult) -> dict:
    return {c.name: c for c in federation_result.checks(r)}


def test_checks_apply_only_where_the_targets_are_defined():
    r = result(submitted=1000, throughput_per_s=48.0, to_admitted=stats.Distribution(count=1000, p99=1.5))
    r.manager = procfs.ProcessFigures("manager/manager", 1, peak_rss_mib=200.0)
    checks = by_name(r)
    assert not checks["dispatch throughput"].applies  # capped by --rate 50
    assert checks["p99 submitted -> Admitted"].applies and checks["p99 submitted -> Admitted"].met
    assert not checks["manager peak RSS"].applies
    assert checks["manager peak RSS"].value == pytest.approx(200 * 1024 * 1024 / 1e6)
    assert checks["dispatch throughput"].status.startswith("reference only (NOT met)")

    fast = by_name(result(rate_target=0.0, submitted=1000, throughput_per_s=120.0))
    assert fast["dispatch throughput"].applies and fast["dispatch throughput"].status == "met"
    assert not fast["p99 submitted -> Admitted"].met  # no value: not met

    scale = result(mode="scale-test", jobs=10_000, rate_target=0.0, submitted=10_000)
    scale.manager = procfs.ProcessFigures("manager/manager", 1, peak_rss_mib=290.0)  # 304 MB
    rss = by_name(scale)["manager peak RSS"]
    assert rss.applies and not rss.met and rss.status == "NOT met"


def test_check_limits_are_inclusive_for_min_and_strict_for_max():
    assert federation_result.Check("t", 100.0, 100.0, "min", "Jobs/s").met
    assert not federation_result.Check("p", 2.0, 2.0, "max", "s").met
    assert federation_result.Check("p", 1.99, 2.0, "max", "s").met


def test_table_pads_columns_and_leaves_the_last_one_ragged():
    text = stats.table(
        [("a", "1", "", ""), ("longer name", "22", "< 2 s", "met")], ("figure", "value", "target", "status")
    )
    lines = text.splitlines()
    assert lines[0] == "figure       value  target  status"
    assert lines[1].startswith("-----------  -----  ------  ------")
    assert lines[2] == "a            1"
    assert lines[3] == "longer name  22     < 2 s   met"


def test_format_result_shows_figures_targets_and_status():
    r = result(
        submitted=1000,
        admitted=1000,
        finished=900,
        submission_s=20.0,
        submission_rate=50.0,
        throughput_per_s=49.5,
        to_admitted=stats.Distribution(count=1000, mean=0.9, p50=0.8, p95=1.5, p99=1.9, max=2.4),
        manager_requests=5500.0,
        worker_requests={"worker1": 2700.0, "worker2": None},
        stages={"dispatched": stats.Distribution(count=1000, p50=0.1, p95=0.2, p99=0.3)},
        load_start=[1.0, 1.5, 2.0],
        load_end=[3.0, 2.0, 2.0],
    )
    r.manager = procfs.ProcessFigures(
        "manager/manager", 1, cpu_s=20.0, peak_rss_mib=120.0, rss_start_mib=95.0
    )
    text = federation_result.format_result(r)
    assert "== federation dispatch: 1,000 Jobs, 50 Jobs/s" in text
    lines = {line.split("  ")[0]: line for line in text.splitlines()}
    assert "0.800 / 1.500 / 1.900 s" in lines["submitted -> Admitted p50 / p95 / p99"]
    assert lines["submitted -> Admitted p50 / p95 / p99"].rstrip().endswith("< 2 s          met")
    assert "5.50" in lines["manager API requests per Job: manager cluster"]
    assert "2.70" in lines["manager API requests per Job: worker1"]
    assert "n/a (the manager does not count them)" in lines["manager API requests per Job: worker2"]
    assert "20.0 s (20.00 ms/Job)" in lines["manager CPU (user+sys)"]
    assert "(the start mark: no observations)" in lines["stage quota_reserved p50 / p95 / p99 (n=0)"]
    assert "0.100 / 0.200 / 0.300 s" in lines["stage dispatched p50 / p95 / p99 (n=1,000)"]
    assert "1.00/1.50/2.00 -> 3.00/2.00/2.00 on" in text
    assert "reference only (met)" in lines["manager peak RSS (VmRSS every 0.5 s)"]


def test_fleet_cpu_sums_every_process_and_gives_the_cpu_bound_rate():
    r = result(submitted=100)
    r.cpus = 2
    assert r.fleet_cpu_s is None and r.cpu_bound_jobs_per_s is None
    r.manager = procfs.ProcessFigures("manager/manager", 1, cpu_s=2.0)
    r.agents = {"worker1": procfs.ProcessFigures("worker1/worker-agent", 2, cpu_s=3.0)}
    r.others = {
        "worker1/kube-apiserver": procfs.ProcessFigures("worker1/kube-apiserver", 3, cpu_s=15.0),
        "worker1/etcd": procfs.ProcessFigures("worker1/etcd", 4),  # gone: no figure
    }
    assert r.fleet_cpu_s == 20.0
    assert r.cpu_bound_jobs_per_s == pytest.approx(2 / 0.2)
    text = federation_result.format_result(r)
    assert "20.0 s (200 ms/Job)" in text and "10.0 Jobs/s" in text


def test_to_dict_is_json_ready_with_checks():
    import json

    r = result(submitted=10, throughput_per_s=5.0)
    data = json.loads(json.dumps(r.to_dict()))
    assert data["throughput_per_s"] == 5.0
    assert {c["name"] for c in data["checks"]} == {
        "dispatch throughput",
        "p99 submitted -> Admitted",
        "manager peak RSS",
    }


# -- the LWS mix -------------------------------------------------------------------------------


def lws_workload(owner: str, name: str, cluster: str = "", admitted: bool = True) -> dict:
    return {
        "metadata": {"name": name, "annotations": {lws_mix.ANNOTATION_OWNER_NAME: owner}},
        "status": {
            "clusterName": cluster,
            "conditions": [{"type": "Admitted", "status": "True" if admitted else "False"}],
        },
    }


def test_lws_placed_when_every_group_is_admitted_and_splits_are_caught():
    rec = lws_mix.LwsRecorder(["a", "b"], groups=2)
    rec.submitted("a", 10.0)
    rec.submitted("b", 11.0)
    rec.observe_workload(lws_workload("a", "a-0", "w1"), 12.0)
    rec.observe_workload(lws_workload("a", "a-1", "w1", admitted=False), 12.5)
    assert rec.placed_count == 0
    rec.observe_workload(lws_workload("a", "a-1", "w1"), 13.0)
    rec.observe_workload(lws_workload("b", "b-0", "w1"), 14.0)
    rec.observe_workload(lws_workload("b", "b-1", "w2"), 15.0)
    rec.observe_workload(lws_workload("other", "x-0", "w1"), 15.0)  # not ours: ignored
    assert rec.placed_count == 2
    assert rec.splits == {"b"}
    result = lws_mix.summarize(rec, 10.0)
    assert result.placed == 2 and result.groups_placed == 4
    assert result.groups_per_s == pytest.approx(4 / 5.0)
    assert result.to_placed.max == pytest.approx(4.0)  # b: 11 -> 15
    assert result.workers_used == {"w1": 1}  # b named two workers
    text = lws_mix.format_lws_mix(result)
    assert "LWS split over two workers    1 b" in text
