"""Dispatchers: which workers get a copy of a Workload, each behind the protocol of base.py that
the workload reconciler calls. AllAtOnce (the default) sends a copy to every connected worker;
Incremental nominates a few workers per round; least-loaded (ours) nominates the one worker with
room and the least load, and every worker when that is not enough; any other `dispatcherName` is
external: nominations are written by another controller."""

from __future__ import annotations

from kueue_domain import api

ALL_AT_ONCE = api.DISPATCHER_ALL_AT_ONCE
INCREMENTAL = api.DISPATCHER_INCREMENTAL
LEAST_LOADED = api.DISPATCHER_LEAST_LOADED


def is_external(dispatcher_name: str) -> bool:
    return dispatcher_name not in (ALL_AT_ONCE, INCREMENTAL, LEAST_LOADED)
