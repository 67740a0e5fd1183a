"""Pod groups: pods carrying `kueue.x-k8s.io/pod-group-name` and
`kueue.x-k8s.io/pod-group-total-count` run as one Workload. The pod webhook gates them with
`kueue.x-k8s.io/admission`; this reconciler ungates a group's pods (adding the flavors' nodeSelector
and tolerations) once its Workload is admitted, deletes them on eviction, reports PodsReady and
finishes non-serving groups.

LeaderWorkerSet groups are serving groups with a prebuilt Workload (the LWS integration creates
the Workloads and labels the pods); plain pod groups get a Workload named after the group.
"""

from __future__ import annotations

import contextlib
from typing import Any

import structlog

from kube_runtime.apply import set_finalizer
from kube_runtime.client import ApiError, Conflict, NotFound
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kueue_domain import api, features, naming
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework

log = structlog.get_logger("worker_agent.podgroup")

Obj = dict[str, Any]
INDEX_POD_GROUP = "podGroup"  # pods by "<namespace>/<group name>"
MANAGED_SELECTOR = f"{api.LABEL_MANAGED}=true"


def pod_group_name(pod: Obj) -> str | None:
    meta = pod.get("metadata") or {}
    return (meta.get("labels") or {}).get(api.LABEL_POD_GROUP_NAME) or (meta.get("annotations") or {}).get(
        api.ANNOTATION_POD_GROUP_NAME
    )


SINGLE_POD_PREFIX = "pod:"  # ':' never occurs in a group name (a DNS subdomain)
INDEX_SINGLE_POD_OWNER = "singlePodOwner"  # Workloads by "<ns>/pod:<name>" of the Pod controlling them


def _single_pod_owner_index(wl: Obj) -> tuple[str, ...]:
    meta = wl.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("controller"):
            return (f"{meta.get('namespace', '')}/{SINGLE_POD_PREFIX}{ref.get('name', '')}",)
    return ()


def _group_index(pod: Obj) -> tuple[str, ...]:
    """Pods of a group under "<ns>/<group>"; a single managed pod under "<ns>/pod:<name>"."""
    meta = pod.get("metadata") or {}
    group = pod_group_name(pod)
    if group:
        return (f"{meta.get('namespace', '')}/{group}",)
    if (meta.get("labels") or {}).get(api.LABEL_MANAGED) == api.VALUE_TRUE:
        return (f"{meta.get('namespace', '')}/{SINGLE_POD_PREFIX}{meta.get('name', '')}",)
    return ()


def is_gated(pod: Obj) -> bool:
    return any(
        g.get("name") == api.SCHEDULING_GATE_ADMISSION
        for g in (pod.get("spec") or {}).get("schedulingGates") or ()
    )


def is_terminated(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def role_of(pod: Obj) -> str:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(api.ANNOTATION_ROLE_HASH, api.ROLE_MAIN)


def ungate_patch(pod: Obj, info: Obj) -> list[Obj]:
    """JSON patch removing the admission gate and adding the flavors' scheduling constraints."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    gates = [g for g in spec.get("schedulingGates") or () if g.get("name") != api.SCHEDULING_GATE_ADMISSION]
    patch: list[Obj] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
    ]
    if gates:
        patch.append({"op": "replace", "path": "/spec/schedulingGates", "value": gates})
    else:
        patch.append({"op": "remove", "path": "/spec/schedulingGates"})
    node_selector = {**(spec.get("nodeSelector") or {}), **(info.get("nodeSelector") or {})}
    if node_selector != (spec.get("nodeSelector") or {}):
        patch.append({"op": "add", "path": "/spec/nodeSelector", "value": node_selector})
    tolerations = list(spec.get("tolerations") or ())
    for toleration in info.get("tolerations") or ():
        if toleration not in tolerations:
            tolerations.append(toleration)
    if tolerations != list(spec.get("tolerations") or ()):
        patch.append({"op": "add", "path": "/spec/tolerations", "value": tolerations})
    labels = {**(meta.get("labels") or {}), **(info.get("labels") or {})}
    if labels != (meta.get("labels") or {}):
        patch.append({"op": "add", "path": "/metadata/labels", "value": labels})
    return patch


class PodGroupIntegration:
    name = api.FRAMEWORK_POD

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.kube = agent.kube
        self.state = agent.state
        self.config = agent.config
        self.pods = Informer(self.kube, api.POD, label_selector=MANAGED_SELECTOR, name="managed-pods")
        self.pods.add_index(INDEX_POD_GROUP, _group_index)
        self.state.workloads.add_index(INDEX_SINGLE_POD_OWNER, _single_pod_owner_index)
        self.controller = Controller("podgroup", self.reconcile, concurrency=4, clock=agent.clock)
        self.pods.add_handler(
            on_add=self._enqueue_pod,
            on_update=lambda old, new: self._enqueue_pod(new),
            on_delete=self._enqueue_pod,
        )
        self.state.workloads.add_handler(
            on_add=self._enqueue_workload,
            on_update=lambda old, new: self._enqueue_workload(new),
            on_delete=self._enqueue_workload,
        )
        agent.register(informers=[self.pods], controllers=[self.controller], on_leading=self._enqueue_all)

    def _enqueue_pod(self, pod: Obj) -> None:
        for key in _group_index(pod):
            self.controller.enqueue(key)

    def _enqueue_workload(self, wl: Obj) -> None:
        key = object_key(wl)
        if self.pods.by_index(INDEX_POD_GROUP, key):
            self.controller.enqueue(key)
            return
        namespace = wl["metadata"].get("namespace", "")
        for owner in wl["metadata"].get("ownerReferences") or ():
            if owner.get("kind") == "Pod" and owner.get("controller"):
                self.controller.enqueue(f"{namespace}/{SINGLE_POD_PREFIX}{owner['name']}")

    def _enqueue_all(self) -> None:
        for key in self.pods.store.index_values(INDEX_POD_GROUP):
            self.controller.enqueue(key)

    # ---------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        namespace, _, group = key.partition("/")
        pods = self.pods.by_index(INDEX_POD_GROUP, key)
        single = group.startswith(SINGLE_POD_PREFIX)
        if single and all(p["metadata"].get("deletionTimestamp") for p in pods):
            return await self._finalize_single(key, pods)
        if not pods:
            return None
        if single:
            pod_meta = pods[0]["metadata"]
            default_name = naming.workload_name(pod_meta["name"], pod_meta["uid"], "Pod", "")
        else:
            default_name = group
        prebuilt = naming.prebuilt_workload_name(pods[0])
        workload_name = prebuilt or default_name
        serving = any(
            (p["metadata"].get("annotations") or {}).get(api.ANNOTATION_POD_GROUP_SERVING) == api.VALUE_TRUE
            for p in pods
        )
        total = 1 if single else self._total_count(pods)
        wl = self.state.workloads.get(f"{namespace}/{workload_name}")
        if wl is None:
            if prebuilt:
                # The owner (the LWS integration, a MultiKueue manager) creates it; a pod going away
                # meanwhile (its Workload already deleted) must not be held by our finalizer.
                await self._release_pod_finalizers(pods, everything=False)
                return None
            return await self._create_workload(namespace, workload_name, pods, total, single)
        if prebuilt:
            wl = await self._adopt_prebuilt(wl, pods, single) or wl
        if wlstatus.is_finished(wl) or (wl.get("metadata") or {}).get("deletionTimestamp"):
            await self._release_pod_finalizers(pods, everything=True)
            return None
        if not prebuilt and not await self._follow_priority_label(pods[0], wl):
            return Result(requeue=True)
        live = [p for p in pods if not is_terminated(p) and not p["metadata"].get("deletionTimestamp")]
        if wlstatus.is_evicted(wl) and wlstatus.has_quota_reservation(wl):
            return await self._stop(wl, live)
        # A Workload with the MultiKueue check runs on a worker cluster: its pods stay gated here,
        # their status mirrored from the worker's copies (which finishes the Workload here too).
        if wlstatus.is_admitted(wl) and not wlstatus.is_evicted(wl) and not self._has_multikueue_check(wl):
            await self._ungate(wl, [p for p in live if is_gated(p)])
        await self._release_pod_finalizers(pods, everything=False)
        if self.config.wait_for_pods_ready is not None:
            await self._sync_pods_ready(wl, pods, total)
        if single and is_terminated(pods[0]):
            await self._finish_single(wl, pods[0])
        elif (
            not serving
            and total
            and sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded") >= total
        ):
            await self._finish(wl, pods, total)
        return None

    def _priority(self, pod: Obj) -> tuple[Obj, str | None]:
        labels = pod["metadata"].get("labels") or {}
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        return framework.priority_for(labels, wpcs, None, {})

    async def _follow_priority_label(self, pod: Obj, wl: Obj) -> bool:
        """A changed priority-class label (of the group's first pod, as upstream reads the group):
        the Workload takes the new class and value."""
        label = (pod["metadata"].get("labels") or {}).get(api.LABEL_PRIORITY_CLASS) or ""
        written, ok = await framework.follow_priority_label(self.kube, wl, label, lambda: self._priority(pod))
        recorder = getattr(self.agent, "recorder", None)
        if written is not None and recorder is not None:
            meta = wl["metadata"]
            await recorder.normal(
                {**pod, "apiVersion": "v1", "kind": "Pod"},
                api.EVENT_UPDATED_WORKLOAD,
                "Reconcile",
                api.updated_workload_priority_message(meta["namespace"], meta["name"]),
            )
        return ok

    async def _adopt_prebuilt(self, wl: Obj, pods: list[Obj], single: bool) -> Obj | None:
        """A prebuilt Workload no one controls (a MultiKueue manager's copy) is owned by its pods, as
        upstream's: a single pod controls it, every pod of a group owns it. A Workload controlled
        by something else (a LeaderWorkerSet) is left as it is."""
        meta = wl["metadata"]
        refs = list(meta.get("ownerReferences") or ())
        if any(r.get("controller") for r in refs):
            return None
        owned = {r.get("uid") for r in refs}
        missing = [p for p in pods if p["metadata"].get("uid") not in owned]
        if not missing:
            return None
        refs += [
            framework.owner_reference({**p, "apiVersion": "v1", "kind": "Pod"}, controller=single)
            for p in (missing[:1] if single else missing)
        ]
        patch = {"metadata": {"ownerReferences": refs, "resourceVersion": meta["resourceVersion"]}}
        try:
            return await self.kube.patch_merge(api.WORKLOAD, meta["name"], patch, namespace=meta["namespace"])
        except NotFound:
            return None
        # A Conflict (the manager wrote the copy meanwhile) propagates and is retried: until a single
        # pod owns it, the Workload's own events do not reach the pod.

    async def _finalize_single(self, key: str, pods: list[Obj]) -> Result | None:
        """A single pod being deleted, or gone (a pod without our finalizer, e.g. a Deployment's):
        its Workload is finished (OwnerNotFound, releasing the quota; not one already being
        deleted) and let go, then the pod (upstream's finalizeWorkloads on a pod it cannot load
        or that is being deleted)."""
        uids = {p["metadata"].get("uid") for p in pods}
        for wl in self.state.workloads.by_index(INDEX_SINGLE_POD_OWNER, key):
            ref = next(r for r in wl["metadata"].get("ownerReferences") or () if r.get("controller"))
            if pods and ref.get("uid") not in uids:
                continue  # a Workload of an earlier pod of that name, or of a newer one
            finish = self.config.features.enabled("FinishOrphanedWorkloads")
            await framework.finish_orphaned(self.kube, wl, self.agent.clock.now(), finish)
        await self._release_pod_finalizers(pods, everything=True)
        return None

    def _total_count(self, pods: list[Obj]) -> int:
        for pod in pods:
            value = (pod["metadata"].get("annotations") or {}).get(api.ANNOTATION_POD_GROUP_TOTAL_COUNT)
            if value and value.isdigit():
                return int(value)
        return len(pods)

    def _has_multikueue_check(self, wl: Obj) -> bool:
        for check in wlstatus.check_states(wl):
            ac = self.state.admission_checks.get(check["name"])
            if (
                ac is not None
                and (ac.get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME
            ):
                return True
        return False

    async def _create_workload(
        self, namespace: str, group: str, pods: list[Obj], total: int, single: bool = False
    ) -> Result | None:
        """A plain pod group: one PodSet per role, once `total` runnable pods exist; a single pod:
        `pod-<name>-<hash>` with one PodSet `main`."""
        runnable = [p for p in pods if (p.get("status") or {}).get("phase") != "Failed"]
        if len(runnable) < total:
            # No Workload holds an incomplete group's pods: one being deleted goes (upstream too).
            await self._release_pod_finalizers(
                [p for p in pods if p["metadata"].get("deletionTimestamp")], True
            )
            return None
        roles: dict[str, list[Obj]] = {}
        for pod in runnable:
            roles.setdefault(role_of(pod), []).append(pod)
        podsets = []
        for role in sorted(roles):
            template_pod = roles[role][0]
            spec = {k: v for k, v in (template_pod.get("spec") or {}).items() if k not in ("nodeName",)}
            spec.pop("schedulingGates", None)
            podsets.append(
                {
                    "name": api.ROLE_MAIN if single else role,
                    "count": len(roles[role]),
                    "template": {"spec": spec},
                }
            )
        first = pods[0]
        labels = first["metadata"].get("labels") or {}
        queue = labels.get(api.LABEL_QUEUE_NAME, "")
        priority, error = self._priority(first)
        if error:
            log.info("pod group not admitted", group=f"{namespace}/{group}", error=error)
            return None
        body = framework.new_workload(
            {**first, "apiVersion": "v1", "kind": "Pod"},
            group,
            podsets,
            queue,
            priority=priority,
            controller_owner=single,
            annotations=None if single else {api.ANNOTATION_IS_GROUP_WORKLOAD: api.VALUE_TRUE},
        )
        if not single:
            body["metadata"]["ownerReferences"] = [
                framework.owner_reference({**p, "apiVersion": "v1", "kind": "Pod"}, controller=False)
                for p in pods
            ]
            body["metadata"]["labels"].pop(api.LABEL_JOB_UID, None)
        try:
            created = await self.kube.create(api.WORKLOAD, body, namespace=namespace)
        except Conflict:
            return None
        framework.record_creation_latency(
            getattr(self.agent, "metrics", None), {**first, "kind": "Pod"}, created
        )
        return None

    async def _ungate(self, wl: Obj, gated: list[Obj]) -> None:
        if not gated:
            return
        try:
            flavors = {f["metadata"]["name"]: f for f in self.state.flavors.list()}
            queue_labels = self.config.features.enabled(features.ASSIGN_QUEUE_LABELS_FOR_PODS)
            infos = framework.podset_infos(wl, flavors, queue_labels=queue_labels)
        except framework.PodSetInfoConflict as exc:
            log.warning("cannot start pod group", workload=object_key(wl), error=str(exc))
            return
        for pod in gated:
            info = infos.get(role_of(pod))
            if info is None and len(infos) == 1:
                info = next(iter(infos.values()))
            if info is None:
                continue
            meta = pod["metadata"]
            try:
                await self.kube.patch_json(
                    api.POD, meta["name"], ungate_patch(pod, info), namespace=meta["namespace"]
                )
            except (NotFound, Conflict):
                continue
            except ApiError as exc:
                log.info("ungating failed; will retry", pod=object_key(pod), error=str(exc))

    async def _stop(self, wl: Obj, live: list[Obj]) -> Result | None:
        """Eviction: delete the group's running pods; once none run, release the quota."""
        running = [p for p in live if not is_gated(p)]
        for pod in running:
            with contextlib.suppress(NotFound):
                await self.kube.delete(
                    api.POD, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"]
                )
        if running:
            return Result(requeue_after=1.0)
        current = wlstatus.working_copy(wl)
        if wlstatus.clear_reservation_after_eviction(
            current, self.agent.clock.now(), self.agent.config.features
        ):
            with contextlib.suppress(NotFound):
                await wlstatus.apply_admission_status(self.kube, current, strict=True)
        return None

    async def _release_pod_finalizers(self, pods: list[Obj], everything: bool) -> None:
        for pod in pods:
            if not (everything or is_terminated(pod) or pod["metadata"].get("deletionTimestamp")):
                continue
            with contextlib.suppress(Conflict):  # a newer pod event reconciles the group again
                await set_finalizer(self.kube, api.POD, pod, api.FINALIZER_MANAGED, present=False)

    async def _sync_pods_ready(self, wl: Obj, pods: list[Obj], total: int) -> None:
        ready = (
            len(pods) >= total
            and all(is_ready(p) or is_terminated(p) for p in pods)
            and wlstatus.is_admitted(wl)
        )
        previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
        if ready:
            recovering = previous is not None and previous.get("reason") in (
                api.REASON_WAIT_FOR_RECOVERY,
                api.REASON_RECOVERED,
            )
            wanted = ("True", api.REASON_RECOVERED if recovering else api.REASON_STARTED, api.MSG_PODS_READY)
        elif previous is not None and previous.get("status") == "True":
            wanted = ("False", api.REASON_WAIT_FOR_RECOVERY, api.MSG_WAIT_FOR_RECOVERY)
        elif previous is not None and previous.get("reason") == api.REASON_WAIT_FOR_RECOVERY:
            wanted = ("False", api.REASON_WAIT_FOR_RECOVERY, api.MSG_WAIT_FOR_RECOVERY)
        else:
            wanted = ("False", api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START)
        if (
            previous is not None
            and (previous.get("status"), previous.get("reason"), previous.get("message")) == wanted
        ):
            return
        current = wlstatus.working_copy(wl)
        wlstatus.set_condition(current, api.WORKLOAD_PODS_READY, *wanted, self.agent.clock.now())
        condition = wlstatus.condition(current, api.WORKLOAD_PODS_READY)
        body = {
            "apiVersion": api.API_VERSION,
            "kind": "Workload",
            "metadata": {"name": wl["metadata"]["name"], "namespace": wl["metadata"]["namespace"]},
            "status": {"conditions": [condition]},
        }
        with contextlib.suppress(NotFound):
            await self.kube.apply_status(api.WORKLOAD, body, api.FIELD_MANAGER_PODS_READY, force=True)

    async def _finish_single(self, wl: Obj, pod: Obj) -> None:
        failed = (pod.get("status") or {}).get("phase") == "Failed"
        current = wlstatus.working_copy(wl)
        reason = api.REASON_FAILED if failed else api.REASON_SUCCEEDED
        message = "Job failed" if failed else "Job finished successfully"
        if wlstatus.set_condition(
            current, api.WORKLOAD_FINISHED, "True", reason, message, self.agent.clock.now()
        ):
            with contextlib.suppress(NotFound):
                await wlstatus.apply_admission_status(self.kube, current)

    async def _finish(self, wl: Obj, pods: list[Obj], total: int) -> None:
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        current = wlstatus.working_copy(wl)
        message = f"Pods succeeded: {succeeded}/{total}."
        if wlstatus.set_condition(
            current, api.WORKLOAD_FINISHED, "True", api.REASON_SUCCEEDED, message, self.agent.clock.now()
        ):
            with contextlib.suppress(NotFound):
                await wlstatus.apply_admission_status(self.kube, current)
