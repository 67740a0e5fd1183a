"""The hook through which a domain layer teaches the client to convert its objects between the
versions of its API group: the client speaks the server's preferred version on the wire while the
callers keep theirs (kube_runtime/client.py). kube_runtime defines no codec of its own; Kueue's
(kueue_domain/conversion.py) registers itself when kueue_domain is imported."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class GroupCodec:
    """How to convert the objects of one API group: `versions` it knows (the callers' first), the
    `kinds` it converts, and `convert(obj, kind, to_version, in_place=...)`."""

    group: str
    versions: tuple[str, ...]
    kinds: frozenset[str]
    convert: Callable[..., Obj]


_CODECS: dict[str, GroupCodec] = {}


def register(codec: GroupCodec) -> None:
    """Install `codec` for its group (registering again replaces it)."""
    _CODECS[codec.group] = codec


def lookup(group: str) -> GroupCodec | None:
    """The codec of `group`, or None: its objects go on the wire as the callers hold them."""
    return _CODECS.get(group)
