"""List-then-watch cache of one resource type, with secondary indexes and event handlers.

The Informer lists (paged), fills a Store, then watches from the list's resourceVersion with
bookmarks, keeping the newest RV from every event. An optional transform (client-go's
SetTransform) trims each object before it enters the Store, e.g. `strip_managed_fields`: the cache,
the indexes and the handlers only ever see the trimmed object. A 410 Gone re-lists and reconciles the cache
(deletes for vanished objects, updates for changed ones); EOF, an inactivity timeout or a broken
connection reconnect from the last RV after a jittered backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from kube_runtime.client import ApiError, ConnectionLost, Gone, KubeClient, ResourceLike
from kube_runtime.clock import Clock

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
IndexFunc = Callable[[Obj], Iterable[str]]
# Trims an object before it is cached (it may change it in place and return it). It must keep
# metadata.name, namespace and resourceVersion, which the Store keys and compares.
Transform = Callable[[Obj], Obj]

ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"


def object_key(obj: Obj) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKeyFunc)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else meta["name"]


def strip_managed_fields(obj: Obj) -> Obj:
    """Drops metadata.managedFields (server-side apply bookkeeping, often as large as the rest of
    the object), for caches whose readers never look at it. In place; returns `obj`."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


# Strings up to this length are interned by `intern_strings`: keys, and values that repeat across
# objects (condition types and reasons, queue and flavor names, quantities, timestamps).
INTERN_MAX_LENGTH = 64


def intern_strings(value: Any) -> Any:
    """A copy of a decoded JSON value whose keys and short strings are interned. Every object of a
    watch is decoded from its own document, with its own copy of each key and repeated value
    ("status", "lastTransitionTime", "True"...): interned, one copy serves every cached object."""
    if isinstance(value, dict):
        return {sys.intern(k): intern_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [intern_strings(v) for v in value]
    if isinstance(value, str) and len(value) <= INTERN_MAX_LENGTH:
        return sys.intern(value)
    return value


def compact(obj: Obj) -> Obj:
    """The transform for caches of many objects whose readers never need managedFields: without
    them, strings interned. Returns a new object."""
    return intern_strings(strip_managed_fields(obj))


def _resource_version(obj: Obj | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


@dataclass(frozen=True)
class StoreEvent:
    """A change to the cache: ADDED (new), MODIFIED (old, new) or DELETED (old = last known state)."""

    type: str
    key: str
    old: Obj | None
    new: Obj | None


class Store:
    """The cache: objects by key plus secondary indexes. Pure, no I/O. With a `transform`, every
    object that enters (upsert, watch event, re-list) is transformed first."""

    def __init__(
        self, key_func: Callable[[Obj], str] = object_key, transform: Transform | None = None
    ) -> None:
        self._key_func = key_func
        self._transform = transform
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {}
        # index name -> index value -> keys; and index name -> key -> values (to undo on update/delete)
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._values_by_key: dict[str, dict[str, tuple[str, ...]]] = {}

    # -- reads -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def get(self, key: str) -> Obj | None:
        return self._items.get(key)

    def list(self) -> list[Obj]:
        return list(self._items.values())

    def keys(self) -> list[str]:
        return list(self._items)

    def by_index(self, name: str, value: str) -> list[Obj]:
        return [self._items[key] for key in sorted(self.index_keys(name, value))]

    def index_keys(self, name: str, value: str) -> set[str]:
        if name not in self._indexers:
            raise KeyError(f"no index named {name!r}")
        return set(self._indices[name].get(value, ()))

    def index_count(self, name: str, value: str) -> int:
        if name not in self._indexers:
            raise KeyError(f"no index named {name!r}")
        return len(self._indices[name].get(value, ()))

    def index_values(self, name: str) -> list[str]:
        """Every value that currently has at least one object in index `name`."""
        if name not in self._indexers:
            raise KeyError(f"no index named {name!r}")
        return sorted(self._indices[name])

    # -- indexes -----------------------------------------------------------------------------

    def add_index(self, name: str, fn: IndexFunc) -> None:
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = fn
        self._indices[name] = {}
        self._values_by_key[name] = {}
        for key, obj in self._items.items():
            self._index_one(name, key, obj)

    def _index_values(self, name: str, obj: Obj) -> tuple[str, ...]:
        try:
            return tuple(dict.fromkeys(self._indexers[name](obj) or ()))
        except Exception:
            log.exception("index function failed; object left out of the index", index=name)
            return ()

    def _index_one(self, name: str, key: str, obj: Obj) -> None:
        values = self._index_values(name, obj)
        if values:
            self._values_by_key[name][key] = values
        for value in values:
            self._indices[name].setdefault(value, set()).add(key)

    def _unindex_one(self, name: str, key: str) -> None:
        for value in self._values_by_key[name].pop(key, ()):
            keys = self._indices[name].get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._indices[name][value]

    # -- writes ------------------------------------------------------------------------------

    def _transformed(self, obj: Obj) -> Obj:
        return self._transform(obj) if self._transform is not None else obj

    def upsert(self, obj: Obj) -> Obj | None:
        """Insert or replace (transformed); returns the previous object (None if new)."""
        return self._put(self._transformed(obj))

    def _put(self, obj: Obj) -> Obj | None:
        key = self._key_func(obj)
        old = self._items.get(key)
        self._items[key] = obj
        for name in self._indexers:
            if old is not None:
                self._unindex_one(name, key)
            self._index_one(name, key, obj)
        return old

    def delete(self, key: str) -> Obj | None:
        old = self._items.pop(key, None)
        if old is not None:
            for name in self._indexers:
                self._unindex_one(name, key)
        return old

    def apply_event(self, event_type: str, obj: Obj) -> StoreEvent | None:
        """Apply one watch event; None when it changes nothing (a BOOKMARK, or an RV already cached)."""
        if event_type == BOOKMARK:
            return None
        obj = self._transformed(obj)
        key = self._key_func(obj)
        if event_type == DELETED:
            self.delete(key)
            # The event carries the object's final state, newer than (or equal to) the cached one.
            return StoreEvent(DELETED, key, obj, None)
        if event_type not in (ADDED, MODIFIED):
            raise ValueError(f"unexpected watch event type {event_type!r}")
        current = self._items.get(key)
        if current is not None and _resource_version(current) == _resource_version(obj):
            return None
        old = self._put(obj)
        return StoreEvent(ADDED, key, None, obj) if old is None else StoreEvent(MODIFIED, key, old, obj)

    def replace(self, objs: Iterable[Obj]) -> list[StoreEvent]:
        """Make the cache equal a fresh list; returns the differences as events (re-list reconciliation)."""
        fresh = {self._key_func(obj): obj for obj in map(self._transformed, objs)}
        events: list[StoreEvent] = []
        for key in [k for k in self._items if k not in fresh]:
            old = self.delete(key)
            events.append(StoreEvent(DELETED, key, old, None))
        for key, obj in fresh.items():
            current = self._items.get(key)
            if current is None:
                self._put(obj)
                events.append(StoreEvent(ADDED, key, None, obj))
            elif _resource_version(current) != _resource_version(obj) or _resource_version(obj) is None:
                self._put(obj)
                events.append(StoreEvent(MODIFIED, key, current, obj))
        return events


Handler = Callable[..., Any]


@dataclass
class _Handlers:
    on_add: Handler | None
    on_update: Handler | None
    on_delete: Handler | None


class Informer:
    """Watches one resource (optionally one namespace / label selector) into a Store.

    Handlers run in the informer's task, in event order: keep them short (enqueue a key).
    `stop()` keeps the cache and the last resourceVersion; `start()` again resumes the watch there.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: ResourceLike,
        namespace: str | None = None,
        label_selector: str | None = None,
        resync: float | None = None,
        clock: Clock | None = None,
        inactivity_timeout: float = 300,
        *,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: int | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        name: str | None = None,
        on_failure: Callable[[BaseException], Any] | None = None,
        transform: Transform | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync = resync
        self.name = name or resource.plural
        self._clock = clock or Clock()
        self._inactivity_timeout = inactivity_timeout
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        # What the cache keeps of each object (None: all of it); see Transform.
        self.store = Store(transform=transform)
        # Called (in the informer's task) when a list or watch fails; the MultiKueue manager uses
        # it to notice a lost worker instead of letting the informer retry quietly.
        self._on_failure = on_failure
        self._handlers: list[_Handlers] = []
        self._synced = asyncio.Event()
        self._resource_version: str | None = None
        self._needs_list = True
        self._task: asyncio.Task[None] | None = None
        self._resync_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Future[None]] = set()
        self._failures = 0
        self._log = log.bind(informer=self.name, kind=resource.kind, namespace=namespace)
        # Counters for metrics.
        self.lists = 0
        self.relists = 0
        self.watch_restarts = 0
        self.events = 0
        self.errors = 0

    # -- configuration -----------------------------------------------------------------------

    def add_handler(
        self,
        on_add: Handler | None = None,
        on_update: Handler | None = None,
        on_delete: Handler | None = None,
    ) -> None:
        """on_add(obj), on_update(old, new), on_delete(obj), sync or async; late handlers get adds."""
        handlers = _Handlers(on_add, on_update, on_delete)
        self._handlers.append(handlers)
        if self.has_synced and on_add is not None:
            for obj in self.store.list():
                self._call_soon(on_add, obj)

    def _call_soon(self, fn: Handler, *args: Any) -> None:
        result = self._safe_call(fn, *args)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(self._await_handler(fn, result))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        self.store.add_index(name, fn)

    # -- reads -------------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Wait for the first list to land in the cache (bound it with `asyncio.timeout`)."""
        await self._synced.wait()

    @property
    def resource_version(self) -> str | None:
        """The newest resourceVersion seen (list, event or bookmark): where the next watch starts."""
        return self._resource_version

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def get_object(self, name: str, namespace: str | None = None) -> Obj | None:
        return self.store.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> list[Obj]:
        return self.store.list()

    def by_index(self, name: str, value: str) -> list[Obj]:
        return self.store.by_index(name, value)

    def stats(self) -> dict[str, int]:
        return {
            "lists": self.lists,
            "relists": self.relists,
            "watch_restarts": self.watch_restarts,
            "events": self.events,
            "errors": self.errors,
            "objects": len(self.store),
        }

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is not None and not self._task.done():
            return
        self._task = asyncio.create_task(self._run(), name=f"informer-{self.name}")
        if self.resync:
            self._resync_task = asyncio.create_task(self._resync_loop(), name=f"informer-resync-{self.name}")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._resync_task) if t is not None]
        self._task = self._resync_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # -- the loop ----------------------------------------------------------------------------

    def _backoff(self, failures: int) -> float:
        ceiling = min(self._backoff_max, self._backoff_initial * 2 ** max(0, failures - 1))
        return random.uniform(ceiling / 2, ceiling)

    async def _run(self) -> None:
        while True:
            try:
                if self._needs_list:
                    await self._list_and_reconcile()
                await self._watch()
                self.watch_restarts += 1
                self._log.debug("watch ended, reconnecting", resource_version=self._resource_version)
                continue
            except Gone:
                # Our resourceVersion was compacted away: list again and diff the cache against it.
                self._log.info(
                    "resourceVersion too old (410 Gone), re-listing", resource_version=self._resource_version
                )
                self._needs_list = True
                self.watch_restarts += 1
                self._failures += 1
                if self._failures == 1:
                    continue
            except TimeoutError as exc:
                self._log.info("watch inactive, reconnecting", seconds=self._inactivity_timeout)
                self.watch_restarts += 1
                self._failures += 1
                self._report_failure(exc)
            except (ConnectionLost, ApiError) as exc:
                self.errors += 1
                if not self._needs_list:
                    self.watch_restarts += 1
                self._failures += 1
                self._log.warning("list/watch failed, retrying", error=str(exc), failures=self._failures)
                self._report_failure(exc)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.errors += 1
                self._failures += 1
                self._log.exception("informer loop failed, retrying", failures=self._failures)
            await self._clock.sleep(self._backoff(self._failures))

    def _report_failure(self, exc: BaseException) -> None:
        if self._on_failure is not None:
            self._safe_call(self._on_failure, exc)

    async def _list_and_reconcile(self) -> None:
        items, resource_version = await self.client.list(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self._page_size,
        )
        if self.lists:
            self.relists += 1
        self.lists += 1
        events = self.store.replace(items)
        self._resource_version = resource_version
        self._needs_list = False
        self._log.debug("listed", objects=len(items), changes=len(events), resource_version=resource_version)
        for event in events:
            await self._dispatch(event)
        self._synced.set()

    async def _watch(self) -> None:
        timeout_seconds = self._watch_timeout or int(
            random.uniform(0.5, 0.9) * max(self._inactivity_timeout, 10)
        )
        stream = self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self._resource_version,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=True,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        async with contextlib.aclosing(stream):
            while True:
                async with asyncio.timeout(self._inactivity_timeout):
                    try:
                        event_type, obj = await anext(stream)
                    except StopAsyncIteration:
                        return
                self.events += 1
                self._failures = 0  # the watch works: the next failure starts the backoff afresh
                resource_version = _resource_version(obj)
                if resource_version:
                    self._resource_version = resource_version
                event = self.store.apply_event(event_type, obj)
                if event is not None:
                    await self._dispatch(event)

    async def _resync_loop(self) -> None:
        assert self.resync
        while True:
            await self._clock.sleep(self.resync)
            if not self.has_synced:
                continue
            for obj in self.store.list():
                for handlers in list(self._handlers):
                    if handlers.on_update is not None:
                        await self._invoke(handlers.on_update, obj, obj)

    async def _dispatch(self, event: StoreEvent) -> None:
        for handlers in list(self._handlers):
            if event.type == ADDED and handlers.on_add is not None:
                await self._invoke(handlers.on_add, event.new)
            elif event.type == MODIFIED and handlers.on_update is not None:
                await self._invoke(handlers.on_update, event.old, event.new)
            elif event.type == DELETED and handlers.on_delete is not None:
                await self._invoke(handlers.on_delete, event.old)

    async def _invoke(self, fn: Handler, *args: Any) -> None:
        result = self._safe_call(fn, *args)
        if inspect.isawaitable(result):
            await self._await_handler(fn, result)

    async def _await_handler(self, fn: Handler, result: Awaitable[Any]) -> None:
        try:
            await result
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log.exception("event handler failed", handler=getattr(fn, "__qualname__", repr(fn)))

    def _safe_call(self, fn: Handler, *args: Any) -> Awaitable[Any] | None:
        try:
            return fn(*args)
        except Exception:
            self._log.exception("event handler failed", handler=getattr(fn, "__qualname__", repr(fn)))
            return None
