"""A worker reached through an Open Cluster Management ClusterProfile (multikueue-spec §1.7,
§6.1): the gate, a missing profile, a profile no configured provider serves, then a real
connection whose credentials come from an exec plugin named by the manager's configuration."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from multikueue_kit import CONFIG_NAMESPACE, eventually, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster

REPO = Path(__file__).resolve().parents[2]
CRD = Path(__file__).parent / "fixtures" / "clusterprofile-crd.yaml"


def worker_token_kubeconfig(fleet, worker: str, out: Path, service_account: str) -> dict:
    env = {**os.environ, "PATH": f"{Path(fleet.kubectl_binary).parent}:{os.environ['PATH']}"}
    subprocess.run(
        [str(REPO / "hack" / "create-multikueue-kubeconfig.sh"), "--kubeconfig", fleet.kubeconfig(worker),
         "--service-account", service_account, str(out)],
        check=True, capture_output=True, env=env, timeout=120,
    )  # fmt: skip
    return yaml.safe_load(out.read_text())


def profile(name: str, provider: str, server: str, ca: str) -> dict:
    return {
        "apiVersion": api.CLUSTER_PROFILE.api_version,
        "kind": "ClusterProfile",
        "metadata": {"name": name, "namespace": CONFIG_NAMESPACE},
        "spec": {"displayName": name},
        "status": {
            "accessProviders": [
                {"name": provider, "cluster": {"server": server, "certificate-authority-data": ca}}
            ]
        },
    }


async def test_worker_connected_through_a_cluster_profile_and_an_exec_provider(
    fleet, kube, namespace, tmp_path
):
    fleet.kubectl("manager", "apply", "-f", str(CRD))
    token_config = worker_token_kubeconfig(
        fleet, "worker1", tmp_path / "w1.kubeconfig", f"sa-{namespace}"[:60]
    )
    token = token_config["users"][0]["user"]["token"]
    cluster_entry = token_config["clusters"][0]["cluster"]
    plugin = tmp_path / "token-plugin.sh"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(credential)}\nEOF\n")
    plugin.chmod(0o700)
    providers = {
        "accessProviders": [
            {
                "name": "token-provider",
                "execConfig": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": str(plugin),
                    "interactiveMode": "Never",
                },
            }
        ]
    }
    config = {"featureGates": {"MultiKueueClusterProfile": True}, "multiKueue": {"clusterProfile": providers}}
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "4"}, setup=False, manager_config=config
    ) as env:
        (cluster,) = env.clusters
        name = f"{env.prefix}-profile"
        await env.create(
            kube,
            api.MULTIKUEUE_CLUSTER,
            {
                "apiVersion": api.API_VERSION,
                "kind": "MultiKueueCluster",
                "metadata": {"name": cluster},
                "spec": {
                    "kubeConfig": {"locationType": "Secret", "location": ""},
                    "clusterProfileRef": {"name": name},
                },
            },
        )

        async def state():
            return await env.cluster_active(cluster)

        async def state_is(expected):
            return await state() == expected or None

        missing = f'load client config failed: ClusterProfile.multicluster.x-k8s.io "{name}" not found'
        await eventually(lambda: state_is(("False", "BadClusterProfile", missing)))
        # A profile in another namespace does not count.
        other = profile(
            name, "token-provider", cluster_entry["server"], cluster_entry["certificate-authority-data"]
        )
        other["metadata"]["namespace"] = namespace
        await kube.create(api.CLUSTER_PROFILE, other, namespace=namespace)
        await env.create(
            kube, api.CLUSTER_PROFILE, profile(name, "another-provider", cluster_entry["server"], "Cg==")
        )
        no_match = (
            f'load client config failed: no matching cluster accessor found for cluster profile "{name}"'
        )
        await eventually(lambda: state_is(("False", "BadClusterProfile", no_match)))
        good = profile(
            name, "token-provider", cluster_entry["server"], cluster_entry["certificate-authority-data"]
        )
        current = await kube.get(api.CLUSTER_PROFILE, name, CONFIG_NAMESPACE)
        good["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await kube.replace(api.CLUSTER_PROFILE, good)
        await eventually(lambda: state_is(("True", "Active", "Connected")), timeout=30)


async def test_cluster_profile_needs_its_feature_gate(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}, setup=False) as env:
        (cluster,) = env.clusters
        await env.create(
            kube,
            api.MULTIKUEUE_CLUSTER,
            {
                "apiVersion": api.API_VERSION,
                "kind": "MultiKueueCluster",
                "metadata": {"name": cluster},
                "spec": {
                    "kubeConfig": {"locationType": "Secret", "location": ""},
                    "clusterProfileRef": {"name": "any"},
                },
            },
        )
        expected = (
            "False",
            "MultiKueueClusterProfileFeatureDisabled",
            "load client config failed: MultiKueueClusterProfile feature gate is disabled",
        )

        async def disabled():
            return await env.cluster_active(cluster) == expected or None

        await eventually(disabled)
