"""What every benchmark uses: the repository root, its messages on stderr, its error, conditions of
Kubernetes objects, its work directory and its JSON output."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import signal
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
Obj = dict[str, Any]
# Fleets and clusters live in memory when the machine has a tmpfs there.
SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
WORK_ROOT = Path("/tmp/kueue-federation-bench")

_prog = "bench"


def set_prog(name: str) -> None:
    """The prefix of `say` (bench-engine, bench-federation, ...): set once by the entry point."""
    global _prog
    _prog = name


def say(msg: str) -> None:
    print(f"{_prog}: {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A failure with a message that says what went wrong and where to look."""


def find_condition(obj: Obj, ctype: str) -> Obj | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def condition_true(obj: Obj | None, ctype: str) -> bool:
    cond = find_condition(obj or {}, ctype)
    return cond is not None and cond.get("status") == "True"


async def cancel(task: asyncio.Task | None) -> None:
    """Cancel a task that has not finished and wait for it; what it raises is dropped (the run's
    own error, if any, is the one reported)."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def utc_now() -> str:
    """The date of a result file: UTC, to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def work_dir(given: str | None, name: str, root: Path = WORK_ROOT) -> Path:
    """--work-dir, or <root>/<name><local time> (created)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(given or root / f"{name}{stamp}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: str | Path, payload: Any, indent: int = 2) -> None:
    Path(path).write_text(json.dumps(payload, indent=indent))
    say(f"results written to {path}")


def end_on_sigterm() -> None:
    """Quiet logs; SIGTERM ends the run like Ctrl-C does, so fleets and engines are always torn down."""
    from kube_runtime.logging import setup_logging

    setup_logging("warning")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
