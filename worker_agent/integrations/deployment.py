"""Deployments: upstream's integration is its webhook alone (worker_agent/webhooks/deployment.py),
which hands the pods to the pod integration, one Workload per pod. Nothing to reconcile here."""

from __future__ import annotations

from typing import Any


class DeploymentIntegration:
    name = "deployment"

    def __init__(self, agent: Any) -> None:
        self.agent = agent
