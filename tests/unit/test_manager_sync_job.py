"""RemoteCopies.sync_job when creating the worker's job answers AlreadyExists: a foreign
object of that name is an OwnershipError that names it; our own job, created by an earlier
reconcile the worker's watch has not shown yet, is no error (the sync is deferred)."""

from __future__ import annotations

import types

import pytest

from kube_runtime.client import AlreadyExists, NotFound
from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.adapters.base import OwnershipError
from manager.copy_writes import RemoteCopies
from manager.remote import RemoteClient

ORIGIN = "multikueue"


class WorkerKube:
    def __init__(self, existing: dict | None) -> None:
        self.existing = existing

    async def get(self, resource: api.Resource, name: str, namespace: str) -> dict:
        if self.existing is None:
            raise NotFound({"code": 404, "reason": "NotFound", "message": "not found"})
        return self.existing


class CreatingAdapter:
    """An adapter whose create meets an object of the same name on the worker."""

    resource = api.JOB

    async def sync_job(self, remote: RemoteClient, namespace: str, name: str, workload_name: str) -> bool:
        raise AlreadyExists(
            {"code": 409, "reason": "AlreadyExists", "message": f'jobs.batch "{name}" exists'}
        )


def worker(existing: dict | None) -> RemoteClient:
    client = RemoteClient(
        "worker1", ORIGIN, [], FakeClock(), on_event=lambda _c, _k: None, on_lost=lambda _c: None
    )
    client.kube = WorkerKube(existing)  # type: ignore[assignment]
    client.cache = lambda resource: {}  # type: ignore[method-assign]  # its watch has not shown the job
    return client


def job(labels: dict) -> dict:
    return {"metadata": {"name": "job", "namespace": "team-a", "labels": labels}}


async def sync(client: RemoteClient) -> bool:
    reconciler = types.SimpleNamespace(origin=ORIGIN)
    return await RemoteCopies.sync_job(
        reconciler,  # type: ignore[arg-type]
        client,
        CreatingAdapter(),  # type: ignore[arg-type]
        "team-a",
        "job",
        "job-job-abcde",
    )


async def test_our_own_job_not_yet_in_the_watch_cache_defers_the_sync() -> None:
    client = worker(job({api.LABEL_MULTIKUEUE_ORIGIN: ORIGIN}))
    assert await sync(client) is True


async def test_a_job_gone_again_defers_the_sync_too() -> None:
    assert await sync(worker(None)) is True


async def test_a_foreign_job_of_that_name_is_named_in_the_error() -> None:
    with pytest.raises(OwnershipError) as err:
        await sync(worker(job({})))
    assert str(err.value) == api.name_conflict_message("Job", "team-a", "job", "worker1")
