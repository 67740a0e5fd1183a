"""Informer against a real apiserver: handlers, cache, indexes, reconnects, and 410 -> re-list."""

from __future__ import annotations

import asyncio
import time

import pytest

from kube_runtime.client import Gone, KubeClient
from kube_runtime.informer import Informer, strip_managed_fields
from kueue_domain import api

pytestmark = pytest.mark.realcluster

CONFIGMAP = api.Resource(api.CORE_GROUP, "v1", "configmaps", "ConfigMap", True)
NAMESPACE = api.NAMESPACE
SELECTOR = "app=informer-test"


def configmap(name: str, namespace: str, team: str | None = None, **data: str) -> dict:
    labels = {"app": "informer-test"}
    if team:
        labels["team"] = team
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": data,
    }


def by_team(obj: dict) -> list[str]:
    team = obj["metadata"].get("labels", {}).get("team")
    return [team] if team else []


async def eventually(check, within: float = 15.0, interval: float = 0.05):
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(interval)


class Recorder:
    """Handler calls as (type, name, detail) tuples; the update detail is old data -> new data."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, object]] = []

    def on_add(self, obj: dict) -> None:
        self.calls.append(("add", obj["metadata"]["name"], obj.get("data")))

    async def on_update(self, old: dict, new: dict) -> None:  # async handlers are awaited
        self.calls.append(("update", new["metadata"]["name"], (old.get("data"), new.get("data"))))

    def on_delete(self, obj: dict) -> None:
        self.calls.append(("delete", obj["metadata"]["name"], obj.get("data")))

    def has(self, kind: str, name: str) -> bool:
        return any(c[0] == kind and c[1] == name for c in self.calls)


async def server_view(kube: KubeClient, namespace: str) -> dict[str, str]:
    items, _ = await kube.list(CONFIGMAP, namespace, label_selector=SELECTOR)
    return {f"{namespace}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items}


def cache_view(informer: Informer) -> dict[str, str]:
    return {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in informer.list()
    }


async def test_handlers_cache_and_indexes_follow_the_server(kube, namespace):
    await kube.create(CONFIGMAP, configmap("pre-existing", namespace, team="x", v="0"))
    await kube.create(
        CONFIGMAP,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unselected", "namespace": namespace}},
    )
    informer = Informer(kube, CONFIGMAP, namespace, label_selector=SELECTOR, page_size=1)
    informer.add_index("team", by_team)
    recorder = Recorder()
    informer.add_handler(recorder.on_add, recorder.on_update, recorder.on_delete)
    informer.start()
    try:
        async with asyncio.timeout(15):
            await informer.wait_synced()
        assert informer.has_synced
        assert recorder.calls == [("add", "pre-existing", {"v": "0"})]
        assert informer.get(f"{namespace}/unselected") is None  # the label selector applies

        await kube.create(CONFIGMAP, configmap("a", namespace, team="x", v="1"))
        await kube.create(CONFIGMAP, configmap("b", namespace, team="y", v="1"))
        await eventually(lambda: recorder.has("add", "a") and recorder.has("add", "b"))
        assert sorted(o["metadata"]["name"] for o in informer.by_index("team", "x")) == ["a", "pre-existing"]
        assert [o["metadata"]["name"] for o in informer.by_index("team", "y")] == ["b"]

        await kube.patch_merge(
            CONFIGMAP, "a", {"data": {"v": "2"}, "metadata": {"labels": {"team": "y"}}}, namespace
        )
        await eventually(lambda: recorder.has("update", "a"))
        assert ("update", "a", ({"v": "1"}, {"v": "2"})) in recorder.calls
        assert [o["metadata"]["name"] for o in informer.by_index("team", "x")] == ["pre-existing"]
        assert sorted(o["metadata"]["name"] for o in informer.by_index("team", "y")) == ["a", "b"]

        await kube.delete(CONFIGMAP, "b", namespace)
        await eventually(lambda: recorder.has("delete", "b"))
        assert informer.get(f"{namespace}/b") is None
        assert [o["metadata"]["name"] for o in informer.by_index("team", "y")] == ["a"]

        await eventually(lambda: informer.resource_version is not None)
        assert cache_view(informer) == await server_view(kube, namespace)
        assert informer.relists == 0 and informer.events >= 4
    finally:
        await informer.stop()


async def test_transform_trims_what_the_cache_indexes_and_handlers_see(kube, namespace):
    """The server keeps managedFields; an informer with strip_managed_fields never holds them,
    whether an object came from the list, a watch event or a delete."""
    await kube.create(CONFIGMAP, configmap("listed", namespace, team="x", v="0"))
    informer = Informer(kube, CONFIGMAP, namespace, label_selector=SELECTOR, transform=strip_managed_fields)
    informer.add_index("team", by_team)
    seen: list[tuple[str, dict]] = []
    informer.add_handler(
        on_add=lambda o: seen.append(("add", o)),
        on_update=lambda _old, new: seen.append(("update", new)),
        on_delete=lambda o: seen.append(("delete", o)),
    )
    informer.start()
    try:
        async with asyncio.timeout(15):
            await informer.wait_synced()
        await kube.create(CONFIGMAP, configmap("watched", namespace, team="x", v="1"))
        await kube.apply(
            CONFIGMAP, configmap("watched", namespace, team="y", v="2"), "informer-test", force=True
        )
        await kube.delete(CONFIGMAP, "listed", namespace)
        await eventually(lambda: ("delete", "listed") in [(t, o["metadata"]["name"]) for t, o in seen])
        await eventually(lambda: (informer.get(f"{namespace}/watched") or {}).get("data") == {"v": "2"})

        served = await kube.get(CONFIGMAP, "watched", namespace)
        assert {m["manager"] for m in served["metadata"]["managedFields"]} >= {"informer-test"}
        cached = informer.get(f"{namespace}/watched")
        assert "managedFields" not in cached["metadata"]
        assert cached["metadata"]["resourceVersion"] == served["metadata"]["resourceVersion"]
        assert {k: v for k, v in cached.items() if k != "metadata"} == {
            k: v for k, v in served.items() if k != "metadata"
        }
        assert [t for t, _ in seen].count("add") == 2 and "update" in [t for t, _ in seen]
        assert all("managedFields" not in o["metadata"] for _, o in seen)
        assert [o["metadata"]["name"] for o in informer.by_index("team", "y")] == ["watched"]
        assert informer.by_index("team", "x") == []
    finally:
        await informer.stop()


async def test_stale_resource_version_gets_410_relists_and_reconciles(kube, namespace, fleet):
    for name in ("keep", "change", "remove"):
        await kube.create(CONFIGMAP, configmap(name, namespace, v="1"))
    informer = Informer(kube, CONFIGMAP, namespace, label_selector=SELECTOR)
    recorder = Recorder()
    informer.add_handler(recorder.on_add, recorder.on_update, recorder.on_delete)
    informer.start()
    try:
        async with asyncio.timeout(15):
            await informer.wait_synced()
        await kube.create(CONFIGMAP, configmap("seen", namespace, v="1"))
        await eventually(lambda: recorder.has("add", "seen"))

        # Pause the informer, change things behind its back, and compact etcd past its RV.
        await informer.stop()
        stale_rv = informer.resource_version
        recorder.calls.clear()
        await kube.patch_merge(CONFIGMAP, "change", {"data": {"v": "2"}}, namespace)
        await kube.delete(CONFIGMAP, "remove", namespace)
        await kube.create(CONFIGMAP, configmap("new", namespace, v="1"))
        await asyncio.to_thread(fleet.compact_etcd, "manager")
        with pytest.raises(Gone):  # the RV really is gone for any watcher
            async for _ in kube.watch(CONFIGMAP, namespace, stale_rv, timeout_seconds=5):
                pass
        relists_before = informer.relists

        informer.start()  # resumes the watch from the stale RV: 410, then a re-list
        await eventually(lambda: informer.relists == relists_before + 1)
        await eventually(lambda: len(recorder.calls) >= 3)
        assert sorted(recorder.calls, key=lambda c: c[0]) == [
            ("add", "new", {"v": "1"}),
            ("delete", "remove", {"v": "1"}),
            ("update", "change", ({"v": "1"}, {"v": "2"})),
        ]
        assert informer.resource_version != stale_rv
        assert cache_view(informer) == await server_view(kube, namespace)

        # And it keeps watching after the re-list.
        await kube.delete(CONFIGMAP, "keep", namespace)
        await eventually(lambda: recorder.has("delete", "keep"))
        assert cache_view(informer) == await server_view(kube, namespace)
        assert informer.stats()["relists"] == relists_before + 1
    finally:
        await informer.stop()


async def test_watch_reconnects_after_the_server_ends_it(kube, namespace):
    informer = Informer(kube, CONFIGMAP, namespace, label_selector=SELECTOR, watch_timeout=1)
    recorder = Recorder()
    informer.add_handler(recorder.on_add, recorder.on_update, recorder.on_delete)
    informer.start()
    try:
        async with asyncio.timeout(15):
            await informer.wait_synced()
        await eventually(lambda: informer.watch_restarts >= 2, within=10)
        await kube.create(CONFIGMAP, configmap("after-reconnect", namespace))
        await eventually(lambda: recorder.has("add", "after-reconnect"))
        assert informer.relists == 0 and informer.lists == 1
    finally:
        await informer.stop()
