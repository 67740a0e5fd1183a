"""A worker behind a link that silently drops everything (tests/integration/tcp_relay.py) while
its Jobs go on running: the manager's liveness probes see it within seconds, its
MultiKueueCluster says so, its Workloads run on the other worker after workerLostTimeout, and on
the heal its stale copies go; a link that is only slow loses nothing. The watch inactivity timeout
is the production one (60 s), so only the liveness checks can notice in time."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest
import yaml
from admission_kit import consistently
from multikueue_kit import TEST_OPTIONS, check_state, condition, eventually, mk_job, multikueue
from tcp_relay import TcpRelay

from kueue_domain import api

pytestmark = pytest.mark.realcluster

OPTIONS = dataclasses.replace(TEST_OPTIONS, watch_inactivity_timeout=60.0)
WORKER_LOST_TIMEOUT = 8.0  # the kit's workerLostTimeout
JOBS = ("silent-a", "silent-b")


@contextlib.asynccontextmanager
async def relayed(env, cluster: str):
    """The worker's Secret pointed at a relay in front of its apiserver."""
    kubeconfig = yaml.safe_load(env.worker_kubeconfig_text(env.clusters[cluster]))
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    async with TcpRelay.for_url(server) as relay:
        kubeconfig["clusters"][0]["cluster"]["server"] = relay.url(server)
        await env.put_secret(f"{cluster}-secret", yaml.safe_dump(kubeconfig))
        yield relay


async def set_worker_quota(env, worker: str, cpu: str) -> None:
    kube = env.worker_kubes[worker]
    queue = await kube.get(api.LOCAL_QUEUE, "main", env.namespace)
    cq = await kube.get(api.CLUSTER_QUEUE, queue["spec"]["clusterQueue"])
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = cpu
    await kube.replace(api.CLUSTER_QUEUE, cq)


async def ready_on(env, kube, name: str) -> str | None:
    current = await env.get(kube, api.WORKLOAD, name, env.namespace)
    state = check_state(current, env.check)
    return current["status"].get("clusterName") if state and state["state"] == "Ready" else None


async def admitted_on_the_relayed_worker(env, kube, cluster: str) -> list[str]:
    names = []
    for job in JOBS:
        await kube.create(api.JOB, mk_job(job, keep_running=True), namespace=env.namespace)
        wl = await eventually(lambda job=job: env.job_workload(job))
        names.append(wl["metadata"]["name"])
    for name in names:
        assert await env.wait_for(lambda name=name: ready_on(env, kube, name), 40, name) == cluster
    return names


async def seconds_until(check, limit: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await eventually(check, timeout=limit, interval=0.25)
    return loop.time() - start


async def test_a_black_holed_worker_is_seen_within_seconds_and_its_jobs_go_elsewhere(fleet, kube, namespace):
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "4", "worker2": "0"}, start_manager=False
    ) as env:
        cut, healthy = f"{env.prefix}-worker1", f"{env.prefix}-worker2"
        async with relayed(env, cut) as relay:
            await env.start_manager(options=OPTIONS)
            await env.wait_connected()
            names = await admitted_on_the_relayed_worker(env, kube, cut)
            await set_worker_quota(env, "worker2", "4")

            relay.black_hole()
            loop = asyncio.get_running_loop()
            cut_at = loop.time()

            async def inactive():
                state = await env.cluster_active(cut)
                return state if state and state[0] == "False" else None

            detected = await seconds_until(inactive, 30)
            _status, reason, message = await env.cluster_active(cut)
            assert detected <= 20, f"Active=False only after {detected:.1f}s"
            assert reason == api.MKC_REASON_CLIENT_CONNECTION_FAILED
            assert message.startswith(f"no answer from https://127.0.0.1:{relay.port} for "), message

            async def check_names_it():
                state = await env.check_active()
                return state if state and f"Inactive clusters: [{cut}]" in state[2] else None

            await eventually(check_names_it, timeout=10)

            async def all_on_the_healthy_worker():
                return all([await ready_on(env, kube, name) == healthy for name in names]) or None

            moved = await seconds_until(all_on_the_healthy_worker, WORKER_LOST_TIMEOUT + 40)
            elapsed = loop.time() - cut_at
            assert elapsed <= WORKER_LOST_TIMEOUT + 20, (
                f"re-dispatched {elapsed:.1f}s after the cut ({moved:.1f}s)"
            )

            relay.heal()

            async def active_again():
                return await env.cluster_active(cut) == ("True", "Active", "Connected") or None

            back = await seconds_until(active_again, 40)
            assert back <= 20, f"Active again only {back:.1f}s after the heal"
            print(
                f"liveness figures: Active=False {detected:.1f}s after the cut, re-dispatched "
                f"{elapsed:.1f}s after it (workerLostTimeout {WORKER_LOST_TIMEOUT:g}s), "
                f"Active {back:.1f}s after the heal"
            )

            # The partitioned worker's stale copies go; each manager Job shows its one live copy.
            await env.wait_copies_gone(cut, *names)

            async def no_job_left():
                return all([await env.remote(cut, api.JOB, job) is None for job in JOBS]) or None

            await eventually(no_job_left, timeout=30)
            for name in names:
                assert await ready_on(env, kube, name) == healthy

            async def mirrored():
                for job in JOBS:
                    remote = await env.remote(healthy, api.JOB, job)
                    local = await env.get(kube, api.JOB, job, namespace)
                    if not remote or (remote.get("status") or {}).get("active") != 1:
                        return None
                    if (local.get("status") or {}).get("active") != 1:
                        return None
                return True

            await eventually(mirrored, timeout=30)


async def test_a_slow_link_keeps_the_worker_active_and_its_jobs_where_they_are(fleet, kube, namespace):
    async with multikueue(
        fleet, kube, namespace, worker_cpu={"worker1": "4", "worker2": "4"}, start_manager=False
    ) as env:
        slow = f"{env.prefix}-worker1"
        async with relayed(env, slow) as relay:
            await set_worker_quota(env, "worker2", "0")
            await env.start_manager(options=OPTIONS)
            await env.wait_connected()
            names = await admitted_on_the_relayed_worker(env, kube, slow)
            await set_worker_quota(env, "worker2", "4")
            relay.latency = 3.0  # each way: every round trip 6 s longer

            async def unchanged():
                if await env.cluster_active(slow) != ("True", "Active", "Connected"):
                    return False
                for name in names:
                    wl = await env.get(kube, api.WORKLOAD, name, namespace)
                    if await ready_on(env, kube, name) != slow or condition(wl, api.WORKLOAD_EVICTED):
                        return False
                return True

            await consistently(unchanged, duration=45, interval=1)
            relay.latency = 0.0
