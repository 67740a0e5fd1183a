"""The fleet as the plugin reaches it: the manager cluster from the user's kubeconfig, each worker
through the kubeconfig the manager itself uses (the MultiKueueCluster's Secret, which the user must
be allowed to read). A worker that cannot be reached is reported, never fatal."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from kube_runtime.client import ApiError, KubeClient, KubeClientError, NotFound
from kube_runtime.credentials import CredentialsError
from kueue_domain import api
from manager.kubeconfig import CredentialError, kubeconfig_from_secret

Obj = dict[str, Any]

EVENT = api.Resource(api.CORE_GROUP, "v1", "events", "Event", True)
SERVICE_ACCOUNT = api.Resource(api.CORE_GROUP, "v1", "serviceaccounts", "ServiceAccount", True)
CLUSTER_ROLE = api.Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDING = api.Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
JOB_SET = api.Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True)
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1"

# A CLI waits on nobody for long: one attempt per GET, short timeouts.
CLIENT_OPTIONS = {"request_timeout": 10.0, "connect_timeout": 5.0, "get_attempts": 1}


def describe_error(e: BaseException) -> str:
    if isinstance(e, ApiError):
        return f"{e.status.get('reason') or 'Error'}: {e.status.get('message') or e}"
    return str(e) or type(e).__name__


@dataclasses.dataclass
class Worker:
    """One MultiKueueCluster and, when it could be reached, a client for its worker."""

    name: str
    cluster: Obj
    client: KubeClient | None = None
    error: str = ""


class Fleet:
    def __init__(self, manager: KubeClient, secrets_namespace: str) -> None:
        self.manager = manager
        self.secrets_namespace = secrets_namespace
        self.workers: dict[str, Worker] = {}

    @classmethod
    async def connect(cls, kubeconfig: str | None, context: str | None, secrets_namespace: str) -> Fleet:
        path = kubeconfig or default_kubeconfig()
        return cls(await KubeClient.from_kubeconfig_file(path, context, **CLIENT_OPTIONS), secrets_namespace)

    async def close(self) -> None:
        for w in self.workers.values():
            if w.client is not None:
                await w.client.close()
        await self.manager.close()

    async def multikueue_clusters(self) -> list[Obj]:
        items, _ = await self.manager.list(api.MULTIKUEUE_CLUSTER)
        return sorted(items, key=lambda c: c["metadata"]["name"])

    async def multikueue_checks(self) -> list[str]:
        """Names of the AdmissionChecks of the MultiKueue controller."""
        items, _ = await self.manager.list(api.ADMISSION_CHECK)
        return [
            c["metadata"]["name"]
            for c in items
            if (c.get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME
        ]

    async def connect_workers(self) -> dict[str, Worker]:
        clusters = await self.multikueue_clusters()
        workers = await asyncio.gather(*(self._worker(mkc) for mkc in clusters))
        self.workers = {w.name: w for w in workers}
        return self.workers

    async def _worker(self, mkc: Obj) -> Worker:
        name = mkc["metadata"]["name"]
        spec = mkc.get("spec") or {}
        ref = spec.get("kubeConfig") or {}
        if (spec.get("clusterProfileRef") or {}).get("name"):
            return Worker(name, mkc, error="reached through a ClusterProfile: not readable from here")
        if (ref.get("locationType") or "Secret") != "Secret":
            return Worker(name, mkc, error=f"its kubeconfig is the file {ref.get('location')} on the manager")
        secret_name = ref.get("location") or ""
        try:
            secret = await self.manager.get(api.SECRET, secret_name, self.secrets_namespace)
        except NotFound:
            secret = None
        except ApiError as e:
            return Worker(
                name,
                mkc,
                error=f"cannot read Secret {self.secrets_namespace}/{secret_name}: {describe_error(e)}",
            )
        except KubeClientError as e:
            return Worker(name, mkc, error=describe_error(e))
        try:
            config = yaml.safe_load(kubeconfig_from_secret(secret, secret_name))
            client = await KubeClient.from_kubeconfig_dict(config, **CLIENT_OPTIONS)
        except (CredentialError, CredentialsError, yaml.YAMLError, ValueError, TypeError) as e:
            return Worker(name, mkc, error=f"Secret {self.secrets_namespace}/{secret_name}: {e}")
        return Worker(name, mkc, client=client)

    async def pending_positions(self, worker: Worker, namespace: str, local_queue: str) -> dict[str, int]:
        """Workload name -> its position in its ClusterQueue, from the worker's visibility API
        (empty when the worker does not serve it)."""
        if worker.client is None:
            return {}
        path = f"{VISIBILITY}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
        try:
            summary = await worker.client.request("GET", path)
        except KubeClientError:
            return {}
        return {
            item["metadata"]["name"]: int(item.get("positionInClusterQueue", 0))
            for item in summary.get("items") or ()
        }


def default_kubeconfig() -> str:
    """$KUBECONFIG's first file, else ~/.kube/config, as kubectl picks it."""
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), "")
    return first or str(Path.home() / ".kube" / "config")
