"""Validation errors rendered as Kubernetes renders a `field.ErrorList`, so that users (and tools
matching on them) see the messages upstream Kueue's webhooks give:

    metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Bad_Name": a lowercase RFC 1123 ...

`aggregate` joins several errors as `ErrorList.ToAggregate().Error()` does: one error alone, more
as `[a, b]`, duplicates dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kueue_domain import api

_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_BOOLS = {
    "1": True,
    "t": True,
    "T": True,
    "TRUE": True,
    "true": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "FALSE": False,
    "false": False,
    "False": False,
}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Path:
    """field.Path: `spec.template.metadata`, with `.key("k")` as `[k]` and `.index(0)` as `[0]`."""

    def __init__(self, *parts: str) -> None:
        self._text = ".".join(parts)

    def child(self, *names: str) -> Path:
        path = Path()
        path._text = ".".join([self._text, *names]) if self._text else ".".join(names)
        return path

    def key(self, key: str) -> Path:
        path = Path()
        path._text = f"{self._text}[{key}]"
        return path

    def index(self, i: int) -> Path:
        path = Path()
        path._text = f"{self._text}[{i}]"
        return path

    def __str__(self) -> str:
        return self._text


LABELS = Path("metadata", "labels")
ANNOTATIONS = Path("metadata", "annotations")


def render_value(value: Any) -> str:
    """The bad value as field.Error prints it: strings %q, numbers and booleans plain."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return api.go_quote(value)
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class FieldError:
    path: str
    kind: str  # "Invalid value", "Forbidden", "Required value", "Too many"
    detail: str
    value: Any = None

    def __str__(self) -> str:
        if self.kind in ("Invalid value", "Too many"):
            body = f"{self.kind}: {render_value(self.value)}"
        else:
            body = self.kind
        return f"{self.path}: {body}" + (f": {self.detail}" if self.detail else "")


def invalid(path: Path, value: Any, detail: str) -> FieldError:
    return FieldError(str(path), "Invalid value", detail, value)


def forbidden(path: Path, detail: str) -> FieldError:
    return FieldError(str(path), "Forbidden", detail)


def required(path: Path, detail: str) -> FieldError:
    return FieldError(str(path), "Required value", detail)


def immutable(new: Any, old: Any, path: Path) -> list[FieldError]:
    """apivalidation.ValidateImmutableField: the new value is reported when it differs."""
    return [] if new == old else [invalid(path, new, api.MSG_FIELD_IS_IMMUTABLE)]


def aggregate(errors: Sequence[FieldError]) -> str:
    messages: list[str] = []
    for error in errors:
        text = str(error)
        if text not in messages:
            messages.append(text)
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"


# ------------------------------------------------------------------------------------------------
# Value checks with Go's messages


def dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if len(value) > api.DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(api.msg_max_length(api.DNS1123_SUBDOMAIN_MAX_LENGTH))
    if _DNS1123_SUBDOMAIN.fullmatch(value) is None:
        errors.append(api.MSG_DNS1123_SUBDOMAIN)
    return errors


def validate_as_crd_name(mapping: dict[str, str], key: str, base: Path) -> list[FieldError]:
    """ValidateLabelAsCRDName / ValidateAnnotationAsCRDName: a present value must name an object."""
    if key not in mapping:
        return []
    errors = dns1123_subdomain_errors(mapping[key])
    return [invalid(base.key(key), mapping[key], ",".join(errors))] if errors else []


class GoParseError(ValueError):
    pass


def atoi(text: str) -> int:
    """strconv.Atoi, with its error messages."""
    if _GO_INT.fullmatch(text) is None:
        raise GoParseError(f"strconv.Atoi: parsing {api.go_quote(text)}: invalid syntax")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise GoParseError(f"strconv.Atoi: parsing {api.go_quote(text)}: value out of range")
    return value


def parse_bool(text: str) -> bool:
    """strconv.ParseBool, with its error message."""
    if text not in _GO_BOOLS:
        raise GoParseError(f"strconv.ParseBool: parsing {api.go_quote(text)}: invalid syntax")
    return _GO_BOOLS[text]


def joined(*lists: Iterable[FieldError]) -> list[FieldError]:
    return [error for errors in lists for error in errors]
