"""A TCP relay on 127.0.0.1 in front of one server, in the test's event loop: a worker's Secret
points the manager at it, and the test cuts, slows or heals the link.

`black_hole()` forwards nothing either way and leaves new connections hanging after their accept:
no reset, no refusal, as a failed switch or a cloud route does. Bytes sent meanwhile wait in the
kernel's buffers and flow on `heal()`, as TCP's retransmissions deliver them once a route is back.
`latency` delays every chunk, each direction, by that many seconds."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

CHUNK = 64 * 1024


class TcpRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.latency = 0.0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.connections = 0

    @classmethod
    def for_url(cls, url: str) -> TcpRelay:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 443)

    def url(self, original: str) -> str:
        """`original` (https://host:port) with the relay's address instead."""
        return urlsplit(original)._replace(netloc=f"127.0.0.1:{self.port}").geturl()

    async def start(self) -> TcpRelay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def black_hole(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def __aenter__(self) -> TcpRelay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(client_writer)
        await self._open.wait()  # a connection made into the black hole is accepted, then hangs
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        self._writers.add(server_writer)
        self._spawn(self._pipe(client_reader, server_writer))
        self._spawn(self._pipe(server_reader, client_writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads only while the link is up; delivers each chunk `latency` after it was read, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        deliver = asyncio.ensure_future(self._deliver(queue, writer))
        try:
            while True:
                await self._open.wait()
                chunk = await reader.read(CHUNK)
                if not chunk:
                    break
                await queue.put((loop.time() + self.latency, chunk))
            await queue.put((loop.time() + self.latency, b""))
            await deliver
        finally:
            deliver.cancel()
            writer.close()

    async def _deliver(self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            await self._open.wait()
            if not chunk:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(chunk)
            await writer.drain()
