"""Kueue's admission webhooks served by the worker_agent on every replica: defaulting and validation
of batch/v1 Jobs, Pods and LeaderWorkerSets, over HTTPS with self-managed certificates (see
`certs`).

`setup_webhooks(agent)` builds the server from the agent's configuration and informer caches; the
agent starts it right after its health server (`await agent.webhook_server.start()`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kube_runtime.informer import Informer
from kueue_domain import api
from worker_agent.webhooks.certs import CertManager, FileCerts
from worker_agent.webhooks.common import Lookups
from worker_agent.webhooks.server import WebhookServer

__all__ = ["OwnerInformers", "WebhookServer", "agent_lookups", "make_certificates", "setup_webhooks"]

# The owners' kinds the pods' ancestor walk can read from a job integration's informer.
OWNER_KINDS = (
    api.JOB,
    api.LEADER_WORKER_SET,
    api.JOB_SET,
    api.TRAIN_JOB,
    api.APPWRAPPER,
    api.STATEFUL_SET,
)


class OwnerInformers(Mapping[api.Resource, Informer]):
    """The job integrations' unfiltered informers of OWNER_KINDS, by kind, looked up in the agent's
    list when asked: the LeaderWorkerSet, JobSet and TrainJob integrations join that list only
    once the agent has checked that the server serves their kind, after the webhook server was
    built (a copy taken then left their owners to a live GET on every pod admitted)."""

    def __init__(self, informers: Sequence[Informer]) -> None:
        self._informers = informers

    def _current(self) -> dict[api.Resource, Informer]:
        return {i.resource: i for i in self._informers if i.resource in OWNER_KINDS and not i.label_selector}

    def __getitem__(self, resource: api.Resource) -> Informer:
        return self._current()[resource]

    def __iter__(self) -> Iterator[api.Resource]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


def agent_lookups(state: Any) -> Lookups:
    """The webhooks' view of an AdmissionState's informers."""
    informers = (
        state.local_queues,
        state.priority_classes,
        state.cluster_queues,
        state.admission_checks,
        state.namespaces,
    )
    return Lookups(
        local_queues=state.local_queues,
        priority_classes=state.priority_classes,
        cluster_queues=state.cluster_queues,
        admission_checks=state.admission_checks,
        synced=lambda: all(i.has_synced for i in informers),
    )


def make_certificates(agent: Any) -> CertManager | FileCerts:
    """The serving certificates of the webhook and visibility servers (one Secret, one certDir)."""
    config = agent.config
    if config.internal_cert_management:
        return CertManager(agent.kube, config, agent.clock)
    return FileCerts(config)


def setup_webhooks(agent: Any) -> WebhookServer | None:
    """The agent's webhook server, or None when `webhook.port` is 0 (webhooks off)."""
    config = agent.config
    if config.webhook_port == 0:
        return None
    certificates = getattr(agent, "certificates", None) or make_certificates(agent)
    # Owners the ancestor walk can read from a cache instead of the API: the unfiltered informers
    # the job integrations registered, now or later.
    owner_informers = OwnerInformers(agent.integration_informers)
    server = WebhookServer(
        agent.kube,
        config,
        agent_lookups(agent.state),
        certificates,
        clock=agent.clock,
        namespace_labels=agent.state.namespace_labels,
        owner_informers=owner_informers,
        health_servers=agent.servers,
    )
    server.tls_options = config.server_tls
    return server
