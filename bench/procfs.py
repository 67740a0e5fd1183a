"""/proc sampling: CPU seconds (utime + stime) and RSS (VmRSS, VmHWM) of a process, and a sampler
that follows a fleet's processes through a run."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ProcessFigures:
    label: str  # cluster/component
    pid: int
    cpu_s: float | None = None  # user+sys during the run
    peak_rss_mib: float | None = None  # highest VmRSS sampled during the run
    rss_start_mib: float | None = None
    hwm_mib: float | None = None  # VmHWM at the end: the peak since the process started


def read_status_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a live process, in MiB ({} when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) / 1024
    return out


def read_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_peak_rss_mib(pid: int) -> float | None:
    """VmHWM (the peak RSS) of a live process, VmRSS if the kernel does not report it."""
    status = read_status_mib(pid)
    return status.get("VmHWM", status.get("VmRSS"))


class ProcessSampler:
    """CPU at start/stop and VmRSS every `interval` for the fleet's processes."""

    def __init__(self, processes: Sequence[tuple[str, int]], interval: float = 0.5) -> None:
        self.figures = {label: ProcessFigures(label, pid) for label, pid in processes}
        self.interval = interval
        self._cpu_start: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        for f in self.figures.values():
            rss = read_status_mib(f.pid).get("VmRSS")
            if rss is not None:
                f.peak_rss_mib = max(f.peak_rss_mib or 0.0, rss)

    def start(self) -> None:
        for label, f in self.figures.items():
            cpu = read_cpu_seconds(f.pid)
            if cpu is not None:
                self._cpu_start[label] = cpu
            f.rss_start_mib = read_status_mib(f.pid).get("VmRSS")
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="proc-sampler")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sample()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()
        for label, f in self.figures.items():
            cpu = read_cpu_seconds(f.pid)
            if cpu is not None and label in self._cpu_start:
                f.cpu_s = cpu - self._cpu_start[label]
            f.hwm_mib = read_status_mib(f.pid).get("VmHWM")

    def peak(self, label: str) -> float | None:
        f = self.figures.get(label)
        return f.peak_rss_mib if f else None
