"""kube_runtime/process.py's TLS read buffer: smaller for every TLS connection opened afterwards."""

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
