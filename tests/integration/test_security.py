"""Security (issue 12, docs/reliability.md "Security"): the manager's identity on a worker can do
no more than deploy/rbac/multikueue-worker-clusterrole.yaml allows, and no kubeconfig secret (a
client key, a token, the Secret's base64 data) reaches a log: neither ours, run in-process here
through a MultiKueue flow with good and bad credentials, nor any log file of the fleet."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from multikueue_kit import check_state, eventually, mk_job, multikueue

from kube_runtime.client import Forbidden, KubeClient
from kueue_domain import api

pytestmark = pytest.mark.realcluster

CONFIG_MAP = api.Resource("", "v1", "configmaps", "ConfigMap", True)
LEAKED_TOKEN = "leak-canary-token-7c2b9e"  # in a Secret the manager reads; must appear in no log


async def test_the_manager_identity_on_a_worker_is_limited_to_its_role(fleet):
    async with await KubeClient.from_kubeconfig_file(fleet.multikueue_kubeconfig("worker1")) as remote:
        await remote.list(api.WORKLOAD, namespace="default")  # what it is for works
        # Pods are not here: the role creates them on purpose, for plain pod groups.
        refused = {
            "list secrets": lambda: remote.list(api.SECRET),
            "get a secret": lambda: remote.get(api.SECRET, "any", "kube-system"),
            "list namespaces": lambda: remote.list(api.NAMESPACE),
            "create a config map": lambda: remote.create(
                CONFIG_MAP,
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}},
                namespace="default",
            ),
            "create a cluster queue": lambda: remote.create(
                api.CLUSTER_QUEUE,
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "ClusterQueue",
                    "metadata": {"name": "x"},
                    "spec": {},
                },
            ),
            "delete a node": lambda: remote.delete(api.NODE, "any"),
        }
        for what, call in refused.items():
            with pytest.raises(Forbidden) as info:
                await call()
            assert 'User "' in info.value.message, (what, info.value.message)


def _secret_fragments(kubeconfig_text: str) -> dict[str, str]:
    """Substrings that would show a credential of this kubeconfig: the key and token, raw and
    base64, and a slice of the whole kubeconfig as a Secret stores it (base64)."""
    config = yaml.safe_load(kubeconfig_text)
    user = config["users"][0]["user"]
    fragments: dict[str, str] = {}
    if user.get("client-key-data"):
        encoded = user["client-key-data"]
        pem = base64.b64decode(encoded).decode()
        body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
        fragments["client key (kubeconfig base64)"] = encoded[40:80]
        fragments["client key (PEM body)"] = body[0][:40]
    if user.get("token"):
        fragments["token"] = user["token"]
        fragments["token (base64)"] = base64.b64encode(user["token"].encode()).decode()[:20]
    secret_data = base64.b64encode(kubeconfig_text.encode()).decode()
    middle = len(secret_data) // 2
    fragments["Secret data"] = secret_data[middle : middle + 40]
    return fragments


def _log_files(fleet) -> list[Path]:
    run_dir = Path(fleet.state["runDir"])
    recorded = {Path(p["log"]) for p in fleet.state["processes"] if p.get("log")}
    return sorted(recorded | set(run_dir.rglob("*.log")))


async def test_no_credential_reaches_a_log(fleet, kube, namespace, capfd):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        (good,) = env.clusters
        good_text = env.worker_kubeconfig_text("worker1")
        # Bad Secrets whose errors are logged: unparsable around the token, and a token the worker rejects.
        token_config = yaml.safe_load(good_text)
        token_config["users"][0]["user"] = {"token": LEAKED_TOKEN}
        rejected_text = yaml.safe_dump(token_config)
        secrets = {
            "unparsable": f"users:\n- name: x\n  user:\n    token: {LEAKED_TOKEN}: [\n",
            "rejected": rejected_text,
        }
        for kind, text in secrets.items():
            await env.put_secret(f"{env.prefix}-{kind}-secret", text)
            await env.add_cluster(f"{env.prefix}-{kind}")
        await env.manager_kube.patch_merge(
            api.MULTIKUEUE_CONFIG,
            env.config_name,
            {"spec": {"clusters": [good, *(f"{env.prefix}-{kind}" for kind in secrets)]}},
        )
        await kube.create(api.JOB, mk_job("leak-check"), namespace=namespace)

        async def ready():
            state = check_state(await env.job_workload("leak-check"), env.check)
            return state and state["state"] == "Ready"

        await eventually(ready, timeout=40)

        async def both_failed():
            states = [await env.cluster_active(f"{env.prefix}-{kind}") for kind in secrets]
            return all(s and s[0] == "False" for s in states)

        await eventually(both_failed, timeout=30)

    captured = capfd.readouterr()
    ours = captured.out + captured.err
    assert "cannot load worker credentials" in ours and "cannot connect to a worker" in ours, (
        "the flow must have logged its credential errors, or this test checks nothing"
    )
    fragments = {
        **{f"worker1 {k}": v for k, v in _secret_fragments(good_text).items()},
        **{f"rejected {k}": v for k, v in _secret_fragments(rejected_text).items()},
    }
    for worker in fleet.workers:
        text = Path(fleet.multikueue_kubeconfig(worker)).read_text()  # noqa: ASYNC240 - small local file
        fragments.update({f"{worker} {k}": v for k, v in _secret_fragments(text).items()})
    sources = {"in-process manager and agents": ours}
    for path in _log_files(fleet):
        sources[str(path)] = path.read_text(errors="replace")
    leaks = [
        f"{what} in {source}"
        for source, text in sources.items()
        for what, fragment in fragments.items()
        if fragment in text
    ]
    assert not leaks, leaks
