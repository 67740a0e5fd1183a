"""structlog setup: JSON in deployment, key=value locally, stdlib logging routed through the same chain.

Secrets never reach the output: any key named like a token, kubeconfig, password, secret or
certificate/key data is redacted, at any depth, and bearer tokens and PEM private keys inside
string values are masked.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

REDACTED = "[REDACTED]"

_SENSITIVE_KEY = re.compile(
    r"token|kubeconfig|passw|secret|client[-_]?key[-_]?data|certificate[-_]?data|private[-_]?key|authorization"
    r"|credential|api[-_]?key",
    re.IGNORECASE,
)
# Names and references of secrets are not secret (`secret_name`, `kubeconfig_secret_ref`).
_REFERENCE_KEY = re.compile(r"(name|namespace|ref|path|_count|_total)$", re.IGNORECASE)
_SECRET_IN_TEXT = [
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 " + REDACTED),
    (
        re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?(-----END \1PRIVATE KEY-----|$)", re.DOTALL),
        REDACTED,
    ),
    (re.compile(r"(?i)((?:client-key-data|token|password)\s*[:=]\s*)\S+"), r"\1" + REDACTED),
]


def is_sensitive_key(key: str) -> bool:
    return bool(_SENSITIVE_KEY.search(key)) and not _REFERENCE_KEY.search(key)


def _redact_text(text: str) -> str:
    for pattern, replacement in _SECRET_IN_TEXT:
        text = pattern.sub(replacement, text)
    return text


def _redact(value: Any, depth: int = 0) -> Any:
    if depth > 8:
        return value
    if isinstance(value, str):
        return _redact_text(value)
    if isinstance(value, dict):
        return {k: REDACTED if is_sensitive_key(str(k)) else _redact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact(v, depth + 1) for v in value)
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: mask sensitive keys (any depth) and secrets embedded in strings."""
    for key in list(event_dict):
        if is_sensitive_key(str(key)):
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _redact(event_dict[key])
    return event_dict


def _redact_rendered(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    # Tracebacks are rendered late (format_exc_info); mask what they may quote.
    if isinstance(event_dict.get("exception"), str):
        event_dict["exception"] = _redact_text(event_dict["exception"])
    return event_dict


def setup_logging(level: str | int = "info", json: bool = False, stream: Any = None) -> None:
    """Configure structlog and the stdlib root logger (idempotent; call once at process start)."""
    numeric_level = level if isinstance(level, int) else logging.getLevelName(level.upper())
    if not isinstance(numeric_level, int):
        raise ValueError(f"unknown log level {level!r}")
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event", "logger"])
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _redact_rendered,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric_level)
    # Chatty libraries stay at warning unless we debug.
    for noisy in ("aiohttp.access", "kubernetes_asyncio"):
        logging.getLogger(noisy).setLevel(max(numeric_level, logging.WARNING))


def bind_object(log: Any, obj: dict[str, Any], cluster: str | None = None) -> Any:
    """Bind cluster, kind, namespace and name of a Kubernetes object to a structlog logger."""
    meta = obj.get("metadata") or {}
    fields = {"kind": obj.get("kind"), "namespace": meta.get("namespace"), "name": meta.get("name")}
    if cluster is not None:
        fields["cluster"] = cluster
    return log.bind(**{k: v for k, v in fields.items() if v is not None})
