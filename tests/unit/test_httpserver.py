"""The /healthz, /readyz and /metrics endpoints, served on an ephemeral port (the secure metrics
server: tests/unit/test_metrics_auth.py)."""

from __future__ import annotations

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from kube_runtime.httpserver import HealthServer


async def test_health_ready_and_metrics():
    registry = CollectorRegistry()
    reconciles = Counter("test_reconciles", "Reconciles done.", ["controller"], registry=registry)
    reconciles.labels("workload").inc(3)
    server = HealthServer("127.0.0.1", 0, registry=registry)
    synced = {"informers": False}
    server.add_readiness_check("informers-synced", lambda: synced["informers"])

    async def leader_ok() -> bool:
        return True

    server.add_readiness_check("leader-election", leader_ok)
    await server.start()
    try:
        assert server.port > 0
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/healthz") as resp:
                assert resp.status == 200 and await resp.text() == "ok"

            async with session.get(base + "/readyz") as resp:
                body = await resp.text()
                assert resp.status == 500
                assert "[-]informers-synced failed" in body
                assert "[+]leader-election ok" in body

            synced["informers"] = True
            async with session.get(base + "/readyz") as resp:
                assert resp.status == 200 and await resp.text() == "ok"

            async with session.get(base + "/metrics") as resp:
                body = await resp.text()
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain")
                assert 'test_reconciles_total{controller="workload"} 3.0' in body
    finally:
        await server.stop()


async def test_a_raising_check_fails_readiness():
    server = HealthServer("127.0.0.1", 0, registry=CollectorRegistry())

    def broken() -> bool:
        raise RuntimeError("cache not built")

    server.add_readiness_check("broken", broken)
    async with server:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{server.port}/readyz") as resp:
                assert resp.status == 500 and "[-]broken failed" in await resp.text()


async def test_servers_listen_only_where_configured():
    """`0` binds nothing; `127.0.0.1:0` binds the loopback address only, never every interface."""
    from kube_runtime.httpserver import start_servers

    registry = CollectorRegistry()
    assert await start_servers("0", "", registry, lambda: True) == []
    (server,) = await start_servers("0", "127.0.0.1:0", registry, lambda: True)
    try:
        bound = [s.getsockname()[0] for site in server._runner.sites for s in site._server.sockets]
        assert bound == ["127.0.0.1"]
    finally:
        await server.stop()
