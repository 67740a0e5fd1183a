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
import dataclasses
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import structlog

from kube_runtime.client import KubeClient
from kube_runtime.httpserver import MetricsServing, add_metrics_arguments, addresses_problem
from kube_runtime.process import (
    StartupError,
    add_client_arguments,
    add_runtime_arguments,
    close_clients,
    load_clients,
    positive_seconds,
    refuse,
    run_main,
    run_until_signalled,
    start_problem,
)
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
        return refuse(self.name, message)

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


def shell_options(args: argparse.Namespace, events_kube: KubeClient) -> dict[str, Any]:
    """The process shell's options the shared flags set (process_shell takes them)."""
    return {
        "metrics_bind_address": args.metrics_bind_address,
        "health_bind_address": args.health_probe_bind_address,
        "metrics_serving": MetricsServing.from_args(args),
        "events_kube": events_kube,
        "event_types": args.event_types,
    }


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
    serving = options.pop("metrics_serving", None) or MetricsServing()
    if config.server_tls is not None:
        serving = dataclasses.replace(serving, tls=config.server_tls)
    return ProcessShell(
        kube,
        metrics_serving=serving,
        metrics_bind_address=metrics_bind_address or config.metrics_bind_address,
        health_bind_address=health_bind_address or config.health_probe_bind_address,
        election=leader_election(config),
        log=log,
        **options,
    )


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
        type=positive_seconds,
        default=DEFAULT_POLL_INTERVAL,
        metavar="SECONDS",
        help=f"how often --kueue-cr's file is checked for changes (default {DEFAULT_POLL_INTERVAL:g})",
    )


def build_parser(program: Program) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {program.name}", description=program.description)
    add_client_arguments(parser)
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
    add_runtime_arguments(
        parser,
        "the types of Event this process writes (default both; `Warning` leaves out the Normal "
        "ones, such as QuotaReserved and Admitted, to spare the apiservers; docs/admission.md)",
    )
    return parser


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
            await close_clients(kube, events_kube)
            return program.refuse(exc)
    problem = addresses_problem(
        args.metrics_bind_address or config.metrics_bind_address,
        args.health_probe_bind_address or config.health_probe_bind_address,
        MetricsServing.from_args(args),
    )
    if problem:
        await close_clients(kube, events_kube)
        return program.refuse(problem)
    log = structlog.get_logger(program.name)
    for warning in config.warnings:
        log.warning("configuration", warning=warning)
    with contextlib.ExitStack() as stack:
        try:
            serve = stack.enter_context(program.build(args, kube, events_kube, config))
        except StartupError as exc:
            await close_clients(kube, events_kube)
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
    problem = start_problem(args)
    if problem:
        return program.refuse(problem)
    return run_main(program.name, argv, args, amain(program, args), restart=RESTART)
