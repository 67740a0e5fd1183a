"""What every part of the local fleet shares: where things are, the fleet's names, logging, errors."""

from __future__ import annotations

import base64
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECT = "kueue-federation"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / PROJECT
DEFAULT_RUN_DIR = (
    Path("/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()) / f"{PROJECT}-fleet"
)
MANAGER = "manager"
AGENT_NAMESPACE = "kueue-system"
AGENT_FRAMEWORKS = [
    "batch/job",
    "pod",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "jobset.x-k8s.io/jobset",
    "trainer.kubeflow.org/trainjob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "ray.io/rayservice",
    "workload.codeflare.dev/appwrapper",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "kubeflow.org/paddlejob",
    "kubeflow.org/jaxjob",
    "kubeflow.org/mpijob",
    "deployment",
    "statefulset",
]
DEFAULT_FLAVOR = "default-flavor"
KUEUE_API = "kueue.x-k8s.io/v1beta1"
MULTIKUEUE_ORIGIN = "multikueue"
# Our own processes (`up --agents`, `up --manager`): stopped first, while their apiservers still answer.
AGENT_COMPONENT = "worker-agent"
MANAGER_COMPONENT = "manager"
WEBHOOKS_COMPONENT = "conversion-webhook"  # worker_agent --webhooks-only, on fleets without agents
OUR_COMPONENTS = (AGENT_COMPONENT, MANAGER_COMPONENT, WEBHOOKS_COMPONENT)
# Upstream Kueue's manager binary, in place of our processes on the clusters `up --upstream-kueue` names.
UPSTREAM_KUEUE_COMPONENT = "upstream-kueue"
# The Kueue processes of a fleet, ours or upstream's.
KUEUE_COMPONENTS = (*OUR_COMPONENTS, UPSTREAM_KUEUE_COMPONENT)
# The manager's annotation naming the worker a manager LWS runs on (manager/adapters/leaderworkerset.py).
ANNOTATION_WORKER_CLUSTER = "kueue-federation.dev/multikueue-cluster"
# multiKueue.workerLostTimeout of the manager `up --manager` starts (upstream's default).
DEFAULT_WORKER_LOST_TIMEOUT = "15m"
# multiKueue.dispatcherName values (`up --dispatcher`); without the flag the Configuration leaves it
# unset: MultiKueue's default, AllAtOnce.
DISPATCHERS = {
    "AllAtOnce": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
    "Incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
    # Ours only (manager/dispatch/least_loaded.py): upstream Kueue would read it as an external one.
    "LeastLoaded": "kueue-federation.dev/multikueue-dispatcher-least-loaded",
}


def log(msg: str) -> None:
    print(f"localfleet: {msg}", file=sys.stderr, flush=True)


class FleetError(Exception):
    """A failure with a message that tells the user what to do."""


def write_file(path: Path, data: bytes | str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
