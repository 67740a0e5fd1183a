"""An external dispatcher (any other `dispatcherName`, multikueue-spec §3.5.3): another controller
writes nominatedClusterNames; copies go to the workers it nominated."""

from __future__ import annotations

from manager.dispatch.base import KeepNominations


class ExternalDispatcher(KeepNominations):
    external = True
