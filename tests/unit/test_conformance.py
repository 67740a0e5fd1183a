"""The conformance harness's pure parts: the spec table, the skip patterns, the JUnit accounting and the
summary line, the kind-style kubeconfig and stand-ins, and the agnhost-like pod behaviour of the fleet."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from conformance import environment as envmod
from conformance import report, specs
from localfleet import agnhost

# ginkgo.It (and table entries) of KUEUE_VERSION, per family (`--ginkgo.dry-run` of each suite).
UPSTREAM_SPEC_COUNT = {specs.MULTIKUEUE: 38, specs.SINGLECLUSTER: 102, specs.SEQUENTIAL: 51}


def test_the_table_names_every_upstream_spec_once_with_a_reason_for_each_that_does_not_apply():
    for family, count in UPSTREAM_SPEC_COUNT.items():
        assert sum(specs.family(s.suite) == family for s in specs.SPECS) == count, family
    assert len({(s.suite, s.text) for s in specs.SPECS}) == len(specs.SPECS)
    assert {s.suite for s in specs.SPECS} == set(specs.SUITES)
    assert all(s.reason.strip() == s.reason for s in specs.SPECS)
    assert any(s.applies for s in specs.SPECS) and any(not s.applies for s in specs.SPECS)


@pytest.mark.parametrize("suite", specs.SUITES)
def test_a_skip_pattern_matches_exactly_the_specs_that_do_not_apply(suite):
    pattern = specs.skip_pattern(suite)
    for spec in specs.of_suite(suite):
        full_text = f"MultiKueue when Some container {spec.text}"
        matched = bool(pattern) and re.search(pattern, full_text) is not None
        assert matched == (not spec.applies), spec.text


def test_a_skip_pattern_escapes_regex_characters():
    # "(same worker)" and "kueue.x-k8s.io/priority-class" carry regex characters.
    pattern = specs.skip_pattern("baseline", (specs.Spec("baseline", "admitted (same worker)", "why"),))
    assert re.search(pattern, "X admitted (same worker)")
    assert not re.search(pattern, "X admitted same worker")


def test_find_takes_the_longest_spec_text_that_ends_the_case_name():
    table = (specs.Spec("s", "worker if admitted"), specs.Spec("s", "a job on worker if admitted"))
    assert specs.find("s", "MultiKueue Should run a job on worker if admitted", table) == table[1]
    assert specs.find("s", "Something else", table) is None


CASE = (
    '<testcase name="[It] MultiKueue when {ctx} {spec}" classname="x" status="{status}" time="9">'
    "{body}</testcase>"
)
JUNIT = "\n".join(
    [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<testsuites tests="4" failures="1"><testsuite name="Baseline" tests="4" failures="1">',
        '<testcase name="[SynchronizedBeforeSuite]" classname="x" status="passed" time="1"></testcase>',
        CASE.format(
            ctx="Creating a multikueue integration workload",
            spec="Should run a job on worker if admitted",
            status="passed",
            body="",
        ),
        CASE.format(
            ctx="Priority class mutation",
            spec="Should keep workload priority event if job reconcile [area:multikueue]",
            status="failed",
            body='<failure message="Timed out after 45s.&#xA;Expected 100 to equal 300">trace</failure>',
        ),
        CASE.format(
            ctx="Creating a multikueue integration workload",
            spec="Should create a pod on worker if admitted",
            status="skipped",
            body='<skipped message="skipped"></skipped>',
        ),
        "</testsuite></testsuites>",
    ]
)


def test_results_read_from_junit_count_passed_failed_not_applicable_and_suites_not_run():
    table = (
        specs.Spec("baseline", "Should run a job on worker if admitted"),
        specs.Spec("baseline", "Should keep workload priority event if job reconcile"),
        specs.Spec("baseline", "Should create a pod on worker if admitted", "plain Pods are not dispatched"),
        specs.Spec("baseline", "Should never have run"),
        specs.Spec("extended", "Should run a jobSet on worker if admitted"),
    )
    res = report.results({"baseline": report.parse_junit(JUNIT)}, table)
    outcomes = [(r.spec.text, r.outcome) for r in res]
    assert outcomes == [
        ("Should run a job on worker if admitted", report.PASSED),
        ("Should keep workload priority event if job reconcile", report.FAILED),
        ("Should create a pod on worker if admitted", report.NOT_APPLICABLE),
        ("Should never have run", report.FAILED),
        ("Should run a jobSet on worker if admitted", report.NOT_RUN),
    ]
    assert res[1].detail == "Timed out after 45s."
    assert res[2].detail == "plain Pods are not dispatched"
    assert "did not run" in res[3].detail
    line = report.summary_line(res)
    assert line == (
        "conformance: 1 passed, 2 failed, 1 not applicable of 5 (1 not run: left out by --suites or --focus)"
    )
    assert report.exit_code(res) == 1


def test_a_suite_without_a_report_fails_its_applicable_specs():
    table = (specs.Spec("extended", "Should run a jobSet on worker if admitted"),)
    res = report.results({"extended": None}, table)
    assert [r.outcome for r in res] == [report.FAILED]
    assert "wrote no report" in res[0].detail


def test_a_failed_suite_setup_is_given_as_the_reason_of_each_spec():
    junit = JUNIT.replace(
        '<testcase name="[SynchronizedBeforeSuite]" classname="x" status="passed" time="1"></testcase>',
        '<testcase name="[SynchronizedBeforeSuite]" classname="x" status="failed" time="1">'
        '<failure message="deployment kueue-controller-manager not found">x</failure></testcase>',
    )
    table = (specs.Spec("baseline", "Should never have run"),)
    res = report.results({"baseline": report.parse_junit(junit)}, table)
    assert res[0].outcome == report.FAILED
    assert res[0].detail == "suite setup failed: deployment kueue-controller-manager not found"


def test_all_passing_exits_zero():
    table = (
        specs.Spec("baseline", "Should run a job on worker if admitted"),
        specs.Spec("dra", "x", "no DRA"),
    )
    res = report.results({"baseline": report.parse_junit(JUNIT)}, table)
    assert report.summary_line(res) == "conformance: 1 passed, 0 failed, 1 not applicable of 2"
    assert report.exit_code(res) == 0


def test_spec_text_drops_the_node_prefix_and_labels():
    assert report.spec_text("[It] A B Should x [feature:jobset, area:multikueue]") == "A B Should x"
    assert report.spec_text("[It] A (same worker)") == "A (same worker)"


def admin(cluster: str, port: int) -> dict:
    server = {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": "Q0E="}
    user = {"client-certificate-data": "Qw==", "client-key-data": "Sw=="}
    return {
        "clusters": [{"name": cluster, "cluster": server}],
        "users": [{"name": "admin", "user": user}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "admin"}}],
    }


def test_the_kubeconfig_names_contexts_as_kind_does_with_credentials_inline():
    kc = envmod.kind_kubeconfig({"manager": admin("manager", 1), "worker1": admin("worker1", 2)})
    assert [c["name"] for c in kc["contexts"]] == ["kind-manager", "kind-worker1"]
    by_name = {c["name"]: c["cluster"] for c in kc["clusters"]}
    assert by_name["kind-worker1"] == {"server": "https://127.0.0.1:2", "certificate-authority-data": "Q0E="}
    assert {u["name"] for u in kc["users"]} == {"kind-manager", "kind-worker1"}
    assert kc["current-context"] == "kind-manager"


def test_the_suites_environment_names_clusters_and_their_addresses():
    env = envmod.suite_env({"manager": "https://127.0.0.1:1", "worker1": "https://127.0.0.1:2"}, "/k")
    assert env["WORKER1_KIND_CLUSTER_NAME"] == "worker1" and env["MANAGER_KIND_CLUSTER_NAME"] == "manager"
    assert env["CONFORMANCE_SERVER_WORKER1"] == "https://127.0.0.1:2"
    assert env["KUBECONFIG"] == "/k" and env["E2E_TEST_AGNHOST_IMAGE"]


def test_the_patch_reads_the_variable_the_harness_sets():
    from conformance.build import suite_binaries

    patch = suite_binaries().patch.read_text()
    assert '"CONFORMANCE_SERVER_" + strings.ToUpper(strings.ReplaceAll(clusterName, "-", "_"))' in patch
    assert envmod.server_env_key("kind-worker1") == "CONFORMANCE_SERVER_KIND_WORKER1"
    # The patch changes test/util.GetClusterServerAddress only.
    assert [line for line in patch.splitlines() if line.startswith("+++")] == ["+++ b/test/util/e2e.go"]


def test_kueue_system_objects_stand_for_our_processes_and_hold_the_configuration():
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "integrations": {"frameworks": ["batch/job"]}}
    deployment, service, config_map = envmod.kueue_objects("worker1", config, manager=False)
    assert (deployment["metadata"]["namespace"], deployment["metadata"]["name"]) == (
        "kueue-system",
        "kueue-controller-manager",
    )
    assert "worker_agent on worker1" in deployment["metadata"]["annotations"][envmod.STAND_IN_ANNOTATION]
    assert service["metadata"]["name"] == "kueue-webhook-service"
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert yaml.safe_load(config_map["data"]["controller_manager_config.yaml"]) == config
    docs = envmod.operator_objects("manager", ["lws", "jobset", "trainer", "helm"])
    names = [
        (d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs if d["kind"] == "Deployment"
    ]
    assert names == [
        ("lws-system", "lws-controller-manager"),
        ("jobset-system", "jobset-controller-manager"),
        ("kubeflow-system", "kubeflow-trainer-controller-manager"),  # the single-cluster suite waits for it
    ]


STOCK_POD_READY = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "pod-ready"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": [{"key": ".status.phase", "operator": "In", "values": ["Pending"]}]},
        "next": {"statusTemplate": "phase: Running"},
    },
}


def write_behaviour(tmp_path, kubectl):
    stock = tmp_path / "pod-ready.yaml"
    stock.write_text(yaml.safe_dump(STOCK_POD_READY))
    return agnhost.write_pod_behaviour(tmp_path, tmp_path / "admin.kubeconfig", kubectl, stock)


def test_kwok_ends_pods_as_agnhost_does(tmp_path):
    files = write_behaviour(tmp_path, tmp_path / "kubectl")
    docs = {yaml.safe_load(f.read_text())["metadata"]["name"]: yaml.safe_load(f.read_text()) for f in files}
    fast = docs["agnhost-exit-fast"]["spec"]
    assert {"key": ".spec.containers.[0].args.[0]", "operator": "In", "values": ["entrypoint-tester"]} in (
        fast["selector"]["matchExpressions"]
    )
    [patch] = fast["next"]["patches"]
    assert (patch["subresource"], patch["root"], patch["type"]) == ("status", "status", "merge")
    assert "phase: Succeeded" in patch["template"]
    # The conditions a kubelet writes for a completed pod, in its order (upstream's specs compare them).
    conditions = re.findall(r"type: (\w+)", patch["template"].split("containerStatuses:")[0])
    assert conditions == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert "reason: PodCompleted" in patch["template"]
    on_request = docs["agnhost-exit-on-request"]["spec"]
    keys = [e["key"] for e in on_request["selector"]["matchExpressions"]]
    assert '.metadata.annotations["kueue-federation.dev/exit-code"]' in keys
    template = on_request["next"]["patches"][0]["template"]
    assert 'exitCode: {{ (index $.metadata.annotations "kueue-federation.dev/exit-code") }}' in template
    assert "Succeeded{{ else }}Failed" in template
    execs = docs["agnhost-curl"]["spec"]["execs"][0]["local"]
    assert execs["envs"][0]["value"].startswith(str(tmp_path / "agnhost-bin") + ":")


def fake_kubectl(tmp_path, pods: list[dict]):
    """A kubectl that prints `pods` for `get` and records every call."""
    calls = tmp_path / "calls"
    script = tmp_path / "kubectl"
    listing = {"items": pods}
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if sys.argv[1] == 'get': print(json.dumps({listing!r}))\n"
    )
    script.chmod(0o755)
    return script, calls


def run_curl(tmp_path, kubectl, *args):
    write_behaviour(tmp_path, kubectl)
    env = {"AGNHOST_KUBECTL": str(kubectl), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [str(tmp_path / "agnhost-bin" / "curl"), *args], env=env, capture_output=True, text=True
    )


def test_the_curl_stand_in_answers_readyz_and_ends_the_pod_on_exit(tmp_path):
    pod = {"metadata": {"namespace": "ns1", "name": "job-abc"}}
    kubectl, calls = fake_kubectl(tmp_path, [pod])
    ready = run_curl(tmp_path, kubectl, "http://10.244.0.7:8080/readyz")
    assert (ready.returncode, ready.stdout.strip()) == (0, "ok")
    done = run_curl(tmp_path, kubectl, "http://10.244.0.7:8080/exit?code=1&timeout=2s&wait=2s")
    assert done.returncode == 0, done.stderr
    lines = [yaml.safe_load(x) for x in calls.read_text().splitlines()]
    assert lines[0][:2] == ["get", "pods"] and "status.podIP=10.244.0.7" in lines[0]
    assert lines[1] == [
        "annotate",
        "pod",
        "-n",
        "ns1",
        "job-abc",
        "kueue-federation.dev/exit-code=1",
        "--overwrite",
    ]


def test_the_curl_stand_in_fails_for_an_unknown_ip(tmp_path):
    kubectl, _ = fake_kubectl(tmp_path, [])
    res = run_curl(tmp_path, kubectl, "http://10.9.9.9:8080/exit?code=0")
    assert res.returncode == 7 and "no pod has IP 10.9.9.9" in res.stderr


def test_the_bridge_carries_the_suites_gates_and_multikueue_settings_over_the_fleets_configuration():
    from conformance.bridge import merged_config

    ours = {
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": "127.0.0.1:1"},
        "multiKueue": {"origin": "fleet", "gcInterval": "1m"},
        "featureGates": {"MultiKueueManagerQuotaAutomation": True},
    }
    theirs = {
        "health": {"healthProbeBindAddress": ":8081"},  # upstream's, never taken
        "multiKueue": {"dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental", "origin": None},
        "featureGates": {"MultiKueueManagerQuotaAutomation": True, "MultiKueueClusterProfile": True},
    }
    merged = merged_config(ours, theirs)
    assert merged["health"] == ours["health"]
    assert merged["multiKueue"] == {
        "origin": "fleet",
        "gcInterval": "1m",
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
    }
    assert merged["featureGates"]["MultiKueueClusterProfile"] is True
    # Restoring the suite's default (no gates added) drops the gate again; ours is unchanged.
    assert merged_config(ours, {"featureGates": {}}).get("featureGates") is None
    assert ours["multiKueue"] == {"origin": "fleet", "gcInterval": "1m"}


def test_the_bridge_sees_a_restart_as_a_new_pod_template():
    from conformance.bridge import template_key

    before = {"spec": {"replicas": 1, "template": {"metadata": {"annotations": {}}}}}
    after = {
        "spec": {
            "replicas": 1,
            "template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}},
        }
    }
    assert template_key(before) != template_key(after)
    assert template_key(before) == template_key({**before, "status": {"availableReplicas": 1}})


def test_a_stand_in_pod_is_ready_only_once_marked_and_other_pods_as_kwok_makes_them(tmp_path):
    files = write_behaviour(tmp_path, tmp_path / "kubectl")
    docs = {yaml.safe_load(f.read_text())["metadata"]["name"]: yaml.safe_load(f.read_text()) for f in files}
    plain = docs["pod-ready"]["spec"]["selector"]["matchExpressions"]
    stand_in = docs["stand-in-ready"]["spec"]["selector"]["matchExpressions"]
    stands_for = '.metadata.annotations["kueue-federation.dev/stands-for"]'
    marked = '.metadata.annotations["kueue-federation.dev/processes-ready"]'
    assert {"key": stands_for, "operator": "DoesNotExist"} in plain
    assert {"key": stands_for, "operator": "Exists"} in stand_in
    assert {"key": marked, "operator": "Exists"} in stand_in
    assert docs["stand-in-ready"]["spec"]["next"] == STOCK_POD_READY["spec"]["next"]


def test_the_bridge_marks_kueues_stand_in_only_while_our_processes_are_ready():
    from conformance.bridge import pods_to_mark

    def pod(ns, annotations, deleting=False):
        meta = {"namespace": ns, "name": ns + "-pod", "annotations": annotations}
        if deleting:
            meta["deletionTimestamp"] = "t"
        return {"metadata": meta}

    stands = {"kueue-federation.dev/stands-for": "x"}
    kueue, lws = pod("kueue-system", stands), pod("lws-system", stands)
    done = pod("kueue-system", {**stands, "kueue-federation.dev/processes-ready": "true"})
    other, old = pod("default", {}), pod("kueue-system", stands, deleting=True)
    everything = [kueue, lws, done, other, old]
    assert pods_to_mark(everything, kueue_ready=True) == [kueue, lws]
    assert pods_to_mark(everything, kueue_ready=False) == [lws]


def test_a_focused_run_reports_the_specs_it_left_out_as_not_run():
    table = (
        specs.Spec("baseline", "Should run a job on worker if admitted"),
        specs.Spec("baseline", "Other"),
    )
    res = report.results({"baseline": report.parse_junit(JUNIT)}, table, focused=True)
    assert [r.outcome for r in res] == [report.PASSED, report.NOT_RUN]
    assert res[1].detail == "left out by --focus"
    assert report.exit_code(res) == 0
