"""What the manager knows of a Workload's copies on workers, without writing anything: the copy a
worker gets (upstream's cloneForCreate), the form the manager caches, whether a copy is in sync, and
which copy holds a condition first (multikueue-spec §3.4)."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from kube_runtime.conditions import find_status_condition
from kube_runtime.informer import compact
from kueue_domain import api

if TYPE_CHECKING:
    from manager.remote import RemoteClient

Obj = dict[str, Any]


class DispatchError(Exception):
    """Errors collected over several workers; the reconcile is retried with backoff."""


def best_match(
    remotes: dict[str, Obj | None], condition_type: str, prefer: str | None = None
) -> tuple[str, Obj] | None:
    """The worker whose copy has `condition_type` True since the earliest time (§3.4.2). `prefer`
    (the clusterName already recorded, which is immutable) wins while its copy has it: times have
    1 s resolution, and a copy admitted as early elsewhere may be seen only after the choice."""
    best: tuple[str, str, Obj] | None = None
    for cluster, remote in sorted(remotes.items()):
        if remote is None:
            continue
        condition = find_status_condition((remote.get("status") or {}).get("conditions"), condition_type)
        if condition is None or condition.get("status") != "True":
            continue
        if cluster == prefer:
            return cluster, condition
        since = condition.get("lastTransitionTime") or ""
        if best is None or since < best[1]:
            best = (cluster, since, condition)
    return (best[0], best[2]) if best else None


def without_empty(value: object) -> object:
    """`value` with every empty string, null, empty list and empty map dropped from its maps, at any
    depth: what a typed (Go) comparison sees. A worker that stores v1beta2 and serves v1beta1 through
    conversion drops such fields (priorityClassSource: "") from the copy it returns."""
    if isinstance(value, dict):
        pruned = {k: without_empty(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ("", None, [], {})}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


def remote_spec_out_of_sync(local: Obj, remote: Obj) -> bool:
    """isRemoteSpecOutOfSync: the specs differ, preemption gates and empty fields aside. `remote` may
    be a cached copy whose spec was reduced to its digest (remote_workload_cache_transform)."""
    return _priority_part(local) != _priority_part(remote) or _rest_digest(local) != _rest_digest(remote)


PRIORITY_FIELDS = ("priorityClassName", "priorityClassSource", "priority")
# In a cached remote copy, the digest of its spec without the priority fields and preemption gates.
SPEC_DIGEST_KEY = "kueue-federation.dev/specDigest"
_NOT_COMPARED = {*PRIORITY_FIELDS, "preemptionGates", SPEC_DIGEST_KEY}


def _priority_part(wl: Obj) -> object:
    spec = wl.get("spec") or {}
    return without_empty({k: spec[k] for k in PRIORITY_FIELDS if k in spec})


def _rest_digest(wl: Obj) -> str:
    spec = wl.get("spec") or {}
    digest = spec.get(SPEC_DIGEST_KEY)
    if digest:
        return str(digest)
    rest = without_empty({k: v for k, v in spec.items() if k not in _NOT_COMPARED})
    return hashlib.blake2b(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def remote_workload_cache_transform(remote: Obj) -> Obj:
    """What the manager keeps of a worker's Workload copy: metadata and status whole, but of the spec
    only the priority fields and a digest of the rest, which is all the sync check compares. The
    pod templates were most of a cached copy (multikueue-spec §3.4.6 compares the whole spec)."""
    kept = compact(remote)
    spec = kept.get("spec")
    if isinstance(spec, dict):
        reduced = {k: spec[k] for k in PRIORITY_FIELDS if k in spec}
        reduced[SPEC_DIGEST_KEY] = _rest_digest(kept)
        kept["spec"] = reduced
    return kept


def only_priority_differs(local: Obj, remote: Obj) -> bool:
    """A priority change of a copy whose priority comes from a WorkloadPriorityClass (the job's
    `kueue.x-k8s.io/priority-class` label changed, or the class's value) is patched into the copy,
    not re-dispatched (upstream's PriorityChanged(local, remote)); a Workload whose priority comes
    from a pod PriorityClass never changes it."""
    local_source = (local.get("spec") or {}).get("priorityClassSource")
    remote_source = (remote.get("spec") or {}).get("priorityClassSource")
    if local_source == api.PRIORITY_CLASS_SOURCE_POD or remote_source != api.PRIORITY_CLASS_SOURCE_WORKLOAD:
        return False
    return _rest_digest(local) == _rest_digest(remote)


def priority_patch(local: Obj) -> Obj:
    """The copy's `spec` merge patch that gives it the manager Workload's class and priority."""
    spec = local.get("spec") or {}
    return {k: spec.get(k) for k in PRIORITY_FIELDS}


def remote_copy(
    local: Obj, origin: str, group_primary: str = "", group_members: list[str] | None = None
) -> Obj:
    """cloneForCreate (§3.4.6): name, namespace, labels (job-uid dropped, origin added),
    annotations, the spec; no owners, finalizers or status. Beyond upstream, a group's copies name
    their primary or members, so that our workers admit the group as one (engine/gang.py)."""
    meta = local["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != api.LABEL_JOB_UID}
    labels[api.LABEL_MULTIKUEUE_ORIGIN] = origin
    copy_meta: Obj = {"name": meta["name"], "namespace": meta["namespace"], "labels": labels}
    annotations = dict(meta.get("annotations") or {})
    if group_primary:
        annotations[api.ANNOTATION_MULTIKUEUE_GROUP_PRIMARY] = group_primary
    if group_members:
        annotations[api.ANNOTATION_MULTIKUEUE_GROUP_MEMBERS] = ",".join(sorted(group_members))
    if annotations:
        copy_meta["annotations"] = annotations
    return {
        "apiVersion": api.WORKLOAD.api_version,
        "kind": api.WORKLOAD.kind,
        "metadata": copy_meta,
        "spec": copy.deepcopy(local.get("spec") or {}),
    }


@dataclass
class Group:
    """What one reconcile knows about the workers of a Workload's MultiKueueConfig."""

    available: dict[str, RemoteClient] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    remotes: dict[str, Obj | None] = field(default_factory=dict)
