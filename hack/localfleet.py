#!/usr/bin/env python3
"""A local fleet of real Kubernetes control planes (one manager, N workers) on 127.0.0.1, without Docker.

Subcommands:
  build   build (or reuse from ~/.cache) kube-apiserver, kube-controller-manager, kube-scheduler,
          kubectl and etcd from the Kubernetes Go modules, plus kwok and the LeaderWorkerSet controller
  up      start the fleet: etcd + kube-apiserver + kube-controller-manager per cluster; on workers also
          kube-scheduler, kwok with fake Ready nodes, and the LWS controller with its webhooks;
          with --agents also our worker_agent (admission engine and webhooks) on every cluster, with
          --manager also our federation manager on the manager cluster, with --setup-multikueue
          also what `setup-multikueue` creates and then `sample-lws` (unless --no-sample);
          --upstream-kueue CLUSTER runs upstream Kueue there instead of ours (docs/local-fleet.md);
          --shared-etcd (one etcd, an --etcd-prefix per cluster) and --light-workers (no controllers,
          kwok, nodes or LWS on workers) make clusters light enough for 20 workers
  setup-multikueue
          the MultiKueue setup guide's objects (queues on every cluster; Secrets, MultiKueueClusters,
          MultiKueueConfig and AdmissionCheck on the manager), then how to submit and watch a Job
  sample-lws
          the sample LeaderWorkerSet (examples/sample-leaderworkerset.yaml) on the manager,
          until the manager's LWS shows every group ready on one worker; then how to look at it
  env     print shell exports (kubeconfigs, state file, PATH with the cached kubectl first)
  status  what is up, with memory per process
  down    stop exactly the recorded processes and remove the run directory (idempotent)

It runs with a plain `python3`: when PyYAML or cryptography are missing it creates the project's
.venv, installs the project there and re-executes itself with that interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _bootstrap() -> None:
    """Re-exec inside the project's .venv when the third-party modules we need are missing."""
    try:
        import cryptography  # noqa: F401
        import yaml  # noqa: F401
    except ImportError:
        pass
    else:
        return
    venv_python = REPO / ".venv" / "bin" / "python"
    if Path(sys.executable).resolve() == venv_python.resolve() or os.environ.get("LOCALFLEET_BOOTSTRAPPED"):
        sys.exit("localfleet: PyYAML and cryptography are missing even in .venv; run `make venv` and retry")
    import subprocess

    if not venv_python.exists():
        print("localfleet: creating .venv for the harness (PyYAML, cryptography)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(REPO / ".venv")], check=True)
    subprocess.run(
        [str(venv_python), "-m", "pip", "install", "-q", "-e", f"{REPO}[test]"],
        check=True,
    )
    os.environ["LOCALFLEET_BOOTSTRAPPED"] = "1"
    os.execv(str(venv_python), [str(venv_python), *sys.argv])


if __name__ == "__main__":
    _bootstrap()

import argparse  # noqa: E402
import base64  # noqa: E402
import copy  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import ssl  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from decimal import Decimal, InvalidOperation  # noqa: E402

import yaml  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

PROJECT = "kueue-federation"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / PROJECT
DEFAULT_RUN_DIR = (
    Path("/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()) / f"{PROJECT}-fleet"
)
MIN_GO = (1, 26)
MANAGER = "manager"
# Identity the federation manager uses on each worker (client-certificate user, bound by RBAC).
MULTIKUEUE_USER = "kueue-federation:multikueue-manager"
MULTIKUEUE_ROLE_FILE = REPO / "deploy" / "rbac" / "multikueue-worker-clusterrole.yaml"
OUR_CRDS = REPO / "deploy" / "crds"
OUR_WEBHOOKS = REPO / "deploy" / "webhooks"
CONVERT_PATH = "/convert"  # the worker_agent's CRD conversion webhook
AGENT_NAMESPACE = "kueue-system"
FRONT_PROXY_CLIENT = "front-proxy-client"  # the apiservers' proxy client certificate's common name
# The agent's visibility API (worker_agent/visibility.py): an APIService per version, on a Service of
# type ExternalName, which the aggregator resolves to https://<externalName>:<APIService port>.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
VISIBILITY_SERVICE = "kueue-visibility-server"
AGENT_SECRET = "kueue-webhook-server-cert"  # the agent's default internalCertManagement.webhookSecretName
AGENT_FRAMEWORKS = ["batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"]
DEFAULT_FLAVOR = "default-flavor"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# Our own processes (`up --agents`, `up --manager`): stopped first, while their apiservers still answer.
AGENT_COMPONENT = "worker-agent"
MANAGER_COMPONENT = "manager"
WEBHOOKS_COMPONENT = "conversion-webhook"  # worker_agent --webhooks-only, on fleets without agents
OUR_COMPONENTS = (AGENT_COMPONENT, MANAGER_COMPONENT, WEBHOOKS_COMPONENT)
# Upstream Kueue's manager binary, in place of our processes on the clusters `up --upstream-kueue` names.
UPSTREAM_KUEUE_COMPONENT = "upstream-kueue"
# The Kueue processes of a fleet, ours or upstream's.
KUEUE_COMPONENTS = (*OUR_COMPONENTS, UPSTREAM_KUEUE_COMPONENT)
# `down` stops the fleet tier by tier: Kueue's processes, then the controllers, the apiservers, etcd.
STOP_TIERS = (KUEUE_COMPONENTS, None, ("kube-apiserver",), ("etcd",))
SUPERVISOR = REPO / "hack" / "supervisor.py"
MANAGER_LEASE = "kueue-federation-manager"
MULTIKUEUE_ORIGIN = "multikueue"
# The objects of the MultiKueue setup guide (`setup-multikueue`), named as upstream's examples.
KUEUE_API = "kueue.x-k8s.io/v1beta1"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
SETUP_CLUSTER_QUEUE = "cluster-queue"
SETUP_LOCAL_QUEUE = "user-queue"
SETUP_NAMESPACE = "default"
SETUP_ADMISSION_CHECK = "sample-multikueue"
SETUP_MULTIKUEUE_CONFIG = "multikueue-test"
SAMPLE_JOB_FILE = REPO / "examples" / "multikueue" / "sample-job.yaml"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
# The sample LWS `up --setup-multikueue` (and `sample-lws`) submits on the manager.
SAMPLE_LWS_FILE = REPO / "examples" / "sample-leaderworkerset.yaml"
SAMPLE_LWS_TIMEOUT = 180.0
# The manager's annotation naming the worker a manager LWS runs on (manager/adapters/leaderworkerset.py).
ANNOTATION_WORKER_CLUSTER = "kueue-federation.dev/multikueue-cluster"
# multiKueue.workerLostTimeout of the manager `up --manager` starts (upstream's default).
DEFAULT_WORKER_LOST_TIMEOUT = "15m"
# multiKueue.dispatcherName values (`up --dispatcher`); without the flag the Configuration leaves it
# unset: MultiKueue's default, AllAtOnce.
DISPATCHERS = {
    "AllAtOnce": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
    "Incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
}
# Upstream Kueue's feature gates that `up --upstream-kueue` turns off, and why (docs/local-fleet.md).
UPSTREAM_KUEUE_FEATURE_GATES = {
    # Its API server reads a serving certificate from the fixed path /visibility (internalCertManagement
    # off), listens on a fixed port (8082: two upstream processes on one host would collide), and is
    # reached only through an APIService that points at an in-cluster Service.
    "VisibilityOnDemand": False,
}
# controller.groupKindConcurrency of the Configuration upstream ships (config/components/manager/
# controller_manager_config.yaml, also the Helm chart's): not a code default, so without it every
# upstream controller, MultiKueue's Workload reconciler included, runs one reconcile at a time.
UPSTREAM_KUEUE_GROUP_KIND_CONCURRENCY = {
    "Job.batch": 5,
    "Pod": 5,
    "Workload.kueue.x-k8s.io": 10,
    "LocalQueue.kueue.x-k8s.io": 5,
    "Cohort.kueue.x-k8s.io": 1,
    "ClusterQueue.kueue.x-k8s.io": 5,
    "ResourceFlavor.kueue.x-k8s.io": 1,
}
# Upstream Kueue reads its metrics serving certificate from this fixed path when internalCertManagement
# is off; `up --upstream-kueue` mounts a private /etc (an overlay) holding one issued by the fleet's CA.
UPSTREAM_KUEUE_METRICS_CERTS = "/etc/kueue/metrics/certs"
# Every Kueue process's /metrics (ours and upstream's) is HTTPS and wants a bearer token allowed `get` on
# the non-resource URL /metrics (TokenReview + SubjectAccessReview). `up` makes this ServiceAccount,
# ClusterRole and binding on every cluster and writes a token of it to <cluster>/metrics-reader.token
# (the state's `metricsToken`): `status`, the benchmarks and the tests scrape with it.
METRICS_READER = "kueue-federation-metrics-reader"
METRICS_READER_NAMESPACE = AGENT_NAMESPACE
METRICS_TOKEN_FILE = "metrics-reader.token"
METRICS_TOKEN_DURATION = "8760h"  # a year: the apiservers set no --service-account-max-token-expiration


def log(msg: str) -> None:
    print(f"localfleet: {msg}", file=sys.stderr, flush=True)


class FleetError(Exception):
    """A failure with a message that tells the user what to do."""


# ----------------------------------------------------------------------------------------------
# Versions and the binary cache
# ----------------------------------------------------------------------------------------------


def read_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for line in (REPO / "hack" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


@dataclass(frozen=True)
class Binaries:
    """Where each cached binary and upstream asset lives, keyed by version."""

    versions: dict[str, str]

    @property
    def k8s_dir(self) -> Path:
        return CACHE / "bin" / f"kubernetes-v{self.versions['K8S_VERSION']}"

    @property
    def kwok_dir(self) -> Path:
        return CACHE / "bin" / f"kwok-{self.versions['KWOK_VERSION']}"

    @property
    def lws_dir(self) -> Path:
        return CACHE / "bin" / f"lws-{self.versions['LWS_VERSION']}"

    @property
    def helm_dir(self) -> Path:
        """The helm CLI (only for the Helm chart's tests and users: `build --helm`)."""
        return CACHE / "bin" / f"helm-{self.versions['HELM_VERSION']}"

    @property
    def promtool_dir(self) -> Path:
        """promtool (only for the alert rules' tests and users: `build --promtool`)."""
        return CACHE / "bin" / f"promtool-{self.versions['PROMTOOL_VERSION']}"

    @property
    def kueue_dir(self) -> Path:
        """Upstream Kueue's binaries and manifests (shared with hack/bench_engine.py's minimalkueue)."""
        return CACHE / "bin" / f"kueue-{self.versions['KUEUE_VERSION']}"

    def path(self, name: str) -> Path:
        if name == "kwok":
            return self.kwok_dir / "kwok"
        if name == "lws-manager":
            return self.lws_dir / "lws-manager"
        if name == "kueue":
            return self.kueue_dir / "kueue"
        if name == "helm":
            return self.helm_dir / "helm"
        if name == "promtool":
            return self.promtool_dir / "promtool"
        return self.k8s_dir / name

    @property
    def kwok_stages(self) -> list[Path]:
        return sorted((self.kwok_dir / "stages").glob("*.yaml"))

    def kwok_stages_current(self) -> bool:
        """The cached stage files are the ones KWOK_STAGE_FILES names (a changed list re-copies them)."""
        marker = self.kwok_dir / "stages" / "SOURCES"
        return marker.is_file() and marker.read_text() == "\n".join(
            [*KWOK_STAGE_FILES, KEEP_RUNNING_ANNOTATION]
        )

    @property
    def lws_crds(self) -> list[Path]:
        return sorted((self.lws_dir / "crds").glob("*.yaml"))

    @property
    def lws_webhooks(self) -> Path:
        return self.lws_dir / "webhooks.yaml"

    @property
    def kueue_crds(self) -> list[Path]:
        return sorted((self.kueue_dir / "crds").glob("*.yaml"))

    @property
    def kueue_webhooks(self) -> Path:
        return self.kueue_dir / "webhooks.yaml"

    @property
    def kueue_conversion_crds(self) -> Path:
        """The CRD names upstream's kustomization gives a conversion webhook, one a line."""
        return self.kueue_dir / "conversion-crds.txt"

    def upstream_kueue_present(self) -> bool:
        return (
            self.path("kueue").is_file()
            and bool(self.kueue_crds)
            and self.kueue_webhooks.is_file()
            and self.kueue_conversion_crds.is_file()
        )

    def all_present(self) -> bool:
        needed = [self.path(n) for n in [*K8S_COMMANDS, "etcd", "kwok", "lws-manager"]]
        return (
            all(p.is_file() for p in needed)
            and self.kwok_stages_current()
            and bool(self.lws_crds)
            and self.lws_webhooks.is_file()
        )


K8S_COMMANDS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
KEEP_RUNNING_ANNOTATION = "kueue-federation.dev/keep-running"
# Beyond kwok's stock stages, one written into each worker's directory by `up`: a Running pod whose
# Ready condition is False is made Ready again, as a kubelet does when it next syncs the pod's
# status. kube-controller-manager's node lifecycle controller sets Ready=False on every pod of a node
# whose heartbeat it saw stop (a worker's kube-apiserver paused past --node-monitor-grace-period:
# kwok could not renew the node Leases), and kwok's pod-ready stage matches Pending pods only, so
# without this such pods stayed not Ready for good.
KWOK_POD_READY_AGAIN = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values:
      - 'False'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
"""

KWOK_STAGE_FILES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    # Job pods complete 1-6 s after they are Ready; one annotated with KEEP_RUNNING_ANNOTATION never does.
    "kustomize/stage/pod/general/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
]


# ----------------------------------------------------------------------------------------------
# build
# ----------------------------------------------------------------------------------------------


class Builder:
    """Builds every binary from the Go module proxy, showing step and elapsed time."""

    def __init__(self, bins: Binaries) -> None:
        self.bins = bins
        self.v = bins.versions
        self.started = time.monotonic()
        self.log_dir = CACHE / "build-logs"
        self.env = {
            **os.environ,
            "GOTOOLCHAIN": "local",
            "CGO_ENABLED": "0",
            "GOFLAGS": "-mod=mod",
        }

    def elapsed(self) -> str:
        return fmt_duration(time.monotonic() - self.started)

    def check_go(self) -> None:
        go = shutil.which("go")
        if not go:
            raise FleetError(
                "Go is not installed or not on PATH. Install Go >= 1.26 (https://go.dev/dl/) "
                "with access to the Go module proxy, then run `python3 hack/localfleet.py build` again."
            )
        out = subprocess.run(
            ["go", "env", "GOVERSION", "GOPROXY", "GOMODCACHE"], capture_output=True, text=True, env=self.env
        )
        if out.returncode != 0:
            raise FleetError(f"`go env` failed: {out.stderr.strip()}")
        goversion, goproxy, gomodcache = ([*out.stdout.splitlines(), "", "", ""])[:3]
        parts = goversion.removeprefix("go").split(".")
        try:
            have = (int(parts[0]), int(parts[1]))
        except (IndexError, ValueError):
            have = (0, 0)
        if have < MIN_GO:
            raise FleetError(
                f"{goversion} is too old: Kubernetes v{self.v['K8S_VERSION']} needs Go >= "
                f"{MIN_GO[0]}.{MIN_GO[1]} (GOTOOLCHAIN=local is used, so Go will not download a newer one)."
            )
        if goproxy.strip() in ("", "off"):
            raise FleetError("GOPROXY is off: the build needs the Go module proxy (go env -w GOPROXY=...).")
        self.gomodcache = Path(gomodcache)
        log(f"using {goversion}, GOPROXY={goproxy}")

    def run(self, step: str, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
        """Run one go command with its output in a log file; print a heartbeat while it runs."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.log_dir / f"{step.replace(' ', '-').replace('/', '_')}.log"
        log(f"[{self.elapsed()}] {step} ...")
        t0 = time.monotonic()
        with log_file.open("w") as out:
            proc = subprocess.Popen(
                args, cwd=cwd, env=env or self.env, stdout=subprocess.PIPE, stderr=out, text=True
            )
            done = threading.Event()

            def heartbeat() -> None:
                while not done.wait(30):
                    log(f"[{self.elapsed()}] {step}: still running ({fmt_duration(time.monotonic() - t0)})")

            threading.Thread(target=heartbeat, daemon=True).start()
            stdout, _ = proc.communicate()
            done.set()
        if proc.returncode != 0:
            tail = "\n".join(log_file.read_text().splitlines()[-25:])
            hint = ""
            if "proxy" in tail or "403" in tail or "dial tcp" in tail or "no such host" in tail:
                hint = "\nThe Go module proxy was unreachable or refused a module: check GOPROXY."
            raise FleetError(f"{step} failed (exit {proc.returncode}); log: {log_file}\n{tail}{hint}")
        log(f"[{self.elapsed()}] {step} done in {fmt_duration(time.monotonic() - t0)}")
        return stdout

    def module_dir(self, module: str) -> Path:
        out = self.run(f"download {module}", ["go", "mod", "download", "-json", module], cwd=CACHE)
        info = json.loads(out)
        if "Dir" not in info:
            raise FleetError(f"the Go module proxy did not serve {module}: {info.get('Error', info)}")
        return Path(info["Dir"])

    def build_all(
        self, force: bool = False, upstream_kueue: bool = False, helm: bool = False, promtool: bool = False
    ) -> None:
        """Everything a fleet needs; with `upstream_kueue` also upstream Kueue's full binary, with
        `helm` also the helm CLI (the Helm chart's tests need it; a fleet does not)."""
        CACHE.mkdir(parents=True, exist_ok=True)
        todo = []
        if force or not all(self.bins.path(n).is_file() for n in [*K8S_COMMANDS, "etcd"]):
            todo.append(self.build_kubernetes)
        if force or not self.bins.path("kwok").is_file() or not self.bins.kwok_stages_current():
            todo.append(self.build_kwok)
        if force or not self.bins.path("lws-manager").is_file() or not self.bins.lws_webhooks.is_file():
            todo.append(self.build_lws)
        if upstream_kueue and (force or not self.bins.upstream_kueue_present()):
            todo.append(self.build_upstream_kueue)
        if helm and (force or not self.bins.path("helm").is_file()):
            todo.append(self.build_helm)
        if promtool and (force or not self.bins.path("promtool").is_file()):
            todo.append(self.build_promtool)
        if not todo:
            log(f"all binaries cached under {CACHE / 'bin'}")
            return
        self.check_go()
        for step in todo:
            step()
        log(f"build finished in {self.elapsed()}; binaries under {CACHE / 'bin'}")

    def build_kubernetes(self) -> None:
        version = self.v["K8S_VERSION"]
        staging = "v0." + version.split(".", 1)[1]  # 1.36.3 -> v0.36.3
        wrapper = CACHE / "build" / f"kubernetes-v{version}"
        wrapper.mkdir(parents=True, exist_ok=True)
        if not (wrapper / "go.mod").exists():
            self.run(
                "init wrapper module", ["go", "mod", "init", "local.build/kubernetes-binaries"], cwd=wrapper
            )
            info = json.loads(
                self.run(
                    f"download k8s.io/kubernetes v{version}",
                    ["go", "mod", "download", "-json", f"k8s.io/kubernetes@v{version}"],
                    cwd=wrapper,
                )
            )
            if "GoMod" not in info:
                raise FleetError(f"k8s.io/kubernetes@v{version} not served: {info.get('Error', info)}")
            upstream_mod = Path(info["GoMod"]).read_text()
            edits = []
            for line in upstream_mod.splitlines():
                # Every staging module is required at v0.0.0 and replaced with a relative path upstream.
                parts = line.split()
                if len(parts) == 2 and parts[0].startswith("k8s.io/") and parts[1] == "v0.0.0":
                    edits.append(f"-replace={parts[0]}={parts[0]}@{staging}")
                if line.startswith("godebug default="):
                    edits.append(f"-godebug={line.split()[1]}")
            self.run("write replace directives", ["go", "mod", "edit", *edits], cwd=wrapper)
            self.run(
                f"resolve k8s.io/kubernetes v{version}",
                ["go", "get", f"k8s.io/kubernetes@v{version}"],
                cwd=wrapper,
            )
        major, minor = version.split(".")[:2]
        ldflags = ["-s", "-w"]
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            ldflags += [
                f"-X {pkg}.gitVersion=v{version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
            ]
        staging_dir = self.bins.k8s_dir.with_name(self.bins.k8s_dir.name + ".partial")
        staging_dir.mkdir(parents=True, exist_ok=True)
        for cmd in K8S_COMMANDS:
            if (staging_dir / cmd).is_file():
                continue
            self.run(
                f"build {cmd}",
                [
                    "go",
                    "build",
                    "-trimpath",
                    "-tags",
                    "selinux,notest,grpcnotrace",
                    "-ldflags",
                    " ".join(ldflags),
                    "-o",
                    str(staging_dir / cmd),
                    f"k8s.io/kubernetes/cmd/{cmd}",
                ],
                cwd=wrapper,
            )
        if not (staging_dir / "etcd").is_file():
            # etcd from the same module graph, so its version matches what Kubernetes is tested with.
            self.run(
                "build etcd",
                [
                    "go",
                    "build",
                    "-trimpath",
                    "-ldflags",
                    "-s -w",
                    "-o",
                    str(staging_dir / "etcd"),
                    "go.etcd.io/etcd/server/v3",
                ],
                cwd=wrapper,
            )
        out = subprocess.run(
            [str(staging_dir / "kube-apiserver"), "--version"], capture_output=True, text=True
        )
        if f"v{version}" not in out.stdout:
            raise FleetError(f"built kube-apiserver reports {out.stdout.strip()!r}, expected v{version}")
        if self.bins.k8s_dir.exists():
            shutil.rmtree(self.bins.k8s_dir)
        staging_dir.rename(self.bins.k8s_dir)

    def go_build_module(
        self, step: str, module: str, version: str, package: str, ldflags: str, out: Path, tags: str = ""
    ) -> None:
        """Build one package of a released module in a wrapper module that requires exactly that version.

        Not `go install pkg@version`: that also asks the proxy for the module's version list (to print
        deprecation notices), which the proxy refuses for some modules.
        """
        wrapper = CACHE / "build" / f"{module.rsplit('/', 1)[-1]}-{version}"
        wrapper.mkdir(parents=True, exist_ok=True)
        if not (wrapper / "go.mod").exists():
            self.run(f"init {module} wrapper", ["go", "mod", "init", "local.build/wrapper"], cwd=wrapper)
            self.run(
                f"require {module} {version}",
                ["go", "mod", "edit", f"-require={module}@{version}"],
                cwd=wrapper,
            )
        partial = out.with_name(out.name + ".partial")
        build = ["go", "build", "-trimpath", *(["-tags", tags] if tags else []), "-ldflags", ldflags]
        self.run(step, [*build, "-o", str(partial), package], cwd=wrapper)
        partial.rename(out)

    def build_kwok(self) -> None:
        version = self.v["KWOK_VERSION"]
        d = self.bins.kwok_dir
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "kwok").is_file():
            self.go_build_module(
                f"build kwok {version}",
                "sigs.k8s.io/kwok",
                version,
                "sigs.k8s.io/kwok/cmd/kwok",
                f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={version}",
                d / "kwok",
            )
        src = self.module_dir(f"sigs.k8s.io/kwok@{version}")
        (d / "stages").mkdir(exist_ok=True)
        for stale in d.glob("stages/*.yaml"):
            stale.unlink()
        for rel in KWOK_STAGE_FILES:
            text = (src / rel).read_text()
            if Path(rel).name == "pod-complete.yaml":
                # Tests keep a Job's pod running by giving it this annotation.
                text = text.replace(
                    "    matchExpressions:\n",
                    "    matchExpressions:\n"
                    f"    - key: '.metadata.annotations[\"{KEEP_RUNNING_ANNOTATION}\"]'\n"
                    "      operator: 'DoesNotExist'\n",
                    1,
                )
            (d / "stages" / Path(rel).name).write_text(text)
        (d / "stages" / "SOURCES").write_text("\n".join([*KWOK_STAGE_FILES, KEEP_RUNNING_ANNOTATION]))

    def build_lws(self) -> None:
        version = self.v["LWS_VERSION"]
        d = self.bins.lws_dir
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "lws-manager").is_file():
            self.go_build_module(
                f"build lws-manager {version}",
                "sigs.k8s.io/lws",
                version,
                "sigs.k8s.io/lws/cmd",
                f"-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion={version}",
                d / "lws-manager",
            )
        src = self.module_dir(f"sigs.k8s.io/lws@{version}")
        (d / "crds").mkdir(exist_ok=True)
        for crd in sorted((src / "config" / "crd" / "bases").glob("*.yaml")):
            shutil.copyfile(crd, d / "crds" / crd.name)
        shutil.copyfile(src / "config" / "webhook" / "manifests.yaml", d / "webhooks.yaml")

    def build_helm(self) -> None:
        """helm from its Go module (helm.sh/helm/v3) with the ldflags of helm's Makefile: its version, and
        the Kubernetes version `helm template` and `helm lint` assume (one minor above the client-go it
        is built with; without it, v1.20)."""
        version = self.v["HELM_VERSION"]
        go_mod = (self.module_dir(f"helm.sh/helm/v3@{version}") / "go.mod").read_text()
        client_go = re.search(r"^\s*k8s\.io/client-go v(\d+)\.(\d+)\.", go_mod, re.MULTILINE)
        if not client_go:
            raise FleetError(f"helm.sh/helm/v3@{version}: no k8s.io/client-go in its go.mod")
        kube_major, kube_minor = str(int(client_go.group(1)) + 1), client_go.group(2)
        ldflags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}"]
        for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
            ldflags += [f"-X {pkg}.k8sVersionMajor={kube_major}", f"-X {pkg}.k8sVersionMinor={kube_minor}"]
        self.bins.helm_dir.mkdir(parents=True, exist_ok=True)
        self.go_build_module(
            f"build helm {version}",
            "helm.sh/helm/v3",
            version,
            "helm.sh/helm/v3/cmd/helm",
            " ".join(ldflags),
            self.bins.path("helm"),
        )
        out = subprocess.run(
            [str(self.bins.path("helm")), "version", "--template", "{{.Version}}"],
            capture_output=True,
            text=True,
        )
        if out.stdout.strip() != version:
            self.bins.path("helm").unlink()
            raise FleetError(f"built helm reports {out.stdout.strip()!r}, expected {version}")

    def build_promtool(self) -> None:
        """Prometheus' promtool (github.com/prometheus/prometheus), for `promtool check rules` and
        `promtool test rules` on deploy/monitoring's alert rules. Built with `remove_all_sd`: without
        service discovery, which rule checks do not use and whose cloud SDKs take most of the build."""
        version = self.v["PROMTOOL_VERSION"]
        self.bins.promtool_dir.mkdir(parents=True, exist_ok=True)
        self.go_build_module(
            f"build promtool {version}",
            "github.com/prometheus/prometheus",
            version,
            "github.com/prometheus/prometheus/cmd/promtool",
            f"-s -w -X github.com/prometheus/common/version.Version={version.removeprefix('v')}",
            self.bins.path("promtool"),
            tags="remove_all_sd",
        )

    def build_upstream_kueue(self) -> None:
        """Upstream Kueue's manager binary (cmd/kueue: scheduler, job integrations, webhooks and the
        MultiKueue manager) and the manifests `up --upstream-kueue` rewrites: CRDs, webhook
        configurations, and which CRDs upstream's kustomization gives a conversion webhook."""
        version = self.v["KUEUE_VERSION"]
        d = self.bins.kueue_dir
        d.mkdir(parents=True, exist_ok=True)
        if not self.bins.path("kueue").is_file():
            self.go_build_module(
                f"build kueue {version}",
                "sigs.k8s.io/kueue",
                version,
                "sigs.k8s.io/kueue/cmd/kueue",
                f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}",
                self.bins.path("kueue"),
            )
        src = self.module_dir(f"sigs.k8s.io/kueue@{version}")
        crd_src = src / "config" / "components" / "crd"
        (d / "crds").mkdir(exist_ok=True)
        for crd in sorted((crd_src / "bases").glob("*.yaml")):
            shutil.copyfile(crd, d / "crds" / crd.name)
            (d / "crds" / crd.name).chmod(0o644)
        webhooks = d / "webhooks.yaml"
        shutil.copyfile(src / "config" / "components" / "webhook" / "manifests.yaml", webhooks)
        webhooks.chmod(0o644)
        kustomization = yaml.safe_load((crd_src / "kustomization.yaml").read_text())
        converted = []
        for patch in kustomization.get("patches") or ():
            doc = yaml.safe_load((crd_src / patch["path"]).read_text())
            if ((doc.get("spec") or {}).get("conversion") or {}).get("strategy") == "Webhook":
                converted.append(doc["metadata"]["name"])
        if not converted:
            raise FleetError(f"sigs.k8s.io/kueue@{version}: no CRD conversion patch in {crd_src}")
        self.bins.kueue_conversion_crds.write_text("\n".join(converted) + "\n")


def crd_docs(files: Iterable[Path]) -> list[dict]:
    docs = []
    for f in files:
        docs += [
            d for d in yaml.safe_load_all(f.read_text()) if d and d.get("kind") == "CustomResourceDefinition"
        ]
    return docs


def fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# ----------------------------------------------------------------------------------------------
# PKI: one CA per run, serving certificates for every TLS listener, client certificates per user
# ----------------------------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self, common_name: str, organizations: Iterable[str] = (), server: bool = False
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            import ipaddress

            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def write_file(path: Path, data: bytes | str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# Kubernetes quantity suffixes and their multipliers.
QUANTITY_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate("kMGTPE")},
    **{f"{s}i": Decimal(1024) ** (i + 1) for i, s in enumerate("KMGTPE")},
}


def split_quantity(quantity: str) -> tuple[Decimal, str]:
    """Number and suffix of a quantity: "32Gi" -> (32, "Gi"), "8" -> (8, "")."""
    text = str(quantity).strip()
    suffix = next((s for s in sorted(QUANTITY_SUFFIXES, key=len, reverse=True) if s and text.endswith(s)), "")
    try:
        return Decimal(text.removesuffix(suffix) if suffix else text), suffix
    except InvalidOperation:
        raise FleetError(f"{quantity!r} is not a quantity (e.g. 8, 500m, 32Gi)") from None


def sum_quantities(quantities: Iterable[str]) -> str:
    """The sum, in the inputs' suffix when they share one ("32Gi" x 4 -> "128Gi"), else in base units."""
    parts = [split_quantity(q) for q in quantities]
    suffixes = {suffix for _, suffix in parts}
    if len(suffixes) == 1:
        (suffix,) = suffixes
        total = sum((n for n, _ in parts), Decimal(0))
    else:
        suffix, total = "", sum((n * QUANTITY_SUFFIXES[s] for n, s in parts), Decimal(0))
    return f"{total.normalize():f}{suffix}"


def kubeconfig(cluster: str, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict:
    """A self-contained kubeconfig (inline CA and credentials), as MultiKueue requires."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }


# ----------------------------------------------------------------------------------------------
# Processes and state
# ----------------------------------------------------------------------------------------------


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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        return len(cmdline) > 1 and cmdline[1] == str(SUPERVISOR)
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
        """Start `cmd` under hack/supervisor.py, which restarts it like a kubelet would when it exits
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


# ----------------------------------------------------------------------------------------------
# Talking to the clusters
# ----------------------------------------------------------------------------------------------


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


def https_ok(url: str, ca: Path, cert: Path | None = None, key: Path | None = None) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def tls_port_open(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock, ctx.wrap_socket(sock):
            return True
    except OSError:
        return False


def metrics_reader_objects() -> list[dict]:
    """The identity that scrapes /metrics: a ServiceAccount bound to a ClusterRole allowing `get` on the
    non-resource URL /metrics (what deploy/worker-agent's `kueue-metrics-reader` grants)."""
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": METRICS_READER_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": METRICS_READER, "namespace": METRICS_READER_NAMESPACE},
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": METRICS_READER},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": METRICS_READER},
            "roleRef": {"apiGroup": rbac.split("/")[0], "kind": "ClusterRole", "name": METRICS_READER},
            "subjects": [
                {"kind": "ServiceAccount", "name": METRICS_READER, "namespace": METRICS_READER_NAMESPACE}
            ],
        },
    ]


def metrics_reader_token(kubectl: Kubectl, duration: str = METRICS_TOKEN_DURATION) -> str:
    """A token of the metrics reader (its objects created first, idempotently)."""
    kubectl.apply(metrics_reader_objects())
    res = kubectl("create", "token", METRICS_READER, "-n", METRICS_READER_NAMESPACE, f"--duration={duration}")
    token = res.stdout.strip()
    if not token:
        raise FleetError(f"kubectl create token {METRICS_READER} printed no token: {res.stderr.strip()}")
    return token


def cluster_metrics_token(cluster: dict) -> str | None:
    """The metrics reader's token `up` wrote for a cluster of the state (None if there is none)."""
    path = cluster.get("metricsToken")
    try:
        return Path(path).read_text().strip() if path else None
    except OSError:
        return None


def read_metrics(url: str, token: str | None, timeout: float = 10) -> tuple[int, str]:
    """(HTTP status, body) of a /metrics URL; 0 and the error when unreachable. HTTPS with the bearer
    token; the server's certificate is not checked (our processes' are self-signed, as
    controller-runtime's; Prometheus setups use insecureSkipVerify the same way)."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def metrics_summary(url: str, token: str | None) -> str:
    """`metrics <url> (read)` or why not, for `status`."""
    code, body = read_metrics(url, token, timeout=5)
    if code == 200:
        return f"metrics {url} (read with the metrics-reader token)"
    reason = body.strip().splitlines()[0] if body.strip() else "no answer"
    return f"metrics {url} (NOT readable: {code or 'unreachable'} {reason})"


class Kubectl:
    def __init__(self, binary: Path, kubeconfig_path: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig_path

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [str(self.binary), "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise FleetError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    def apply(self, docs: list[dict] | str) -> list[str]:
        """Server-side apply; returns kubectl's lines (`kind/name serverside-applied`)."""
        text = docs if isinstance(docs, str) else yaml.safe_dump_all(docs)
        res = self(
            "apply", "--server-side", "--force-conflicts", "--field-manager=localfleet", "-f", "-", input=text
        )
        return res.stdout.splitlines()

    def get_json(self, *args: str) -> dict:
        return json.loads(self("get", *args, "-o", "json").stdout)


# ----------------------------------------------------------------------------------------------
# up
# ----------------------------------------------------------------------------------------------


@dataclass
class FleetOptions:
    workers: int = 2
    nodes: int = 4
    node_cpu: str = "8"
    node_memory: str = "32Gi"
    node_pods: str = "110"
    smoke: bool = True
    agents: bool = False
    manager: bool = False  # our federation manager on the manager cluster (needs agents)
    setup_multikueue: bool = False
    run_dir: Path = DEFAULT_RUN_DIR
    # clientConnection {qps, burst} of our agents and manager; None: Kueue's defaults (20 / 30).
    client_qps: float | None = None
    client_burst: int | None = None
    # multiKueue.workerLostTimeout of our manager (a Go duration); tests shorten it.
    worker_lost_timeout: str = DEFAULT_WORKER_LOST_TIMEOUT
    # multiKueue.dispatcherName of the manager (ours or upstream's); None: not set (AllAtOnce).
    dispatcher: str | None = None
    # Clusters that run upstream Kueue instead of our worker_agent (and, for the manager, our manager).
    upstream_kueue: tuple[str, ...] = ()
    # Top-level fields merged over the config.kueue.x-k8s.io/v1beta2 Configuration upstream Kueue gets
    # (`up --upstream-kueue-config FILE`), e.g. fairSharing for the differential runner.
    upstream_kueue_config: dict = field(default_factory=dict)
    # One etcd (the manager's) serves every apiserver, each under its own key prefix (--etcd-prefix).
    shared_etcd: bool = False
    # Workers without kube-controller-manager, kube-scheduler, kwok, nodes or the LWS controller:
    # Workloads are admitted there, no pod is ever created (enough for MultiKueue dispatch benchmarks).
    light_workers: bool = False


@dataclass
class ClusterPlan:
    name: str
    role: str  # "manager" or "worker"
    dir: Path
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def is_worker(self) -> bool:
        return self.role == "worker"


def etcd_prefix(cluster: str, shared: bool) -> str:
    """The apiserver's --etcd-prefix: kube-apiserver's default alone, `/<cluster>/registry` on a shared
    etcd (no cluster's prefix is a prefix of another's: /worker1/registry, /worker10/registry)."""
    return f"/{cluster}/registry" if shared else "/registry"


def runs_pods(c: ClusterPlan, light_workers: bool) -> bool:
    """Whether a worker gets kube-controller-manager, kube-scheduler, kwok, nodes and the LWS controller."""
    return c.is_worker and not light_workers


class FleetUp:
    def __init__(self, opts: FleetOptions, bins: Binaries) -> None:
        self.opts = opts
        self.bins = bins
        self.state = State(opts.run_dir)
        self.t0 = time.monotonic()
        self.clusters = [ClusterPlan(MANAGER, "manager", opts.run_dir / MANAGER)] + [
            ClusterPlan(f"worker{i}", "worker", opts.run_dir / f"worker{i}")
            for i in range(1, opts.workers + 1)
        ]

    def step(self, msg: str) -> None:
        log(f"[{fmt_duration(time.monotonic() - self.t0)}] {msg}")

    def kubectl(self, c: ClusterPlan) -> Kubectl:
        return Kubectl(self.bins.path("kubectl"), str(c.dir / "admin.kubeconfig"))

    def runs_upstream(self, c: ClusterPlan) -> bool:
        return c.name in self.opts.upstream_kueue

    def procs(self, cluster: str, component: str) -> list[dict]:
        return [
            p for p in self.state.data["processes"] if p["cluster"] == cluster and p["component"] == component
        ]

    def run(self) -> None:
        self.opts.run_dir.mkdir(parents=True, exist_ok=True)
        self.state.data["versions"] = self.bins.versions
        self.state.data["options"] = {
            "workers": self.opts.workers,
            "nodes": self.opts.nodes,
            "nodeCpu": self.opts.node_cpu,
            "nodeMemory": self.opts.node_memory,
            "agents": self.opts.agents,
            "manager": self.opts.manager,
            "workerLostTimeout": self.opts.worker_lost_timeout,
            "dispatcher": self.opts.dispatcher,
            "upstreamKueue": list(self.opts.upstream_kueue),
            "sharedEtcd": self.opts.shared_etcd,
            "lightWorkers": self.opts.light_workers,
        }
        self.state.save()
        self.make_pki()
        self.start_etcd()
        self.start_apiservers()
        self.start_controllers()
        self.install_crds()
        self.grant_metrics_reader()
        self.start_agents(webhooks_only=not self.opts.agents)
        if self.opts.upstream_kueue:
            self.start_upstream_kueue()
        if self.opts.manager and MANAGER not in self.opts.upstream_kueue:
            self.start_manager()
        self.create_nodes()
        self.start_lws()
        self.grant_multikueue_identity()
        if self.opts.smoke and not self.opts.light_workers:
            self.smoke_check()
        self.state.data["status"] = "up"
        self.state.save()
        self.step(f"fleet is up: {', '.join(c.name for c in self.clusters)} (state {self.state.path})")

    # -- PKI and ports --------------------------------------------------------------------------

    def make_pki(self) -> None:
        self.step("creating certificates")
        pki = self.opts.run_dir / "pki"
        self.ca = CertificateAuthority(f"{PROJECT} fleet CA")
        self.ca_file = write_file(pki / "ca.crt", self.ca.cert_pem, 0o644)
        write_file(pki / "ca.key", _pem_key(self.ca.key))
        # API aggregation: the apiservers proxy to aggregated API servers (the agents' visibility API)
        # with a client certificate of a CA of its own, as kubeadm's front-proxy CA.
        self.front_proxy_ca = CertificateAuthority(f"{PROJECT} front-proxy CA")
        self.front_proxy_ca_file = write_file(pki / "front-proxy-ca.crt", self.front_proxy_ca.cert_pem, 0o644)
        for c in self.clusters:
            for name in ("etcd", "etcd-peer", "apiserver", "kwok", "lws-webhook", "lws-health"):
                c.ports[name] = free_port()
        for c in self.clusters:
            crt, key = self.ca.issue("kube-apiserver", server=True)
            write_file(c.dir / "pki" / "apiserver.crt", crt, 0o644)
            write_file(c.dir / "pki" / "apiserver.key", key)
            # Service-account signing key pair: the apiserver verifies with the public half.
            sa = ec.generate_private_key(ec.SECP256R1())
            write_file(c.dir / "pki" / "sa.key", _pem_key(sa))
            write_file(
                c.dir / "pki" / "sa.pub",
                sa.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ),
                0o644,
            )
            crt, key = self.front_proxy_ca.issue(FRONT_PROXY_CLIENT)
            write_file(c.dir / "pki" / "front-proxy-client.crt", crt, 0o644)
            write_file(c.dir / "pki" / "front-proxy-client.key", key)
            crt, key = self.ca.issue("admin", organizations=["system:masters"])
            write_file(c.dir / "pki" / "admin.crt", crt, 0o644)
            write_file(c.dir / "pki" / "admin.key", key)
            server = f"https://127.0.0.1:{c.ports['apiserver']}"
            write_file(
                c.dir / "admin.kubeconfig",
                yaml.safe_dump(kubeconfig(c.name, server, self.ca.cert_pem, crt, key, f"{c.name}-admin")),
            )
            if self.runs_lws(c):
                crt, key = self.ca.issue("lws-webhook", server=True)
                write_file(c.dir / "lws-certs" / "tls.crt", crt, 0o644)
                write_file(c.dir / "lws-certs" / "tls.key", key)
            if self.runs_upstream(c):
                for name in ("kueue-webhook", "kueue-metrics", "kueue-health"):
                    c.ports[name] = free_port()
                crt, key = self.ca.issue("kueue-webhook", server=True)
                write_file(c.dir / "kueue-certs" / "tls.crt", crt, 0o644)
                write_file(c.dir / "kueue-certs" / "tls.key", key)
                crt, key = self.ca.issue("kueue-metrics", server=True)
                metrics_certs = self.upstream_etc_upper(c) / UPSTREAM_KUEUE_METRICS_CERTS.removeprefix(
                    "/etc/"
                )
                write_file(metrics_certs / "tls.crt", crt, 0o644)
                write_file(metrics_certs / "tls.key", key)
            self.state.data["clusters"][c.name] = {
                "role": c.role,
                "server": server,
                "ports": c.ports,
                "kubeconfig": str(c.dir / "admin.kubeconfig"),
                "etcd": f"http://127.0.0.1:{self.etcd_of(c).ports['etcd']}",
                "etcdPrefix": etcd_prefix(c.name, self.opts.shared_etcd),
            }
            if c.is_worker:
                # What the worker's fake nodes offer in total: `setup-multikueue` sizes its queues by it.
                self.state.cluster(c.name)["capacity"] = {
                    "cpu": sum_quantities([self.opts.node_cpu] * self.opts.nodes),
                    "memory": sum_quantities([self.opts.node_memory] * self.opts.nodes),
                }
        self.write_merged_kubeconfig()
        self.state.save()

    def write_merged_kubeconfig(self) -> None:
        merged: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
        for c in self.clusters:
            one = yaml.safe_load((c.dir / "admin.kubeconfig").read_text())
            for key in ("clusters", "users", "contexts"):
                merged[key] += one[key]
        merged["current-context"] = MANAGER
        path = write_file(self.opts.run_dir / "kubeconfig", yaml.safe_dump(merged))
        self.state.data["mergedKubeconfig"] = str(path)

    # -- control planes -------------------------------------------------------------------------

    def etcd_of(self, c: ClusterPlan) -> ClusterPlan:
        """The cluster whose etcd stores `c`'s objects: the manager's with --shared-etcd."""
        return self.clusters[0] if self.opts.shared_etcd else c

    def etcd_clusters(self) -> list[ClusterPlan]:
        return [c for c in self.clusters if self.etcd_of(c) is c]

    def start_etcd(self) -> None:
        self.step("starting etcd" + (" (one, shared by every apiserver)" if self.opts.shared_etcd else ""))
        for c in self.etcd_clusters():
            p = c.ports
            self.state.start(
                c.name,
                "etcd",
                [
                    str(self.bins.path("etcd")),
                    f"--name={c.name}",
                    f"--data-dir={c.dir / 'etcd-data'}",
                    f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
                    f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
                    f"--listen-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
                    f"--initial-cluster={c.name}=http://127.0.0.1:{p['etcd-peer']}",
                    "--unsafe-no-fsync=true",
                    "--quota-backend-bytes=8589934592",
                    "--log-level=warn",
                ],
            )
        for c in self.etcd_clusters():
            wait_for(
                f"{c.name} etcd",
                lambda c=c: http_ok(f"http://127.0.0.1:{c.ports['etcd']}/health"),
                60,
                procs=self.procs(c.name, "etcd"),
            )

    def start_apiservers(self) -> None:
        self.step("starting kube-apiservers")
        for c in self.clusters:
            p, pki = c.ports, c.dir / "pki"
            self.state.start(
                c.name,
                "kube-apiserver",
                [
                    str(self.bins.path("kube-apiserver")),
                    f"--etcd-servers=http://127.0.0.1:{self.etcd_of(c).ports['etcd']}",
                    f"--etcd-prefix={etcd_prefix(c.name, self.opts.shared_etcd)}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={p['apiserver']}",
                    f"--cert-dir={pki}",
                    f"--tls-cert-file={pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={self.ca_file}",
                    "--authorization-mode=RBAC",
                    # API aggregation (the agents' visibility.kueue.x-k8s.io): the front-proxy client
                    # certificate the apiserver proxies with, and the headers it names the user in.
                    f"--requestheader-client-ca-file={self.front_proxy_ca_file}",
                    f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                    f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
                    # No ServiceAccount admission: pods must not race the creation of each namespace's SA.
                    "--disable-admission-plugins=ServiceAccount",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--allow-privileged=true",
                    f"--service-account-issuer=https://127.0.0.1:{p['apiserver']}/",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    "--endpoint-reconciler-type=none",
                    "--enable-priority-and-fairness=false",
                    "--max-requests-inflight=0",
                    "--max-mutating-requests-inflight=0",
                    "--profiling=false",
                    # ConfigMaps bypass the watch cache, so compacting etcd makes a stale watch get 410 Gone
                    # deterministically (tests of informer re-list use ConfigMaps).
                    "--watch-cache-sizes=configmaps#0",
                    "--v=1",
                ],
            )
        for c in self.clusters:
            pki = c.dir / "pki"
            wait_for(
                f"{c.name} kube-apiserver /readyz",
                lambda c=c, pki=pki: https_ok(
                    f"https://127.0.0.1:{c.ports['apiserver']}/readyz",
                    self.ca_file,
                    pki / "admin.crt",
                    pki / "admin.key",
                ),
                180,
                interval=0.5,
                procs=self.procs(c.name, "kube-apiserver"),
            )

    def start_controllers(self) -> None:
        light = " (not on the light workers)" if self.opts.light_workers else ""
        self.step(f"starting kube-controller-manager, kube-scheduler and kwok{light}")
        for c in self.clusters:
            if c.is_worker and not runs_pods(c, self.opts.light_workers):
                continue
            admin, pki = str(c.dir / "admin.kubeconfig"), c.dir / "pki"
            self.state.start(
                c.name,
                "kube-controller-manager",
                [
                    str(self.bins.path("kube-controller-manager")),
                    f"--kubeconfig={admin}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    f"--root-ca-file={self.ca_file}",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    "--use-service-account-credentials=false",
                    "--kube-api-qps=1000",
                    "--kube-api-burst=1000",
                    "--v=1",
                ],
            )
            if not c.is_worker:
                continue
            self.state.start(
                c.name,
                "kube-scheduler",
                [
                    str(self.bins.path("kube-scheduler")),
                    f"--kubeconfig={admin}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--kube-api-qps=1000",
                    "--kube-api-burst=1000",
                    "--v=1",
                ],
            )
            ready_again = c.dir / "kwok-pod-ready-again.yaml"
            ready_again.write_text(KWOK_POD_READY_AGAIN)
            self.state.start(
                c.name,
                "kwok",
                [
                    str(self.bins.path("kwok")),
                    f"--kubeconfig={admin}",
                    *[f"--config={s}" for s in [*self.bins.kwok_stages, ready_again]],
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--node-ip=127.0.0.1",
                    f"--server-address=127.0.0.1:{c.ports['kwok']}",
                    "--node-lease-duration-seconds=40",
                    "--cidr=10.244.0.0/16",
                ],
            )

    def grant_metrics_reader(self) -> None:
        """On every cluster, the metrics reader and a token of it (`metricsToken` in the state)."""
        self.step("creating the metrics reader (a ServiceAccount token allowed `get /metrics`) everywhere")
        for c in self.clusters:
            path = write_file(c.dir / METRICS_TOKEN_FILE, metrics_reader_token(self.kubectl(c)) + "\n")
            self.state.cluster(c.name)["metricsToken"] = str(path)
        self.state.save()

    def install_crds(self) -> None:
        self.step("installing LeaderWorkerSet and Kueue CRDs")
        ours = crd_docs([*self.bins.lws_crds, *sorted(OUR_CRDS.glob("*.yaml"))])
        threads = []
        errors: list[Exception] = []

        def install(c: ClusterPlan) -> None:
            try:
                if self.runs_upstream(c):
                    docs = crd_docs(self.bins.lws_crds) + self.upstream_crds(c)
                else:
                    docs = ours
                names = [d["metadata"]["name"] for d in docs]
                kubectl = self.kubectl(c)
                kubectl.apply(
                    yaml.safe_dump_all(docs if self.runs_upstream(c) else self.local_conversion(c, docs))
                )
                kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
                kubectl("create", "namespace", "kueue-system", check=False)
            except Exception as e:
                errors.append(e)

        for c in self.clusters:
            t = threading.Thread(target=install, args=(c,))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def local_conversion(self, c: ClusterPlan, crds: list[dict]) -> list[dict]:
        """`crds` with their conversion webhook (deploy/crds: the agent's Service) turned into a URL
        on this cluster's local agent; the agent injects its CA bundle once it runs."""
        port = c.ports.setdefault("agent-webhook", free_port())
        out = []
        for crd in crds:
            crd = copy.deepcopy(crd)
            webhook = (crd["spec"].get("conversion") or {}).get("webhook")
            if webhook is not None:
                webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{CONVERT_PATH}"}
            out.append(crd)
        return out

    def create_nodes(self) -> None:
        workers = [c for c in self.clusters if runs_pods(c, self.opts.light_workers)]
        if not workers:
            return
        self.step(
            f"creating {self.opts.nodes} fake nodes per worker "
            f"({self.opts.node_cpu} CPU / {self.opts.node_memory} each)"
        )
        for c in workers:
            nodes = []
            for i in range(self.opts.nodes):
                name = f"{c.name}-node-{i}"
                capacity = {
                    "cpu": self.opts.node_cpu,
                    "memory": self.opts.node_memory,
                    "pods": self.opts.node_pods,
                }
                nodes.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {
                            "name": name,
                            "annotations": {
                                "kwok.x-k8s.io/node": "fake",
                                "node.alpha.kubernetes.io/ttl": "0",
                            },
                            "labels": {
                                "kubernetes.io/hostname": name,
                                "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64",
                                "type": "kwok",
                            },
                        },
                        "status": {"capacity": capacity, "allocatable": capacity},
                    }
                )
            # Status fields are dropped on create, so create first, then let kwok fill status;
            # capacity must be set through the status subresource.
            self.kubectl(c).apply(nodes)
            for n in nodes:
                self.kubectl(c)(
                    "patch",
                    "node",
                    n["metadata"]["name"],
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    json.dumps({"status": n["status"]}),
                )
        for c in workers:
            wait_for(
                f"{c.name} nodes Ready",
                lambda c=c: self.ready_nodes(c) >= self.opts.nodes,
                90,
                interval=1,
                procs=self.procs(c.name, "kwok"),
            )

    def ready_nodes(self, c: ClusterPlan) -> int:
        res = self.kubectl(c)("get", "nodes", "-o", "json", check=False)
        if res.returncode != 0:
            return 0
        count = 0
        for n in json.loads(res.stdout)["items"]:
            conds = {x["type"]: x["status"] for x in n.get("status", {}).get("conditions", [])}
            if conds.get("Ready") == "True" and n["status"].get("allocatable", {}).get("cpu"):
                count += 1
        return count

    # -- our worker_agent (--agents) -----------------------------------------------------------

    def agent_python(self) -> str:
        """The project's .venv interpreter (the agent needs aiohttp, structlog, ... besides PyYAML)."""
        python = project_python()
        check = subprocess.run(
            [python, "-c", "import worker_agent.agent"], capture_output=True, text=True, cwd=REPO
        )
        if check.returncode != 0:
            raise FleetError(
                f"{python} cannot import worker_agent ({check.stderr.strip().splitlines()[-1:]}); "
                "run `make venv` and retry"
            )
        return python

    def agent_config(self, c: ClusterPlan) -> dict:
        """A v1beta1 Configuration: leader election in kueue-system, everything on 127.0.0.1."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "namespace": AGENT_NAMESPACE,
            "leaderElection": {"leaderElect": True, "resourceNamespace": AGENT_NAMESPACE},
            "metrics": {"bindAddress": f"127.0.0.1:{c.ports['agent-metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{c.ports['agent-health']}"},
            "webhook": {
                "host": "127.0.0.1",
                "port": c.ports["agent-webhook"],
                "certDir": str(c.dir / "webhook-certs"),
            },
            "internalCertManagement": {"enable": True, "webhookSecretName": AGENT_SECRET},
            "integrations": {"frameworks": AGENT_FRAMEWORKS},
            **self.client_connection(),
        }

    def client_connection(self) -> dict:
        """`clientConnection` for our Configurations when `up --client-qps/--client-burst` asks for one."""
        settings = {"qps": self.opts.client_qps, "burst": self.opts.client_burst}
        settings = {k: v for k, v in settings.items() if v is not None}
        return {"clientConnection": settings} if settings else {}

    def agent_clusters(self) -> list[ClusterPlan]:
        """The clusters our worker_agent runs on: all but those running upstream Kueue."""
        return [c for c in self.clusters if not self.runs_upstream(c)]

    def start_agents(self, webhooks_only: bool = False) -> None:
        """One `python -m worker_agent` per cluster; once each is ready, our webhook configurations
        (URL clientConfig, CA bundle from the agent's Secret; the agent keeps it up to date) and a
        ResourceFlavor `default-flavor`. With `webhooks_only` (a fleet without agents, as the test
        fleet): `worker_agent --webhooks-only`, which runs no controllers and serves the CRDs'
        conversion webhook, so v1beta1 clients work; no admission webhooks are registered."""
        component = WEBHOOKS_COMPONENT if webhooks_only else AGENT_COMPONENT
        what = (
            "the conversion webhook (worker_agent --webhooks-only)" if webhooks_only else "the worker_agent"
        )
        self.step(f"starting {what} on every cluster")
        python = self.agent_python()
        for c in self.agent_clusters():
            for name in ("agent-metrics", "agent-health", "agent-webhook", "agent-visibility"):
                c.ports.setdefault(name, free_port())  # the webhook's is chosen with the CRDs
            cfg = write_file(c.dir / "worker-agent-config.yaml", yaml.safe_dump(self.agent_config(c)), 0o644)
            self.state.cluster(c.name)["agent" if not webhooks_only else "webhooks"] = {
                "config": str(cfg),
                "health": f"http://127.0.0.1:{c.ports['agent-health']}",
                "metrics": f"https://127.0.0.1:{c.ports['agent-metrics']}/metrics",
                "webhook": f"https://127.0.0.1:{c.ports['agent-webhook']}",
                **(
                    {}
                    if webhooks_only
                    else {"visibility": f"https://127.0.0.1:{c.ports['agent-visibility']}"}
                ),
            }
            self.state.start(
                c.name,
                component,
                [
                    python,
                    "-m",
                    "worker_agent",
                    f"--kubeconfig={c.dir / 'admin.kubeconfig'}",
                    f"--config={cfg}",
                    "--log-format=console",
                    *(
                        ["--webhooks-only"]
                        if webhooks_only
                        else [f"--visibility-bind-address=127.0.0.1:{c.ports['agent-visibility']}"]
                    ),
                ],
                env=project_env(),
            )
        for c in self.agent_clusters():
            procs = self.procs(c.name, component)
            wait_for(
                f"{c.name} {component} /readyz",
                lambda c=c: http_ok(f"http://127.0.0.1:{c.ports['agent-health']}/readyz"),
                90,
                interval=0.5,
                procs=procs,
            )
            try:
                wait_for(
                    f"{c.name} {component} webhook TLS port",
                    lambda c=c: tls_port_open(c.ports["agent-webhook"]),
                    30,
                    procs=procs,
                )
            except FleetError as e:
                raise FleetError(
                    f"{e}: the worker_agent is ready but serves no webhooks on 127.0.0.1:"
                    f"{c.ports['agent-webhook']} (is setup_webhooks wired into worker_agent/agent.py?); "
                    f"log {procs[0]['log']}"
                ) from e
            kubectl = self.kubectl(c)
            ca_bundle = self.agent_ca_bundle(kubectl)
            self.wait_conversion_ca(c, kubectl, ca_bundle, component)
            if webhooks_only:
                continue
            kubectl.apply(self.agent_webhook_configs(c, ca_bundle))
            kubectl.apply(visibility_api_objects(c.ports["agent-visibility"], ca_bundle))
            kubectl.apply(
                [
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta1",
                        "kind": "ResourceFlavor",
                        "metadata": {"name": DEFAULT_FLAVOR},
                        "spec": {},
                    }
                ]
            )
        for c in self.agent_clusters():
            if not webhooks_only:
                self.wait_visibility_available(c)
        self.state.save()

    def wait_visibility_available(self, c: ClusterPlan) -> None:
        """Until the aggregator has reached the agent's visibility API (APIService Available)."""
        kubectl = self.kubectl(c)

        def available() -> bool:
            return all(apiservice_available(kubectl, f"{v}.{VISIBILITY_GROUP}") for v in VISIBILITY_VERSIONS)

        wait_for(
            f"{c.name}: APIService {VISIBILITY_GROUP} Available",
            available,
            120,
            interval=0.5,
            procs=self.procs(c.name, AGENT_COMPONENT),
        )

    def wait_conversion_ca(self, c: ClusterPlan, kubectl: Kubectl, ca_bundle: str, component: str) -> None:
        """Until the agent has put its CA into our CRDs' conversion webhook, v1beta1 requests fail."""

        def injected() -> bool:
            crds = kubectl.get_json("crd", "-l", "app.kubernetes.io/part-of=kueue-federation")
            configs = [
                ((i["spec"].get("conversion") or {}).get("webhook") or {}).get("clientConfig") or {}
                for i in crds.get("items", [])
            ]
            return bool(configs) and all(cfg.get("caBundle") == ca_bundle for cfg in configs)

        wait_for(
            f"{c.name}: the CRDs' conversion webhook CA",
            injected,
            60,
            procs=self.procs(c.name, component),
        )

    def agent_ca_bundle(self, kubectl: Kubectl) -> str:
        """The CA the agent keeps in its Secret (base64, as caBundle wants it)."""
        found: dict[str, str] = {}

        def present() -> bool:
            res = kubectl("get", "secret", "-n", AGENT_NAMESPACE, AGENT_SECRET, "-o", "json", check=False)
            if res.returncode == 0:
                found["ca"] = (json.loads(res.stdout).get("data") or {}).get("ca.crt", "")
            return bool(found.get("ca"))

        wait_for(f"Secret {AGENT_NAMESPACE}/{AGENT_SECRET}", present, 30)
        return found["ca"]

    def agent_webhook_configs(self, c: ClusterPlan, ca_bundle: str) -> list[dict]:
        """deploy/webhooks with each Service clientConfig turned into a URL on the local agent."""
        docs = []
        for f in sorted(OUR_WEBHOOKS.glob("*.yaml")):
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d and d.get("kind") in WEBHOOK_KINDS]
        for doc in docs:
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{c.ports['agent-webhook']}{path}",
                    "caBundle": ca_bundle,
                }
        return docs

    # -- upstream Kueue (--upstream-kueue CLUSTER) ---------------------------------------------------

    def upstream_etc_upper(self, c: ClusterPlan) -> Path:
        """The upper layer of the private /etc upstream Kueue sees (an overlay on the real /etc)."""
        return c.dir / "kueue-etc" / "upper"

    def upstream_webhook_url(self, c: ClusterPlan, path: str) -> str:
        return f"https://127.0.0.1:{c.ports['kueue-webhook']}{path}"

    def upstream_crds(self, c: ClusterPlan) -> list[dict]:
        """Upstream's CRDs (v1beta2 stored, v1beta1 served), with the conversion webhook its kustomization
        adds to some of them pointed at the local process and the fleet's CA."""
        converted = set(self.bins.kueue_conversion_crds.read_text().split())
        docs = crd_docs(self.bins.kueue_crds)
        for doc in docs:
            if doc["metadata"]["name"] in converted:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {
                            "url": self.upstream_webhook_url(c, "/convert"),
                            "caBundle": b64(self.ca.cert_pem),
                        },
                        "conversionReviewVersions": ["v1"],
                    },
                }
        return docs

    def upstream_webhook_configs(self, c: ClusterPlan) -> list[dict]:
        """Upstream's webhook configurations (names kept), each Service clientConfig turned into a URL on
        the local process with the fleet's CA. Webhooks on workload kinds (pods, Jobs, LWS, ...) leave out
        kube-system and kueue-system, as upstream's webhook kustomization does."""
        docs = [d for d in yaml.safe_load_all(self.bins.kueue_webhooks.read_text()) if d]
        for doc in docs:
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": self.upstream_webhook_url(c, path),
                    "caBundle": b64(self.ca.cert_pem),
                }
                groups = {g for rule in hook.get("rules") or () for g in rule.get("apiGroups") or ()}
                if "kueue.x-k8s.io" not in groups:
                    hook["namespaceSelector"] = {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "NotIn",
                                "values": ["kube-system", AGENT_NAMESPACE],
                            }
                        ]
                    }
        return docs

    def upstream_config(self, c: ClusterPlan) -> dict:
        """A config.kueue.x-k8s.io/v1beta2 Configuration for upstream's kueue on 127.0.0.1: certificates
        from the fleet's CA (internalCertManagement off), no leader election, the agents' frameworks,
        the controller concurrency of upstream's shipped configuration, MultiKueue's defaults
        (workerLostTimeout as our manager's)."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": AGENT_NAMESPACE,
            "manageJobsWithoutQueueName": False,
            "leaderElection": {"leaderElect": False},
            "controller": {"groupKindConcurrency": dict(UPSTREAM_KUEUE_GROUP_KIND_CONCURRENCY)},
            "internalCertManagement": {"enable": False},
            "webhook": {
                "host": "127.0.0.1",
                "port": c.ports["kueue-webhook"],
                "certDir": str(c.dir / "kueue-certs"),
            },
            "metrics": {"bindAddress": f"127.0.0.1:{c.ports['kueue-metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{c.ports['kueue-health']}"},
            "integrations": {"frameworks": AGENT_FRAMEWORKS},
            "multiKueue": {
                "gcInterval": "1m",
                "origin": MULTIKUEUE_ORIGIN,
                "workerLostTimeout": self.opts.worker_lost_timeout,
                **self.dispatcher_setting(),
            },
            **self.client_connection(),
            **self.opts.upstream_kueue_config,
        }

    def upstream_command(self, c: ClusterPlan, config: Path) -> list[str]:
        """kueue in a private mount namespace whose /etc is an overlay holding the metrics certificate
        upstream reads from a fixed path; the shell execs kueue, so the supervisor signals kueue itself."""
        etc = c.dir / "kueue-etc"
        (etc / "work").mkdir(parents=True, exist_ok=True)
        unshare = shutil.which("unshare")
        if not unshare:
            raise FleetError(
                "`unshare` (util-linux) is missing: --upstream-kueue needs it for a private /etc"
            )
        namespaces = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in UPSTREAM_KUEUE_FEATURE_GATES.items())
        return [
            unshare,
            *namespaces,
            "--propagation=private",
            "sh",
            "-c",
            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"',
            "kueue-private-etc",
            str(self.upstream_etc_upper(c)),
            str(etc / "work"),
            str(self.bins.path("kueue")),
            f"--kubeconfig={c.dir / 'admin.kubeconfig'}",
            f"--config={config}",
            f"--feature-gates={gates}",
            "--zap-log-level=info",
        ]

    def start_upstream_kueue(self) -> None:
        """Upstream's kueue on each cluster `--upstream-kueue` names; once ready, its webhook
        configurations and a ResourceFlavor `default-flavor` (as the agents' start creates)."""
        chosen = [c for c in self.clusters if self.runs_upstream(c)]
        version = self.bins.versions["KUEUE_VERSION"]
        self.step(f"starting upstream Kueue {version} on {', '.join(c.name for c in chosen)}")
        for c in chosen:
            config = self.upstream_config(c)
            cfg = write_file(c.dir / "upstream-kueue-config.yaml", yaml.safe_dump(config), 0o644)
            if c.name == MANAGER:
                # Upstream's MultiKueue manager reads the worker Secrets from its config namespace.
                self.state.cluster(c.name)["multikueueSecretsNamespace"] = config["namespace"]
            self.state.cluster(c.name)["upstreamKueue"] = {
                "version": self.bins.versions["KUEUE_VERSION"],
                "config": str(cfg),
                "health": f"http://127.0.0.1:{c.ports['kueue-health']}",
                "metrics": f"https://127.0.0.1:{c.ports['kueue-metrics']}/metrics",
                "webhook": f"https://127.0.0.1:{c.ports['kueue-webhook']}",
            }
            self.state.start(
                c.name,
                UPSTREAM_KUEUE_COMPONENT,
                self.upstream_command(c, cfg),
                program=str(self.bins.path("kueue")),
            )
        for c in chosen:
            wait_for(
                f"{c.name} upstream Kueue /readyz",
                lambda c=c: http_ok(f"http://127.0.0.1:{c.ports['kueue-health']}/readyz"),
                120,
                interval=0.5,
                procs=self.procs(c.name, UPSTREAM_KUEUE_COMPONENT),
            )
            kubectl = self.kubectl(c)
            kubectl.apply(self.upstream_webhook_configs(c))
            kubectl.apply([resource_flavor()])
        self.state.save()

    # -- our federation manager (--manager) ------------------------------------------------------

    def manager_python(self, env: dict[str, str]) -> str:
        """The project's interpreter, checked to find `python -m manager` as the process will run it."""
        python = project_python()
        check = subprocess.run(
            [
                python,
                "-c",
                "import importlib.util as u, sys; sys.exit(0 if u.find_spec('manager.__main__') else 3)",
            ],
            capture_output=True,
            text=True,
            cwd=self.opts.run_dir / MANAGER,
            env={**os.environ, **env},
        )
        if check.returncode == 3:
            raise FleetError(f"{python} finds no manager/__main__.py: `python -m manager` cannot run yet")
        if check.returncode != 0:
            raise FleetError(
                f"{python} cannot import manager ({check.stderr.strip().splitlines()[-1:]}); "
                "run `make venv` and retry"
            )
        return python

    def manager_config(self, c: ClusterPlan) -> dict:
        """A v1beta1 Configuration for `python -m manager`: its own Lease, MultiKueue's defaults, and
        the agents' frameworks (the manager has a MultiKueue adapter only for enabled integrations)."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "namespace": AGENT_NAMESPACE,
            "leaderElection": {
                "leaderElect": True,
                "resourceName": MANAGER_LEASE,
                "resourceNamespace": AGENT_NAMESPACE,
            },
            "metrics": {"bindAddress": f"127.0.0.1:{c.ports['manager-metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{c.ports['manager-health']}"},
            "multiKueue": {
                "gcInterval": "1m",
                "origin": MULTIKUEUE_ORIGIN,
                "workerLostTimeout": self.opts.worker_lost_timeout,
                **self.dispatcher_setting(),
            },
            "integrations": {"frameworks": AGENT_FRAMEWORKS},
            **self.client_connection(),
        }

    def dispatcher_setting(self) -> dict:
        return {"dispatcherName": DISPATCHERS[self.opts.dispatcher]} if self.opts.dispatcher else {}

    def start_manager(self) -> None:
        """One `python -m manager` on the manager cluster. It creates no MultiKueue objects:
        `setup-multikueue` does."""
        self.step("starting the federation manager on the manager cluster")
        c = next(c for c in self.clusters if c.name == MANAGER)
        env = project_env()
        python = self.manager_python(env)
        for name in ("manager-metrics", "manager-health"):
            c.ports[name] = free_port()
        config = self.manager_config(c)
        cfg = write_file(c.dir / "manager-config.yaml", yaml.safe_dump(config), 0o644)
        # Where it reads the worker Secrets: its config namespace.
        self.state.cluster(c.name)["multikueueSecretsNamespace"] = config["namespace"]
        self.state.cluster(c.name)["manager"] = {
            "config": str(cfg),
            "health": f"http://127.0.0.1:{c.ports['manager-health']}",
            "metrics": f"https://127.0.0.1:{c.ports['manager-metrics']}/metrics",
        }
        record = self.state.start(
            c.name,
            MANAGER_COMPONENT,
            [
                python,
                "-m",
                "manager",
                f"--kubeconfig={c.dir / 'admin.kubeconfig'}",
                f"--config={cfg}",
                f"--metrics-bind-address={config['metrics']['bindAddress']}",
                f"--health-probe-bind-address={config['health']['healthProbeBindAddress']}",
                "--log-format=console",
            ],
            env=env,
        )
        wait_for(
            f"{c.name} manager /readyz",
            lambda: http_ok(f"http://127.0.0.1:{c.ports['manager-health']}/readyz"),
            90,
            interval=0.5,
            procs=[record],
        )

    # -- LeaderWorkerSet controller -------------------------------------------------------------

    def runs_lws(self, c: ClusterPlan) -> bool:
        """Workers run the LWS controller; so does a manager running upstream Kueue, whose MultiKueue
        setup has LWS installed on the manager: only LWS's webhook defaults a manager LWS there."""
        return runs_pods(c, self.opts.light_workers) or (c.name == MANAGER and self.runs_upstream(c))

    def start_lws(self) -> None:
        workers = [c for c in self.clusters if self.runs_lws(c)]
        if not workers:  # `up --workers 0`: a manager cluster only
            return
        self.step(f"starting the LeaderWorkerSet controller on {', '.join(c.name for c in workers)}")
        for c in workers:
            self.kubectl(c)("create", "namespace", "lws-system", check=False)
            config = {
                "apiVersion": "config.lws.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {
                    "port": c.ports["lws-webhook"],
                    "host": "127.0.0.1",
                    "certDir": str(c.dir / "lws-certs"),
                },
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{c.ports['lws-health']}"},
            }
            cfg = write_file(c.dir / "lws-config.yaml", yaml.safe_dump(config), 0o644)
            self.state.start(
                c.name,
                "lws-manager",
                [str(self.bins.path("lws-manager")), f"--config={cfg}", "--zap-log-level=info"],
                env={"KUBECONFIG": str(c.dir / "admin.kubeconfig")},
            )
        for c in workers:
            wait_for(
                f"{c.name} LWS webhook TLS port",
                lambda c=c: tls_port_open(c.ports["lws-webhook"]),
                60,
                procs=self.procs(c.name, "lws-manager"),
            )
            self.kubectl(c).apply(self.lws_webhook_configs(c))

    def lws_webhook_configs(self, c: ClusterPlan) -> list[dict]:
        """LWS's webhook manifests, pointed at the local process and its CA (as envtest rewrites them)."""
        docs = [d for d in yaml.safe_load_all(self.bins.lws_webhooks.read_text()) if d]
        for doc in docs:
            doc["metadata"]["name"] = "lws-" + doc["metadata"]["name"]
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{c.ports['lws-webhook']}{path}",
                    "caBundle": b64(self.ca.cert_pem),
                }
                # LWS's kustomize overlay limits its pod webhooks to pods that belong to an LWS.
                if any("pods" in r.get("resources", []) for r in hook.get("rules", [])):
                    hook["objectSelector"] = {
                        "matchExpressions": [
                            {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}
                        ]
                    }
        return docs

    # -- the manager's identity on workers ------------------------------------------------------

    def grant_multikueue_identity(self) -> None:
        workers = [c for c in self.clusters if c.is_worker]
        if not workers:
            return
        self.step("writing the manager's kubeconfig and RBAC on each worker")
        role_docs = [d for d in yaml.safe_load_all(MULTIKUEUE_ROLE_FILE.read_text()) if d]
        role_name = next(d["metadata"]["name"] for d in role_docs if d["kind"] == "ClusterRole")
        for c in workers:
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role_name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role_name,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MULTIKUEUE_USER}
                ],
            }
            self.kubectl(c).apply([*role_docs, binding])
            crt, key = self.ca.issue(MULTIKUEUE_USER)
            server = self.state.cluster(c.name)["server"]
            path = write_file(
                c.dir / "multikueue.kubeconfig",
                yaml.safe_dump(kubeconfig(c.name, server, self.ca.cert_pem, crt, key, MULTIKUEUE_USER)),
            )
            self.state.cluster(c.name)["multikueueKubeconfig"] = str(path)
        self.state.save()

    # -- smoke check ----------------------------------------------------------------------------

    def smoke_check(self) -> None:
        worker = next((c for c in self.clusters if c.is_worker), None)
        if worker is None:
            return
        self.step(f"smoke check: an LWS (replicas 1, size 2) on {worker.name} must become ready")
        kubectl = self.kubectl(worker)
        lws = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "localfleet-smoke", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 2,
                    "workerTemplate": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "100m"}},
                                }
                            ]
                        }
                    },
                },
            },
        }
        kubectl("apply", "-f", "-", input=json.dumps(lws))

        def ready() -> bool:
            res = kubectl(
                "get", "lws", "localfleet-smoke", "-o", "jsonpath={.status.readyReplicas}", check=False
            )
            return res.stdout.strip() == "1"

        try:
            wait_for(
                "the smoke LWS to reach readyReplicas=1",
                ready,
                120,
                interval=1,
                procs=[p for p in self.state.data["processes"] if p["cluster"] == worker.name],
            )
        except FleetError as e:
            pods = kubectl("get", "pods", "-o", "wide", check=False).stdout
            raise FleetError(f"{e}\npods on {worker.name}:\n{pods}") from e
        kubectl("delete", "lws", "localfleet-smoke", "--wait=true", "--timeout=60s")
        self.step("smoke check passed")


# ----------------------------------------------------------------------------------------------
# setup-multikueue: the objects of the MultiKueue setup guide
# ----------------------------------------------------------------------------------------------

# A worker's quota when state.json does not record its capacity: the default 4 nodes x 8 CPU / 32Gi.
DEFAULT_WORKER_CAPACITY = {"cpu": "32", "memory": "128Gi"}
# MultiKueueConfig.spec.clusters lists at most this many clusters (maxItems in the CRD).
MAX_MULTIKUEUE_CLUSTERS = 20


@dataclass(frozen=True)
class WorkerSetup:
    """What setup-multikueue needs to know about one worker."""

    name: str
    cpu: str
    memory: str
    multikueue_kubeconfig: str  # the content of <worker>/multikueue.kubeconfig


def visibility_api_objects(port: int, ca_bundle: str) -> list[dict]:
    """The Service and APIServices that put the agent's visibility API (on 127.0.0.1:`port`) behind a
    local apiserver. A Service of type ExternalName: with --enable-aggregator-routing off (the
    default) the aggregator resolves it to https://<externalName>:<the APIService's port> and checks
    the certificate for <service>.<namespace>.svc, which the agent's certificate names."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": VISIBILITY_SERVICE, "namespace": AGENT_NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    apiservices = [
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.{VISIBILITY_GROUP}"},
            "spec": {
                "group": VISIBILITY_GROUP,
                "version": version,
                "groupPriorityMinimum": 100,
                "versionPriority": 100 if version == VISIBILITY_VERSIONS[0] else 90,
                "service": {"name": VISIBILITY_SERVICE, "namespace": AGENT_NAMESPACE, "port": port},
                "caBundle": ca_bundle,
            },
        }
        for version in VISIBILITY_VERSIONS
    ]
    return [service, *apiservices]


def apiservice_available(kubectl: Kubectl, name: str) -> bool:
    res = kubectl("get", "apiservice", name, "-o", "json", check=False)
    if res.returncode != 0:
        return False
    conditions = (json.loads(res.stdout).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)


def multikueue_cluster_name(worker: str) -> str:
    """The MultiKueueCluster of a fleet worker, named as the setup guide names it
    (`multikueue-test-worker1`); its Secret keeps the guide's `worker1-secret`."""
    return f"{SETUP_MULTIKUEUE_CONFIG}-{worker}"


def fleet_worker(cluster_name: str) -> str:
    """The fleet worker behind a MultiKueueCluster name (a Workload's clusterName): the inverse of
    multikueue_cluster_name; a name without the guide's prefix is returned as it is."""
    return cluster_name.removeprefix(f"{SETUP_MULTIKUEUE_CONFIG}-")


def resource_flavor() -> dict:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": DEFAULT_FLAVOR},
        "spec": {},
    }


def cluster_queue(cpu: str, memory: str, admission_checks: list[str] | None = None) -> dict:
    spec: dict = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": DEFAULT_FLAVOR,
                        "resources": [
                            {"name": "cpu", "nominalQuota": cpu},
                            {"name": "memory", "nominalQuota": memory},
                        ],
                    }
                ],
            }
        ],
    }
    if admission_checks:
        spec["admissionChecks"] = admission_checks
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": SETUP_CLUSTER_QUEUE},
        "spec": spec,
    }


def local_queue() -> dict:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": SETUP_LOCAL_QUEUE, "namespace": SETUP_NAMESPACE},
        "spec": {"clusterQueue": SETUP_CLUSTER_QUEUE},
    }


def runs_a_multikueue_manager(manager_cluster: dict) -> bool:
    """Our manager or upstream Kueue (which includes its MultiKueue manager) runs on the manager cluster."""
    return MANAGER_COMPONENT in manager_cluster or "upstreamKueue" in manager_cluster


def multikueue_setup_objects(
    workers: list[WorkerSetup], secrets_namespace: str = AGENT_NAMESPACE
) -> list[tuple[str, list[dict]]]:
    """(cluster, objects) to apply, workers first: a worker's queues exist before the manager can
    dispatch to it. Each worker's ClusterQueue offers what its nodes have; the manager's, their sum.
    The worker Secrets go to `secrets_namespace`, where the manager in charge reads them."""
    plan: list[tuple[str, list[dict]]] = [
        (w.name, [resource_flavor(), cluster_queue(w.cpu, w.memory), local_queue()]) for w in workers
    ]
    manager_objects: list[dict] = [resource_flavor()]
    for w in workers:
        manager_objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{w.name}-secret", "namespace": secrets_namespace},
                "type": "Opaque",
                "data": {"kubeconfig": b64(w.multikueue_kubeconfig.encode())},
            }
        )
    for w in workers:
        manager_objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueCluster",
                "metadata": {"name": multikueue_cluster_name(w.name)},
                "spec": {"kubeConfig": {"locationType": "Secret", "location": f"{w.name}-secret"}},
            }
        )
    manager_objects += [
        {
            "apiVersion": KUEUE_API,
            "kind": "MultiKueueConfig",
            "metadata": {"name": SETUP_MULTIKUEUE_CONFIG},
            "spec": {"clusters": [multikueue_cluster_name(w.name) for w in workers]},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "AdmissionCheck",
            "metadata": {"name": SETUP_ADMISSION_CHECK},
            "spec": {
                "controllerName": MULTIKUEUE_CONTROLLER,
                "parameters": {
                    "apiGroup": KUEUE_API.split("/")[0],
                    "kind": "MultiKueueConfig",
                    "name": SETUP_MULTIKUEUE_CONFIG,
                },
            },
        },
        cluster_queue(
            sum_quantities(w.cpu for w in workers),
            sum_quantities(w.memory for w in workers),
            admission_checks=[SETUP_ADMISSION_CHECK],
        ),
        local_queue(),
    ]
    plan.append((MANAGER, manager_objects))
    return plan


def sample_job() -> dict:
    """A small Job for user-queue (examples/multikueue/sample-job.yaml); kwok runs its pod on a fake node."""
    return yaml.safe_load(SAMPLE_JOB_FILE.read_text())


def next_steps(localfleet_cmd: str, workers: list[str]) -> str:
    """What to run after setup-multikueue: submit a Job on the manager and watch where it runs."""
    job = yaml.safe_dump(sample_job(), sort_keys=False).rstrip("\n")
    manager = 'kubectl --kubeconfig "$KUBECONFIG_MANAGER"'
    lines = [
        f"MultiKueue is set up: Jobs in {SETUP_NAMESPACE}/{SETUP_LOCAL_QUEUE} on the manager run on "
        f"{' or '.join(workers)} (ClusterQueue {SETUP_CLUSTER_QUEUE}, "
        f"admission check {SETUP_ADMISSION_CHECK}).",
        "",
        "Next steps:",
        "",
        f'eval "$({localfleet_cmd} env)"',
        "",
        "# Submit a Job on the manager:",
        f"{manager} create -f - <<'EOF'",
        job,
        "EOF",
        "",
        "# Watch it: its Workload and Job on the manager, the Job's copy on the worker that runs it:",
        f"{manager} get workloads,jobs -n {SETUP_NAMESPACE}",
        *[
            f'kubectl --kubeconfig "$KUBECONFIG_WORKER{i}" get jobs -n {SETUP_NAMESPACE}'
            for i in range(1, len(workers) + 1)
        ],
        "",
        "# The worker connections, the admission check and the queues:",
        f"{manager} get multikueueclusters,admissionchecks,clusterqueues",
        "",
        "# The setup guide's checks (each prints Active: True):",
        *guide_checks(manager, workers),
    ]
    return "\n".join(lines)


def guide_checks(kubectl: str, workers: list[str]) -> list[str]:
    """The setup guide's commands that print the Active condition of the ClusterQueue (CQ), the
    AdmissionCheck (AC) and each MultiKueueCluster (MC), as one line each."""

    def active(prefix: str, resource: str, name: str) -> str:
        jsonpath = (
            '{range .status.conditions[?(@.type == \\"Active\\")]}'
            f"{prefix} - Active: {{@.status}} Reason: {{@.reason}} Message: {{@.message}}{{'\\n'}}{{end}}"
        )
        return f'{kubectl} get {resource} {name} -o jsonpath="{jsonpath}"'

    return [
        active("CQ", "clusterqueues", SETUP_CLUSTER_QUEUE),
        active("AC", "admissionchecks", SETUP_ADMISSION_CHECK),
        *(active("MC", "multikueuecluster", multikueue_cluster_name(w)) for w in workers),
    ]


def localfleet_command(run_dir: Path) -> str:
    """How the user runs this script again for the same fleet."""
    script = Path("hack/localfleet.py") if Path.cwd().resolve() == REPO else REPO / "hack" / "localfleet.py"
    cmd = f"python3 {script}"
    return cmd if run_dir.resolve() == DEFAULT_RUN_DIR.resolve() else f"{cmd} --dir {run_dir}"


def setup_multikueue(state: State) -> None:
    """Apply the setup guide's objects (idempotent: server-side apply) and print the next steps."""
    clusters = state.data["clusters"]
    if not runs_a_multikueue_manager(clusters.get(MANAGER, {})):
        raise FleetError(
            f"the fleet in {state.run_dir} runs no federation manager: start it with "
            "`up --agents --manager` (or `up --setup-multikueue`), then run setup-multikueue"
        )
    workers = [(name, c) for name, c in clusters.items() if c["role"] == "worker"]
    if not workers:
        raise FleetError(f"the fleet in {state.run_dir} has no workers (`up --workers N`, N >= 1)")
    if len(workers) > MAX_MULTIKUEUE_CLUSTERS:
        raise FleetError(
            f"the fleet in {state.run_dir} has {len(workers)} workers; a MultiKueueConfig lists at most "
            f"{MAX_MULTIKUEUE_CLUSTERS} clusters"
        )
    setups = []
    for name, c in workers:
        path = Path(c.get("multikueueKubeconfig") or state.run_dir / name / "multikueue.kubeconfig")
        if not path.is_file():
            raise FleetError(f"{path} is missing: the manager's identity on {name} was not written")
        capacity = c.get("capacity") or DEFAULT_WORKER_CAPACITY
        setups.append(WorkerSetup(name, capacity["cpu"], capacity["memory"], path.read_text()))
    bins = Binaries(state.data.get("versions") or read_versions())
    log("setting up MultiKueue (the setup guide's objects)")
    secrets_namespace = clusters[MANAGER].get("multikueueSecretsNamespace", AGENT_NAMESPACE)
    for cluster, docs in multikueue_setup_objects(setups, secrets_namespace):
        applied = Kubectl(bins.path("kubectl"), clusters[cluster]["kubeconfig"]).apply(docs)
        log(f"  {cluster}: {', '.join(line.split()[0] for line in applied if line.strip())}")
    print(next_steps(localfleet_command(state.run_dir), [name for name, _ in workers]))


# ----------------------------------------------------------------------------------------------
# sample-lws: the sample LeaderWorkerSet on the manager, every group on one worker
# ----------------------------------------------------------------------------------------------


def sample_lws_manifest(text: str, source: str = "the sample") -> dict:
    """The sample's LeaderWorkerSet, in `default` unless it names a namespace. It must be queued in
    user-queue: without that label Kueue ignores it, and the manager cluster never runs its pods."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise FleetError(f"{source} is not valid YAML: {e}") from None
    lws = next((d for d in docs if isinstance(d, dict) and d.get("kind") == "LeaderWorkerSet"), None)
    if lws is None or not (lws.get("metadata") or {}).get("name"):
        raise FleetError(f"{source} holds no LeaderWorkerSet with a metadata.name")
    lws["metadata"].setdefault("namespace", SETUP_NAMESPACE)
    queue = (lws["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL)
    if queue != SETUP_LOCAL_QUEUE:
        raise FleetError(
            f"{source}: the LeaderWorkerSet must carry the label {QUEUE_NAME_LABEL}: {SETUP_LOCAL_QUEUE} "
            f"(the fleet's LocalQueue), not {queue!r}"
        )
    return lws


def lws_replicas(lws: dict) -> int:
    value = (lws.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def sample_lws_placement(lws: dict) -> str | None:
    """The fleet worker a manager LWS runs on, once the manager shows every group ready there."""
    cluster = (lws["metadata"].get("annotations") or {}).get(ANNOTATION_WORKER_CLUSTER)
    ready = (lws.get("status") or {}).get("readyReplicas") or 0
    return fleet_worker(cluster) if cluster and ready == lws_replicas(lws) else None


def upstream_lws_placement(state: State, bins: Binaries, lws: dict) -> str | None:
    """Upstream's manager neither annotates a manager LWS with its worker nor mirrors its status:
    the worker is the clusterName all of its Workloads are admitted on, once the LWS there is ready."""
    clusters = state.data["clusters"]
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    manager = Kubectl(bins.path("kubectl"), clusters[MANAGER]["kubeconfig"])
    res = manager("get", "workloads", "-n", namespace, "-o", "json", check=False)
    if res.returncode != 0:
        return None
    owned = [
        wl
        for wl in json.loads(res.stdout)["items"]
        if (wl["metadata"].get("annotations") or {}).get("kueue.x-k8s.io/job-owner-name") == name
    ]
    workers = {(wl.get("status") or {}).get("clusterName") for wl in owned}
    if len(owned) != lws_replicas(lws) or len(workers) != 1 or None in workers:
        return None
    worker = fleet_worker(workers.pop())
    if worker not in clusters:
        return worker  # sample_lws names the unknown worker
    res = Kubectl(bins.path("kubectl"), clusters[worker]["kubeconfig"])(
        "get", "lws", name, "-n", namespace, "-o", "jsonpath={.status.readyReplicas}", check=False
    )
    return worker if res.returncode == 0 and res.stdout.strip() == str(lws_replicas(lws)) else None


def describe_lws_workloads(lws_name: str, workloads: list[dict]) -> str:
    """One line per Workload of the LWS on the manager: conditions, admission checks, cluster."""
    lines = []
    for wl in workloads:
        meta, status = wl["metadata"], wl.get("status") or {}
        if (meta.get("annotations") or {}).get("kueue.x-k8s.io/job-owner-name") != lws_name:
            continue
        conditions = ", ".join(
            f"{c['type']}={c['status']}" + (f" ({c.get('message')})" if c.get("message") else "")
            for c in status.get("conditions") or ()
        )
        checks = ", ".join(
            f"{c['name']}={c.get('state')}" + (f" ({c.get('message')})" if c.get("message") else "")
            for c in status.get("admissionChecks") or ()
        )
        lines.append(
            f"  {meta['name']}: {conditions or 'no conditions'}; checks: {checks or 'none'}; "
            f"clusterName: {status.get('clusterName') or '-'}"
        )
    return "\n".join(lines) or f"  no Workload of {lws_name} on the manager (is the manager's agent running?)"


def sample_lws_next_steps(
    localfleet_cmd: str,
    lws: dict,
    worker: str,
    worker_env_index: int,
    running_pods: int,
    upstream_manager: bool = False,
) -> str:
    """Where the sample runs and how to look at it from the manager and from its worker."""
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    manager = 'kubectl --kubeconfig "$KUBECONFIG_MANAGER"'
    on_worker = f'kubectl --kubeconfig "$KUBECONFIG_WORKER{worker_env_index}"'
    annotation = ANNOTATION_WORKER_CLUSTER.replace(".", "\\.")
    columns = (
        "NAME:.metadata.name,REPLICAS:.spec.replicas,READY:.status.readyReplicas,"
        f"WORKER:.metadata.annotations.{annotation}"
    )
    replicas = lws_replicas(lws)
    return "\n".join(
        [
            f"The sample LeaderWorkerSet {namespace}/{name} runs on {worker}: {replicas}/{replicas} groups "
            f"ready, {running_pods} pods running there "
            + (
                "(on the manager, upstream Kueue keeps the LWS controller's pods scheduling-gated)."
                if upstream_manager
                else "(the manager cluster runs no LWS controller, so no pods)."
            ),
            "",
            f'eval "$({localfleet_cmd} env)"',
            "",
            "# On the manager: the LWS (with the worker's status and the worker's name) and one Workload "
            "per group:",
            f"{manager} get lws,workloads -n {namespace}",
            f"{manager} get lws {name} -n {namespace} -o custom-columns='{columns}'",
            "",
            f"# On {worker}, where it runs: the LWS copy and its pods:",
            f"{on_worker} get lws,pods -n {namespace}",
            "",
            f"# Remove it (the manager removes the copy, its pods and Workloads on {worker}):",
            f"{manager} delete lws {name} -n {namespace}",
        ]
    )


def sample_lws(state: State, path: Path = SAMPLE_LWS_FILE, timeout: float = SAMPLE_LWS_TIMEOUT) -> str:
    """Create the sample LWS on the manager (server-side apply: again changes nothing), wait until the
    manager's LWS shows every group ready on one worker, and print how to look at it. Returns that
    worker."""
    if not path.is_file():
        raise FleetError(f"no LeaderWorkerSet manifest at {path}")
    clusters = state.data["clusters"]
    if not runs_a_multikueue_manager(clusters.get(MANAGER, {})):
        raise FleetError(
            f"the fleet in {state.run_dir} runs no federation manager: start it with "
            "`up --setup-multikueue`, then run sample-lws"
        )
    workers = [name for name, c in clusters.items() if c["role"] == "worker"]
    lws = sample_lws_manifest(path.read_text(), str(path))
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    bins = Binaries(state.data.get("versions") or read_versions())
    manager = Kubectl(bins.path("kubectl"), clusters[MANAGER]["kubeconfig"])
    t0 = time.monotonic()
    log(f"creating the sample LeaderWorkerSet {namespace}/{name} on the manager ({path})")
    manager.apply([lws])
    found: dict = {}

    upstream_manager = "upstreamKueue" in clusters[MANAGER]

    def placed() -> bool:
        if upstream_manager:
            found["worker"] = upstream_lws_placement(state, bins, lws)
            return found["worker"] is not None
        res = manager("get", "lws", name, "-n", namespace, "-o", "json", check=False)
        found["worker"] = sample_lws_placement(json.loads(res.stdout)) if res.returncode == 0 else None
        return found["worker"] is not None

    try:
        wait_for(
            f"the manager's LWS {namespace}/{name} to show readyReplicas={lws_replicas(lws)} and "
            f"the annotation {ANNOTATION_WORKER_CLUSTER}",
            placed,
            timeout,
            interval=1,
            procs=[p for p in state.data["processes"] if p["component"] in KUEUE_COMPONENTS],
        )
    except FleetError as e:
        res = manager("get", "workloads", "-n", namespace, "-o", "json", check=False)
        items = json.loads(res.stdout)["items"] if res.returncode == 0 else []
        raise FleetError(
            f"{e}\nits Workloads on the manager:\n{describe_lws_workloads(name, items)}\n"
            f"logs: {state.run_dir}/{MANAGER}/{MANAGER_COMPONENT}.log, <cluster>/{AGENT_COMPONENT}.log"
        ) from None
    worker = found["worker"]
    if worker not in workers:
        raise FleetError(f"the manager's LWS names {worker!r} as its worker, which is not one of {workers}")
    pods = Kubectl(bins.path("kubectl"), clusters[worker]["kubeconfig"]).get_json(
        "pods", "-n", namespace, "-l", f"{LWS_NAME_LABEL}={name}"
    )["items"]
    running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
    log(f"the sample LeaderWorkerSet is ready on {worker} after {fmt_duration(time.monotonic() - t0)}")
    steps = sample_lws_next_steps(
        localfleet_command(state.run_dir), lws, worker, workers.index(worker) + 1, running, upstream_manager
    )
    print(steps)
    return worker


def go_duration(text: str) -> str:
    """A non-negative Go duration (20s, 1m30s, 0), as the manager's Configuration takes it."""
    value = text.strip()
    if value == "0" or _GO_DURATION.fullmatch(value):
        return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use Go syntax such as 20s, 5m or 1h30m")


_GO_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")


# ----------------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------------


def fleet_is_running(state: State) -> bool:
    return bool(state.data["processes"]) and all(pid_is_ours(p) for p in state.data["processes"])


def cmd_build(args: argparse.Namespace) -> None:
    Builder(Binaries(read_versions())).build_all(
        force=args.force, upstream_kueue=args.upstream_kueue, helm=args.helm, promtool=args.promtool
    )


def cmd_up(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    if args.workers < 0:
        raise FleetError("--workers must be 0 (a manager cluster only) or more")
    if args.setup_multikueue:
        args.agents = args.manager = True
        if args.workers == 0:
            raise FleetError("--setup-multikueue needs at least one worker (--workers N, N >= 1)")
        if args.workers > MAX_MULTIKUEUE_CLUSTERS:
            raise FleetError(
                f"--setup-multikueue: at most {MAX_MULTIKUEUE_CLUSTERS} workers (a MultiKueueConfig lists "
                f"at most {MAX_MULTIKUEUE_CLUSTERS} clusters)"
            )
    if args.manager and not args.agents:
        raise FleetError(
            "--manager requires --agents: the manager dispatches Workloads that the worker_agents admit "
            "(use `up --agents --manager`)"
        )
    upstream = upstream_kueue_clusters(args.upstream_kueue or [], args.workers)
    bins = Binaries(read_versions())
    opts = FleetOptions(
        workers=args.workers,
        nodes=args.nodes,
        node_cpu=args.node_cpu,
        node_memory=args.node_memory,
        node_pods=args.node_pods,
        smoke=not args.no_smoke,
        agents=args.agents,
        manager=args.manager,
        setup_multikueue=args.setup_multikueue,
        run_dir=Path(args.dir),
        client_qps=args.client_qps,
        client_burst=args.client_burst,
        worker_lost_timeout=args.worker_lost_timeout,
        dispatcher=args.dispatcher,
        upstream_kueue=upstream,
        upstream_kueue_config=upstream_kueue_config(args.upstream_kueue_config, upstream),
        shared_etcd=args.shared_etcd,
        light_workers=args.light_workers,
    )
    existing = State.load(opts.run_dir)
    if existing and existing.data.get("status") == "up" and fleet_is_running(existing):
        log(f"a fleet is already up in {opts.run_dir}; `down` first to start a new one")
        return
    if existing or opts.run_dir.exists():
        log(f"cleaning up a previous run in {opts.run_dir}")
        down(opts.run_dir)
    Builder(bins).build_all(upstream_kueue=bool(upstream))
    fleet = FleetUp(opts, bins)
    try:
        fleet.run()
        if opts.setup_multikueue:
            setup_multikueue(fleet.state)
    except BaseException:
        log(f"fleet start failed; logs are in {opts.run_dir}/<cluster>/<component>.log")
        if not args.keep_on_failure:
            stop_processes(fleet.state.data["processes"])
            fleet.state.data["status"] = "failed"
            fleet.state.save()
        raise
    if opts.setup_multikueue and not args.no_sample and opts.light_workers:
        log("no sample LeaderWorkerSet: --light-workers run no pods (`sample-lws` needs a full fleet)")
    elif opts.setup_multikueue and not args.no_sample:
        print()
        try:
            sample_lws(fleet.state)
        except FleetError as e:
            # The fleet itself is up and set up: keep it, so that the logs and objects can be looked at.
            raise FleetError(
                f"{e}\nthe fleet is still up in {opts.run_dir} (`{localfleet_command(opts.run_dir)} down` "
                "stops it)"
            ) from None
    log(f"up finished in {fmt_duration(time.monotonic() - t0)}")


def upstream_kueue_config(path: str | None, upstream: tuple[str, ...]) -> dict:
    """The fields of `--upstream-kueue-config FILE`, checked to be a mapping."""
    if path is None:
        return {}
    if not upstream:
        raise FleetError("--upstream-kueue-config needs --upstream-kueue CLUSTER")
    try:
        fields = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise FleetError(f"--upstream-kueue-config {path}: {e}") from e
    if not isinstance(fields, dict):
        raise FleetError(f"--upstream-kueue-config {path}: not a YAML mapping of Configuration fields")
    return fields


def upstream_kueue_clusters(names: list[str], workers: int) -> tuple[str, ...]:
    """The clusters `--upstream-kueue` names, checked against the fleet's, in fleet order."""
    known = [MANAGER] + [f"worker{i}" for i in range(1, workers + 1)]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise FleetError(
            f"--upstream-kueue {unknown[0]}: not a cluster of this fleet; use one of {', '.join(known)}"
        )
    return tuple(n for n in known if n in names)


def down(run_dir: Path) -> int:
    state = State.load(run_dir)
    stopped = 0
    if state:
        processes = state.data.get("processes", [])
        stopped = sum(1 for p in processes if pid_is_ours(p))
        stop_processes(processes)
    if run_dir.exists():
        shutil.rmtree(run_dir, ignore_errors=True)
    return stopped


def cmd_down(args: argparse.Namespace) -> None:
    run_dir = Path(args.dir)
    if not run_dir.exists():
        log(f"nothing to stop ({run_dir} does not exist)")
        return
    stopped = down(run_dir)
    log(f"stopped {stopped} processes and removed {run_dir}")


def load_running_state(run_dir: Path) -> State:
    state = State.load(run_dir)
    if state is None:
        raise FleetError(f"no fleet in {run_dir}: run `python3 hack/localfleet.py up` first")
    return state


def cmd_setup_multikueue(args: argparse.Namespace) -> None:
    state = load_running_state(Path(args.dir))
    if state.data.get("status") != "up" or not fleet_is_running(state):
        raise FleetError(f"the fleet in {args.dir} is not up (`status` shows what runs); start it with `up`")
    setup_multikueue(state)


def cmd_sample_lws(args: argparse.Namespace) -> None:
    state = load_running_state(Path(args.dir))
    if state.data.get("status") != "up" or not fleet_is_running(state):
        raise FleetError(f"the fleet in {args.dir} is not up (`status` shows what runs); start it with `up`")
    sample_lws(state, Path(args.file), args.timeout)


def cmd_env(args: argparse.Namespace) -> None:
    state = load_running_state(Path(args.dir))
    bins = Binaries(state.data.get("versions") or read_versions())
    lines = []
    worker_index = 0
    for _name, c in state.data["clusters"].items():
        if c["role"] == "manager":
            lines.append(f"export KUBECONFIG_MANAGER={c['kubeconfig']}")
        else:
            worker_index += 1
            lines.append(f"export KUBECONFIG_WORKER{worker_index}={c['kubeconfig']}")
            if "multikueueKubeconfig" in c:
                lines.append(f"export WORKER{worker_index}_MULTIKUEUE_KUBECONFIG={c['multikueueKubeconfig']}")
    upstream = [name for name, c in state.data["clusters"].items() if "upstreamKueue" in c]
    if upstream:
        lines.append(f"export LOCALFLEET_UPSTREAM_KUEUE={','.join(upstream)}")
    lines.append(f"export LOCALFLEET_KUBECONFIG={state.data['mergedKubeconfig']}")
    lines.append(f"export LOCALFLEET_STATE={state.path}")
    lines.append(f'export PATH="{bins.k8s_dir}:$PATH"')
    print("\n".join(lines))


def cmd_status(args: argparse.Namespace) -> None:
    run_dir = Path(args.dir)
    state = State.load(run_dir)
    if state is None:
        print(f"no fleet in {run_dir}")
        return
    print(f"fleet in {run_dir}: {state.data.get('status')}")
    ca = run_dir / "pki" / "ca.crt"
    for name, c in state.data["clusters"].items():
        pki = Path(c["kubeconfig"]).parent / "pki"
        ready = ca.exists() and https_ok(f"{c['server']}/readyz", ca, pki / "admin.crt", pki / "admin.key")
        procs = [p for p in state.data["processes"] if p["cluster"] == name]
        pids = {id(p): child_pid(p) for p in procs}
        total = sum(rss_mib(pid) for pid in pids.values() if pid)
        print(
            f"  {name} ({c['role']}) {c['server']} apiserver {'ready' if ready else 'NOT ready'}, "
            f"RSS {total:.0f} MiB"
        )
        print(f"    {'COMPONENT':<24} {'PID':<8} {'STATE':<9} {'RESTARTS':<9} {'LAST EXIT':<34} RSS")
        for p in procs:
            pid = pids[id(p)]
            alive = pid is not None
            rss = f"{rss_mib(pid):.0f} MiB" if pid else "-"
            extra = ""
            if p["component"] == AGENT_COMPONENT and "agent" in c:
                ready = alive and http_ok(f"{c['agent']['health']}/readyz")
                extra = f"  {'ready' if ready else 'NOT ready'}, webhooks {c['agent']['webhook']}"
                if alive:
                    extra += ", " + metrics_summary(c["agent"]["metrics"], cluster_metrics_token(c))
                if "visibility" in c["agent"]:
                    bins = Binaries(state.data.get("versions") or read_versions())
                    kubectl = Kubectl(bins.path("kubectl"), c["kubeconfig"])
                    available = alive and all(
                        apiservice_available(kubectl, f"{v}.{VISIBILITY_GROUP}") for v in VISIBILITY_VERSIONS
                    )
                    extra += f", visibility API {'Available' if available else 'NOT available'}"
            if p["component"] == MANAGER_COMPONENT and MANAGER_COMPONENT in c:
                ready = alive and http_ok(f"{c['manager']['health']}/readyz")
                metrics = c["manager"]["metrics"]
                shown = metrics_summary(metrics, cluster_metrics_token(c)) if alive else f"metrics {metrics}"
                extra = f"  {'ready' if ready else 'NOT ready'}, {shown}"
            if p["component"] == UPSTREAM_KUEUE_COMPONENT and "upstreamKueue" in c:
                upstream = c["upstreamKueue"]
                ready = alive and http_ok(f"{upstream['health']}/readyz")
                readiness = "ready" if ready else "NOT ready"
                extra = f"  {upstream['version']} {readiness}, webhooks {upstream['webhook']}"
                if alive:
                    extra += ", " + metrics_summary(upstream["metrics"], cluster_metrics_token(c))
            status = supervised_status(p)
            if alive:
                running = "running"
            elif status.get("state") == "waiting" and pid_is_ours(p):
                running = "BACKOFF"  # exited; its supervisor starts it again at nextStartAt
            else:
                running = "STOPPED"
            print(
                f"    {p['component']:<24} {pid or '-'!s:<8} {running:<9} {status.get('restarts', 0)!s:<9} "
                f"{last_exit_text(status):<34} {rss}{extra}"
            )


def last_exit_text(status: dict) -> str:
    """`kubectl get pods`-like: `code 1 (3m ago)`, `SIGKILL (12s ago)`, or `-`."""
    last = status.get("lastExit")
    if not last:
        return "-"
    what = last.get("signal") or (f"code {last['code']}" if "code" in last else last.get("error", "?"))
    at = status.get("lastExitAt")
    if not at:
        return what
    try:
        exited = dt.datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return what
    return f"{what} ({fmt_duration((dt.datetime.now(dt.UTC) - exited).total_seconds())} ago)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="localfleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dir",
        default=os.environ.get("LOCALFLEET_DIR", str(DEFAULT_RUN_DIR)),
        help=f"run directory (default {DEFAULT_RUN_DIR}, or $LOCALFLEET_DIR)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build or reuse the cached binaries")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument(
        "--upstream-kueue",
        action="store_true",
        help="also upstream Kueue's kueue binary and manifests (what `up --upstream-kueue` runs)",
    )
    b.add_argument(
        "--helm",
        action="store_true",
        help="also the helm CLI (HELM_VERSION), for the Helm chart's tests (deploy/helm; docs/helm.md)",
    )
    b.add_argument(
        "--promtool",
        action="store_true",
        help="also promtool (PROMTOOL_VERSION), to check deploy/monitoring's alert rules (docs/metrics.md)",
    )
    u = sub.add_parser("up", help="start a manager and N workers")
    u.add_argument("--workers", type=int, default=2, help="worker clusters (0: the manager cluster only)")
    u.add_argument("--nodes", type=int, default=4, help="fake nodes per worker")
    u.add_argument("--node-cpu", default="8")
    u.add_argument("--node-memory", default="32Gi")
    u.add_argument("--node-pods", default="110")
    u.add_argument("--no-smoke", action="store_true", help="skip the LWS smoke check")
    u.add_argument(
        "--agents",
        action="store_true",
        help="also run our worker_agent (admission engine and webhooks) on every cluster",
    )
    u.add_argument(
        "--manager",
        action="store_true",
        help="also run our federation manager (MultiKueue) on the manager cluster; needs --agents",
    )
    u.add_argument(
        "--setup-multikueue",
        action="store_true",
        help="then run setup-multikueue (implies --agents --manager)",
    )
    u.add_argument(
        "--client-qps",
        type=float,
        help="clientConnection.qps of our agents and manager, per API resource (default: Kueue's 20)",
    )
    u.add_argument("--client-burst", type=int, help="clientConnection.burst (default: Kueue's 30)")
    u.add_argument(
        "--worker-lost-timeout",
        type=go_duration,
        default=DEFAULT_WORKER_LOST_TIMEOUT,
        help="multiKueue.workerLostTimeout of our manager, a Go duration (default: upstream's 15m)",
    )
    u.add_argument(
        "--dispatcher",
        choices=sorted(DISPATCHERS),
        help="multiKueue.dispatcherName of the manager (default: unset, MultiKueue's AllAtOnce)",
    )
    u.add_argument(
        "--no-sample",
        action="store_true",
        help="with --setup-multikueue: do not create the sample LeaderWorkerSet (`sample-lws`) at the end",
    )
    u.add_argument(
        "--upstream-kueue",
        action="append",
        metavar="CLUSTER",
        help="run upstream Kueue (KUEUE_VERSION of hack/versions.env, built on first use) on CLUSTER "
        "(manager or workerN) instead of our worker_agent, and on the manager instead of our manager "
        "too; repeatable",
    )
    u.add_argument(
        "--upstream-kueue-config",
        metavar="FILE",
        help="a YAML mapping of config.kueue.x-k8s.io/v1beta2 Configuration fields merged over the one "
        "upstream Kueue gets (e.g. fairSharing); needs --upstream-kueue",
    )
    u.add_argument(
        "--shared-etcd",
        action="store_true",
        help="one etcd for every cluster, each apiserver under its own --etcd-prefix "
        "(saves an etcd per cluster)",
    )
    u.add_argument(
        "--light-workers",
        action="store_true",
        help="workers without kube-controller-manager, kube-scheduler, kwok, nodes or the LWS controller: "
        "Workloads are admitted, no pod runs (no smoke check; for dispatch benchmarks)",
    )
    u.add_argument("--keep-on-failure", action="store_true", help="leave processes running if start fails")
    sub.add_parser("down", help="stop the recorded processes and remove the run directory")
    sub.add_parser("status", help="what is up")
    sub.add_parser(
        "setup-multikueue",
        help="queues on every cluster, and Secrets, MultiKueueClusters, MultiKueueConfig, AdmissionCheck "
        "on the manager (a fleet started with --agents --manager)",
    )
    s = sub.add_parser(
        "sample-lws",
        help="the sample LeaderWorkerSet on the manager, until every group is ready on one worker "
        "(a fleet set up with setup-multikueue)",
    )
    s.add_argument(
        "--file",
        default=str(SAMPLE_LWS_FILE),
        help="the LWS manifest (default: examples/sample-leaderworkerset.yaml)",
    )
    s.add_argument("--timeout", type=float, default=SAMPLE_LWS_TIMEOUT, help="seconds to wait (default 180)")
    sub.add_parser("env", help="print shell exports for the running fleet")
    args = parser.parse_args(argv)
    # Piped into `head` and the like: end quietly, as shell tools do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    handlers = {
        "build": cmd_build,
        "up": cmd_up,
        "down": cmd_down,
        "status": cmd_status,
        "env": cmd_env,
        "setup-multikueue": cmd_setup_multikueue,
        "sample-lws": cmd_sample_lws,
    }
    try:
        handlers[args.command](args)
    except FleetError as e:
        log(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
