"""`python -m worker_agent --kubeconfig PATH --config PATH`: the per-cluster admission engine."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from kube_runtime.client import KubeClient
from kueue_domain import bootstrap
from kueue_domain.bootstrap import Serve, StartupError
from kueue_domain.config import Configuration
from worker_agent.agent import Agent
from worker_agent.visibility import DEFAULT_BIND_ADDRESS as DEFAULT_VISIBILITY_BIND_ADDRESS


def _add_address_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--visibility-bind-address",
        default=None,
        help="where the visibility API (visibility.kueue.x-k8s.io, behind the kube-apiserver's "
        "aggregation) listens, host:port (default: the Configuration's visibilityServer, else "
        f"{DEFAULT_VISIBILITY_BIND_ADDRESS}; 0 = off); docs/visibility.md",
    )


def _add_option_arguments(parser: argparse.ArgumentParser) -> None:
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


@contextlib.contextmanager
def _build(
    args: argparse.Namespace, kube: KubeClient, events_kube: KubeClient, config: Configuration
) -> Iterator[Serve]:
    decision_log = None
    if args.decision_log:
        try:  # opened once at start-up, before any controller runs; closed when the run ends
            decision_log = open(args.decision_log, "a", buffering=1 << 16)
        except OSError as exc:
            raise StartupError(f"cannot open --decision-log {args.decision_log}: {exc}") from exc
    try:
        agent = Agent(
            kube,
            config,
            decision_log=decision_log,
            visibility_bind_address=args.visibility_bind_address
            or config.visibility_bind_address
            or DEFAULT_VISIBILITY_BIND_ADDRESS,
            **bootstrap.shell_options(args, events_kube),
        )
        yield agent.serve_webhooks_only if args.webhooks_only else agent.run
    finally:
        if decision_log is not None:
            decision_log.close()


PROGRAM = bootstrap.Program(
    name="worker_agent",
    description="Kueue v1beta1 admission (queues, quota, cohorts, preemption) for one cluster.",
    build=_build,
    add_address_arguments=_add_address_arguments,
    add_option_arguments=_add_option_arguments,
)
build_parser = PROGRAM.build_parser
main = PROGRAM.main


if __name__ == "__main__":
    sys.exit(main())
