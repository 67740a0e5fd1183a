"""StatefulSets (upstream's statefulset integration): a managed StatefulSet runs as one serving pod
group whose Workload, `statefulset-<name>-<hash>` (PodSet `main`, `spec.replicas` pods of its
template), this reconciler creates beforehand; the pod webhook makes each pod a member
(worker_agent/webhooks/statefulset.py) and the pod-group integration ungates the pods once the
Workload is admitted. On a MultiKueue worker the StatefulSet is a copy whose Workload the manager
created: it is adopted, never created. A deleted StatefulSet's Workload is finished (OwnerNotFound)
and let go, which frees its quota."""

from __future__ import annotations

import contextlib
from typing import Any

import structlog

from kube_runtime.client import Conflict, NotFound
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kueue_domain import api
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework
from worker_agent.webhooks import common
from worker_agent.webhooks import statefulset as sts_webhook

log = structlog.get_logger("worker_agent.statefulset")

Obj = dict[str, Any]
KIND = {"apiVersion": api.STATEFUL_SET.api_version, "kind": api.STATEFUL_SET.kind}


def managed(sts: Obj, config: Any) -> bool:
    if sts_webhook.managed_by_another_framework(sts):
        return False
    template_annotations = (((sts.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "annotations"
    ) or {}
    if template_annotations.get(api.ANNOTATION_POD_SUSPENDING_PARENT) != sts_webhook.FRAMEWORK:
        return False
    return bool(common.queue_name(sts)) or bool(config.manage_jobs_without_queue_name)


def owns(wl: Obj, sts: Obj) -> bool:
    return any(
        r.get("uid") == sts["metadata"].get("uid") for r in wl["metadata"].get("ownerReferences") or ()
    )


class StatefulSetIntegration:
    name = sts_webhook.FRAMEWORK

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.kube = agent.kube
        self.state = agent.state
        self.config = agent.config
        self.statefulsets = Informer(self.kube, api.STATEFUL_SET, name="statefulsets")
        self.controller = Controller("statefulset", self.reconcile, concurrency=2, clock=agent.clock)
        self._deleted: dict[str, Obj] = {}
        self.statefulsets.add_handler(
            on_add=self._enqueue,
            on_update=lambda old, new: self._enqueue(new),
            on_delete=self._on_delete,
        )
        agent.register(
            informers=[self.statefulsets], controllers=[self.controller], on_leading=self._enqueue_all
        )

    def _enqueue(self, sts: Obj) -> None:
        self.controller.enqueue(object_key(sts))

    def _on_delete(self, sts: Obj) -> None:
        self._deleted[object_key(sts)] = sts
        self._enqueue(sts)

    def _enqueue_all(self) -> None:
        for sts in self.statefulsets.list():
            self._enqueue(sts)

    async def reconcile(self, key: str) -> Result | None:
        sts = self.statefulsets.get(key)
        if sts is None:
            # Forgotten only once finalized: a failed attempt (a Conflict on the Workload) is retried.
            gone = self._deleted.get(key)
            if gone is not None and managed(gone, self.config):
                await self._finalize(gone)
            self._deleted.pop(key, None)
            return None
        if not managed(sts, self.config):
            return None
        namespace = sts["metadata"]["namespace"]
        name = sts_webhook.workload_name(sts)
        wl = self.state.workloads.get(f"{namespace}/{name}")
        count = sts_webhook.replicas(sts)
        remote = bool((sts["metadata"].get("labels") or {}).get(api.LABEL_MULTIKUEUE_ORIGIN))
        if wl is None:
            if count > 0 and not remote:
                await self._create_workload(sts, name, count)
            return None
        if count == 0:
            # Scaled to zero: the Workload (still owned, so not an orphan) is put on hold, which
            # releases its quota and keeps it out of the queues until the StatefulSet scales up.
            if wlstatus.has_quota_reservation(wl) and wlstatus.is_active(wl) and not wlstatus.is_finished(wl):
                await self._set_reservation(wl, api.REASON_ON_HOLD, api.MSG_STATEFUL_SET_ON_HOLD)
            return None
        if not owns(wl, sts):
            await self._adopt(wl, sts)
        queue = common.queue_name(sts)
        if queue and (wl.get("spec") or {}).get("queueName") != queue:
            await self._move_to_queue(sts, wl, queue)
        if wlstatus.is_on_hold(wl):
            pending = wlstatus.unadmitted_reason(
                self.config.features, api.REASON_PENDING_EVALUATION, api.REASON_PENDING
            )
            await self._set_reservation(wl, pending, api.MSG_NO_LONGER_ON_HOLD)
        return None

    async def _set_reservation(self, wl: Obj, reason: str, message: str) -> None:
        """QuotaReserved=False with this reason, the admission cleared (on hold, or back from it)."""
        current = wlstatus.working_copy(wl)
        if wlstatus.unset_quota_reservation(current, reason, message, self.agent.clock.now()):
            with contextlib.suppress(NotFound):
                await wlstatus.apply_admission_status(self.kube, current, strict=True)

    async def _move_to_queue(self, sts: Obj, wl: Obj, queue: str) -> None:
        """The StatefulSet's queue-name changed (allowed while none of its pods is ready): its pods'
        label first, then its Workload's queue, so that a failed write is retried whole."""
        namespace = sts["metadata"]["namespace"]
        match = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match.items())) or None
        pods, _ = await self.kube.list(api.POD, namespace=namespace, label_selector=selector)
        uid = sts["metadata"].get("uid")
        for pod_obj in pods:
            owned = any(r.get("uid") == uid for r in pod_obj["metadata"].get("ownerReferences") or ())
            if owned and (pod_obj["metadata"].get("labels") or {}).get(api.LABEL_QUEUE_NAME) != queue:
                with contextlib.suppress(NotFound):
                    await self.kube.patch_merge(
                        api.POD,
                        pod_obj["metadata"]["name"],
                        {"metadata": {"labels": {api.LABEL_QUEUE_NAME: queue}}},
                        namespace=namespace,
                    )
        with contextlib.suppress(NotFound):
            await self.kube.patch_merge(
                api.WORKLOAD, wl["metadata"]["name"], {"spec": {"queueName": queue}}, namespace=namespace
            )

    async def _create_workload(self, sts: Obj, name: str, count: int) -> None:
        template = (sts.get("spec") or {}).get("template") or {}
        spec = {
            k: v for k, v in (template.get("spec") or {}).items() if k not in ("nodeName", "schedulingGates")
        }
        podsets = [{"name": api.ROLE_MAIN, "count": count, "template": {"spec": spec}}]
        labels = sts["metadata"].get("labels") or {}
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        priority, error = framework.priority_for(labels, wpcs, None, {})
        if error:
            log.info("statefulset not admitted", statefulset=object_key(sts), error=error)
            return
        body = framework.new_workload(
            {**sts, **KIND},
            name,
            podsets,
            common.queue_name(sts),
            priority=priority,
            controller_owner=False,
            annotations={
                api.ANNOTATION_IS_GROUP_WORKLOAD: api.VALUE_TRUE,
                api.ANNOTATION_JOB_OWNER_GVK: api.JOB_OWNER_GVK_STATEFUL_SET,
                api.ANNOTATION_JOB_OWNER_NAME: sts["metadata"]["name"],
            },
        )
        try:
            created = await self.kube.create(api.WORKLOAD, body, namespace=sts["metadata"]["namespace"])
        except Conflict:
            return
        framework.record_creation_latency(getattr(self.agent, "metrics", None), {**sts, **KIND}, created)

    async def _adopt(self, wl: Obj, sts: Obj) -> None:
        """A Workload made beforehand (a MultiKueue manager's copy): owned by the StatefulSet, and
        named after it as upstream does."""
        meta = wl["metadata"]
        refs = [
            *(meta.get("ownerReferences") or ()),
            framework.owner_reference({**sts, **KIND}, controller=False),
        ]
        annotations = {
            **(meta.get("annotations") or {}),
            api.ANNOTATION_JOB_OWNER_GVK: api.JOB_OWNER_GVK_STATEFUL_SET,
            api.ANNOTATION_JOB_OWNER_NAME: sts["metadata"]["name"],
        }
        patch = {
            "metadata": {
                "ownerReferences": refs,
                "annotations": annotations,
                "resourceVersion": meta["resourceVersion"],
            }
        }
        with contextlib.suppress(NotFound):
            await self.kube.patch_merge(api.WORKLOAD, meta["name"], patch, namespace=meta["namespace"])

    async def _finalize(self, sts: Obj) -> None:
        """The StatefulSet is gone: its Workload finishes (OwnerNotFound) and is let go."""
        namespace = sts["metadata"]["namespace"]
        wl = self.state.workloads.get(f"{namespace}/{sts_webhook.workload_name(sts)}")
        if wl is None:
            return
        finish = self.config.features.enabled("FinishOrphanedWorkloads")
        await framework.finish_orphaned(self.kube, wl, self.agent.clock.now(), finish)
