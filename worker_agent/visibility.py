"""Kueue's visibility API (`visibility.kueue.x-k8s.io` v1beta2 and v1beta1, the VisibilityOnDemand
feature), served by the worker_agent as an aggregated API server behind the kube-apiserver:

    GET /apis/visibility.kueue.x-k8s.io/<v>/clusterqueues/<cq>/pendingworkloads?limit=&offset=
    GET /apis/visibility.kueue.x-k8s.io/<v>/namespaces/<ns>/localqueues/<lq>/pendingworkloads

answer a PendingWorkloadsSummary: the pending workloads of the queue in the order the agent's queue
manager would admit them (`ClusterQueuePending.snapshot`: the heap and the parked workloads sorted
together, as upstream's queue manager Snapshot), each with its position in the ClusterQueue and in
its LocalQueue. Defaults, bounds and errors are upstream's (pkg/visibility/storage): limit 1000 by
default (0 also means the default), at most `MAX_PENDING_WORKLOADS_LIMIT`, a negative limit or
offset counts as 0, a value that is not an integer is a 400, a missing queue a 404 naming
`clusterqueue` or `localqueue`.

Its own listener (upstream's port 8082), with the serving certificate of the webhooks (its names
include the visibility Service's) and client certificates checked as `kube_runtime.delegated_auth`
describes; each request is authorized with a SubjectAccessReview.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import structlog
from aiohttp import web

from kube_runtime.clock import Clock
from kube_runtime.delegated_auth import (
    AuthorizationError,
    NonResourceAttributes,
    RequestHeaderAuthenticator,
    ResourceAttributes,
    SubjectAccessReviewer,
    forbidden_status,
    internal_error_status,
    status,
    unauthorized_status,
)
from kube_runtime.tlsserver import RetryingTLSServer
from kueue_domain import api
from worker_agent.engine.workloads import WorkloadInfo

log = structlog.get_logger("worker_agent.visibility")

Obj = dict[str, Any]

GROUP = "visibility.kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # preferred first, as upstream's PrioritizedVersions
KIND_SUMMARY = "PendingWorkloadsSummary"
SUBRESOURCE = "pendingworkloads"
DEFAULT_PENDING_WORKLOADS_LIMIT = 1000
MAX_PENDING_WORKLOADS_LIMIT = 4000
DEFAULT_BIND_ADDRESS = ":8082"  # upstream's visibility server port
SERVICE_NAME = "kueue-visibility-server"  # upstream's `visibility-server` with kustomize's kueue- prefix
APISERVICE_NAMES = tuple(f"{v}.{GROUP}" for v in VERSIONS)
CHECK_INTERVAL_SECONDS = 60.0
START_RETRY_SECONDS = 5.0
ALWAYS_ALLOWED_PATHS = ("/healthz", "/livez", "/readyz")

_INT64 = re.compile(r"[+-]?[0-9]+")
_CQ_PATH = re.compile(
    rf"^/apis/{re.escape(GROUP)}/(?P<version>[^/]+)/clusterqueues/(?P<name>[^/]+)/{SUBRESOURCE}$"
)
_LQ_PATH = re.compile(
    rf"^/apis/{re.escape(GROUP)}/(?P<version>[^/]+)/namespaces/(?P<namespace>[^/]+)/localqueues/"
    rf"(?P<name>[^/]+)/{SUBRESOURCE}$"
)


# ------------------------------------------------------------------------------------------------
# Query parameters


class OptionsError(ValueError):
    """A query parameter that is not an integer: the message is Go's strconv error."""


def parse_int64(values: list[str]) -> int:
    """apimachinery's Convert_Slice_string_To_int64: the first value, strconv.ParseInt base 10."""
    if not values:
        return 0
    text = values[0]
    if not _INT64.fullmatch(text):
        raise OptionsError(f"strconv.ParseInt: parsing {api.go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise OptionsError(f"strconv.ParseInt: parsing {api.go_quote(text)}: value out of range")
    return value


def bounded_limit_offset(limit: int, offset: int) -> tuple[int, int]:
    """Upstream's boundedLimitOffset: limit in [0, max], offset at least 0."""
    return min(max(limit, 0), MAX_PENDING_WORKLOADS_LIMIT), max(offset, 0)


def pending_workload_options(query: Mapping[str, list[str]]) -> tuple[int, int]:
    """(limit, offset) of a request: PendingWorkloadOptions decoded from the query, defaulted (a
    limit of 0 or none is 1000) and bounded."""
    limit = parse_int64(query.get("limit", []))
    offset = parse_int64(query.get("offset", []))
    if limit == 0:
        limit = DEFAULT_PENDING_WORKLOADS_LIMIT
    return bounded_limit_offset(limit, offset)


# ------------------------------------------------------------------------------------------------
# Bodies


def pending_workload(info: WorkloadInfo, obj: Obj | None, position_in_cq: int, position_in_lq: int) -> Obj:
    """One PendingWorkload: metadata as upstream fills it (name, namespace, creationTimestamp,
    ownerReferences with apiVersion, kind, name and uid only), priority, LocalQueue and positions."""
    meta = (obj or {}).get("metadata") or {}
    metadata: Obj = {"name": info.name, "namespace": info.namespace}
    if meta.get("creationTimestamp"):
        metadata["creationTimestamp"] = meta["creationTimestamp"]
    owners = [
        {
            "apiVersion": o.get("apiVersion", ""),
            "kind": o.get("kind", ""),
            "name": o.get("name", ""),
            "uid": o.get("uid", ""),
        }
        for o in meta.get("ownerReferences") or ()
    ]
    if owners:
        metadata["ownerReferences"] = owners
    return {
        "metadata": metadata,
        "priority": info.priority,
        "localQueueName": info.queue_name,
        "positionInClusterQueue": position_in_cq,
        "positionInLocalQueue": position_in_lq,
    }


ObjectOf = Callable[[WorkloadInfo], Obj | None]


def cluster_queue_items(
    pending: list[WorkloadInfo], limit: int, offset: int, object_of: ObjectOf
) -> list[Obj]:
    """Items `offset` to `offset + limit` of a ClusterQueue's pending workloads (in queue order);
    positions in a LocalQueue count the workloads of the same namespace and LocalQueue before."""
    items = []
    seen: dict[tuple[str, str], int] = {}
    for index, info in enumerate(pending[: offset + limit]):
        lq = (info.namespace, info.queue_name)
        position_in_lq = seen.get(lq, 0)
        seen[lq] = position_in_lq + 1
        if index >= offset:
            items.append(pending_workload(info, object_of(info), index, position_in_lq))
    return items


def local_queue_items(
    pending: list[WorkloadInfo], namespace: str, name: str, limit: int, offset: int, object_of: ObjectOf
) -> list[Obj]:
    """Items `offset` to `offset + limit` of one LocalQueue's pending workloads, out of its
    ClusterQueue's (positions in the ClusterQueue count every workload of it)."""
    items: list[Obj] = []
    skipped = 0
    for index, info in enumerate(pending):
        if len(items) >= limit:
            break
        if info.namespace != namespace or info.queue_name != name:
            continue
        if skipped < offset:
            skipped += 1
            continue
        items.append(pending_workload(info, object_of(info), index, len(items) + offset))
    return items


def summary(version: str, items: list[Obj]) -> Obj:
    return {"kind": KIND_SUMMARY, "apiVersion": f"{GROUP}/{version}", "metadata": {}, "items": items}


def not_found(resource: str, name: str) -> Obj:
    """apierrors.NewNotFound(visibility.Resource(resource), name)."""
    return status(
        404,
        "NotFound",
        f"{resource}.{GROUP} {api.go_quote(name)} not found",
        {"name": name, "group": GROUP, "kind": resource},
    )


def generic_not_found() -> Obj:
    return status(404, "NotFound", "the server could not find the requested resource", {})


def group_version_entry(version: str) -> Obj:
    return {"groupVersion": f"{GROUP}/{version}", "version": version}


def api_group() -> Obj:
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [group_version_entry(v) for v in VERSIONS],
        "preferredVersion": group_version_entry(VERSIONS[0]),
    }


def api_group_list() -> Obj:
    group = {k: v for k, v in api_group().items() if k not in ("kind", "apiVersion")}
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def api_resource_list(version: str) -> Obj:
    """What upstream's server lists: clusterqueues and localqueues (no verbs of their own: they only
    carry the subresource) and their pendingworkloads subresource (get)."""
    resources = []
    for plural, singular, namespaced in (
        ("clusterqueues", "clusterqueue", False),
        ("localqueues", "localqueue", True),
    ):
        for name, verbs in ((plural, []), (f"{plural}/{SUBRESOURCE}", ["get"])):
            resources.append(
                {
                    "name": name,
                    "singularName": singular if name == plural else "",
                    "namespaced": namespaced,
                    "kind": KIND_SUMMARY,
                    "verbs": verbs,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{version}",
        "resources": resources,
    }


# ------------------------------------------------------------------------------------------------
# The queries, on an AdmissionState


class PendingWorkloads:
    """Answers the two queries from an AdmissionState's caches and queue manager (`state`:
    informers `cluster_queues`, `local_queues`, `workloads` and `queues`, a QueueManager)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def synced(self) -> bool:
        s = self.state
        return all(i.has_synced for i in (s.cluster_queues, s.local_queues, s.workloads))

    def _object_of(self, info: WorkloadInfo) -> Obj | None:
        return self.state.workloads.get(info.key)

    def _pending(self, cq_name: str) -> list[WorkloadInfo]:
        queue = self.state.queues.queues.get(cq_name)
        return queue.snapshot() if queue is not None else []

    def in_cluster_queue(self, version: str, name: str, limit: int, offset: int) -> tuple[int, Obj]:
        if self.state.cluster_queues.get(name) is None:
            return 404, not_found("clusterqueue", name)
        items = cluster_queue_items(self._pending(name), limit, offset, self._object_of)
        return 200, summary(version, items)

    def in_local_queue(
        self, version: str, namespace: str, name: str, limit: int, offset: int
    ) -> tuple[int, Obj]:
        lq = self.state.local_queues.get(f"{namespace}/{name}")
        if lq is None:
            return 404, not_found("localqueue", name)
        cq_name = (lq.get("spec") or {}).get("clusterQueue") or ""
        items = local_queue_items(self._pending(cq_name), namespace, name, limit, offset, self._object_of)
        return 200, summary(version, items)


# ------------------------------------------------------------------------------------------------
# The server


def _verb(method: str) -> str:
    return {
        "GET": "get",
        "HEAD": "get",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete",
    }.get(method, method.lower())


def _pretty(request: web.Request) -> bool:
    """The apiserver's isPrettyPrint: ?pretty=true, or a curl, Wget or browser user agent."""
    value = request.query.get("pretty")
    if value is not None:
        return value.lower() in ("1", "t", "true")
    agent = request.headers.get("User-Agent", "")
    return agent.startswith(("curl", "Wget", "Mozilla/"))


def _json(request: web.Request, code: int, body: Obj) -> web.Response:
    if _pretty(request):
        data = orjson.dumps(body, option=orjson.OPT_INDENT_2)
    else:
        data = orjson.dumps(body) + b"\n"
    return web.Response(status=code, body=data, content_type="application/json")


class VisibilityServer(RetryingTLSServer):
    """`await server.start()`; `server.port` is the bound port afterwards (useful with port 0)."""

    what = "the visibility API"
    task_prefix = "visibility"
    check_failed = "visibility server check failed"
    quiet_retries = True
    retry_seconds = START_RETRY_SECONDS
    log = log

    def __init__(
        self,
        kube: Any,
        queries: PendingWorkloads,
        certificates: Any,
        *,
        host: str = "",
        port: int = 8082,
        clock: Clock | None = None,
        check_interval: float = CHECK_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(certificates, host=host, port=port, clock=clock, check_interval=check_interval)
        self.kube = kube
        self.queries = queries
        self.authenticator = RequestHeaderAuthenticator(kube, self.clock)
        self.authorizer = SubjectAccessReviewer(kube)
        self._cert_loaded: bytes = b""
        self._trust_loaded: str = ""
        self.requests_total = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def prepare(self) -> None:
        await self.certificates.sync()
        await self.authenticator.refresh()

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        cert_file, key_file = Path(self.certificates.cert_file), Path(self.certificates.key_file)
        context.load_cert_chain(str(cert_file), str(key_file))
        self._cert_loaded = cert_file.read_bytes()
        self._load_trust(context)
        return context

    def serving_log(self) -> tuple[str, dict[str, Any]]:
        return "serving the visibility API", {"group": GROUP}

    def _load_trust(self, context: ssl.SSLContext) -> None:
        """Ask for client certificates from the CAs of the authentication ConfigMap (a TLS trust store
        only grows: a CA dropped from the ConfigMap is still refused by `authenticate`)."""
        trust = self.authenticator.settings.trust_pem()
        if trust and trust != self._trust_loaded:
            context.load_verify_locations(cadata=trust)
            context.verify_mode = ssl.CERT_OPTIONAL
            self._trust_loaded = trust

    async def maintain(self) -> None:
        """Reload a renewed serving certificate, follow the authentication ConfigMap, keep the
        APIServices' CA bundle injected."""
        async with asyncio.timeout(30):
            await self.certificates.sync()
            await self.authenticator.refresh()
            await self.certificates.inject_ca_bundle()
        if self._ssl is None:
            return
        cert_file = Path(self.certificates.cert_file)
        current = cert_file.read_bytes()  # noqa: ASYNC240 - a small local file
        if current != self._cert_loaded:
            self._ssl.load_cert_chain(str(cert_file), str(self.certificates.key_file))
            self._cert_loaded = current
            log.info("reloaded the visibility serving certificate")
        self._load_trust(self._ssl)

    # -- requests ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests_total += 1
        try:
            return await self._serve(request)
        except Exception as exc:  # a bug: answer as the apiserver does, and keep serving
            log.exception("visibility request failed", path=request.path)
            return _json(request, 500, internal_error_status(str(exc) or type(exc).__name__))

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path in ALWAYS_ALLOWED_PATHS:
            return web.Response(text="ok")
        user = self.authenticator.authenticate(request)
        if user is None:
            return _json(request, 401, unauthorized_status())
        cq, lq = _CQ_PATH.match(path), _LQ_PATH.match(path)
        attributes: ResourceAttributes | NonResourceAttributes
        if cq is not None:
            attributes = ResourceAttributes(
                _verb(request.method), GROUP, cq["version"], "clusterqueues", SUBRESOURCE, cq["name"]
            )
        elif lq is not None:
            attributes = ResourceAttributes(
                _verb(request.method),
                GROUP,
                lq["version"],
                "localqueues",
                SUBRESOURCE,
                lq["name"],
                lq["namespace"],
            )
        else:
            attributes = NonResourceAttributes(request.method.lower(), path)
        try:
            decision = await self.authorizer.authorize(user, attributes)
        except AuthorizationError as exc:
            log.warning("cannot authorize a visibility request", user=user.name, path=path, error=str(exc))
            return _json(request, 500, internal_error_status(str(exc)))
        if not decision.allowed:
            return _json(request, 403, forbidden_status(user, attributes, decision.reason))
        code, body = self.answer(request.method, path, request.query)
        return _json(request, code, body)

    def answer(self, method: str, path: str, query: Any) -> tuple[int, Obj]:
        """The response to an authenticated, authorized request."""
        cq, lq = _CQ_PATH.match(path), _LQ_PATH.match(path)
        version = (cq or lq)["version"] if (cq or lq) else ""
        if (cq or lq) and version not in VERSIONS:
            return 404, generic_not_found()
        if cq or lq:
            if method not in ("GET", "HEAD"):
                return 405, status(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                    {},
                )
            try:
                limit, offset = pending_workload_options(
                    {k: query.getall(k) for k in ("limit", "offset") if k in query}
                )
            except OptionsError as exc:
                return 400, status(400, "BadRequest", str(exc))
            if not self.queries.synced():
                return 503, status(503, "ServiceUnavailable", "the queue caches have not synced yet")
            if cq is not None:
                return self.queries.in_cluster_queue(version, cq["name"], limit, offset)
            assert lq is not None
            return self.queries.in_local_queue(version, lq["namespace"], lq["name"], limit, offset)
        if method not in ("GET", "HEAD"):
            return 404, generic_not_found()
        normalized = path.rstrip("/")
        if normalized == "/apis":
            return 200, api_group_list()
        if normalized == f"/apis/{GROUP}":
            return 200, api_group()
        for version in VERSIONS:
            if normalized == f"/apis/{GROUP}/{version}":
                return 200, api_resource_list(version)
        return 404, generic_not_found()
