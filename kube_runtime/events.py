"""events.k8s.io/v1 Events, deduplicated into series as client-go's events broadcaster does.

Repeats of an event (same action, reason, reporting controller, regarding and related objects)
within `series_window` of the last one bump `series.count` and `series.lastObservedTime` with a
PATCH instead of creating a new Event. Recording never raises and never waits for the API: events
are queued and written by a background task; API errors are logged and dropped.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import structlog

from kube_runtime import constants, resources
from kube_runtime.client import KubeClient, NotFound
from kube_runtime.clock import Clock

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

NORMAL, WARNING = constants.EVENT_NORMAL, constants.EVENT_WARNING
REASON_ACTION_MAX = 128
SERIES_WINDOW = 6 * 60.0  # client-go finishTime: a series ends after 6 minutes without a repeat
_CACHE_LIMIT = 4096
MAX_QUEUED_EVENTS = 1000  # client-go's maxQueuedEvents: beyond this, new events are dropped
EVENT_TYPES = (NORMAL, WARNING)  # what a recorder writes unless told otherwise (--event-types)
EXPIRY_INTERVAL = 1.0  # seconds between sweeps for idle series


def object_reference(obj: Obj) -> Obj:
    """A core/v1 ObjectReference for an object (or the reference itself if given one).

    resourceVersion is left out so repeats against an updated object still join one series.
    """
    if "metadata" not in obj:
        return {k: v for k, v in obj.items() if v not in (None, "")}
    meta = obj["metadata"]
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    return {k: v for k, v in ref.items() if v}


def truncate_note(text: str, limit: int = constants.EVENT_MESSAGE_LIMIT_BYTES) -> str:
    """Kueue's TruncateEventMessage: at most `limit` bytes, ending in " ..." when cut, never mid-character."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    keep = limit - len(constants.TRUNCATION_SUFFIX.encode())
    return encoded[:keep].decode("utf-8", "ignore") + constants.TRUNCATION_SUFFIX


def micro_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ref_key(ref: Obj | None) -> tuple[str, ...]:
    ref = ref or {}
    return tuple(str(ref.get(k, "")) for k in ("apiVersion", "kind", "namespace", "name", "uid", "fieldPath"))


@dataclass
class _Series:
    event: Obj  # the Event as last written (name, namespace, eventTime, ...)
    count: int  # 1 = a single event so far; a series starts at 2
    last_observed: dt.datetime
    last_seen: float  # monotonic
    written_count: int
    last_write: float  # monotonic


class EventRecorder:
    """Writes events for one controller instance: `await recorder.event(obj, "Normal", reason, action)`.

    Recording only queues the event and returns, as client-go's broadcaster does: a controller
    never waits for an Event write (events have their own client and rate limit, and an admission
    must not wait behind them). One background task writes the queue in order. When more than
    `max_queued` events wait (client-go's maxQueuedEvents, 1000), new ones are dropped and counted
    in `dropped`. `flush()` waits until everything queued so far is written. Events of a type not in
    `types` (the processes' `--event-types`) are counted in `skipped` and never sent.
    """

    def __init__(
        self,
        client: KubeClient,
        reporting_controller: str,
        reporting_instance: str,
        clock: Clock | None = None,
        *,
        series_window: float = SERIES_WINDOW,
        min_patch_interval: float = 0.0,
        max_queued: int = MAX_QUEUED_EVENTS,
        types: Collection[str] = EVENT_TYPES,
    ) -> None:
        self.client = client
        self.reporting_controller = reporting_controller[:REASON_ACTION_MAX]
        self.reporting_instance = reporting_instance[:REASON_ACTION_MAX]
        self._clock = clock or Clock()
        self._series_window = series_window
        self._min_patch_interval = min_patch_interval
        self._max_queued = max_queued
        self.types = frozenset(types)
        self._cache: dict[tuple[Any, ...], _Series] = {}
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._writer: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._next_expiry = 0.0
        self.dropped = 0  # events the API refused, we could not send, or that found the queue full
        self.skipped = 0  # events of a type this recorder was told not to write (`types`)

    async def normal(
        self, regarding: Obj, reason: str, action: str, note: str = "", related: Obj | None = None
    ) -> None:
        self.record(regarding, NORMAL, reason, action, note, related)

    async def warning(
        self, regarding: Obj, reason: str, action: str, note: str = "", related: Obj | None = None
    ) -> None:
        self.record(regarding, WARNING, reason, action, note, related)

    async def event(
        self,
        regarding: Obj,
        type: str,
        reason: str,
        action: str,
        note: str = "",
        related: Obj | None = None,
    ) -> None:
        """Queue an event about `regarding` (an object or an ObjectReference). Never raises."""
        self.record(regarding, type, reason, action, note, related)

    def record(
        self,
        regarding: Obj,
        type: str,
        reason: str,
        action: str,
        note: str = "",
        related: Obj | None = None,
    ) -> None:
        """The same as `event`, callable without awaiting (needs a running event loop)."""
        if type not in (NORMAL, WARNING):
            self.dropped += 1
            log.warning("dropping event", reason=reason, action=action, error=f"bad event type {type!r}")
            return
        if type not in self.types:
            self.skipped += 1
            return
        if len(self._queue) >= self._max_queued:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning(
                    "event queue full, dropping events", queued=len(self._queue), dropped=self.dropped
                )
            return
        # References are taken now: the caller may change the object after this returns.
        regarding_ref = object_reference(regarding)
        related_ref = object_reference(related) if related else None
        self._queue.append((regarding_ref, related_ref, type, reason, action, note, self._clock.now()))
        self._idle.clear()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queue())

    async def flush(self) -> None:
        """Wait until every queued event is written, then write series counts held back by
        `min_patch_interval` (call on shutdown). Never raises."""
        await self._idle.wait()
        for series in list(self._cache.values()):
            await self._write_held_back(series)

    async def close(self, flush_seconds: float | None = None) -> None:
        """Flush (for at most `flush_seconds`; what is left is dropped), then stop the writer."""
        try:
            async with asyncio.timeout(flush_seconds):  # not wait_for: it can drop a cancellation (3.11)
                await self.flush()
        except TimeoutError:
            self.dropped += len(self._queue)
            log.warning("events not written at shutdown", dropped=len(self._queue))
            self._queue.clear()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None

    async def _write_queue(self) -> None:
        try:
            while self._queue:
                item = self._queue.popleft()
                try:
                    await self._record(*item)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.dropped += 1
                    log.warning(
                        "dropping event", reason=item[3], action=item[4], error=str(exc) or type(exc).__name__
                    )
        finally:
            if not self._queue:
                self._idle.set()

    async def _record(
        self,
        regarding_ref: Obj,
        related_ref: Obj | None,
        type: str,
        reason: str,
        action: str,
        note: str,
        now: dt.datetime,
    ) -> None:
        reason, action = reason[:REASON_ACTION_MAX], action[:REASON_ACTION_MAX]
        regarding_ref, related_ref = await self._on_wire(regarding_ref), await self._on_wire(related_ref)
        key = (action, reason, self.reporting_controller, _ref_key(regarding_ref), _ref_key(related_ref))
        now_mono = self._clock.monotonic()
        if now_mono >= self._next_expiry or len(self._cache) >= _CACHE_LIMIT:
            self._next_expiry = now_mono + EXPIRY_INTERVAL
            await self._expire(now_mono)
        series = self._cache.get(key)
        if series is not None:
            series.count = max(series.count + 1, 2)
            series.last_observed = now
            series.last_seen = now_mono
            if now_mono - series.last_write >= self._min_patch_interval:
                await self._write_series(series)
            return
        event = self._new_event(regarding_ref, related_ref, type, reason, action, note, now)
        created = await self.client.create(resources.EVENT, event)
        self._cache[key] = _Series(created, 1, now, now_mono, 1, now_mono)

    async def _on_wire(self, ref: Obj | None) -> Obj | None:
        """The reference with the apiVersion the server speaks for its kind (upstream Kueue's Events
        about a Workload name its v1beta2, the version its controllers hold)."""
        if not ref or not ref.get("apiVersion") or not ref.get("kind"):
            return ref
        version = await self.client.wire_api_version(ref["apiVersion"], ref["kind"])
        return ref if version == ref["apiVersion"] else {**ref, "apiVersion": version}

    def _new_event(
        self,
        regarding: Obj,
        related: Obj | None,
        type: str,
        reason: str,
        action: str,
        note: str,
        now: dt.datetime,
    ) -> Obj:
        name_prefix = (regarding.get("name") or "event")[: 253 - 17]
        timestamp_ns = int(now.timestamp() * 1_000_000) * 1000
        event: Obj = {
            "apiVersion": resources.EVENT.api_version,
            "kind": resources.EVENT.kind,
            "metadata": {
                "name": f"{name_prefix}.{timestamp_ns:x}",
                "namespace": regarding.get("namespace") or "default",
            },
            "eventTime": micro_time(now),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": action,
            "reason": reason,
            "regarding": regarding,
            "note": truncate_note(note),
            "type": type,
        }
        if related:
            event["related"] = related
        return event

    async def _write_series(self, series: _Series) -> None:
        meta = series.event["metadata"]
        patch = {"series": {"count": series.count, "lastObservedTime": micro_time(series.last_observed)}}
        try:
            series.event = await self.client.patch_merge(
                resources.EVENT, meta["name"], patch, meta["namespace"]
            )
        except NotFound:
            # The Event expired (TTL) or was deleted: recreate it, with the series, as client-go does.
            recreated = {k: v for k, v in series.event.items() if k != "metadata"}
            recreated["metadata"] = {"name": meta["name"], "namespace": meta["namespace"]}
            recreated.update(patch)
            series.event = await self.client.create(resources.EVENT, recreated)
        series.written_count = series.count
        series.last_write = self._clock.monotonic()

    async def _write_held_back(self, series) -> None:
        """Write a series count that was held back; an API error drops it (counted), never raises."""
        if series.count == series.written_count:
            return
        try:
            await self._write_series(series)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.dropped += 1
            log.warning("dropping event series update", error=str(exc) or type(exc).__name__)

    async def _expire(self, now_mono: float) -> None:
        """Forget series idle for longer than the window, and the oldest ones beyond the cache limit
        (down to 90 % of it, so that a full cache is not swept on every event); a count held back
        is written first."""
        stale = {k for k, s in self._cache.items() if now_mono - s.last_seen > self._series_window}
        keep = len(self._cache) - len(stale)
        if keep >= _CACHE_LIMIT:
            for k in self._cache:  # oldest first: dicts keep insertion order
                if keep < _CACHE_LIMIT * 9 // 10:
                    break
                if k not in stale:
                    stale.add(k)
                    keep -= 1
        for key in stale:
            series = self._cache.pop(key)
            await self._write_held_back(series)
