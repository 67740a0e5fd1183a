"""Dispatchers: which workers get a copy of a Workload. AllAtOnce (the default) lives in the
workload reconciler (every connected worker); Incremental nominates a few workers per round;
any other `dispatcherName` is external: nominations are written by another controller."""

from __future__ import annotations

from kube_runtime import api

ALL_AT_ONCE = api.DISPATCHER_ALL_AT_ONCE
INCREMENTAL = api.DISPATCHER_INCREMENTAL


def is_external(dispatcher_name: str) -> bool:
    return dispatcher_name not in (ALL_AT_ONCE, INCREMENTAL)
