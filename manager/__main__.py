"""`python -m manager --kubeconfig PATH --config PATH`: the MultiKueue federation manager."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

import structlog

from kube_runtime.client import KubeClient
from kube_runtime.logging import setup_logging
from manager.config import load_manager_config
from manager.manager import LeadershipLost, Manager
from worker_agent.config import ConfigError

log = structlog.get_logger("manager")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m manager",
        description="MultiKueue: dispatch Workloads from this cluster to worker clusters.",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file; in-cluster credentials when omitted")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")
    parser.add_argument("--config", help="a config.kueue.x-k8s.io/v1beta1 Configuration YAML file")
    parser.add_argument("--metrics-bind-address", help="overrides metrics.bindAddress (host:port, 0 = off)")
    parser.add_argument(
        "--health-probe-bind-address", help="overrides health.healthProbeBindAddress (host:port, 0 = off)"
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")
    parser.add_argument("--log-format", choices=("console", "json"), default="console")
    return parser


async def _client(args: argparse.Namespace, qps: float, burst: int) -> KubeClient:
    if args.kubeconfig:
        return await KubeClient.from_kubeconfig_file(
            args.kubeconfig, context=args.context, qps=qps, burst=burst
        )
    return await KubeClient.in_cluster(qps=qps, burst=burst)


async def amain(args: argparse.Namespace) -> int:
    try:
        config = load_manager_config(args.config)
    except ConfigError as exc:
        print(f"manager: {exc}", file=sys.stderr)
        return 2
    for warning in config.warnings:
        log.warning("configuration", warning=warning)
    try:
        kube = await _client(args, config.qps, config.burst)
        events_kube = await _client(args, config.qps, config.burst)
    except Exception as exc:
        print(f"manager: cannot load cluster credentials: {exc}", file=sys.stderr)
        return 2
    try:
        manager = Manager(
            kube,
            config,
            metrics_bind_address=args.metrics_bind_address,
            health_bind_address=args.health_probe_bind_address,
            events_kube=events_kube,
        )
    except ValueError as exc:
        print(f"manager: {exc}", file=sys.stderr)
        return 2
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: task.cancel() if task else None)
    try:
        await manager.run()
    except asyncio.CancelledError:
        log.info("stopped")
        return 0
    except LeadershipLost:
        return 1
    finally:
        await kube.close()
        await events_kube.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        print(f"manager: --kubeconfig {args.kubeconfig}: no such file", file=sys.stderr)
        return 2
    setup_logging(args.log_level, json=args.log_format == "json")
    try:
        return asyncio.run(amain(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
