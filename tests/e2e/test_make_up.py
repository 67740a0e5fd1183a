"""What a new user meets: `make up` (localfleet `up --agents --manager --setup-multikueue`, on a
fleet of its own) ends with the sample LeaderWorkerSet running on a worker and no warning, names
the MultiKueue objects as the setup guide does, and the guide's own checks print what the guide
says they print."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fleet_kit import LOCALFLEET, MANAGER, localfleet_module

pytestmark = pytest.mark.realcluster

GUIDE_OUTPUT = [
    "CQ - Active: True Reason: Ready Message: Can admit new workloads",
    "AC - Active: True Reason: Active Message: The admission check is active",
    "MC - Active: True Reason: Active Message: Connected",
    "MC - Active: True Reason: Active Message: Connected",
]


def test_make_up_runs_the_sample_and_the_setup_guide_works_verbatim():
    localfleet = localfleet_module()
    run_dir = Path(tempfile.mkdtemp(prefix="kf-make-up-", dir="/dev/shm"))
    base = [sys.executable, str(LOCALFLEET), "--dir", str(run_dir)]
    try:
        # What `make up` runs once the binaries are built.
        up = subprocess.run(
            [*base, "up", "--agents", "--manager", "--setup-multikueue"], capture_output=True, text=True
        )
        assert up.returncode == 0, f"{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        said = up.stdout + up.stderr
        assert not [line for line in said.splitlines() if "note:" in line or "warning" in line.lower()], said
        assert "The sample LeaderWorkerSet default/nginx-leaderworkerset runs on worker" in up.stdout
        # The next steps it printed include the guide's checks; run them as a user would, in a shell
        # with the fleet's environment.
        printed = [line for line in up.stdout.splitlines() if "-o jsonpath=" in line and "- Active:" in line]
        assert printed == localfleet.guide_checks(
            'kubectl --kubeconfig "$KUBECONFIG_MANAGER"', ["worker1", "worker2"]
        )
        env = subprocess.run([*base, "env"], check=True, capture_output=True, text=True).stdout
        checks = subprocess.run(
            ["bash", "-c", env + "\n" + "\n".join(printed)], capture_output=True, text=True, check=True
        )
        assert checks.stdout.splitlines() == GUIDE_OUTPUT, checks.stdout + checks.stderr

        state = json.loads((run_dir / "state.json").read_text())
        kubectl = localfleet.Kubectl(
            localfleet.Binaries(state["versions"]).path("kubectl"), state["clusters"][MANAGER]["kubeconfig"]
        )
        names = kubectl(
            "get", "multikueueclusters,multikueueconfigs,admissionchecks,secrets", "-A", "-o", "name"
        ).stdout
        for name in (
            "multikueuecluster.kueue.x-k8s.io/multikueue-test-worker1",
            "multikueuecluster.kueue.x-k8s.io/multikueue-test-worker2",
            "multikueueconfig.kueue.x-k8s.io/multikueue-test",
            "admissioncheck.kueue.x-k8s.io/sample-multikueue",
            "secret/worker1-secret",
            "secret/worker2-secret",
        ):
            assert name in names.split(), names
        lws = json.loads(kubectl("get", "lws", "nginx-leaderworkerset", "-n", "default", "-o", "json").stdout)
        assert lws["status"]["readyReplicas"] == 2
    finally:
        subprocess.run([*base, "down"], capture_output=True)
