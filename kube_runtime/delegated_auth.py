"""Delegated authentication and authorization for a server the kube-apiserver sits in front of (an
aggregated API server, a secured metrics endpoint), as k8s.io/apiserver's delegating options do it.

Authentication (`RequestHeaderAuthenticator`): the kube-apiserver proxies a request with its
front-proxy client certificate and names the user in `X-Remote-User`, `X-Remote-Group` and
`X-Remote-Extra-*` headers. Those headers are believed only from a client certificate signed by the
request-header CA, and (when the list is not empty) whose common name is an allowed name; both come
from the ConfigMap kube-system/extension-apiserver-authentication, with the header names. A client
certificate signed by the cluster's client CA (`client-ca-file` in the same ConfigMap) authenticates
its common name, with its organizations as groups. Anything else is unauthenticated. Every
authenticated user also gets the group `system:authenticated`, as the apiserver adds it.

Bearer tokens (`TokenReviewer`, for a server clients reach directly, as the metrics endpoints): one
TokenReview per token, its answer (authenticated or not) cached for a few seconds under the token's
SHA-256, as k8s.io/apiserver's delegating token authenticator does.

Authorization (`SubjectAccessReviewer`): one SubjectAccessReview per request attributes, cached
for a few seconds (allowed and denied alike), members of `system:masters` allowed without asking
(unless `always_allow_groups` says otherwise). Both caches are bounded (`ExpiringCache`).

The pure parts (`RequestHeaderSettings.from_config_map`, `authenticate`, the Status bodies) need no
cluster; `peer_certificate` reads the client certificate of an aiohttp request.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kube_runtime import resources
from kube_runtime.client import KubeClient, KubeClientError, NotFound
from kube_runtime.clock import Clock
from kube_runtime.gofmt import go_quote

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

AUTHENTICATION_CONFIG_MAP_NAMESPACE = "kube-system"
AUTHENTICATION_CONFIG_MAP_NAME = "extension-apiserver-authentication"
# Keys of that ConfigMap (the kube-apiserver writes them from its --requestheader-* and
# --client-ca-file flags); the list-valued ones hold a JSON array.
KEY_CLIENT_CA = "client-ca-file"
KEY_REQUESTHEADER_CA = "requestheader-client-ca-file"
KEY_ALLOWED_NAMES = "requestheader-allowed-names"
KEY_USERNAME_HEADERS = "requestheader-username-headers"
KEY_UID_HEADERS = "requestheader-uid-headers"
KEY_GROUP_HEADERS = "requestheader-group-headers"
KEY_EXTRA_PREFIXES = "requestheader-extra-headers-prefix"

GROUP_AUTHENTICATED = "system:authenticated"
GROUP_MASTERS = "system:masters"
USER_ANONYMOUS = "system:anonymous"

SUBJECT_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
AUTHORIZATION_CACHE_SECONDS = 10.0  # the apiserver's delegated authorizer caches allowed and denied 10 s
AUTHENTICATION_CACHE_SECONDS = 10.0
CACHE_MAX_ENTRIES = 4096
REFRESH_SECONDS = 60.0


class Headers(Protocol):
    """What is read of the request headers: aiohttp's (case-insensitive) CIMultiDict and proxy."""

    def getall(self, key: str, default: Any = ...) -> list[str]: ...

    def keys(self) -> Iterable[str]: ...


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------
# Authentication


def _json_list(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    try:
        parsed = json.loads(value)
    except ValueError:
        return ()
    return tuple(str(v) for v in parsed) if isinstance(parsed, list) else ()


def _pem_certs(pem: str | None) -> tuple[x509.Certificate, ...]:
    if not pem:
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(pem.encode()))
    except ValueError:
        log.warning("unreadable CA bundle in the authentication ConfigMap")
        return ()


@dataclass(frozen=True)
class RequestHeaderSettings:
    """The ConfigMap kube-system/extension-apiserver-authentication, parsed. Empty: nobody is trusted."""

    requestheader_cas: tuple[x509.Certificate, ...] = ()
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ()
    uid_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = ()
    extra_prefixes: tuple[str, ...] = ()
    client_cas: tuple[x509.Certificate, ...] = ()

    @classmethod
    def from_config_map(cls, config_map: Obj | None) -> RequestHeaderSettings:
        data = (config_map or {}).get("data") or {}
        return cls(
            requestheader_cas=_pem_certs(data.get(KEY_REQUESTHEADER_CA)),
            allowed_names=_json_list(data.get(KEY_ALLOWED_NAMES)),
            username_headers=_json_list(data.get(KEY_USERNAME_HEADERS)),
            uid_headers=_json_list(data.get(KEY_UID_HEADERS)),
            group_headers=_json_list(data.get(KEY_GROUP_HEADERS)),
            extra_prefixes=_json_list(data.get(KEY_EXTRA_PREFIXES)),
            client_cas=_pem_certs(data.get(KEY_CLIENT_CA)),
        )

    def trust_pem(self) -> str:
        """The CAs a TLS server should accept client certificates from (both kinds; `authenticate`
        then tells them apart)."""
        return "".join(
            c.public_bytes(serialization.Encoding.PEM).decode()
            for c in self.requestheader_cas + self.client_cas
        )


def _issued_for_clients_by(cert: x509.Certificate, cas: Iterable[x509.Certificate], now: dt.datetime) -> bool:
    """`cert` is valid now, usable for client authentication, and signed directly by one of `cas`."""
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return False
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = None
    if usages is not None and ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        if x509.ObjectIdentifier("2.5.29.37.0") not in usages:  # anyExtendedKeyUsage
            return False
    for ca in cas:
        if not ca.not_valid_before_utc <= now <= ca.not_valid_after_utc:
            continue
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _first_value(headers: Headers, names: Iterable[str]) -> str:
    for name in names:
        for value in headers.getall(name, []):
            if value.strip():
                return value.strip()
    return ""


def _all_values(headers: Headers, names: Iterable[str]) -> list[str]:
    values = []
    for name in names:
        values += [v.strip() for v in headers.getall(name, []) if v.strip()]
    return values


def _extra(headers: Headers, prefixes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    extra: dict[str, list[str]] = {}
    lowered = [p.lower() for p in prefixes]
    for key in dict.fromkeys(headers.keys()):
        for prefix in lowered:
            if key.lower().startswith(prefix) and len(key) > len(prefix):
                name = urllib.parse.unquote(key[len(prefix) :].lower())
                extra.setdefault(name, []).extend(headers.getall(key, []))
                break
    return {k: tuple(v) for k, v in extra.items()}


def _with_authenticated(user: UserInfo) -> UserInfo:
    if user.name == USER_ANONYMOUS or GROUP_AUTHENTICATED in user.groups:
        return user
    return UserInfo(user.name, user.uid, (*user.groups, GROUP_AUTHENTICATED), user.extra)


def authenticate(
    peer_der: bytes | None, headers: Headers, settings: RequestHeaderSettings, now: dt.datetime | None = None
) -> UserInfo | None:
    """The user a request is from, or None (unauthenticated).

    `peer_der`: the client certificate the TLS handshake presented (DER), if any. The X-Remote-*
    headers count only with a front-proxy certificate (signed by the request-header CA, allowed
    common name) and when they name a user; otherwise the certificate itself may authenticate its
    common name if the client CA signed it."""
    if not peer_der:
        return None
    now = now or dt.datetime.now(dt.UTC)
    try:
        cert = x509.load_der_x509_certificate(peer_der)
    except ValueError:
        return None
    if _issued_for_clients_by(cert, settings.requestheader_cas, now):
        allowed = not settings.allowed_names or _common_name(cert) in settings.allowed_names
        name = _first_value(headers, settings.username_headers) if allowed else ""
        if name:
            return _with_authenticated(
                UserInfo(
                    name=name,
                    uid=_first_value(headers, settings.uid_headers),
                    groups=tuple(_all_values(headers, settings.group_headers)),
                    extra=_extra(headers, settings.extra_prefixes),
                )
            )
    if _issued_for_clients_by(cert, settings.client_cas, now) and _common_name(cert):
        organizations = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        return _with_authenticated(
            UserInfo(name=_common_name(cert), groups=tuple(str(o.value) for o in organizations))
        )
    return None


def peer_certificate(request: Any) -> bytes | None:
    """The DER client certificate of an aiohttp request over TLS (None without one)."""
    transport = getattr(request, "transport", None)
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    return ssl_object.getpeercert(binary_form=True)


class RequestHeaderAuthenticator:
    """Keeps `settings` in step with the ConfigMap (`await refresh()` at start and periodically)."""

    def __init__(self, kube: KubeClient, clock: Clock | None = None) -> None:
        self.kube = kube
        self.clock = clock or Clock()
        self.settings = RequestHeaderSettings()
        self.loaded = False

    async def refresh(self) -> bool:
        """Re-read the ConfigMap; True when the settings changed. A missing ConfigMap (an apiserver
        without --requestheader-client-ca-file) trusts nobody; a failed read keeps the last settings."""
        try:
            config_map = await self.kube.get(
                resources.CONFIG_MAP,
                AUTHENTICATION_CONFIG_MAP_NAME,
                namespace=AUTHENTICATION_CONFIG_MAP_NAMESPACE,
            )
        except NotFound:
            config_map = None
        except KubeClientError as exc:
            log.warning(
                "cannot read the authentication ConfigMap; keeping the last one",
                namespace=AUTHENTICATION_CONFIG_MAP_NAMESPACE,
                name=AUTHENTICATION_CONFIG_MAP_NAME,
                error=str(exc),
            )
            return False
        settings = RequestHeaderSettings.from_config_map(config_map)
        changed = settings != self.settings or not self.loaded
        if changed and config_map is None:
            log.warning(
                "no authentication ConfigMap: requests through the kube-apiserver cannot be authenticated",
                namespace=AUTHENTICATION_CONFIG_MAP_NAMESPACE,
                name=AUTHENTICATION_CONFIG_MAP_NAME,
            )
        self.settings, self.loaded = settings, True
        return changed

    def authenticate(self, request: Any) -> UserInfo | None:
        return authenticate(peer_certificate(request), request.headers, self.settings, self.clock.now())


# ------------------------------------------------------------------------------------------------
# A bounded cache of review answers

K = TypeVar("K")
V = TypeVar("V")


class ExpiringCache(Generic[K, V]):
    """Entries live `ttl` seconds; past `max_entries` the expired ones go, then the oldest."""

    def __init__(self, ttl: float, max_entries: int = CACHE_MAX_ENTRIES, monotonic=time.monotonic) -> None:
        self.ttl = ttl
        self.max_entries = max(1, max_entries)
        self._monotonic = monotonic
        self._entries: dict[K, tuple[float, V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> tuple[bool, V | None]:
        """(found, value): found is False for a missing or expired entry."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if entry[0] <= self._monotonic():
            del self._entries[key]
            return False, None
        return True, entry[1]

    def put(self, key: K, value: V) -> None:
        now = self._monotonic()
        self._entries.pop(key, None)
        if len(self._entries) >= self.max_entries:
            self._entries = {k: e for k, e in self._entries.items() if e[0] > now}
            while len(self._entries) >= self.max_entries:  # insertion order: the oldest first
                del self._entries[next(iter(self._entries))]
        self._entries[key] = (now + self.ttl, value)


# ------------------------------------------------------------------------------------------------
# Bearer tokens (TokenReview)


class AuthenticationError(Exception):
    """The TokenReview could not be made (the request answers 500)."""


def bearer_token(headers: Any) -> str | None:
    """The token of `Authorization: Bearer <token>` (the first such header), as the apiserver's
    bearer-token authenticator reads it; None without one."""
    value = (headers.get("Authorization") or "").strip()
    parts = value.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def _user_of_review(review: Obj) -> UserInfo | None:
    status = review.get("status") or {}
    user = status.get("user") or {}
    if not status.get("authenticated") or not user.get("username"):
        return None
    extra = {str(k): tuple(str(x) for x in (v or ())) for k, v in (user.get("extra") or {}).items()}
    return _with_authenticated(
        UserInfo(
            name=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=extra,
        )
    )


class TokenReviewer:
    """Who a bearer token belongs to, by a TokenReview to the cluster (needs `create` on
    tokenreviews.authentication.k8s.io). Answers are cached `cache_seconds`, unauthenticated ones
    too; a failed call is not cached."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        cache_seconds: float = AUTHENTICATION_CACHE_SECONDS,
        max_entries: int = CACHE_MAX_ENTRIES,
        monotonic=time.monotonic,
    ) -> None:
        self.kube = kube
        self._cache: ExpiringCache[bytes, UserInfo | None] = ExpiringCache(
            cache_seconds, max_entries, monotonic
        )
        self.reviews_total = 0

    async def review(self, token: str) -> UserInfo | None:
        key = hashlib.sha256(token.encode()).digest()
        found, user = self._cache.get(key)
        if found:
            return user
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        self.reviews_total += 1
        try:
            review = await self.kube.request("POST", TOKEN_REVIEW_PATH, body=body)
        except KubeClientError as exc:
            raise AuthenticationError(str(exc)) from exc
        user = _user_of_review(review)
        self._cache.put(key, user)
        return user

    async def authenticate(self, request: Any) -> UserInfo | None:
        """The user of an aiohttp request's bearer token (None without a token or for a bad one)."""
        token = bearer_token(request.headers)
        return await self.review(token) if token is not None else None


# ------------------------------------------------------------------------------------------------
# Authorization


@dataclass(frozen=True)
class ResourceAttributes:
    verb: str
    group: str
    version: str
    resource: str
    subresource: str = ""
    name: str = ""
    namespace: str = ""

    def review(self) -> Obj:
        return {
            "resourceAttributes": {
                k: v
                for k, v in {
                    "namespace": self.namespace,
                    "verb": self.verb,
                    "group": self.group,
                    "version": self.version,
                    "resource": self.resource,
                    "subresource": self.subresource,
                    "name": self.name,
                }.items()
                if v
            }
        }


@dataclass(frozen=True)
class NonResourceAttributes:
    verb: str
    path: str

    def review(self) -> Obj:
        return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}


Attributes = ResourceAttributes | NonResourceAttributes


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class AuthorizationError(Exception):
    """The SubjectAccessReview could not be made (the request answers 500)."""


class SubjectAccessReviewer:
    def __init__(
        self,
        kube: KubeClient,
        *,
        cache_seconds: float = AUTHORIZATION_CACHE_SECONDS,
        always_allow_groups: Iterable[str] = (GROUP_MASTERS,),
        max_entries: int = CACHE_MAX_ENTRIES,
        monotonic=time.monotonic,
    ) -> None:
        self.kube = kube
        self.cache_seconds = cache_seconds
        self.always_allow_groups = frozenset(always_allow_groups)
        self._cache: ExpiringCache[tuple, Decision] = ExpiringCache(cache_seconds, max_entries, monotonic)
        self.reviews_total = 0

    async def authorize(self, user: UserInfo, attributes: Attributes) -> Decision:
        if self.always_allow_groups.intersection(user.groups):
            return Decision(True)
        key = (user.name, user.uid, user.groups, tuple(sorted(user.extra.items())), attributes)
        found, cached = self._cache.get(key)
        if found and cached is not None:
            return cached
        spec: Obj = {"user": user.name, "groups": list(user.groups), **attributes.review()}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        self.reviews_total += 1
        try:
            review = await self.kube.request("POST", SUBJECT_ACCESS_REVIEW_PATH, body=body)
        except KubeClientError as exc:
            raise AuthorizationError(str(exc)) from exc
        status = review.get("status") or {}
        decision = Decision(
            bool(status.get("allowed")) and not status.get("denied"), status.get("reason") or ""
        )
        self._cache.put(key, decision)
        return decision


# ------------------------------------------------------------------------------------------------
# Status bodies, as the apiserver writes them


def status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def unauthorized_status() -> Obj:
    return status(401, "Unauthorized", "Unauthorized")


def internal_error_status(error: str) -> Obj:
    return status(500, "InternalError", f"Internal error occurred: {error}", {"causes": [{"message": error}]})


def forbidden_status(user: UserInfo, attributes: Attributes, reason: str = "") -> Obj:
    """The apiserver's 403: `<resource>.<group> "<name>" is forbidden: User "<u>" cannot <verb> ...`."""
    if isinstance(attributes, NonResourceAttributes):
        message = f"User {go_quote(user.name)} cannot {attributes.verb} path {go_quote(attributes.path)}"
        if reason:
            message += f": {reason}"
        return status(403, "Forbidden", f"forbidden: {message}", {})
    resource = attributes.resource + (f"/{attributes.subresource}" if attributes.subresource else "")
    message = (
        f"User {go_quote(user.name)} cannot {attributes.verb} resource {go_quote(resource)} "
        f"in API group {go_quote(attributes.group)}"
    )
    if attributes.namespace:
        message += f" in the namespace {go_quote(attributes.namespace)}"
    else:
        message += " at the cluster scope"
    if reason:
        message += f": {reason}"
    qualified = f"{attributes.resource}.{attributes.group}" if attributes.group else attributes.resource
    subject = f"{qualified} {go_quote(attributes.name)}" if attributes.name else qualified
    details: Obj = {}
    if attributes.name:
        details["name"] = attributes.name
    if attributes.group:
        details["group"] = attributes.group
    details["kind"] = attributes.resource
    return status(403, "Forbidden", f"{subject} is forbidden: {message}", details)
