"""RayService adapter (ray.io/v1; upstream's ray multikueue adapter for RayServices): the admitting
worker gets a copy of the manager's RayService (metadata labels and annotations, the whole spec)
with the MultiKueue origin label and the prebuilt Workload name, and `spec.managedBy` cleared so
that the worker's KubeRay operator runs it; the worker's whole RayService status (conditions,
activeServiceStatus, pendingServiceStatus, serviceStatus, ...) is mirrored onto the manager's; the
copy is deleted when the Workload is evicted, is garbage-collected or the RayService is deleted. A
RayService never finishes by itself. A later edit of the manager's `serveConfigV2` is forwarded to
the same copy in place, without a new admission (upstream's MultiKueueRemoteSpecSync, on by
default in v0.19); other spec changes are not."""

from __future__ import annotations

import datetime as dt
import functools
from typing import TYPE_CHECKING, Any

from kueue_domain import api
from manager.adapters.mirrored import MirroredStatusAdapter, spec_copy

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]
SERVE_CONFIG = "serveConfigV2"


def ray_service_finished(ray_service: Obj) -> bool:
    return False


remote_ray_service_copy = functools.partial(spec_copy, api.RAY_SERVICE)  # (local, workload_name, origin)


class RayServiceAdapter(MirroredStatusAdapter):
    resource = api.RAY_SERVICE
    jobs_status_field = ""
    cached_spec_drops = ("rayClusterConfig",)  # serveConfigV2 is compared with the manager's
    remote_copy = staticmethod(remote_ray_service_copy)
    finished = staticmethod(ray_service_finished)

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        """As for every mirrored kind, then the manager's serveConfigV2 forwarded to the copy when
        it differs (RemoteSpecSyncer: NeedsSync, Apply)."""
        again = await super().sync_job(remote, namespace, name, workload_name)
        local = self.local_object(namespace, name)
        cached = remote.cache(self.resource)
        copy_ = cached.get(f"{namespace}/{name}") if cached is not None else None
        wanted = (local or {}).get("spec", {}).get(SERVE_CONFIG)
        if copy_ is not None and wanted is not None and (copy_.get("spec") or {}).get(SERVE_CONFIG) != wanted:
            await remote.kube.patch_merge(self.resource, name, {"spec": {SERVE_CONFIG: wanted}}, namespace)
        return again

    def released_status_patch(self, local: Obj) -> Obj | None:
        """A RayService counts as active while it is Ready: with its copy gone, the manager's says
        it is not."""
        conditions = (local.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return None
        kept = [c for c in conditions if c.get("type") != "Ready"]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {"type": "Ready", "status": "False", "reason": "Suspended", "message": "runs on no worker"}
        ready["lastTransitionTime"] = now
        return {"status": {"conditions": [*kept, ready]}}
