"""Server-side apply helpers: apply an object's intent, and write a status only when it would change.

A status apply is skipped only when it would be a no-op: the fields `field_manager` owns on the
status subresource (from managedFields) are exactly the fields of the desired status, and every
one of them already has the desired value. Any doubt means a write (applies are idempotent).
"""

from __future__ import annotations

import json
from typing import Any

from kube_runtime.client import KubeClient, NotFound, ResourceLike

Obj = dict[str, Any]

# Set by the server; an apply body carrying them is rejected (managedFields) or preconditioned (RV).
_SERVER_METADATA = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")
_MISSING = object()


def apply_body(resource: ResourceLike, name: str, namespace: str | None = None, **fields: Any) -> Obj:
    """A minimal apply body: apiVersion, kind, metadata name/namespace, plus `fields` (spec=..., status=...).

    A `metadata` field is merged into the generated metadata (e.g. labels, annotations).
    """
    metadata: Obj = {"name": name}
    if resource.namespaced:
        if not namespace:
            raise ValueError(f"{resource.kind} {name!r} is namespaced: a namespace is required")
        metadata["namespace"] = namespace
    extra_metadata = fields.pop("metadata", None) or {}
    body: Obj = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {**extra_metadata, **metadata},
    }
    body.update(fields)
    return body


def _intent(resource: ResourceLike, obj: Obj) -> Obj:
    body = dict(obj)
    body.setdefault("apiVersion", resource.api_version)
    body.setdefault("kind", resource.kind)
    metadata = dict(body.get("metadata") or {})
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    body["metadata"] = metadata
    return body


async def apply_object(
    client: KubeClient, resource: ResourceLike, obj: Obj, field_manager: str, force: bool = False
) -> Obj:
    """Server-side apply `obj` as `field_manager`; server-populated metadata is dropped from the body."""
    return await client.apply(resource, _intent(resource, obj), field_manager, force=force)


def owned_status_fields(obj: Obj, field_manager: str) -> Obj | None:
    """The fieldsV1 under `f:status` that `field_manager` owns through applies on the status subresource."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if (
            entry.get("manager") == field_manager
            and entry.get("operation") == "Apply"
            and entry.get("subresource") == "status"
        ):
            return (entry.get("fieldsV1") or {}).get("f:status", {})
    return None


def status_apply_is_noop(current_obj: Obj, desired_status: Obj, field_manager: str) -> bool:
    """True when applying `desired_status` as `field_manager` would change nothing on the server."""
    owned = owned_status_fields(current_obj, field_manager)
    if owned is None:
        return not desired_status
    return _map_matches(owned, desired_status, current_obj.get("status", _MISSING))


def _map_matches(fields: Obj, desired: Obj, current: Any) -> bool:
    if not isinstance(current, dict):
        return False
    owned = {key[2:]: child for key, child in fields.items() if key.startswith("f:")}
    if set(owned) != set(desired):
        return False  # applying would add or remove owned fields
    return all(
        _value_matches(owned[key], value, current.get(key, _MISSING)) for key, value in desired.items()
    )


def _value_matches(fields: Obj, desired: Any, current: Any) -> bool:
    children = [key for key in fields if key != "."]
    if not children:  # a scalar, an atomic list or map, or an empty value: compare it whole
        return current is not _MISSING and desired == current
    if isinstance(desired, dict):
        return all(key.startswith("f:") for key in children) and _map_matches(fields, desired, current)
    if isinstance(desired, list):
        return _list_matches(fields, children, desired, current)
    return False


def _list_matches(fields: Obj, children: list[str], desired: list[Any], current: Any) -> bool:
    if not isinstance(current, list) or len(children) != len(desired):
        return False
    if all(key.startswith("k:") for key in children):  # associative list (x-kubernetes-list-type: map)
        positions = []
        for child in children:
            key_values = json.loads(child[2:])
            wanted = [item for item in desired if _has_key(item, key_values)]
            found = [(i, item) for i, item in enumerate(current) if _has_key(item, key_values)]
            if len(wanted) != 1 or len(found) != 1 or not _map_matches(fields[child], wanted[0], found[0][1]):
                return False
            positions.append((desired.index(wanted[0]), found[0][0]))
        current_order = [pos for _, pos in sorted(positions)]
        return current_order == sorted(current_order)  # our items keep the desired relative order
    if all(key.startswith("v:") for key in children):  # set (x-kubernetes-list-type: set)
        values = [json.loads(child[2:]) for child in children]
        return all(v in desired for v in values) and all(v in current for v in desired)
    return False


def _has_key(item: Any, key_values: Obj) -> bool:
    return isinstance(item, dict) and all(item.get(k) == v for k, v in key_values.items())


async def apply_status_if_changed(
    client: KubeClient,
    resource: ResourceLike,
    current_obj: Obj,
    desired_status: Obj,
    field_manager: str,
    force: bool = True,
) -> Obj | None:
    """Apply `desired_status` on the status subresource unless that is a no-op.

    Returns the updated object, or None when nothing was written. Controllers own their status
    fields, so ownership is forced by default (as Kueue does).
    """
    if status_apply_is_noop(current_obj, desired_status, field_manager):
        return None
    meta = current_obj.get("metadata") or {}
    body = apply_body(resource, meta["name"], meta.get("namespace"), status=desired_status)
    return await client.apply_status(resource, body, field_manager, force=force)


async def set_finalizer(
    client: KubeClient, resource: ResourceLike, obj: Obj, finalizer: str, present: bool, strict: bool = True
) -> bool:
    """Add (`present`) or remove one finalizer with a merge patch; False when nothing had to change.

    `strict` sends the object's resourceVersion, so a stale copy fails with Conflict (and is retried
    by the caller's controller) instead of overwriting finalizers someone else just changed. An
    object that is gone is not an error.
    """
    meta = obj["metadata"]
    finalizers = list(meta.get("finalizers") or ())
    if (finalizer in finalizers) == present:
        return False
    finalizers = [*finalizers, finalizer] if present else [f for f in finalizers if f != finalizer]
    patch: Obj = {"finalizers": finalizers or None}
    if strict:
        patch["resourceVersion"] = meta["resourceVersion"]
    try:
        await client.patch_merge(resource, meta["name"], {"metadata": patch}, namespace=meta.get("namespace"))
    except NotFound:
        return False
    return True
