"""The short differential scenarios (tests/scenarios/*.yaml) against our worker_agent and upstream
Kueue v0.19.2's minimalkueue, or its full kueue binary for fair sharing (built from the Go module if
not cached): no difference but the ones listed in docs/differential.md. The scenarios run together,
one fresh cluster per engine and Configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "tests" / "scenarios").glob("*.yaml"))


# Two batches per engine (the plain scenarios, then fair sharing on upstream's full kueue): about 5
# minutes on a quiet 2-core machine, three times that on a loaded one.
@pytest.mark.timeout(1800)
def test_short_scenarios_decide_as_upstream(tmp_path: Path):
    assert SCENARIOS, "no scenario under tests/scenarios"
    # minimalkueue, and upstream's full kueue for fair-sharing.yaml (minimalkueue has no fair sharing).
    for what, command in (
        ("minimalkueue", ["-m", "bench.engine", "--build-upstream-only"]),
        ("upstream kueue", [str(REPO / "hack" / "localfleet.py"), "build", "--upstream-kueue"]),
    ):
        build = subprocess.run(
            [sys.executable, *command],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert build.returncode == 0, f"building {what} failed:\n{build.stdout}\n{build.stderr}"
    report_path = tmp_path / "report.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.diff_upstream",
            "--together",
            "--allow-listed",
            "--json",
            str(report_path),
            "--work-dir",
            str(tmp_path / "logs"),
            *map(str, SCENARIOS),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert report_path.is_file(), f"no report:\n{run.stdout}\n{run.stderr[-4000:]}"
    report = json.loads(report_path.read_text())
    # One run per Configuration: the plain scenarios together, fair-sharing.yaml apart.
    runs = list(report["scenarios"].values())
    assert len(runs) == 2, list(report["scenarios"])
    for together in runs:
        for engine, result in together["results"].items():
            assert result["error"] is None, f"{engine}: {result['error']}"
            assert not result["timed_out"], f"{engine} never went quiet:\n{run.stdout}"
        unlisted = [d for d in together["differences"] if not d["listed"]]
        assert not unlisted, "differences not listed in docs/differential.md:\n" + run.stdout
    outcomes = sum(len(r["outcomes"]) for together in runs for r in together["results"].values())
    assert report["workloads"] == outcomes // 2
    assert run.stdout.strip().splitlines()[-1].startswith(f"{report['workloads']} workloads, ")
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
