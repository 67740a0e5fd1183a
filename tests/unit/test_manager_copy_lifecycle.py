"""How the manager creates a Workload copy on a worker and removes what it placed there.

A copy is created once: a reconcile running again before the worker's watch shows the copy does not
send the create again (it would only be answered AlreadyExists).

The order in which the manager removes what it placed on a worker (remove_remote_objects):

Upstream's order is the job object, then the Workload copy. For a finished copy of a
single-Workload job (a batch/v1 Job's run is over) the copy goes first: the worker's garbage
collector would otherwise delete the copy with the Job that owns it, a GET and a DELETE that race
ours. A copy still running, and any copy of a group (whose job object the other members may still
need), keep upstream's order.
"""

from __future__ import annotations

import types
from collections import OrderedDict

import pytest

from kube_runtime.client import NotFound
from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.copy_writes import RemoteCopies
from manager.remote import CREATED_UNSEEN_SECONDS, RemoteClient

NS, WL, JOB = "team-a", "job-sample-1a2b3", "sample"


def copy(finished: bool, finalizers: list[str] | None = None) -> dict:
    conditions = [{"type": api.WORKLOAD_QUOTA_RESERVED, "status": "True"}]
    if finished:
        conditions.append({"type": api.WORKLOAD_FINISHED, "status": "True", "reason": "Succeeded"})
    meta = {"name": WL, "namespace": NS, "uid": "u-1", "resourceVersion": "7"}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"metadata": meta, "status": {"conditions": conditions}}


class Log(list):
    pass


class FakeKube:
    def __init__(self, log: Log, gone: bool = False) -> None:
        self.log, self.gone = log, gone

    async def patch_merge(self, resource, name, body, namespace=None):
        self.log.append(("patch", resource.plural, name, body["metadata"].get("finalizers")))
        return body

    async def delete(self, resource, name, namespace=None, **_):
        self.log.append(("delete", resource.plural, name))
        if self.gone:
            raise NotFound({"code": 404, "message": "gone"})


class FakeRemote:
    """A worker's client whose cache keeps showing the copy (the watch is behind our deletes)."""

    def __init__(self, log: Log, remote: dict | None, gone: bool = False) -> None:
        self.name = "worker1"
        self.log = log
        self.remote = remote
        self.kube = FakeKube(log, gone)
        self.withdrawn: list[str] = []

    def remote_workload(self, namespace, name):
        return self.remote

    def withdraw(self, obj):
        self.withdrawn.append(obj["metadata"]["uid"])

    def forget_created(self, resource, namespace, name):
        pass


class FakeAdapter:
    def __init__(self, log: Log, multi_workload: bool = False) -> None:
        self.log = log
        self.multi_workload = multi_workload

    async def delete_remote(self, client, namespace, name):
        self.log.append(("delete", "job object", name))

    async def clear_worker(self, namespace, name):
        self.log.append(("clear", name))


def reconciler(members: list[dict] | None = None) -> types.SimpleNamespace:
    groups = types.SimpleNamespace(members=lambda wl: members)
    r = types.SimpleNamespace(workloads={}, deleted={}, groups=groups)
    r._delete_copy = RemoteCopies._delete_copy
    r._group_stays = lambda *a: RemoteCopies._group_stays(r, *a)  # type: ignore[arg-type]
    return r


async def remove(r, client, adapter) -> None:
    await RemoteCopies.remove_remote_objects(r, client, adapter, NS, JOB, WL)  # type: ignore[arg-type]


async def test_a_finished_copy_goes_before_its_job_and_only_once() -> None:
    log = Log()
    client = FakeRemote(log, copy(finished=True))
    await remove(reconciler(), client, FakeAdapter(log))
    assert log == [("delete", "workloads", WL), ("delete", "job object", JOB)]
    assert client.withdrawn == ["u-1"]


async def test_a_running_copy_goes_after_its_job() -> None:
    log = Log()
    client = FakeRemote(log, copy(finished=False))
    await remove(reconciler(), client, FakeAdapter(log))
    assert log == [("delete", "job object", JOB), ("delete", "workloads", WL)]


async def test_a_finished_copy_drops_its_finalizer_first_and_a_gone_copy_still_takes_the_job() -> None:
    log = Log()
    client = FakeRemote(log, copy(finished=True, finalizers=[api.FINALIZER_RESOURCE_IN_USE]), gone=True)
    await remove(reconciler(), client, FakeAdapter(log))
    assert log == [
        ("patch", "workloads", WL, None),
        ("delete", "workloads", WL),  # answered 404: someone was faster; the job still goes
        ("delete", "job object", JOB),
    ]


async def test_no_copy_on_the_worker_still_takes_the_job() -> None:
    log = Log()
    await remove(reconciler(), FakeRemote(log, None), FakeAdapter(log))
    assert log == [("delete", "job object", JOB)]


@pytest.mark.parametrize("finished", [True, False])
async def test_a_group_copy_keeps_upstreams_order(finished: bool) -> None:
    """A LeaderWorkerSet's members share one job object: it goes first, once no member stays."""
    log = Log()
    client = FakeRemote(log, copy(finished=finished))
    r = reconciler(members=[])
    r.workloads[f"{NS}/{WL}"] = copy(finished=finished)
    await remove(r, client, FakeAdapter(log, multi_workload=True))
    assert log == [("delete", "job object", JOB), ("clear", JOB), ("delete", "workloads", WL)]


class CreatingRemote:
    """A worker's client whose watch never shows what was created (it lags) and that records creates."""

    def __init__(self) -> None:
        self.name = "worker1"
        self.creates: list[str] = []
        self.clock = FakeClock()
        self._created: OrderedDict = OrderedDict()
        self.remember_created = types.MethodType(RemoteClient.remember_created, self)
        self.created_unseen = types.MethodType(RemoteClient.created_unseen, self)
        self.forget_created = types.MethodType(RemoteClient.forget_created, self)
        remote = self

        class Kube:
            async def create(self, resource, body, namespace=None):
                remote.creates.append(body["metadata"]["name"])
                return {**body, "metadata": {**body["metadata"], "uid": f"u-{len(remote.creates)}"}}

            async def delete(self, resource, name, namespace=None, **_):
                pass

        self.kube = Kube()


async def test_a_copy_is_created_once_while_the_workers_watch_lags_and_again_after_our_delete() -> None:
    client = CreatingRemote()
    r = types.SimpleNamespace(metrics=types.SimpleNamespace(dispatched=lambda *a: None))
    body = {"metadata": {"name": WL, "namespace": NS}, "spec": {}}
    create = RemoteCopies.create_copy
    assert await create(r, client, {}, body) is True  # type: ignore[arg-type]
    assert await create(r, client, {}, body) is False  # type: ignore[arg-type]
    assert client.creates == [WL]
    # Deleted by us (say its spec changed): the next create goes out at once.
    await RemoteCopies._delete_copy(client, {"metadata": {"resourceVersion": "1"}}, NS, WL)  # type: ignore[arg-type]
    assert await create(r, client, {}, body) is True  # type: ignore[arg-type]
    # The unseen mark lasts CREATED_UNSEEN_SECONDS: after that the cache is the only record.
    await client.clock.advance(CREATED_UNSEEN_SECONDS)
    assert await create(r, client, {}, body) is True  # type: ignore[arg-type]
    assert client.creates == [WL, WL, WL]
