"""Kinds whose PodSets are named pod templates inside the object and that suspend by one field
(JobSet's replicatedJobs, a Kubeflow job's replicaSpecs, a RayCluster's head and worker groups, ...).

Such a kind subclasses `TemplatedReconciler` and declares `suspend_path` and `pod_templates`; it
gets `is_suspended`, `run` (RunWithPodSetsInfo: unsuspended, each pod template merged with its
PodSet's info, in one update) and `stop` (Suspend and RestorePodSetsInfo in one update: suspended,
each pod template's labels, annotations, nodeSelector, tolerations and scheduling gates taken back
from the Workload's PodSet of that name). The pure halves, `started_object` and `stopped_object`,
are here for the kinds' unit tests.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kube_runtime.client import Conflict, NotFound
from kube_runtime.informer import object_key
from kueue_domain import api
from worker_agent.integrations import framework
from worker_agent.integrations.jobframework.reconciler import JobReconciler

Obj = dict[str, Any]
# The named pod templates of an object: (PodSet name, the pod template dict inside the object).
TemplatesOf = Callable[[Obj], list[tuple[str, Obj]]]


def get_path(obj: Obj, path: Sequence[str]) -> Any:
    """The value at `path` (keys from the top), None when any step is missing."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def set_path(obj: Obj, path: Sequence[str], value: Any) -> None:
    """Set the value at `path`, creating the dicts on the way."""
    target = obj
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def _replace_contents(template: Obj, new: Obj) -> None:
    template.clear()
    template.update(new)


def started_object(
    obj: Obj, templates_of: TemplatesOf, infos: Mapping[str, Obj], suspend_path: Sequence[str]
) -> Obj | None:
    """RunWithPodSetsInfo: a copy, unsuspended, with each named pod template merged with the info of
    its PodSet. None when the object is not suspended. Raises PodSetInfoConflict on a conflicting key
    or when the infos do not name exactly the object's PodSets."""
    if get_path(obj, suspend_path) is not True:
        return None
    result = copy.deepcopy(obj)
    templates = templates_of(result)
    if len(infos) != len(templates) or any(name not in infos for name, _ in templates):
        # podset.BadPodSetsInfoLenError
        raise framework.PodSetInfoConflict(
            f"invalid podset infos: expecting {len(templates)} podset, got {len(infos)}"
        )
    for name, template in templates:
        _replace_contents(template, framework.merge_into_template(template, infos[name]))
    set_path(result, suspend_path, False)
    return result


def stopped_object(
    obj: Obj, templates_of: TemplatesOf, wl: Obj | None, suspend_path: Sequence[str]
) -> Obj | None:
    """Suspend and RestorePodSetsInfo in one: a copy, suspended, each named pod template restored
    from the Workload's PodSet of that name (left as it is without a Workload, or when the PodSets do
    not name exactly the object's templates). None when there is nothing to change."""
    result = copy.deepcopy(obj)
    set_path(result, suspend_path, True)
    podsets = {p.get("name"): p for p in ((wl or {}).get("spec") or {}).get("podSets") or ()}
    templates = templates_of(result)
    if podsets and len(podsets) == len(templates) and all(name in podsets for name, _ in templates):
        for name, template in templates:
            original = podsets[name].get("template") or {}
            _replace_contents(template, framework.restore_template(template, original))
    return None if result == obj else result


class TemplatedReconciler(JobReconciler):
    """A `JobReconciler` for a kind of named pod templates: declare `suspend_path` and implement
    `pod_templates` (the PodSets usually follow from it too)."""

    suspend_path: tuple[str, ...] = ("spec", "suspend")

    def pod_templates(self, obj: Obj) -> list[tuple[str, Obj]]:
        """(PodSet name, pod template) for each PodSet, in PodSet order; the templates are the dicts
        inside `obj` (created when missing), so that run and stop can rewrite them in place."""
        raise NotImplementedError

    def is_suspended(self, obj: Obj) -> bool:
        return get_path(obj, self.suspend_path) is True

    def started(self, obj: Obj, infos: Mapping[str, Obj]) -> Obj | None:
        return started_object(obj, self.pod_templates, infos, self.suspend_path)

    def stopped(self, obj: Obj, wl: Obj | None) -> Obj | None:
        return stopped_object(obj, self.pod_templates, wl, self.suspend_path)

    async def run(self, obj: Obj, wl: Obj, infos: Mapping[str, Obj]) -> bool:
        started = self.started(obj, infos)
        if started is None:
            return False
        try:
            written = await self.kube.replace(self.resource, started)
        except (Conflict, NotFound):
            return False  # the object's next event brings us back
        self._own_writes.wrote(object_key(obj), obj, written)
        return True

    async def stop(self, obj: Obj, wl: Obj | None, message: str) -> bool:
        """Suspend with the templates restored from the Workload, in one update (a Conflict is
        retried with backoff by the controller)."""
        stopped = self.stopped(obj, wl)
        if stopped is None:
            return True
        was_running = not self.is_suspended(obj)
        written = await self.kube.replace(self.resource, stopped)
        self._own_writes.wrote(object_key(obj), obj, written)
        if was_running:
            await self._event(obj, api.EVENT_STOPPED, message)
        return True
