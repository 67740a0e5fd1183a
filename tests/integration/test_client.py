"""KubeClient and EventRecorder against a real kube-apiserver of the local fleet."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import yaml
from admission_kit import workload

from kube_runtime.client import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    KubeClient,
    NotFound,
)
from kube_runtime.events import EventRecorder
from kueue_domain import api

pytestmark = pytest.mark.realcluster

CONFIGMAP = api.Resource(api.CORE_GROUP, "v1", "configmaps", "ConfigMap", True)
NAMESPACE, SECRET, EVENT = api.NAMESPACE, api.SECRET, api.EVENT


def configmap(name: str, namespace: str, **data: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "client-test"}},
        "data": data,
    }


async def test_create_get_list_paging(kube, namespace):
    for i in range(7):
        created = await kube.create(CONFIGMAP, configmap(f"cm-{i}", namespace, index=str(i)))
        assert created["metadata"]["uid"]
    got = await kube.get(CONFIGMAP, "cm-3", namespace)
    assert got["data"] == {"index": "3"} and got["kind"] == "ConfigMap"

    requests: list[dict] = []
    real_request = kube.request

    async def counting_request(method, path, **kwargs):
        requests.append(kwargs.get("params") or {})
        return await real_request(method, path, **kwargs)

    kube.request = counting_request
    try:
        items, resource_version = await kube.list(
            CONFIGMAP, namespace, label_selector="app=client-test", limit=2
        )
    finally:
        del kube.request
    assert sorted(i["metadata"]["name"] for i in items) == [f"cm-{i}" for i in range(7)]
    assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in items)
    assert int(resource_version) > 0
    assert len(requests) == 4 and all(p["limit"] == 2 for p in requests)
    assert requests[0].get("continue") is None and all(p.get("continue") for p in requests[1:])

    everything, _ = await kube.list(CONFIGMAP, namespace)
    assert {"cm-0", "cm-6"} <= {i["metadata"]["name"] for i in everything}
    selected, _ = await kube.list(CONFIGMAP, namespace, field_selector="metadata.name=cm-5")
    assert [i["metadata"]["name"] for i in selected] == ["cm-5"]


async def test_patch_replace_delete_and_typed_errors(kube, namespace):
    created = await kube.create(CONFIGMAP, configmap("target", namespace, a="1"))

    with pytest.raises(AlreadyExists) as exists:
        await kube.create(CONFIGMAP, configmap("target", namespace))
    assert isinstance(exists.value, Conflict) and exists.value.code == 409
    assert exists.value.status["reason"] == "AlreadyExists"

    with pytest.raises(NotFound) as missing:
        await kube.get(CONFIGMAP, "no-such-configmap", namespace)
    assert missing.value.code == 404 and missing.value.status["details"]["name"] == "no-such-configmap"

    with pytest.raises(Invalid) as invalid:
        await kube.create(CONFIGMAP, configmap("Not_A_Valid_Name", namespace))
    assert invalid.value.code == 422 and invalid.value.reason == "Invalid"

    merged = await kube.patch_merge(CONFIGMAP, "target", {"data": {"b": "2", "a": None}}, namespace)
    assert merged["data"] == {"b": "2"}
    patched = await kube.patch_json(
        CONFIGMAP, "target", [{"op": "add", "path": "/data/c", "value": "3"}], namespace
    )
    assert patched["data"] == {"b": "2", "c": "3"}
    with pytest.raises(Invalid):
        await kube.patch_json(
            CONFIGMAP, "target", [{"op": "test", "path": "/data/b", "value": "no"}], namespace
        )

    stale = dict(created, data={"stale": "write"})
    with pytest.raises(Conflict) as conflict:
        await kube.replace(CONFIGMAP, stale)  # created's resourceVersion is out of date
    assert conflict.value.reason == "Conflict"
    fresh = await kube.get(CONFIGMAP, "target", namespace)
    replaced = await kube.replace(CONFIGMAP, dict(fresh, data={"only": "this"}))
    assert replaced["data"] == {"only": "this"}

    with pytest.raises(Conflict):
        await kube.delete(CONFIGMAP, "target", namespace, preconditions={"uid": str(uuid.uuid4())})
    await kube.delete(
        CONFIGMAP,
        "target",
        namespace,
        propagation_policy="Background",
        preconditions={"uid": created["metadata"]["uid"]},
    )
    with pytest.raises(NotFound):
        await kube.get(CONFIGMAP, "target", namespace)
    with pytest.raises(NotFound):
        await kube.delete(CONFIGMAP, "target", namespace)


async def test_forbidden_for_a_least_privilege_identity(fleet):
    worker = fleet.workers[0]
    async with await KubeClient.from_kubeconfig_file(fleet.multikueue_kubeconfig(worker)) as limited:
        with pytest.raises(Forbidden) as forbidden:
            await limited.list(SECRET, "kube-system")
        assert forbidden.value.code == 403 and forbidden.value.reason == "Forbidden"


@pytest.fixture
def manager_kubeconfig_dict(fleet) -> dict:
    with open(fleet.kubeconfig("manager")) as f:
        return yaml.safe_load(f)


async def test_kubeconfig_dict_with_embedded_client_certificate(manager_kubeconfig_dict, namespace):
    async with await KubeClient.from_kubeconfig_dict(manager_kubeconfig_dict) as kube:
        ns = await kube.get(NAMESPACE, namespace)
        assert ns["status"]["phase"] == "Active"


async def test_watch_streams_events_from_a_resource_version(kube, namespace):
    _, resource_version = await kube.list(CONFIGMAP, namespace)
    seen: list[tuple[str, str]] = []

    async def consume():
        # The selector keeps out kube-root-ca.crt, which kube-controller-manager adds to new namespaces.
        stream = kube.watch(
            CONFIGMAP, namespace, resource_version, timeout_seconds=10, label_selector="app=client-test"
        )
        async for event_type, obj in stream:
            seen.append((event_type, obj["metadata"].get("name", "")))
            if event_type == "DELETED":
                return

    watcher = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    await kube.create(CONFIGMAP, configmap("watched", namespace))
    await kube.patch_merge(CONFIGMAP, "watched", {"data": {"k": "v"}}, namespace)
    await kube.delete(CONFIGMAP, "watched", namespace)
    await asyncio.wait_for(watcher, 10)
    assert [e for e in seen if e[0] != "BOOKMARK"] == [
        ("ADDED", "watched"),
        ("MODIFIED", "watched"),
        ("DELETED", "watched"),
    ]


async def find_events(kube, namespace: str, reason: str) -> list[dict]:
    items, _ = await kube.list(EVENT, namespace)
    return [e for e in items if e.get("reason") == reason]


async def test_event_recorder_creates_then_counts_a_series(kube, namespace):
    target = await kube.create(CONFIGMAP, configmap("evented", namespace))
    recorder = EventRecorder(kube, "kueue-federation-test", "test-instance-1")

    await recorder.event(target, "Normal", "Synced", "Reconcile", "first " + "x" * 2000)
    await recorder.flush()
    [event] = await find_events(kube, namespace, "Synced")
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["regarding"]["kind"] == "ConfigMap" and event["regarding"]["name"] == "evented"
    assert event["regarding"]["uid"] == target["metadata"]["uid"]
    assert event["type"] == "Normal" and event["action"] == "Reconcile"
    assert event["reportingController"] == "kueue-federation-test"
    assert event["reportingInstance"] == "test-instance-1"
    assert len(event["note"].encode()) == 1024 and event["note"].endswith("x ...")
    assert event["eventTime"].endswith("Z") and len(event["eventTime"]) == len("2026-01-01T00:00:00.000000Z")
    assert "series" not in event

    await recorder.event(target, "Normal", "Synced", "Reconcile", "again")
    await recorder.flush()
    [event] = await find_events(kube, namespace, "Synced")
    assert event["series"]["count"] == 2
    first_observed = event["series"]["lastObservedTime"]
    await asyncio.sleep(0.01)
    await recorder.event(target, "Normal", "Synced", "Reconcile", "and again")
    await recorder.flush()
    [event] = await find_events(kube, namespace, "Synced")
    assert event["series"]["count"] == 3
    assert event["series"]["lastObservedTime"] > first_observed

    # A different reason is a different event.
    await recorder.event(target, "Warning", "Failed", "Reconcile", "boom")
    await recorder.flush()
    [warning] = await find_events(kube, namespace, "Failed")
    assert warning["type"] == "Warning"


async def test_event_recorder_told_warning_only_writes_warnings_alone(kube, namespace):
    target = await kube.create(CONFIGMAP, configmap("warned", namespace))
    recorder = EventRecorder(kube, "kueue-federation-test", "test-instance-1", types=("Warning",))
    await recorder.event(target, "Normal", "Admitted", "Admission", "not written")
    await recorder.event(target, "Warning", "Pending", "Admission", "written")
    await recorder.flush()
    assert await find_events(kube, namespace, "Admitted") == []
    [warning] = await find_events(kube, namespace, "Pending")
    assert warning["type"] == "Warning" and warning["note"] == "written"
    assert recorder.skipped == 1 and recorder.dropped == 0


async def test_event_recorder_never_raises(kube):
    recorder = EventRecorder(kube, "kueue-federation-test", "test-instance-1")
    ghost = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "no-such-namespace-zz"},
    }
    await recorder.event(ghost, "Normal", "Synced", "Reconcile", "dropped")
    await recorder.event(ghost, "Sideways", "Synced", "Reconcile", "bad type")
    await recorder.flush()
    assert recorder.dropped == 2


async def test_event_recorder_does_not_wait_for_the_api_and_drops_beyond_its_queue(kube, namespace):
    target = await kube.create(CONFIGMAP, configmap("busy", namespace))
    recorder = EventRecorder(kube, "kueue-federation-test", "test-instance-1", max_queued=3)
    for i in range(5):  # returns at once: nothing was written yet
        await recorder.event(target, "Normal", f"Step{i}", "Reconcile", "note")
    assert await find_events(kube, namespace, "Step0") == []
    assert recorder.dropped == 2
    await recorder.close(flush_seconds=10)
    written = {e["reason"] for e in (await kube.list(EVENT, namespace))[0]}
    assert {"Step0", "Step1", "Step2"} <= written and not {"Step3", "Step4"} & written


async def test_an_event_about_a_workload_names_the_version_kubectl_asks_for(kube, fleet, namespace):
    """Our processes hold Workloads as v1beta1; the Event names the version spoken on the wire
    (v1beta2, the CRDs' preferred one, as upstream's do), so `kubectl events --for workload/NAME`,
    which filters on the preferred version, finds it."""
    body = workload(namespace, "evented-wl", "no-such-queue")
    wl = await kube.create(api.WORKLOAD, body, namespace=namespace)
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta1"  # the form our processes work in
    # A client of its own, which has not spoken kueue.x-k8s.io yet (the processes' event clients).
    async with await KubeClient.from_kubeconfig_file(fleet.kubeconfig("manager")) as events_client:
        recorder = EventRecorder(events_client, "kueue-federation-test", "test-instance-1")
        await recorder.event(wl, "Normal", "QuotaReserved", "Admission", "reserved for the test")
        await recorder.flush()
    [event] = await find_events(kube, namespace, "QuotaReserved")
    assert event["regarding"]["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert event["regarding"]["uid"] == wl["metadata"]["uid"]
    out = fleet.kubectl("manager", "events", "-n", namespace, "--for", "workload/evented-wl").stdout
    assert "QuotaReserved" in out and "reserved for the test" in out, out
