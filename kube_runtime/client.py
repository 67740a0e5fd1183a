"""A small async REST client for the Kubernetes API that works on plain dicts.

Credentials come from kube_runtime/credentials.py (kubeconfig file or dict, in-cluster); requests go
through our own aiohttp session on plain dicts: generated models are too slow for 15k objects.
Every call takes a Resource (group, version, plural, kind, namespaced) and builds its URL here.

An API group with a codec (kube_runtime/codec.py; Kueue's, kueue_domain/conversion.py, keeps
Kueue's objects in v1beta1 form in our code whatever the apiserver stores) is spoken on the wire in
the version the server prefers (`use_served_version`), bodies converted both ways in-process, so
neither our processes nor the apiserver need a conversion webhook round trip for our own traffic.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from kube_runtime import codec, credentials, ratelimit
from kube_runtime.clock import Clock
from kube_runtime.credentials import Credentials
from kube_runtime.ratelimit import ResourceRateLimits
from kube_runtime.resources import Resource, parse_api_path

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

USER_AGENT = "kueue-federation/0.1"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


ResourceLike = Resource


def _converts(group: str, kind: str) -> bool:
    """Whether `group` has a codec (kube_runtime/codec.py) that converts `kind`."""
    group_codec = codec.lookup(group)
    return group_codec is not None and kind in group_codec.kinds


def _codec(group: str) -> codec.GroupCodec:
    group_codec = codec.lookup(group)
    assert group_codec is not None, group  # _wire converts only groups with a codec
    return group_codec


# ---------------------------------------------------------------------------------------------
# Errors


class KubeClientError(Exception):
    """Base of every error this client raises."""


class ConnectionLost(KubeClientError):
    """The apiserver could not be reached or the connection broke mid-request."""


class ApiError(KubeClientError):
    """The apiserver answered with an error Status."""

    code: int = 0

    def __init__(self, status: Obj, reason: str = "", message: str = "") -> None:
        self.status = status
        self.code = int(status.get("code") or type(self).code or 0)
        self.reason = reason or status.get("reason", "")
        self.message = message or status.get("message", "")
        super().__init__(f"{self.code} {self.reason}: {self.message}")


class BadRequest(ApiError):
    code = 400


class Unauthorized(ApiError):
    code = 401


class Forbidden(ApiError):
    code = 403


class NotFound(ApiError):
    code = 404


class Conflict(ApiError):
    """409: an optimistic-concurrency or server-side-apply conflict, or AlreadyExists."""

    code = 409


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists (create of an existing name)."""


class Gone(ApiError):
    """410: the requested resourceVersion is too old (compacted); the caller must re-list."""

    code = 410


class Invalid(ApiError):
    code = 422


class TooManyRequests(ApiError):
    code = 429


_ERRORS_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(status: Obj, http_code: int | None = None) -> ApiError:
    """The typed exception for a metav1.Status (from an error response or a watch ERROR event)."""
    code = int(status.get("code") or http_code or 0)
    status = {**status, "code": code}
    if code == 409 and status.get("reason") == "AlreadyExists":
        return AlreadyExists(status)
    return _ERRORS_BY_CODE.get(code, ApiError)(status)


def _dumps_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def _status_from_body(http_code: int, body: bytes) -> Obj:
    try:
        decoded = orjson.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return decoded
    text = body.decode("utf-8", "replace").strip()[:1024]
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": http_code, "message": text}


# ---------------------------------------------------------------------------------------------
# URLs


def object_namespace_name(resource: ResourceLike, obj: Obj, namespace: str | None) -> tuple[str | None, str]:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError(f"{resource.kind}: metadata.name is required")
    ns = (namespace or meta.get("namespace")) if resource.namespaced else None
    return ns, name


# ---------------------------------------------------------------------------------------------
# Watch stream parsing


class WatchStreamParser:
    """Splits a chunked watch response into events; chunks may end anywhere, even mid-line."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[str, Obj]]:
        self._buffer.extend(chunk)
        end = self._buffer.rfind(b"\n")
        if end < 0:
            return []
        complete = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return [_decode_event(line) for line in complete.split(b"\n") if line.strip()]

    def close(self) -> list[tuple[str, Obj]]:
        """Events from a trailing line the server did not end with a newline."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return [_decode_event(rest)] if rest.strip() else []


def _decode_event(line: bytes) -> tuple[str, Obj]:
    try:
        event = orjson.loads(line)
        return event["type"], event["object"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConnectionLost(f"malformed watch event: {line[:200]!r}") from exc


def raise_for_watch_event(event_type: str, obj: Obj) -> None:
    """An ERROR event carries a Status: 410 means the RV was compacted (re-list), anything else fails."""
    if event_type == "ERROR":
        raise error_from_status(obj if isinstance(obj, dict) else {"message": str(obj)})


def resource_of_path(path: str) -> str:
    """The resource (and subresource) a request path names: `workloads/status`, `events`, `leases`."""
    _, resource, subresource = parse_api_path(path)
    return f"{resource}/{subresource}" if subresource else resource


# ---------------------------------------------------------------------------------------------
# The client

_TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)


class KubeClient:
    """Async REST client for one apiserver. Create with one of the `from_*`/`in_cluster` coroutines."""

    def __init__(
        self,
        creds: Credentials,
        *,
        clock: Clock | None = None,
        qps: float | None = None,
        burst: int = 100,
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        get_attempts: int = 4,
        max_connections: int = 256,
        tcp_keepalive: float | None = None,
    ) -> None:
        self.credentials = creds
        self.host = creds.host
        self._clock = clock or Clock()
        # qps/burst per API resource, as controller-runtime's per-kind REST clients (ratelimit.py).
        self._limiter = ResourceRateLimits(qps, burst, self._clock) if qps else None
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._get_attempts = max(1, get_attempts)
        self._max_connections = max_connections
        # Seconds of idle before (and between) TCP keepalive probes; None keeps the kernel's defaults.
        self._tcp_keepalive = tcp_keepalive
        self._session: aiohttp.ClientSession | None = None
        # Monotonic time of the last bytes from the server (a response, a watch chunk): a sign of life.
        self.last_heard = float("-inf")
        # Requests sent, by (method, resource[/subresource], status code or "<error>"): what the
        # client QPS budget went to. Exported by the worker_agent as rest_client_requests_total.
        self.request_counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        # API group -> version spoken on the wire when it differs from the callers' (see
        # use_served_version); bodies are converted by the group's codec (kube_runtime/codec.py).
        self.wire_versions: dict[str, str] = {}
        # Ask the server once, before the first request to a converted group, which version to speak.
        self.negotiate_versions = True
        self._negotiation = asyncio.Lock()

    # -- construction ------------------------------------------------------------------------

    @classmethod
    async def from_kubeconfig_file(cls, path: str, context: str | None = None, **kwargs: Any) -> KubeClient:
        return cls(credentials.from_kubeconfig_file(path, context), **kwargs)

    @classmethod
    async def from_kubeconfig_dict(cls, d: Obj, context: str | None = None, **kwargs: Any) -> KubeClient:
        return cls(credentials.from_kubeconfig_dict(d, context), **kwargs)

    @classmethod
    async def in_cluster(cls, **kwargs: Any) -> KubeClient:
        return cls(credentials.in_cluster(), **kwargs)

    # -- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                enable_cleanup_closed=True,
                socket_factory=self._keepalive_socket if self._tcp_keepalive else None,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": USER_AGENT},
                json_serialize=_dumps_text,
            )
        return self._session

    def _keepalive_socket(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """A socket that notices a silent peer: keepalive probes after `tcp_keepalive` seconds idle,
        and (Linux) unacknowledged data or probes abort the connection after three such periods."""
        family, kind, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=kind, proto=proto)
        interval = max(1, int(self._tcp_keepalive or 1))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in (("TCP_KEEPIDLE", interval), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", 2)):
            if hasattr(socket, option):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 3 * interval * 1000)
        return sock

    def _heard(self) -> None:
        self.last_heard = self._clock.monotonic()

    async def probe(self, seconds: float, path: str = "/livez") -> int:
        """One cheap GET (the apiserver serves /livez to every client, outside API priority and
        fairness); returns the HTTP status, whatever it is: any answer is a sign of life. Raises
        ConnectionLost when none came within `seconds`."""
        client_timeout = aiohttp.ClientTimeout(
            total=seconds, sock_connect=min(seconds, self._connect_timeout)
        )
        try:
            async with self._get_session().get(
                self.host + path,
                headers=await self._headers(None),
                timeout=client_timeout,
                **self._request_kwargs(),
            ) as resp:
                await resp.read()
                self._heard()
                return resp.status
        except _TRANSPORT_ERRORS as exc:
            raise ConnectionLost(f"GET {self.host}{path}: {type(exc).__name__}: {exc}") from exc

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON}
        if content_type:
            headers["Content-Type"] = content_type
        # Re-reads token files and re-runs exec plugins whose credential expired.
        auth = await self.credentials.authorization()
        if auth:
            headers["Authorization"] = auth
        return headers

    def _request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        ctx = self.credentials.ssl_context()
        if ctx is not None:
            kwargs["ssl"] = ctx
        if self.credentials.tls_server_name:
            kwargs["server_hostname"] = self.credentials.tls_server_name
        if self.credentials.proxy:
            kwargs["proxy"] = self.credentials.proxy
        return kwargs

    @contextlib.asynccontextmanager
    async def turn(
        self, resource: ResourceLike, namespace: str | None = None, lane: int = ratelimit.LOW
    ) -> AsyncIterator[None]:
        """Wait for the rate limiter's token for `resource` in `lane` (ratelimit.ResourceRateLimits.turn);
        the block's first request to that resource spends it. Without a rate limit, just runs the block."""
        if self._limiter is None:
            yield
            return
        wire = await self._wired(resource)
        async with self._limiter.turn(wire.api_path(namespace), lane):
            yield

    # -- versions ----------------------------------------------------------------------------

    async def served_versions(self, group: str) -> list[str]:
        """The versions of `group` the server serves, preferred first; [] when it serves none."""
        try:
            doc = await self._get(f"/apis/{group}")
        except NotFound:
            return []
        preferred = (doc.get("preferredVersion") or {}).get("version")
        versions = [v.get("version") for v in doc.get("versions") or () if v.get("version")]
        return sorted(versions, key=lambda v: v != preferred)

    async def serves(self, resource: ResourceLike) -> bool:
        """Whether the server serves `resource` in its version (its CRD installed and established)."""
        group, version = getattr(resource, "group", ""), getattr(resource, "version", "")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = await self._get(path)
        except NotFound:
            return False
        return any(r.get("name") == resource.plural for r in doc.get("resources") or ())

    async def use_served_version(
        self, group: str, known: tuple[str, ...], served: list[str] | None = None
    ) -> str | None:
        """Speak the server's preferred version of `group` among `known` (ours first if it
        prefers none of them); None, and no change, when it serves none of `known`. `served`:
        what `served_versions` already answered, so as not to ask twice."""
        if served is None:
            served = await self.served_versions(group)
        chosen = next((v for v in served if v in known), None)
        if chosen is not None:
            self.wire_versions[group] = chosen
        return chosen

    async def _negotiate(self, resource: ResourceLike) -> None:
        """Before the first request to a group with a codec (Kueue's): speak the version the server
        prefers. A server that cannot say (unreachable, CRDs not installed yet) is asked again next time."""
        group = resource.group
        group_codec = codec.lookup(group)
        if group_codec is None or group in self.wire_versions or not self.negotiate_versions:
            return
        async with self._negotiation:
            if group in self.wire_versions:
                return
            try:
                version = await self.use_served_version(group, group_codec.versions)
            except (ConnectionLost, ApiError) as exc:
                log.info(
                    "cannot ask which API versions the server serves yet",
                    host=self.host,
                    group=group,
                    error=str(exc),
                )
                return
            if version is not None:
                log.debug("API version on the wire", host=self.host, group=group, version=version)

    async def _wired(self, resource: ResourceLike) -> ResourceLike:
        """`resource` as sent on the wire, after negotiating its group's version."""
        await self._negotiate(resource)
        return self._wire(resource)[0]

    def _wire(self, resource: ResourceLike) -> tuple[ResourceLike, str | None]:
        """The resource as sent on the wire, and the callers' version when bodies need converting."""
        version = self.wire_versions.get(resource.group)
        if version is None or version == resource.version or not _converts(resource.group, resource.kind):
            return resource, None
        return dataclasses.replace(resource, version=version), resource.version

    async def wire_api_version(self, api_version: str, kind: str) -> str:
        """`api_version` of an object of `kind` as this server names it: an object of a group with a codec
        is named in the version spoken on the wire, not the one our processes hold (an Event about it
        must say so: `kubectl events --for workload/NAME` asks for the server's preferred version).
        Negotiates the group's version first if this client has not spoken it yet."""
        group, _, version = api_version.rpartition("/")
        if not _converts(group, kind):
            return api_version
        await self._negotiate(Resource(group, version, "", kind, True))
        wire = self.wire_versions.get(group)
        return api_version if wire is None or wire == version else f"{group}/{wire}"

    def _encode(self, resource: ResourceLike, body: Any) -> Any:
        wire, _ = self._wire(resource)
        if wire is resource or not isinstance(body, dict):
            return body
        return _codec(resource.group).convert(body, resource.kind, wire.version)

    def _decode(self, resource: ResourceLike, obj: Obj) -> Obj:
        _, ours = self._wire(resource)
        if ours is not None and obj.get("kind") in (resource.kind, f"{resource.kind}List"):
            _codec(resource.group).convert(obj, resource.kind, ours, in_place=True)
        return obj

    # -- raw requests ------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """One HTTP round trip; returns the decoded JSON body or raises ApiError/ConnectionLost.

        A 429 (the apiserver did not process the request) is retried after its Retry-After, a few times.
        """
        data = None
        if body is not None:
            data = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
            content_type = content_type or JSON
        client_timeout = aiohttp.ClientTimeout(
            total=request_timeout or self._request_timeout, sock_connect=self._connect_timeout
        )
        for attempt in range(1, _MAX_429_ATTEMPTS + 1):
            if self._limiter is not None:
                await self._limiter.acquire(path)
            headers = await self._headers(content_type)
            try:
                async with self._get_session().request(
                    method,
                    self.host + path,
                    params=_clean_params(params),
                    data=data,
                    headers=headers,
                    timeout=client_timeout,
                    **self._request_kwargs(),
                ) as resp:
                    payload = await resp.read()
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After")
                self._heard()
            except _TRANSPORT_ERRORS as exc:
                self.request_counts[(method, resource_of_path(path), "<error>")] += 1
                raise ConnectionLost(f"{method} {self.host}{path}: {type(exc).__name__}: {exc}") from exc
            self.request_counts[(method, resource_of_path(path), str(status))] += 1
            if status == 429 and attempt < _MAX_429_ATTEMPTS:
                await self._clock.sleep(_retry_after_seconds(retry_after))
                continue
            if status >= 400:
                raise error_from_status(_status_from_body(status, payload), status)
            break
        if not payload:
            return {}
        return orjson.loads(payload)

    async def _get(self, path: str, params: dict[str, Any] | None = None) -> Obj:
        """GETs are idempotent: retry connection-level failures with jittered backoff and a ceiling."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(ConnectionLost),
            wait=wait_random_exponential(multiplier=0.2, max=5),
            stop=stop_after_attempt(self._get_attempts),
            sleep=self._clock.sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self.request("GET", path, params=params)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- typed verbs -------------------------------------------------------------------------

    async def get(
        self, resource: ResourceLike, name: str, namespace: str | None = None, subresource: str | None = None
    ) -> Obj:
        wire = await self._wired(resource)
        return self._decode(resource, await self._get(wire.api_path(namespace, name, subresource)))

    async def list(
        self,
        resource: ResourceLike,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[Obj], str]:
        """All items (following `continue` pages of `limit`) and the list's resourceVersion."""
        path = (await self._wired(resource)).api_path(namespace)
        base = {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": limit}
        items: list[Obj] = []
        token: str | None = None
        while True:
            try:
                page = await self._get(path, {**base, "continue": token})
            except Gone:
                if token is None:
                    raise
                # The continue token expired mid-way: fall back to one full list, as client-go's pager does.
                log.info("list continue token expired, listing in one page", path=path)
                items, token = [], None
                base["limit"] = None
                continue
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                break
        # Lists of built-in types omit kind/apiVersion on items; watch events carry them.
        version = self._wire(resource)[0].api_version
        for item in items:
            item.setdefault("apiVersion", version)
            item.setdefault("kind", resource.kind)
            self._decode(resource, item)
        return items, str(meta.get("resourceVersion", ""))

    async def create(
        self,
        resource: ResourceLike,
        obj: Obj,
        namespace: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        ns = (namespace or (obj.get("metadata") or {}).get("namespace")) if resource.namespaced else None
        if resource.namespaced and not ns:
            raise ValueError(f"{resource.kind}: a namespace is required")
        wire = await self._wired(resource)
        created = await self.request(
            "POST",
            wire.api_path(ns),
            params={"fieldManager": field_manager},
            body=self._encode(resource, obj),
        )
        return self._decode(resource, created)

    async def replace(
        self,
        resource: ResourceLike,
        obj: Obj,
        namespace: str | None = None,
        field_manager: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """PUT; with metadata.resourceVersion set this is an optimistic-concurrency update (409 if stale)."""
        ns, name = object_namespace_name(resource, obj, namespace)
        wire = await self._wired(resource)
        replaced = await self.request(
            "PUT",
            wire.api_path(ns, name, subresource),
            params={"fieldManager": field_manager},
            body=self._encode(resource, obj),
        )
        return self._decode(resource, replaced)

    async def replace_status(self, resource: ResourceLike, obj: Obj, field_manager: str | None = None) -> Obj:
        return await self.replace(resource, obj, field_manager=field_manager, subresource="status")

    async def delete(
        self,
        resource: ResourceLike,
        name: str,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions: Obj | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        """DELETE with DeleteOptions; preconditions like {"uid": ..., "resourceVersion": ...}."""
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        wire = await self._wired(resource)
        return self._decode(
            resource, await self.request("DELETE", wire.api_path(namespace, name), body=options)
        )

    async def _patch(
        self,
        resource: ResourceLike,
        name: str,
        body: Any,
        content_type: str,
        namespace: str | None,
        subresource: str | None,
        params: dict[str, Any],
    ) -> Obj:
        """A merge or apply body is a partial object and converts like one; a JSON patch's paths are
        sent as they are (none of our JSON patches touches a field that differs between versions)."""
        wire = await self._wired(resource)
        patched = await self.request(
            "PATCH",
            wire.api_path(namespace, name, subresource),
            params=params,
            body=body if content_type == JSON_PATCH else self._encode(resource, body),
            content_type=content_type,
        )
        return self._decode(resource, patched)

    async def patch_merge(
        self,
        resource: ResourceLike,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        field_manager: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """RFC 7386 JSON merge patch (`null` deletes a key; lists are replaced whole)."""
        return await self._patch(
            resource, name, patch, MERGE_PATCH, namespace, subresource, {"fieldManager": field_manager}
        )

    async def patch_strategic(
        self,
        resource: ResourceLike,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        field_manager: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """Strategic merge patch (built-in types only)."""
        return await self._patch(
            resource,
            name,
            patch,
            STRATEGIC_MERGE_PATCH,
            namespace,
            subresource,
            {"fieldManager": field_manager},
        )

    async def patch_json(
        self,
        resource: ResourceLike,
        name: str,
        operations: list[Obj],
        namespace: str | None = None,
        field_manager: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """RFC 6902 JSON patch: a list of {"op", "path", "value"}; a failed `test` op is 422 Invalid."""
        return await self._patch(
            resource, name, operations, JSON_PATCH, namespace, subresource, {"fieldManager": field_manager}
        )

    async def apply(
        self,
        resource: ResourceLike,
        obj: Obj,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply of `obj` (JSON is valid YAML) as `field_manager`; 409 Conflict unless forced."""
        if not field_manager:
            raise ValueError("server-side apply needs a field manager")
        ns, name = object_namespace_name(resource, obj, None)
        return await self._patch(
            resource,
            name,
            obj,
            APPLY_PATCH,
            ns,
            subresource,
            {"fieldManager": field_manager, "force": "true" if force else None},
        )

    async def apply_status(
        self, resource: ResourceLike, obj: Obj, field_manager: str, force: bool = False
    ) -> Obj:
        return await self.apply(resource, obj, field_manager, force=force, subresource="status")

    async def patch_status_merge(
        self,
        resource: ResourceLike,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        return await self.patch_merge(resource, name, patch, namespace, field_manager, subresource="status")

    # -- watch -------------------------------------------------------------------------------

    async def watch(
        self,
        resource: ResourceLike,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """(event_type, object) pairs until the server closes the stream.

        Raises Gone on a 410 (HTTP or ERROR event), another ApiError on other ERROR events, and
        ConnectionLost when the stream breaks. Close it (`aclosing`) when stopping early.
        """
        wire = await self._wired(resource)
        if self._limiter is not None:
            await self._limiter.acquire(wire.api_path(namespace))
        params = _clean_params(
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "timeoutSeconds": timeout_seconds,
                "allowWatchBookmarks": "true" if allow_bookmarks else None,
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
            }
        )
        headers = await self._headers(None)
        # The server ends the stream after timeoutSeconds; a read stall well beyond that is a dead peer.
        sock_read = timeout_seconds + 60 if timeout_seconds else None
        client_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._connect_timeout, sock_read=sock_read
        )
        path = wire.api_path(namespace)
        parser = WatchStreamParser()
        try:
            async with self._get_session().get(
                self.host + path,
                params=params,
                headers=headers,
                timeout=client_timeout,
                **self._request_kwargs(),
            ) as resp:
                self._heard()
                if resp.status >= 400:
                    raise error_from_status(_status_from_body(resp.status, await resp.read()), resp.status)
                async for chunk in resp.content.iter_any():
                    self._heard()
                    for event_type, obj in parser.feed(chunk):
                        raise_for_watch_event(event_type, obj)
                        yield event_type, self._decode(resource, obj)
                for event_type, obj in parser.close():
                    raise_for_watch_event(event_type, obj)
                    yield event_type, self._decode(resource, obj)
        except _TRANSPORT_ERRORS as exc:
            raise ConnectionLost(f"watch {self.host}{path}: {type(exc).__name__}: {exc}") from exc


_MAX_429_ATTEMPTS = 5


def _retry_after_seconds(header: str | None) -> float:
    """Retry-After in seconds (the apiserver sends integers), bounded to [0.1, 10]."""
    try:
        seconds = float(header) if header else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.1), 10.0)


def _clean_params(params: dict[str, Any] | None) -> dict[str, str] | None:
    if not params:
        return None
    return {k: str(v) for k, v in params.items() if v is not None and v != ""}


# A kind that is not served (its CRD not installed) is asked for again after 1 s, doubling up to
# 2 min, as upstream Kueue waits for a job framework's API.
WAIT_FOR_API_INITIAL_SECONDS = 1.0
WAIT_FOR_API_MAX_SECONDS = 120.0


async def wait_until_served(
    client: KubeClient,
    resource: ResourceLike,
    clock: Clock,
    initial: float = WAIT_FOR_API_INITIAL_SECONDS,
    maximum: float = WAIT_FOR_API_MAX_SECONDS,
) -> None:
    """Return once the server serves `resource` (polled with a doubling backoff; an unreachable
    server is asked again later)."""
    delay = initial
    while True:
        await clock.sleep(delay)
        delay = min(delay * 2, maximum)
        try:
            if await client.serves(resource):
                return
        except Exception as exc:  # the apiserver unreachable for a while: ask again later
            log.warning("cannot ask the server for an API", resource=resource.plural, error=str(exc))
