"""The credentials and permissions of MultiKueue, against real clusters.

hack/create-multikueue-kubeconfig.sh run against worker1 writes a self-contained kubeconfig whose
ServiceAccount can do what the manager does on a worker (Workload copies, Jobs) and nothing more;
deploy/manager is accepted by the manager cluster's apiserver, and the manager's ServiceAccount
can do its job there while Secrets outside kueue-system stay out of its reach."""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime as dt
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admission_kit import cluster_queue, unique, workload

from kube_runtime.client import Forbidden, KubeClient, NotFound
from kube_runtime.conditions import format_time
from kueue_domain import api
from kueue_domain.config import parse_config

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "create-multikueue-kubeconfig.sh"
WORKER_ROLE = "kueue-federation-multikueue-remote"
MANAGER_DEPLOY = REPO / "deploy" / "manager"
MANAGER_SA = "kueue-federation-manager"
WORKER = "worker1"

Obj = dict[str, Any]


def run_script(fleet, *args: str, kubectl: str | None = None) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it: the fleet's kubectl on PATH (or $KUBECTL when given)."""
    env = {**os.environ, "PATH": f"{Path(fleet.kubectl_binary).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("KUBECTL", None)
    if kubectl is not None:
        env["KUBECTL"] = kubectl
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=180)


def script_ok(fleet, *args: str) -> subprocess.CompletedProcess[str]:
    res = run_script(fleet, *args)
    assert res.returncode == 0, f"script failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res


def keys(node: Any) -> Iterator[str]:
    """Every mapping key anywhere in a parsed YAML document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from keys(v)
    elif isinstance(node, list):
        for item in node:
            yield from keys(item)


def admin_cluster_entry(fleet, cluster: str) -> Obj:
    admin = yaml.safe_load(Path(fleet.kubeconfig(cluster)).read_text())
    return admin["clusters"][0]["cluster"]


@contextlib.contextmanager
def worker_identity(fleet) -> Iterator[tuple[str, str]]:
    """A ServiceAccount name and a namespace that does not exist yet on worker1; both, and the
    ClusterRoleBinding the script creates for them, are deleted afterwards."""
    sa, ns = unique("mk-sa"), unique("mk-creds")
    try:
        yield sa, ns
    finally:
        fleet.kubectl(
            WORKER, "delete", "clusterrolebinding", f"{WORKER_ROLE}:{ns}:{sa}", "--ignore-not-found"
        )
        fleet.kubectl(WORKER, "delete", "namespace", ns, "--ignore-not-found", "--wait=false")


@contextlib.contextmanager
def worker_namespace(fleet) -> Iterator[str]:
    ns = unique("mk-remote")
    fleet.kubectl(WORKER, "create", "namespace", ns)
    try:
        yield ns
    finally:
        fleet.kubectl(WORKER, "delete", "namespace", ns, "--ignore-not-found", "--wait=false")


def check_self_contained(path: Path, fleet) -> str:
    """Mode 0600, inline CA data of worker1, an inline token (returned), no file references."""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = yaml.safe_load(path.read_text())
    file_keys = [k for k in keys(config) if k.endswith("-file") or k == "tokenFile"]
    assert file_keys == [], f"file references in the kubeconfig: {file_keys}"
    assert "insecure-skip-tls-verify" not in set(keys(config))
    (cluster,) = config["clusters"]
    admin = admin_cluster_entry(fleet, WORKER)
    assert cluster["cluster"]["server"] == admin["server"]
    ca_pem = base64.b64decode(cluster["cluster"]["certificate-authority-data"])
    assert ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert ca_pem == base64.b64decode(admin["certificate-authority-data"])
    (user,) = config["users"]
    assert set(user["user"]) == {"token"} and user["user"]["token"]
    return user["user"]["token"]


async def check_manager_permissions_on_worker(kubeconfig: Path, remote_ns: str) -> None:
    """What the manager does on a worker works; reading Secrets is refused."""
    async with await KubeClient.from_kubeconfig_file(str(kubeconfig)) as remote:
        copy_name = unique("wl")
        created = await remote.create(api.WORKLOAD, workload(remote_ns, copy_name, "user-queue"))
        assert created["metadata"]["name"] == copy_name
        # Eviction on the manager: DeactivationTarget is patched into the remote copy's status.
        deactivation = {
            "type": api.WORKLOAD_DEACTIVATION_TARGET,
            "status": "True",
            "reason": api.REASON_EVICTED_ON_MANAGER_CLUSTER,
            "message": api.evicted_on_manager_message("test"),
            "lastTransitionTime": format_time(dt.datetime.now(dt.UTC)),
        }
        patched = await remote.patch_status_merge(
            api.WORKLOAD, copy_name, {"status": {"conditions": [deactivation]}}, namespace=remote_ns
        )
        assert patched["status"]["conditions"][0]["type"] == api.WORKLOAD_DEACTIVATION_TARGET
        await remote.delete(api.WORKLOAD, copy_name, namespace=remote_ns)
        with pytest.raises(NotFound):
            await remote.get(api.WORKLOAD, copy_name, namespace=remote_ns)
        jobs, _ = await remote.list(api.JOB, namespace=remote_ns)
        assert jobs == []
        with pytest.raises(Forbidden):
            await remote.list(api.SECRET, namespace="kube-system")
        with pytest.raises(Forbidden):
            await remote.get(api.SECRET, "anything", namespace=remote_ns)


async def test_script_writes_a_working_least_privilege_kubeconfig(fleet, tmp_path):
    out = tmp_path / "worker1.kubeconfig"
    with worker_identity(fleet) as (sa, ns), worker_namespace(fleet) as remote_ns:
        args = ["--kubeconfig", fleet.kubeconfig(WORKER), "--namespace", ns, "--service-account", sa]
        first = script_ok(fleet, *args, "--duration", "2h", str(out))
        tokens = [check_self_contained(out, fleet)]
        assert f"namespace {ns}: created" in first.stdout
        assert f"serviceaccount {ns}/{sa}: created" in first.stdout
        assert (
            f"kubectl create secret generic worker1-secret -n kueue-system --from-file=kubeconfig={out}"
            in first.stdout
        )
        await check_manager_permissions_on_worker(out, remote_ns)

        # Again, over a file someone made world-readable: same objects, a fresh token, mode 0600.
        out.chmod(0o644)
        second = script_ok(fleet, *args, str(out))
        tokens.append(check_self_contained(out, fleet))
        assert f"namespace {ns}: exists" in second.stdout
        assert f"serviceaccount {ns}/{sa}: exists" in second.stdout
        bindings = fleet.kubectl(WORKER, "get", "clusterrolebindings", "-o", "yaml").stdout
        ours = [
            b["metadata"]["name"]
            for b in yaml.safe_load(bindings)["items"]
            if {"kind": "ServiceAccount", "name": sa, "namespace": ns} in (b.get("subjects") or [])
        ]
        assert ours == [f"{WORKER_ROLE}:{ns}:{sa}"]
        await check_manager_permissions_on_worker(out, remote_ns)

        for res in (first, second):
            for token in tokens:
                assert token not in res.stdout and token not in res.stderr


def admin_kubeconfig_with_ca_file(fleet, directory: Path) -> Path:
    """worker1's admin kubeconfig, its CA moved to a file named relative to the kubeconfig."""
    admin = yaml.safe_load(Path(fleet.kubeconfig(WORKER)).read_text())
    ca_pem = base64.b64decode(admin["clusters"][0]["cluster"].pop("certificate-authority-data"))
    (directory / "ca.crt").write_bytes(ca_pem)
    admin["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"
    path = directory / "worker-admin.kubeconfig"
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return path


async def test_script_inlines_a_ca_file(fleet, tmp_path):
    """A worker kubeconfig that names its CA by path (relative to the kubeconfig) gets it inlined."""
    worker_kubeconfig = admin_kubeconfig_with_ca_file(fleet, tmp_path)
    out = tmp_path / "w.yaml"
    with worker_identity(fleet) as (sa, ns):
        script_ok(
            fleet,
            "--kubeconfig",
            str(worker_kubeconfig),
            "--namespace",
            ns,
            "--service-account",
            sa,
            str(out),
        )
        check_self_contained(out, fleet)
        async with await KubeClient.from_kubeconfig_file(str(out)) as remote:
            await remote.list(api.WORKLOAD, namespace=ns)


def test_script_errors_say_what_to_fix(fleet, tmp_path):
    out = tmp_path / "out.kubeconfig"
    missing = run_script(
        fleet, "--kubeconfig", fleet.kubeconfig(WORKER), str(out), kubectl="/nonexistent/kubectl"
    )
    assert missing.returncode != 0
    assert "kubectl not found" in missing.stderr

    unreachable = yaml.safe_load(Path(fleet.kubeconfig(WORKER)).read_text())
    unreachable["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    unreachable_path = tmp_path / "unreachable.kubeconfig"
    unreachable_path.write_text(yaml.safe_dump(unreachable))
    res = run_script(fleet, "--kubeconfig", str(unreachable_path), str(out))
    assert res.returncode != 0
    assert "cannot reach the worker cluster at https://127.0.0.1:1" in res.stderr

    bad_ca = yaml.safe_load(Path(fleet.kubeconfig(WORKER)).read_text())
    del bad_ca["clusters"][0]["cluster"]["certificate-authority-data"]
    bad_ca["clusters"][0]["cluster"]["certificate-authority"] = str(tmp_path / "no-such-ca.crt")
    bad_ca_path = tmp_path / "bad-ca.kubeconfig"
    bad_ca_path.write_text(yaml.safe_dump(bad_ca))
    res = run_script(fleet, "--kubeconfig", str(bad_ca_path), str(out))
    assert res.returncode != 0
    assert "cannot read its certificate-authority file" in res.stderr
    assert not out.exists()


def test_manager_kustomization_is_accepted_by_the_apiserver(fleet):
    # Server-side dry run does not create the namespace the other objects go into.
    fleet.kubectl("manager", "apply", "-f", str(MANAGER_DEPLOY / "namespace.yaml"))
    res = fleet.kubectl("manager", "apply", "-k", str(MANAGER_DEPLOY), "--dry-run=server")
    for obj in (
        f"serviceaccount/{MANAGER_SA}",
        f"clusterrole.rbac.authorization.k8s.io/{MANAGER_SA}",
        f"clusterrolebinding.rbac.authorization.k8s.io/{MANAGER_SA}",
        f"role.rbac.authorization.k8s.io/{MANAGER_SA}",
        f"rolebinding.rbac.authorization.k8s.io/{MANAGER_SA}",
        "configmap/kueue-federation-manager-config",
        "service/kueue-federation-manager-metrics",
        f"deployment.apps/{MANAGER_SA}",
    ):
        assert obj in res.stdout, res.stdout
    # The shipped Configuration is one the manager's config parser accepts, with its own Lease.
    configmap = yaml.safe_load((MANAGER_DEPLOY / "config.yaml").read_text())
    config = parse_config(yaml.safe_load(configmap["data"]["manager.yaml"]))
    assert config.namespace == "kueue-system"
    assert config.leader_election_id == MANAGER_SA
    assert config.multikueue.dispatcher_name == api.DISPATCHER_LEAST_LOADED


async def test_manager_service_account_permissions(kube, fleet):
    """Only the ServiceAccount and RBAC of deploy/manager are applied (the image is not built here)."""
    fleet.kubectl(
        "manager",
        "apply",
        "-f",
        str(MANAGER_DEPLOY / "namespace.yaml"),
        "-f",
        str(MANAGER_DEPLOY / "rbac.yaml"),
    )
    token = await kube.request(
        "POST",
        f"/api/v1/namespaces/kueue-system/serviceaccounts/{MANAGER_SA}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(Path(fleet.kubeconfig("manager")).read_text())  # noqa: ASYNC240 - a small local file
    config = copy.deepcopy(admin)
    config["users"] = [{"name": "manager", "user": {"token": token["status"]["token"]}}]
    config["contexts"] = [
        {"name": "manager", "context": {"cluster": admin["clusters"][0]["name"], "user": "manager"}}
    ]
    config["current-context"] = "manager"

    ns = unique("mk-manager")
    secret_name = unique("worker-secret")
    cq_name = unique("mk-manager-cq")
    await kube.create(api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    await kube.create(
        api.SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name, "namespace": "kueue-system"},
            "stringData": {"kubeconfig": "not a real kubeconfig"},
        },
    )
    try:
        # A queue nobody serves: no worker_agent on the fleet acts on this Workload.
        await kube.create(api.WORKLOAD, workload(ns, "wl", unique("no-such-queue")))
        await kube.create(api.CLUSTER_QUEUE, cluster_queue(cq_name, {unique("rf"): {"cpu": "0"}}))
        async with await KubeClient.from_kubeconfig_dict(config) as manager:
            await manager.list(api.MULTIKUEUE_CLUSTER)
            check_state = {
                "name": "sample-multikueue",
                "state": api.CHECK_STATE_PENDING,
                "message": "",
                "lastTransitionTime": format_time(dt.datetime.now(dt.UTC)),
            }
            patched = await manager.patch_status_merge(
                api.WORKLOAD, "wl", {"status": {"admissionChecks": [check_state]}}, namespace=ns
            )
            assert patched["status"]["admissionChecks"][0]["name"] == "sample-multikueue"
            secret = await manager.get(api.SECRET, secret_name, namespace="kueue-system")
            assert secret["data"]["kubeconfig"]
            await manager.list(api.SECRET, namespace="kueue-system")
            with pytest.raises(Forbidden):
                await manager.list(api.SECRET, namespace="kube-system")
            with pytest.raises(Forbidden):
                await manager.get(api.SECRET, secret_name, namespace=ns)
            # Read-only where it only reads: no Secret writes, no Workload deletion on the manager.
            with pytest.raises(Forbidden):
                await manager.patch_merge(
                    api.SECRET, secret_name, {"stringData": {"x": "y"}}, namespace="kueue-system"
                )
            with pytest.raises(Forbidden):
                await manager.delete(api.WORKLOAD, "wl", namespace=ns)
            # Quota automation (MultiKueueManagerQuotaAutomation): a ClusterQueue's quotas and its
            # condition are patched; ClusterQueues are never created or deleted.
            cq = await manager.get(api.CLUSTER_QUEUE, cq_name)
            group = cq["spec"]["resourceGroups"][0]
            group["flavors"][0]["resources"] = [{"name": "cpu", "nominalQuota": "3"}]
            patched = await manager.patch_merge(
                api.CLUSTER_QUEUE,
                cq_name,
                {
                    "metadata": {"resourceVersion": cq["metadata"]["resourceVersion"]},
                    "spec": {"resourceGroups": [group]},
                },
            )
            assert patched["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "3"
            condition = {
                "type": api.CONDITION_MULTIKUEUE_MANAGER_QUOTA_AUTOMATION,
                "status": "True",
                "reason": api.QUOTA_AUTOMATION_REASON_AUTOMATED,
                "message": api.QUOTA_AUTOMATION_MSG_AUTOMATED,
                "lastTransitionTime": format_time(dt.datetime.now(dt.UTC)),
            }
            body = {
                "apiVersion": api.API_VERSION,
                "kind": "ClusterQueue",
                "metadata": {"name": cq_name},
                "status": {"conditions": [condition]},
            }
            await manager.apply_status(
                api.CLUSTER_QUEUE, body, api.FIELD_MANAGER_MULTIKUEUE_QUOTA, force=True
            )
            with pytest.raises(Forbidden):
                await manager.delete(api.CLUSTER_QUEUE, cq_name)
    finally:
        with contextlib.suppress(NotFound):
            await kube.delete(api.SECRET, secret_name, namespace="kueue-system")
        with contextlib.suppress(NotFound):
            await kube.delete(api.CLUSTER_QUEUE, cq_name)
            await kube.patch_merge(api.CLUSTER_QUEUE, cq_name, {"metadata": {"finalizers": None}})
        await kube.delete(api.NAMESPACE, ns)
