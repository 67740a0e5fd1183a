"""`python -m manager --kubeconfig PATH --config PATH`: the MultiKueue federation manager."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from kube_runtime.client import KubeClient
from kueue_domain import bootstrap, features
from kueue_domain.bootstrap import Serve, StartupError
from kueue_domain.config import Configuration
from manager.config import ManagerOptions, parse_manager_config
from manager.liveness import LivenessSettings
from manager.manager import Manager

_LIVENESS = LivenessSettings()


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _add_option_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--worker-liveness-timeout",
        type=_non_negative,
        default=_LIVENESS.timeout,
        metavar="SECONDS",
        help="a worker whose apiserver answers nothing for this long is lost: its MultiKueueCluster "
        f"turns Active=False (default {_LIVENESS.timeout:g}; docs/reliability.md)",
    )
    parser.add_argument(
        "--worker-probe-interval",
        type=_non_negative,
        default=_LIVENESS.probe_interval,
        metavar="SECONDS",
        help="how often each worker's apiserver is probed (GET /livez) and TCP keepalives are sent; "
        f"0 turns the probes off (default {_LIVENESS.probe_interval:g})",
    )


def _options(args: argparse.Namespace) -> ManagerOptions:
    liveness = LivenessSettings(
        timeout=args.worker_liveness_timeout, probe_interval=args.worker_probe_interval
    )
    return ManagerOptions(worker_liveness=liveness)


def _check(config: Configuration) -> str | None:
    if not config.features.enabled(features.MULTIKUEUE):
        return "the MultiKueue feature gate is off: there is nothing for the manager to run"
    return None


@contextlib.contextmanager
def _build(
    args: argparse.Namespace, kube: KubeClient, events_kube: KubeClient, config: Configuration
) -> Iterator[Serve]:
    try:
        manager = Manager(
            kube,
            config,
            options=_options(args),
            **bootstrap.shell_options(args, events_kube),
        )
    except ValueError as exc:
        raise StartupError(exc) from exc
    yield manager.run


PROGRAM = bootstrap.Program(
    name="manager",
    description="MultiKueue: dispatch Workloads from this cluster to worker clusters.",
    build=_build,
    parse=parse_manager_config,
    check=_check,
    add_option_arguments=_add_option_arguments,
)
build_parser = PROGRAM.build_parser
main = PROGRAM.main


if __name__ == "__main__":
    sys.exit(main())
