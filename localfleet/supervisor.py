#!/usr/bin/env python3
"""Keeps one local-fleet process running, as a kubelet keeps a pod's container running.

    python3 localfleet/supervisor.py --status FILE --log FILE -- COMMAND [ARGS...]

It starts COMMAND with its output appended to the log (a marker line before every start), and
when COMMAND exits, starts it again after kubelet's crash-loop back-off: 10 s, doubling up to
5 minutes, back to 10 s once a run has lasted 10 minutes. SIGTERM or SIGINT to the supervisor is
passed on to COMMAND, which is then not restarted; the supervisor exits when COMMAND has. SIGHUP
replaces COMMAND, as a rollout replaces a pod: it is sent SIGTERM and started again after the initial
back-off, which a replacement neither grows nor takes from the crash-loop count.

The status file (JSON, replaced atomically) says what `localfleet status` shows: the current pid,
RESTARTS, the last exit (code or signal, and when), and whether it is running or waiting for its
back-off. Only the standard library is used: it runs with any python3.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe_exit(returncode: int) -> dict:
    """Popen's returncode as `kubectl describe` would say it: a code, or the signal's name."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return {"signal": name}
    return {"code": returncode}


def next_backoff(current: float, ran_for: float, initial: float, maximum: float, reset_after: float) -> float:
    """The delay before the next start: `initial` after a long enough run, else double the last."""
    if ran_for >= reset_after or current <= 0:
        return initial
    return min(current * 2, maximum)


class Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.cmd: list[str] = args.command
        self.status_path = Path(args.status)
        self.log_path = Path(args.log)
        self.initial, self.maximum = args.initial_backoff, args.max_backoff
        self.reset_after = args.reset_after
        self.child: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.replacing = False  # SIGHUP: the child's exit is a replacement, not a crash
        self.status: dict = {"pid": None, "restarts": 0, "state": "starting", "supervisorPid": os.getpid()}

    def write_status(self, **changes) -> None:
        self.status.update(changes)
        tmp = self.status_path.with_name(self.status_path.name + ".tmp")
        tmp.write_text(json.dumps(self.status))
        tmp.replace(self.status_path)

    def on_signal(self, signum: int, _frame) -> None:
        self.stopping.set()
        child = self.child
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

    def on_replace(self, _signum: int, _frame) -> None:
        self.replacing = True
        child = self.child
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def start_child(self, run: int) -> None:
        with self.log_path.open("ab") as out:
            out.write(f"==== localfleet supervisor: start {run} of {self.cmd[0]} at {now_text()}\n".encode())
            out.flush()
            self.child = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.write_status(pid=self.child.pid, state="running", startedAt=now_text(), nextStartAt=None)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGHUP, self.on_replace)
        backoff = crash_backoff = 0.0
        run = 1
        while True:
            started = time.monotonic()
            try:
                self.start_child(run)
            except OSError as exc:
                with self.log_path.open("ab") as out:
                    out.write(f"==== localfleet supervisor: cannot start {self.cmd[0]}: {exc}\n".encode())
                self.write_status(state="stopped", lastExit={"error": str(exc)}, lastExitAt=now_text())
                return 1
            if self.stopping.is_set():  # a signal between the check and the start
                self.child.send_signal(signal.SIGTERM)
            returncode = self.child.wait()
            ran_for = time.monotonic() - started
            exit_info = describe_exit(returncode)
            if self.stopping.is_set():
                self.write_status(pid=None, state="stopped", lastExit=exit_info, lastExitAt=now_text())
                return 0
            replaced, self.replacing = self.replacing, False
            if replaced:
                backoff = self.initial
            else:
                crash_backoff = next_backoff(
                    crash_backoff, ran_for, self.initial, self.maximum, self.reset_after
                )
                backoff = crash_backoff
            restart_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=backoff)
            with self.log_path.open("ab") as out:
                out.write(
                    f"==== localfleet supervisor: {self.cmd[0]} {'replaced' if replaced else 'exited'} "
                    f"({exit_info}) after {ran_for:.0f}s; "
                    f"restarting in {backoff:.0f}s\n".encode()
                )
            self.write_status(
                pid=None,
                state="waiting",
                restarts=self.status["restarts"] + 1,
                lastExit=exit_info,
                lastExitAt=now_text(),
                nextStartAt=restart_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
            if self.stopping.wait(backoff):
                self.write_status(state="stopped", nextStartAt=None)
                return 0
            run += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="supervisor", description=__doc__)
    p.add_argument("--status", required=True, help="the status file (JSON)")
    p.add_argument("--log", required=True, help="the log, appended to")
    p.add_argument("--initial-backoff", type=float, default=10.0)
    p.add_argument("--max-backoff", type=float, default=300.0)
    p.add_argument("--reset-after", type=float, default=600.0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no command to supervise")
    return Supervisor(args).run()


if __name__ == "__main__":
    sys.exit(main())
