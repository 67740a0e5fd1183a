"""AdmissionReview v1 plumbing: the request's parts, the response (allowed, denied, or allowed with
a JSONPatch computed from the object before and after defaulting), and Go-compatible JSON for
hashes that must match the ones upstream Kueue computes.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from kueue_domain import api

Obj = dict[str, Any]


@dataclass
class Request:
    """The parts of `AdmissionReview.request` the webhooks use."""

    uid: str
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    namespace: str
    obj: Obj
    old: Obj | None = None
    dry_run: bool = False

    @classmethod
    def from_review(cls, review: Obj) -> Request:
        request = review.get("request") if isinstance(review, dict) else None
        if not isinstance(request, dict) or not request.get("uid"):
            raise ValueError("not an AdmissionReview request: missing request.uid")
        obj = request.get("object") or {}
        namespace = request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or ""
        return cls(
            uid=request["uid"],
            operation=request.get("operation") or "",
            namespace=namespace,
            obj=obj,
            old=request.get("oldObject"),
            dry_run=bool(request.get("dryRun")),
        )


@dataclass
class Response:
    allowed: bool = True
    patch: list[Obj] = field(default_factory=list)
    message: str = ""
    code: int = 200
    reason: str = ""
    warnings: list[str] = field(default_factory=list)

    def review(self, uid: str) -> Obj:
        response: Obj = {"uid": uid, "allowed": self.allowed}
        if not self.allowed or self.message:
            status: Obj = {"code": self.code}
            if self.reason:
                status["reason"] = self.reason
            if self.message:
                status["message"] = self.message
            response["status"] = status
        if self.allowed and self.patch:
            response["patchType"] = api.ADMISSION_PATCH_TYPE_JSON
            response["patch"] = base64.b64encode(json.dumps(self.patch).encode()).decode()
        if self.warnings:
            response["warnings"] = self.warnings
        return {
            "apiVersion": api.ADMISSION_REVIEW_API_VERSION,
            "kind": api.ADMISSION_REVIEW_KIND,
            "response": response,
        }


def allowed(patch: list[Obj] | None = None, warnings: list[str] | None = None) -> Response:
    return Response(allowed=True, patch=patch or [], warnings=warnings or [])


def denied(message: str, warnings: list[str] | None = None) -> Response:
    """A validation failure: what controller-runtime's `admission.Denied` answers (403 Forbidden)."""
    return Response(allowed=False, message=message, code=403, reason="Forbidden", warnings=warnings or [])


def errored(message: str, code: int = 500) -> Response:
    return Response(allowed=False, message=message, code=code)


# ------------------------------------------------------------------------------------------------
# JSON Patch (RFC 6902) from a before/after pair


def _pointer_token(key: str | int) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def json_patch(before: Any, after: Any, path: str = "") -> list[Obj]:
    """Operations turning `before` into `after`: object members are added, removed or recursed
    into; a list or scalar that differs is replaced whole (an admission object is not shared, so
    replacing a list loses nothing)."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[Obj] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_pointer_token(key)}"})
        for key, value in after.items():
            child = f"{path}/{_pointer_token(key)}"
            if key not in before:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                ops.extend(json_patch(before[key], value, child))
        return ops
    if type(before) is type(after) and before == after:
        return []
    return [{"op": "replace", "path": path, "value": after}]


def apply_json_patch(doc: Any, ops: list[Obj]) -> Any:
    """Apply the subset of RFC 6902 that `json_patch` produces (add, remove, replace); for tests."""
    import copy

    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        if not tokens:
            doc = op.get("value")
            continue
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(index, op["value"])
            elif op["op"] == "remove":
                del parent[index]
            else:
                parent[index] = op["value"]
        elif op["op"] == "remove":
            del parent[last]
        else:
            parent[last] = op["value"]
    return doc


# ------------------------------------------------------------------------------------------------
# Go's encoding/json output


def go_json(value: Any) -> str:
    """json.Marshal's bytes for data decoded from the apiserver: no spaces, `<`, `>`, `&`, U+2028
    and U+2029 escaped, non-ASCII kept. Object members keep their order (the apiserver writes
    structs in field order and maps sorted, as Go does); callers sort Go maps they build."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
