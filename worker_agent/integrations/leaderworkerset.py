"""LeaderWorkerSet: one Workload per group index, `leaderworkerset-<name>-<i>-<hash5>`, with PodSets
`leader` and `worker` (or `main`), and the LWS's pods labelled so that the pod-group integration
runs each group as a serving group with that prebuilt Workload.

On a worker cluster an LWS carrying the MultiKueue origin label gets no Workloads from here: the
copies the manager sends are adopted, and names hash the manager's LWS UID (annotation
`kueue.x-k8s.io/multikueue-origin-uid`) so that both sides agree.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import structlog

from kube_runtime.apply import set_finalizer
from kube_runtime.client import Conflict, NotFound
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kueue_domain import api
from kueue_domain import workload as wlstatus
from kueue_domain.naming import LWS_KIND, group_workload_name
from worker_agent.integrations import framework

log = structlog.get_logger("worker_agent.leaderworkerset")

LWS_CONCURRENCY = 10

Obj = dict[str, Any]
INDEX_LWS_OWNER = "lwsOwner"  # workloads by "<namespace>/<lws name>" (job-owner annotations)
INDEX_LWS_PODS = "lwsPods"  # pods by "<namespace>/<lws name>"


def _workload_owner_index(wl: Obj) -> tuple[str, ...]:
    """The LWS a Workload was created for here. MultiKueue copies (origin label) belong to the
    manager, never to this integration: a worker must not delete them when their LWS is missing."""
    meta = wl.get("metadata") or {}
    if (meta.get("labels") or {}).get(api.LABEL_MULTIKUEUE_ORIGIN):
        return ()
    annotations = meta.get("annotations") or {}
    if annotations.get(api.ANNOTATION_JOB_OWNER_GVK) != api.JOB_OWNER_GVK_LEADER_WORKER_SET:
        return ()
    owner = annotations.get(api.ANNOTATION_JOB_OWNER_NAME)
    return (f"{wl['metadata'].get('namespace', '')}/{owner}",) if owner else ()


def _pod_owner_index(pod: Obj) -> tuple[str, ...]:
    name = ((pod.get("metadata") or {}).get("labels") or {}).get(api.LWS_LABEL_NAME)
    return (f"{pod['metadata'].get('namespace', '')}/{name}",) if name else ()


def _clean_template(template: Obj | None) -> Obj:
    """Template metadata keeps labels and annotations, minus the LWS-private keys (except the name)."""
    template = copy.deepcopy(template or {})
    meta = template.get("metadata") or {}
    cleaned: Obj = {}
    for key in ("labels", "annotations"):
        values = {
            k: v
            for k, v in (meta.get(key) or {}).items()
            if not k.startswith(api.LWS_KEY_PREFIX) or k == api.LWS_LABEL_NAME
        }
        if values:
            cleaned[key] = values
    result: Obj = {"spec": template.get("spec") or {}}
    if cleaned:
        result["metadata"] = cleaned
    return result


def group_podsets(lws: Obj) -> list[Obj]:
    template = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    size = int(template.get("size") or 1)
    if template.get("leaderTemplate"):
        return [
            {"name": api.ROLE_LEADER, "count": 1, "template": _clean_template(template["leaderTemplate"])},
            {
                "name": api.ROLE_WORKER,
                "count": size - 1,
                "template": _clean_template(template.get("workerTemplate")),
            },
        ]
    return [
        {"name": api.ROLE_MAIN, "count": size, "template": _clean_template(template.get("workerTemplate"))}
    ]


def pod_role(lws: Obj, pod: Obj) -> str:
    template = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    if not template.get("leaderTemplate"):
        return api.ROLE_MAIN
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return api.ROLE_WORKER if annotations.get(api.LWS_ANNOTATION_LEADER_NAME) else api.ROLE_LEADER


class LeaderWorkerSetIntegration:
    name = api.FRAMEWORK_LEADER_WORKER_SET

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.kube = agent.kube
        self.state = agent.state
        self.config = agent.config
        self.lws = Informer(self.kube, api.LEADER_WORKER_SET)
        self.pods = Informer(self.kube, api.POD, label_selector=api.LWS_LABEL_NAME, name="lws-pods")
        self.pods.add_index(INDEX_LWS_PODS, _pod_owner_index)
        self.state.workloads.add_index(INDEX_LWS_OWNER, _workload_owner_index)
        # Reconciles wait on the API (a new LWS's Workloads are created one after the other), and
        # under load a Workload create takes a few hundred ms: with 2 at a time, a burst of LWS
        # (10/s on the bench's 1+3 fleet) had its Workloads created up to 8 s after the LWS.
        self.controller = Controller(
            "leaderworkerset", self.reconcile, concurrency=LWS_CONCURRENCY, clock=agent.clock
        )
        self.lws.add_handler(
            on_add=lambda obj: self.controller.enqueue(object_key(obj)),
            on_update=lambda old, new: self.controller.enqueue(object_key(new)),
            on_delete=lambda obj: self.controller.enqueue(object_key(obj)),
        )
        self.pods.add_handler(
            on_add=self._enqueue_for_pod,
            on_update=lambda old, new: self._enqueue_for_pod(new),
        )
        self.state.workloads.add_handler(
            on_add=self._enqueue_for_workload,
            on_update=lambda old, new: self._enqueue_for_workload(new),
            on_delete=self._enqueue_for_workload,
        )
        agent.register(
            informers=[self.lws, self.pods],
            controllers=[self.controller],
            on_leading=self._enqueue_all,
            requires=api.LEADER_WORKER_SET,
        )

    def _enqueue_for_pod(self, pod: Obj) -> None:
        for key in _pod_owner_index(pod):
            self.controller.enqueue(key)

    def _enqueue_for_workload(self, wl: Obj) -> None:
        for key in _workload_owner_index(wl):
            self.controller.enqueue(key)

    def _enqueue_all(self) -> None:
        for key in self.lws.store.keys():
            self.controller.enqueue(key)
        for key in self.state.workloads.store.index_values(INDEX_LWS_OWNER):
            self.controller.enqueue(key)

    def managed(self, lws: Obj) -> bool:
        labels = lws["metadata"].get("labels") or {}
        return bool(labels.get(api.LABEL_QUEUE_NAME)) or self.config.manage_jobs_without_queue_name

    # ---------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        lws = self.lws.get(key)
        existing = {object_key(w): w for w in self.state.workloads.by_index(INDEX_LWS_OWNER, key)}
        if lws is None or lws["metadata"].get("deletionTimestamp") or not self.managed(lws):
            for wl in existing.values():
                await self._delete_workload(wl)
            return None
        namespace = lws["metadata"]["namespace"]
        replicas = int((lws.get("spec") or {}).get("replicas", 1) or 0)
        desired = {f"{namespace}/{group_workload_name(lws, i)}": i for i in range(replicas)}
        origin = bool((lws["metadata"].get("labels") or {}).get(api.LABEL_MULTIKUEUE_ORIGIN))
        queue = (lws["metadata"].get("labels") or {}).get(api.LABEL_QUEUE_NAME, "")
        retry = False
        for wl_key, index in desired.items():
            wl = existing.get(wl_key) or self.state.workloads.get(wl_key)
            if wl is None:
                if not origin:
                    await self._create_workload(lws, index, queue)
            elif (
                wlstatus.is_evicted(wl)
                and wlstatus.has_quota_reservation(wl)
                and not self._live_pods(key, index)
            ):
                # An evicted group without pods (e.g. on a MultiKueue manager, where they never
                # exist): nothing to stop, so release the quota here; the pod-group integration
                # does it for groups that have pods.
                current = wlstatus.working_copy(wl)
                if wlstatus.clear_reservation_after_eviction(
                    current, self.agent.clock.now(), self.agent.config.features
                ):
                    try:
                        await wlstatus.apply_admission_status(self.kube, current, strict=True)
                    except Conflict:
                        retry = True  # a newer copy: look again (no later event may come)
                    except NotFound:
                        pass
            elif (
                (wl.get("spec") or {}).get("queueName") != queue
                and queue
                and not wlstatus.has_quota_reservation(wl)
            ):
                with contextlib.suppress(NotFound):
                    await self.kube.patch_merge(
                        api.WORKLOAD,
                        wl["metadata"]["name"],
                        {"spec": {"queueName": queue}},
                        namespace=namespace,
                    )
        for wl_key, wl in existing.items():
            if wl_key not in desired:
                await self._delete_workload(wl)
            elif not wl["metadata"].get("deletionTimestamp") and not await self._follow_priority_label(
                lws, wl
            ):
                retry = True
        await self._label_pods(lws, key)
        return Result(requeue=True) if retry else None

    def _live_pods(self, key: str, index: int) -> list[Obj]:
        return [
            p
            for p in self.pods.by_index(INDEX_LWS_PODS, key)
            if (p["metadata"].get("labels") or {}).get(api.LWS_LABEL_GROUP_INDEX) == str(index)
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def _priority(self, lws: Obj) -> tuple[Obj, str | None]:
        labels = lws["metadata"].get("labels") or {}
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        template = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
        pod_pc = (
            (template.get("leaderTemplate") or template.get("workerTemplate") or {}).get("spec") or {}
        ).get("priorityClassName")
        return framework.priority_for(labels, wpcs, pod_pc, {})

    async def _follow_priority_label(self, lws: Obj, wl: Obj) -> bool:
        """A changed priority-class label: the group's Workload takes the new class and value."""
        label = (lws["metadata"].get("labels") or {}).get(api.LABEL_PRIORITY_CLASS) or ""
        written, ok = await framework.follow_priority_label(self.kube, wl, label, lambda: self._priority(lws))
        if written is not None and self.agent.recorder is not None:
            meta = wl["metadata"]
            await self.agent.recorder.normal(
                lws,
                api.EVENT_UPDATED_WORKLOAD,
                "Reconcile",
                api.updated_workload_priority_message(meta["namespace"], meta["name"]),
            )
        return ok

    async def _create_workload(self, lws: Obj, index: int, queue: str) -> None:
        meta = lws["metadata"]
        priority, error = self._priority(lws)
        if error:
            if self.agent.recorder is not None:
                await self.agent.recorder.warning(
                    lws, api.EVENT_WORKLOAD_PRIORITY_CLASS_NOT_FOUND, "Reconcile", error
                )
            return
        name = group_workload_name(lws, index)
        body = framework.new_workload(
            {**lws, "apiVersion": api.LEADER_WORKER_SET.api_version, "kind": LWS_KIND},
            name,
            group_podsets(lws),
            queue,
            priority=priority,
            label_keys_to_copy=self.config.label_keys_to_copy,
            controller_owner=False,
            annotations={
                api.ANNOTATION_IS_GROUP_WORKLOAD: api.VALUE_TRUE,
                api.ANNOTATION_JOB_OWNER_GVK: api.JOB_OWNER_GVK_LEADER_WORKER_SET,
                api.ANNOTATION_JOB_OWNER_NAME: meta["name"],
                api.ANNOTATION_COMPONENT_WORKLOAD_INDEX: str(index),
            },
        )
        try:
            created = await self.kube.create(api.WORKLOAD, body, namespace=meta["namespace"])
        except Conflict:
            return
        framework.record_creation_latency(
            getattr(self.agent, "metrics", None), {**lws, "kind": LWS_KIND}, created
        )
        if self.agent.recorder is not None:
            await self.agent.recorder.normal(
                lws,
                api.EVENT_CREATED_WORKLOAD,
                "Reconcile",
                api.created_workload_event_message(meta["namespace"], name),
            )

    async def _delete_workload(self, wl: Obj) -> None:
        meta = wl["metadata"]
        if not meta.get("deletionTimestamp"):
            with contextlib.suppress(NotFound):
                await self.kube.delete(api.WORKLOAD, meta["name"], namespace=meta["namespace"])
        await set_finalizer(
            self.kube, api.WORKLOAD, wl, api.FINALIZER_RESOURCE_IN_USE, present=False, strict=False
        )

    async def _label_pods(self, lws: Obj, key: str) -> None:
        """Give each pod of a group the pod-group identity of its Workload."""
        size = str(int(((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size") or 1))
        queue = (lws["metadata"].get("labels") or {}).get(api.LABEL_QUEUE_NAME)
        for pod in self.pods.by_index(INDEX_LWS_PODS, key):
            meta = pod["metadata"]
            group_index = (meta.get("labels") or {}).get(api.LWS_LABEL_GROUP_INDEX)
            if group_index is None or not group_index.isdigit() or meta.get("deletionTimestamp"):
                continue
            name = group_workload_name(lws, int(group_index))
            labels = {api.LABEL_MANAGED: api.VALUE_TRUE, api.LABEL_POD_GROUP_NAME: name}
            gated = any(
                g.get("name") == api.SCHEDULING_GATE_ADMISSION
                for g in (pod.get("spec") or {}).get("schedulingGates") or ()
            )
            if queue and gated:
                labels[api.LABEL_QUEUE_NAME] = queue
            annotations = {
                api.ANNOTATION_PREBUILT_WORKLOAD_NAME: name,
                api.ANNOTATION_POD_GROUP_TOTAL_COUNT: size,
                api.ANNOTATION_ROLE_HASH: pod_role(lws, pod),
                api.ANNOTATION_POD_GROUP_SERVING: api.VALUE_TRUE,
            }
            current_labels = meta.get("labels") or {}
            current_annotations = meta.get("annotations") or {}
            if all(current_labels.get(k) == v for k, v in labels.items()) and all(
                current_annotations.get(k) == v for k, v in annotations.items()
            ):
                continue
            with contextlib.suppress(NotFound, Conflict):
                await self.kube.patch_merge(
                    api.POD,
                    meta["name"],
                    {
                        "metadata": {
                            "labels": labels,
                            "annotations": annotations,
                            "resourceVersion": meta["resourceVersion"],
                        }
                    },
                    namespace=meta["namespace"],
                )
