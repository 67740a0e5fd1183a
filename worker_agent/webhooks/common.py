"""What every job webhook shares (Kueue's jobframework): the default LocalQueue and
WorkloadPriorityClass, suspend-on-create, the MultiKueue `managedBy` default, and the label rules of
the validating webhooks. Pure functions over an object, a `Lookups` view of the informer caches and
the facts the server resolved with API calls (`Facts`).

Before the caches have synced, nothing here reads them: defaulting that needs a cache is skipped
and validation that needs one passes (the rest still applies), so a starting replica can answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kube_runtime.labels import selector_matches
from kueue_domain import api, features, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, LABELS, FieldError
from kueue_domain.naming import prebuilt_workload_name

Obj = dict[str, Any]

# Integration kinds an owner reference can name, by framework: (group, kind).
FRAMEWORK_KINDS = {
    api.FRAMEWORK_BATCH_JOB: (api.JOB.group, api.JOB.kind),
    api.FRAMEWORK_LEADER_WORKER_SET: (api.LEADER_WORKER_SET.group, api.LEADER_WORKER_SET.kind),
    api.FRAMEWORK_JOB_SET: (api.JOB_SET.group, api.JOB_SET.kind),
    api.FRAMEWORK_TRAIN_JOB: (api.TRAIN_JOB.group, api.TRAIN_JOB.kind),
    api.FRAMEWORK_PYTORCH_JOB: (api.PYTORCH_JOB.group, api.PYTORCH_JOB.kind),
    api.FRAMEWORK_TF_JOB: (api.TF_JOB.group, api.TF_JOB.kind),
    api.FRAMEWORK_XGBOOST_JOB: (api.XGBOOST_JOB.group, api.XGBOOST_JOB.kind),
    api.FRAMEWORK_PADDLE_JOB: (api.PADDLE_JOB.group, api.PADDLE_JOB.kind),
    api.FRAMEWORK_JAX_JOB: (api.JAX_JOB.group, api.JAX_JOB.kind),
    api.FRAMEWORK_MPI_JOB: (api.MPI_JOB.group, api.MPI_JOB.kind),
    api.FRAMEWORK_RAY_JOB: (api.RAY_JOB.group, api.RAY_JOB.kind),
    api.FRAMEWORK_RAY_CLUSTER: (api.RAY_CLUSTER.group, api.RAY_CLUSTER.kind),
    api.FRAMEWORK_RAY_SERVICE: (api.RAY_SERVICE.group, api.RAY_SERVICE.kind),
    api.FRAMEWORK_APPWRAPPER: (api.APPWRAPPER.group, api.APPWRAPPER.kind),
}
QUEUE_NAME_PATH = LABELS.key(api.LABEL_QUEUE_NAME)
PRIORITY_CLASS_PATH = LABELS.key(api.LABEL_PRIORITY_CLASS)
MAX_EXEC_TIME_PATH = LABELS.key(api.LABEL_MAX_EXEC_TIME_SECONDS)


class Store(Protocol):
    def get(self, key: str) -> Obj | None: ...


@dataclass
class Lookups:
    """Read-only views of the informer caches the webhooks need (keys as the informers': `name`
    for cluster-scoped objects, `namespace/name` for LocalQueues)."""

    local_queues: Store
    priority_classes: Store
    cluster_queues: Store
    admission_checks: Store
    synced: Callable[[], bool] = lambda: True

    @classmethod
    def from_objects(
        cls,
        local_queues: Iterable[Obj] = (),
        priority_classes: Iterable[Obj] = (),
        cluster_queues: Iterable[Obj] = (),
        admission_checks: Iterable[Obj] = (),
        synced: bool = True,
    ) -> Lookups:
        """Plain dictionaries, for tests."""

        def by_key(objs: Iterable[Obj]) -> dict[str, Obj]:
            out = {}
            for obj in objs:
                meta = obj["metadata"]
                key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
                out[key] = obj
            return out

        return cls(
            by_key(local_queues),
            by_key(priority_classes),
            by_key(cluster_queues),
            by_key(admission_checks),
            lambda: synced,
        )

    def default_local_queue_exists(self, namespace: str) -> bool:
        return self.local_queues.get(f"{namespace}/{api.DEFAULT_NAME}") is not None

    def default_priority_class_exists(self) -> bool:
        return self.priority_classes.get(api.DEFAULT_NAME) is not None

    def multikueue_cluster_queue(self, namespace: str, queue: str) -> bool:
        """The LocalQueue's ClusterQueue uses an AdmissionCheck of the MultiKueue controller."""
        lq = self.local_queues.get(f"{namespace}/{queue}")
        cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
        cq = self.cluster_queues.get(cq_name) if cq_name else None
        if cq is None:
            return False
        spec = cq.get("spec") or {}
        names = list(spec.get("admissionChecks") or ())
        names += [
            rule.get("name")
            for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ()
        ]
        for name in names:
            check = self.admission_checks.get(name) if name else None
            if ((check or {}).get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME:
                return True
        return False


@dataclass(frozen=True)
class Facts:
    """What the server found out with API calls before calling the pure functions."""

    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    # The object has an ancestor (controller owner chain) that Kueue manages.
    managed_ancestor: bool = False
    # A StatefulSet scaled up from zero: whether the Workload of its earlier scale-down is still
    # there (None: it is not) and, if so, whether it is on hold.
    earlier_workload_on_hold: bool | None = None


def gate(config: Configuration, name: str) -> bool:
    """A feature gate the webhooks honour, at upstream's default unless set (kueue_domain.features)."""
    return config.features.enabled(name)


def labels_of(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations_of(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def set_label(obj: Obj, key: str, value: str) -> None:
    meta = obj.setdefault("metadata", {})
    if meta.get("labels") is None:
        meta["labels"] = {}
    meta["labels"][key] = value


def set_annotation(obj: Obj, key: str, value: str) -> None:
    meta = obj.setdefault("metadata", {})
    if meta.get("annotations") is None:
        meta["annotations"] = {}
    meta["annotations"][key] = value


def queue_name(obj: Obj) -> str:
    return labels_of(obj).get(api.LABEL_QUEUE_NAME, "")


def priority_class_name(obj: Obj) -> str:
    return labels_of(obj).get(api.LABEL_PRIORITY_CLASS, "")


def controller_owner(obj: Obj) -> Obj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return None


def owner_kind_managed(obj: Obj, config: Configuration) -> bool:
    """IsOwnerManagedByKueue: the controller owner is of a kind an enabled integration manages."""
    owner = controller_owner(obj)
    if owner is None:
        return False
    group = (owner.get("apiVersion") or "").rpartition("/")[0]
    kinds = {FRAMEWORK_KINDS[f] for f in config.frameworks if f in FRAMEWORK_KINDS}
    return (group, owner.get("kind")) in kinds


def namespace_managed(config: Configuration, facts: Facts) -> bool:
    return selector_matches(config.managed_jobs_namespace_selector, facts.namespace_labels)


def managed_without_queue_name(config: Configuration, facts: Facts) -> bool:
    return config.manage_jobs_without_queue_name and namespace_managed(config, facts)


# ------------------------------------------------------------------------------------------------
# Defaulting (mutating webhooks)


def apply_default_local_queue(
    obj: Obj,
    namespace: str,
    config: Configuration,
    lookups: Lookups,
    facts: Facts,
    check_owner: bool = True,
) -> None:
    """Label `queue-name: default` when the namespace has a LocalQueue `default` (not for an object
    whose owner's kind Kueue manages; the pod webhook has checked the whole owner chain instead)."""
    if (
        gate(config, features.LOCAL_QUEUE_DEFAULTING)
        and lookups.synced()
        and not queue_name(obj)
        and not (check_owner and owner_kind_managed(obj, config))
        and namespace_managed(config, facts)
        and lookups.default_local_queue_exists(namespace)
    ):
        set_label(obj, api.LABEL_QUEUE_NAME, api.DEFAULT_NAME)


def apply_default_priority_class(obj: Obj, config: Configuration, lookups: Lookups) -> None:
    """Label `priority-class: default` when a WorkloadPriorityClass `default` exists."""
    if (
        gate(config, features.WORKLOAD_PRIORITY_CLASS_DEFAULTING)
        and lookups.synced()
        and not priority_class_name(obj)
        and not owner_kind_managed(obj, config)
        and lookups.default_priority_class_exists()
    ):
        set_label(obj, api.LABEL_PRIORITY_CLASS, api.DEFAULT_NAME)


def should_suspend(obj: Obj, config: Configuration, facts: Facts) -> bool:
    """WorkloadShouldBeSuspended: not under a managed ancestor, and a queue name (or
    manageJobsWithoutQueueName in a managed namespace)."""
    if facts.managed_ancestor:
        return False
    if queue_name(obj):
        return True
    return managed_without_queue_name(config, facts)


# ------------------------------------------------------------------------------------------------
# Validation shared by the job kinds


def validate_queue_name(obj: Obj) -> list[FieldError]:
    return fields.validate_as_crd_name(labels_of(obj), api.LABEL_QUEUE_NAME, LABELS)


def validate_prebuilt_on_create(obj: Obj, gvk: str, supported: bool) -> list[FieldError]:
    errors = fields.validate_as_crd_name(labels_of(obj), api.LABEL_PREBUILT_WORKLOAD_NAME, LABELS)
    errors += fields.validate_as_crd_name(
        annotations_of(obj), api.ANNOTATION_PREBUILT_WORKLOAD_NAME, ANNOTATIONS
    )
    if prebuilt_workload_name(obj) and not supported:
        errors.append(
            fields.forbidden(
                LABELS.key(api.LABEL_PREBUILT_WORKLOAD_NAME), api.msg_prebuilt_not_supported(gvk)
            )
        )
    return errors


def validate_max_exec_time_on_create(obj: Obj) -> list[FieldError]:
    text = labels_of(obj).get(api.LABEL_MAX_EXEC_TIME_SECONDS)
    if text is None:
        return []
    try:
        value = fields.atoi(text)
    except fields.GoParseError as exc:
        return [fields.invalid(MAX_EXEC_TIME_PATH, text, str(exc))]
    if value <= 0:
        return [fields.invalid(MAX_EXEC_TIME_PATH, value, api.MSG_SHOULD_BE_GREATER_THAN_ZERO)]
    return []


def validate_job_on_create(obj: Obj, gvk: str, prebuilt_supported: bool = True) -> list[FieldError]:
    """ValidateJobOnCreate: queue name, prebuilt Workload name, maximum execution time."""
    return fields.joined(
        validate_queue_name(obj),
        validate_prebuilt_on_create(obj, gvk, prebuilt_supported),
        validate_max_exec_time_on_create(obj),
    )


def validate_priority_class_update(suspended: bool, old: Obj, new: Obj) -> list[FieldError]:
    """A priority class cannot be added to a running workload, and never removed."""
    if not suspended and not priority_class_name(old) and priority_class_name(new):
        return [fields.invalid(PRIORITY_CLASS_PATH, priority_class_name(new), api.MSG_WPC_ADDED_TO_RUNNING)]
    if not priority_class_name(new) and priority_class_name(old):
        return [fields.invalid(PRIORITY_CLASS_PATH, priority_class_name(new), api.MSG_WPC_REMOVED)]
    return []


def elastic_enabled(obj: Obj) -> bool:
    return annotations_of(obj).get(api.ANNOTATION_ELASTIC_JOB) == api.VALUE_TRUE


def validate_job_on_update(
    old: Obj,
    new: Obj,
    *,
    old_suspended: bool,
    new_suspended: bool,
    namespace: str,
    lookups: Lookups,
    gvk: str,
    prebuilt_supported: bool = True,
) -> list[FieldError]:
    """ValidateJobOnUpdate: queue name, prebuilt name, max execution time, priority class, elastic."""
    errors: list[FieldError] = []
    if not new_suspended:
        errors += fields.immutable(queue_name(new), queue_name(old), QUEUE_NAME_PATH)
    if (
        not queue_name(new)
        and queue_name(old)
        and lookups.synced()
        and lookups.default_local_queue_exists(namespace)
    ):
        errors.append(fields.invalid(QUEUE_NAME_PATH, "", api.MSG_QUEUE_NAME_EMPTY_WITH_DEFAULT_QUEUE))
    if new_suspended or elastic_enabled(old):
        errors += validate_prebuilt_on_create(new, gvk, prebuilt_supported)
    else:
        errors += fields.immutable(
            prebuilt_workload_name(new),
            prebuilt_workload_name(old),
            LABELS.key(api.LABEL_PREBUILT_WORKLOAD_NAME),
        )
    if not new_suspended or not old_suspended:
        errors += fields.immutable(
            labels_of(new).get(api.LABEL_MAX_EXEC_TIME_SECONDS, ""),
            labels_of(old).get(api.LABEL_MAX_EXEC_TIME_SECONDS, ""),
            MAX_EXEC_TIME_PATH,
        )
    errors += validate_priority_class_update(new_suspended, old, new)
    if elastic_enabled(old) != elastic_enabled(new):
        errors.append(
            fields.invalid(
                LABELS.key(api.ANNOTATION_ELASTIC_JOB), elastic_enabled(new), api.MSG_FIELD_IS_IMMUTABLE
            )
        )
    return errors
