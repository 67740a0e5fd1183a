"""The CRD conversion webhook (`/convert`): a ConversionReview (apiextensions.k8s.io/v1) in, every
object converted to the desired `kueue.x-k8s.io` version out (kueue_domain/conversion.py has the
rules). A request the rules cannot serve gets `result.status: Failure` with a message that says why,
which the apiserver shows to the client; nothing is half converted."""

from __future__ import annotations

from typing import Any

from kueue_domain import conversion

Obj = dict[str, Any]

CONVERSION_REVIEW_API_VERSION = "apiextensions.k8s.io/v1"
CONVERSION_REVIEW_KIND = "ConversionReview"


def _failure(uid: str, message: str) -> Obj:
    return {
        "apiVersion": CONVERSION_REVIEW_API_VERSION,
        "kind": CONVERSION_REVIEW_KIND,
        "response": {"uid": uid, "convertedObjects": [], "result": {"status": "Failure", "message": message}},
    }


def review(body: Obj) -> Obj:
    """The ConversionReview answering `body`."""
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict):
        return _failure("", "a ConversionReview needs a request")
    uid = str(request.get("uid") or "")
    desired = str(request.get("desiredAPIVersion") or "")
    group, _, version = desired.partition("/")
    if group != conversion.GROUP or version not in conversion.VERSIONS:
        return _failure(
            uid,
            f"cannot convert to {desired!r}: this webhook serves {conversion.GROUP} "
            f"versions {', '.join(conversion.VERSIONS)}",
        )
    converted = []
    for obj in request.get("objects") or ():
        kind = obj.get("kind") if isinstance(obj, dict) else None
        try:
            # In place: the objects are this request's own, decoded from its body; a failure
            # answers with none of them.
            converted.append(conversion.convert(obj, str(kind), version, in_place=True))
        except conversion.ConversionError as exc:
            name = ((obj or {}).get("metadata") or {}).get("name", "")
            return _failure(uid, f"{kind} {name!r}: {exc}")
    return {
        "apiVersion": CONVERSION_REVIEW_API_VERSION,
        "kind": CONVERSION_REVIEW_KIND,
        "response": {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}},
    }
