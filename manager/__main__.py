"""`python -m manager --kubeconfig PATH --config PATH`: the MultiKueue federation manager."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from kube_runtime import features
from kube_runtime.client import KubeClient
from kube_runtime.httpserver import MetricsServing
from kueue_domain import bootstrap
from kueue_domain.bootstrap import Serve, StartupError
from kueue_domain.config import Configuration
from manager.config import parse_manager_config
from manager.manager import LeadershipLost, Manager


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
            metrics_bind_address=args.metrics_bind_address,
            health_bind_address=args.health_probe_bind_address,
            metrics_serving=MetricsServing.from_args(args),
            events_kube=events_kube,
            event_types=args.event_types,
        )
    except ValueError as exc:
        raise StartupError(exc) from exc
    yield manager.run


PROGRAM = bootstrap.Program(
    name="manager",
    description="MultiKueue: dispatch Workloads from this cluster to worker clusters.",
    build=_build,
    leadership_lost=LeadershipLost,
    parse=parse_manager_config,
    check=_check,
)
build_parser = PROGRAM.build_parser
main = PROGRAM.main


if __name__ == "__main__":
    sys.exit(main())
