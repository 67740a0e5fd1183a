"""Dispatchers: which workers get a copy of a Workload. AllAtOnce (the default) lives in the
workload reconciler (every connected worker); Incremental nominates a few workers per round;
least-loaded (ours) nominates the one worker with room and the least load, and every worker
when that is not enough (manager/dispatch/least_loaded.py); any other
`dispatcherName` is external: nominations are written by another controller."""

from __future__ import annotations

from kube_runtime import api

ALL_AT_ONCE = api.DISPATCHER_ALL_AT_ONCE
INCREMENTAL = api.DISPATCHER_INCREMENTAL
LEAST_LOADED = api.DISPATCHER_LEAST_LOADED


def is_external(dispatcher_name: str) -> bool:
    return dispatcher_name not in (ALL_AT_ONCE, INCREMENTAL, LEAST_LOADED)
