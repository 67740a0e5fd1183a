"""Kueue's admission webhooks served by the worker_agent on every replica: defaulting and validation
of batch/v1 Jobs, Pods and LeaderWorkerSets, over HTTPS with self-managed certificates (see
`certs`).

`setup_webhooks(agent)` builds the server from the agent's configuration and informer caches; the
agent starts it right after its health server (`await agent.webhook_server.start()`).
"""

from __future__ import annotations

from typing import Any

from kube_runtime import api
from worker_agent.webhooks.certs import CertManager, FileCerts
from worker_agent.webhooks.common import Lookups
from worker_agent.webhooks.server import WebhookServer

__all__ = ["WebhookServer", "agent_lookups", "make_certificates", "setup_webhooks"]


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
    # the job integrations registered (so call this after setup_integrations).
    owner_informers = {
        informer.resource: informer
        for informer in agent.integration_informers
        if informer.resource in (api.JOB, api.LEADER_WORKER_SET, api.JOB_SET, api.TRAIN_JOB, api.STATEFUL_SET)
        and not informer.label_selector
    }
    return WebhookServer(
        agent.kube,
        config,
        agent_lookups(agent.state),
        certificates,
        clock=agent.clock,
        namespace_labels=agent.state.namespace_labels,
        owner_informers=owner_informers,
        health_servers=agent.servers,
    )
