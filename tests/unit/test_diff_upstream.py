"""bench.diff_upstream's pure parts: scenario loading, the v1beta2 form for upstream, outcomes,
the comparison and the known-differences table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the package bench/, as `python -m bench.<name>` from the root finds it
from bench import diff_run, diff_scenario, diff_upstream  # noqa: E402

SCENARIO = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ns}
spec: {clusterQueue: cq}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec: {namespaceSelector: {}, cohort: pool}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata:
  name: first
  namespace: ns
  annotations: {scenario.kueue-federation.io/runs-for: "2.5"}
spec: {queueName: lq, podSets: []}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata:
  name: second
  namespace: ns
  annotations: {scenario.kueue-federation.io/after: "1", other: kept}
spec: {queueName: lq, podSets: []}
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_scenario_setup_by_kind_and_workloads_in_file_order(tmp_path):
    sc = diff_scenario.load_scenario(write(tmp_path, SCENARIO))
    assert [o["kind"] for o in sc.setup] == ["Namespace", "ClusterQueue", "LocalQueue"]
    assert [(w.key, w.after_s, w.runs_for_s) for w in sc.workloads] == [
        ("ns/first", 0.0, 2.5),
        ("ns/second", 1.0, None),
    ]
    created = diff_scenario.strip_scenario_annotations(sc.workloads[1].obj)
    assert created["metadata"]["annotations"] == {"other": "kept"}
    assert "annotations" not in diff_scenario.strip_scenario_annotations(sc.workloads[0].obj)["metadata"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "is not one of"),
        ("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: x}\n", "must be"),
        ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: x}\n", "namespace"),
        (
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: x, namespace: n, "
            "annotations: {scenario.kueue-federation.io/after: soon}}\n",
            "not a number",
        ),
        ("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n", "no Workload"),
    ],
)
def test_scenario_mistakes_are_refused_with_the_document(tmp_path, text, message):
    with pytest.raises(diff_scenario.ScenarioError, match=message):
        diff_scenario.load_scenario(write(tmp_path, text))


def test_upstream_form_renames_what_v1beta2_renamed():
    cq = diff_scenario.to_upstream(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "cohort": "pool",
                "admissionChecks": ["ac"],
                "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
            },
        }
    )
    assert cq["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert cq["spec"] == {
        "cohortName": "pool",
        "admissionChecksStrategy": {"admissionChecks": [{"name": "ac"}]},
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
    }
    wl = diff_scenario.to_upstream(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "n"},
            "spec": {
                "priority": 5,
                "priorityClassName": "high",
                "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            },
        }
    )
    assert wl["spec"] == {
        "priority": 5,
        "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    assert diff_scenario.to_upstream(namespace) is namespace


def condition(ctype: str, status: str = "True") -> dict:
    return {"type": ctype, "status": status}


def test_outcome_reads_state_queue_flavors_and_evictions():
    wl = {
        "spec": {},
        "status": {
            "conditions": [condition("QuotaReserved"), condition("Admitted")],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "main", "flavors": {"memory": "big", "cpu": "spot"}},
                    {"name": "aux", "flavors": {"cpu": "on-demand"}},
                ],
            },
            "schedulingStats": {
                "evictions": [
                    {"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 2},
                    {"reason": "Deactivated", "underlyingCause": "", "count": 1},
                ]
            },
        },
    }
    o = diff_run.outcome_of(wl, 1.5)
    assert (o.state, o.cluster_queue, o.flavors, o.evictions) == (
        "Admitted",
        "cq",
        "main: cpu=spot, memory=big; aux: cpu=on-demand",
        "Deactivated x1, Preempted/InClusterQueue x2",
    )
    assert diff_run.outcome_of({"spec": {"active": False}}, None).state == "Inactive"
    assert diff_run.outcome_of(None, None).state == "Missing"


def outcome(at: float | None, state: str = "Admitted") -> object:
    return diff_run.Outcome(state, "cq", "-", "0", at)


def test_order_differs_only_for_clear_inversions():
    ours = {"a": outcome(0.0), "b": outcome(2.0), "c": outcome(2.5)}
    upstream = {"a": outcome(3.5), "b": outcome(1.0), "c": outcome(3.0)}
    # a before b by 2 s on ours, after by 2.5 s upstream; a and c are within 1 s upstream.
    assert diff_upstream.order_inversions(ours, upstream) == {"a", "b"}
    assert diff_upstream.order_inversions(ours, upstream, group=lambda k: k) == set()


def test_compare_lists_fields_and_marks_the_documented_ones(tmp_path):
    sc = diff_scenario.load_scenario(write(tmp_path, SCENARIO, "x.yaml"))
    ours = diff_run.EngineResult("ours", {"ns/first": outcome(0.0), "ns/second": outcome(None, "Pending")})
    upstream = diff_run.EngineResult("upstream", {"ns/first": outcome(0.0), "ns/second": outcome(1.0)})
    listed = {(sc.name, "ns/second", "state"): "on purpose"}
    diffs = diff_upstream.compare(sc, ours, upstream, listed)
    assert [(d.workload, d.field, d.ours, d.upstream, d.listed) for d in diffs] == [
        ("ns/second", "state", "Pending", "Admitted", "on purpose")
    ]
    assert diff_upstream.format_differences(diffs).splitlines()[0].split() == [
        "SCENARIO",
        "WORKLOAD",
        "FIELD",
        "OURS",
        "UPSTREAM",
        "LISTED",
    ]


def test_known_differences_come_from_the_docs_table(tmp_path):
    doc = write(
        tmp_path,
        "# x\n## Known differences\n\n| scenario | workload | field | why |\n|---|---|---|---|\n"
        "| `long/baseline-mini.yaml` | * | evictions | timing |\n| a.yaml | ns/w | order | because |\n"
        "## Other\n| b.yaml | ns/w | state | not this section |\n",
        "differential.md",
    )
    assert diff_upstream.known_differences(doc) == {
        ("long/baseline-mini.yaml", "*", "evictions"): "timing",
        ("a.yaml", "ns/w", "order"): "because",
    }


def test_the_repository_scenarios_load_and_run_together():
    paths = diff_scenario.scenario_paths([str(REPO / "tests" / "scenarios")])
    scenarios = [diff_scenario.load_scenario(p) for p in paths]
    assert {s.name for s in scenarios} >= {"fifo.yaml", "long/baseline-mini.yaml"}
    short = [s for s in scenarios if "/" not in s.name]
    runs = diff_scenario.group_by_config(short)
    assert sum(len(run.workloads) for run in runs) == sum(len(s.workloads) for s in short)
    assert runs[0].origin_of(short[0].workloads[0].key) == short[0].name
    # fair-sharing.yaml runs apart: fair sharing would change every other scenario's decisions.
    assert [run.fair_sharing for run in runs] == [False, True]


def test_scenarios_that_clash_cannot_run_together(tmp_path):
    a = diff_scenario.load_scenario(write(tmp_path, SCENARIO, "a.yaml"))
    b = diff_scenario.load_scenario(
        write(tmp_path, SCENARIO.replace("cohort: pool", "cohort: other"), "b.yaml")
    )
    with pytest.raises(diff_scenario.ScenarioError, match="differs"):
        diff_scenario.merge_scenarios([a, b])


def test_a_pending_workload_s_reason_and_message_are_compared():
    def pending(reason, message):
        return {
            "metadata": {"name": "w", "namespace": "ns"},
            "status": {
                "conditions": [
                    {"type": "QuotaReserved", "status": "False", "reason": reason, "message": message}
                ]
            },
        }

    ours = diff_run.outcome_of(pending("WaitingForQuota", "couldn't assign flavors"), None)
    theirs = diff_run.outcome_of(pending("Pending", "couldn't assign flavors"), None)
    assert ours.state == theirs.state == "Pending"
    assert ours.field("pending") == "WaitingForQuota: couldn't assign flavors"
    assert ours.field("pending") != theirs.field("pending")
    assert diff_run.outcome_of(None, None).field("pending") == "-"


CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing: {enable: true, preemptionStrategies: [LessThanInitialShare]}
---
"""


def test_a_scenario_configuration_reaches_both_engines_in_their_forms(tmp_path):
    sc = diff_scenario.load_scenario(write(tmp_path, CONFIG + SCENARIO))
    assert sc.config == {"fairSharing": {"enable": True, "preemptionStrategies": ["LessThanInitialShare"]}}
    assert sc.fair_sharing
    # Upstream's v1beta2 Configuration has no `enable`: fairSharing present means on.
    assert diff_scenario.upstream_config_fields(sc.config) == {
        "fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]}
    }
    assert diff_scenario.upstream_config_fields({"fairSharing": {"enable": False}}) == {}
    assert diff_scenario.upstream_config_fields({}) == {}
    assert diff_scenario.load_scenario(write(tmp_path, SCENARIO, "plain.yaml")).config == {}
    afs = {"admissionFairSharing": {"usageHalfLifeTime": "1h", "usageSamplingInterval": "1s"}}
    assert diff_scenario.upstream_config_fields(afs) == afs  # the same shape in v1beta2


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n", "must be config.kueue"),
        (
            "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nwaitForPodsReady: {}\n",
            "waitForPodsReady not supported",
        ),
        (
            "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
            "fairSharing: {enable: true, preemptionStrategies: [Sometimes]}\n",
            "preemptionStrategies must be",
        ),
        (
            "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
            "fairSharing: {enable: yes-please}\n",
            "boolean enable",
        ),
        (
            "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
            "admissionFairSharing: {usageHalfLife: 1h}\n",
            "admissionFairSharing must be a mapping of usageHalfLifeTime",
        ),
    ],
)
def test_a_scenario_configuration_is_checked(tmp_path, config, message):
    with pytest.raises(diff_scenario.ScenarioError, match=message):
        diff_scenario.load_scenario(write(tmp_path, config + "---\n" + SCENARIO))


def test_scenarios_with_different_configurations_run_apart(tmp_path):
    plain = diff_scenario.load_scenario(write(tmp_path, SCENARIO, "a.yaml"))
    fair_text = CONFIG + SCENARIO.replace("name: first", "name: third").replace(
        "name: second", "name: fourth"
    )
    fair = diff_scenario.load_scenario(write(tmp_path, fair_text, "b.yaml"))
    runs = diff_scenario.group_by_config([plain, fair])
    assert [(run.name, run.fair_sharing, len(run.workloads)) for run in runs] == [
        ("together-1", False, 2),
        ("together-2", True, 2),
    ]
    with pytest.raises(diff_scenario.ScenarioError, match="same Configuration"):
        diff_scenario.merge_scenarios([plain, fair])
