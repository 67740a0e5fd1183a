"""The manager's Workload reconcile waits for its own status writes to reach its cache: a reconcile
that runs before the watch shows a write (a worker's event, say, right after the nominating write)
would write again from the replaced version and be refused with a 409."""

from __future__ import annotations

import copy
import types

from kube_runtime.controller import Result
from kube_runtime.ownwrites import CACHE_LAG_RECHECK_SECONDS, OwnWrites
from manager.workload import WorkloadReconciler
from manager.workload_status import WorkloadStatus

KEY = "team-a/job-j-1a2b3"


def workload(version: str) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-j-1a2b3", "namespace": "team-a", "resourceVersion": version},
        "spec": {"queueName": "user-queue"},
        "status": {"admissionChecks": [{"name": "mk", "state": "Pending", "message": ""}]},
    }


class Kube:
    """Answers each status apply with the next resourceVersion."""

    def __init__(self) -> None:
        self.applies = 0

    async def apply_status(self, resource, body, field_manager, force=False):
        self.applies += 1
        written = copy.deepcopy(body)
        written["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        return written


class Cache:
    def __init__(self, wl: dict) -> None:
        self.wl = wl

    def get(self, key: str) -> dict | None:
        return self.wl if key == KEY else None


def reconciler(cached: dict) -> types.SimpleNamespace:
    r = types.SimpleNamespace(kube=Kube(), workloads=Cache(cached), _own_writes=OwnWrites())
    r._apply_status = lambda *a: WorkloadStatus._apply_status(r, *a)  # type: ignore[arg-type]
    return r


async def test_a_reconcile_from_the_version_a_write_replaced_waits_for_the_watch() -> None:
    cached = workload("42")
    r = reconciler(cached)
    await WorkloadStatus.set_nominated(r, cached, ["worker1"])  # type: ignore[arg-type]
    assert r.kube.applies == 1
    # The watch has not shown version 43 yet: no write, the key comes back after the watch event.
    assert await WorkloadReconciler.reconcile(r, KEY) == Result(requeue_after=CACHE_LAG_RECHECK_SECONDS)  # type: ignore[arg-type]
    assert r.kube.applies == 1
    # Once the cache holds the written version, the reconcile is no longer held back.
    r.workloads.wl = workload("43")
    assert not r._own_writes.lagging(KEY, r.workloads.wl)
