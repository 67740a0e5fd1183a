"""`python -m worker_agent --kubeconfig PATH --config PATH`: the per-cluster admission engine."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import structlog

from kube_runtime.httpserver import MetricsServing, add_metrics_arguments, addresses_problem
from kube_runtime.logging import setup_logging
from kube_runtime.process import load_clients, run_until_signalled
from kueue_domain.config import ConfigError, load_config, with_feature_gate_flag
from kueue_domain.operator_config import RESTART, OperatorConfig, add_arguments, reexec
from worker_agent.agent import Agent, LeadershipLost
from worker_agent.visibility import DEFAULT_BIND_ADDRESS as DEFAULT_VISIBILITY_BIND_ADDRESS

log = structlog.get_logger("worker_agent")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m worker_agent",
        description="Kueue v1beta1 admission (queues, quota, cohorts, preemption) for one cluster.",
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
        "--visibility-bind-address",
        default=DEFAULT_VISIBILITY_BIND_ADDRESS,
        help="where the visibility API (visibility.kueue.x-k8s.io, behind the kube-apiserver's "
        f"aggregation) listens, host:port (default {DEFAULT_VISIBILITY_BIND_ADDRESS}, 0 = off); "
        "docs/visibility.md",
    )
    parser.add_argument(
        "--feature-gates",
        metavar="Name=true,Other=false",
        help="Kueue feature gates (instead of the Configuration's featureGates); docs/feature-gates.md",
    )
    parser.add_argument(
        "--webhooks-only",
        action="store_true",
        help="serve only the webhooks (CRD conversion at /convert, admission without cache lookups); "
        "run no controllers",
    )
    parser.add_argument(
        "--decision-log",
        metavar="PATH",
        help="append one JSON line per scheduling cycle (heads admitted, preempted and left pending, "
        "with reasons and messages) and per retry of parked workloads; docs/admission.md",
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")
    parser.add_argument("--log-format", choices=("console", "json"), default="console")
    return parser


async def amain(args: argparse.Namespace) -> int:
    operator = OperatorConfig.from_args(args)
    try:
        if operator is None:
            config = with_feature_gate_flag(load_config(args.config), args.feature_gates)
        else:  # the Kueue object: a file is checked before connecting, the cluster's object after
            config = operator.preliminary()
            if args.kueue_cr:
                config = await operator.load()
    except ConfigError as exc:
        print(f"worker_agent: {exc}", file=sys.stderr)
        return 2
    try:
        kube, events_kube = await load_clients(args.kubeconfig, args.context, config.qps, config.burst)
    except Exception as exc:
        print(f"worker_agent: cannot load cluster credentials: {exc}", file=sys.stderr)
        return 2
    if operator is not None:
        try:
            if args.kueue_cr_from_cluster:
                config = await operator.load(kube)
            config = with_feature_gate_flag(config, args.feature_gates)
        except Exception as exc:
            print(f"worker_agent: {exc}", file=sys.stderr)
            await kube.close()
            await events_kube.close()
            return 2
    problem = addresses_problem(
        args.metrics_bind_address or config.metrics_bind_address,
        args.health_probe_bind_address or config.health_probe_bind_address,
        MetricsServing.from_args(args),
    )
    if problem:
        print(f"worker_agent: {problem}", file=sys.stderr)
        await kube.close()
        await events_kube.close()
        return 2
    for warning in config.warnings:
        log.warning("configuration", warning=warning)
    decision_log = None
    if args.decision_log:
        try:  # opened once at start-up, before any controller runs; closed below
            decision_log = open(args.decision_log, "a", buffering=1 << 16)  # noqa: ASYNC230
        except OSError as exc:
            print(f"worker_agent: cannot open --decision-log {args.decision_log}: {exc}", file=sys.stderr)
            return 2
    agent = Agent(
        kube,
        config,
        metrics_bind_address=args.metrics_bind_address,
        health_bind_address=args.health_probe_bind_address,
        metrics_serving=MetricsServing.from_args(args),
        events_kube=events_kube,
        decision_log=decision_log,
        visibility_bind_address=args.visibility_bind_address,
    )
    serve = agent.serve_webhooks_only if args.webhooks_only else agent.run
    restart = False

    async def run() -> None:
        nonlocal restart
        if operator is None:
            await serve()
        else:  # until the Kueue object maps to another Configuration
            restart = await operator.run_until_changed(serve, kube)

    try:
        code = await run_until_signalled(run, [kube, events_kube], LeadershipLost)
    finally:
        if decision_log is not None:
            decision_log.close()
    return RESTART if restart else code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        print(f"worker_agent: --kubeconfig {args.kubeconfig}: no such file", file=sys.stderr)
        return 2
    problem = MetricsServing.from_args(args).problem()
    if problem:
        print(f"worker_agent: {problem}", file=sys.stderr)
        return 2
    setup_logging(args.log_level, json=args.log_format == "json")
    try:
        code = asyncio.run(amain(args))
    except KeyboardInterrupt:
        return 0
    if code == RESTART:  # the Kueue object's Configuration changed: start again with the same argv
        try:
            reexec("worker_agent", argv)
        except OSError as exc:
            print(f"worker_agent: cannot restart: {exc}", file=sys.stderr)
            return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
