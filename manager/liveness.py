"""Signs of life of one worker's apiserver. An idle watch over a dead TCP connection looks exactly
like a quiet cluster, so the manager asks: a cheap probe every `probe_interval` seconds, and a
worker that neither answers one within `timeout - probe_interval` nor sends anything else on the
connection meanwhile is silent. A slow worker is not: any answer inside the bound counts, as do
the bytes of a long list or a watch arriving on the main connection.

The probes go on while the worker is silent, so its return is seen within one interval, instead of
at the next reconnect of an exponential backoff that may be minutes away."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable

import structlog

from kube_runtime.client import ConnectionLost
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
