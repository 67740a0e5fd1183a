"""The harness's own logic, without starting any cluster."""

from __future__ import annotations

import argparse
import base64
import shlex
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509

import localfleet
from localfleet import binaries, cli
from localfleet import processes as fleet_processes

REPO = Path(__file__).resolve().parents[2]


def test_versions_are_pinned_in_one_file():
    v = localfleet.read_versions()
    assert v["K8S_VERSION"].startswith("1.36.")
    assert v["KWOK_VERSION"].startswith("v0.8.")
    assert v["LWS_VERSION"].startswith("v0.")


def test_binary_cache_is_keyed_by_version():
    bins = localfleet.Binaries({"K8S_VERSION": "1.36.3", "KWOK_VERSION": "v0.8.0", "LWS_VERSION": "v0.9.0"})
    assert bins.path("kube-apiserver").parent.name == "kubernetes-v1.36.3"
    assert bins.path("etcd").parent.name == "kubernetes-v1.36.3"
    assert bins.path("kwok").parent.name == "kwok-v0.8.0"
    assert bins.path("lws-manager").parent.name == "lws-v0.9.0"
    assert str(bins.path("kubectl")).startswith(str(localfleet.CACHE))


def test_certificates_chain_to_the_ca_and_serve_loopback(tmp_path):
    ca = localfleet.CertificateAuthority("test CA")
    crt, key = ca.issue("kube-apiserver", server=True)
    cert = x509.load_pem_x509_certificate(crt)
    cert.verify_directly_issued_by(ca.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    client_crt, _ = ca.issue("admin", organizations=["system:masters"])
    subject = x509.load_pem_x509_certificate(client_crt).subject.rfc4514_string()
    assert "CN=admin" in subject and "O=system:masters" in subject
    # The pair loads as a TLS identity.
    (tmp_path / "c.crt").write_bytes(crt)
    (tmp_path / "c.key").write_bytes(key)
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
        tmp_path / "c.crt", tmp_path / "c.key"
    )


def test_kubeconfig_is_self_contained_as_multikueue_requires():
    ca = localfleet.CertificateAuthority("test CA")
    crt, key = ca.issue("someone")
    kc = localfleet.kubeconfig("worker1", "https://127.0.0.1:6443", ca.cert_pem, crt, key, "someone")
    text = yaml.safe_dump(kc)
    for forbidden in (
        "certificate-authority:",
        "tokenFile",
        "insecure-skip-tls-verify",
        "exec:",
        "client-certificate:",
    ):
        assert forbidden not in text
    assert kc["current-context"] == "worker1"
    assert kc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"


def test_lws_webhooks_are_rewritten_to_the_local_process(tmp_path):
    manifest = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                {
                    "name": "mlws.example",
                    "clientConfig": {"service": {"name": "s", "namespace": "system", "path": "/m-lws"}},
                    "rules": [{"resources": ["leaderworkersets"]}],
                },
                {
                    "name": "mpod.example",
                    "clientConfig": {"service": {"name": "s", "namespace": "system", "path": "/m-pod"}},
                    "rules": [{"resources": ["pods"]}],
                },
            ],
        },
    ]
    lws_dir = tmp_path / "lws"
    lws_dir.mkdir()
    (lws_dir / "webhooks.yaml").write_text(yaml.safe_dump_all(manifest))

    class Bins:
        lws_webhooks = lws_dir / "webhooks.yaml"

    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.bins = Bins()
    up.ca = localfleet.CertificateAuthority("test CA")
    plan = localfleet.ClusterPlan("worker1", "worker", tmp_path, ports={"lws-webhook": 19443})
    docs = up.lws_webhook_configs(plan)
    hooks = docs[0]["webhooks"]
    assert docs[0]["metadata"]["name"] == "lws-mutating-webhook-configuration"
    assert hooks[0]["clientConfig"]["url"] == "https://127.0.0.1:19443/m-lws"
    assert "service" not in hooks[0]["clientConfig"] and hooks[0]["clientConfig"]["caBundle"]
    assert "objectSelector" not in hooks[0]
    assert hooks[1]["objectSelector"]["matchExpressions"][0]["key"] == "leaderworkerset.sigs.k8s.io/name"


def test_stop_processes_kills_the_whole_group_and_only_recorded_binaries(tmp_path):
    sleep = "/bin/sleep" if Path("/bin/sleep").exists() else "/usr/bin/sleep"
    # A process group whose leader has a child: both must go.
    script = f"{sleep} 300 & wait"
    proc = subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True)
    time.sleep(0.3)
    children = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) >= 2
    record = {"pid": proc.pid, "pgid": proc.pid, "cmd": ["/bin/sh"], "cluster": "x", "component": "y"}
    # A recorded command that does not match what runs under that pid is never signalled.
    stranger = dict(record, cmd=["/usr/bin/something-else"])
    localfleet.stop_processes([stranger], timeout=0.5)
    assert proc.poll() is None
    localfleet.stop_processes([record], timeout=5)
    proc.wait(timeout=5)
    # The group's other members are orphans once the leader is reaped: init reaps them in its own
    # time (under load, after this test looks), so give it a few seconds.
    deadline = time.monotonic() + 5
    while any(localfleet.pid_alive(int(pid)) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in children:
        assert not localfleet.pid_alive(int(pid))


def test_down_is_idempotent_on_a_missing_dir(tmp_path):
    assert localfleet.down(tmp_path / "nope") == 0


@pytest.mark.parametrize("goversion", ["go1.25.3", "go1.9"])
def test_old_go_is_refused_with_a_clear_message(monkeypatch, goversion):
    builder = localfleet.Builder(localfleet.Binaries(localfleet.read_versions()))

    def fake_run(args, **kwargs):
        return subprocess.CompletedProcess(
            args, 0, stdout=f"{goversion}\nhttps://proxy.golang.org\n/tmp/mod\n"
        )

    monkeypatch.setattr(binaries.shutil, "which", lambda name: "/usr/bin/go")
    monkeypatch.setattr(binaries.subprocess, "run", fake_run)
    with pytest.raises(localfleet.FleetError, match="too old"):
        builder.check_go()


def test_missing_go_is_refused_with_a_clear_message(monkeypatch):
    builder = localfleet.Builder(localfleet.Binaries(localfleet.read_versions()))
    monkeypatch.setattr(binaries.shutil, "which", lambda name: None)
    with pytest.raises(localfleet.FleetError, match="Go is not installed"):
        builder.check_go()


def test_manager_config_is_accepted_by_the_configuration_loader(tmp_path):
    from kueue_domain.config import load_config

    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.opts = localfleet.FleetOptions(run_dir=tmp_path)
    plan = localfleet.ClusterPlan(
        "manager", "manager", tmp_path, ports={"manager-metrics": 18080, "manager-health": 18081}
    )
    path = tmp_path / "manager-config.yaml"
    path.write_text(yaml.safe_dump(up.manager_config(plan)))
    config = load_config(path)
    assert config.namespace == "kueue-system"
    assert config.leader_elect is True
    assert config.leader_election_id == "kueue-federation-manager"
    assert config.leader_election_namespace == "kueue-system"
    assert config.metrics_bind_address == "127.0.0.1:18080"
    assert config.health_probe_bind_address == "127.0.0.1:18081"
    assert config.multikueue.origin == "multikueue"
    assert config.multikueue.gc_interval_seconds == 60
    assert config.multikueue.worker_lost_timeout_seconds == 15 * 60
    assert (config.qps, config.burst) == (20, 30)  # Kueue's defaults unless `up --client-qps/--client-burst`
    up.opts = localfleet.FleetOptions(run_dir=tmp_path, client_qps=200.0, client_burst=400)
    path.write_text(yaml.safe_dump(up.manager_config(plan)))
    assert (load_config(path).qps, load_config(path).burst) == (200, 400)
    assert load_config(path).multikueue.dispatcher_name == "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    up.opts = localfleet.FleetOptions(run_dir=tmp_path, dispatcher="Incremental")
    path.write_text(yaml.safe_dump(up.manager_config(plan)))
    assert load_config(path).multikueue.dispatcher_name == "kueue.x-k8s.io/multikueue-dispatcher-incremental"


@pytest.mark.parametrize(
    ("quantities", "total"),
    [
        (["8"] * 4, "32"),
        (["32Gi"] * 4, "128Gi"),
        (["500m", "500m"], "1000m"),
        (["1.5", "1.5"], "3"),
        (["1Gi", "512Mi"], "1610612736"),
        ([], "0"),
    ],
)
def test_quantities_sum_in_their_own_suffix(quantities, total):
    assert localfleet.sum_quantities(quantities) == total


def test_a_bad_quantity_is_refused_with_its_value():
    with pytest.raises(localfleet.FleetError, match="'8 cores' is not a quantity"):
        localfleet.sum_quantities(["8 cores"])


def _objects(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def test_setup_multikueue_objects_follow_the_setup_guide():
    workers = [
        localfleet.WorkerSetup("worker1", "32", "128Gi", "kubeconfig of worker1\n"),
        localfleet.WorkerSetup("worker2", "16", "64Gi", "kubeconfig of worker2\n"),
    ]
    plan = localfleet.multikueue_setup_objects(workers)
    # Workers first: their queues exist before the manager can dispatch to them.
    assert [cluster for cluster, _ in plan] == ["worker1", "worker2", "manager"]
    by_cluster = dict(plan)

    def quota(cq):
        (group,) = cq["spec"]["resourceGroups"]
        assert group["coveredResources"] == ["cpu", "memory"]
        (flavor,) = group["flavors"]
        assert flavor["name"] == "default-flavor"
        return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}

    for worker, cpu, memory in (("worker1", "32", "128Gi"), ("worker2", "16", "64Gi")):
        docs = by_cluster[worker]
        assert {d["kind"] for d in docs} == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
        (cq,) = _objects(docs, "ClusterQueue")
        assert cq["metadata"]["name"] == "cluster-queue"
        assert cq["spec"]["namespaceSelector"] == {}
        assert "admissionChecks" not in cq["spec"]
        assert quota(cq) == {"cpu": cpu, "memory": memory}
        (lq,) = _objects(docs, "LocalQueue")
        assert lq["metadata"] == {"name": "user-queue", "namespace": "default"}
        assert lq["spec"] == {"clusterQueue": "cluster-queue"}

    manager = by_cluster["manager"]
    secrets = _objects(manager, "Secret")
    assert [s["metadata"] for s in secrets] == [
        {"name": "worker1-secret", "namespace": "kueue-system"},
        {"name": "worker2-secret", "namespace": "kueue-system"},
    ]
    assert base64.b64decode(secrets[0]["data"]["kubeconfig"]).decode() == "kubeconfig of worker1\n"
    clusters = _objects(manager, "MultiKueueCluster")
    assert [(c["metadata"]["name"], c["spec"]) for c in clusters] == [
        ("multikueue-test-worker1", {"kubeConfig": {"locationType": "Secret", "location": "worker1-secret"}}),
        ("multikueue-test-worker2", {"kubeConfig": {"locationType": "Secret", "location": "worker2-secret"}}),
    ]
    (config,) = _objects(manager, "MultiKueueConfig")
    assert config["metadata"]["name"] == "multikueue-test"
    assert config["spec"] == {"clusters": ["multikueue-test-worker1", "multikueue-test-worker2"]}
    (check,) = _objects(manager, "AdmissionCheck")
    assert check["metadata"]["name"] == "sample-multikueue"
    assert check["spec"] == {
        "controllerName": "kueue.x-k8s.io/multikueue",
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "multikueue-test"},
    }
    (cq,) = _objects(manager, "ClusterQueue")
    assert cq["spec"]["admissionChecks"] == ["sample-multikueue"]
    assert quota(cq) == {"cpu": "48", "memory": "192Gi"}
    (lq,) = _objects(manager, "LocalQueue")
    assert lq["metadata"] == {"name": "user-queue", "namespace": "default"}
    assert all(d["apiVersion"] == "kueue.x-k8s.io/v1beta1" for d in manager if d["kind"] != "Secret")


def test_the_examples_are_what_setup_multikueue_applies_to_a_default_fleet():
    """examples/multikueue/ holds, for users of their own clusters, the objects `make up` applies to
    its default fleet (two workers of 32 CPU / 128Gi), Secrets aside: those hold the fleet's
    credentials and are created with kubectl from each worker's kubeconfig."""
    workers = [localfleet.WorkerSetup(w, "32", "128Gi", "kubeconfig\n") for w in ("worker1", "worker2")]
    plan = dict(localfleet.multikueue_setup_objects(workers))
    examples = localfleet.REPO / "examples" / "multikueue"
    worker = [d for d in yaml.safe_load_all((examples / "worker-setup.yaml").read_text()) if d]
    manager = [d for d in yaml.safe_load_all((examples / "manager-setup.yaml").read_text()) if d]
    assert worker == plan["worker1"] == plan["worker2"]
    assert manager == [d for d in plan["manager"] if d["kind"] != "Secret"]
    for secret in _objects(plan["manager"], "Secret"):
        assert (
            f"kubectl create secret generic {secret['metadata']['name']} -n kueue-system"
            in (examples / "manager-setup.yaml").read_text()
        )


def test_multikueue_cluster_names_follow_the_guide_and_map_back_to_the_fleet():
    assert localfleet.multikueue_cluster_name("worker1") == "multikueue-test-worker1"
    assert localfleet.fleet_worker("multikueue-test-worker12") == "worker12"
    assert localfleet.fleet_worker("elsewhere") == "elsewhere"
    assert localfleet.fleet_worker("") == ""


def test_the_guide_checks_print_each_active_condition_on_one_line():
    lines = localfleet.guide_checks("kubectl", ["worker1", "worker2"])
    assert [line.split(" -o ")[0] for line in lines] == [
        "kubectl get clusterqueues cluster-queue",
        "kubectl get admissionchecks sample-multikueue",
        "kubectl get multikueuecluster multikueue-test-worker1",
        "kubectl get multikueuecluster multikueue-test-worker2",
    ]
    # What a shell hands kubectl: the guide's jsonpath, quotes unescaped.
    (arg,) = [a for a in shlex.split(lines[0]) if a.startswith("jsonpath=")]
    assert arg == (
        'jsonpath={range .status.conditions[?(@.type == "Active")]}'
        "CQ - Active: {@.status} Reason: {@.reason} Message: {@.message}{'\\n'}{end}"
    )


def test_next_steps_submit_a_queued_job_and_watch_every_cluster():
    text = localfleet.next_steps("python3 hack/localfleet.py --dir /dev/shm/x", ["worker1", "worker2"])
    assert 'eval "$(python3 hack/localfleet.py --dir /dev/shm/x env)"' in text
    heredoc = text.split("create -f - <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    job = yaml.safe_load(heredoc)
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "user-queue"}
    assert job["spec"]["parallelism"] == 1 and job["spec"]["completions"] == 1
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": 1, "memory": "200Mi"}
    assert 'kubectl --kubeconfig "$KUBECONFIG_MANAGER" get workloads,jobs -n default' in text
    assert 'kubectl --kubeconfig "$KUBECONFIG_WORKER1" get jobs -n default' in text
    assert 'kubectl --kubeconfig "$KUBECONFIG_WORKER2" get jobs -n default' in text
    assert (
        'kubectl --kubeconfig "$KUBECONFIG_MANAGER" get multikueueclusters,admissionchecks,clusterqueues'
        in text
    )


def test_manager_without_agents_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)  # main() resets SIGPIPE
    run_dir = tmp_path / "fleet"
    assert localfleet.main(["--dir", str(run_dir), "up", "--manager"]) == 1
    assert "--manager requires --agents" in capsys.readouterr().err
    assert not run_dir.exists()


def test_the_lifted_upstream_build_is_keyed_by_version_and_patch_and_needs_upstream_kueue(
    tmp_path, capsys, monkeypatch
):
    """bench.compare's upstream_tuned runs upstream Kueue built with our patch: the pinned version
    has one, the binary's name changes with it, and it only makes sense with --upstream-kueue."""
    bins = localfleet.Binaries(localfleet.read_versions())
    patch = bins.lifted_kueue_patch
    assert patch.is_file() and patch.parent == localfleet.REPO / "hack" / "patches"
    text = patch.read_text()
    assert "WorkerClientQPS" in text and "+++ b/cmd/kueue/main.go" in text
    lifted = bins.path(binaries.LIFTED_KUEUE)
    assert (
        lifted.parent == bins.path("kueue").parent
        and lifted.name == f"kueue-lifted-{binaries._digest(patch)}"
    )
    assert binaries._digest(tmp_path / "missing") == "none"
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)
    run_dir = tmp_path / "fleet"
    assert localfleet.main(["--dir", str(run_dir), "up", "--upstream-kueue-lifted"]) == 1
    assert "--upstream-kueue-lifted needs --upstream-kueue CLUSTER" in capsys.readouterr().err
    assert not run_dir.exists()


def test_setup_multikueue_refuses_a_fleet_without_the_manager(tmp_path):
    state = localfleet.State(tmp_path)
    state.data["clusters"] = {
        "manager": {"role": "manager", "kubeconfig": "x"},
        "worker1": {"role": "worker", "kubeconfig": "y"},
    }
    with pytest.raises(localfleet.FleetError, match=r"up --agents --manager"):
        localfleet.setup_multikueue(state)


def test_our_processes_stop_before_the_control_planes(monkeypatch):
    calls = []
    monkeypatch.setattr(fleet_processes, "_stop_processes", lambda procs, timeout: calls.append(procs))
    processes = [
        {"component": c}
        for c in ("etcd", "kube-apiserver", "worker-agent", "worker-agent", "manager", "kwok")
    ]
    localfleet.stop_processes(processes)
    # Our processes, the controllers, the apiservers, etcd last.
    assert [[p["component"] for p in group] for group in calls] == [
        ["worker-agent", "worker-agent", "manager"],
        ["kwok"],
        ["kube-apiserver"],
        ["etcd"],
    ]


def test_manager_config_enables_the_agents_frameworks_and_the_worker_lost_timeout(tmp_path):
    """The manager has a MultiKueue adapter only for the frameworks in its own config: the same list
    as the agents', so LeaderWorkerSets and pod groups are dispatched, not rejected."""
    from manager.config import load_manager_config

    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.opts = localfleet.FleetOptions(run_dir=tmp_path, worker_lost_timeout="20s")
    plan = localfleet.ClusterPlan(
        "manager", "manager", tmp_path, ports={"manager-metrics": 18080, "manager-health": 18081}
    )
    path = tmp_path / "manager-config.yaml"
    path.write_text(yaml.safe_dump(up.manager_config(plan)))
    config = load_manager_config(path)
    assert list(config.frameworks) == localfleet.AGENT_FRAMEWORKS
    assert "leaderworkerset.x-k8s.io/leaderworkerset" in config.frameworks
    assert "pod" in config.frameworks
    assert config.multikueue.worker_lost_timeout_seconds == 20
    agent = up.agent_config(
        localfleet.ClusterPlan(
            "worker1",
            "worker",
            tmp_path,
            ports={"agent-metrics": 1, "agent-health": 2, "agent-webhook": 3},
        )
    )
    assert agent["integrations"] == up.manager_config(plan)["integrations"]


def test_the_worker_annotation_is_the_managers():
    from manager.adapters.leaderworkerset import ANNOTATION_WORKER_CLUSTER

    assert localfleet.ANNOTATION_WORKER_CLUSTER == ANNOTATION_WORKER_CLUSTER


@pytest.mark.parametrize("value", ["20s", "15m", "1h30m", "1.5s", "300ms", "0"])
def test_go_durations_are_accepted(value):
    assert localfleet.go_duration(value) == value


@pytest.mark.parametrize("value", ["20", "-5s", "1 m", "soon", "", "5d"])
def test_bad_durations_are_refused_with_the_syntax(value):
    with pytest.raises(argparse.ArgumentTypeError, match="Go syntax such as 20s"):
        localfleet.go_duration(value)


def test_up_refuses_a_bad_worker_lost_timeout_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)  # main() resets SIGPIPE
    run_dir = tmp_path / "fleet"
    with pytest.raises(SystemExit):
        localfleet.main(["--dir", str(run_dir), "up", "--worker-lost-timeout", "twenty"])
    assert "Go syntax such as 20s" in capsys.readouterr().err
    assert not run_dir.exists()


SAMPLE_TEXT = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: nginx-leaderworkerset
  labels:
    app: nginx
    kueue.x-k8s.io/queue-name: user-queue
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 3
"""


def test_the_example_sample_is_queued_in_the_fleets_local_queue():
    lws = localfleet.sample_lws_manifest(localfleet.SAMPLE_LWS_FILE.read_text())
    assert lws["metadata"]["namespace"] == "default"
    assert localfleet.lws_replicas(lws) == 2


def test_sample_manifest_goes_to_default_unless_it_names_a_namespace():
    lws = localfleet.sample_lws_manifest(SAMPLE_TEXT)
    assert lws["metadata"]["name"] == "nginx-leaderworkerset"
    assert lws["metadata"]["namespace"] == "default"
    other = localfleet.sample_lws_manifest(SAMPLE_TEXT.replace("  labels:", "  namespace: team\n  labels:"))
    assert other["metadata"]["namespace"] == "team"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (SAMPLE_TEXT.replace("user-queue", "other-queue"), "must carry the label kueue.x-k8s.io/queue-name"),
        (SAMPLE_TEXT.replace("    kueue.x-k8s.io/queue-name: user-queue\n", ""), "not None"),
        ("kind: Job\nmetadata: {name: x}\n", "holds no LeaderWorkerSet"),
        ("kind: [", "is not valid YAML"),
    ],
)
def test_a_sample_that_could_never_run_is_refused_with_why(text, error):
    with pytest.raises(localfleet.FleetError, match=error):
        localfleet.sample_lws_manifest(text, "sample.yaml")


def _manager_lws(replicas=2, ready=None, worker=None) -> dict:
    lws = {"metadata": {"name": "s", "annotations": {}}, "spec": {"replicas": replicas}, "status": {}}
    if ready is not None:
        lws["status"]["readyReplicas"] = ready
    if worker:
        lws["metadata"]["annotations"][localfleet.ANNOTATION_WORKER_CLUSTER] = worker
    return lws


def test_the_sample_is_placed_once_every_group_is_ready_on_the_named_worker():
    assert localfleet.sample_lws_placement(_manager_lws()) is None
    assert localfleet.sample_lws_placement(_manager_lws(ready=2)) is None  # no worker named yet
    assert localfleet.sample_lws_placement(_manager_lws(ready=1, worker="worker2")) is None
    assert localfleet.sample_lws_placement(_manager_lws(ready=2, worker="worker2")) == "worker2"
    one = _manager_lws(ready=1, worker="worker1")
    del one["spec"]["replicas"]  # LWS's default: 1
    assert localfleet.sample_lws_placement(one) == "worker1"


def test_sample_next_steps_look_from_the_manager_and_from_the_worker():
    lws = localfleet.sample_lws_manifest(SAMPLE_TEXT)
    text = localfleet.sample_lws_next_steps(
        "python3 hack/localfleet.py --dir /dev/shm/x", lws, "worker2", 2, 6
    )
    assert "runs on worker2: 2/2 groups ready, 6 pods running there" in text
    assert 'eval "$(python3 hack/localfleet.py --dir /dev/shm/x env)"' in text
    assert 'kubectl --kubeconfig "$KUBECONFIG_MANAGER" get lws,workloads -n default' in text
    assert 'kubectl --kubeconfig "$KUBECONFIG_WORKER2" get lws,pods -n default' in text
    assert "KUBECONFIG_WORKER1" not in text
    columns = next(line for line in text.splitlines() if "custom-columns" in line)
    assert "WORKER:.metadata.annotations.kueue-federation\\.dev/multikueue-cluster" in columns
    assert 'kubectl --kubeconfig "$KUBECONFIG_MANAGER" delete lws nginx-leaderworkerset -n default' in text


def test_a_sample_that_does_not_get_ready_is_explained_by_its_workloads():
    workloads = [
        {
            "metadata": {
                "name": "leaderworkerset-s-0-abc",
                "annotations": {"kueue.x-k8s.io/job-owner-name": "s"},
            },
            "status": {
                "conditions": [{"type": "QuotaReserved", "status": "True", "message": "Quota reserved"}],
                "admissionChecks": [
                    {"name": "sample-multikueue", "state": "Pending", "message": "Not admitted by any worker"}
                ],
            },
        },
        {"metadata": {"name": "job-other", "annotations": {"kueue.x-k8s.io/job-owner-name": "other"}}},
    ]
    text = localfleet.describe_lws_workloads("s", workloads)
    assert text.splitlines() == [
        "  leaderworkerset-s-0-abc: QuotaReserved=True (Quota reserved); "
        "checks: sample-multikueue=Pending (Not admitted by any worker); clusterName: -"
    ]
    assert "no Workload of s on the manager" in localfleet.describe_lws_workloads("s", workloads[1:])


def test_sample_lws_refuses_a_missing_manifest(tmp_path):
    state = localfleet.State(tmp_path)
    with pytest.raises(localfleet.FleetError, match=r"no LeaderWorkerSet manifest at .*missing\.yaml"):
        localfleet.sample_lws(state, tmp_path / "missing.yaml")


def test_sample_lws_refuses_a_fleet_without_the_manager(tmp_path):
    (tmp_path / "sample.yaml").write_text(SAMPLE_TEXT)
    state = localfleet.State(tmp_path)
    state.data["clusters"] = {"manager": {"role": "manager", "kubeconfig": "x"}}
    with pytest.raises(localfleet.FleetError, match="runs no federation manager"):
        localfleet.sample_lws(state, tmp_path / "sample.yaml")


# -- up --upstream-kueue ----------------------------------------------------------------------------


def test_upstream_kueue_is_cached_next_to_minimalkueue_by_version():
    bins = localfleet.Binaries({"KUEUE_VERSION": "v0.19.2"})
    assert bins.path("kueue").parent.name == "kueue-v0.19.2"
    assert bins.kueue_dir == localfleet.CACHE / "bin" / "kueue-v0.19.2"


@pytest.mark.parametrize("bad", ["worker3", "workers", "Manager"])
def test_upstream_kueue_names_a_cluster_of_the_fleet(bad):
    with pytest.raises(localfleet.FleetError, match=r"use one of manager, worker1, worker2"):
        localfleet.upstream_kueue_clusters([bad], workers=2)
    assert localfleet.upstream_kueue_clusters(["worker2", "manager", "worker2"], 2) == ("manager", "worker2")


def test_up_refuses_an_unknown_upstream_cluster_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)
    run_dir = tmp_path / "fleet"
    assert (
        localfleet.main(["--dir", str(run_dir), "up", "--workers", "1", "--upstream-kueue", "worker2"]) == 1
    )
    assert "--upstream-kueue worker2: not a cluster of this fleet" in capsys.readouterr().err
    assert not run_dir.exists()


def upstream_fleet(tmp_path: Path, manifests: dict[str, object]):
    """A FleetUp whose binary cache holds the given upstream manifests, worker1 upstream."""
    kueue_dir = tmp_path / "kueue"
    (kueue_dir / "crds").mkdir(parents=True)
    for name, docs in manifests.items():
        (kueue_dir / name).write_text(yaml.safe_dump_all(docs) if isinstance(docs, list) else docs)

    class Bins:
        kueue_crds = sorted((kueue_dir / "crds").glob("*.yaml"))
        kueue_webhooks = kueue_dir / "webhooks.yaml"
        kueue_conversion_crds = kueue_dir / "conversion-crds.txt"
        versions = {"KUEUE_VERSION": "v0.19.2"}

        def path(self, name):
            return kueue_dir / name

    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.bins = Bins()
    up.ca = localfleet.CertificateAuthority("test CA")
    up.opts = localfleet.FleetOptions(
        run_dir=tmp_path, upstream_kueue=("worker1",), worker_lost_timeout="20s"
    )
    plan = localfleet.ClusterPlan(
        "worker1",
        "worker",
        tmp_path / "worker1",
        ports={"kueue-webhook": 19443, "kueue-metrics": 19444, "kueue-health": 19445},
    )
    return up, plan


def test_upstream_crds_get_the_conversion_webhook_on_the_local_process(tmp_path):
    crd = {"kind": "CustomResourceDefinition", "metadata": {"name": "workloads.kueue.x-k8s.io"}, "spec": {}}
    flavor = {
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "resourceflavors.kueue.x-k8s.io"},
        "spec": {},
    }
    up, plan = upstream_fleet(
        tmp_path,
        {
            "crds/workloads.yaml": [crd],
            "crds/resourceflavors.yaml": [flavor],
            "conversion-crds.txt": "workloads.kueue.x-k8s.io\n",
        },
    )
    up.bins.kueue_crds = sorted((tmp_path / "kueue" / "crds").glob("*.yaml"))
    docs = {d["metadata"]["name"]: d for d in up.upstream_crds(plan)}
    conversion = docs["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:19443/convert"
    assert base64.b64decode(conversion["webhook"]["clientConfig"]["caBundle"]) == up.ca.cert_pem
    assert "conversion" not in docs["resourceflavors.kueue.x-k8s.io"]["spec"]


def test_upstream_webhooks_keep_their_names_and_call_the_local_process(tmp_path):
    manifest = [
        {
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                {
                    "name": "mjob.kb.io",
                    "clientConfig": {"service": {"name": "webhook-service", "path": "/mutate-batch-v1-job"}},
                    "rules": [{"apiGroups": ["batch"], "resources": ["jobs"]}],
                },
                {
                    "name": "mworkload.kb.io",
                    "clientConfig": {"service": {"name": "webhook-service", "path": "/mutate-wl"}},
                    "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"]}],
                },
            ],
        }
    ]
    up, plan = upstream_fleet(tmp_path, {"webhooks.yaml": manifest})
    (doc,) = up.upstream_webhook_configs(plan)
    job_hook, workload_hook = doc["webhooks"]
    assert doc["metadata"]["name"] == "mutating-webhook-configuration"
    assert job_hook["clientConfig"] == {
        "url": "https://127.0.0.1:19443/mutate-batch-v1-job",
        "caBundle": localfleet.b64(up.ca.cert_pem),
    }
    assert job_hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    assert "namespaceSelector" not in workload_hook


def test_upstream_config_runs_out_of_cluster_with_multikueue_defaults(tmp_path):
    up, plan = upstream_fleet(tmp_path, {})
    config = up.upstream_config(plan)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["namespace"] == "kueue-system"
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 19443, "certDir": str(plan.dir / "kueue-certs")}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["manageJobsWithoutQueueName"] is False
    assert config["integrations"]["frameworks"] == localfleet.AGENT_FRAMEWORKS
    assert config["multiKueue"] == {"gcInterval": "1m", "origin": "multikueue", "workerLostTimeout": "20s"}
    # as upstream's shipped configuration: MultiKueue's Workload reconciler runs 10 at a time
    assert config["controller"]["groupKindConcurrency"]["Workload.kueue.x-k8s.io"] == 10
    assert "clientConnection" not in config  # upstream's own default (v0.19: 300 / 500)


def test_upstream_kueue_runs_with_a_private_etc_and_the_visibility_server_off(tmp_path):
    up, plan = upstream_fleet(tmp_path, {})
    cmd = up.upstream_command(plan, tmp_path / "config.yaml")
    kueue = cmd.index(str(tmp_path / "kueue" / "kueue"))
    assert Path(cmd[0]).name == "unshare" and "--mount" in cmd[:kueue]
    assert "exec" in cmd[cmd.index("-c") + 1]
    assert cmd[kueue + 1 :] == [
        f"--kubeconfig={plan.dir / 'admin.kubeconfig'}",
        f"--config={tmp_path / 'config.yaml'}",
        "--feature-gates=VisibilityOnDemand=false",
        "--zap-log-level=info",
    ]


def test_the_supervised_program_is_found_behind_its_wrapper(tmp_path):
    state = localfleet.State(tmp_path)
    (tmp_path / "c").mkdir()
    record = state.start(
        "c", "sleeper", ["/bin/sh", "-c", 'exec "$0" 30', "/bin/sleep"], program="/bin/sleep"
    )
    try:
        localfleet.wait_for("the program", lambda: localfleet.child_pid(record) is not None, 10)
        assert fleet_processes._cmdline(localfleet.child_pid(record))[0] == "/bin/sleep"
    finally:
        localfleet.stop_processes(state.data["processes"])
    assert localfleet.child_pid(record) is None


def test_setup_puts_the_worker_secrets_where_the_manager_in_charge_reads_them():
    worker = localfleet.WorkerSetup("worker1", "32", "128Gi", "kubeconfig: x")
    plan = dict(localfleet.multikueue_setup_objects([worker], secrets_namespace="upstream-ns"))
    (secret,) = [d for d in plan["manager"] if d["kind"] == "Secret"]
    assert secret["metadata"]["namespace"] == "upstream-ns"


def test_upstream_kueue_processes_stop_with_ours_before_the_control_planes(monkeypatch):
    calls = []
    monkeypatch.setattr(fleet_processes, "_stop_processes", lambda procs, timeout: calls.append(procs))
    localfleet.stop_processes(
        [{"component": c} for c in ("kube-apiserver", "upstream-kueue", "worker-agent")]
    )
    assert [[p["component"] for p in group] for group in calls] == [
        ["upstream-kueue", "worker-agent"],
        ["kube-apiserver"],
    ]


def _fleet_up(tmp_path, **opts):
    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.opts = localfleet.FleetOptions(run_dir=tmp_path, workers=12, **opts)
    up.clusters = [localfleet.ClusterPlan("manager", "manager", tmp_path / "manager")] + [
        localfleet.ClusterPlan(f"worker{i}", "worker", tmp_path / f"worker{i}") for i in range(1, 13)
    ]
    return up


def test_make_up_keeps_one_etcd_and_the_pod_machinery_per_cluster(tmp_path):
    up = _fleet_up(tmp_path)
    assert [c.name for c in up.etcd_clusters()] == [c.name for c in up.clusters]
    assert all(up.runs_lws(c) for c in up.clusters if c.is_worker)
    assert localfleet.etcd_prefix("worker1", shared=False) == "/registry"


def test_a_shared_etcd_serves_every_apiserver_under_its_own_prefix(tmp_path):
    up = _fleet_up(tmp_path, shared_etcd=True)
    assert [c.name for c in up.etcd_clusters()] == ["manager"]
    assert {up.etcd_of(c).name for c in up.clusters} == {"manager"}
    prefixes = [localfleet.etcd_prefix(c.name, shared=True) for c in up.clusters]
    assert len(set(prefixes)) == len(prefixes)
    # No cluster reads another's keys: no prefix is a prefix of another (worker1 vs worker10).
    assert not any(a != b and b.startswith(a) for a in prefixes for b in prefixes)


def test_light_workers_run_no_pods_and_no_lws_controller(tmp_path):
    up = _fleet_up(tmp_path, light_workers=True)
    workers = [c for c in up.clusters if c.is_worker]
    assert not any(localfleet.runs_pods(c, light_workers=True) for c in workers)
    assert not any(up.runs_lws(c) for c in up.clusters)


def test_up_accepts_the_light_fleet_flags(tmp_path, monkeypatch):
    seen = {}

    def fake_up(args):
        seen.update(vars(args))

    monkeypatch.setattr(cli, "cmd_up", fake_up)
    args = ["--dir", str(tmp_path), "up", "--shared-etcd", "--light-workers", "--workers", "20"]
    assert localfleet.main(args) == 0
    assert seen["shared_etcd"] and seen["light_workers"] and seen["workers"] == 20


def test_setup_multikueue_scales_to_20_workers_and_refuses_more(tmp_path, capsys):
    workers = [localfleet.WorkerSetup(f"worker{i}", "32", "128Gi", "apiVersion: v1\n") for i in range(1, 21)]
    plan = dict(localfleet.multikueue_setup_objects(workers))
    assert len(plan) == 21
    config = next(d for d in plan["manager"] if d["kind"] == "MultiKueueConfig")
    assert len(config["spec"]["clusters"]) == localfleet.MAX_MULTIKUEUE_CLUSTERS
    queue = next(d for d in plan["manager"] if d["kind"] == "ClusterQueue")
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "640"
    run_dir = tmp_path / "fleet"
    assert localfleet.main(["--dir", str(run_dir), "up", "--setup-multikueue", "--workers", "21"]) == 1
    assert "at most 20 workers" in capsys.readouterr().err
    assert not run_dir.exists()


def test_the_metrics_reader_may_get_metrics_only():
    docs = {d["kind"]: d for d in localfleet.metrics_reader_objects()}
    assert docs["ClusterRole"]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert docs["ClusterRoleBinding"]["roleRef"]["name"] == localfleet.METRICS_READER
    assert docs["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": localfleet.METRICS_READER, "namespace": "kueue-system"}
    ]
    assert docs["ServiceAccount"]["metadata"]["namespace"] == "kueue-system"


def test_status_reads_secure_metrics_with_the_clusters_token(tmp_path):
    """`status` (metrics_summary) against a real secure metrics server in a thread: the token file
    of the state is sent; without it the 401 is shown."""
    import asyncio
    import threading

    from prometheus_client import CollectorRegistry

    from kube_runtime.delegated_auth import Decision, UserInfo
    from kube_runtime.httpserver import MetricsAuth, start_servers

    async def review_token(token):
        return UserInfo("reader") if token == "t0ken" else None

    async def review_access(user, attributes):
        return Decision(attributes.path == "/metrics" and attributes.verb == "get")

    loop = asyncio.new_event_loop()
    servers = loop.run_until_complete(
        start_servers(
            "127.0.0.1:0",
            "0",
            CollectorRegistry(),
            lambda: True,
            auth=MetricsAuth(review_token, review_access),
        )
    )
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{servers[0].port}/metrics"
        (tmp_path / "metrics-reader.token").write_text("t0ken\n")
        token = localfleet.cluster_metrics_token({"metricsToken": str(tmp_path / "metrics-reader.token")})
        assert token == "t0ken"
        assert localfleet.metrics_summary(url, token) == f"metrics {url} (read with the metrics-reader token)"
        assert localfleet.metrics_summary(url, None) == f"metrics {url} (NOT readable: 401 Unauthorized)"
        assert localfleet.cluster_metrics_token({}) is None
    finally:
        asyncio.run_coroutine_threadsafe(servers[0].stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_jobset_runs_beside_lws_with_its_own_ports_certificates_and_pod_selector(tmp_path):
    """JobSet is an Operator like LWS: its webhooks point at its own port and limit its pod webhooks to
    JobSet pods; `up --no-jobset` leaves it (and its CRD) out."""
    from localfleet.operators import JOBSET

    docs = JOBSET.webhook_configs(
        [
            {
                "metadata": {"name": "validating-webhook-configuration"},
                "webhooks": [
                    {
                        "name": "vpod.kb.io",
                        "clientConfig": {"service": {"path": "/validate--v1-pod"}},
                        "rules": [{"resources": ["pods"]}],
                    }
                ],
            }
        ],
        29443,
        "Q0E=",
    )
    hook = docs[0]["webhooks"][0]
    assert docs[0]["metadata"]["name"] == "jobset-validating-webhook-configuration"
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:29443/validate--v1-pod", "caBundle": "Q0E="}
    assert hook["objectSelector"]["matchExpressions"][0]["key"] == "jobset.sigs.k8s.io/jobset-name"
    config = JOBSET.config(29443, 29444, "/certs")
    assert config["apiVersion"] == "config.jobset.x-k8s.io/v1alpha1"
    assert config["webhook"] == {"port": 29443, "host": "127.0.0.1", "certDir": "/certs"}
    from localfleet.operators import OPERATORS

    every = [op.key for op in OPERATORS]
    assert every[:3] == ["lws", "jobset", "trainer"]
    assert [op.key for op in _fleet_up(tmp_path).operators()] == every
    without = [op.key for op in _fleet_up(tmp_path, jobset=False).operators()]
    assert without == [k for k in every if k not in ("jobset", "trainer")]


def test_ray_operator_takes_flags_fleet_ports_and_reaches_the_dashboard_stand_in(tmp_path):
    """KubeRay's ray-operator takes no Configuration file: metrics and health on fleet ports (its
    default :8080 would clash between fleets), no leader election; its Ray dashboard client goes
    through HTTP_PROXY to the cluster's dashboard stand-in, a fleet component started beside it;
    `up --no-operator ray` leaves it out."""
    from localfleet.operators import RAY

    assert RAY.config(29443, 29444, "/certs") is None
    args = RAY.args(None, 29443, 29444, "/certs")
    assert "--metrics-addr=127.0.0.1:29443" in args and "--health-probe-bind-address=127.0.0.1:29444" in args
    assert "--enable-leader-election=false" in args
    ports = {"ray-dashboard": 29445}
    assert RAY.process_env(tmp_path, ports)["HTTP_PROXY"] == "http://127.0.0.1:29445"
    [(component, argv)] = RAY.companions(tmp_path, ports)
    assert component == "ray-dashboard" and argv[1:] == ["-m", "localfleet.raydashboard", "--port=29445"]
    assert RAY.webhooks is None and RAY.crd_skip == ("ray.io_raycronjobs.yaml",)
    assert "ray" not in [op.key for op in _fleet_up(tmp_path, left_out=frozenset({"ray"})).operators()]


def test_trainer_runs_with_its_own_config_shape_tmpdir_and_needs_jobset(tmp_path):
    """Kubeflow Trainer's Configuration has no certDir and is decoded strictly: certificate management
    off, no metrics, and its webhook certificates under a TMPDIR of its own (controller-runtime's
    default directory). `--no-trainer` leaves it out, and so does `--no-jobset` (it runs JobSets)."""
    from localfleet.operators import TRAINER

    config = TRAINER.config(29443, 29444, "/ignored")
    assert config == {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "webhook": {"port": 29443, "host": "127.0.0.1"},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "127.0.0.1:29444"},
    }
    assert TRAINER.env(tmp_path) == {"TMPDIR": str(tmp_path / "trainer-tmp")}
    assert TRAINER.cert_dir(tmp_path) == tmp_path / "trainer-tmp" / "k8s-webhook-server" / "serving-certs"
    assert TRAINER.ldflags("v2.2.1") == "-s -w"
    from localfleet.operators import OPERATORS

    every = [op.key for op in OPERATORS]
    assert [op.key for op in _fleet_up(tmp_path, trainer=False).operators()] == [
        k for k in every if k != "trainer"
    ]
    both = [op.key for op in _fleet_up(tmp_path, jobset=False, trainer=True).operators()]
    assert both == [k for k in every if k not in ("jobset", "trainer")]


def test_appwrapper_runs_without_webhooks_configured_by_a_config_map(tmp_path):
    """The AppWrapper controller binds its webhook server to the fixed port 9443: it runs with webhooks
    off, its configuration a ConfigMap in its namespace (written by `prepare` from the file `config`
    returned), health on the fleet's port, no metrics; `--no-operator appwrapper` leaves it out."""
    from localfleet.operators import APPWRAPPER

    config = APPWRAPPER.config(29443, 29444, "/certs")
    assert config["webhooksEnabled"] is False
    assert config["controllerManager"] == {
        "metrics": {"bindAddress": "0"},
        "health": {"bindAddress": "127.0.0.1:29444"},
        "leaderElection": False,
    }
    assert APPWRAPPER.webhooks is None
    assert APPWRAPPER.env(tmp_path) == {"NAMESPACE": "appwrapper-system"}
    assert APPWRAPPER.args(None, 29443, 29444, "/certs")[0] == "--config=appwrapper-operator-config"
    assert APPWRAPPER.ldflags("v1.2.2") == "-s -w -X main.BuildVersion=v1.2.2"
    (tmp_path / "appwrapper-config.yaml").write_text(yaml.safe_dump(config))
    applied = []

    class Kubectl:
        def apply(self, docs):
            applied.extend(docs)

    APPWRAPPER.prepare(Kubectl(), tmp_path)
    assert applied[0]["metadata"] == {"name": "appwrapper-operator-config", "namespace": "appwrapper-system"}
    assert yaml.safe_load(applied[0]["data"]["config.yaml"]) == config
    assert "appwrapper" in [op.key for op in _fleet_up(tmp_path).operators()]
    left_out = _fleet_up(tmp_path, left_out=frozenset({"appwrapper"})).operators()
    assert "appwrapper" not in [op.key for op in left_out]


def test_training_operator_runs_its_five_v1_kinds_on_fleet_ports_without_its_v1_mpijob(tmp_path):
    """Kubeflow's training-operator takes flags: no leader election, no metrics, health and webhook
    on the fleet's ports, its five v1 kinds only (not MPIJob v1, whose CRD is not installed), its
    namespace for the certificate rotator, its webhook certificates under a TMPDIR of its own."""
    from localfleet.operators import TRAINING_OPERATOR

    assert TRAINING_OPERATOR.config(29443, 29444, "/ignored") is None
    args = TRAINING_OPERATOR.args(None, 29443, 29444, "/ignored")
    assert "--health-probe-bind-address=127.0.0.1:29444" in args
    assert "--webhook-server-port=29443" in args and "--metrics-bind-address=0" in args
    schemes = [a.split("=", 1)[1] for a in args if a.startswith("--enable-scheme=")]
    assert schemes == ["pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob"]
    env = TRAINING_OPERATOR.env(tmp_path)
    assert env == {"TMPDIR": str(tmp_path / "training-tmp"), "MY_POD_NAMESPACE": "kubeflow"}
    assert TRAINING_OPERATOR.crd_skip == ("kubeflow.org_mpijobs.yaml",) and TRAINING_OPERATOR.readyz


def test_mpi_operator_health_check_moves_to_a_flag_by_a_build_overlay(tmp_path):
    """The MPI Operator's health check binds a constant :8080; its build overlays one expression of
    cmd/mpi-operator/app/server.go with a flag of an added file, and the fleet passes its own port."""
    from localfleet.binaries import Builder
    from localfleet.operators import MPI_OPERATOR

    module = tmp_path / "module"
    app = module / "cmd" / "mpi-operator" / "app"
    app.mkdir(parents=True)
    (app / "server.go").write_text('a\n\t\tAddr:    fmt.Sprintf(":%d", healthCheckPort),\nb\n')
    overlay = MPI_OPERATOR.overlay(module)
    rel = "cmd/mpi-operator/app"
    assert overlay[f"{rel}/server.go"] == "a\n\t\tAddr:    *localfleetHealthAddress,\nb\n"
    assert 'flag.String("localfleet-health-address", ":8080"' in overlay[f"{rel}/localfleet_health.go"]
    assert "--localfleet-health-address=127.0.0.1:29444" in MPI_OPERATOR.args(None, 29443, 29444, "")
    (app / "server.go").chmod(0o444)
    copy = Builder.write_overlay(tmp_path / "w", module, overlay)
    assert {(copy / r).read_text() for r in overlay} == set(overlay.values())
    assert (app / "server.go").read_text() == 'a\n\t\tAddr:    fmt.Sprintf(":%d", healthCheckPort),\nb\n'
    (app / "server.go").chmod(0o644)
    (app / "server.go").write_text("changed upstream\n")
    with pytest.raises(localfleet.FleetError, match="healthCheckPort"):
        MPI_OPERATOR.overlay(module)


def test_only_crd_files_are_taken_from_an_operators_crd_directory(tmp_path):
    from localfleet.binaries import is_crd_file

    (tmp_path / "crd.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
    )
    (tmp_path / "deployment.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\n")
    assert is_crd_file(tmp_path / "crd.yaml") and not is_crd_file(tmp_path / "deployment.yaml")


def test_a_conformance_fleet_runs_pods_on_the_manager_and_turns_on_upstreams_e2e_gates(tmp_path):
    """`up --conformance`: kube-scheduler, kwok and nodes on the manager cluster too, and our processes
    with the gates upstream's MultiKueue e2e configurations turn on (read back by the manager)."""
    from manager.config import load_manager_config

    manager = localfleet.ClusterPlan("manager", "manager", tmp_path)
    assert not localfleet.runs_pods(manager, light_workers=False)
    assert localfleet.runs_pods(manager, light_workers=False, manager_pods=True)
    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.opts = localfleet.FleetOptions(run_dir=tmp_path, conformance=True)
    plan = localfleet.ClusterPlan(
        "manager", "manager", tmp_path, ports={"manager-metrics": 18080, "manager-health": 18081}
    )
    path = tmp_path / "manager-config.yaml"
    path.write_text(yaml.safe_dump(up.manager_config(plan)))
    assert load_manager_config(path).features.enabled("MultiKueueManagerQuotaAutomation")
    up.opts = localfleet.FleetOptions(run_dir=tmp_path)
    assert "featureGates" not in up.manager_config(plan)
