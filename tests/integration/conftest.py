"""Fixtures for integration tests: an async client on the manager cluster and a throwaway namespace."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from kube_runtime.client import KubeClient, NotFound
from kueue_domain import api


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
    # The agent that would release Workload finalizers stopped with the test: without this the
    # namespace stays Terminating and its admitted Workloads linger for later tests' agents.
    items, _ = await kube.list(api.WORKLOAD, namespace=name)
    for wl in items:
        if wl["metadata"].get("finalizers"):
            with contextlib.suppress(NotFound):
                await kube.patch_merge(
                    api.WORKLOAD, wl["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace=name
                )
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
