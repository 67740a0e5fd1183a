"""The manager's Finished=True on its Workload is upstream's write: a forced apply of that one
condition under `kueue.x-k8s.io/multikueue-finish`, with no resourceVersion. The worker_agent
finishes the same Workload from the mirrored Job within moments, so a strict apply of the whole
status would meet a 409."""

from __future__ import annotations

import datetime as dt
import types

from kube_runtime.clock import FakeClock
from kueue_domain import api
from manager.workload_status import WorkloadStatus


class RecordingKube:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def apply_status(self, resource, body, field_manager, force=False):
        self.calls.append((resource, body, field_manager, force))
        return body


def workload() -> dict:
    return {
        "apiVersion": api.WORKLOAD.api_version,
        "kind": api.WORKLOAD.kind,
        "metadata": {"name": "job-j-1a2b3", "namespace": "team-a", "resourceVersion": "42", "generation": 1},
        "spec": {"queueName": "user-queue"},
        "status": {
            "conditions": [
                {
                    "type": api.WORKLOAD_ADMITTED,
                    "status": "True",
                    "reason": "Admitted",
                    "message": "The workload is admitted",
                    "lastTransitionTime": "2026-11-28T10:00:00Z",
                }
            ],
            "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": []},
        },
    }


async def test_finished_is_one_forced_condition_apply_without_resource_version() -> None:
    kube = RecordingKube()
    clock = FakeClock(dt.datetime(2026, 11, 28, 12, 0, 0, tzinfo=dt.UTC))
    reconciler = types.SimpleNamespace(kube=kube, clock=clock)
    wl = workload()
    await WorkloadStatus.apply_finished(reconciler, wl, "Succeeded", "Job finished successfully")  # type: ignore[arg-type]

    assert len(kube.calls) == 1
    resource, body, field_manager, force = kube.calls[0]
    assert resource == api.WORKLOAD
    assert field_manager == "kueue.x-k8s.io/multikueue-finish"
    assert force is True
    assert body["metadata"] == {"name": "job-j-1a2b3", "namespace": "team-a"}  # no resourceVersion
    assert list(body["status"]) == ["conditions"]  # nothing the agent owns
    (finished,) = body["status"]["conditions"]
    assert finished["type"] == api.WORKLOAD_FINISHED
    assert finished["status"] == "True"
    assert finished["reason"] == "Succeeded"
    assert finished["message"] == "Job finished successfully"
    assert finished["lastTransitionTime"].startswith("2026-11-28T12:00:00")
    # The cached Workload is not changed.
    assert [c["type"] for c in wl["status"]["conditions"]] == [api.WORKLOAD_ADMITTED]
