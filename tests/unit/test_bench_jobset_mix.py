"""bench.jobset_mix's pure parts: the JobSet it submits, what it records from the manager's watches,
and its summary."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the package bench/, as `python -m bench.<name>` from the root finds it
from bench import jobset_mix  # noqa: E402


def _workload(owner: str, admitted: bool, cluster: str = "") -> dict:
    status = {"conditions": [{"type": "Admitted", "status": "True" if admitted else "False"}]}
    if cluster:
        status["clusterName"] = cluster
    return {"metadata": {"ownerReferences": [{"kind": "JobSet", "name": owner}]}, "status": status}


def test_the_jobset_is_the_guides_shape_queued_and_labelled_with_the_run():
    js = jobset_mix.jobset_object("js-1", "abc", workers=3)
    assert js["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "user-queue",
        "kueue-federation.dev/bench-run": "abc",
    }
    jobs = {rj["name"]: rj["template"]["spec"]["parallelism"] for rj in js["spec"]["replicatedJobs"]}
    assert jobs == {"leader": 1, "workers": 3}


def test_admission_and_completion_are_timed_once_and_summarized():
    recorder = jobset_mix.JobSetRecorder(["a", "b", "c"])
    for name, at in (("a", 0.0), ("b", 1.0), ("c", 2.0)):
        recorder.submitted(name, at)
    recorder.observe_workload(_workload("a", False), 0.5)
    recorder.observe_workload(_workload("a", True, "w1"), 2.0)
    recorder.observe_workload(_workload("a", True, "w2"), 9.0)  # later events change nothing
    recorder.observe_workload(_workload("b", True, "w2"), 3.0)
    recorder.observe_workload(_workload("other", True, "w1"), 3.0)  # not of this run
    recorder.observe_jobset(
        {"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Completed", "status": "True"}]}}, 6.0
    )
    result = jobset_mix.summarize(recorder, 0.0, workers=2, rate=10.0)
    assert (result.submitted, result.admitted, result.completed) == (3, 2, 1)
    assert result.placed_per_s == 2 / 3.0
    assert result.workers_used == {"w1": 1, "w2": 1}
    assert result.to_completed.p99 == 6.0
    text = jobset_mix.format_jobset_mix(result)
    assert "Admitted (placed) / Completed 2 / 1 of 3" in text
