"""The `kueue.x-k8s.io/provisioning-request` admission check controller (upstream Kueue v0.19.2's
provisioning controller): for a Workload holding quota whose ClusterQueue has such a check, it
creates PodTemplates and a cluster-autoscaler ProvisioningRequest (`autoscaling.x-k8s.io/v1`), and
turns the request's conditions into the check's state; it deletes the requests of a finished
Workload, and of an evicted one with CleanupProvisioningRequestsOnEviction. It also reports each such
AdmissionCheck's `Active` condition from its ProvisioningRequestConfig.

The decisions are worker_agent.engine.provisioning's; this module reads the caches and writes.
Everything waits until the server serves ProvisioningRequests (no cluster-autoscaler CRD: nothing
runs, as upstream skips the controller then, but ours starts when the CRD appears).
"""

from __future__ import annotations

import copy
from typing import Any

import structlog

from kube_runtime.client import AlreadyExists, NotFound
from kube_runtime.conditions import find_status_condition, set_status_condition
from kube_runtime.controller import Controller
from kube_runtime.informer import Informer, object_key
from kueue_domain import api, features
from kueue_domain import workload as wlstatus
from worker_agent.engine import provisioning as prov
from worker_agent.integrations.framework import merge_into_template

log = structlog.get_logger("provisioning")

Obj = dict[str, Any]
INDEX_OWNER = "owner"  # ProvisioningRequests by "<namespace>/<owner name>"
OWNER_API_VERSION = f"{api.GROUP}/v1beta2"


def _owner_index(obj: Obj) -> tuple[str, ...]:
    ns = obj["metadata"].get("namespace", "")
    return tuple(f"{ns}/{r['name']}" for r in obj["metadata"].get("ownerReferences") or ())


def is_provisioning_check(check: Obj | None) -> bool:
    return ((check or {}).get("spec") or {}).get("controllerName") == api.PROVISIONING_REQUEST_CONTROLLER_NAME


def _limits_as_requests(spec: Obj) -> None:
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or ():
            res = c.get("resources") or {}
            if res.get("limits"):
                c["resources"] = {**res, "requests": {**res["limits"], **(res.get("requests") or {})}}
    res = spec.get("resources")
    if res and res.get("limits"):
        spec["resources"] = {**res, "requests": {**res["limits"], **(res.get("requests") or {})}}


class ProvisioningController:
    def __init__(self, agent: Any) -> None:
        self.kube = agent.kube
        self.state = agent.state
        self.clock = agent.clock
        self.cleanup_on_eviction = agent.config.features.enabled(
            features.CLEANUP_PROVISIONING_REQUESTS_ON_EVICTION
        )
        self.recorder = agent.shell.recorder(api.PROVISIONING_EVENT_SOURCE)
        self.requests = Informer(self.kube, api.PROVISIONING_REQUEST)
        self.requests.add_index(INDEX_OWNER, _owner_index)
        self.configs = Informer(self.kube, api.PROVISIONING_REQUEST_CONFIG)
        self.workload_ctl = Controller("provisioning-workload", self.reconcile_workload, clock=self.clock)
        self.check_ctl = Controller("provisioning-admissioncheck", self.reconcile_check, clock=self.clock)
        self._watch()
        agent.register(
            [self.requests, self.configs],
            [self.workload_ctl, self.check_ctl],
            on_leading=self._enqueue_all,
            requires=(api.PROVISIONING_REQUEST, api.PROVISIONING_REQUEST_CONFIG),
        )

    # -- what triggers a reconcile -----------------------------------------------------------

    def _watch(self) -> None:
        def workload(obj: Obj, *_: Any) -> None:
            new = _[-1] if _ else obj
            if self._relevant(new):
                self.workload_ctl.enqueue(object_key(new))

        self.state.workloads.add_handler(on_add=workload, on_update=workload)

        def request(obj: Obj, *_: Any) -> None:
            for key in _owner_index(_[-1] if _ else obj):
                self.workload_ctl.enqueue(key)

        self.requests.add_handler(on_add=request, on_update=request, on_delete=request)

        def check(obj: Obj, *_: Any) -> None:
            new = _[-1] if _ else obj
            if is_provisioning_check(new) or is_provisioning_check(obj):
                self.check_ctl.enqueue(new["metadata"]["name"])
                self._enqueue_users(new["metadata"]["name"])

        self.state.admission_checks.add_handler(on_add=check, on_update=check, on_delete=check)

        def config(obj: Obj, *_: Any) -> None:
            for name in self._checks_using(obj["metadata"]["name"]):
                self.check_ctl.enqueue(name)
                self._enqueue_users(name)

        self.configs.add_handler(on_add=config, on_update=config, on_delete=config)

    def _relevant(self, wl: Obj) -> bool:
        if any(
            is_provisioning_check(self.state.admission_checks.get(s["name"]))
            for s in wlstatus.check_states(wl)
        ):
            return True
        return bool(self.requests.store.index_count(INDEX_OWNER, object_key(wl)))

    def _checks_using(self, config_name: str) -> list[str]:
        return [
            c["metadata"]["name"]
            for c in self.state.admission_checks.list()
            if is_provisioning_check(c)
            and ((c.get("spec") or {}).get("parameters") or {}).get("name") == config_name
        ]

    def _enqueue_users(self, check_name: str) -> None:
        for wl in self.state.workloads.list():
            if any(s["name"] == check_name for s in wlstatus.check_states(wl)):
                self.workload_ctl.enqueue(object_key(wl))

    def _enqueue_all(self) -> None:
        for check in self.state.admission_checks.list():
            if is_provisioning_check(check):
                self.check_ctl.enqueue(check["metadata"]["name"])
        for wl in self.state.workloads.list():
            if self._relevant(wl):
                self.workload_ctl.enqueue(object_key(wl))

    # -- the AdmissionCheck's Active condition -----------------------------------------------

    async def reconcile_check(self, name: str) -> None:
        check = self.state.admission_checks.get(name)
        if check is None or not is_provisioning_check(check):
            return
        status, reason, message = prov.active_condition(check, self.configs.get)
        current = find_status_condition((check.get("status") or {}).get("conditions"), api.CONDITION_ACTIVE)
        if current is not None and current.get("status") == status:
            return  # as upstream: only a change of status is written
        updated = copy.deepcopy(check)
        condition = {
            "type": api.CONDITION_ACTIVE,
            "status": status,
            "reason": reason,
            "message": message,
            "observedGeneration": int(check["metadata"].get("generation") or 0),
        }
        set_status_condition(
            updated.setdefault("status", {}).setdefault("conditions", []), condition, self.clock.now()
        )
        try:
            await self.kube.replace_status(api.ADMISSION_CHECK, updated)
        except NotFound:
            return

    # -- Workloads -----------------------------------------------------------------------------

    async def reconcile_workload(self, key: str) -> None:
        wl = self.state.workloads.get(key)
        if wl is None:
            return
        finished, evicted = wlstatus.is_finished(wl), wlstatus.is_evicted(wl)
        if not wlstatus.has_quota_reservation(wl) and not finished and not evicted:
            return
        owned = self.requests.by_index(INDEX_OWNER, key)
        if finished or (evicted and self.cleanup_on_eviction):
            await self._delete_unused(owned, {})
            return
        if evicted:
            return
        configs: dict[str, Obj | None] = {}
        for state in wlstatus.check_states(wl):
            check = self.state.admission_checks.get(state["name"])
            if is_provisioning_check(check):
                assert check is not None
                configs[state["name"]] = prov.config_for_check(check, self.configs.get)[0]
        active = prov.active_or_last(wl, configs, owned)
        wl = await self._sync_check_states(wl, configs, active)
        await self._delete_unused(owned, active)
        await self._sync_requests(wl, configs, active)

    async def _delete_unused(self, owned: list[Obj], active: dict[str, Obj]) -> None:
        keep = {pr["metadata"]["name"] for pr in active.values()}
        for pr in owned:
            if pr["metadata"]["name"] not in keep:
                try:
                    await self.kube.delete(
                        api.PROVISIONING_REQUEST,
                        pr["metadata"]["name"],
                        namespace=pr["metadata"]["namespace"],
                    )
                except NotFound:
                    pass

    async def _sync_check_states(
        self, wl: Obj, configs: dict[str, Obj | None], active: dict[str, Obj]
    ) -> Obj:
        """Write the checks' states the requests give; returns the Workload as written."""
        now = self.clock.now()
        changed: list[Obj] = []
        events: list[str] = []
        for state in wlstatus.check_states(wl):
            if state["name"] not in configs:
                continue
            new = prov.next_check_state(wl, state, configs[state["name"]], active.get(state["name"]))
            if new is None or not prov.state_changed(state, new):
                continue
            new["message"] = wlstatus.truncate_message(new.get("message", ""))
            changed.append(prov.with_transition_time(state, new, now))
            if new["state"] != state.get("state"):
                events.append(
                    api.admission_check_updated_message(
                        state["name"], state.get("state", ""), new["state"], new["message"]
                    )
                )
        if not changed:
            return wl
        written = await self._apply_checks(wl, changed)
        for message in events:
            await self.recorder.normal(
                wl, api.EVENT_ADMISSION_CHECK_UPDATED, api.EVENT_ADMISSION_CHECK_UPDATED, message
            )
        return written

    async def _apply_checks(self, wl: Obj, states: list[Obj]) -> Obj:
        meta = wl["metadata"]
        body = {
            "apiVersion": api.WORKLOAD.api_version,
            "kind": api.WORKLOAD.kind,
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "resourceVersion": meta["resourceVersion"],
            },
            "status": {"admissionChecks": states},
        }
        return await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_PROVISIONING, force=True)

    async def _sync_requests(self, wl: Obj, configs: dict[str, Obj | None], active: dict[str, Obj]) -> None:
        states = {s["name"]: s for s in wlstatus.check_states(wl)}
        for check, config in configs.items():
            if config is None or not prov.request_is_needed(wl, config):
                continue
            state = states.get(check)
            if state is not None and state.get("state") == api.CHECK_STATE_READY:
                continue
            pr = active.get(check)
            attempt = prov.next_attempt(wl, state, pr, check)
            if attempt is not None:
                pr = await self._create_request(wl, state, check, config, attempt)
                if pr is None:
                    continue
            assert pr is not None
            await self._own_templates(wl, pr)

    async def _create_request(
        self, wl: Obj, state: Obj | None, check: str, config: Obj, attempt: int
    ) -> Obj | None:
        namespace = wl["metadata"]["namespace"]
        name = prov.request_name(wl["metadata"]["name"], check, attempt)
        podsets = []
        for merged in prov.merge_podsets(wl, config):
            pt_name = prov.pod_template_name(name, merged.name)
            try:
                await self.kube.get(api.POD_TEMPLATE, pt_name, namespace=namespace)
            except NotFound:
                try:
                    template = self._pod_template(wl, pt_name, merged)  # a flavor conflict fails here
                    await self.kube.create(api.POD_TEMPLATE, template, namespace=namespace)
                except Exception as exc:
                    await self._failed(
                        wl, state, api.error_creating_message("PodTemplate", pt_name, _reason(exc)), exc
                    )
                    raise
            podsets.append((pt_name, merged.count))
        body = prov.request_body(wl, name, config, podsets)
        body["metadata"]["ownerReferences"][0]["apiVersion"] = OWNER_API_VERSION
        try:
            created = await self.kube.create(api.PROVISIONING_REQUEST, body, namespace=namespace)
        except AlreadyExists:
            raise  # an earlier reconcile made it; the cache has not seen it yet
        except Exception as exc:
            await self._failed(
                wl, state, api.error_creating_message("ProvisioningRequest", name, _reason(exc)), exc
            )
            raise
        await self.recorder.normal(
            wl,
            api.EVENT_PROVISIONING_REQUEST_CREATED,
            "Created",
            api.provisioning_request_created_message(name),
        )
        log.info("created ProvisioningRequest", workload=object_key(wl), request=name, attempt=attempt)
        return created

    def _pod_template(self, wl: Obj, name: str, merged: prov.MergedPodSet) -> Obj:
        node_selector: dict[str, str] = {}
        tolerations: list[Obj] = []
        for flavor in dict.fromkeys((merged.assignment.get("flavors") or {}).values()):
            spec = (self.state.flavors.get(flavor) or {}).get("spec") or {}
            node_selector.update(spec.get("nodeLabels") or {})
            tolerations += [t for t in spec.get("tolerations") or () if t not in tolerations]
        template = merge_into_template(
            copy.deepcopy(merged.podset.get("template") or {}),
            {"nodeSelector": node_selector, "tolerations": tolerations},
        )
        _limits_as_requests(template.setdefault("spec", {}))
        return {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {
                "name": name,
                "namespace": wl["metadata"]["namespace"],
                "labels": {api.LABEL_MANAGED: api.VALUE_TRUE},
                # The Workload's until the request exists, so a failed create leaves no orphan.
                "ownerReferences": [prov.controller_reference(wl, OWNER_API_VERSION)],
            },
            "template": template,
        }

    async def _own_templates(self, wl: Obj, pr: Obj) -> None:
        """Hand the request's PodTemplates from the Workload over to the request."""
        namespace = pr["metadata"]["namespace"]
        for ps in (pr.get("spec") or {}).get("podSets") or ():
            try:
                pt = await self.kube.get(api.POD_TEMPLATE, ps["podTemplateRef"]["name"], namespace=namespace)
            except NotFound:
                continue
            refs = pt["metadata"].get("ownerReferences") or []
            kept = [r for r in refs if not (r.get("controller") and r.get("uid") == wl["metadata"]["uid"])]
            if not any(r.get("controller") and r.get("uid") == pr["metadata"]["uid"] for r in kept):
                kept = [r for r in kept if not r.get("controller")]
                kept.append(prov.controller_reference(pr, api.PROVISIONING_REQUEST.api_version))
            if kept != refs:
                pt["metadata"]["ownerReferences"] = kept
                await self.kube.replace(api.POD_TEMPLATE, pt)

    async def _failed(self, wl: Obj, state: Obj | None, message: str, exc: BaseException) -> None:
        """A create failed: a FailedCreate event, and the message on the check (upstream's handleError)."""
        await self.recorder.warning(wl, api.EVENT_FAILED_CREATE, api.EVENT_FAILED_CREATE, message)
        if state is None:
            return
        new = dict(state, message=wlstatus.truncate_message(message))
        new["lastTransitionTime"] = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            await self._apply_checks(wl, [new])
        except Exception as write_error:  # the create's error is the one reported
            log.warning("could not record the failure on the Workload", error=str(write_error))


def _reason(exc: BaseException) -> str:
    """What Go's err.Error() of an API error says: the Status message alone."""
    return getattr(exc, "message", "") or str(exc)
