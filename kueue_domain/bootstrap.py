"""The start of `python -m manager` and `python -m worker_agent`: one command line, one way to load the
Configuration (a file, or the Red Hat operator's Kueue object, plus `--feature-gates`), the API
clients, the metrics and probe addresses, the run until a signal or lost leadership, and the restart
in place when the Kueue object's Configuration changes. Each `__main__` describes its `Program` (its
own flags, its checks of the Configuration, what it runs) and calls `main`.

Every refusal at start-up is one line on stderr, `<program>: <why>`, and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from kube_runtime.client import KubeClient
from kube_runtime.events import EVENT_TYPES
from kube_runtime.httpserver import MetricsServing, add_metrics_arguments, addresses_problem
from kube_runtime.logging import setup_logging
from kube_runtime.process import EVENT_LOOPS, load_clients, reexec, run_on, run_until_signalled
from kube_runtime.shell import LeaderElection, LeadershipLost, ProcessShell
from kueue_domain.config import ConfigError, Configuration, load_config, parse_config, with_feature_gate_flag
from kueue_domain.operator_config import (
    API_VERSION,
    DEFAULT_POLL_INTERVAL,
    KIND,
    NAME,
    RESTART,
    OperatorConfig,
)

Serve = Callable[[], Awaitable[None]]
Build = Callable[[argparse.Namespace, KubeClient, KubeClient, Configuration], AbstractContextManager[Serve]]


class StartupError(Exception):
    """Why the process cannot start; printed as `<program>: <message>`, exit code 2."""


@dataclass(frozen=True)
class Program:
    """What one process adds to the shared start."""

    # The module (`python -m <name>`, the restart's command line) and the prefix of every refusal.
    name: str
    description: str
    # Builds what runs from the clients and the Configuration: a context manager that yields the
    # coroutine function to await (and cleans up after it); StartupError refuses to start.
    build: Callable[
        [argparse.Namespace, KubeClient, KubeClient, Configuration], AbstractContextManager[Serve]
    ]
    # Raised by the run when leadership is lost: exit code 1.
    leadership_lost: type[BaseException] = LeadershipLost
    # The role's Configuration parser (the manager defaults a few fields differently).
    parse: Callable[[Any, str], Configuration] = parse_config
    # Why the loaded Configuration leaves nothing to run (None when it does); checked before connecting.
    check: Callable[[Configuration], str | None] = lambda _config: None
    # The role's own flags: after the probe address, and after --feature-gates.
    add_address_arguments: Callable[[argparse.ArgumentParser], None] = lambda _parser: None
    add_option_arguments: Callable[[argparse.ArgumentParser], None] = lambda _parser: None

    def refuse(self, message: object) -> int:
        print(f"{self.name}: {message}", file=sys.stderr)
        return 2

    def build_parser(self) -> argparse.ArgumentParser:
        return build_parser(self)

    def main(self, argv: list[str] | None = None) -> int:
        """The process: parse `argv` (sys.argv by default), run, return the exit code."""
        return main(self, argv)


def leader_election(config: Configuration) -> LeaderElection | None:
    """The Configuration's leader election (`leaderElection`); None when `leaderElect` is false."""
    if not config.leader_elect:
        return None
    return LeaderElection(
        config.leader_election_namespace,
        config.leader_election_id,
        lease_duration=config.lease_duration_seconds,
        renew_deadline=config.renew_deadline_seconds,
        retry_period=config.retry_period_seconds,
    )


def process_shell(
    kube: KubeClient,
    config: Configuration,
    *,
    log: Any,
    metrics_bind_address: str | None = None,
    health_bind_address: str | None = None,
    **options: Any,
) -> ProcessShell:
    """The shell of a process run from `config`: its addresses (those given, else the
    Configuration's) and its leader election; `options` as ProcessShell takes them."""
    return ProcessShell(
        kube,
        metrics_bind_address=metrics_bind_address or config.metrics_bind_address,
        health_bind_address=health_bind_address or config.health_probe_bind_address,
        election=leader_election(config),
        log=log,
        **options,
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _event_types(text: str) -> tuple[str, ...]:
    types = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in types if t not in EVENT_TYPES]
    if unknown or not types:
        raise argparse.ArgumentTypeError(f"takes {' or '.join(EVENT_TYPES)}, comma-separated; got {text!r}")
    return types


def add_operator_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--kueue-cr",
        metavar="PATH",
        help=f"a {API_VERSION} {KIND} object (Red Hat build of Kueue) instead of a Configuration; "
        "--config, if given too, supplies the fields it does not map; docs/operator-config.md",
    )
    group.add_argument(
        "--kueue-cr-from-cluster",
        action="store_true",
        help=f"read the cluster-scoped {KIND} object {NAME!r} ({API_VERSION}) from the cluster and watch it",
    )
    parser.add_argument(
        "--kueue-cr-poll-interval",
        type=_seconds,
        default=DEFAULT_POLL_INTERVAL,
        metavar="SECONDS",
        help=f"how often --kueue-cr's file is checked for changes (default {DEFAULT_POLL_INTERVAL:g})",
    )


def build_parser(program: Program) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {program.name}", description=program.description)
    parser.add_argument("--kubeconfig", help="kubeconfig file; in-cluster credentials when omitted")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")
    parser.add_argument("--config", help="a config.kueue.x-k8s.io/v1beta1 Configuration YAML file")
    add_operator_arguments(parser)
    parser.add_argument("--metrics-bind-address", help="overrides metrics.bindAddress (host:port, 0 = off)")
    add_metrics_arguments(parser)
    parser.add_argument(
        "--health-probe-bind-address", help="overrides health.healthProbeBindAddress (host:port, 0 = off)"
    )
    program.add_address_arguments(parser)
    parser.add_argument(
        "--feature-gates",
        metavar="Name=true,Other=false",
        help="Kueue feature gates (instead of the Configuration's featureGates); docs/feature-gates.md",
    )
    program.add_option_arguments(parser)
    parser.add_argument(
        "--event-types",
        type=_event_types,
        default=EVENT_TYPES,
        metavar="Normal,Warning",
        help="the types of Event this process writes (default both; `Warning` leaves out the Normal "
        "ones, such as QuotaReserved and Admitted, to spare the apiservers; docs/admission.md)",
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
    return parser


async def _close(*clients: KubeClient) -> None:
    for client in clients:
        await client.close()


async def amain(program: Program, args: argparse.Namespace) -> int:
    operator = OperatorConfig.from_args(args, program.parse)
    try:
        if operator is None:
            config = with_feature_gate_flag(load_config(args.config, program.parse), args.feature_gates)
        else:  # the Kueue object: a file is checked before connecting, the cluster's object after
            config = with_feature_gate_flag(operator.preliminary(), args.feature_gates)
            if args.kueue_cr:
                config = with_feature_gate_flag(await operator.load(), args.feature_gates)
    except ConfigError as exc:
        return program.refuse(exc)
    problem = program.check(config)
    if problem:
        return program.refuse(problem)
    try:
        kube, events_kube = await load_clients(args.kubeconfig, args.context, config.qps, config.burst)
    except Exception as exc:
        return program.refuse(f"cannot load cluster credentials: {exc}")
    if operator is not None and args.kueue_cr_from_cluster:
        try:
            config = with_feature_gate_flag(await operator.load(kube), args.feature_gates)
        except Exception as exc:
            await _close(kube, events_kube)
            return program.refuse(exc)
    problem = addresses_problem(
        args.metrics_bind_address or config.metrics_bind_address,
        args.health_probe_bind_address or config.health_probe_bind_address,
        MetricsServing.from_args(args),
    )
    if problem:
        await _close(kube, events_kube)
        return program.refuse(problem)
    log = structlog.get_logger(program.name)
    for warning in config.warnings:
        log.warning("configuration", warning=warning)
    with contextlib.ExitStack() as stack:
        try:
            serve = stack.enter_context(program.build(args, kube, events_kube, config))
        except StartupError as exc:
            await _close(kube, events_kube)
            return program.refuse(exc)
        restart = False

        async def run() -> None:
            nonlocal restart
            if operator is None:
                await serve()
            else:  # until the Kueue object maps to another Configuration
                restart = await operator.run_until_changed(serve, kube)

        code = await run_until_signalled(run, [kube, events_kube], program.leadership_lost)
    return RESTART if restart else code


def main(program: Program, argv: list[str] | None = None) -> int:
    args = build_parser(program).parse_args(argv)
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        return program.refuse(f"--kubeconfig {args.kubeconfig}: no such file")
    problem = MetricsServing.from_args(args).problem()
    if problem:
        return program.refuse(problem)
    setup_logging(args.log_level, json=args.log_format == "json")
    try:
        code = run_on(args.event_loop, amain(program, args))
    except KeyboardInterrupt:
        return 0
    if code == RESTART:  # the Kueue object's Configuration changed: start again with the same argv
        try:
            reexec(program.name, argv)
        except OSError as exc:
            print(f"{program.name}: cannot restart: {exc}", file=sys.stderr)
            return 1
    return code
