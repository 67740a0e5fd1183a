"""batch/v1 Job webhooks: the job framework's defaulting (`spec.managedBy:
kueue.x-k8s.io/multikueue` over unset or the built-in Job controller's value) and validation, with
the partial-admission annotations (`kueue.x-k8s.io/job-min-parallelism`,
`kueue.x-k8s.io/job-completions-equal-parallelism`) checked on create and update.
"""

from __future__ import annotations

from typing import Any

from kueue_domain import api, fields
from kueue_domain.config import Configuration
from kueue_domain.fields import ANNOTATIONS, FieldError, Path
from worker_agent.webhooks import common
from worker_agent.webhooks.common import Lookups
from worker_agent.webhooks.jobframework import JobWebhook

Obj = dict[str, Any]
GVK = api.JOB.gvk
MIN_PARALLELISM_PATH = ANNOTATIONS.key(api.ANNOTATION_JOB_MIN_PARALLELISM)
SYNC_COMPLETIONS_PATH = ANNOTATIONS.key(api.ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM)


def _spec(job: Obj) -> Obj:
    return job.get("spec") or {}


def is_suspended(job: Obj) -> bool:
    """Suspended, and not merely being stopped by Kueue."""
    return bool(_spec(job).get("suspend")) and (
        common.annotations_of(job).get(api.ANNOTATION_STOPPING) != api.VALUE_TRUE
    )


def _parallelism(job: Obj) -> int:
    value = _spec(job).get("parallelism")
    return 1 if value is None else int(value)


def pods_count(job: Obj) -> int:
    """min(parallelism, completions), parallelism defaulting to 1."""
    parallelism = _parallelism(job)
    completions = _spec(job).get("completions")
    if completions is not None and int(completions) < parallelism:
        return int(completions)
    return parallelism


# ------------------------------------------------------------------------------------------------
# Validation


def _validate_min_parallelism(job: Obj) -> list[FieldError]:
    text = common.annotations_of(job).get(api.ANNOTATION_JOB_MIN_PARALLELISM)
    if text is None:
        return []
    try:
        value = fields.atoi(text)
    except fields.GoParseError as exc:
        return [fields.invalid(MIN_PARALLELISM_PATH, text, str(exc))]
    count = pods_count(job)
    if value >= count or value <= 0:
        return [fields.invalid(MIN_PARALLELISM_PATH, value, api.msg_min_parallelism_range(count))]
    return []


def _sync_completions(job: Obj) -> bool:
    text = common.annotations_of(job).get(api.ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM)
    try:
        return text is not None and fields.parse_bool(text)
    except fields.GoParseError:
        return False


def _validate_sync_completions(job: Obj) -> list[FieldError]:
    text = common.annotations_of(job).get(api.ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM)
    if text is None:
        return []
    errors: list[FieldError] = []
    try:
        enabled = fields.parse_bool(text)
    except fields.GoParseError as exc:
        return [fields.invalid(SYNC_COMPLETIONS_PATH, text, str(exc))]
    if enabled:
        spec = _spec(job)
        if spec.get("completionMode") in (None, "NonIndexed"):
            errors.append(fields.invalid(SYNC_COMPLETIONS_PATH, text, api.MSG_SYNC_COMPLETIONS_NON_INDEXED))
        parallelism = 1 if spec.get("parallelism") is None else spec["parallelism"]
        completions = 1 if spec.get("completions") is None else spec["completions"]
        if parallelism != completions:
            errors.append(
                fields.invalid(
                    Path("spec", "completions"),
                    spec.get("completions"),
                    api.msg_sync_completions_parallelism(api.ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM),
                )
            )
    return errors


def _create_checks(job: Obj, config: Configuration | None = None) -> list[FieldError]:
    return fields.joined(_validate_min_parallelism(job), _validate_sync_completions(job))


def _validate_update(
    old: Obj, new: Obj, namespace: str, lookups: Lookups, config: Configuration | None = None
) -> list[FieldError]:
    """ValidateJobOnCreate and the annotations first, then ValidateJobOnUpdate, then partial
    admission's rules: upstream's order for batch/v1 Jobs."""
    errors = common.validate_job_on_create(new, GVK)
    annotation = api.ANNOTATION_JOB_MIN_PARALLELISM
    if common.annotations_of(new).get(annotation) != common.annotations_of(old).get(annotation):
        errors += _validate_min_parallelism(new)
    errors += _validate_sync_completions(new)
    errors += WEBHOOK.validate_job_on_update(old, new, namespace, lookups)
    # Partial admission: a running job's parallelism is what Kueue admitted.
    if annotation in common.annotations_of(old) and not _spec(old).get("suspend"):
        if _parallelism(old) != _parallelism(new):
            errors.append(
                fields.forbidden(Path("spec", "parallelism"), api.MSG_PARTIAL_ADMISSION_PARALLELISM)
            )
    if (
        is_suspended(old) == is_suspended(new)
        and not is_suspended(new)
        and _sync_completions(old) != _sync_completions(new)
    ):
        errors.append(
            fields.forbidden(
                SYNC_COMPLETIONS_PATH, f"{api.MSG_FIELD_IS_IMMUTABLE} while the job is not suspended"
            )
        )
    return errors


WEBHOOK = JobWebhook(
    GVK,
    api.JOB_MANAGED_BY_DEFAULT,
    is_suspended=is_suspended,
    create_checks=_create_checks,
    update_validator=_validate_update,
)
default = WEBHOOK.default


def validate_create(job: Obj) -> list[FieldError]:
    return WEBHOOK.validate_create(job, None)


def validate_update(old: Obj, new: Obj, namespace: str, lookups: Lookups) -> list[FieldError]:
    return _validate_update(old, new, namespace, lookups)
