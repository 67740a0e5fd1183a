"""MultiKueue set-up as an admin does it: the Active conditions of AdmissionChecks and
MultiKueueClusters through missing, broken and fixed configuration (multikueue-spec §6.1)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from multikueue_kit import TEST_OPTIONS, eventually, multikueue

from kueue_domain import api

pytestmark = pytest.mark.realcluster


def ca_file_kubeconfig(text: str) -> str:
    config = yaml.safe_load(text)
    cluster = config["clusters"][0]["cluster"]
    cluster.pop("certificate-authority-data")
    cluster["certificate-authority"] = "/etc/ca.crt"
    return yaml.safe_dump(config)


async def test_active_conditions_follow_a_secret_kubeconfig(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}, setup=False) as env:
        (cluster,) = env.clusters
        await env.add_check()
        missing_config = f'MultiKueueConfig.kueue.x-k8s.io "{env.config_name}" not found'
        assert await eventually(env.check_active) == (
            "False",
            "BadConfig",
            f"Cannot load the AdmissionChecks parameters: {missing_config}",
        )
        await env.add_config([cluster])

        async def check_is(expected):
            return await env.check_active() == expected or None

        await eventually(lambda: check_is(("False", "NoUsableClusters", f"Missing clusters: [{cluster}]")))
        await env.add_cluster(cluster)
        secret = f"{cluster}-secret"

        async def cluster_is(expected):
            return await env.cluster_active(cluster) == expected or None

        await eventually(
            lambda: cluster_is(
                ("False", "BadKubeConfig", f'load client config failed: Secret "{secret}" not found')
            )
        )
        await eventually(lambda: check_is(("False", "NoUsableClusters", f"Inactive clusters: [{cluster}]")))

        good = env.worker_kubeconfig_text(env.clusters[cluster])
        await env.put_secret(secret, good)
        await eventually(lambda: cluster_is(("True", "Active", "Connected")))
        await eventually(lambda: check_is(("True", "Active", "The admission check is active")))

        # A Secret that changes is read again: an insecure kubeconfig disconnects the worker.
        await env.put_secret(secret, ca_file_kubeconfig(good))
        insecure = (
            "load client config failed: certificate-authority file paths are not allowed, "
            f"use certificate-authority-data for cluster {yaml.safe_load(good)['clusters'][0]['name']}"
        )
        await eventually(lambda: cluster_is(("False", "InsecureKubeConfig", insecure)))
        await eventually(lambda: check_is(("False", "NoUsableClusters", f"Inactive clusters: [{cluster}]")))
        await env.put_secret(secret, good)
        await eventually(lambda: cluster_is(("True", "Active", "Connected")))


async def test_some_active_clusters_and_an_unreachable_worker(fleet, kube, namespace):
    async with multikueue(fleet, kube, namespace, worker_cpu={"worker1": "4"}) as env:
        (good,) = env.clusters
        config = yaml.safe_load(env.worker_kubeconfig_text("worker1"))
        config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
        await env.put_secret("unreachable-secret", yaml.safe_dump(config))
        bad = f"{env.prefix}-unreachable"
        await env.add_cluster(bad, secret="unreachable-secret")
        await env.manager_kube.patch_merge(
            api.MULTIKUEUE_CONFIG,
            env.config_name,
            {"spec": {"clusters": [good, bad]}},
        )

        async def unreachable():
            state = await env.cluster_active(bad)
            return state if state and state[1] == "ClientConnectionFailed" else None

        status, _, message = await eventually(unreachable, timeout=30)
        assert status == "False"
        assert "; connection attempts: 1, next connection attempt: " in message
        assert await eventually(
            lambda: _equals(env.check_active(), ("True", "SomeActiveClusters", f"Inactive clusters: [{bad}]"))
        )


async def _equals(awaitable, expected):
    return await awaitable == expected


async def test_path_kubeconfig_is_picked_up_when_written_and_when_changed(fleet, kube, namespace, tmp_path):
    prefix = tmp_path / "kubeconfigs"
    prefix.mkdir()
    options = dataclasses.replace(TEST_OPTIONS, kubeconfig_path_prefix=str(prefix))
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "4"}, setup=False, start_manager=False
    ) as env:
        # Path validation is Alpha and off in Kueue v0.19: this test checks it, so turns it on.
        await env.start_manager(
            {"featureGates": {"MultiKueueKubeConfigPathValidation": True}}, options=options
        )
        (cluster,) = env.clusters
        path = prefix / "worker1.kubeconfig"
        await env.add_cluster(cluster, path=str(path))

        async def state():
            return await env.cluster_active(cluster)

        first = await eventually(state)
        assert first[:2] == ("False", "BadKubeConfig")
        assert "no such file or directory" in first[2]
        good = env.worker_kubeconfig_text("worker1")
        path.write_text(good)
        await eventually(lambda: _equals(state(), ("True", "Active", "Connected")))
        config = yaml.safe_load(good)
        config["users"][0]["user"] = {"tokenFile": "/var/run/token"}
        path.write_text(yaml.safe_dump(config))
        await eventually(
            lambda: _equals(
                state(),
                ("False", "InsecureKubeConfig", "load client config failed: tokenFile is not allowed"),
            )
        )

        outside = f"{env.prefix}-outside"
        elsewhere = tmp_path / "elsewhere.kubeconfig"
        elsewhere.write_text(good)
        await env.add_cluster(outside, path=str(elsewhere))

        async def outside_state():
            return await env.cluster_active(outside)

        _, reason, message = await eventually(outside_state)
        assert reason == "BadKubeConfig"
        assert message.startswith(
            "load client config failed: kubeconfig path is not under the allowed prefix"
        )
