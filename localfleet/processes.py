"""The fleet's processes: each runs under localfleet/supervisor.py, recorded in the run directory's
state.json, and stopped tier by tier by `down`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from localfleet.common import KUEUE_COMPONENTS, REPO, FleetError, log

SUPERVISOR = REPO / "localfleet" / "supervisor.py"
# Where the supervisor was before localfleet became a package: fleets it started are still ours.
SUPERVISORS = (str(SUPERVISOR), str(REPO / "hack" / "supervisor.py"))
# `down` stops the fleet tier by tier: Kueue's processes, then the controllers, the apiservers, etcd.
STOP_TIERS = (KUEUE_COMPONENTS, None, ("kube-apiserver",), ("etcd",))


def project_python() -> str:
    """The project's .venv interpreter (our processes need aiohttp, structlog, ... besides PyYAML)."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def project_env() -> dict[str, str]:
    """Environment for `python -m worker_agent` / `python -m manager`: the repo on PYTHONPATH, after
    the caller's entries so that a developer can put a replacement module first."""
    return {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO)])),
    }


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    except OSError:
        return []


def pid_is_ours(proc: dict) -> bool:
    """The recorded pid (the supervisor's, for a supervised process) is alive and still runs what we
    started (pids get reused)."""
    if not pid_alive(proc["pid"]):
        return False
    cmdline = _cmdline(proc["pid"])
    if proc.get("status"):
        return len(cmdline) > 1 and cmdline[1] in SUPERVISORS
    return bool(cmdline) and cmdline[0] == proc["cmd"][0]


def supervised_status(proc: dict) -> dict:
    """What the supervisor of `proc` last wrote ({} for an unsupervised record or before it wrote)."""
    if not proc.get("status"):
        return {}
    try:
        return json.loads(Path(proc["status"]).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def child_pid(proc: dict) -> int | None:
    """The pid of the running program itself (a supervised one's changes when it is restarted)."""
    if not proc.get("status"):
        return proc["pid"] if pid_alive(proc["pid"]) else None
    pid = supervised_status(proc).get("pid")
    if pid and pid_alive(pid) and (_cmdline(pid) or [""])[0] in (proc["cmd"][0], proc.get("program")):
        return pid
    return None


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class State:
    """The run directory's state.json: every process we started, ports, files. Written as we go."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "state.json"
        self.data: dict = {"runDir": str(run_dir), "status": "starting", "clusters": {}, "processes": []}

    @classmethod
    def load(cls, run_dir: Path) -> State | None:
        st = cls(run_dir)
        try:
            st.data = json.loads(st.path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return st

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        tmp.replace(self.path)

    def start(
        self,
        cluster: str,
        component: str,
        cmd: list[str],
        env: dict[str, str] | None = None,
        program: str | None = None,
    ) -> dict:
        """Start `cmd` under localfleet/supervisor.py, which restarts it like a kubelet would when it exits
        and outlives this command. The record's pid and pgid are the supervisor's (its session).
        `program`: what the process runs once `cmd` has exec'd it (a wrapper's target), if not cmd[0]."""
        log_path = self.run_dir / cluster / f"{component}.log"
        status_path = self.run_dir / cluster / f"{component}.status.json"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        supervisor = [sys.executable, str(SUPERVISOR), "--status", str(status_path), "--log", str(log_path)]
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                [*supervisor, "--", *cmd],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
                cwd=self.run_dir / cluster,
            )
        record = {
            "cluster": cluster,
            "component": component,
            "pid": proc.pid,
            "pgid": proc.pid,
            "cmd": cmd,
            "log": str(log_path),
            "status": str(status_path),
        }
        if program:
            record["program"] = program
        self.data["processes"].append(record)
        self.save()
        return record

    def cluster(self, name: str) -> dict:
        return self.data["clusters"][name]


def stop_processes(processes: list[dict], timeout: float = 10.0) -> None:
    """Stop the recorded processes tier by tier (STOP_TIERS): our worker_agents and manager first,
    while the apiservers they release their Leases to answer; then the controllers, whose watches
    would otherwise hold the apiservers' shutdown; then the apiservers, while etcd still answers
    them; etcd last. SIGTERM goes to each supervisor, which passes it on and does not restart;
    SIGKILL to the process group of whatever is left after `timeout`."""
    named = {c for tier in STOP_TIERS if tier for c in tier}
    for tier in STOP_TIERS:
        chosen = [
            p for p in processes if (p.get("component") in tier if tier else p.get("component") not in named)
        ]
        if chosen:
            _stop_processes(chosen, timeout)


def _orphans(processes: list[dict]) -> list[dict]:
    """Supervised programs whose supervisor is gone (killed on its own): stopped by their own pid."""
    found = []
    for p in processes:
        if p.get("status") and not pid_is_ours(p):
            pid = child_pid(p)
            if pid is not None:
                found.append({**p, "pid": pid, "orphan": True})
    return found


def _stop_processes(processes: list[dict], timeout: float) -> None:
    live = [p for p in reversed(processes) if pid_is_ours(p)] + _orphans(processes)
    for p in live:
        try:
            if p.get("status") or p.get("orphan"):
                # The supervisor alone: it passes SIGTERM on once (a second one makes Go programs
                # quit at once instead of shutting down gracefully).
                os.kill(p["pid"], signal.SIGTERM)
            else:
                os.killpg(p["pgid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p["pid"]) for p in live):
        time.sleep(0.1)
    stubborn = [p for p in live if pid_alive(p["pid"])]
    if stubborn:
        names = ", ".join(f"{p['cluster']}/{p['component']}" for p in stubborn)
        log(f"still running {timeout:.0f}s after SIGTERM, sending SIGKILL: {names}")
    for p in stubborn:
        try:
            if p.get("orphan"):
                os.kill(p["pid"], signal.SIGKILL)
            else:
                os.killpg(p["pgid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    # SIGKILL is delivered asynchronously: wait until the kernel has really taken them down, so that
    # `down` returning means "none of our processes runs any more".
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(pid_alive(p["pid"]) for p in stubborn):
        time.sleep(0.05)
    left = [p for p in stubborn if pid_alive(p["pid"])]
    if left:
        names = ", ".join(f"{p['cluster']}/{p['component']} (pid {p['pid']})" for p in left)
        raise FleetError(f"these processes survived SIGKILL: {names}")


def wait_for(
    what: str, check: Callable[[], bool], timeout: float, interval: float = 0.25, procs: Iterable[dict] = ()
) -> None:
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        for p in procs:
            if not pid_alive(p["pid"]) or supervised_status(p).get("restarts"):
                tail = "\n".join(Path(p["log"]).read_text(errors="replace").splitlines()[-15:])
                raise FleetError(
                    f"{p['cluster']}/{p['component']} exited while waiting for {what}; "
                    f"log {p['log']}:\n{tail}"
                )
        if time.monotonic() > deadline:
            logs = ", ".join(p["log"] for p in procs)
            raise FleetError(
                f"timed out after {timeout:.0f}s waiting for {what}" + (f"; log {logs}" if logs else "")
            )
        time.sleep(interval)


def fleet_is_running(state: State) -> bool:
    return bool(state.data["processes"]) and all(pid_is_ours(p) for p in state.data["processes"])


def stop_fleet(state: State) -> None:
    """Every recorded process, then what real nodes made on the machine (localfleet.nodehost)."""
    stop_processes(state.data.get("processes", []))
    if state.data.get("realNodes"):
        from localfleet.nodehost import teardown  # only fleets with real nodes need it

        teardown(state.run_dir, state.data["realNodes"])


def down(run_dir: Path) -> int:
    state = State.load(run_dir)
    stopped = 0
    if state:
        processes = state.data.get("processes", [])
        stopped = sum(1 for p in processes if pid_is_ours(p))
        stop_fleet(state)
    if run_dir.exists():
        shutil.rmtree(run_dir, ignore_errors=True)
    return stopped
