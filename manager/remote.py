"""One worker cluster as the manager sees it (multikueue-spec §3.1.4): a client built from the
validated kubeconfig, watch caches of the objects of our origin, and the connection state that
the worker-lost grace period reads.

The caches are informers filtered by the origin label: the workload reconciler reads remote
copies from them instead of sending a GET per reconcile, and every (re)connect lists afresh, which
replays each remote object to the reconciler, as upstream's watch without resourceVersion does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
import structlog

from kube_runtime.client import ConnectionLost, KubeClient, Unauthorized
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition, format_time
from kube_runtime.informer import Informer, Transform, compact, object_key
from kueue_domain import api, conversion
from manager import kubeconfig as creds
from manager.liveness import LivenessSettings, WorkerProbe

log = structlog.get_logger("manager.remote")

Obj = dict[str, Any]

# The worker's Workload copies by what they hold there: quota (`holding`), not yet and not tried
# (`waiting`), or not yet because the worker could not admit them (`refused`: QuotaReserved False);
# finished copies hold nothing. The least-loaded dispatcher reads the counts.
INDEX_COPY_STATE = "copy-state"
COPY_WAITING = "waiting"
COPY_HOLDING = "holding"
COPY_REFUSED = "refused"
# How long a GET that found no foreign object under a job's name is trusted: a Workload's
# reconciles come in bursts (created, quota reserved, nominated, copies created, admitted), and
# each asked every worker again. A foreign object created inside the window is still caught:
# creating the job then fails with AlreadyExists, which always looks again (see sync_job).
NO_FOREIGN_OBJECT_TTL_SECONDS = 10.0
# A job object this manager created on a worker counts as there until the worker's watch shows it
# (or its deletion), at most this long.
CREATED_UNSEEN_SECONDS = 10.0


def copy_state(obj: Obj) -> tuple[str, ...]:
    conditions = (obj.get("status") or {}).get("conditions")
    if _condition_true(conditions, api.WORKLOAD_FINISHED):
        return ()
    reserved = find_status_condition(conditions, api.WORKLOAD_QUOTA_RESERVED)
    if reserved is None or api.is_waiting_for_group(reserved.get("message") or ""):
        return (COPY_WAITING,)  # not tried yet, or only waiting for the rest of its group
    return (COPY_HOLDING,) if reserved.get("status") == "True" else (COPY_REFUSED,)


def _condition_true(conditions: list[Obj] | None, kind: str) -> bool:
    found = find_status_condition(conditions, kind)
    return found is not None and found.get("status") == "True"


def retry_after(failed_attempts: int) -> float:
    """Reconnect backoff: 0, then 5 s doubling per failed attempt, saturating at 320 s."""
    if failed_attempts <= 0:
        return 0.0
    steps = min(failed_attempts, api.RECONNECT_MAX_STEPS)
    return api.RECONNECT_BASE_DELAY * 2 ** (steps - 1)


def establish_timeout(failed_attempts: int) -> float:
    exponent = min(failed_attempts, 4)  # 1, 2, 4, 8 minutes, then the 10-minute cap
    return min(api.WATCH_ESTABLISH_BASE_TIMEOUT * 2**exponent, api.WATCH_ESTABLISH_MAX_TIMEOUT)


class ConnectError(Exception):
    pass


# How long the last state of a finished object that left a worker is kept: long enough for the
# reconcile its deletion triggers, and for a worker that was unreachable meanwhile to come back.
FINISHED_GONE_KEEP_SECONDS = 15 * 60.0


def _expire(marks: OrderedDict[str, dt.datetime], now: dt.datetime) -> None:
    """Drops the marks (oldest first) older than FINISHED_GONE_KEEP_SECONDS."""
    while marks and (now - next(iter(marks.values()))).total_seconds() >= FINISHED_GONE_KEEP_SECONDS:
        marks.popitem(last=False)


def _drop_older(marks: OrderedDict, now: float, ttl: float, stamp: Callable[[Any], float]) -> None:
    """Drops the marks (oldest first, `stamp` giving each one's monotonic time) `ttl` old or older."""
    while marks and now - stamp(next(iter(marks.values()))) >= ttl:
        marks.popitem(last=False)


# The conditions that end a job of each kind this manager watches on workers: (success, failure).
JOB_END_CONDITIONS: dict[api.Resource, tuple[str, str]] = {
    api.JOB: (api.JOB_CONDITION_COMPLETE, api.JOB_CONDITION_FAILED),
    api.JOB_SET: (api.JOB_SET_CONDITION_COMPLETED, api.JOB_SET_CONDITION_FAILED),
    api.TRAIN_JOB: (api.TRAIN_JOB_CONDITION_COMPLETE, api.TRAIN_JOB_CONDITION_FAILED),
    **{
        r: (api.KUBEFLOW_CONDITION_SUCCEEDED, api.KUBEFLOW_CONDITION_FAILED)
        for r in (api.PYTORCH_JOB, api.TF_JOB, api.XGBOOST_JOB, api.PADDLE_JOB, api.JAX_JOB, api.MPI_JOB)
    },
}


# Kinds whose end is a phase, not a condition: (success, failure), each the phase and the message the
# worker's job integration finishes the Workload with.
JOB_END_PHASES: dict[api.Resource, tuple[tuple[str, str], tuple[str, str]]] = {
    api.APPWRAPPER: (
        (api.APPWRAPPER_PHASE_SUCCEEDED, api.MSG_APPWRAPPER_SUCCEEDED),
        (api.APPWRAPPER_PHASE_FAILED, api.MSG_APPWRAPPER_FAILED),
    ),
}


def _end_condition(resource: api.Resource, obj: Obj) -> Obj | None:
    """The condition (True) that ended `obj`, a job of a kind in JOB_END_CONDITIONS; for a kind of
    JOB_END_PHASES its final phase as one (its type the phase)."""
    phases = JOB_END_PHASES.get(resource)
    if phases is not None:
        phase = (obj.get("status") or {}).get("phase")
        return next(({"type": p, "status": "True", "message": m} for p, m in phases if p == phase), None)
    finals = JOB_END_CONDITIONS.get(resource, ())
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") in finals and c.get("status") == "True":
            return c
    return None


def finished_state(resource: api.Resource, obj: Obj) -> bool:
    """Whether `obj` ended its run: a Workload copy Finished (not replaced for being out of sync)
    or a batch/v1 Job Complete or Failed (a JobSet Completed or Failed, a TrainJob Complete or Failed,
    an AppWrapper or a Pod Succeeded or Failed)."""
    if resource == api.WORKLOAD:
        finished = find_status_condition((obj.get("status") or {}).get("conditions"), api.WORKLOAD_FINISHED)
        return bool(
            finished and finished.get("status") == "True" and finished.get("reason") != api.REASON_OUT_OF_SYNC
        )
    if resource == api.POD:
        return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    if resource == api.RAY_JOB:  # no conditions: its jobDeploymentStatus says
        return (obj.get("status") or {}).get("jobDeploymentStatus") in ("Complete", "Failed")
    return _end_condition(resource, obj) is not None


def job_end_condition(resource: api.Resource, obj: Obj) -> Obj | None:
    """The Workload `Finished` condition the end of a job of ours amounts to, as the worker's job
    integration writes it (reason Succeeded or Failed, the message of the job's final condition),
    or None when `obj` has not ended. Read when the job's Workload copy left its worker unfinished:
    the job, deleted at once as it completed, took the copy it owns along."""
    # A pod's end is not its group's: a pod Workload keeps the copy's word (no entry, None).
    final = _end_condition(resource, obj)
    if final is None:
        return None
    failure = (
        JOB_END_PHASES[resource][1][0] if resource in JOB_END_PHASES else JOB_END_CONDITIONS[resource][1]
    )
    failed = final.get("type") == failure
    condition: Obj = {
        "type": api.WORKLOAD_FINISHED,
        "status": "True",
        "reason": api.REASON_FAILED if failed else api.REASON_SUCCEEDED,
        "message": final.get("message") or "",
    }
    if final.get("lastTransitionTime"):
        condition["lastTransitionTime"] = final["lastTransitionTime"]
    return condition


class RemoteClient:
    """Connection to one worker. `refresh(kubeconfig)` (re)connects; the cluster controller calls
    it while holding `lock`, so a slow worker never blocks the others."""

    def __init__(
        self,
        name: str,
        origin: str,
        watched: Iterable[tuple[api.Resource, Callable[[Obj], list[str]]]],
        clock: Clock,
        *,
        on_event: Callable[[str, list[str]], None],
        on_lost: Callable[[str], None],
        qps: float | None = None,
        burst: int = 100,
        inactivity_timeout: float = 60.0,
        transforms: dict[api.Resource, Transform] | None = None,
        unfiltered: Iterable[tuple[api.Resource, Callable[[str, Informer], None]]] = (),
        liveness: LivenessSettings | None = None,
        on_reachable: Callable[[str], None] = lambda _name: None,
    ) -> None:
        self.name = name
        self.origin = origin
        self._watched = list(watched)
        # What the watch caches keep of each object (default `compact`; an adapter may keep less).
        self._transforms = transforms or {}
        # Resources watched whole, not by origin (the worker's queues, for quota automation), each
        # with what sets up its informer (indexes, handlers) before it starts.
        self._unfiltered = list(unfiltered)
        self.clock = clock
        self._on_event = on_event
        self._on_lost = on_lost
        self._qps, self._burst = qps, burst
        self._inactivity_timeout = inactivity_timeout
        self._liveness_settings = liveness or LivenessSettings()
        self._on_reachable = on_reachable
        # Probes the worker with a client of its own while a kubeconfig is set.
        self.probe = WorkerProbe(
            name,
            clock,
            self._liveness_settings,
            heard_elsewhere=lambda: self.kube.last_heard if self.kube is not None else None,
            on_silent=self._fell_silent,
            on_answer=self._answers_again,
        )
        self.lock = asyncio.Lock()
        self.kube: KubeClient | None = None
        self.config: Obj | None = None
        self.connected = False
        # A new client counts as lost since its creation, so a manager restart re-anchors the
        # worker-lost grace period instead of evicting at once (§3.1.4).
        self.disconnected_since: dt.datetime | None = clock.now()
        self.failed_attempts = 0
        self.next_attempt: dt.datetime | None = None
        self._informers: dict[api.Resource, Informer] = {}
        # Job kinds (not Kueue's own) whose CRD the worker did not serve when connecting.
        self.missing: set[api.Resource] = set()
        self._failed: Callable[[BaseException], None] = lambda exc: None
        self._failure: asyncio.Event | None = None
        self._last_error = ""
        # (plural, namespace/name) -> (deleted at, last state) of finished objects that left the
        # worker: a worker may delete a finished Job (ttlSecondsAfterFinished, a user) and with it
        # its Workload copy before the manager has copied the end of the run.
        self._finished_gone: OrderedDict[tuple[str, str], tuple[dt.datetime, Obj]] = OrderedDict()
        # UID -> when of the copies this manager is removing (a re-dispatch, an eviction): the
        # worker finishes such a copy as its job goes (OwnerNotFound), which is no end of the run.
        self._withdrawn: OrderedDict[str, dt.datetime] = OrderedDict()
        # (plural, namespace/name) -> monotonic time of a GET that found no foreign object there.
        self._no_foreign: OrderedDict[tuple[str, str], float] = OrderedDict()
        # (plural, namespace/name) -> (monotonic time, the API's answer) of the job objects this
        # manager created that the watch has not shown yet: a reconcile that runs again before it
        # does would create the object a second time (a 409 and a read-back).
        self._created: OrderedDict[tuple[str, str], tuple[float, Obj]] = OrderedDict()
        # Monotonic time the watch last showed a copy the worker could not admit (QuotaReserved
        # False), refused copies that left included: the least-loaded dispatcher gives the worker
        # no copy for a round after it.
        self.last_refusal: float | None = None

    # -- state -------------------------------------------------------------------------------

    def mark_connected(self) -> None:
        self.connected = True
        self.disconnected_since = None

    def mark_disconnected(self, since: dt.datetime | None = None) -> bool:
        """Returns whether it was connected; the first loss time is kept across repeated failures."""
        was = self.connected
        self.connected = False
        if self.disconnected_since is None:
            self.disconnected_since = since or self.clock.now()
        return was

    def attempts_suffix(self) -> str:
        if self.failed_attempts < 1 or self.next_attempt is None:
            return ""
        return api.connection_attempts_suffix(self.failed_attempts, format_time(self.next_attempt))

    def cache(self, resource: api.Resource) -> Informer | None:
        """The watch cache of `resource` (objects of our origin) while connected."""
        return self._informers.get(resource) if self.connected else None

    def cached(self, resource: api.Resource, namespace: str, name: str) -> Obj | None:
        """The object of ours in the watch cache of `resource`, when that kind is watched here."""
        informer = self.cache(resource)
        return informer.get(f"{namespace}/{name}") if informer is not None else None

    def remote_workload(self, namespace: str, name: str) -> Obj | None:
        return self.cached(api.WORKLOAD, namespace, name)

    def remote_workloads(self) -> list[Obj]:
        informer = self.cache(api.WORKLOAD)
        return informer.list() if informer is not None else []

    def copy_counts(self) -> tuple[int, int, int]:
        """(waiting, holding, refused): this manager's unfinished Workload copies on the worker that
        wait for their first try there, that hold quota there, and that the worker could not admit;
        (0, 0, 0) while not connected."""
        informer = self.cache(api.WORKLOAD)
        if informer is None:
            return 0, 0, 0
        return (
            informer.store.index_count(INDEX_COPY_STATE, COPY_WAITING),
            informer.store.index_count(INDEX_COPY_STATE, COPY_HOLDING),
            informer.store.index_count(INDEX_COPY_STATE, COPY_REFUSED),
        )

    def no_foreign_object_seen(self, resource: api.Resource, namespace: str, name: str) -> bool:
        """Whether a GET found no foreign object under this name within the last few seconds."""
        key = (resource.plural, f"{namespace}/{name}")
        seen = self._no_foreign.get(key)
        return seen is not None and self.clock.monotonic() - seen < NO_FOREIGN_OBJECT_TTL_SECONDS

    def remember_no_foreign_object(self, resource: api.Resource, namespace: str, name: str) -> None:
        now = self.clock.monotonic()
        _drop_older(self._no_foreign, now, NO_FOREIGN_OBJECT_TTL_SECONDS, lambda seen: seen)
        key = (resource.plural, f"{namespace}/{name}")
        self._no_foreign.pop(key, None)
        self._no_foreign[key] = now

    def forget_no_foreign_object(self, resource: api.Resource, namespace: str, name: str) -> None:
        self._no_foreign.pop((resource.plural, f"{namespace}/{name}"), None)

    def remember_created(self, resource: api.Resource, obj: Obj) -> None:
        now = self.clock.monotonic()
        _drop_older(self._created, now, CREATED_UNSEEN_SECONDS, lambda entry: entry[0])
        key = (resource.plural, object_key(obj))
        self._created.pop(key, None)
        self._created[key] = (now, obj)

    def created_unseen(self, resource: api.Resource, namespace: str, name: str) -> Obj | None:
        """The object as this manager created it, while the watch has not shown it (nor its deletion)."""
        entry = self._created.get((resource.plural, f"{namespace}/{name}"))
        if entry is None or self.clock.monotonic() - entry[0] >= CREATED_UNSEEN_SECONDS:
            return None
        return entry[1]

    def forget_created(self, resource: api.Resource, namespace: str, name: str) -> None:
        self._created.pop((resource.plural, f"{namespace}/{name}"), None)

    def finished_gone(self, resource: api.Resource, namespace: str, name: str) -> Obj | None:
        """The last state seen of a finished object of ours that is no longer on the worker."""
        entry = self._finished_gone.get((resource.plural, f"{namespace}/{name}"))
        return entry[1] if entry is not None else None

    def withdraw(self, obj: Obj) -> None:
        """Marks a copy this manager is about to remove: whatever end it reaches is not a result."""
        uid = (obj.get("metadata") or {}).get("uid")
        if uid:
            now = self.clock.now()
            _expire(self._withdrawn, now)
            self._withdrawn.pop(uid, None)
            self._withdrawn[uid] = now

    def withdrawn(self, obj: Obj | None) -> bool:
        """Whether `obj` is a copy this manager removed (or is removing)."""
        uid = ((obj or {}).get("metadata") or {}).get("uid")
        return bool(uid) and uid in self._withdrawn

    def remember_deleted(self, resource: api.Resource, obj: Obj) -> None:
        self._created.pop((resource.plural, object_key(obj)), None)
        now = self.clock.now()
        while self._finished_gone:
            oldest = next(iter(self._finished_gone.values()))[0]
            if (now - oldest).total_seconds() < FINISHED_GONE_KEEP_SECONDS:
                break
            self._finished_gone.popitem(last=False)
        if finished_state(resource, obj) and not self.withdrawn(obj):
            key = (resource.plural, object_key(obj))
            self._finished_gone.pop(key, None)
            self._finished_gone[key] = (now, obj)

    # -- connecting --------------------------------------------------------------------------

    async def refresh(self, kubeconfig: Obj) -> tuple[float, str]:
        """Connect with `kubeconfig` unless already connected with it. Returns (retry_after, error):
        (0, "") connected; (t, "") still inside the backoff window; (t, error) this attempt failed."""
        if kubeconfig == self.config and self.connected:
            return 0.0, ""
        await self.stop_watches()
        if kubeconfig != self.config:
            self.config = kubeconfig
            self.failed_attempts = 0
            self.next_attempt = None
            await self.probe.start(kubeconfig)
        now = self.clock.now()
        if not self.connected and self.next_attempt is not None and self.next_attempt > now:
            return (self.next_attempt - now).total_seconds(), ""
        try:
            await self.probe.unless_silent(self._connect(kubeconfig))
        except Exception as exc:  # any failure: count it and back off
            silence = self.probe.silence
            self._last_error = silence or describe_error(exc, self.server, kubeconfig, self.clock.now())
            self.mark_disconnected()
            await self.stop_watches()
            self.failed_attempts += 1
            delay = retry_after(self.failed_attempts)
            self.next_attempt = self.clock.now() + dt.timedelta(seconds=delay)
            return delay, self._last_error
        self.mark_connected()
        self.failed_attempts = 0
        self.next_attempt = None
        return 0.0, ""

    @property
    def server(self) -> str:
        return self.kube.host if self.kube is not None else ""

    # -- liveness ----------------------------------------------------------------------------

    def _fell_silent(self, message: str, since: dt.datetime) -> None:
        """The worker answers nothing: lost from the first unanswered probe (manager/liveness.py)."""
        self._last_error = message
        self._lost(since)
        self.mark_disconnected(since)

    def _answers_again(self) -> None:
        """A silent worker answers: reconnect now rather than at the end of the backoff."""
        self.next_attempt = None
        if not self.connected:
            self._on_reachable(self.name)

    async def _connect(self, kubeconfig: Obj) -> None:
        keepalive = self._liveness_settings.probe_interval or None
        kube = await KubeClient.from_kubeconfig_dict(
            kubeconfig, qps=self._qps, burst=self._burst, tcp_keepalive=keepalive
        )
        self.kube = kube
        await self._check_served_version(kube)
        failure = asyncio.Event()
        self._failure = failure
        errors: list[str] = []

        def failed(exc: BaseException) -> None:
            errors.append(str(exc) or type(exc).__name__)
            self._last_error = errors[-1]
            failure.set()
            if self.connected:
                self._lost()

        self._failed = failed
        for resource, keys_for in self._watched:
            if resource not in self.missing:
                self._watch(kube, resource, keys_for)
        for resource, setup in self._unfiltered:
            self._watch_unfiltered(kube, resource, setup)
        synced = asyncio.gather(*(i.wait_synced() for i in self._informers.values()))
        failed_wait = asyncio.ensure_future(failure.wait())
        try:
            done, _ = await asyncio.wait(
                {synced, failed_wait},
                timeout=establish_timeout(self.failed_attempts),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            failed_wait.cancel()
            if not synced.done():
                synced.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await synced
        if synced not in done:
            raise ConnectError(errors[0] if errors else "watch establishment timed out")

    async def _check_served_version(self, kube: KubeClient) -> None:
        """Talk to the worker in a version it serves: v1beta2 where served (our CRDs, upstream
        Kueue v0.19 and later), v1beta1 otherwise (older upstream). Objects are converted in-process
        (kueue_domain/conversion.py), so a worker that serves only one of them works as well."""
        versions = await kube.served_versions(api.GROUP)
        if not versions:
            raise ConnectError(f"the worker does not serve {api.GROUP}: install Kueue's CRDs there")
        chosen = await kube.use_served_version(api.GROUP, conversion.VERSIONS, versions)
        if chosen is None:
            raise ConnectError(
                f"the worker serves {api.GROUP} versions {api.go_list(versions)}, none of which this "
                f"manager speaks ({api.go_list(conversion.VERSIONS)})"
            )
        log.info("Kueue API version on the worker", cluster=self.name, version=chosen)
        # A group can be served while one of its CRDs is missing (deleted, or a partial install):
        # name that resource instead of failing later with the informer's bare 404.
        # A job kind's CRD missing (JobSet on a worker that runs only Jobs) fails no connection: only
        # that kind's Workloads skip this worker (`serves_kind`), saying so.
        self.missing = set()
        for resource, _ in self._watched:
            wire = dataclasses.replace(resource, version=chosen) if resource.group == api.GROUP else resource
            if not await kube.serves(wire):
                served = f"{wire.plural}.{wire.group or 'core'}/{wire.version}"
                if resource.group != api.GROUP:
                    log.warning("the worker does not serve a job kind", cluster=self.name, resource=served)
                    self.missing.add(resource)
                    continue
                raise ConnectError(f"the worker does not serve {served}: install Kueue's CRDs there")

    def _watch(
        self, kube: KubeClient, resource: api.Resource, keys_for: Callable[[Obj], list[str]]
    ) -> Informer:
        informer = Informer(
            kube,
            resource,
            label_selector=f"{api.LABEL_MULTIKUEUE_ORIGIN}={self.origin}",
            inactivity_timeout=self._inactivity_timeout,
            watch_timeout=max(5, int(self._inactivity_timeout / 2)),
            name=f"{self.name}/{resource.plural}",
            on_failure=self._failed,
            transform=self._transforms.get(resource, compact),
        )
        handler = self._handler(keys_for)
        if resource == api.WORKLOAD:
            informer.add_index(INDEX_COPY_STATE, copy_state)
            handler = self._noting_refusals(handler)
        informer.add_handler(
            on_add=handler,
            on_update=lambda _old, new, h=handler: h(new),
            on_delete=self._deleted_handler(resource, handler),
        )
        self._informers[resource] = informer
        informer.start()
        return informer

    def _watch_unfiltered(
        self, kube: KubeClient, resource: api.Resource, setup: Callable[[str, Informer], None]
    ) -> None:
        informer = Informer(
            kube,
            resource,
            inactivity_timeout=self._inactivity_timeout,
            watch_timeout=max(5, int(self._inactivity_timeout / 2)),
            name=f"{self.name}/{resource.plural}",
            on_failure=self._failed,
            transform=compact,
        )
        setup(self.name, informer)
        self._informers[resource] = informer
        informer.start()

    async def serves_kind(self, resource: api.Resource) -> bool:
        """Whether the worker serves this job kind. A kind missing when the connection was made is
        asked for again (one discovery GET) and, once served, watched from then on: installing the
        JobSet CRD on a worker needs no reconnect."""
        if resource not in self.missing:
            return True
        kube = self.kube
        if kube is None or not self.connected or not await kube.serves(resource):
            return False
        if resource in self.missing:
            self.missing.discard(resource)
            keys_for = next(k for r, k in self._watched if r == resource)
            await self._watch(kube, resource, keys_for).wait_synced()
            log.info("the worker serves a job kind now", cluster=self.name, resource=resource.plural)
        return True

    def _handler(self, keys_for: Callable[[Obj], list[str]]) -> Callable[[Obj], None]:
        def handle(obj: Obj) -> None:
            keys = keys_for(obj)
            if keys:
                self._on_event(self.name, keys)

        return handle

    def _noting_refusals(self, handler: Callable[[Obj], None]) -> Callable[[Obj], None]:
        def handle(obj: Obj) -> None:
            if copy_state(obj) == (COPY_REFUSED,):
                self.last_refusal = self.clock.monotonic()
            handler(obj)

        return handle

    def _deleted_handler(
        self, resource: api.Resource, handler: Callable[[Obj], None]
    ) -> Callable[[Obj], None]:
        def deleted(obj: Obj) -> None:
            self.remember_deleted(resource, obj)
            handler(obj)

        return deleted

    def _lost(self, since: dt.datetime | None = None) -> None:
        """A watch of a connected worker failed, or the worker fell silent: disconnected from `since`
        (default now; the first loss is kept)."""
        if self.connected and self.mark_disconnected(since):
            log.warning("lost the connection to a worker", cluster=self.name, error=self._last_error)
            self._on_lost(self.name)

    async def stop_watches(self) -> None:
        informers, self._informers = list(self._informers.values()), {}
        for informer in informers:
            await informer.stop()
        if self.kube is not None:
            kube, self.kube = self.kube, None
            await kube.close()

    async def close(self) -> None:
        self.mark_disconnected()
        await self.probe.stop()
        await self.stop_watches()


def describe_error(
    exc: BaseException, server: str, kubeconfig: Obj | None = None, now: dt.datetime | None = None
) -> str:
    """A stable, readable text for a failed connection (it becomes the `Active` message, which is
    rewritten only when it changes): the transport's cause without object addresses."""
    cause = exc.__cause__ if isinstance(exc, ConnectionLost) and exc.__cause__ is not None else exc
    prefix = f"{server}: " if server else ""
    if isinstance(cause, Unauthorized):
        hint = creds.credentials_hint(kubeconfig or {}, now or dt.datetime.now(dt.UTC))
        return f"{prefix}the worker rejected the kubeconfig's credentials (401 Unauthorized): {hint}"
    if isinstance(cause, aiohttp.ClientConnectorCertificateError):
        return f"{prefix}x509: certificate verification failed: {cause.certificate_error.verify_message}"
    if isinstance(cause, aiohttp.ClientConnectorError):
        errno = getattr(cause.os_error, "errno", None)
        reason = os.strerror(errno) if errno else str(cause.os_error)
        return f"{prefix}dial tcp {cause.host}:{cause.port}: connect: {reason.lower()}"
    if isinstance(cause, (TimeoutError, asyncio.TimeoutError)):
        return f"{prefix}i/o timeout"
    return str(exc) or type(exc).__name__


def workload_keys(obj: Obj) -> list[str]:
    return [object_key(obj)]
