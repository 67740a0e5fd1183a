"""bench.compare's fair accounting (bench/compare_fair.py): Finished counts as admitted, the steady
rate, whole-fleet CPU by kind, repeats folded into medians, and ratios only between complete arms."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench import compare_fair  # noqa: E402


def test_a_job_seen_finished_without_admitted_counts_as_admitted_when_first_seen_so():
    assert compare_fair.admitted_at(3.0, 9.0) == 3.0
    assert compare_fair.admitted_at(None, 9.0) == 9.0
    assert compare_fair.admitted_at(None, None) is None


def test_the_steady_rate_is_taken_between_ten_and_ninety_percent_admitted():
    # 10 Workloads: a slow start (t=0..10) then one a second; 10 % is the 1st, 90 % the 9th.
    times = [10.0, 0.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 100.0]
    assert compare_fair.steady_rate(times, 10) == pytest.approx(8 / 18.0)
    assert compare_fair.steady_rate(times[:8], 10) is None  # 90 % never reached
    assert compare_fair.steady_rate([1.0], 1) is None
    assert compare_fair.admit_all([0.5, 0.0], times, 10) == 100.0
    assert compare_fair.admit_all([0.0], times[:9], 10) is None


def test_fleet_cpu_is_split_by_kind_of_process_and_gives_the_machine_ceiling():
    cpu = {
        "manager/kube-apiserver": 6.0,
        "worker1/kube-apiserver": 4.0,
        "manager/etcd": 2.0,
        "worker1/kube-controller-manager": 1.0,
        "worker1/kube-scheduler": 0.5,
        "worker1/lws-controller": 0.5,
        "worker1/kwok": 1.0,
        "manager/manager": 3.0,
        "worker1/worker-agent": 1.0,
        "manager/upstream-kueue": 1.0,
        "worker2/kwok": None,  # gone before sampling
    }
    out = compare_fair.fleet_cpu(cpu, 10, 2)
    assert out["fleet_cpu_s"] == pytest.approx(20.0)
    assert out["fleet_cpu_ms_per_wl"] == pytest.approx(2000.0)
    assert out["fleet_cpu_ms_per_wl_by_kind"] == pytest.approx(
        {"apiservers": 1000.0, "etcd": 200.0, "controllers": 200.0, "kwok": 100.0, "kueue": 500.0}
    )
    assert out["kueue_cpu_ms_per_wl"] == pytest.approx(500.0)
    assert out["fleet_cpu_ms_per_wl_outside_kueue"] == pytest.approx(1500.0)
    assert out["cpu_ceiling_wl_s"] == pytest.approx(1.0)  # 2 CPUs at 2 s of CPU per Workload


def repeat(throughput: float, complete: bool = True, **more) -> dict:
    return {
        "complete": complete,
        "throughput_wl_s": throughput,
        "p99_admitted_s": 10.0 / throughput,
        "fleet_cpu_ms_per_wl": 1000.0 / throughput,
        "fleet_cpu_ms_per_wl_outside_kueue": 600.0 / throughput,
        "fleet_cpu_ms_per_wl_by_kind": {"apiservers": 600.0 / throughput, "kueue": 400.0 / throughput},
        "cpu_ceiling_wl_s": 2 * throughput,
        "client_budget": "b",
        "binding_limit": "l",
        **more,
    }


def test_repeats_fold_into_medians_and_ranges_over_complete_runs_only():
    arm = compare_fair.fold([repeat(2.0), repeat(4.0), repeat(3.0), repeat(100.0, complete=False)])
    assert not arm["completed"] and arm["complete_repeats"] == 3
    assert arm["throughput_wl_s"] == 3.0 and arm["throughput_wl_s_range"] == [2.0, 4.0]
    assert arm["fleet_cpu_ms_per_wl_by_kind"]["apiservers"] == pytest.approx(200.0)
    assert arm["admit_all_s"] is None and arm["admit_all_s_range"] is None
    assert len(arm["repeats"]) == 4
    assert compare_fair.fold([repeat(2.0), None])["completed"] is False  # a repeat that never ran
    assert compare_fair.fold([repeat(2.0), repeat(4.0)])["throughput_wl_s"] == 3.0
    assert compare_fair.fold([])["completed"] is False


def test_ratios_compare_defaults_and_lifted_arms_and_never_a_truncated_one():
    arms = {
        "ours": compare_fair.fold([repeat(6.0)]),
        "upstream": compare_fair.fold([repeat(2.0)]),
        "ours_lifted": compare_fair.fold([repeat(9.0)]),
        "upstream_tuned": compare_fair.fold([repeat(3.0), repeat(3.0, complete=False)]),
    }
    table = compare_fair.compare(arms)
    assert table["defaults"]["ours"] == "ours" and table["defaults"]["upstream"] == "upstream"
    assert table["defaults"]["throughput_wl_s"] == pytest.approx(3.0)
    assert table["defaults"]["fleet_cpu_ms_per_wl"] == pytest.approx(1 / 3)
    # ours outside its Kueue processes (100 ms) against upstream's whole fleet (500 ms)
    assert table["defaults"][compare_fair.CPU_BOUND] == pytest.approx(0.2)
    assert table["defaults"]["lws_groups_per_s"] is None  # neither has it
    assert table["lifted"] == {
        "ours": "ours_lifted",
        "upstream": "upstream_tuned",
        "skipped": "truncated: upstream_tuned",
    }
    assert "lifted" not in compare_fair.compare({k: v for k, v in arms.items() if k != "ours_lifted"})
    text = compare_fair.format_comparisons(table)
    assert "defaults: ours / upstream" in text and "no ratio, truncated: upstream_tuned" in text
    assert f"{compare_fair.CPU_BOUND}" in text
    report = compare_fair.format_arms(arms)
    assert "upstream_tuned: TRUNCATED (1/2)" in report and "cpu ms/wl: apiservers" in report
    assert "kueue.x-k8s.io / floor 8" in report and "kueue.x-k8s.io / API floor 11" in report
    assert "all_at_once" not in table  # that arm did not run
    arms["ours_all_at_once"] = compare_fair.fold([repeat(12.0)])
    arms["upstream_tuned"] = compare_fair.fold([repeat(3.0)])
    like = compare_fair.compare(arms)["all_at_once"]
    assert (like["ours"], like["upstream"]) == ("ours_all_at_once", "upstream_tuned")
    assert like["throughput_wl_s"] == pytest.approx(4.0)
    assert compare_fair.per_floor(12.0) == 1.5 and compare_fair.per_floor(None) is None
    assert compare_fair.per_floor(13.2, compare_fair.KUEUE_REQUESTS_API_FLOOR_PER_WL) == pytest.approx(1.2)
    json.dumps({"arms": arms, "ratios": table})  # the --json payload serializes


def test_the_no_kueue_floor_gives_each_arm_what_it_spends_above_it_and_the_ratio_of_those():
    def arm(cpu: float, requests: float, running: float) -> dict:
        return compare_fair.fold(
            [repeat(1.0, fleet_cpu_ms_per_wl=cpu, api_requests_per_wl=requests, running_rate_wl_s=running)]
        )

    arms = {
        "ours_lifted": arm(300.0, 70.0, 8.0),
        "upstream_tuned": arm(600.0, 120.0, 4.0),
        "ours": compare_fair.fold([repeat(1.0, complete=False)]),
        "no_kueue": arm(100.0, 20.0, 16.0),
    }
    compare_fair.add_above_floor(arms)
    assert arms["ours_lifted"]["above_floor"]["fleet_cpu_ms_per_wl"] == pytest.approx(200.0)
    assert arms["upstream_tuned"]["above_floor"]["api_requests_per_wl"] == pytest.approx(100.0)
    assert arms["ours_lifted"]["above_floor"]["running_rate_of_floor"] == pytest.approx(0.5)
    assert "above_floor" not in arms["ours"]  # truncated: no figure, so none above the floor
    assert "above_floor" not in arms["no_kueue"]
    lifted = compare_fair.compare(arms)["lifted"]
    assert lifted["fleet_cpu_ms_per_wl"] == pytest.approx(0.5)  # the whole, as before
    assert lifted["above_floor"]["fleet_cpu_ms_per_wl"] == pytest.approx(0.4)  # 200 / 500
    assert lifted["above_floor"]["api_requests_per_wl"] == pytest.approx(0.5)  # 50 / 100
    assert "fleet_cpu_ms_per_wl above no_kueue" in compare_fair.format_arms(arms)
    assert "api_requests_per_wl above no_kueue" in compare_fair.format_comparisons({"lifted": lifted})
    # A floor arm that did not complete gives nothing above it.
    truncated = compare_fair.fold([repeat(1.0, complete=False)])
    arms = {"ours_lifted": arm(300.0, 70.0, 8.0), "no_kueue": truncated}
    compare_fair.add_above_floor(arms)
    assert "above_floor" not in arms["ours_lifted"]


def test_the_no_kueue_arm_creates_the_same_objects_without_a_queue_and_unsuspended():
    from bench.compare_floor import direct
    from bench.federation_run import job_object
    from bench.lws_mix import lws_object

    job = direct(job_object("j", "r", keep_running=False, managed_by=False))
    assert job["spec"]["suspend"] is False and "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    assert job["metadata"]["labels"]["kueue-federation.dev/bench-run"] == "r"
    lws = direct(lws_object("l", "r", 2, 3))
    assert "kueue.x-k8s.io/queue-name" not in lws["metadata"]["labels"] and "suspend" not in lws["spec"]
    assert lws["spec"]["replicas"] == 2
