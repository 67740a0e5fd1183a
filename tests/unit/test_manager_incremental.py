"""manager.dispatch.incremental: `stepSize` more workers per 5-minute round, in the config's order
(or alphabetical), until none are left (upstream incrementaldispatcher_test.go)."""

from __future__ import annotations

import pytest

from kube_runtime.clock import FakeClock
from kube_runtime.controller import Result
from kueue_domain import api
from manager.dispatch.incremental import IncrementalDispatcher, NoMoreWorkers

KEY = "team-a/wl"
CHECK = {"metadata": {"name": "mk-check"}, "spec": {"controllerName": api.MULTIKUEUE_CONTROLLER_NAME}}
ROUND = api.INCREMENTAL_ROUND_TIMEOUT


def workload(
    state: str = "Pending",
    *,
    quota: bool = True,
    finished: bool = False,
    nominated: list[str] | None = None,
    cluster_name: str | None = None,
    deleting: bool = False,
) -> dict:
    conditions = []
    if quota:
        conditions.append({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    status: dict = {
        "conditions": conditions,
        "admissionChecks": [{"name": "mk-check", "state": state, "message": ""}],
    }
    if nominated is not None:
        status["nominatedClusterNames"] = nominated
    if cluster_name:
        status["clusterName"] = cluster_name
    meta: dict = {"name": "wl", "namespace": "team-a"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


class FakeWorkloads:
    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}

    def get(self, key: str) -> dict | None:
        return self.objects.get(key)

    def list(self) -> list[dict]:
        return list(self.objects.values())


class FakeChecks:
    def __init__(self, clusters: list[str]) -> None:
        self.clusters = clusters

    def config_clusters(self, _check: dict) -> list[str] | None:
        return list(self.clusters)


class FakeReconciler:
    """multikueue_check as the workload reconciler resolves it; set_nominated records and applies."""

    def __init__(self, workloads: FakeWorkloads) -> None:
        self.workloads = workloads
        self.nominations: list[list[str]] = []

    def multikueue_check(self, wl: dict) -> tuple[dict, dict] | None:
        for state in (wl.get("status") or {}).get("admissionChecks") or ():
            if state["name"] == "mk-check":
                return CHECK, state
        return None

    async def set_nominated(self, wl: dict, nominated: list[str]) -> None:
        self.nominations.append(list(nominated))
        wl["status"]["nominatedClusterNames"] = list(nominated)


class Fixture:
    def __init__(self, clusters: list[str], **kwargs: object) -> None:
        self.clock = FakeClock()
        self.workloads = FakeWorkloads()
        self.reconciler = FakeReconciler(self.workloads)
        self.notified: list[str] = []
        self.dispatcher = IncrementalDispatcher(
            self.workloads,  # type: ignore[arg-type]
            FakeChecks(clusters),  # type: ignore[arg-type]
            self.reconciler,  # type: ignore[arg-type]
            self.clock,
            on_nominated=self.notified.append,
            **kwargs,  # type: ignore[arg-type]
        )

    def add(self, wl: dict) -> dict:
        self.workloads.objects[KEY] = wl
        return wl


FIFTEEN = [f"worker-{i:02d}" for i in range(15)]


async def test_first_round_nominates_the_first_step_in_config_order() -> None:
    f = Fixture(["worker-onprem", "worker-aws", "worker-gcp", "worker-azure"])
    f.add(workload())
    assert await f.dispatcher.reconcile(KEY) == Result(requeue_after=ROUND)
    assert f.reconciler.nominations == [["worker-onprem", "worker-aws", "worker-gcp"]]
    assert f.notified == [KEY]


async def test_fewer_workers_than_the_step_are_all_nominated() -> None:
    f = Fixture(["w1", "w2"])
    f.add(workload())
    await f.dispatcher.reconcile(KEY)
    assert f.reconciler.nominations == [["w1", "w2"]]


async def test_a_reconcile_inside_the_round_only_requeues() -> None:
    f = Fixture(FIFTEEN)
    f.add(workload())
    await f.dispatcher.reconcile(KEY)
    await f.clock.advance(120)
    assert await f.dispatcher.reconcile(KEY) == Result(requeue_after=ROUND - 120)
    assert len(f.reconciler.nominations) == 1


async def test_after_the_round_the_next_step_is_added_to_the_nominated() -> None:
    f = Fixture(FIFTEEN)
    f.add(workload())
    rounds = []
    for _ in range(5):
        assert await f.dispatcher.reconcile(KEY) == Result(requeue_after=ROUND)
        rounds.append(f.reconciler.nominations[-1])
        await f.clock.advance(ROUND)
    assert rounds == [FIFTEEN[: 3 * (i + 1)] for i in range(5)]
    with pytest.raises(NoMoreWorkers, match=r"^no more workers to nominate$"):
        await f.dispatcher.reconcile(KEY)
    assert len(f.reconciler.nominations) == 5


async def test_doc_example_with_step_size_one() -> None:
    f = Fixture(["worker-onprem", "worker-aws", "worker-gcp"], step_size=1)
    f.add(workload())
    for _ in range(3):
        await f.dispatcher.reconcile(KEY)
        await f.clock.advance(ROUND)
    assert f.reconciler.nominations == [
        ["worker-onprem"],
        ["worker-onprem", "worker-aws"],
        ["worker-onprem", "worker-aws", "worker-gcp"],
    ]


async def test_step_size_two() -> None:
    f = Fixture(["a", "b", "c", "d", "e"], step_size=2)
    f.add(workload())
    for _ in range(3):
        await f.dispatcher.reconcile(KEY)
        await f.clock.advance(ROUND)
    assert f.reconciler.nominations == [["a", "b"], ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"]]


async def test_alphabetical_order_when_config_order_is_not_respected() -> None:
    f = Fixture(["worker-onprem", "worker-aws", "worker-gcp", "worker-azure"], respect_config_order=False)
    f.add(workload())
    await f.dispatcher.reconcile(KEY)
    assert f.reconciler.nominations == [["worker-aws", "worker-azure", "worker-gcp"]]


async def test_already_nominated_workers_are_kept_and_skipped() -> None:
    f = Fixture(["w1", "w2", "w3", "w4", "w5"])
    f.add(workload(nominated=["w2"]))
    await f.dispatcher.reconcile(KEY)
    assert f.reconciler.nominations == [["w2", "w1", "w3", "w4"]]


async def test_all_already_nominated_is_an_error() -> None:
    f = Fixture(["w1", "w2"])
    f.add(workload(nominated=["w1", "w2"]))
    with pytest.raises(NoMoreWorkers, match=r"^no more workers to nominate$"):
        await f.dispatcher.reconcile(KEY)
    assert f.reconciler.nominations == []


async def test_no_clusters_in_the_config_is_an_error() -> None:
    f = Fixture([])
    f.add(workload())
    with pytest.raises(NoMoreWorkers, match=r"^no active clusters$"):
        await f.dispatcher.reconcile(KEY)


@pytest.mark.parametrize(
    "wl",
    [
        pytest.param(workload(cluster_name="w1"), id="clusterName-set"),
        pytest.param(workload(quota=False), id="no-quota-reservation"),
        pytest.param(workload(finished=True), id="finished"),
        pytest.param(workload(state="Ready"), id="check-ready"),
        pytest.param(workload(state="Retry"), id="check-retry"),
        pytest.param(workload(state="Rejected"), id="check-rejected"),
        pytest.param(workload(deleting=True), id="being-deleted"),
        pytest.param({"metadata": {"name": "wl", "namespace": "team-a"}, "status": {}}, id="no-check"),
    ],
)
async def test_skipped_workloads_are_not_nominated(wl: dict) -> None:
    f = Fixture(["w1", "w2"])
    f.add(wl)
    assert await f.dispatcher.reconcile(KEY) is None
    assert f.reconciler.nominations == []
    assert f.notified == []


async def test_a_missing_workload_is_skipped() -> None:
    f = Fixture(["w1"])
    assert await f.dispatcher.reconcile(KEY) is None


async def test_losing_the_quota_forgets_the_round() -> None:
    f = Fixture(FIFTEEN)
    wl = f.add(workload())
    await f.dispatcher.reconcile(KEY)
    wl["status"]["conditions"] = []
    assert await f.dispatcher.reconcile(KEY) is None
    # With quota again (and the nominations cleared by core Kueue), a new round starts at once.
    f.add(workload())
    assert await f.dispatcher.reconcile(KEY) == Result(requeue_after=ROUND)
    assert f.reconciler.nominations == [FIFTEEN[:3], FIFTEEN[:3]]


async def test_deleting_the_workload_forgets_the_round() -> None:
    f = Fixture(FIFTEEN)
    f.add(workload())
    await f.dispatcher.reconcile(KEY)
    del f.workloads.objects[KEY]
    assert await f.dispatcher.reconcile(KEY) is None
    # A Workload recreated under the same name starts its first round at once.
    f.add(workload())
    assert await f.dispatcher.reconcile(KEY) == Result(requeue_after=ROUND)
    assert f.reconciler.nominations == [FIFTEEN[:3], FIFTEEN[:3]]
