"""The manager Workload's MultiKueue status: which admission check state on it is ours, and every
write to it (that check's state, the nominations, clusterName, Admitted, Finished), each an apply
from the cached copy that reconciles of the same Workload wait for until the watch shows it."""

from __future__ import annotations

from typing import Any

from kube_runtime.client import KubeClient, NotFound
from kube_runtime.clock import Clock
from kube_runtime.conditions import format_time
from kube_runtime.informer import Informer, object_key
from kube_runtime.ownwrites import OwnWrites
from kueue_domain import api
from kueue_domain import workload as wlutil
from manager.admissioncheck import is_multikueue_check

Obj = dict[str, Any]


class WorkloadStatus:
    def __init__(
        self,
        kube: KubeClient,
        checks: Informer,
        clock: Clock,
        own_writes: OwnWrites,
        *,
        external_nominations: bool = False,
    ) -> None:
        self.kube = kube
        self.checks = checks
        self.clock = clock
        # An external dispatcher owns nominatedClusterNames under its own field manager: our apply
        # cannot drop them, and clusterName may not be set beside them (the CRD's rule).
        self.external_nominations = external_nominations
        # The manager cluster's Workload versions our status writes replaced, until the watch shows them.
        self._own_writes = own_writes

    @property
    def own_writes(self) -> OwnWrites:
        return self._own_writes

    def multikueue_check(self, wl: Obj) -> tuple[Obj, Obj] | None:
        """(AdmissionCheck, its state on `wl`) for the first check state whose check is ours."""
        for state in (wl.get("status") or {}).get("admissionChecks") or ():
            check = self.checks.get(state.get("name", ""))
            if is_multikueue_check(check):
                return check, state
        return None

    def others_ready(self, wl: Obj) -> bool:
        """Whether every admission check on `wl` that is not ours is Ready (§3.4.4 step 2)."""
        return all(
            s.get("state") == api.CHECK_STATE_READY
            for s in (wl.get("status") or {}).get("admissionChecks") or ()
            if not is_multikueue_check(self.checks.get(s.get("name", "")))
        )

    async def set_nominated(self, wl: Obj, nominated: list[str]) -> None:
        updated = wlutil.working_copy(wl)
        updated.setdefault("status", {})["nominatedClusterNames"] = nominated
        await self._apply_status(wl, updated)

    async def write_state(
        self, wl: Obj, state: Obj, new_state: str, message: str, *, keep_time: bool, drop_nominations: bool
    ) -> None:
        """One admission-status apply of our check's state (and, with `drop_nominations`, of the
        nominations gone, unless an external dispatcher owns them)."""
        updated = wlutil.working_copy(wl)
        self._set_state(updated, state["name"], new_state, message, keep_time=keep_time)
        if (
            drop_nominations
            and (updated.get("status") or {}).get("nominatedClusterNames")
            and not self.external_nominations
        ):
            updated["status"].pop("nominatedClusterNames")
        await self._apply_status(wl, updated)

    async def _apply_status(self, wl: Obj, updated: Obj) -> Obj:
        """The admission-status apply of `updated`, made from `wl` (the cached copy), which fails
        with Conflict if `wl` is stale. Until the watch shows the write, reconciles of this Workload
        wait for it instead of writing again from the replaced version (`OwnWrites`)."""
        written = await wlutil.apply_admission_status(self.kube, updated, strict=True)
        self._own_writes.wrote(object_key(wl), wl, written)
        return written

    def _set_state(self, wl: Obj, check_name: str, state: str, message: str, keep_time: bool = False) -> None:
        for entry in wl["status"].get("admissionChecks") or ():
            if entry.get("name") == check_name:
                entry["state"] = state
                entry["message"] = wlutil.truncate_message(message)
                if not keep_time:
                    entry["lastTransitionTime"] = format_time(self.clock.now())

    async def update_check_state(self, wl: Obj, state: Obj, new_state: str, message: str) -> None:
        """updateACS (§2.4): only our check state, under our own field manager, with the old state."""
        body = {
            "apiVersion": api.WORKLOAD.api_version,
            "kind": api.WORKLOAD.kind,
            "metadata": {"name": wl["metadata"]["name"], "namespace": wl["metadata"]["namespace"]},
            "status": {
                "admissionChecks": [
                    {
                        "name": state["name"],
                        "state": new_state,
                        "lastTransitionTime": format_time(self.clock.now()),
                        "message": wlutil.truncate_message(
                            api.acs_update_message(message, state.get("state", ""))
                        ),
                    }
                ]
            },
        }
        version = wl["metadata"].get("resourceVersion")
        if version:
            # Strict: a Retry written over a stale copy (one that misses an eviction meanwhile, which
            # reset the check to Pending and released the quota) would leave the Workload
            # inadmissible for good; the conflict makes us read it again instead.
            body["metadata"]["resourceVersion"] = version
        try:
            await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_MULTIKUEUE, force=True)
        except NotFound:
            return

    async def mark_ready(self, wl: Obj, state: Obj, cluster: str, message: str, became_ready: bool) -> None:
        """One admission-status apply: the check Ready, clusterName set, nominations cleared, and
        Admitted when every other check is Ready too (upstream's manager cluster writes that in a
        second write, from its workload controller; the manager cluster's worker_agent still
        records the Admitted Event and metrics when it sees it)."""
        base = wl
        if self.external_nominations and (wl.get("status") or {}).get("nominatedClusterNames"):
            meta = wl["metadata"]
            base = await self.kube.patch_status_merge(
                api.WORKLOAD, meta["name"], {"status": {"nominatedClusterNames": None}}, meta["namespace"]
            )
        updated = wlutil.working_copy(base)
        self._set_state(updated, state["name"], api.CHECK_STATE_READY, message, keep_time=not became_ready)
        updated["status"]["clusterName"] = cluster
        updated["status"].pop("nominatedClusterNames", None)
        if not wlutil.is_evicted(updated):
            wlutil.sync_admitted_condition(updated, self.clock.now())
        if base is not wl:
            self._own_writes.wrote(object_key(wl), wl, base)
        await self._apply_status(base, updated)

    async def apply_finished(self, wl: Obj, reason: str, message: str) -> None:
        """Finished=True, as upstream writes it: a forced apply of that one condition under a field
        manager of its own, without resourceVersion. The worker_agent's Job integration finishes the
        same Workload when the mirrored Job ends, within moments; a strict apply of the whole status
        here met its write with a 409 about once per Workload."""
        updated = wlutil.status_working_copy(wl)
        wlutil.set_condition(updated, api.WORKLOAD_FINISHED, "True", reason, message, self.clock.now())
        body = wlutil.status_apply_body(
            wl, {"conditions": [wlutil.condition(updated, api.WORKLOAD_FINISHED)]}
        )
        await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_MULTIKUEUE_FINISH, force=True)
