"""The watch stream parser: JSON lines split anywhere across chunks, bookmarks, ERROR events."""

from __future__ import annotations

import json

import pytest

from kube_runtime.client import (
    AlreadyExists,
    ApiError,
    Conflict,
    ConnectionLost,
    Gone,
    Invalid,
    NotFound,
    WatchStreamParser,
    error_from_status,
    raise_for_watch_event,
)


def line(event_type: str, obj: dict) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"


def cm(name: str, rv: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
    }


BOOKMARK = {
    "kind": "ConfigMap",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "42", "annotations": {"k8s.io/initial-events-end": "true"}},
}
GONE = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "too old resource version: 1 (40)",
    "reason": "Expired",
    "code": 410,
}


def test_one_chunk_many_events():
    parser = WatchStreamParser()
    events = parser.feed(
        line("ADDED", cm("a", "1")) + line("MODIFIED", cm("a", "2")) + line("DELETED", cm("a", "3"))
    )
    assert [(t, o["metadata"]["resourceVersion"]) for t, o in events] == [
        ("ADDED", "1"),
        ("MODIFIED", "2"),
        ("DELETED", "3"),
    ]


def test_events_split_at_every_byte_boundary():
    stream = line("ADDED", cm("a", "1")) + line("BOOKMARK", BOOKMARK) + line("MODIFIED", cm("a", "2"))
    for size in (1, 2, 3, 7, 64):
        parser = WatchStreamParser()
        events = []
        for start in range(0, len(stream), size):
            events.extend(parser.feed(stream[start : start + size]))
        assert [t for t, _ in events] == ["ADDED", "BOOKMARK", "MODIFIED"], size
        assert parser.close() == []


def test_partial_line_is_held_until_its_newline():
    parser = WatchStreamParser()
    data = line("ADDED", cm("a", "1"))
    assert parser.feed(data[:-10]) == []
    assert parser.feed(data[-10:-1]) == []
    assert [t for t, _ in parser.feed(b"\n")] == ["ADDED"]


def test_trailing_line_without_newline_is_returned_on_close():
    parser = WatchStreamParser()
    assert parser.feed(line("ADDED", cm("a", "1"))[:-1]) == []
    assert [t for t, _ in parser.close()] == ["ADDED"]


def test_blank_lines_are_ignored():
    parser = WatchStreamParser()
    assert [t for t, _ in parser.feed(b"\n\n" + line("ADDED", cm("a", "1")) + b"\r\n")] == ["ADDED"]


def test_large_object_spanning_many_chunks():
    big = cm("big", "7")
    big["data"] = {f"k{i}": "x" * 1000 for i in range(300)}  # ~300 KB, beyond aiohttp's readline limit
    data = line("ADDED", big)
    parser = WatchStreamParser()
    events = []
    for start in range(0, len(data), 8192):
        events.extend(parser.feed(data[start : start + 8192]))
    assert len(events) == 1 and events[0][1]["data"]["k299"] == "x" * 1000


def test_bookmark_carries_the_resource_version():
    parser = WatchStreamParser()
    [(event_type, obj)] = parser.feed(line("BOOKMARK", BOOKMARK))
    assert event_type == "BOOKMARK" and obj["metadata"]["resourceVersion"] == "42"
    raise_for_watch_event(event_type, obj)  # not an error


def test_error_410_event_raises_gone_with_the_status():
    parser = WatchStreamParser()
    events = parser.feed(line("ADDED", cm("a", "1")) + line("ERROR", GONE))
    assert events[0][0] == "ADDED"
    raise_for_watch_event(*events[0])
    with pytest.raises(Gone) as info:
        raise_for_watch_event(*events[1])
    assert info.value.code == 410
    assert info.value.reason == "Expired"
    assert info.value.status["message"].startswith("too old resource version")


def test_other_error_events_raise_api_error():
    with pytest.raises(ApiError) as info:
        raise_for_watch_event("ERROR", {"kind": "Status", "code": 500, "message": "internal error"})
    assert info.value.code == 500 and not isinstance(info.value, Gone)


def test_malformed_line_is_a_broken_stream():
    parser = WatchStreamParser()
    with pytest.raises(ConnectionLost):
        parser.feed(b'{"type": "ADDED", "object": \n')


def test_status_codes_map_to_typed_errors():
    assert isinstance(error_from_status({"code": 404, "reason": "NotFound"}), NotFound)
    assert isinstance(error_from_status({"code": 409, "reason": "Conflict"}), Conflict)
    exists = error_from_status({"code": 409, "reason": "AlreadyExists"})
    assert isinstance(exists, AlreadyExists) and isinstance(exists, Conflict)
    assert isinstance(error_from_status({"reason": "Invalid"}, 422), Invalid)
    assert type(error_from_status({}, 503)) is ApiError
