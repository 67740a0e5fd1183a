"""The informer's cache: keys, secondary indexes, and re-list reconciliation, without I/O."""

from __future__ import annotations

from kube_runtime.informer import (
    ADDED,
    BOOKMARK,
    DELETED,
    MODIFIED,
    Store,
    StoreEvent,
    compact,
    intern_strings,
    object_key,
    strip_managed_fields,
)


def cm(name: str, rv: str, namespace: str | None = "ns", queue: str | None = None, **labels: str) -> dict:
    meta: dict = {"name": name, "resourceVersion": rv, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    if queue:
        meta["labels"]["queue"] = queue
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def by_queue(obj: dict) -> list[str]:
    queue = obj["metadata"]["labels"].get("queue")
    return [queue] if queue else []


def names(objs: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_keys_are_namespace_slash_name_or_name():
    assert object_key(cm("a", "1")) == "ns/a"
    assert object_key(cm("node-1", "1", namespace=None)) == "node-1"


def test_upsert_get_delete():
    store = Store()
    assert store.upsert(cm("a", "1")) is None
    assert store.get("ns/a")["metadata"]["resourceVersion"] == "1"
    old = store.upsert(cm("a", "2"))
    assert old["metadata"]["resourceVersion"] == "1"
    assert len(store) == 1 and "ns/a" in store
    assert store.delete("ns/a")["metadata"]["resourceVersion"] == "2"
    assert store.delete("ns/a") is None
    assert store.list() == []


def test_index_entries_follow_add_update_delete():
    store = Store()
    store.add_index("queue", by_queue)
    store.upsert(cm("a", "1", queue="q1"))
    store.upsert(cm("b", "1", queue="q1"))
    store.upsert(cm("c", "1"))
    assert names(store.by_index("queue", "q1")) == ["a", "b"]
    assert store.by_index("queue", "q2") == []

    store.upsert(cm("a", "2", queue="q2"))  # moves from q1 to q2
    assert names(store.by_index("queue", "q1")) == ["b"]
    assert names(store.by_index("queue", "q2")) == ["a"]

    store.upsert(cm("b", "2"))  # leaves every index value
    assert store.by_index("queue", "q1") == []
    assert store.index_values("queue") == ["q2"]

    store.delete("ns/a")
    assert store.by_index("queue", "q2") == []
    assert store.index_values("queue") == []


def test_index_added_late_covers_existing_objects_and_multiple_values():
    store = Store()
    store.upsert(cm("a", "1", team="x"))
    store.upsert(cm("b", "1", team="y"))
    store.add_index("labels", lambda o: [f"{k}={v}" for k, v in o["metadata"]["labels"].items()] + ["all"])
    assert names(store.by_index("labels", "team=x")) == ["a"]
    assert names(store.by_index("labels", "all")) == ["a", "b"]


def test_failing_index_function_leaves_object_out_of_that_index_only():
    store = Store()
    store.add_index("boom", lambda o: [o["metadata"]["labels"]["missing"]])
    store.upsert(cm("a", "1"))
    assert store.get("ns/a") is not None
    assert store.index_values("boom") == []


def test_watch_events_apply_and_report_changes():
    store = Store()
    added = store.apply_event(ADDED, cm("a", "1"))
    assert added == StoreEvent(ADDED, "ns/a", None, cm("a", "1"))
    modified = store.apply_event(MODIFIED, cm("a", "2"))
    assert modified.type == MODIFIED and modified.old["metadata"]["resourceVersion"] == "1"
    assert store.apply_event(MODIFIED, cm("a", "2")) is None  # already cached at this RV
    assert store.apply_event(BOOKMARK, {"kind": "ConfigMap", "metadata": {"resourceVersion": "9"}}) is None
    deleted = store.apply_event(DELETED, cm("a", "3"))
    assert deleted.type == DELETED and deleted.old["metadata"]["resourceVersion"] == "3"
    assert store.get("ns/a") is None
    # ADDED for an object we already have (e.g. after a reconnect) is an update.
    store.apply_event(ADDED, cm("b", "1"))
    assert store.apply_event(ADDED, cm("b", "4")).type == MODIFIED


def test_relist_reconciliation_emits_adds_updates_and_deletes():
    store = Store()
    store.add_index("queue", by_queue)
    for obj in (cm("same", "1", queue="q"), cm("changed", "1", queue="q"), cm("vanished", "1", queue="q")):
        store.upsert(obj)

    events = store.replace([cm("same", "1", queue="q"), cm("changed", "5", queue="r"), cm("new", "6")])

    by_type = {(e.type, e.key) for e in events}
    assert by_type == {(DELETED, "ns/vanished"), (MODIFIED, "ns/changed"), (ADDED, "ns/new")}
    modified = next(e for e in events if e.type == MODIFIED)
    assert modified.old["metadata"]["resourceVersion"] == "1"
    assert modified.new["metadata"]["resourceVersion"] == "5"
    deleted = next(e for e in events if e.type == DELETED)
    assert deleted.old["metadata"]["name"] == "vanished"
    assert sorted(store.keys()) == ["ns/changed", "ns/new", "ns/same"]
    assert names(store.by_index("queue", "q")) == ["same"]
    assert names(store.by_index("queue", "r")) == ["changed"]


def test_relist_into_empty_store_is_all_adds_and_to_empty_is_all_deletes():
    store = Store()
    events = store.replace([cm("a", "1"), cm("b", "1")])
    assert [e.type for e in events] == [ADDED, ADDED]
    events = store.replace([])
    assert sorted((e.type, e.key) for e in events) == [(DELETED, "ns/a"), (DELETED, "ns/b")]
    assert len(store) == 0


def with_managed_fields(obj: dict) -> dict:
    obj["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:data": {}}}
    ]
    return obj


def test_transform_trims_every_object_that_enters_and_the_events_and_indexes_see_it():
    store = Store(transform=strip_managed_fields)
    store.add_index("queue", by_queue)

    added = store.apply_event(ADDED, with_managed_fields(cm("a", "1", queue="q")))
    store.upsert(with_managed_fields(cm("b", "1", queue="q")))
    modified = store.apply_event(MODIFIED, with_managed_fields(cm("a", "2", queue="r")))

    assert "managedFields" not in added.new["metadata"]
    assert "managedFields" not in modified.new["metadata"] and "managedFields" not in modified.old["metadata"]
    assert all("managedFields" not in o["metadata"] for o in store.list())
    assert names(store.by_index("queue", "q")) == ["b"] and names(store.by_index("queue", "r")) == ["a"]
    # The same resourceVersion (transformed or not) is no change.
    assert store.apply_event(MODIFIED, with_managed_fields(cm("a", "2", queue="r"))) is None
    deleted = store.apply_event(DELETED, with_managed_fields(cm("a", "3", queue="r")))
    assert "managedFields" not in deleted.old["metadata"]

    events = store.replace([with_managed_fields(cm("b", "2", queue="q")), with_managed_fields(cm("c", "1"))])
    assert sorted((e.type, e.key) for e in events) == [(ADDED, "ns/c"), (MODIFIED, "ns/b")]
    assert all("managedFields" not in e.new["metadata"] for e in events)
    assert all("managedFields" not in o["metadata"] for o in store.list())


def test_transform_may_drop_any_field_and_indexes_see_only_what_is_kept():
    def drop_labels(obj: dict) -> dict:
        obj["metadata"].pop("labels", None)
        return obj

    store = Store(transform=drop_labels)
    store.add_index("queue", lambda o: by_queue(o) if "labels" in o["metadata"] else ["unlabelled"])
    store.upsert(cm("a", "1", queue="q"))
    assert store.index_values("queue") == ["unlabelled"]
    assert store.get("ns/a") == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "resourceVersion": "1", "namespace": "ns"},
    }


def test_strip_managed_fields_keeps_everything_else():
    obj = with_managed_fields(cm("a", "1", queue="q"))
    assert strip_managed_fields(obj) is obj
    assert obj == cm("a", "1", queue="q")
    assert strip_managed_fields({"kind": "Status"}) == {"kind": "Status"}


def test_intern_strings_shares_keys_and_short_values_between_objects():
    import json

    # Decoded separately, as a watch decodes each event: equal strings are distinct objects.
    first, second = (json.loads(json.dumps(cm(name, "1", queue="user-queue"))) for name in ("a", "b"))
    assert first["metadata"]["labels"]["queue"] is not second["metadata"]["labels"]["queue"]
    long_value = "x" * 100
    first["data"] = {"long": long_value, "n": 3, "flag": True, "items": ["Ready", None]}

    a, b = intern_strings(first), intern_strings(second)

    assert a == first and b == second  # equal values, new containers
    assert a["metadata"]["labels"]["queue"] is b["metadata"]["labels"]["queue"]
    key_a = next(k for k in a["metadata"] if k == "resourceVersion")
    key_b = next(k for k in b["metadata"] if k == "resourceVersion")
    assert key_a is key_b
    assert a["data"]["items"][0] is intern_strings(["Ready"])[0]
    assert a["data"]["long"] is long_value  # long strings are left alone


def test_compact_is_a_store_transform_without_managed_fields():
    store = Store(transform=compact)
    store.add_index("queue", by_queue)
    event = store.apply_event(ADDED, with_managed_fields(cm("a", "1", queue="q")))
    assert event.new == cm("a", "1", queue="q") == store.get("ns/a")
    assert names(store.by_index("queue", "q")) == ["a"]
