"""`python -m manager --kubeconfig PATH --config PATH`: the MultiKueue federation manager."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import structlog

from kube_runtime import features
from kube_runtime.httpserver import MetricsServing, add_metrics_arguments, addresses_problem
from kube_runtime.logging import setup_logging
from kube_runtime.process import load_clients, run_until_signalled
from kueue_domain.config import ConfigError, with_feature_gate_flag
from kueue_domain.operator_config import RESTART, OperatorConfig, add_arguments, reexec
from manager.config import load_manager_config, parse_manager_config
from manager.manager import LeadershipLost, Manager

log = structlog.get_logger("manager")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m manager",
        description="MultiKueue: dispatch Workloads from this cluster to worker clusters.",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file; in-cluster credentials when omitted")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")
    parser.add_argument("--config", help="a config.kueue.x-k8s.io/v1beta1 Configuration YAML file")
    add_arguments(parser)
    parser.add_argument("--metrics-bind-address", help="overrides metrics.bindAddress (host:port, 0 = off)")
    add_metrics_arguments(parser)
    parser.add_argument(
        "--health-probe-bind-address", help="overrides health.healthProbeBindAddress (host:port, 0 = off)"
    )
    parser.add_argument(
        "--feature-gates",
        metavar="Name=true,Other=false",
        help="Kueue feature gates (instead of the Configuration's featureGates); docs/feature-gates.md",
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")
    parser.add_argument("--log-format", choices=("console", "json"), default="console")
    return parser


async def amain(args: argparse.Namespace) -> int:
    operator = OperatorConfig.from_args(args, parse_manager_config)
    try:
        if operator is None:
            config = with_feature_gate_flag(load_manager_config(args.config), args.feature_gates)
        else:  # the Kueue object: a file is checked before connecting, the cluster's object after
            config = with_feature_gate_flag(operator.preliminary(), args.feature_gates)
            if args.kueue_cr:
                config = with_feature_gate_flag(await operator.load(), args.feature_gates)
    except ConfigError as exc:
        print(f"manager: {exc}", file=sys.stderr)
        return 2
    if not config.features.enabled(features.MULTIKUEUE):
        print(
            "manager: the MultiKueue feature gate is off: there is nothing for the manager to run",
            file=sys.stderr,
        )
        return 2
    try:
        kube, events_kube = await load_clients(args.kubeconfig, args.context, config.qps, config.burst)
    except Exception as exc:
        print(f"manager: cannot load cluster credentials: {exc}", file=sys.stderr)
        return 2
    if operator is not None and args.kueue_cr_from_cluster:
        try:
            config = with_feature_gate_flag(await operator.load(kube), args.feature_gates)
        except Exception as exc:
            print(f"manager: {exc}", file=sys.stderr)
            await kube.close()
            await events_kube.close()
            return 2
    problem = addresses_problem(
        args.metrics_bind_address or config.metrics_bind_address,
        args.health_probe_bind_address or config.health_probe_bind_address,
        MetricsServing.from_args(args),
    )
    if problem:
        print(f"manager: {problem}", file=sys.stderr)
        await kube.close()
        await events_kube.close()
        return 2
    for warning in config.warnings:
        log.warning("configuration", warning=warning)
    try:
        manager = Manager(
            kube,
            config,
            metrics_bind_address=args.metrics_bind_address,
            health_bind_address=args.health_probe_bind_address,
            metrics_serving=MetricsServing.from_args(args),
            events_kube=events_kube,
        )
    except ValueError as exc:
        print(f"manager: {exc}", file=sys.stderr)
        return 2
    restart = False

    async def run() -> None:
        nonlocal restart
        if operator is None:
            await manager.run()
        else:  # until the Kueue object maps to another Configuration
            restart = await operator.run_until_changed(manager.run, kube)

    code = await run_until_signalled(run, [kube, events_kube], LeadershipLost)
    return RESTART if restart else code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        print(f"manager: --kubeconfig {args.kubeconfig}: no such file", file=sys.stderr)
        return 2
    problem = MetricsServing.from_args(args).problem()
    if problem:
        print(f"manager: {problem}", file=sys.stderr)
        return 2
    setup_logging(args.log_level, json=args.log_format == "json")
    try:
        code = asyncio.run(amain(args))
    except KeyboardInterrupt:
        return 0
    if code == RESTART:  # the Kueue object's Configuration changed: start again with the same argv
        try:
            reexec("manager", argv)
        except OSError as exc:
            print(f"manager: cannot restart: {exc}", file=sys.stderr)
            return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
