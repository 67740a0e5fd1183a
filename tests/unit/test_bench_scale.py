"""bench.scale's pure parts: arguments, the series plan, points from a run's result, the
flatness and RSS targets, the table, and the plot files (with a tiny fake series)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the package bench/, as `python -m bench.<name>` from the root finds it
from bench import federation_result, fleet, plots, procfs, scale, scale_series, stats  # noqa: E402


def point(workers: int, workloads: int, cpu_s: float, rss: float = 120.0, calls: float = 4.0, **kw):
    """A successful configuration whose costs grow with `cpu_s` (manager CPU seconds in total)."""
    return scale_series.SeriesPoint(
        workers=workers,
        workloads=workloads,
        submitted=workloads,
        admitted=workloads,
        throughput_per_s=20.0,
        p50_s=1.0,
        p95_s=2.0,
        p99_s=3.0,
        manager_cpu_s=cpu_s,
        manager_peak_rss_mib=rss,
        manager_requests=calls * workloads,
        manager_to_workers_requests=2.0 * workloads,
        worker_agents_requests=4.0 * workloads,
        latencies_s=[0.5 + i / workloads for i in range(min(workloads, 50))],
        **kw,
    )


def test_defaults_are_the_issues_series():
    args = scale.parse_args([])
    assert args.workers == [1, 3, 10, 20]
    assert args.workloads == [1000, 5000, 10000]
    assert (args.base_workers, args.base_workloads) == (3, 1000)
    assert args.rate == 0 and not args.full_fleet


def test_bench_args_select_a_subset_and_k_means_thousands():
    args = scale.parse_args(["--workers", "1,3", "--workloads", "1k,5k"])
    assert args.workers == [1, 3] and args.workloads == [1000, 5000]
    assert scale_series.plan_series(
        args.workers, args.workloads, args.base_workers, args.base_workloads, False
    ) == [
        (1, 1000),
        (3, 1000),
        (3, 5000),
    ]


def test_the_base_worker_count_falls_back_to_the_first_one_run():
    args = scale.parse_args(["--workers", "10,20"])
    assert args.base_workers == 10


@pytest.mark.parametrize(
    "argv",
    [["--workers", "21"], ["--workers", "0"], ["--workloads", "x"], ["--workers", ""], ["--rate", "-1"]],
)
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        scale.parse_args(argv)
    assert "bench_scale: error" in capsys.readouterr().err


def test_the_plan_runs_two_curves_cheapest_first_or_the_grid():
    assert scale_series.plan_series([1, 3, 10, 20], [1000, 5000, 10000], 3, 1000, grid=False) == [
        (1, 1000),
        (3, 1000),
        (10, 1000),
        (20, 1000),
        (3, 5000),
        (3, 10000),
    ]
    assert len(scale_series.plan_series([1, 3], [1000, 5000], 3, 1000, grid=True)) == 4


def test_a_point_takes_the_managers_and_the_workers_figures_from_the_run():
    result = federation_result.RunResult(
        mode="dispatch", jobs=10, rate_target=0, clients=4, concurrency=100, keep_running=False
    )
    result.submitted = result.admitted = 10
    result.throughput_per_s = 5.0
    result.to_admitted = stats.distribution([1.0, 2.0, 3.0])
    result.manager_requests = 40.0
    result.worker_requests = {"worker1": 15.0, "worker2": None}
    result.agent_requests = {"manager": 50.0, "worker1": 30.0, "worker2": 10.0}
    result.manager = procfs.ProcessFigures("manager/manager", 1, cpu_s=0.5, peak_rss_mib=100.0)
    result.others = {
        "manager/kube-apiserver": procfs.ProcessFigures(
            "manager/kube-apiserver", 2, cpu_s=3.0, peak_rss_mib=400.0
        ),
        "worker1/kube-apiserver": procfs.ProcessFigures(
            "worker1/kube-apiserver", 3, cpu_s=1.0, peak_rss_mib=300.0
        ),
    }
    p = scale_series.point_from_result(2, 10, result, [1.0, 2.0, 3.0])
    assert p.ok
    assert p.manager_cpu_ms_per_workload == pytest.approx(50.0)
    assert p.manager_api_per_workload == pytest.approx(4.0)
    # On the workers: the manager's 15 (worker2 not counted) plus the agents' 40, not the manager cluster's.
    assert p.worker_api_per_workload == pytest.approx(5.5)
    assert p.worker_api_per_workload_per_worker == pytest.approx(2.75)
    assert p.fleet_peak_rss_mib == pytest.approx(800.0)
    assert p.apiserver_peak_rss_mib == pytest.approx(400.0)
    assert p.p99_s == pytest.approx(stats.percentile([1.0, 2.0, 3.0], 0.99))


def test_cost_per_workload_flat_within_1_5x_is_met_over_the_whole_target_range():
    points = [point(3, 1000, 10.0), point(3, 5000, 55.0), point(3, 10000, 140.0)]
    check = scale_series.flatness(points, "workloads", 3, "manager_cpu_ms_per_workload", "manager CPU")
    assert (check.low, check.high) == (1000, 10000)
    assert check.ratio == pytest.approx(1.4)
    assert check.covers_target and check.met


def test_a_cost_that_grows_more_than_1_5x_is_not_met():
    points = [point(3, 1000, 10.0, calls=4.0), point(20, 1000, 30.0, calls=4.0), point(1, 1000, 1.0)]
    check = scale_series.flatness(points, "workers", 1000, "manager_cpu_ms_per_workload", "manager CPU")
    # 1 worker is outside the target range (3 -> 20).
    assert (check.low, check.high, check.ratio) == (3, 20, pytest.approx(3.0))
    assert not check.met and "NOT within" in check.status


def test_a_partial_range_is_reported_as_such_and_failed_runs_are_left_out():
    failed = scale_series.SeriesPoint(3, 10000, error="fleet did not start")
    points = [point(3, 1000, 10.0), point(3, 5000, 50.0), failed]
    check = scale_series.flatness(points, "workloads", 3, "manager_cpu_ms_per_workload", "manager CPU")
    assert (check.low, check.high) == (1000, 5000)
    assert not check.covers_target and not check.met
    assert "target range not run" in check.status
    alone = scale_series.flatness([point(3, 1000, 10.0)], "workloads", 3, "manager_cpu_ms_per_workload", "x")
    assert alone.ratio is None and "fewer than 2 points" in alone.status


def test_the_rss_target_is_judged_at_10k_workloads_only():
    mb, verdict = scale_series.rss_check([point(3, 1000, 1.0, rss=100.0), point(3, 10000, 1.0, rss=250.0)])
    assert mb == pytest.approx(250.0 * 1024 * 1024 / 1e6)
    assert verdict == "met at 10,000 Workloads"
    mb, verdict = scale_series.rss_check([point(3, 5000, 1.0, rss=400.0)])
    assert verdict.startswith("NOT met at 5,000 Workloads only")


def test_the_table_has_a_row_per_configuration_and_says_which_failed():
    text = scale_series.series_table(
        [point(3, 1000, 1.0), scale_series.SeriesPoint(20, 1000, timed_out=True)]
    )
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert "(timed out)" in lines[3]


def test_a_series_survives_json(tmp_path):
    path = tmp_path / "series.json"
    points = [point(1, 1000, 1.0), point(3, 1000, 2.0)]
    scale_series.save_series(path, points, scale.parse_args(["--workers", "1,3"]))
    loaded, args = scale_series.load_series(path)
    assert loaded == points
    assert args["workers"] == [1, 3]


def test_a_saved_series_holds_no_path_of_this_machine(tmp_path):
    """Series go into docs/img: the default plots directory is kept relative to the repository, and
    the fleet prefix, work directory and JSON path of the run are left out."""
    path = tmp_path / "series.json"
    argv = ["--workers", "1", "--work-dir", str(tmp_path / "w"), "--json", str(path)]
    scale_series.save_series(path, [point(1, 1000, 1.0)], scale.parse_args(argv))
    saved = json.loads(path.read_text())["args"]
    assert saved["plots_dir"] == "docs/img"
    assert not {"fleet_prefix", "work_dir", "json", "from_json"} & set(saved)
    assert str(tmp_path) not in path.read_text()
    elsewhere = scale.parse_args([*argv, "--plots-dir", str(tmp_path / "plots")])
    scale_series.save_series(path, [point(1, 1000, 1.0)], elsewhere)
    assert "plots_dir" not in json.loads(path.read_text())["args"]


def test_plots_are_written_for_a_tiny_series(tmp_path):
    pytest.importorskip("matplotlib")  # the `bench` extra: `make bench-scale` installs it
    points = [
        point(1, 1000, 1.0),
        point(3, 1000, 2.0),
        point(10, 1000, 3.0),
        point(3, 5000, 11.0),
        scale_series.SeriesPoint(20, 1000, error="x"),
    ]
    written = plots.write_plots(points, tmp_path, base_workers=3, base_workloads=1000)
    assert [p.name for p in written] == [
        scale_series.PLOT_FILES["latency"],
        scale_series.PLOT_FILES["workers"],
        scale_series.PLOT_FILES["workloads"],
    ]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # One point is not a curve: no scaling plot for it.
    assert plots.plot_scaling(points[:1], "workers", 1000, tmp_path / "one.png") is None


def test_saved_series_merge_and_a_rerun_replaces_its_configuration():
    first = [point(1, 1000, 1.0), point(3, 1000, 2.0)]
    second = [point(3, 1000, 9.0), point(3, 5000, 5.0)]
    merged = scale_series.merge_series([first, second])
    assert [(p.workers, p.workloads) for p in merged] == [(1, 1000), (3, 1000), (3, 5000)]
    assert merged[1].manager_cpu_s == 9.0


def test_a_manager_restart_is_read_from_its_supervisor_and_shown(tmp_path):
    status = tmp_path / "manager.status.json"
    status.write_text('{"pid": 7, "restarts": 1, "state": "running"}')
    up = fleet.Fleet(tmp_path, owned=False)
    up.state = {"processes": [{"component": "manager", "status": str(status)}]}
    assert scale.manager_restarts(up) == 1
    restarted = point(10, 1000, 1.0, manager_restarts=1)
    assert "(manager restarted 1x)" in scale_series.series_table([restarted])
