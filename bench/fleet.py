"""The local fleet the benchmarks run on (localfleet/, through hack/localfleet.py): start it with
given options in a private directory, read its state.json, keep our processes' logs, tear it down.

`Fleet` is a manager and its workers (`up --agents --manager --setup-multikueue`: bench.federation,
bench.compare, bench.scale); `Cluster` a single manager cluster (`up --workers 0`: bench.engine,
bench.diff_upstream). Both run `localfleet` with its output on stderr (stdout is the results')."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import REPO, BenchError, Obj, say
from bench.procfs import read_cpu_seconds

LOCALFLEET_PATH = REPO / "hack" / "localfleet.py"
MANAGER_COMPONENT = "manager"
AGENT_COMPONENT = "worker-agent"
UPSTREAM_COMPONENT = "upstream-kueue"  # upstream Kueue's process (`up --upstream-kueue CLUSTER`)
UPSTREAM_COMPONENT_STATE = "upstreamKueue"  # its entry under clusters.<name> in state.json
# The processes whose logs outlive the run directory `down` removes.
KUEUE_COMPONENTS = (MANAGER_COMPONENT, AGENT_COMPONENT, UPSTREAM_COMPONENT)
# Kueue's clientConnection defaults (worker_agent/config.py), per API resource.
DEFAULT_CLIENT_QPS = 20.0
DEFAULT_CLIENT_BURST = 30
# What every benchmark Job's pod asks for (bench.federation): the fake nodes are sized for it.
JOB_CPU_MILLI = 100
JOB_MEMORY_MI = 10
JOB_IMAGE = "registry.k8s.io/pause:3.10"
# Where the benchmarks' Jobs and LeaderWorkerSets go (the objects of `localfleet setup-multikueue`).
NAMESPACE = "default"
LOCAL_QUEUE = "user-queue"
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_BENCH_RUN = "kueue-federation.dev/bench-run"


def load_localfleet():  # type: ignore[no-untyped-def]
    """The localfleet package (the repository root is on sys.path: `python -m bench.<name>` runs there)."""
    import localfleet

    return localfleet


def kubectl_path() -> Path:
    """The cached kubectl of hack/versions.env's Kubernetes version."""
    lf = load_localfleet()
    return lf.Binaries(lf.read_versions()).path("kubectl")


def kubectl_for(kubeconfig: str | Path):  # type: ignore[no-untyped-def]
    """localfleet's kubectl runner against one cluster: `kubectl_for(kc)("get", "crd", ...)`."""
    return load_localfleet().Kubectl(kubectl_path(), str(kubeconfig))


# ==============================================================================================
# Fleet sizing (pure)
# ==============================================================================================


@dataclass(frozen=True)
class NodeSize:
    nodes: int
    cpu: str
    memory: str
    pods: str


def node_size(
    jobs: int, nodes: int = 4, cpu_milli: int = JOB_CPU_MILLI, memory_mi: int = JOB_MEMORY_MI
) -> NodeSize:
    """Fake nodes such that ONE worker fits all `jobs` at once (the manager may send them all to the
    same worker), with 10 % headroom and never below localfleet's defaults (8 CPU, 32Gi, 110 pods).
    setup-multikueue gives each worker's ClusterQueue its nodes' total and the manager's the sum."""
    if jobs < 1 or nodes < 1:
        raise ValueError("jobs and nodes must be at least 1")
    per_node = math.ceil(jobs * 1.1 / nodes)
    cpu = max(8, math.ceil(per_node * cpu_milli / 1000))
    memory_gi = max(32, math.ceil(per_node * memory_mi / 1024))
    pods = max(110, per_node + 10)
    return NodeSize(nodes, str(cpu), f"{memory_gi}Gi", str(pods))


# ==============================================================================================
# A fleet: a manager and its workers
# ==============================================================================================


class _LocalFleetDir:
    """One `localfleet --dir DIR` directory: `up` there (refused if DIR exists), `down` there, and
    the logs of our processes copied out before `down` removes them."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.started = False
        self.state: Obj = {}

    def _localfleet(self, *args: str, check: bool = True) -> None:
        cmd = [sys.executable, str(LOCALFLEET_PATH), "--dir", str(self.run_dir), *args]
        res = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=sys.stderr)
        if check and res.returncode != 0:
            raise BenchError(
                f"`{' '.join(cmd[1:])}` failed (exit {res.returncode}); logs are in {self.run_dir}"
            )

    def _up(self, *args: str) -> None:
        if self.run_dir.exists():
            raise BenchError(
                f"{self.run_dir} already exists: another benchmark may be running there (if not, "
                f"`python3 hack/localfleet.py --dir {self.run_dir} down` removes it)"
            )
        self.started = True
        self._localfleet("up", *args)

    def _down(self, save_logs_to: Path | None, everything: bool = False) -> None:
        if save_logs_to is not None:
            self.save_logs(save_logs_to, everything)
        self._localfleet("down", check=False)
        self.started = False

    def read_state(self) -> Obj:
        with contextlib.suppress(OSError, json.JSONDecodeError):
            self.state = json.loads((self.run_dir / "state.json").read_text())
        return self.state

    def save_logs(self, to: Path, everything: bool = False) -> None:
        """Our processes' logs (manager, worker_agents, upstream Kueue; `everything`: every process's)
        outlive the run directory `down` removes, as `<cluster>-<component>.log` in `to`."""
        if not self.state:  # `up` failed before state.json was read
            self.read_state()
        to.mkdir(parents=True, exist_ok=True)
        for p in self.state.get("processes") or ():
            if everything or p.get("component") in KUEUE_COMPONENTS:
                source = Path(p["log"])
                with contextlib.suppress(OSError):
                    (to / f"{p['cluster']}-{p['component']}.log").write_bytes(source.read_bytes())


class Fleet(_LocalFleetDir):
    """A fleet's state.json: processes, clusters, URLs. `start()` runs `localfleet up` in a private
    directory; `stop()` runs `down` there (only for a fleet this process started)."""

    def __init__(self, run_dir: Path, owned: bool) -> None:
        super().__init__(run_dir)
        self.owned = owned
        self.kueue = True  # a fleet with Kueue (MultiKueue set up); start(kueue=False): none

    def start(
        self,
        workers: int,
        size: NodeSize,
        client_qps: float | None = None,
        client_burst: int | None = None,
        upstream_kueue: Sequence[str] = (),
        extra_up_args: Sequence[str] = (),
        kueue: bool = True,
    ) -> None:
        """`upstream_kueue`: clusters that run upstream Kueue instead of ours (`up --upstream-kueue`);
        `extra_up_args`: more `localfleet up` flags (bench.scale: --shared-etcd --light-workers);
        `kueue=False`: the same fleet with no Kueue at all (bench.compare's no_kueue arm)."""
        self.kueue = kueue
        say(
            f"starting a fleet in {self.run_dir}: {workers} workers x {size.nodes} nodes of "
            f"{size.cpu} CPU / {size.memory} / {size.pods} pods"
        )
        started = time.monotonic()
        self._up(
            *(("--agents", "--manager", "--setup-multikueue") if kueue else ()),
            "--no-smoke",
            "--workers",
            str(workers),
            "--nodes",
            str(size.nodes),
            "--node-cpu",
            size.cpu,
            "--node-memory",
            size.memory,
            "--node-pods",
            size.pods,
            *(["--client-qps", f"{client_qps:g}"] if client_qps is not None else []),
            *(["--client-burst", str(client_burst)] if client_burst is not None else []),
            *(arg for cluster in upstream_kueue for arg in ("--upstream-kueue", cluster)),
            *extra_up_args,
        )
        say(f"fleet up in {time.monotonic() - started:.0f}s")
        self.load()

    def load(self) -> None:
        try:
            self.state = json.loads((self.run_dir / "state.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BenchError(f"no fleet state in {self.run_dir}: {e}") from e
        if self.state.get("status") != "up":
            raise BenchError(f"the fleet in {self.run_dir} is {self.state.get('status')!r}, not up")
        manager = self.clusters.get("manager", {})
        if self.kueue and MANAGER_COMPONENT not in manager and UPSTREAM_COMPONENT_STATE not in manager:
            raise BenchError(
                f"the fleet in {self.run_dir} runs no manager: start it with `up --agents --manager`"
            )

    def stop(self, save_logs_to: Path | None = None, everything: bool = False) -> None:
        if self.owned and self.started:
            say(f"tearing the fleet down ({self.run_dir})")
            self._down(save_logs_to, everything)

    def client_budget(self) -> str:
        """The manager's clientConnection (the agents get the same from localfleet)."""
        import yaml

        try:
            path = self.clusters["manager"][MANAGER_COMPONENT]["config"]
            client = (yaml.safe_load(Path(path).read_text()) or {}).get("clientConnection") or {}
        except (KeyError, OSError, yaml.YAMLError):
            return "unknown"
        qps, burst = client.get("qps"), client.get("burst")
        if qps is None and burst is None:
            return f"QPS {DEFAULT_CLIENT_QPS:g} / burst {DEFAULT_CLIENT_BURST} (Kueue's defaults)"
        return (
            f"QPS {qps if qps is not None else DEFAULT_CLIENT_QPS:g} / burst {burst or DEFAULT_CLIENT_BURST}"
        )

    @property
    def clusters(self) -> dict[str, Obj]:
        return self.state.get("clusters") or {}

    @property
    def workers(self) -> list[str]:
        return [name for name, c in self.clusters.items() if c.get("role") == "worker"]

    @property
    def manager_kubeconfig(self) -> str:
        return self.clusters["manager"]["kubeconfig"]

    @property
    def manager_metrics_url(self) -> str | None:
        """Our manager's /metrics (None when upstream Kueue runs the manager cluster)."""
        ours = self.clusters["manager"].get(MANAGER_COMPONENT)
        return ours["metrics"] if ours else None

    @property
    def manager_component(self) -> str:
        """The process in charge of MultiKueue on the manager cluster: ours or upstream's."""
        return MANAGER_COMPONENT if MANAGER_COMPONENT in self.clusters["manager"] else UPSTREAM_COMPONENT

    def agent_metrics_urls(self) -> dict[str, str]:
        return {name: c["agent"]["metrics"] for name, c in self.clusters.items() if "agent" in c}

    def metrics_token(self, cluster: str) -> str | None:
        """The bearer token the fleet's metrics reader scrapes that cluster's /metrics with
        (hack/localfleet.py writes it at `up`; our endpoints and upstream's are HTTPS and ask for one)."""
        path = self.clusters.get(cluster, {}).get("metricsToken")
        try:
            return Path(path).read_text().strip() if path else None
        except OSError:
            return None

    def host_of(self, cluster: str) -> str:
        """`127.0.0.1:<port>`: the host label rest_client_requests_total gives that apiserver."""
        return self.clusters[cluster]["server"].split("://", 1)[-1].rstrip("/")

    def processes(self) -> list[tuple[str, int]]:
        """Each program's pid (localfleet supervises them: the supervisor's status file has it)."""
        found = []
        for p in self.state.get("processes") or ():
            pid = p["pid"]
            if p.get("status"):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    pid = json.loads(Path(p["status"]).read_text())["pid"] or pid
            found.append((f"{p['cluster']}/{p['component']}", pid))
        return found

    def log_tail(self, cluster: str, component: str, lines: int = 30) -> str:
        path = self.run_dir / cluster / f"{component}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {path})"

    def dead_processes(self) -> list[str]:
        return [label for label, pid in self.processes() if read_cpu_seconds(pid) is None]


class Cluster(_LocalFleetDir):
    """One fresh manager-only cluster (`localfleet up --workers 0`), always torn down by `down()`."""

    def __init__(self, run_dir: Path, label: str, extra_up_args: list[str] | None = None) -> None:
        super().__init__(run_dir)
        self.label = label
        self.extra_up_args = list(extra_up_args or ())

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "manager" / "admin.kubeconfig"

    def state_cluster(self) -> dict:
        """The cluster's entry in localfleet's state (its metrics reader's token file among others)."""
        return (self.read_state().get("clusters") or {}).get("manager") or {}

    def up(self) -> None:
        say(f"starting a fresh cluster for {self.label} in {self.run_dir}")
        self._up("--workers", "0", "--no-smoke", *self.extra_up_args)
        if not self.kubeconfig.is_file():
            raise BenchError(f"localfleet did not write {self.kubeconfig}")

    def down(self, save_logs_to: Path | None = None) -> None:
        if self.started:
            say(f"stopping the {self.label} cluster ({self.run_dir})")
            self._down(save_logs_to)
