"""Shared fixtures. `fleet` gives tests the real local clusters started by hack/localfleet.py."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from localfleet.common import MANAGER_COMPONENT

REPO = Path(__file__).resolve().parent.parent
LOCALFLEET = REPO / "hack" / "localfleet.py"


@dataclass
class Fleet:
    """A running local fleet, read from its state.json."""

    state: dict
    kubectl_binary: str

    @property
    def clusters(self) -> list[str]:
        return list(self.state["clusters"])

    @property
    def workers(self) -> list[str]:
        return [n for n, c in self.state["clusters"].items() if c["role"] == "worker"]

    def kubeconfig(self, cluster: str) -> str:
        """Admin kubeconfig (system:masters) of a cluster."""
        return self.state["clusters"][cluster]["kubeconfig"]

    def metrics_token(self, cluster: str) -> str:
        """A bearer token allowed `get /metrics` on the cluster (localfleet/kube.py's metrics reader)."""
        return Path(self.state["clusters"][cluster]["metricsToken"]).read_text().strip()

    def multikueue_kubeconfig(self, worker: str) -> str:
        """Kubeconfig of the manager's least-privilege identity on a worker."""
        return self.state["clusters"][worker]["multikueueKubeconfig"]

    def kubectl(
        self, cluster: str, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [self.kubectl_binary, "--kubeconfig", self.kubeconfig(cluster), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} on {cluster} failed: {res.stderr}")
        return res

    def _etcd(self, cluster: str, path: str, body: dict) -> dict:
        url = self.state["clusters"][cluster]["etcd"] + path
        req = urllib.request.Request(
            url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def etcd_revision(self, cluster: str) -> int:
        out = self._etcd(cluster, "/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})
        return int(out["header"]["revision"])

    def compact_etcd(self, cluster: str) -> int:
        """Compact the cluster's etcd to its current revision: every older resourceVersion is now 410 Gone."""
        revision = self.etcd_revision(cluster)
        self._etcd(cluster, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision


def _load_fleet(state_path: Path) -> Fleet:
    state = json.loads(state_path.read_text())
    k8s = state.get("versions", {}).get("K8S_VERSION")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kueue-federation"
    kubectl = cache / "bin" / f"kubernetes-v{k8s}" / "kubectl"
    return Fleet(state=state, kubectl_binary=str(kubectl))


@pytest.fixture(scope="session")
def fleet():
    """Reuse the fleet named by $LOCALFLEET_STATE (as `make test` does), or start a private one."""
    state_env = os.environ.get("LOCALFLEET_STATE")
    if state_env:
        path = Path(state_env)
        if not path.is_file():
            pytest.fail(f"LOCALFLEET_STATE={state_env} does not exist: is the fleet up?")
        loaded = _load_fleet(path)
        if any(p.get("component") == MANAGER_COMPONENT for p in loaded.state.get("processes", ())):
            # Two managers on one manager cluster fight over every Workload the tests submit.
            pytest.fail(
                f"the fleet of LOCALFLEET_STATE={state_env} runs a MultiKueue manager (`make up` or "
                "`localfleet up --manager` starts one); the tests start their own: run them on a fleet "
                "without it (`make test` brings one up)"
            )
        yield loaded
        return
    run_dir = Path(tempfile.mkdtemp(prefix="kueue-federation-test-fleet-", dir="/dev/shm"))
    cmd = [sys.executable, str(LOCALFLEET), "--dir", str(run_dir)]
    try:
        subprocess.run([*cmd, "up"], check=True)
        yield _load_fleet(run_dir / "state.json")
    finally:
        subprocess.run([*cmd, "down"], check=False)
