"""Signs of life of one worker's apiserver. An idle watch over a dead TCP connection looks exactly
like a quiet cluster, so the manager asks: a cheap probe every `probe_interval` seconds, and a
worker that neither answers one within `timeout - probe_interval` nor sends anything else on the
connection meanwhile is silent. A slow worker is not: any answer inside the bound counts, as do
the bytes of a long list or a watch arriving on the main connection.

The probes go on while the worker is silent, so its return is seen within one interval, instead of
at the next reconnect of an exponential backoff that may be minutes away."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from kube_runtime.client import ConnectionLost, KubeClient
from kube_runtime.clock import Clock

log = structlog.get_logger("manager.liveness")

# After a failed probe (a refused connection, say), the next try inside the same deadline.
RETRY_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class LivenessSettings:
    """`timeout`: the silence after which a worker counts as unreachable; `probe_interval`: how often
    it is asked (0 turns liveness checks off)."""

    timeout: float = 15.0
    probe_interval: float = 5.0

    def __post_init__(self) -> None:
        if self.probe_interval and self.timeout <= self.probe_interval:
            raise ValueError(
                f"the worker liveness timeout ({self.timeout:g}s) must be longer than the probe "
                f"interval ({self.probe_interval:g}s)"
            )

    @property
    def enabled(self) -> bool:
        return self.probe_interval > 0

    @property
    def answer_within(self) -> float:
        """How long one probe may wait for its answer."""
        return self.timeout - self.probe_interval


def silence_message(server: str, seconds: float) -> str:
    return f"no answer from {server} for {seconds:.0f}s"


class Liveness:
    """Probes one worker until stopped. `on_silent(message, since)` is called when the worker
    falls silent (`since`: when the first unanswered probe was sent, where the worker-lost grace
    period starts); `on_answer()` when it answers again after that."""

    def __init__(
        self,
        server: str,
        clock: Clock,
        settings: LivenessSettings,
        *,
        probe: Callable[[float], Awaitable[object]],
        heard_elsewhere: Callable[[], float | None],
        on_silent: Callable[[str, dt.datetime], None],
        on_answer: Callable[[], None],
    ) -> None:
        self.server = server
        self.clock = clock
        self.settings = settings
        self._probe = probe
        self._heard_elsewhere = heard_elsewhere
        self._on_silent = on_silent
        self._on_answer = on_answer
        self.reachable = True
        self.silence = ""  # the message while silent
        self._last_answer = clock.monotonic()

    def last_heard(self) -> float:
        elsewhere = self._heard_elsewhere()
        return max(self._last_answer, elsewhere) if elsewhere is not None else self._last_answer

    async def run(self) -> None:
        while True:
            sent, sent_at = self.clock.monotonic(), self.clock.now()
            if await self._answered(sent + self.settings.answer_within) or self.last_heard() >= sent:
                self._alive()
            elif self.reachable:
                self._silent(sent_at)
            await self.clock.sleep(sent + self.settings.probe_interval - self.clock.monotonic())

    async def _answered(self, deadline: float) -> bool:
        """Whether a probe got an answer before `deadline` (a refused or broken one is tried again)."""
        while (remaining := deadline - self.clock.monotonic()) > 0:
            try:
                await self._probe(remaining)
            except ConnectionLost as exc:
                log.debug("worker probe failed", server=self.server, error=str(exc))
                await self.clock.sleep(min(RETRY_SECONDS, deadline - self.clock.monotonic()))
                continue
            self._last_answer = self.clock.monotonic()
            return True
        return False

    def _alive(self) -> None:
        if self.reachable:
            return
        self.reachable, self.silence = True, ""
        log.info("a silent worker answers again", server=self.server)
        self._on_answer()

    def _silent(self, since: dt.datetime) -> None:
        self.reachable = False
        self.silence = silence_message(self.server, self.clock.monotonic() - self.last_heard())
        log.warning("a worker stopped answering", server=self.server, message=self.silence)
        self._on_silent(self.silence, since)


class Silent(Exception):
    """A connection attempt given up because the worker fell silent; the text is the silence's."""


class WorkerProbe:
    """One worker's Liveness over a client of its own (so it outlives the main connection's
    reconnects), for one kubeconfig at a time. `silent` is set while the worker answers nothing."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        settings: LivenessSettings,
        *,
        heard_elsewhere: Callable[[], float | None],
        on_silent: Callable[[str, dt.datetime], None],
        on_answer: Callable[[], None],
    ) -> None:
        self.name = name
        self.clock = clock
        self.settings = settings
        self._heard_elsewhere = heard_elsewhere
        self._on_silent = on_silent
        self._on_answer = on_answer
        self.liveness: Liveness | None = None
        self.silent = asyncio.Event()
        self._silence = ""
        self._task: asyncio.Task[None] | None = None
        self._kube: KubeClient | None = None

    @property
    def silence(self) -> str:
        """What the silence is, while the worker is silent ("" otherwise)."""
        return self._silence if self.silent.is_set() else ""

    async def start(self, kubeconfig: dict[str, Any]) -> None:
        await self.stop()
        if not self.settings.enabled:
            return
        try:
            interval = self.settings.probe_interval
            kube = await KubeClient.from_kubeconfig_dict(kubeconfig, tcp_keepalive=interval)
        except Exception as exc:  # credentials the main client will name when it fails the same way
            log.debug("no liveness probe for a worker", cluster=self.name, error=str(exc))
            return
        self._kube = kube
        self.liveness = Liveness(
            kube.host,
            self.clock,
            self.settings,
            probe=kube.probe,
            heard_elsewhere=self._heard_elsewhere,
            on_silent=self._silent,
            on_answer=self._answer,
        )
        self._task = asyncio.create_task(self.liveness.run(), name=f"liveness-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.liveness = None
        self.silent.clear()
        if self._kube is not None:
            kube, self._kube = self._kube, None
            await kube.close()

    def _silent(self, message: str, since: dt.datetime) -> None:
        self._silence = message
        self.silent.set()
        self._on_silent(message, since)

    def _answer(self) -> None:
        self.silent.clear()
        self._on_answer()

    async def unless_silent(self, attempt: Awaitable[None]) -> None:
        """Awaits `attempt` (a connection), given up with Silent when the worker is or falls silent
        first: no TLS handshake is left hanging into a black hole until its timeouts."""
        future = asyncio.ensure_future(attempt)
        if self.silent.is_set():
            future.cancel()
        silent = asyncio.ensure_future(self.silent.wait())
        try:
            await asyncio.wait({future, silent}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            silent.cancel()
            if not future.done():
                future.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await future
        if future.cancelled():
            raise Silent(self.silence)
        future.result()  # the attempt's own failure, if any
