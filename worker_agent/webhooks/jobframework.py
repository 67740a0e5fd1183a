"""One defaulting and validation path for the job kinds (upstream's jobframework webhook): a kind is
a `JobWebhook` value naming its GVK and its controller's managedBy, with hooks for what only it
checks or defaults.

Defaulting: the namespace's default LocalQueue, the default WorkloadPriorityClass, `spec.suspend:
true` for an object Kueue will manage, `spec.managedBy: kueue.x-k8s.io/multikueue` when its
(a kind may keep both elsewhere: the Kubeflow kinds' `spec.runPolicy`)
LocalQueue feeds a ClusterQueue with a MultiKueue AdmissionCheck (only over no managedBy or the
kind's own controller, CanDefaultManagedBy), then the kind's own defaults. Validation:
ValidateJobOnCreate and the kind's create checks; on update ValidateJobOnUpdate first, then
everything create checks, as upstream orders them (a kind may bring its own update order).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kueue_domain import api, features
from kueue_domain.config import Configuration
from kueue_domain.fields import FieldError
from worker_agent.webhooks import common
from worker_agent.webhooks.common import Facts, Lookups

Obj = dict[str, Any]
UpdateValidator = Callable[[Obj, Obj, str, Lookups, Configuration | None], list[FieldError]]


def spec_suspended(obj: Obj) -> bool:
    return (obj.get("spec") or {}).get("suspend") is True


def _get(obj: Obj, path: tuple[str, ...]) -> Any:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _set(obj: Obj, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value


def _no_defaults(obj: Obj) -> None:
    return None


def _no_checks(obj: Obj, config: Configuration | None) -> list[FieldError]:
    return []


@dataclass(frozen=True)
class JobWebhook:
    gvk: str
    managed_by_default: str  # spec.managedBy of the kind's own controller
    is_suspended: Callable[[Obj], bool] = spec_suspended
    own_defaults: Callable[[Obj], None] = _no_defaults  # after the shared defaults, on the copy
    create_checks: Callable[[Obj, Configuration | None], list[FieldError]] = _no_checks
    update_validator: UpdateValidator | None = None  # the kind's own update validation, when it has one
    # Where the kind keeps suspend and managedBy (`is_suspended` must read the same suspend).
    suspend_path: tuple[str, ...] = ("spec", "suspend")
    managed_by_path: tuple[str, ...] = ("spec", "managedBy")
    prebuilt_supported: bool = True  # upstream's supportedPrebuiltWlJobGVKs has the kind

    def default(self, obj: Obj, namespace: str, config: Configuration, lookups: Lookups, facts: Facts) -> Obj:
        """The object after Kueue's defaulting (a copy; the input is left alone)."""
        obj = copy.deepcopy(obj)
        common.apply_default_local_queue(obj, namespace, config, lookups, facts)
        common.apply_default_priority_class(obj, config, lookups)
        if common.should_suspend(obj, config, facts) and _get(obj, self.suspend_path) is not True:
            _set(obj, self.suspend_path, True)
        self.apply_default_managed_by(obj, namespace, config, lookups)
        self.own_defaults(obj)
        return obj

    def apply_default_managed_by(
        self, obj: Obj, namespace: str, config: Configuration, lookups: Lookups
    ) -> None:
        """CanDefaultManagedBy: MultiKueue on, and managedBy unset or the kind's controller's."""
        managed_by = _get(obj, self.managed_by_path)
        if managed_by not in (None, self.managed_by_default) or not common.gate(config, features.MULTIKUEUE):
            return
        queue = common.queue_name(obj)
        if queue and lookups.synced() and lookups.multikueue_cluster_queue(namespace, queue):
            _set(obj, self.managed_by_path, api.MULTIKUEUE_CONTROLLER_NAME)

    def validate_create(self, obj: Obj, config: Configuration | None) -> list[FieldError]:
        checks = self.create_checks(obj, config)
        return common.validate_job_on_create(obj, self.gvk, self.prebuilt_supported) + checks

    def validate_update(
        self, old: Obj, new: Obj, namespace: str, lookups: Lookups, config: Configuration | None
    ) -> list[FieldError]:
        if self.update_validator is not None:
            return self.update_validator(old, new, namespace, lookups, config)
        return self.validate_job_on_update(old, new, namespace, lookups) + self.validate_create(new, config)

    def validate_job_on_update(
        self, old: Obj, new: Obj, namespace: str, lookups: Lookups
    ) -> list[FieldError]:
        return common.validate_job_on_update(
            old,
            new,
            old_suspended=self.is_suspended(old),
            new_suspended=self.is_suspended(new),
            namespace=namespace,
            lookups=lookups,
            gvk=self.gvk,
            prebuilt_supported=self.prebuilt_supported,
        )
