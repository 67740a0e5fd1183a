"""bench.engine's pure parts (bench/engine_*.py): the generator's plan, the recorder and the summary
math."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the package bench/, as `python -m bench.<name>` from the root finds it
from bench import engine_plan, engine_procs, engine_report, engine_result, engine_run, fleet, prom, stats  # noqa: E402

# -- the generator's plan ------------------------------------------------------------------------


def test_full_baseline_is_kueues_scheduler_baseline():
    config = engine_plan.baseline_config()
    assert config.is_full_baseline
    assert config.cluster_queue_count == 30
    assert config.workloads_per_queue == 500
    assert config.total_workloads == 15_000
    by_name = {c.name: c for c in config.classes}
    assert by_name["small"] == engine_plan.WorkloadClass("small", 350, 100, 1, 200, 50)
    assert by_name["medium"] == engine_plan.WorkloadClass("medium", 100, 500, 5, 500, 100)
    assert by_name["large"] == engine_plan.WorkloadClass("large", 50, 1200, 20, 1000, 200)
    assert engine_plan.demand_cpu_seconds(config) == pytest.approx(70 + 250 + 1000)


@pytest.mark.parametrize(
    ("scale", "per_class", "total"),
    [(0.1, (35, 10, 5), 1_500), (0.05, (18, 5, 2), 750), (0.001, (1, 1, 1), 90)],
)
def test_scale_shrinks_every_set_but_keeps_at_least_one(scale, per_class, total):
    config = engine_plan.baseline_config(scale)
    assert tuple(c.count for c in config.classes) == per_class
    assert config.total_workloads == total
    assert not config.is_full_baseline


def test_bad_scale_is_refused():
    with pytest.raises(ValueError, match="--scale"):
        engine_plan.baseline_config(0)
    with pytest.raises(ValueError, match="--cohorts"):
        engine_plan.baseline_config(1, cohorts=0)


def test_plan_counts_and_names_follow_upstream():
    config = engine_plan.baseline_config()
    objects = engine_plan.plan_objects(engine_plan.OURS, config)
    assert {k: len(v) for k, v in objects.items()} == {
        "ResourceFlavor": 1,
        "ClusterQueue": 30,
        "Namespace": 30,
        "LocalQueue": 30,
        "Workload": 15_000,
    }
    assert objects["ResourceFlavor"][0]["metadata"]["name"] == "rf"
    cq_names = [cq["metadata"]["name"] for cq in objects["ClusterQueue"]]
    assert cq_names[0] == "cq-0-0-cohort-0"
    assert cq_names[-1] == "cq-0-5-cohort-4"
    assert len(set(cq_names)) == 30
    cohorts = {cq["spec"]["cohort"] for cq in objects["ClusterQueue"]}
    assert cohorts == {f"cohort-{k}" for k in range(5)}
    # One namespace and one LocalQueue per ClusterQueue, all named after it.
    assert [ns["metadata"]["name"] for ns in objects["Namespace"]] == cq_names
    for lq in objects["LocalQueue"]:
        assert lq["metadata"]["name"] == lq["metadata"]["namespace"] == lq["spec"]["clusterQueue"]
    keys = {(w["metadata"]["namespace"], w["metadata"]["name"]) for w in objects["Workload"]}
    assert len(keys) == 15_000
    assert ("cq-0-0-cohort-0", "small-0-349-0") in keys
    assert ("cq-0-0-cohort-0", "large-2-49-0") in keys


def test_cluster_queue_quota_and_preemption():
    config = engine_plan.baseline_config()
    cq = engine_plan.plan_objects(engine_plan.OURS, config)["ClusterQueue"][0]
    assert cq["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    spec = cq["spec"]
    assert spec["namespaceSelector"] == {}
    assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["cpu"]
    (flavor,) = group["flavors"]
    assert flavor == {
        "name": "rf",
        "resources": [{"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}],
    }
    assert cq["metadata"]["labels"][engine_plan.LABEL_CLASS] == "cq"


def test_upstream_objects_use_the_v1beta2_shape():
    config = engine_plan.baseline_config(0.01)
    objects = engine_plan.plan_objects(engine_plan.UPSTREAM, config)
    cq = objects["ClusterQueue"][0]
    assert cq["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert cq["spec"]["cohortName"] == "cohort-0"
    assert "cohort" not in cq["spec"]
    assert all(o["apiVersion"] == "kueue.x-k8s.io/v1beta2" for o in objects["Workload"])
    assert (
        engine_plan.UPSTREAM.workloads.api_path("ns", "w")
        == "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w"
    )


def test_workload_is_bare_with_one_pod_requesting_the_class_cpu():
    config = engine_plan.baseline_config()
    large = next(c for c in config.classes if c.name == "large")
    queue = engine_plan.plan_queues(config)[7]
    wl = engine_plan.workload_object(engine_plan.OURS, queue, large, 2, 3)
    assert wl["metadata"] == {
        "name": "large-2-3-0",
        "namespace": queue.name,
        "labels": {engine_plan.LABEL_RUNNING_MS: "1000", engine_plan.LABEL_CLASS: "large"},
    }
    assert wl["spec"]["queueName"] == queue.name
    assert wl["spec"]["priority"] == 200
    (podset,) = wl["spec"]["podSets"]
    assert podset["name"] == "main" and podset["count"] == 1
    (container,) = podset["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "20"}


# -- quantities, times, counters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        ("20", 20_000),
        ("1500m", 1_500),
        ("0.5", 500),
        (3, 3_000),
        ("1k", 1_000_000),
        ("1Ki", 1_024_000),
        (None, 0),
    ],
)
def test_quantity_milli(value, milli):
    assert engine_result.quantity_milli(value) == milli


def test_quantity_milli_refuses_garbage():
    with pytest.raises(ValueError):
        engine_result.quantity_milli("twenty")


def test_parse_time_is_utc_epoch():
    assert engine_result.parse_time("1970-01-01T00:01:40Z") == 100.0
    assert engine_result.parse_time(None) is None


def test_prometheus_counters_are_summed_over_labels():
    text = "\n".join(
        [
            "# HELP kueue_worker_agent_scheduling_decisions_total decisions",
            "# TYPE kueue_worker_agent_scheduling_decisions_total counter",
            'kueue_worker_agent_scheduling_decisions_total{result="admitted"} 30.0',
            'kueue_worker_agent_scheduling_decisions_total{result="skipped"} 12',
            "kueue_worker_agent_engine_cpu_seconds_total 0.75",
            "kueue_worker_agent_engine_cpu_seconds_created 1.7e9",
            "other_metric 5",
        ]
    )
    counters = prom.parse_prometheus_counters(
        text, (engine_result.METRIC_DECISIONS, engine_result.METRIC_ENGINE_CPU)
    )
    assert counters == {engine_result.METRIC_DECISIONS: 42.0, engine_result.METRIC_ENGINE_CPU: 0.75}
    assert prom.parse_prometheus_counters("", (engine_result.METRIC_DECISIONS,)) == {}


# -- the recorder and the summary math --------------------------------------------------------------


def workload(name, cls, *, created="2026-11-23T10:00:00Z", conditions=(), admission=False):
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "labels": {engine_plan.LABEL_CLASS: cls, engine_plan.LABEL_RUNNING_MS: "200"},
        },
        "status": {
            "conditions": [
                {"type": t, "status": s, "lastTransitionTime": ltt, "reason": "r", "message": ""}
                for t, s, ltt in conditions
            ],
            **({"admission": {"clusterQueue": "cq"}} if admission else {}),
        },
    }


T0 = engine_result.parse_time("2026-11-23T10:00:00Z")


def test_time_to_admission_runner_and_api_clocks():
    rec = engine_result.Recorder()
    rec.created("ns/a", "small", T0 + 0.2, workload("a", "small"))
    rec.observe_workload(workload("a", "small"), T0 + 0.3)
    rec.observe_workload(
        workload("a", "small", conditions=[("Admitted", "True", "2026-11-23T10:00:02Z")], admission=True),
        T0 + 2.7,
    )
    rec.observe_workload(
        workload(
            "a",
            "small",
            conditions=[
                ("Admitted", "True", "2026-11-23T10:00:02Z"),
                ("Finished", "True", "2026-11-23T10:00:03Z"),
            ],
        ),
        T0 + 3.2,
    )
    rec.created("ns/b", "small", T0 + 1.0, workload("b", "small"))
    rec.observe_workload(
        workload("b", "small", conditions=[("Admitted", "True", "2026-11-23T10:00:05Z")], admission=True),
        T0 + 5.0,
    )
    summary = engine_result.summarize_classes(rec.workloads.values())["small"]
    assert summary.count == 2 and summary.admitted == 2
    # Runner clock: (2.7 - 0.2) and (5.0 - 1.0) seconds.
    assert summary.avg_time_to_admission_obs_ms == pytest.approx((2500 + 4000) / 2)
    # API timestamps: 2 s and 5 s after a creationTimestamp of 10:00:00.
    assert summary.avg_time_to_admission_api_ms == pytest.approx(3500)
    assert summary.avg_time_to_finish_obs_ms == pytest.approx(3000)
    assert rec.finished_count() == 1
    assert rec.admissions_count() == 2


def test_eviction_and_readmission_count_the_last_admission():
    rec = engine_result.Recorder()
    rec.created("ns/a", "large", T0)
    admitted = [("Admitted", "True", "2026-11-23T10:00:01Z")]
    rec.observe_workload(workload("a", "large", conditions=admitted, admission=True), T0 + 1)
    evicted = [*admitted, ("Evicted", "True", "2026-11-23T10:00:02Z")]
    rec.observe_workload(workload("a", "large", conditions=evicted, admission=True), T0 + 2)
    cleared = [("Admitted", "False", "2026-11-23T10:00:02Z"), ("Evicted", "True", "2026-11-23T10:00:02Z")]
    rec.observe_workload(workload("a", "large", conditions=cleared), T0 + 2.5)
    readmitted = [("Admitted", "True", "2026-11-23T10:00:06Z"), ("Evicted", "False", "2026-11-23T10:00:06Z")]
    rec.observe_workload(workload("a", "large", conditions=readmitted, admission=True), T0 + 6.5)
    summary = engine_result.summarize_classes(rec.workloads.values())["large"]
    assert summary.evictions == 1
    assert rec.admissions_count() == 2
    assert summary.avg_time_to_admission_obs_ms == pytest.approx(6500)
    assert summary.avg_time_to_admission_api_ms == pytest.approx(6000)


def test_each_eviction_is_logged_with_how_long_the_runner_saw_the_victim_admitted():
    rec = engine_result.Recorder()
    admitted = [("Admitted", "True", "2026-11-23T10:00:01Z")]
    rec.observe_workload(workload("a", "small", conditions=admitted, admission=True), T0 + 1)
    evicted = [*admitted, ("Evicted", "True", "2026-11-23T10:00:02Z")]
    rec.observe_workload(workload("a", "small", conditions=evicted, admission=True), T0 + 1.25)
    rec.observe_workload(workload("a", "small", conditions=evicted, admission=True), T0 + 1.5)  # no new one
    # Evicted before its admission ever reached the runner.
    never_seen_admitted = [("Evicted", "True", "2026-11-23T10:00:03Z")]
    rec.observe_workload(workload("b", "small", conditions=never_seen_admitted), T0 + 3)
    assert [(e.key, e.time, e.held_s, e.reason) for e in rec.evictions] == [
        ("ns/a", T0 + 1.25, pytest.approx(0.25), "r"),
        ("ns/b", T0 + 3, None, "r"),
    ]


def test_the_timeline_has_every_transition_in_order():
    rec = engine_result.Recorder()
    rec.created("ns/a", "medium", T0)
    admitted = [("Admitted", "True", "2026-11-23T10:00:01Z")]
    rec.observe_workload(workload("a", "medium", conditions=admitted, admission=True), T0 + 1)
    rec.observe_workload(workload("a", "medium", conditions=admitted, admission=True), T0 + 1.1)  # no change
    evicted = [*admitted, ("Evicted", "True", "2026-11-23T10:00:02Z")]
    rec.observe_workload(workload("a", "medium", conditions=evicted, admission=True), T0 + 2)
    cleared = [("Admitted", "False", "2026-11-23T10:00:02Z"), ("Evicted", "True", "2026-11-23T10:00:02Z")]
    rec.observe_workload(workload("a", "medium", conditions=cleared), T0 + 2.5)
    readmitted = [("Admitted", "True", "2026-11-23T10:00:03Z")]
    rec.observe_workload(workload("a", "medium", conditions=readmitted, admission=True), T0 + 3)
    done = [*readmitted, ("Finished", "True", "2026-11-23T10:00:04Z")]
    rec.observe_workload(workload("a", "medium", conditions=done, admission=True), T0 + 4)
    assert [(t - T0, what) for t, _, what in rec.timeline] == [
        (0, "created"),
        (1, "admitted"),
        (2, "evicted"),
        (2.5, "released"),
        (3, "admitted"),
        (4, "finished"),
    ]
    assert rec.workloads["ns/a"].updates == 6


def test_apiserver_write_counts_are_summed_by_verb_and_resource():
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter of apiserver requests",
            'apiserver_request_total{code="200",group="kueue.x-k8s.io",resource="workloads",'
            'subresource="status",verb="APPLY",version="v1beta2"} 30',
            'apiserver_request_total{code="409",group="kueue.x-k8s.io",resource="workloads",'
            'subresource="status",verb="APPLY",version="v1beta2"} 2',
            'apiserver_request_total{code="201",group="kueue.x-k8s.io",resource="workloads",'
            'subresource="",verb="POST",version="v1beta2"} 15',
            'apiserver_request_total{code="200",group="kueue.x-k8s.io",resource="workloads",'
            'subresource="",verb="LIST",version="v1beta2"} 4',
            'apiserver_request_duration_seconds_count{resource="workloads",verb="POST"} 15',
        ]
    )
    assert prom.api_write_counts(text) == {"APPLY workloads/status": 32, "POST workloads": 15}


def test_start_is_the_earliest_sign_of_the_object():
    rec = engine_result.Recorder()
    # The watch can deliver the object before the create call returns.
    rec.observe_workload(workload("a", "small"), T0 + 1.0)
    rec.created("ns/a", "small", T0 + 1.4)
    assert rec.workloads["ns/a"].start_obs == T0 + 1.0


def cluster_queue(name, usage, *, nominal="20", pending=0, reserving=0, cls="cq"):
    return {
        "metadata": {"name": name, "labels": {engine_plan.LABEL_CLASS: cls}},
        "spec": {
            "resourceGroups": [
                {"flavors": [{"name": "rf", "resources": [{"name": "cpu", "nominalQuota": nominal}]}]}
            ]
        },
        "status": {
            "flavorsUsage": [{"name": "rf", "resources": [{"name": "cpu", "total": usage}]}],
            "pendingWorkloads": pending,
            "reservingWorkloads": reserving,
        },
    }


def test_usage_integral_matches_upstreams_recorder():
    rec = engine_result.Recorder()
    rec.observe_cluster_queue(cluster_queue("a", "0"), 0.0)
    rec.observe_cluster_queue(cluster_queue("a", "20"), 10.0)  # 20 cpu from t=10 ...
    rec.observe_cluster_queue(cluster_queue("a", "10"), 20.0)  # ... 10 cpu from t=20 ...
    rec.observe_cluster_queue(cluster_queue("a", "0"), 40.0)  # ... to t=40
    rec.observe_cluster_queue(cluster_queue("b", "0"), 0.0)
    rec.observe_cluster_queue(cluster_queue("b", "500m"), 0.0)
    rec.observe_cluster_queue(cluster_queue("b", "0"), 40.0)
    a = rec.cluster_queues["a"]
    assert a.used_milli_seconds == pytest.approx(20_000 * 10 + 10_000 * 20)
    assert a.max_usage_milli == 20_000
    # (400 + 20) cpu*s over 40 s of 40 nominal cpu.
    assert engine_result.cq_usage_pct(rec.cluster_queues.values()) == {
        "cq": pytest.approx(100 * 420 / (40 * 40))
    }


def test_usage_from_runner_seen_admissions_is_independent_of_queue_status():
    rec = engine_result.Recorder()
    rec.observe_cluster_queue(cluster_queue("a", "0"), 0.0)  # nominal 20 cpu; the status never shows usage
    big = workload("w", "large")
    big["spec"] = {
        "podSets": [
            {
                "name": "main",
                "count": 2,
                "template": {
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "5"}}}]}
                },
            }
        ]
    }
    assert engine_result.workload_cpu_milli(big) == 10_000
    admitted = [("Admitted", "True", "2026-11-23T10:00:01Z")]
    rec.observe_workload({**big, "status": {"conditions": []}}, 0.0)
    rec.observe_workload({**workload("w", "large", conditions=admitted), "spec": big["spec"]}, 10.0)
    evicted = [("Admitted", "False", "2026-11-23T10:00:02Z")]
    rec.observe_workload({**workload("w", "large", conditions=evicted), "spec": big["spec"]}, 20.0)
    rec.observe_workload({**workload("w", "large", conditions=admitted), "spec": big["spec"]}, 30.0)
    finished = [*admitted, ("Finished", "True", "2026-11-23T10:00:03Z")]
    rec.observe_workload({**workload("w", "large", conditions=finished), "spec": big["spec"]}, 35.0)
    # Held 10 s + 5 s at 10 cpu = 150 cpu*s, over 40 s of 20 nominal cpu.
    assert rec.workloads["ns/w"].held_until(40.0) == pytest.approx(15.0)
    usage = engine_result.workload_usage_pct(rec.workloads.values(), rec.cluster_queues.values(), 40.0)
    assert usage == pytest.approx(100 * 150 / (20 * 40))
    assert engine_result.cq_usage_pct(rec.cluster_queues.values()) == {"cq": 0.0}
    assert engine_result.workload_usage_pct([], [], 1.0) is None


def test_queues_idle_needs_every_queue_seen_and_empty():
    rec = engine_result.Recorder()
    rec.observe_cluster_queue(cluster_queue("a", "0", pending=3), 0.0)
    assert not rec.queues_idle(["a"])
    rec.observe_cluster_queue(cluster_queue("a", "0", reserving=1), 1.0)
    assert not rec.queues_idle(["a"])
    rec.observe_cluster_queue(cluster_queue("a", "0"), 2.0)
    assert rec.queues_idle(["a"])
    assert not rec.queues_idle(["a", "b"])


def test_finish_result_and_rangespec_checks():
    rec = engine_result.Recorder()
    for i, (cls, admit_after) in enumerate([("small", 100.0), ("medium", 50.0), ("large", 30.0)]):
        name = f"w{i}"
        rec.created(f"ns/{name}", cls, T0)
        conds = [("Admitted", "True", "2026-11-23T10:00:00Z"), ("Finished", "True", "2026-11-23T10:00:00Z")]
        rec.observe_workload(workload(name, cls, conditions=conds), T0 + admit_after)
    rec.observe_cluster_queue(cluster_queue("a", "10"), T0)
    rec.observe_cluster_queue(cluster_queue("a", "0"), T0 + 100)
    result = engine_result.RunResult("test", 1.0, 30, 3, workloads_created=3)
    engine_result.finish_result(
        result,
        rec,
        wall_s=300.0,
        engine_cpu_s=1.5,
        metrics={engine_result.METRIC_DECISIONS: 1000.0, engine_result.METRIC_ENGINE_CPU: 0.25},
    )
    assert result.workloads_finished == 3
    assert result.admissions_per_s == pytest.approx(3 / 300)
    assert result.process_cpu_per_admission_ms == pytest.approx(500)
    assert result.engine_cpu_per_decision_ms == pytest.approx(0.25)
    assert result.cq_usage_pct == {"cq": pytest.approx(50.0)}
    checks = {c.metric: c for c in engine_result.rangespec_checks(result)}
    assert checks["wall time"].passed and checks["wall time"].limit == 425
    assert checks["avg time to admission, large"].value == pytest.approx(30)
    assert not checks["avg time to admission, large"].passed  # limit 23 s
    assert checks["avg time to admission, medium"].passed  # 50 <= 90
    assert checks["avg time to admission, small"].passed  # 100 <= 260
    assert checks["ClusterQueue usage, class cq (CQ status)"].passed  # 50 >= 50
    assert "FAIL" in engine_report.format_checks(result)
    assert (
        "n/a"
        not in engine_report.format_result(result)
        .split("engine CPU per scheduling decision")[1]
        .splitlines()[0]
    )


def test_timeout_or_missing_figures_fail_their_check():
    result = engine_result.RunResult("test", 1.0, 30, 15_000, wall_s=600.0, timed_out=True)
    checks = engine_result.rangespec_checks(result)
    assert all(not c.passed for c in checks)
    assert "n/a" in engine_report.format_result(result)


def test_comparison_prints_ratios():
    ours = engine_result.RunResult("ours", 1.0, 30, 15_000, wall_s=400.0, admissions_per_s=40.0)
    upstream = engine_result.RunResult("upstream", 1.0, 30, 15_000, wall_s=200.0, admissions_per_s=80.0)
    assert stats.ratio(400.0, 200.0) == 2.0
    assert stats.ratio(1.0, None) is None and stats.ratio(1.0, 0.0) is None
    table = engine_report.format_comparison(ours, upstream)
    wall_line = next(line for line in table.splitlines() if line.strip().startswith("wall time"))
    assert "2.00 x" in wall_line


def test_set_condition_keeps_transition_time_when_status_is_unchanged():
    conditions = [{"type": "Admitted", "status": "False", "lastTransitionTime": "old", "reason": "x"}]
    engine_run.set_condition(conditions, "Admitted", "False", "NoReservation", "m", "new", {"generation": 2})
    assert conditions[0]["lastTransitionTime"] == "old"
    assert conditions[0]["reason"] == "NoReservation"
    engine_run.set_condition(
        conditions, "QuotaReserved", "False", "Pending", "Evicted by the test runner", "new", {}
    )
    assert conditions[1] == {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Pending",
        "message": "Evicted by the test runner",
        "lastTransitionTime": "new",
        "observedGeneration": 1,
    }


def test_agent_config_is_accepted_by_the_agents_loader(tmp_path):
    from kueue_domain.config import load_config

    path = engine_procs.write_agent_config(tmp_path / "c.yaml", 18080, 18081)
    config = load_config(path)
    assert config.qps == 50 and config.burst == 100
    assert config.leader_elect is False
    assert config.metrics_bind_address == "127.0.0.1:18080"
    assert config.health_probe_bind_address == "127.0.0.1:18081"


# -- the benchmark's cluster: `localfleet up --workers 0` ---------------------------------------------


def test_localfleet_workers_zero_plans_a_manager_cluster_only(tmp_path):
    lf = fleet.load_localfleet()
    bins = lf.Binaries(lf.read_versions())
    up = lf.FleetUp(lf.FleetOptions(workers=0, run_dir=tmp_path / "fleet"), bins)
    assert [(c.name, c.role) for c in up.clusters] == [("manager", "manager")]


def test_localfleet_refuses_negative_workers(tmp_path, capsys):
    lf = fleet.load_localfleet()
    assert lf.main(["--dir", str(tmp_path / "fleet"), "up", "--workers", "-1"]) == 1
    assert "--workers must be 0" in capsys.readouterr().err
    assert not (tmp_path / "fleet").exists()


def test_upstream_verbosity_becomes_minimalkueues_zap_level(tmp_path):
    quiet = engine_procs.minimalkueue_engine(tmp_path, tmp_path / "kc", tmp_path / "mk")
    chatty = engine_procs.minimalkueue_engine(tmp_path, tmp_path / "kc", tmp_path / "mk", verbosity=2)
    assert not any(a.startswith("--zap-log-level") for a in quiet.cmd)
    assert chatty.cmd[-1] == "--zap-log-level=2"
