"""The HTTPS server for Kueue's admission webhooks, at upstream's paths.

Thin on purpose: it parses the AdmissionReview, resolves what needs an API call (the namespace's
labels, whether an ancestor is managed by Kueue), calls the pure defaulting and validation
functions, and answers with a JSONPatch or a denial. It runs on every replica, leader or not, and
answers from the first moment: before the caches have synced only cache-independent defaulting
and validation apply.

Webhooks of frameworks that are not enabled answer "allowed" without changes, as upstream's
no-op webhooks do, so a configuration registering all of them is harmless.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import structlog
from aiohttp import web

from kube_runtime.client import Forbidden, KubeClient, KubeClientError, NotFound
from kube_runtime.clock import Clock
from kube_runtime.informer import Informer
from kube_runtime.tlsserver import RetryingTLSServer
from kueue_domain import api, fields
from kueue_domain import workload as wlstatus
from kueue_domain.config import Configuration
from worker_agent.integrations import enabled_frameworks
from worker_agent.webhooks import (
    appwrapper,
    common,
    convert,
    deployment,
    job,
    jobset,
    kubeflow,
    leaderworkerset,
    pod,
    ray,
    statefulset,
    trainjob,
)
from worker_agent.webhooks.certs import CHECK_INTERVAL_SECONDS
from worker_agent.webhooks.common import Facts, Lookups
from worker_agent.webhooks.jobframework import JobWebhook
from worker_agent.webhooks.review import Request, Response, allowed, denied, errored, json_patch

log = structlog.get_logger("worker_agent.webhooks")

Obj = dict[str, Any]
MAX_REQUEST_BYTES = 8 * 1024 * 1024  # an AdmissionReview carries the object and the old object
MAX_OWNER_DEPTH = 10
# The job kinds on the job framework's one defaulting and validation path.
JOB_WEBHOOKS: dict[str, JobWebhook] = {
    api.FRAMEWORK_BATCH_JOB: job.WEBHOOK,
    api.FRAMEWORK_JOB_SET: jobset.WEBHOOK,
    api.FRAMEWORK_TRAIN_JOB: trainjob.WEBHOOK,
    **kubeflow.WEBHOOKS,
    api.FRAMEWORK_RAY_JOB: ray.RAY_JOB_WEBHOOK,
    api.FRAMEWORK_RAY_CLUSTER: ray.RAY_CLUSTER_WEBHOOK,
    api.FRAMEWORK_RAY_SERVICE: ray.RAY_SERVICE_WEBHOOK,
    api.FRAMEWORK_APPWRAPPER: appwrapper.WEBHOOK,
}
API_TIMEOUT_SECONDS = 5.0
START_RETRY_SECONDS = 5.0
# Owner kinds the ancestor walk follows, by the framework that makes them relevant (an owner of
# another kind ends the walk: nothing above it can be a job Kueue manages here). StatefulSets only
# matter as the link between a LeaderWorkerSet and its pods.
OWNER_RESOURCES = {
    api.FRAMEWORK_BATCH_JOB: (api.JOB,),
    api.FRAMEWORK_LEADER_WORKER_SET: (api.LEADER_WORKER_SET, api.STATEFUL_SET),
    api.FRAMEWORK_JOB_SET: (api.JOB_SET, api.JOB),  # pods -> Jobs -> JobSet
    api.FRAMEWORK_TRAIN_JOB: (api.TRAIN_JOB, api.JOB_SET, api.JOB),  # pods -> Jobs -> JobSet -> TrainJob
    api.FRAMEWORK_PYTORCH_JOB: (api.PYTORCH_JOB,),
    api.FRAMEWORK_TF_JOB: (api.TF_JOB,),
    api.FRAMEWORK_XGBOOST_JOB: (api.XGBOOST_JOB,),
    api.FRAMEWORK_PADDLE_JOB: (api.PADDLE_JOB,),
    api.FRAMEWORK_JAX_JOB: (api.JAX_JOB,),
    api.FRAMEWORK_MPI_JOB: (api.MPI_JOB, api.JOB),  # pods -> the launcher Job -> MPIJob; or the workers
    # pods -> RayCluster -> RayJob; the submitter pod -> its Job -> RayJob
    api.FRAMEWORK_RAY_JOB: (api.RAY_JOB, api.RAY_CLUSTER, api.JOB),
    api.FRAMEWORK_RAY_CLUSTER: (api.RAY_CLUSTER,),
    api.FRAMEWORK_RAY_SERVICE: (api.RAY_SERVICE, api.RAY_CLUSTER),  # pods -> RayCluster -> RayService
    api.FRAMEWORK_APPWRAPPER: (api.APPWRAPPER, api.JOB),  # a component (pods -> Job) -> AppWrapper
}


class Certificates(Protocol):
    @property
    def cert_file(self) -> Any: ...

    @property
    def key_file(self) -> Any: ...

    async def sync(self) -> bool: ...

    async def inject_ca_bundle(self) -> None: ...


def json_response(body: Any) -> web.Response:
    """A JSON answer, encoded with orjson (the apiserver sends a whole object with every review; the
    standard library's encoder was a tenth of the agent's CPU under load)."""
    return web.Response(body=orjson.dumps(body), content_type="application/json")


@dataclass(frozen=True)
class Hook:
    framework: str
    mutating: bool
    operations: tuple[str, ...]


HOOKS: dict[str, Hook] = {
    api.WEBHOOK_PATH_MUTATE_JOB: Hook(api.FRAMEWORK_BATCH_JOB, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_JOB: Hook(api.FRAMEWORK_BATCH_JOB, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_POD: Hook(api.FRAMEWORK_POD, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_POD: Hook(api.FRAMEWORK_POD, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_LEADER_WORKER_SET: Hook(
        api.FRAMEWORK_LEADER_WORKER_SET, True, ("CREATE", "UPDATE")
    ),
    api.WEBHOOK_PATH_VALIDATE_LEADER_WORKER_SET: Hook(
        api.FRAMEWORK_LEADER_WORKER_SET, False, ("CREATE", "UPDATE")
    ),
    api.WEBHOOK_PATH_MUTATE_JOB_SET: Hook(api.FRAMEWORK_JOB_SET, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_JOB_SET: Hook(api.FRAMEWORK_JOB_SET, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_TRAIN_JOB: Hook(api.FRAMEWORK_TRAIN_JOB, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_TRAIN_JOB: Hook(api.FRAMEWORK_TRAIN_JOB, False, ("CREATE", "UPDATE")),
    **{m: Hook(f, True, ("CREATE",)) for f, (m, _) in api.KUBEFLOW_WEBHOOK_PATHS.items()},
    **{v: Hook(f, False, ("CREATE", "UPDATE")) for f, (_, v) in api.KUBEFLOW_WEBHOOK_PATHS.items()},
    api.WEBHOOK_PATH_MUTATE_RAY_JOB: Hook(api.FRAMEWORK_RAY_JOB, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_RAY_JOB: Hook(api.FRAMEWORK_RAY_JOB, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_RAY_CLUSTER: Hook(api.FRAMEWORK_RAY_CLUSTER, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_RAY_CLUSTER: Hook(api.FRAMEWORK_RAY_CLUSTER, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_RAY_SERVICE: Hook(api.FRAMEWORK_RAY_SERVICE, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_RAY_SERVICE: Hook(api.FRAMEWORK_RAY_SERVICE, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_APPWRAPPER: Hook(api.FRAMEWORK_APPWRAPPER, True, ("CREATE",)),
    api.WEBHOOK_PATH_VALIDATE_APPWRAPPER: Hook(api.FRAMEWORK_APPWRAPPER, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_DEPLOYMENT: Hook(api.FRAMEWORK_DEPLOYMENT, True, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_VALIDATE_DEPLOYMENT: Hook(api.FRAMEWORK_DEPLOYMENT, False, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_MUTATE_STATEFUL_SET: Hook(api.FRAMEWORK_STATEFULSET, True, ("CREATE", "UPDATE")),
    api.WEBHOOK_PATH_VALIDATE_STATEFUL_SET: Hook(api.FRAMEWORK_STATEFULSET, False, ("CREATE", "UPDATE")),
}


class WebhookServer(RetryingTLSServer):
    """`await server.start()`; `server.port` is the bound port afterwards (useful with port 0)."""

    what = "the admission webhooks"
    task_prefix = "webhook"
    check_failed = "webhook certificate check failed"
    retry_seconds = START_RETRY_SECONDS
    log = log

    def __init__(
        self,
        kube: KubeClient,
        config: Configuration,
        lookups: Lookups,
        certificates: Certificates,
        *,
        host: str | None = None,
        port: int | None = None,
        clock: Clock | None = None,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        owner_informers: Mapping[api.Resource, Informer] | None = None,
        health_servers: list[Any] | None = None,
        check_interval: float = CHECK_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(
            certificates,
            host=config.webhook_host if host is None else host,
            port=config.webhook_port if port is None else port,
            clock=clock,
            check_interval=check_interval,
        )
        self.kube = kube
        self.config = config
        self.lookups = lookups
        self.namespace_labels = namespace_labels if namespace_labels is not None else {}
        self.owner_informers = owner_informers if owner_informers is not None else {}
        self.health_servers = health_servers if health_servers is not None else []
        self.enabled = set(enabled_frameworks(config.frameworks))
        self.owner_resources = {
            (r.group, r.kind): r
            for f, resources in OWNER_RESOURCES.items()
            if f in self.enabled
            for r in resources
        }
        self.requests_total = 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Get certificates and listen; if either fails, keep retrying in the background (the
        `webhook-server` readiness check fails until then)."""
        for server in self.health_servers:
            server.add_readiness_check("webhook-server", lambda: self.serving)
        await super().start()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        for path in HOOKS:
            app.router.add_post(path, self._handle)
        app.router.add_post(api.WEBHOOK_PATH_CONVERT, self._convert)
        return app

    def serving_log(self) -> tuple[str, dict[str, Any]]:
        return "serving admission webhooks", {"paths": sorted(HOOKS)}

    async def maintain(self) -> None:
        """Renew and reload certificates and keep the CA bundle injected (cheap: three GETs)."""
        async with asyncio.timeout(30):
            changed = await self.certificates.sync()
            if changed and self._ssl is not None:
                self._ssl.load_cert_chain(str(self.certificates.cert_file), str(self.certificates.key_file))
                log.info("reloaded the webhook serving certificate")
            await self.certificates.inject_ca_bundle()

    # -- requests ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests_total += 1
        try:
            review = orjson.loads(await request.read())
            admission = Request.from_review(review)
        except ValueError as exc:  # orjson.JSONDecodeError is one
            return web.Response(status=400, text=f"invalid AdmissionReview: {exc}\n")
        hook = HOOKS[request.path]
        try:
            response = await self.review(hook, admission)
        except Exception as exc:  # an API failure while resolving facts: refuse, the client retries
            log.exception("webhook failed", path=request.path, namespace=admission.namespace)
            response = errored(f"{request.path}: {exc}")
        return json_response(response.review(admission.uid))

    async def _convert(self, request: web.Request) -> web.Response:
        """CRD conversion between kueue.x-k8s.io v1beta1 and v1beta2; needs no API call or cache."""
        self.requests_total += 1
        try:
            body = orjson.loads(await request.read())
        except ValueError as exc:  # orjson.JSONDecodeError is one
            return web.Response(status=400, text=f"invalid ConversionReview: {exc}\n")
        if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
            # As for an AdmissionReview: a body without a request is the caller's error, not a Failure.
            return web.Response(status=400, text="invalid ConversionReview: missing request\n")
        return json_response(convert.review(body))

    async def review(self, hook: Hook, req: Request) -> Response:
        """The answer to one AdmissionReview (also called directly by tests)."""
        if hook.framework not in self.enabled or req.operation not in hook.operations:
            return allowed()
        if hook.mutating:
            return await self._mutate(hook, req)
        return await self._validate(hook, req)

    async def _mutate(self, hook: Hook, req: Request) -> Response:
        obj, ns = req.obj, req.namespace
        if hook.framework == api.FRAMEWORK_POD and pod.suspended_by_parent(obj):
            mutated = pod.default(obj, ns, self.config, self.lookups, Facts())
            parent = common.annotations_of(obj).get(api.ANNOTATION_POD_SUSPENDING_PARENT)
            if parent == statefulset.FRAMEWORK and api.FRAMEWORK_STATEFULSET in self.enabled:
                sts = await self._statefulset_of(obj, ns)
                if sts is not None:
                    mutated = statefulset.stamp_pod(mutated, sts, self.config)
        else:
            facts = await self.facts(obj, ns)
            default = {
                **{name: webhook.default for name, webhook in JOB_WEBHOOKS.items()},
                api.FRAMEWORK_POD: pod.default,
                api.FRAMEWORK_DEPLOYMENT: deployment.default,
                api.FRAMEWORK_STATEFULSET: statefulset.default,
            }.get(hook.framework, leaderworkerset.default)
            mutated = default(obj, ns, self.config, self.lookups, facts)
        return allowed(json_patch(obj, mutated))

    async def _validate(self, hook: Hook, req: Request) -> Response:
        obj, old, ns = req.obj, req.old or {}, req.namespace
        warnings: list[str] = []
        errors: list[fields.FieldError]
        job_webhook = JOB_WEBHOOKS.get(hook.framework)
        if job_webhook is not None:
            errors = (
                job_webhook.validate_create(obj, self.config)
                if req.operation == "CREATE"
                else job_webhook.validate_update(old, obj, ns, self.lookups, self.config)
            )
        elif hook.framework == api.FRAMEWORK_POD:
            errors = (
                pod.validate_create(obj)
                if req.operation == "CREATE"
                else pod.validate_update(old, obj, ns, self.lookups)
            )
            if req.operation == "CREATE" or not pod.suspended_by_parent(obj):
                warnings = pod.warnings(obj, self.config)
        elif hook.framework == api.FRAMEWORK_STATEFULSET:
            errors = (
                statefulset.validate_create(obj, self.config)
                if req.operation == "CREATE"
                else statefulset.validate_update(
                    old, obj, self.config, await self.statefulset_facts(old, obj, ns)
                )
            )
        elif hook.framework == api.FRAMEWORK_DEPLOYMENT:
            errors = (
                deployment.validate_create(obj, self.config)
                if req.operation == "CREATE"
                else deployment.validate_update(old, obj, self.config)
            )
        elif req.operation == "CREATE":
            errors = leaderworkerset.validate_create(obj)
        else:
            errors = leaderworkerset.validate_update(old, obj, self.config, await self.facts(obj, ns))
        if errors:
            message = fields.aggregate(errors)
            meta = obj.get("metadata") or {}
            log.info(
                "denied",
                kind=obj.get("kind"),
                namespace=ns,
                name=meta.get("name") or meta.get("generateName"),
                operation=req.operation,
                message=message,
            )
            return denied(message, warnings)
        return allowed(warnings=warnings)

    # -- facts that need the API -------------------------------------------------------------

    async def facts(self, obj: Obj, namespace: str) -> Facts:
        return Facts(
            namespace_labels=await self.namespace_labels_of(namespace),
            managed_ancestor=await self.managed_ancestor(obj, namespace),
        )

    async def statefulset_facts(self, old: Obj, new: Obj, namespace: str) -> Facts:
        """`facts`, and for a scale-up from zero whether the earlier Workload is there and on hold."""
        facts = await self.facts(new, namespace)
        if not statefulset.scales_up_from_zero(old, new):
            return facts
        try:
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                wl = await self.kube.get(api.WORKLOAD, statefulset.workload_name(old), namespace=namespace)
        except NotFound:
            return facts
        return dataclasses.replace(facts, earlier_workload_on_hold=wlstatus.is_on_hold(wl))

    async def namespace_labels_of(self, namespace: str) -> dict[str, str]:
        """From the namespace informer; a namespace it has not seen yet is read from the API."""
        labels = self.namespace_labels.get(namespace)
        if labels is None:
            try:
                async with asyncio.timeout(API_TIMEOUT_SECONDS):
                    ns = await self.kube.get(api.NAMESPACE, namespace)
                labels = (ns.get("metadata") or {}).get("labels") or {}
            except (KubeClientError, TimeoutError) as exc:
                if not isinstance(exc, NotFound):
                    log.warning(
                        "cannot read the namespace; judging it by name", namespace=namespace, error=str(exc)
                    )
                labels = {}
        return {api.LABEL_NAMESPACE_NAME: namespace, **labels}

    async def managed_ancestor(self, obj: Obj, namespace: str) -> bool:
        """Whether a controller-owner ancestor is a job Kueue manages (FindAncestorJobManagedByKueue)."""
        managed_kinds = {common.FRAMEWORK_KINDS[f] for f in self.enabled if f in common.FRAMEWORK_KINDS}
        current = obj
        for _ in range(MAX_OWNER_DEPTH):
            owner = common.controller_owner(current)
            if owner is None:
                return False
            key = ((owner.get("apiVersion") or "").rpartition("/")[0], owner.get("kind"))
            resource = self.owner_resources.get(key)
            if resource is None or not owner.get("name"):
                return False
            parent = await self._get_owner(resource, namespace, owner["name"])
            if parent is None:
                return False
            if key in managed_kinds and (
                common.queue_name(parent) or self.config.manage_jobs_without_queue_name
            ):
                return True
            current = parent
        log.warning("owner chain too deep; treating as unmanaged", namespace=namespace, depth=MAX_OWNER_DEPTH)
        return False

    async def _statefulset_of(self, pod_obj: Obj, namespace: str) -> Obj | None:
        """The StatefulSet controlling a pod, when one does."""
        owner = common.controller_owner(pod_obj)
        if owner is None or owner.get("kind") != api.STATEFUL_SET.kind or not owner.get("name"):
            return None
        if owner.get("apiVersion") != api.STATEFUL_SET.api_version:
            return None
        return await self._get_owner(api.STATEFUL_SET, namespace, owner["name"])

    async def _get_owner(self, resource: api.Resource, namespace: str, name: str) -> Obj | None:
        informer = self.owner_informers.get(resource)
        if informer is not None and informer.has_synced:
            cached = informer.get(f"{namespace}/{name}")
            if cached is not None:
                return cached
        try:
            async with asyncio.timeout(API_TIMEOUT_SECONDS):
                return await self.kube.get(resource, name, namespace=namespace)
        except NotFound:
            return None
        except Forbidden as exc:  # a missing RBAC rule must not block every pod of the cluster
            log.warning(
                "cannot read an owner to check whether Kueue manages it; grant get on it to the agent",
                kind=resource.kind,
                namespace=namespace,
                name=name,
                error=str(exc),
            )
            return None
