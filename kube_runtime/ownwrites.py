"""A controller's own writes that its informer has not shown yet.

A controller reconciles from its watch cache. After it writes an object (a Job it starts, say),
another event can bring the same key back before the watch has delivered that write: the cache
still holds the version the write replaced. Acting on it repeats the write, which the API server
refuses with a 409, and the controller then reads the object back: two requests for nothing.

`OwnWrites` remembers, per key, the resourceVersion each write replaced and the one it wrote.
`lagging(key, cached)` is true while the cache still holds a replaced version, or one older than the
write (another writer's, written between the controller's read and its write, which the watch
delivers before the write: the job controller's status updates of a Job just created, say); the
controller then waits for the watch event, which reconciles the key again. "Older" compares
resourceVersions as numbers when both are (etcd's revisions); others are only matched as replaced.
A write that changed nothing (the same resourceVersion back) is not remembered, and a memory
expires after `ttl` seconds, so a lost watch event cannot hold a key back for long.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]

OWN_WRITE_TTL_SECONDS = 10.0
# A key held back for a lagging cache is looked at again after this; the watch event that shows the
# write brings it back sooner, this is only the backstop should that event be lost.
CACHE_LAG_RECHECK_SECONDS = 2.0


def _resource_version(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def _older(version: str, than: str) -> bool:
    return version.isdigit() and than.isdigit() and int(version) < int(than)


class OwnWrites:
    def __init__(
        self, ttl: float = OWN_WRITE_TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        # key -> (the resourceVersions our writes replaced, when the memory expires)
        self._replaced: dict[str, tuple[set[str], float]] = {}
        self._written: dict[str, str] = {}  # key -> the resourceVersion of our latest write

    def wrote(self, key: str, before: Obj, after: Obj | None) -> None:
        """`after` (the API's answer) replaced `before` (the copy the controller wrote from).
        Several writes in a row each add the version they replaced."""
        old, new = _resource_version(before), _resource_version(after)
        if not old or not new or old == new:
            return
        versions = self._replaced[key][0] if key in self._replaced else set()
        versions.add(old)
        self._replaced[key] = (versions, self._clock() + self._ttl)
        if not _older(new, self._written.get(key, "")):
            self._written[key] = new

    def lagging(self, key: str, cached: Obj | None) -> bool:
        """True while `cached` is a version a write of ours has replaced, or older than our latest
        write (and the memory has not expired)."""
        entry = self._replaced.get(key)
        if entry is None:
            return False
        versions, expires = entry
        if cached is not None and self._clock() < expires:
            version = _resource_version(cached)
            if version in versions or _older(version, self._written.get(key, "")):
                return True
        self.forget(key)
        return False

    def forget(self, key: str) -> None:
        self._replaced.pop(key, None)
        self._written.pop(key, None)

    def __len__(self) -> int:
        return len(self._replaced)
