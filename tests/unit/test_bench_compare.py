"""bench.compare's pure parts (bench/compare.py, bench/compare_summary.py): arguments and engines,
the per-engine summary and its JSON shape, requests by apiserver, the workers' running pods, and the
ours / upstream ratios."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the package bench/, as `python -m bench.<name>` from the root finds it
from bench import compare, compare_summary, federation_result, procfs, prom, stats  # noqa: E402
from localfleet.common import DISPATCHERS  # noqa: E402

REQUIRED_KEYS = {
    "throughput_wl_s",
    "p99_admitted_s",
    "manager_peak_rss_mib",
    "manager_cpu_s",
    "api_requests_per_wl",
}


def test_defaults_are_the_issue_mix_on_three_workers_four_arms_three_repeats():
    args = compare.parse_args([])
    assert (args.jobs, args.lws, args.lws_replicas, args.lws_size, args.workers) == (1000, 200, 2, 3, 3)
    assert args.engines == ["ours", "upstream", "ours_lifted", "upstream_tuned"]
    assert (args.repeat, args.lifted_qps, args.lifted_burst) == (3, 300.0, 500)
    assert compare_summary.workloads_of(args) == 1000 + 200 * 2


def test_short_form_and_engine_selection():
    args = compare.parse_args(["--jobs", "200", "--lws", "40", "--engines", "upstream, ours"])
    assert (args.jobs, args.lws) == (200, 40)
    assert [e.name for e in compare_summary.engines(args)] == ["upstream", "ours"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--engines", "ours,theirs"],
        ["--engines", "ours,ours"],
        ["--engines", ""],
        ["--jobs", "0"],
        ["--lws", "-1"],
        ["--lws-rate", "0"],
        ["--workers", "0"],
        ["--repeat", "0"],
        ["--tuned-qps", "5"],  # gone: upstream_tuned is at the lifted budget of both sides
    ],
)
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        compare.parse_args(argv)
    assert "bench_compare: error" in capsys.readouterr().err


def test_the_lifted_arms_share_one_budget_and_only_upstream_tuned_runs_the_patched_build():
    args = compare.parse_args(["--workers", "2", "--lifted-qps", "1000", "--lifted-burst", "2000"])
    by_name = {e.name: e for e in compare_summary.engines(args)}
    assert by_name["ours"].upstream_clusters == by_name["ours_lifted"].upstream_clusters == ()
    for name in ("upstream", "upstream_tuned"):
        assert by_name[name].upstream_clusters == ("manager", "worker1", "worker2")
    assert (by_name["upstream"].client_qps, by_name["upstream"].client_burst) == (None, None)
    assert (by_name["ours"].client_qps, by_name["ours"].client_burst) == (None, None)
    for name in ("ours_lifted", "upstream_tuned"):
        assert (by_name[name].client_qps, by_name[name].client_burst) == (1000, 2000)
    assert [n for n, e in by_name.items() if e.lifted_workers] == ["upstream_tuned"]
    assert "worker clients client-go's 5 / 10" in by_name["upstream"].client_budget()
    assert "worker clients too (patched build" in by_name["upstream_tuned"].client_budget()
    assert by_name["ours"].client_budget() == "qps 20 / burst 30 per API resource, every client"
    assert "5 qps / 10 burst" in by_name["upstream"].binding_limit()
    assert "CPU" in by_name["ours_lifted"].binding_limit() == by_name["upstream_tuned"].binding_limit()


def test_the_extra_arms_of_ours_differ_from_ours_lifted_in_one_setting_each():
    names = "ours_lifted,ours_all_at_once,ours_warning_events,ours_asyncio"
    by_name = {e.name: e for e in compare_summary.engines(compare.parse_args(["--engines", names]))}
    lifted = vars(by_name.pop("ours_lifted"))
    assert lifted["event_types"] is None and lifted["event_loop"] is None
    changed = {
        name: {k: v for k, v in vars(e).items() if k != "name" and v != lifted[k]}
        for name, e in by_name.items()
    }
    assert changed == {
        "ours_all_at_once": {"dispatcher": "AllAtOnce"},
        "ours_warning_events": {"event_types": "Warning"},
        "ours_asyncio": {"event_loop": "asyncio"},
    }


def samples(text: str) -> list:
    return prom.parse_prometheus_text(text)


def test_requests_are_summed_by_the_apiserver_that_received_them():
    before = {
        "manager/upstream-kueue": samples(
            'rest_client_requests_total{code="200",host="127.0.0.1:1",method="GET"} 10\n'
            'rest_client_requests_total{code="201",host="127.0.0.1:2",method="POST"} 5\n'
        ),
        "worker1/upstream-kueue": samples(
            'rest_client_requests_total{code="200",host="127.0.0.1:2",method="PATCH"} 100\n'
        ),
    }
    after = {
        "manager/upstream-kueue": samples(
            'rest_client_requests_total{code="200",host="127.0.0.1:1",method="GET"} 40\n'
            'rest_client_requests_total{code="201",host="127.0.0.1:2",method="POST"} 25\n'
        ),
        "worker1/upstream-kueue": samples(
            'rest_client_requests_total{code="200",host="127.0.0.1:2",method="PATCH"} 130\n'
        ),
    }
    hosts = {"127.0.0.1:1": "manager", "127.0.0.1:2": "worker1"}
    assert compare_summary.requests_by_cluster(before, after, hosts) == {"manager": 30.0, "worker1": 50.0}
    # a process that restarted (its counter went down) counts from 0; an unknown host keeps its name
    restarted = {"w": samples('rest_client_requests_total{code="200",host="127.0.0.1:9",method="GET"} 3\n')}
    old = {"w": samples('rest_client_requests_total{code="200",host="127.0.0.1:9",method="GET"} 50\n')}
    assert compare_summary.requests_by_cluster(old, restarted, hosts) == {"127.0.0.1:9": 3.0}


def pod(uid: str, phase: str, **labels: str) -> dict:
    return {"metadata": {"uid": uid, "labels": labels}, "status": {"phase": phase}}


def test_running_pods_time_the_first_pod_of_a_job_and_every_pod_of_an_lws():
    pods = compare.RunningPods()
    pods.expect["lws-a"] = 2
    pods.observe(pod("1", "Pending", **{compare.POD_LABEL_JOB: "job-a"}), 1.0)
    pods.observe(pod("1", "Running", **{compare.POD_LABEL_JOB: "job-a"}), 2.0)
    pods.observe(pod("1", "Succeeded", **{compare.POD_LABEL_JOB: "job-a"}), 3.0)  # counted once
    pods.observe(pod("2", "Succeeded", **{compare.POD_LABEL_JOB: "job-b"}), 4.0)  # Running was missed
    pods.observe(pod("3", "Running", **{compare.POD_LABEL_LWS: "lws-a"}), 5.0)
    pods.observe(pod("4", "Running", **{compare.POD_LABEL_LWS: "lws-a"}), 6.0)
    pods.observe(pod("5", "Running"), 7.0)  # no owner
    assert pods.first == {"job-a": 2.0, "job-b": 4.0, "lws-a": 5.0}
    assert pods.full["lws-a"] == 6.0
    assert pods.succeeded == {"job-a": 3.0, "job-b": 4.0}  # when each Job's pod was first seen ended
    assert compare.running_latencies({"job-a": 0.5, "job-c": 1.0}, pods.first) == [1.5]


def figures(**overrides) -> dict:
    args = compare.parse_args(["--jobs", "10", "--lws", "2"])
    engine = compare_summary.engines(args)[0]
    jobs = federation_result.RunResult(
        mode="dispatch", jobs=10, rate_target=50, clients=4, concurrency=100, keep_running=False
    )
    jobs.submitted = jobs.admitted = 10
    jobs.throughput_per_s = 5.0
    jobs.to_admitted = stats.distribution([0.1 * i for i in range(1, 11)])
    processes = {
        "manager/manager": procfs.ProcessFigures("manager/manager", 1, cpu_s=4.0, peak_rss_mib=100.0),
        "manager/worker-agent": procfs.ProcessFigures(
            "manager/worker-agent", 2, cpu_s=1.0, peak_rss_mib=50.0
        ),
        "worker1/worker-agent": procfs.ProcessFigures(
            "worker1/worker-agent", 3, cpu_s=2.0, peak_rss_mib=60.0
        ),
        "manager/kube-apiserver": procfs.ProcessFigures(
            "manager/kube-apiserver", 4, cpu_s=9.0, peak_rss_mib=900.0
        ),
    }
    summary = compare_summary.summarize(
        engine, args, jobs, [1.0, 2.0], None, [], processes, {"manager": 70.0, "worker1": 28.0}
    )
    summary.update(overrides)
    return summary


def test_summary_sums_the_kueue_processes_per_cluster_and_divides_requests_by_workloads():
    s = figures()
    assert REQUIRED_KEYS <= set(s)
    assert s["workloads"] == 14
    assert set(s["processes"]) == {"manager/manager", "manager/worker-agent", "worker1/worker-agent"}
    assert (s["manager_cpu_s"], s["manager_peak_rss_mib"]) == (5.0, 150.0)
    assert (s["workers_cpu_s"], s["workers_peak_rss_mib"]) == (2.0, 60.0)
    assert s["api_requests_per_wl_manager"] == pytest.approx(5.0)
    assert s["api_requests_per_wl_workers"] == pytest.approx(2.0)
    assert s["api_requests_per_wl"] == pytest.approx(7.0)
    assert s["p99_admitted_s"] == pytest.approx(0.991)
    assert s["p50_running_s"] == pytest.approx(1.5)
    assert s["lws_groups_per_s"] is None and s["lws_p99_running_s"] is None


def test_report_names_every_process_and_the_ratios():
    text = compare_summary.format_engine(figures())
    assert "manager/manager: CPU / peak RSS" in text and "worker1/worker-agent" in text
    assert "worker1 apiserver requests per Workload: all / kueue.x-k8s.io" in text and "2.00" in text


def test_apiserver_requests_count_every_client_or_one_group():
    before = {
        "manager": samples(
            'apiserver_request_total{code="200",group="kueue.x-k8s.io",verb="PATCH"} 10\n'
            'apiserver_request_total{code="201",group="batch",resource="jobs",verb="POST"} 4\n'
        )
    }
    after = {
        "manager": samples(
            'apiserver_request_total{code="200",group="kueue.x-k8s.io",verb="PATCH"} 25\n'
            'apiserver_request_total{code="201",group="batch",resource="jobs",verb="POST"} 9\n'
        ),
        "worker1": samples('apiserver_request_total{code="200",group="",resource="pods",verb="GET"} 7\n'),
    }
    assert prom.apiserver_requests(before, after) == {"manager": 20.0, "worker1": 7.0}
    assert prom.apiserver_requests(before, after, "kueue.x-k8s.io") == {"manager": 15.0, "worker1": 0.0}


def test_summary_reports_the_apiserver_source_and_ours_apart():
    s = figures()
    assert s["api_requests_source"].startswith("apiserver_request_total")
    assert s["kueue_client_requests"] == {} and s["api_requests_per_wl_kueue_group"] is None


def test_phase_timeout_is_sized_for_the_slowest_arm_unless_given():
    args = compare.parse_args([])
    assert compare_summary.phase_timeout(args, 200) == 400.0
    assert compare_summary.phase_timeout(args, 80) == 300.0
    assert compare_summary.phase_timeout(args, 5000) == 1800.0
    assert compare_summary.phase_timeout(compare.parse_args(["--timeout", "1200"]), 10) == 1200.0


def test_the_lws_phase_is_skipped_after_a_failed_or_timed_out_jobs_phase():
    args = compare.parse_args(["--jobs", "10"])
    jobs = federation_result.RunResult(
        mode="dispatch", jobs=10, rate_target=50, clients=4, concurrency=100, keep_running=False
    )
    jobs.submitted, jobs.admitted = 10, 10
    assert compare_summary.lws_skip_reason(args, jobs) is None
    assert compare_summary.lws_skip_reason(compare.parse_args(["--lws", "0"]), jobs) == "--lws 0"
    jobs.admitted, jobs.timed_out = 4, True
    assert "6 Jobs were still not Admitted" in compare_summary.lws_skip_reason(args, jobs)
    jobs.error = "boom"
    assert "failed (boom)" in compare_summary.lws_skip_reason(args, jobs)
    assert "LWS mix skipped: x" in compare_summary.format_engine(figures(lws_skipped="x"))
    fair = compare_summary.format_engine(
        figures(
            complete=False,
            admit_all_s=40.0,
            fleet_cpu_ms_per_wl=300.0,
            fleet_cpu_ms_per_wl_above_idle=200.0,
            fleet_cpu_ms_per_wl_by_kind={"apiservers": 150.0, "kueue": 100.0},
            cpu_ceiling_wl_s=6.7,
        )
    )
    assert "TRUNCATED: not every Workload was admitted" in fair
    assert "40.0 s" in fair and "300.0 ms (200.0 ms)" in fair and "apiservers 150.0, kueue 100.0" in fair


def test_apiserver_requests_by_kind_sum_every_cluster_between_two_scrapes():
    def sample(verb, group, resource, value, sub="", code="200"):
        labels = {"verb": verb, "group": group, "resource": resource, "subresource": sub, "code": code}
        return prom.Sample(prom.APISERVER_REQUESTS, labels, value)

    before = {
        "manager": [
            sample("GET", "batch", "jobs", 10),
            sample("PATCH", "kueue.x-k8s.io", "workloads", 5, "status"),
        ],
        "worker1": [sample("GET", "batch", "jobs", 1)],
    }
    after = {
        "manager": [
            sample("GET", "batch", "jobs", 14),
            sample("GET", "batch", "jobs", 2, code="404"),
            sample("PATCH", "kueue.x-k8s.io", "workloads", 9, "status"),
            sample("POST", "", "events", 3),
            prom.Sample(prom.APISERVER_REQUESTS, {"verb": "GET", "resource": ""}, 7),
        ],
        "worker1": [sample("GET", "batch", "jobs", 4)],
    }
    assert prom.apiserver_requests_by_kind(before, after) == {
        "GET batch/jobs": 4 + 2 + 3,
        "PATCH kueue.x-k8s.io/workloads/status": 4,
        "POST core/events": 3,
        "GET nonresource": 7,
    }


def test_the_arms_table_lists_where_requests_go_per_workload():
    from bench import compare_fair

    by_arm = {
        "ours_lifted": {"GET batch/jobs": 3.0, "POST core/events": 1.0},
        "upstream_tuned": {"GET batch/jobs": 0.5, "PATCH kueue.x-k8s.io/workloads/status": 6.0},
    }
    assert compare_fair.top_request_kinds(by_arm, top=2) == [
        "PATCH kueue.x-k8s.io/workloads/status",
        "GET batch/jobs",
    ]
    lines = compare_fair.request_kind_lines(by_arm)
    assert "ours_lifted" in lines[1] and "upstream_tuned" in lines[1]
    row = next(line for line in lines if "GET batch/jobs" in line)
    assert row.split()[-2:] == ["3.00", "0.50"]
    folded = compare_fair.fold(
        [
            {"complete": True, "api_requests_per_wl_by_kind": {"GET batch/jobs": 2.0}},
            {
                "complete": True,
                "api_requests_per_wl_by_kind": {"GET batch/jobs": 4.0, "POST core/events": 1.0},
            },
            {"complete": False, "api_requests_per_wl_by_kind": {"GET batch/jobs": 100.0}},
        ]
    )
    assert folded["api_requests_per_wl_by_kind"] == {"GET batch/jobs": 3.0, "POST core/events": 0.5}


def test_our_arms_run_the_shipped_dispatcher_and_all_at_once_only_on_request():
    assert "ours_all_at_once" not in compare.parse_args([]).engines
    args = compare.parse_args(["--engines", "ours,ours_lifted,ours_all_at_once,upstream_tuned"])
    by_name = {e.name: e for e in compare_summary.engines(args)}
    aao, lifted = by_name["ours_all_at_once"], by_name["ours_lifted"]
    assert aao.upstream_clusters == () and aao.dispatcher == "AllAtOnce"
    assert lifted.dispatcher == by_name["ours"].dispatcher == "LeastLoaded"
    assert by_name["upstream_tuned"].dispatcher is None
    assert (aao.client_qps, aao.client_burst) == (lifted.client_qps, lifted.client_burst)


def test_the_shipped_dispatcher_is_the_one_of_the_deployed_configuration():
    """The bench's `ours` arms run what deploy/manager and the Helm chart ship."""
    manager = yaml.safe_load((REPO / "deploy" / "manager" / "config.yaml").read_text())
    shipped = yaml.safe_load(manager["data"]["manager.yaml"])["multiKueue"]["dispatcherName"]
    values = yaml.safe_load((REPO / "deploy" / "helm" / "kueue-federation" / "values.yaml").read_text())
    assert DISPATCHERS[compare_summary.SHIPPED_DISPATCHER] == shipped
    assert json.dumps(values).count(shipped) == 1


def test_the_no_kueue_arm_runs_no_kueue_and_only_on_request():
    assert "no_kueue" not in compare.parse_args([]).engines
    args = compare.parse_args(["--engines", "no_kueue,ours_lifted"])
    by_name = {e.name: e for e in compare_summary.engines(args)}
    floor = by_name["no_kueue"]
    assert not floor.kueue and floor.upstream_clusters == () and by_name["ours_lifted"].kueue
    assert floor.client_budget() == "none (no Kueue)"
    assert "no Kueue" in floor.binding_limit() and "machine's CPU" in floor.binding_limit()
