"""The process's HTTP endpoints: /metrics (Prometheus), /healthz (liveness) and /readyz (readiness)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = structlog.get_logger(__name__)

ReadinessCheck = Callable[[], Any]  # returns bool (or an awaitable of bool); raising counts as failing


class HealthServer:
    """`await server.start()`; with port 0 the bound port is in `server.port` afterwards."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 8080,
        registry: CollectorRegistry | None = None,
        check_timeout: float = 5.0,
    ) -> None:
        self.host = host
        self.port = port
        self.registry = registry or REGISTRY
        self._check_timeout = check_timeout
        self._checks: dict[str, ReadinessCheck] = {}
        self._runner: web.AppRunner | None = None

    def add_readiness_check(self, name: str, fn: ReadinessCheck) -> None:
        self._checks[name] = fn

    def remove_readiness_check(self, name: str) -> None:
        self._checks.pop(name, None)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("http server listening", host=self.host, port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(self.registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def failing_checks(self) -> list[str]:
        failing = []
        for name, fn in list(self._checks.items()):
            if not await self._passes(name, fn):
                failing.append(name)
        return failing

    async def _passes(self, name: str, fn: ReadinessCheck) -> bool:
        try:
            result = fn()
            if inspect.isawaitable(result):
                async with asyncio.timeout(self._check_timeout):
                    result = await result
            return bool(result)
        except Exception as exc:
            log.info("readiness check failed", check=name, error=str(exc) or type(exc).__name__)
            return False

    async def _readyz(self, request: web.Request) -> web.Response:
        failing = set(await self.failing_checks())
        lines = [f"[-]{name} failed" if name in failing else f"[+]{name} ok" for name in self._checks]
        if failing:
            lines.append("readyz check failed")
            return web.Response(status=500, text="\n".join(lines) + "\n")
        if "verbose" in request.query:
            return web.Response(text="\n".join([*lines, "readyz check passed"]) + "\n")
        return web.Response(text="ok")


def parse_bind_address(address: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """`:8080`, `127.0.0.1:0` or `0` (disabled is `0`, returned as port -1)."""
    if address in ("0", ""):
        return default_host, -1
    host, _, port = address.rpartition(":")
    return host or default_host, int(port)


async def start_servers(
    addresses: Iterable[str], registry: CollectorRegistry, ready: ReadinessCheck
) -> list[HealthServer]:
    """One server per distinct address (`metrics.bindAddress`, `health.healthProbeBindAddress`),
    each serving /metrics /healthz and a /readyz that asks `ready`; "0" turns an address off."""
    servers: list[HealthServer] = []
    seen: set[tuple[str, int]] = set()
    for address in addresses:
        host, port = parse_bind_address(address)
        if port < 0 or ((host, port) in seen and port != 0):
            continue
        seen.add((host, port))
        server = HealthServer(host, port, registry)
        server.add_readiness_check("informers-synced", ready)
        await server.start()
        servers.append(server)
        log.info("serving /metrics /healthz /readyz", address=f"{host}:{server.port}")
    return servers
