"""Fixtures for integration tests: an async client on the manager cluster and a throwaway namespace."""

from __future__ import annotations

import uuid

import pytest

from kube_runtime import api
from kube_runtime.client import KubeClient


@pytest.fixture
async def kube(fleet):
    async with await KubeClient.from_kubeconfig_file(fleet.kubeconfig("manager")) as kube:
        yield kube


@pytest.fixture
async def namespace(kube, request):
    """A fresh namespace named after the test module, deleted afterwards."""
    prefix = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await kube.create(api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await kube.delete(api.NAMESPACE, name)


@pytest.fixture
async def cluster(kube, namespace, fleet):
    """Shortcuts over the test namespace; cluster-scoped objects it creates are deleted afterwards."""
    from admission_kit import Cleanup, Cluster

    cleanup = Cleanup(kube)
    shortcuts = Cluster(kube, namespace, cleanup)
    shortcuts.fleet = fleet
    yield shortcuts
    await cleanup.run()
