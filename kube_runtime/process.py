"""What `python -m worker_agent` and `python -m manager` share as processes: their generic flags
(credentials, event types, event loop, logging), their API clients (one for the controllers, one
for events, each with its own rate limit), a run that ends on SIGINT/SIGTERM with exit code 0, or
1 when leadership is lost, a restart in place (`reexec`), and every refusal to start as one line
`<program>: <why>` with exit code 2. kueue_domain/bootstrap.py puts them together with the
Configuration; shell.py is what runs inside."""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import structlog

from kube_runtime.client import KubeClient
from kube_runtime.events import EVENT_TYPES
from kube_runtime.gcpacer import GcPacer
from kube_runtime.httpserver import MetricsServing
from kube_runtime.logging import setup_logging

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


class StartupError(Exception):
    """Why the process cannot start; printed as `<program>: <message>`, exit code 2."""


def refuse(program: str, message: object) -> int:
    print(f"{program}: {message}", file=sys.stderr)
    return 2


def positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def event_types(text: str) -> tuple[str, ...]:
    types = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in types if t not in EVENT_TYPES]
    if unknown or not types:
        raise argparse.ArgumentTypeError(f"takes {' or '.join(EVENT_TYPES)}, comma-separated; got {text!r}")
    return types


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file; in-cluster credentials when omitted")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")


def add_runtime_arguments(parser: argparse.ArgumentParser, event_types_help: str) -> None:
    """The process's own flags: which Events it writes (`event_types_help` says which those are),
    its event loop, its logs."""
    parser.add_argument(
        "--event-types",
        type=event_types,
        default=EVENT_TYPES,
        metavar="Normal,Warning",
        help=event_types_help,
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="uvloop",
        help="the event loop the process runs on: uvloop's (default: 0.86x the CPU of asyncio's in "
        "bench.compare) or asyncio's",
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")
    parser.add_argument("--log-format", choices=("console", "json"), default="console")


def start_problem(args: argparse.Namespace) -> str | None:
    """Why the generic flags refuse to start, before anything connects (None when they do not)."""
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        return f"--kubeconfig {args.kubeconfig}: no such file"
    return MetricsServing.from_args(args).problem()


async def close_clients(*clients: KubeClient) -> None:
    for client in clients:
        await client.close()


def run_main(
    program: str,
    argv: list[str] | None,
    args: argparse.Namespace,
    main: Coroutine[Any, Any, int],
    *,
    restart: int,
) -> int:
    """Set up logging and run `main` on the event loop `args` name; its exit code `restart` starts
    the same command line again in place (the process's configuration changed)."""
    setup_logging(args.log_level, json=args.log_format == "json")
    try:
        code = run_on(args.event_loop, main)
    except KeyboardInterrupt:
        return 0
    if code == restart:
        try:
            reexec(program, argv)
        except OSError as exc:
            print(f"{program}: cannot restart: {exc}", file=sys.stderr)
            return 1
    return code
