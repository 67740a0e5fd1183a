"""What `python -m worker_agent` and `python -m manager` share as processes: their API clients
(one for the controllers, one for events, each with its own rate limit), a run that ends on
SIGINT/SIGTERM with exit code 0, or 1 when leadership is lost, and a restart in place (`reexec`).
kueue_domain/bootstrap.py puts them together."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from kube_runtime.client import KubeClient
from kube_runtime.gcpacer import GcPacer

log = structlog.get_logger(__name__)


# asyncio reads TLS through a zero-filled buffer of SSLProtocol.max_size (256 KiB) per connection,
# resident for as long as the connection object lives (closed ones until the cyclic collector runs):
# 17.5 MiB of the manager's heap with 70 connections open (docs/benchmarks.md). A watch event or a
# list page is read in more, smaller pieces instead.
TLS_READ_BUFFER_BYTES = 64 * 1024


def tune_tls_read_buffer(size: int = TLS_READ_BUFFER_BYTES) -> bool:
    """Give TLS connections opened from now on a `size` read buffer; False where asyncio has no such knob."""
    protocol = getattr(asyncio.sslproto, "SSLProtocol", None)
    if protocol is None or not isinstance(getattr(protocol, "max_size", None), int):
        log.warning("asyncio has no SSLProtocol.max_size: TLS read buffers keep their default size")
        return False
    protocol.max_size = size
    return True


# The event loops a process can run on (`--event-loop`): asyncio's own, or uvloop's (libuv).
EVENT_LOOPS = ("asyncio", "uvloop")


def run_on(event_loop: str, main: Coroutine[Any, Any, int]) -> int:
    """Run `main` to its end on a new event loop of the kind named (EVENT_LOOPS)."""
    if event_loop not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {event_loop!r}: one of {', '.join(EVENT_LOOPS)}")
    factory = None
    if event_loop == "uvloop":
        import uvloop  # only a process that asks for it needs it loaded

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


async def load_clients(
    kubeconfig: str | None, context: str | None, qps: float, burst: int
) -> list[KubeClient]:
    """Two clients with the same credentials: a kubeconfig file, or in-cluster when None."""
    tune_tls_read_buffer()
    clients = []
    for _ in range(2):
        if kubeconfig:
            client = await KubeClient.from_kubeconfig_file(kubeconfig, context=context, qps=qps, burst=burst)
        else:
            client = await KubeClient.in_cluster(qps=qps, burst=burst)
        clients.append(client)
    return clients


async def run_until_signalled(
    run: Callable[[], Awaitable[None]], clients: list[KubeClient], exit_one: type[BaseException]
) -> int:
    """Await `run()` until SIGINT/SIGTERM (exit 0) or `exit_one` (exit 1); the clients are closed.
    The garbage collector is paced meanwhile (kube_runtime/gcpacer.py)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: task.cancel() if task else None)
    pacer = asyncio.create_task(GcPacer().run(), name="gc-pacer")
    try:
        await run()
    except asyncio.CancelledError:
        log.info("stopped")
        return 0
    except exit_one:
        return 1
    finally:
        pacer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pacer
        for client in clients:
            await client.close()
    return 0


def reexec(module: str, argv: list[str] | None) -> None:
    """Replace this process by a fresh run of the same command line (same PID, same arguments)."""
    args = list(sys.orig_argv) if argv is None else [sys.executable, "-m", module, *argv]
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, args)
