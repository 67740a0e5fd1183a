"""localfleet/supervisor.py: kubelet's back-off, the status file, restarts, and a clean stop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from localfleet import supervisor

REPO = Path(__file__).resolve().parents[2]
SUPERVISOR = REPO / "localfleet" / "supervisor.py"


def test_backoff_doubles_to_the_cap_and_resets_after_a_long_run():
    delays, current = [], 0.0
    for _ in range(8):
        current = supervisor.next_backoff(current, ran_for=1, initial=10, maximum=300, reset_after=600)
        delays.append(current)
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]
    assert supervisor.next_backoff(300, ran_for=600, initial=10, maximum=300, reset_after=600) == 10


def test_exits_are_described_as_kubectl_does():
    assert supervisor.describe_exit(3) == {"code": 3}
    assert supervisor.describe_exit(-9) == {"signal": "SIGKILL"}


def read_status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def wait_for(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def start(tmp_path: Path, *command: str) -> tuple[subprocess.Popen, Path, Path]:
    status, log = tmp_path / "status.json", tmp_path / "out.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SUPERVISOR),
            "--status",
            str(status),
            "--log",
            str(log),
            "--initial-backoff",
            "0.2",
            "--max-backoff",
            "0.4",
            "--",
            *command,
        ],
        start_new_session=True,
    )
    return proc, status, log


def test_a_program_that_exits_is_restarted_and_counted(tmp_path):
    proc, status, log = start(tmp_path, "sh", "-c", "echo hello; exit 3")
    try:
        found = wait_for(lambda: read_status(status).get("restarts", 0) >= 2 and read_status(status))
        assert found["lastExit"] == {"code": 3}
        assert found["lastExitAt"]
        text = log.read_text()
        assert text.count("hello") >= 2
        assert "==== localfleet supervisor: start 1 of sh" in text
        assert "exited ({'code': 3})" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_sigterm_stops_the_program_and_nothing_restarts_it(tmp_path):
    proc, status, _log = start(tmp_path, "sleep", "60")
    child = wait_for(lambda: read_status(status).get("pid"))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    final = read_status(status)
    assert final["state"] == "stopped" and final["restarts"] == 0
    assert final["lastExit"] == {"signal": "SIGTERM"}
    assert (
        not Path(f"/proc/{child}").exists()
        or "Z" in Path(f"/proc/{child}/stat").read_text().split(") ")[1][:1]
    )


def test_a_killed_program_comes_back_with_a_new_pid(tmp_path):
    proc, status, _log = start(tmp_path, "sleep", "60")
    try:
        first = wait_for(lambda: read_status(status).get("pid"))
        subprocess.run(["kill", "-KILL", str(first)], check=True)
        second = wait_for(lambda: (read_status(status).get("pid") or first) != first and read_status(status))
        assert second["restarts"] == 1 and second["lastExit"] == {"signal": "SIGKILL"}
        assert second["state"] == "running"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_sighup_replaces_the_program_without_growing_the_backoff(tmp_path):
    # The conformance harness's restart bridge replaces our processes this way for every restart of
    # Kueue's Deployment; as crashes, a dozen restarts grew the back-off to minutes.
    proc, status, log = start(tmp_path, "sleep", "60")
    try:
        pid = wait_for(lambda: read_status(status).get("pid"))
        for _ in range(3):
            proc.send_signal(signal.SIGHUP)
            pid = wait_for(
                lambda pid=pid: (read_status(status).get("pid") or pid) != pid and read_status(status)["pid"]
            )
        assert (
            log.read_text().count("restarting in 0s") == 3
        )  # the initial 0.2 s each time, not 0.2, 0.4, 0.4
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
