"""kube_runtime/process.py: the TLS read buffer, smaller for every TLS connection opened afterwards, and
the event loop a process runs on."""

from __future__ import annotations

import asyncio.sslproto

from kube_runtime import process


def test_tls_read_buffer_is_reduced_for_new_connections(monkeypatch):
    monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size", 256 * 1024)
    assert process.tune_tls_read_buffer() is True
    assert asyncio.sslproto.SSLProtocol.max_size == process.TLS_READ_BUFFER_BYTES == 64 * 1024
    loop = asyncio.new_event_loop()
    try:
        proto = asyncio.sslproto.SSLProtocol(loop, asyncio.Protocol(), None, None)
        assert len(proto._ssl_buffer) == 64 * 1024
    finally:
        loop.close()


def test_a_process_runs_on_the_event_loop_it_names():
    import uvloop

    async def loop_kind() -> int:
        return 1 if isinstance(asyncio.get_running_loop(), uvloop.Loop) else 0

    assert process.run_on("uvloop", loop_kind()) == 1
    assert process.run_on("asyncio", loop_kind()) == 0


def test_an_unknown_event_loop_is_refused_before_anything_runs():
    async def never() -> int:
        raise AssertionError("ran")

    coroutine = never()
    try:
        process.run_on("trio", coroutine)
    except ValueError as exc:
        assert "one of asyncio, uvloop" in str(exc)
    else:
        raise AssertionError("run_on accepted an unknown event loop")
    finally:
        coroutine.close()
