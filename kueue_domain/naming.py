"""Workload names, as Kueue derives them from their owners: both processes compute them (the
worker's job integrations name the Workloads they create, the manager predicts the names its
copies get on a worker), so they live here once."""

from __future__ import annotations

import hashlib
from typing import Any

from kueue_domain import api

Obj = dict[str, Any]

MAX_PREFIX_LENGTH = 247
HASH_LENGTH = 5
LWS_KIND = "LeaderWorkerSet"
LWS_GROUP = "leaderworkerset.x-k8s.io"


def workload_name(owner_name: str, owner_uid: str, kind: str, group: str, extra: str = "") -> str:
    """`<lower(kind)>-<ownerName>` (cut to 247 chars) + `-` + 5 hex of SHA-1(kind, group, name, uid)."""
    prefix = f"{kind.lower()}-{owner_name}"[:MAX_PREFIX_LENGTH]
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update("\n".join([kind, group, owner_name, owner_uid] + ([extra] if extra else [])).encode())
    return f"{prefix}-{digest.hexdigest()[:HASH_LENGTH]}"


def group_workload_name(lws: Obj, index: int) -> str:
    """The Workload of a LeaderWorkerSet's group `index`; a MultiKueue copy hashes the manager's
    LWS UID (annotation `kueue.x-k8s.io/multikueue-origin-uid`) so that both sides agree."""
    meta = lws["metadata"]
    uid = meta["uid"]
    if (meta.get("labels") or {}).get(api.LABEL_MULTIKUEUE_ORIGIN):
        uid = (meta.get("annotations") or {}).get(api.ANNOTATION_MULTIKUEUE_ORIGIN_UID) or uid
    return workload_name(f"{meta['name']}-{index}", uid, LWS_KIND, LWS_GROUP)


def prebuilt_workload_name(obj: Obj) -> str:
    """The prebuilt Workload an object names: the annotation first (WorkloadIdentifierAnnotations),
    the label as a fallback; "" when neither is set."""
    meta = obj.get("metadata") or {}
    return (meta.get("annotations") or {}).get(api.ANNOTATION_PREBUILT_WORKLOAD_NAME) or (
        meta.get("labels") or {}
    ).get(api.LABEL_PREBUILT_WORKLOAD_NAME, "")
