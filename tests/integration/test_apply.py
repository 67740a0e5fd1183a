"""Server-side apply with field managers, and status writes that happen only when something changes."""

from __future__ import annotations

import asyncio

import pytest

from kube_runtime.apply import apply_body, apply_object, apply_status_if_changed
from kube_runtime.client import Conflict, NotFound
from kueue_domain import api

pytestmark = pytest.mark.realcluster

CONFIGMAP = api.Resource(api.CORE_GROUP, "v1", "configmaps", "ConfigMap", True)
NAMESPACE = api.NAMESPACE
CRD = api.Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
WIDGET = api.Resource("kruntime-test.example.com", "v1", "widgets", "Widget", True)

CONDITION = {
    "type": "object",
    "required": ["type", "status"],
    "properties": {
        "type": {"type": "string"},
        "status": {"type": "string"},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
    },
}
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.kruntime-test.example.com"},
    "spec": {
        "group": "kruntime-test.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "replicas": {"type": "integer"},
                                    "conditions": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["type"],
                                        "items": CONDITION,
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture
async def widgets(kube):
    """The test CRD, applied, served, and removed afterwards."""
    await kube.apply(CRD, WIDGET_CRD, "kube-runtime-tests", force=True)
    async with asyncio.timeout(30):
        while True:
            try:
                await kube.list(WIDGET, "default")  # 429s while its storage initializes are retried inside
                break
            except NotFound:
                await asyncio.sleep(0.2)
    yield WIDGET
    await kube.delete(CRD, WIDGET_CRD["metadata"]["name"])


def managers(obj: dict) -> dict[str, dict]:
    return {
        entry["manager"]: entry["fieldsV1"]
        for entry in obj["metadata"]["managedFields"]
        if entry["operation"] == "Apply" and not entry.get("subresource")
    }


async def test_two_managers_share_an_object_and_conflicts_need_force(kube, namespace):
    a_body = apply_body(CONFIGMAP, "shared", namespace, data={"x": "from-a"})
    b_body = apply_body(CONFIGMAP, "shared", namespace, data={"y": "from-b"})
    await kube.apply(CONFIGMAP, a_body, "a")
    obj = await kube.apply(CONFIGMAP, b_body, "b")
    assert obj["data"] == {"x": "from-a", "y": "from-b"}
    owned = managers(obj)
    assert owned["a"]["f:data"] == {"f:x": {}}
    assert owned["b"]["f:data"] == {"f:y": {}}

    grab = apply_body(CONFIGMAP, "shared", namespace, data={"x": "from-b", "y": "from-b"})
    with pytest.raises(Conflict) as conflict:
        await kube.apply(CONFIGMAP, grab, "b")
    assert conflict.value.code == 409
    causes = conflict.value.status["details"]["causes"]
    assert any(c["field"] == ".data.x" and '"a"' in c["message"] for c in causes)
    assert (await kube.get(CONFIGMAP, "shared", namespace))["data"]["x"] == "from-a"

    obj = await kube.apply(CONFIGMAP, grab, "b", force=True)
    assert obj["data"] == {"x": "from-b", "y": "from-b"}
    owned = managers(obj)
    assert owned["b"]["f:data"] == {"f:x": {}, "f:y": {}}
    assert "a" not in owned  # a owned nothing else, so its entry is gone


async def test_apply_object_accepts_an_object_read_from_the_server(kube, namespace):
    await kube.create(
        CONFIGMAP, {"metadata": {"name": "read-back", "namespace": namespace}, "data": {"k": "1"}}
    )
    current = await kube.get(CONFIGMAP, "read-back", namespace)
    current["data"] = {"k": "2"}
    obj = await apply_object(kube, CONFIGMAP, current, "controller", force=True)
    assert obj["data"] == {"k": "2"} and "controller" in managers(obj)


async def test_status_is_written_only_when_it_changes(kube, namespace, widgets):
    widget = await kube.create(
        widgets,
        {
            "apiVersion": "kruntime-test.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": namespace},
            "spec": {"size": 1},
        },
    )
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Up",
        "message": "all good",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    desired = {"phase": "Running", "replicas": 2, "conditions": [ready]}

    first = await apply_status_if_changed(kube, widgets, widget, desired, "widget-controller")
    assert first is not None and first["status"] == desired
    rv = first["metadata"]["resourceVersion"]

    assert await apply_status_if_changed(kube, widgets, first, desired, "widget-controller") is None
    current = await kube.get(widgets, "w", namespace)
    assert current["metadata"]["resourceVersion"] == rv

    # Another manager's condition does not make our identical status look changed.
    other = apply_body(widgets, "w", namespace, status={"conditions": [{"type": "Other", "status": "False"}]})
    current = await kube.apply_status(widgets, other, "other-controller")
    rv = current["metadata"]["resourceVersion"]
    assert await apply_status_if_changed(kube, widgets, current, desired, "widget-controller") is None

    # Any difference in what we own is written, timestamps included.
    moved = dict(ready, lastTransitionTime="2026-01-01T00:00:05Z")
    second = await apply_status_if_changed(
        kube, widgets, current, dict(desired, conditions=[moved]), "widget-controller"
    )
    assert second is not None and second["metadata"]["resourceVersion"] != rv
    assert {c["type"]: c for c in second["status"]["conditions"]}["Ready"] == moved

    # Dropping a field we own is a change too (applying removes it).
    smaller = {"replicas": 2, "conditions": [moved]}
    third = await apply_status_if_changed(kube, widgets, second, smaller, "widget-controller")
    assert third is not None and "phase" not in third["status"]
    assert {c["type"] for c in third["status"]["conditions"]} == {"Ready", "Other"}
    assert await apply_status_if_changed(kube, widgets, third, smaller, "widget-controller") is None
    final = await kube.get(widgets, "w", namespace)
    assert final["metadata"]["resourceVersion"] == third["metadata"]["resourceVersion"]
