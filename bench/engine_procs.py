"""bench.engine's engines under test: our worker_agent (its Configuration, its /metrics) and upstream
Kueue's minimalkueue (built from the Go module, with upstream's CRDs), each in its own process group."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import REPO, BenchError, say
from bench.engine_plan import GROUP
from bench.engine_result import METRIC_DECISIONS, METRIC_ENGINE_CPU
from bench.fleet import Cluster, kubectl_for, load_localfleet
from bench.procfs import read_cpu_seconds, read_peak_rss_mib
from bench.prom import parse_prometheus_counters


class EngineProcess:
    """The admission engine under test, in its own process group; wall time starts at spawn."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.peak_rss_mib: float | None = None
        self.cpu_s: float | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=REPO,
                env={**os.environ, **(self.env or {})},
            )
        self.started_at = time.time()
        say(f"started {self.name} (pid {self.proc.pid}, log {self.log_path})")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def sample(self) -> None:
        """Keep the peak RSS and the CPU time; call while the process runs (and just before stopping)."""
        if not self.alive():
            return
        rss = read_peak_rss_mib(self.pid)
        if rss is not None:
            self.peak_rss_mib = max(self.peak_rss_mib or 0.0, rss)
        cpu = read_cpu_seconds(self.pid)
        if cpu is not None:
            self.cpu_s = cpu

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group we started, SIGKILL after `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.sample()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            say(f"{self.name} still running {timeout:.0f}s after SIGTERM, sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def write_agent_config(
    path: Path,
    metrics_port: int,
    health_port: int,
    qps: float = 50,
    burst: int = 100,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """minimalkueue's settings in our Configuration: QPS 50/burst 100 (unless told otherwise), its
    group concurrency, no election; `extra_config` fields (e.g. fairSharing) on top."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "leaderElection": {"leaderElect": False},
        "webhook": {"port": 0},
        "clientConnection": {"qps": qps, "burst": burst},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "controller": {
            "groupKindConcurrency": {
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        **(extra_config or {}),
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def agent_engine(
    work_dir: Path,
    kubeconfig: Path,
    qps: float = 50,
    burst: int = 100,
    extra_config: dict[str, Any] | None = None,
    decision_log: Path | None = None,
) -> tuple[EngineProcess, int]:
    if not (REPO / "worker_agent" / "__main__.py").is_file():
        raise BenchError("worker_agent/__main__.py does not exist yet: the agent's entry point is needed")
    lf = load_localfleet()
    metrics_port, health_port = lf.free_port(), lf.free_port()
    config = write_agent_config(
        work_dir / "agent-config.yaml", metrics_port, health_port, qps, burst, extra_config
    )
    venv_python = REPO / ".venv" / "bin" / "python"
    python = str(venv_python if venv_python.exists() else Path(sys.executable))
    cmd = [
        python,
        "-m",
        "worker_agent",
        "--kubeconfig",
        str(kubeconfig),
        "--config",
        str(config),
        "--metrics-bind-address",
        f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address",
        f"127.0.0.1:{health_port}",
        "--visibility-bind-address",
        "0",  # no visibility API (it would listen on :8082): the benchmark measures admission only
    ]
    if decision_log is not None:
        cmd += ["--decision-log", str(decision_log)]
    return EngineProcess("worker_agent", cmd, work_dir / "worker_agent.log"), metrics_port


def scrape_metrics(port: int, save_to: Path | None = None, token: str | None = None) -> dict[str, float]:
    """The agent's engine counters; the whole exposition is kept in `save_to` (API requests by
    resource and code, queue gauges) for a look after the run. Its /metrics is HTTPS (self-signed)
    behind a TokenReview and a SubjectAccessReview: `token` is the cluster's metrics reader's."""
    status, text = load_localfleet().read_metrics(f"https://127.0.0.1:{port}/metrics", token, timeout=5)
    if status != 200:
        say(f"could not read /metrics on port {port}: {status or 'unreachable'} {text.strip()[:200]}")
        return {}
    if save_to is not None:
        save_to.write_text(text)
    return parse_prometheus_counters(text, (METRIC_DECISIONS, METRIC_ENGINE_CPU))


# ==============================================================================================
# Upstream Kueue: build minimalkueue from the Go module, install its CRDs
# ==============================================================================================


def kueue_version() -> str:
    return load_localfleet().read_versions()["KUEUE_VERSION"]


def upstream_dir(version: str) -> Path:
    return load_localfleet().CACHE / "bin" / f"kueue-{version}"


def ensure_minimalkueue(force: bool = False) -> tuple[Path, Path]:
    """`minimalkueue` (upstream's harness manager) and upstream's CRDs, cached by version."""
    lf = load_localfleet()
    version = kueue_version()
    out_dir = upstream_dir(version)
    binary, crds = out_dir / "minimalkueue", out_dir / "crds"
    if not force and binary.is_file() and any(crds.glob("*.yaml")):
        say(f"minimalkueue {version} cached at {binary}")
        return binary, crds
    say(
        f"building upstream Kueue {version} minimalkueue from the Go module "
        "(first time: about 3 min on 2 cores)"
    )
    builder = lf.Builder(lf.Binaries(lf.read_versions()))
    try:
        builder.check_go()
    except lf.FleetError as e:
        raise BenchError(f"cannot build upstream Kueue's minimalkueue: {e}") from e
    out_dir.mkdir(parents=True, exist_ok=True)
    if force and binary.exists():
        binary.unlink()
    if not binary.is_file():
        # The wrapper module lands in ~/.cache/kueue-federation/build/kueue-<version>.
        builder.go_build_module(
            f"build minimalkueue {version}",
            "sigs.k8s.io/kueue",
            version,
            "sigs.k8s.io/kueue/test/performance/scheduler/minimalkueue",
            f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}",
            binary,
        )
    src = builder.module_dir(f"sigs.k8s.io/kueue@{version}")
    crds.mkdir(exist_ok=True)
    for crd in sorted((src / "config" / "components" / "crd" / "bases").glob("*.yaml")):
        shutil.copyfile(crd, crds / crd.name)
        (crds / crd.name).chmod(0o644)
    if not any(crds.glob("*.yaml")):
        raise BenchError(f"no CRDs under config/components/crd/bases of sigs.k8s.io/kueue@{version}")
    say(f"minimalkueue {version} built in {builder.elapsed()}: {binary}")
    return binary, crds


def install_upstream_crds(cluster: Cluster, crds: Path) -> None:
    """Replace our v1beta1 CRDs with upstream's (v1beta2 storage, v1beta1 served, no conversion webhook)."""
    lf = load_localfleet()
    kubectl = kubectl_for(cluster.kubeconfig)
    ours = [n for n in kubectl("get", "crd", "-o", "name").stdout.split() if n.endswith(f".{GROUP}")]
    if ours:
        # A CRD deleted while its storage is still initializing keeps its cleanup finalizer ("could not
        # list instances: storage is (re)initializing") for minutes: wait until every kind lists first.
        kinds = [n.split("/", 1)[1] for n in ours]
        lf.wait_for(
            "our Kueue CRDs to serve lists",
            lambda: all(kubectl("get", k, "-A", "-o", "name", check=False).returncode == 0 for k in kinds),
            60,
            interval=0.5,
        )
        kubectl("delete", "--wait=true", "--timeout=90s", *ours, timeout=120)
    kubectl("create", "-f", str(crds), timeout=300)
    names = [f"crd/{yaml.safe_load(p.read_text())['metadata']['name']}" for p in sorted(crds.glob("*.yaml"))]
    kubectl("wait", "--for=condition=Established", "--timeout=120s", *names)
    storage = kubectl(
        "get", f"crd/workloads.{GROUP}", "-o", "jsonpath={.spec.versions[?(@.storage==true)].name}"
    ).stdout.strip()
    if storage != "v1beta2":
        raise BenchError(f"upstream Workload CRD stores {storage!r}, expected v1beta2")
    say(f"installed upstream's {len(names)} CRDs (storage v1beta2)")


def minimalkueue_engine(work_dir: Path, kubeconfig: Path, binary: Path, verbosity: int = 0) -> EngineProcess:
    """Upstream's harness binary; `verbosity` > 0 turns on its scheduler's V(n) logs (zap level -n)."""
    cmd = [str(binary), "--kubeconfig", str(kubeconfig)]
    if verbosity > 0:
        cmd.append(f"--zap-log-level={verbosity}")
    return EngineProcess("minimalkueue", cmd, work_dir / "minimalkueue.log")
