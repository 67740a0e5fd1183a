"""The runtime's pieces working together as every controller of ours will use them:
an informer feeds keys to a controller, whose reconcile reads the cache and writes with
server-side apply under its own field manager, level-triggered and idempotent."""

from __future__ import annotations

import asyncio

import pytest

from kube_runtime.apply import apply_object
from kube_runtime.controller import Controller
from kube_runtime.informer import Informer, object_key
from kueue_domain import api

pytestmark = pytest.mark.realcluster

CONFIG_MAP = api.Resource(api.CORE_GROUP, "v1", "configmaps", "ConfigMap", True)
FIELD_MANAGER = "composition-test"
LABELLED = "app=composition,size"


async def eventually(check) -> None:
    async with asyncio.timeout(20):
        while not await check():  # noqa: ASYNC110 - polling the API server, not a local event
            await asyncio.sleep(0.1)


async def test_informer_controller_apply_loop(kube, namespace):
    # Only our objects: kube-controller-manager adds a kube-root-ca.crt ConfigMap to every namespace.
    informer = Informer(kube, CONFIG_MAP, namespace=namespace, label_selector="app=composition")
    reconciled: list[str] = []

    async def reconcile(key: str):
        reconciled.append(key)
        obj = informer.get(key)
        if obj is None or "size" in (obj["metadata"].get("labels") or {}):
            return None
        # Derived state, written with SSA: how many data keys the ConfigMap has.
        size = str(len(obj.get("data") or {}))
        await apply_object(
            kube,
            CONFIG_MAP,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": obj["metadata"]["name"],
                    "namespace": namespace,
                    "labels": {"size": size},
                },
            },
            FIELD_MANAGER,
        )
        return None

    controller = Controller("composition", reconcile, concurrency=2)

    def enqueue(obj, *_):
        controller.enqueue(object_key(obj))

    informer.add_handler(on_add=enqueue, on_update=lambda old, new: enqueue(new), on_delete=enqueue)
    informer.start()
    controller.start()
    try:
        await informer.wait_synced()
        for i in range(5):
            data = {f"k{j}": "v" for j in range(i)}
            metadata = {"name": f"cm-{i}", "labels": {"app": "composition"}}
            await kube.create(CONFIG_MAP, {"metadata": metadata, "data": data}, namespace=namespace)

        async def all_labelled() -> bool:
            items, _ = await kube.list(CONFIG_MAP, namespace=namespace, label_selector=LABELLED)
            return len(items) == 5

        await eventually(all_labelled)
        items, _ = await kube.list(CONFIG_MAP, namespace=namespace, label_selector=LABELLED)
        assert {i["metadata"]["name"]: i["metadata"]["labels"]["size"] for i in items} == {
            f"cm-{i}": str(i) for i in range(5)
        }
        for item in items:
            managers = {m["manager"] for m in item["metadata"]["managedFields"]}
            assert FIELD_MANAGER in managers
        # Level-triggered and idempotent: the label write itself triggers one more reconcile
        # per object, which finds nothing to do and writes nothing.
        await asyncio.sleep(1)
        rvs = {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}
        await asyncio.sleep(1)
        items_after, _ = await kube.list(
            CONFIG_MAP, namespace=namespace, label_selector="app=composition,size"
        )
        assert {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items_after} == rvs
        assert all(reconciled.count(f"{namespace}/cm-{i}") >= 2 for i in range(5))
    finally:
        await controller.stop()
        await informer.stop()
