"""The binaries a fleet runs, built from their Go modules (versions in hack/versions.env) into the
cache (~/.cache/kueue-federation/bin, or $XDG_CACHE_HOME/kueue-federation/bin), and where each one is."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from localfleet.common import CACHE, REPO, FleetError, fmt_duration, log
from localfleet.operators import LWS, OPERATORS, Operator

MIN_GO = (1, 26)
# `path(LIFTED_KUEUE)`: upstream Kueue built with hack/patches/kueue-<KUEUE_VERSION>-<LIFTED_PATCH_NAME>.
LIFTED_KUEUE = "kueue-lifted"
LIFTED_PATCH_NAME = "multikueue-worker-client-budget.patch"


def _digest(path: Path) -> str:
    """The first 8 hex digits of a file's SHA-256 (a patched build's cache key); "none" if absent."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    except OSError:
        return "none"


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

    def operator_dir(self, op: Operator) -> Path:
        return CACHE / "bin" / f"{op.key}-{self.versions[op.version_key]}"

    def operator_crds(self, op: Operator) -> list[Path]:
        return sorted((self.operator_dir(op) / "crds").glob("*.yaml"))

    def operator_webhooks(self, op: Operator) -> Path:
        return self.operator_dir(op) / "webhooks.yaml"

    def operator_present(self, op: Operator) -> bool:
        return (
            (self.operator_dir(op) / op.binary).is_file()
            and bool(self.operator_crds(op))
            and (op.webhooks is None or self.operator_webhooks(op).is_file())
        )

    @property
    def autoscaler_dir(self) -> Path:
        """cluster-autoscaler's API module: only its ProvisioningRequest CRD (no binary)."""
        return CACHE / "bin" / f"autoscaler-apis-{self.versions['AUTOSCALER_APIS_VERSION']}"

    @property
    def provisioning_request_crds(self) -> list[Path]:
        return sorted((self.autoscaler_dir / "crds").glob("*.yaml"))

    @property
    def lws_dir(self) -> Path:
        return self.operator_dir(LWS)

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
        for op in OPERATORS:
            if name == op.binary:
                return self.operator_dir(op) / op.binary
        if name == "kueue":
            return self.kueue_dir / "kueue"
        if name == LIFTED_KUEUE:
            return self.kueue_dir / f"kueue-lifted-{_digest(self.lifted_kueue_patch)}"
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
        return marker.is_file() and marker.read_text() == stages_marker()

    @property
    def lws_crds(self) -> list[Path]:
        return self.operator_crds(LWS)

    @property
    def lws_webhooks(self) -> Path:
        return self.operator_webhooks(LWS)

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

    @property
    def lifted_kueue_patch(self) -> Path:
        """Our patch to upstream Kueue that gives its MultiKueue worker clients the clientConnection
        budget (bench.compare's upstream_tuned), one per KUEUE_VERSION."""
        return REPO / "hack" / "patches" / f"kueue-{self.versions['KUEUE_VERSION']}-{LIFTED_PATCH_NAME}"

    def upstream_kueue_present(self) -> bool:
        return (
            self.path("kueue").is_file()
            and bool(self.kueue_crds)
            and self.kueue_webhooks.is_file()
            and self.kueue_conversion_crds.is_file()
        )

    def all_present(self) -> bool:
        needed = [self.path(n) for n in [*K8S_COMMANDS, "etcd", "kwok"]]
        return (
            all(p.is_file() for p in needed)
            and self.kwok_stages_current()
            and all(self.operator_present(op) for op in OPERATORS)
            and bool(self.provisioning_request_crds)
        )


AUTOSCALER_APIS_MODULE = "k8s.io/autoscaler/cluster-autoscaler/apis"
K8S_COMMANDS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
KEEP_RUNNING_ANNOTATION = "kueue-federation.dev/keep-running"
# Owners whose pods kwok completes (its stock pod-complete stage: Jobs' only). The training-operator's
# kinds own their pods directly; an MPIJob's launcher is a Job, its workers run until it ends.
POD_COMPLETE_OWNER_KINDS = ("Job", "PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob")

KWOK_STAGE_FILES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    # Job pods (and POD_COMPLETE_OWNER_KINDS') complete 1-6 s after they are Ready; one annotated with
    # KEEP_RUNNING_ANNOTATION never does.
    "kustomize/stage/pod/general/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
]


def stages_marker() -> str:
    """What the cached kwok stages were written from (a change re-copies them)."""
    return "\n".join([*KWOK_STAGE_FILES, KEEP_RUNNING_ANNOTATION, *POD_COMPLETE_OWNER_KINDS])


def is_crd_file(path: Path) -> bool:
    """A YAML file of CustomResourceDefinitions (not a kustomization, Deployment or RBAC next to it)."""
    return re.search(r"^kind:\s*CustomResourceDefinition\s*$", path.read_text(), re.MULTILINE) is not None


def kubernetes_ldflags(version: str) -> list[str]:
    """The -ldflags that stamp the built Kubernetes binaries with `version`, as a release does."""
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
    return ldflags


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
        self,
        force: bool = False,
        upstream_kueue: bool = False,
        helm: bool = False,
        promtool: bool = False,
        upstream_kueue_lifted: bool = False,
        skip: Iterable[str] = (),
    ) -> None:
        """Everything a fleet needs; with `upstream_kueue` also upstream Kueue's full binary, with
        `helm` also the helm CLI (the Helm chart's tests need it; a fleet does not). `skip`: keys
        of Operators not to build (a fleet that leaves them out)."""
        CACHE.mkdir(parents=True, exist_ok=True)
        todo = []
        if force or not all(self.bins.path(n).is_file() for n in [*K8S_COMMANDS, "etcd"]):
            todo.append(self.build_kubernetes)
        if force or not self.bins.path("kwok").is_file() or not self.bins.kwok_stages_current():
            todo.append(self.build_kwok)
        for op in OPERATORS:
            if op.key not in set(skip) and (force or not self.bins.operator_present(op)):
                todo.append(lambda op=op: self.build_operator(op))
        if force or not self.bins.provisioning_request_crds:
            todo.append(self.fetch_provisioning_request_crd)
        if upstream_kueue and (force or not self.bins.upstream_kueue_present()):
            todo.append(self.build_upstream_kueue)
        if upstream_kueue_lifted and (force or not self.bins.path(LIFTED_KUEUE).is_file()):
            todo.append(self.build_upstream_kueue_lifted)
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
        wrapper = self.kubernetes_wrapper(version)
        ldflags = kubernetes_ldflags(version)
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

    def kubernetes_wrapper(self, version: str) -> Path:
        """The wrapper module that requires k8s.io/kubernetes at `version` with its staging modules
        at the matching v0 versions (made on first use)."""
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
        return wrapper

    def go_build_module(
        self,
        step: str,
        module: str,
        version: str,
        package: str,
        ldflags: str,
        out: Path,
        tags: str = "",
        overlay: dict[str, str] | None = None,
    ) -> None:
        """Build one package of a released module in a wrapper module that requires exactly that version.

        Not `go install pkg@version`: that also asks the proxy for the module's version list (to print
        deprecation notices), which the proxy refuses for some modules.
        """
        parts = module.split("/")
        if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
            parts.pop()  # a major version suffix: github.com/kubeflow/trainer/v2 -> trainer
        wrapper = CACHE / "build" / f"{parts[-1]}-{version}"
        wrapper.mkdir(parents=True, exist_ok=True)
        if not (wrapper / "go.mod").exists():
            self.run(f"init {module} wrapper", ["go", "mod", "init", "local.build/wrapper"], cwd=wrapper)
            self.run(
                f"require {module} {version}",
                ["go", "mod", "edit", f"-require={module}@{version}"],
                cwd=wrapper,
            )
        partial = out.with_name(f"{out.name}.partial-{os.getpid()}")  # builds may race: each its own
        if overlay:
            src = self.write_overlay(wrapper, self.module_dir(f"{module}@{version}"), overlay)
            self.run(
                f"replace {module} with its patched copy",
                ["go", "mod", "edit", f"-replace={module}@{version}={src}"],
                cwd=wrapper,
            )
        build = ["go", "build", "-trimpath", *(["-tags", tags] if tags else []), "-ldflags", ldflags]
        self.run(step, [*build, "-o", str(partial), package], cwd=wrapper)
        partial.rename(out)

    @staticmethod
    def write_overlay(wrapper: Path, src: Path, files: dict[str, str]) -> Path:
        """A copy of the module's source `src` under the wrapper with `files` (relative path -> text)
        written in; its path. Named by the files' digest and renamed into place whole, so builds
        running at once share a finished copy and never see a half-written one."""
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:12]
        copy = wrapper / f"patched-src-{digest}"
        if copy.is_dir():
            return copy
        partial = wrapper / f"{copy.name}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(src, partial)
        for p in [partial, *partial.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)  # the module cache's files are read-only
        for rel, text in files.items():
            (partial / rel).write_text(text)
        try:
            partial.rename(copy)
        except OSError:  # another build finished the same copy first
            shutil.rmtree(partial, ignore_errors=True)
        return copy

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
                stock_owners = "      values:\n      - 'Job'\n"
                if stock_owners not in text:
                    raise FleetError(f"kwok {version}'s pod-complete stage names no Job owner to extend")
                owners = "".join(f"      - '{kind}'\n" for kind in POD_COMPLETE_OWNER_KINDS)
                text = text.replace(stock_owners, "      values:\n" + owners, 1)
            (d / "stages" / Path(rel).name).write_text(text)
        (d / "stages" / "SOURCES").write_text(stages_marker())

    def build_operator(self, op: Operator) -> None:
        """An Operator's controller, its CRDs and its webhook configurations, from its Go module."""
        version = self.v[op.version_key]
        d = self.bins.operator_dir(op)
        d.mkdir(parents=True, exist_ok=True)
        src = self.module_dir(f"{op.module}@{version}")
        if not (d / op.binary).is_file():
            self.go_build_module(
                f"build {op.binary} {version}",
                op.module,
                version,
                op.package,
                op.ldflags(version),
                d / op.binary,
                overlay=op.overlay(src),
            )
        (d / "crds").mkdir(exist_ok=True)
        for crd in sorted((src / op.crd_dir).glob("*.yaml")):
            if crd.name in op.crd_skip or not is_crd_file(crd):
                continue
            shutil.copyfile(crd, d / "crds" / crd.name)
        if op.webhooks is not None:
            shutil.copyfile(src / op.webhooks, d / "webhooks.yaml")

    def fetch_provisioning_request_crd(self) -> None:
        """cluster-autoscaler's ProvisioningRequest CRD from its API module (what upstream Kueue's
        tests install; no cluster-autoscaler runs: localfleet/autoscaler_standin.py answers)."""
        version = self.v["AUTOSCALER_APIS_VERSION"]
        src = self.module_dir(f"{AUTOSCALER_APIS_MODULE}@{version}") / "config" / "crd"
        d = self.bins.autoscaler_dir / "crds"
        d.mkdir(parents=True, exist_ok=True)
        crds = sorted(src.glob("autoscaling.x-k8s.io_provisioningrequests.yaml"))
        if not crds:
            raise FleetError(f"{AUTOSCALER_APIS_MODULE}@{version}: no ProvisioningRequest CRD in {src}")
        for crd in crds:
            shutil.copyfile(crd, d / crd.name)
            (d / crd.name).chmod(0o644)

    def build_lws(self) -> None:
        self.build_operator(LWS)

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

    def build_upstream_kueue_lifted(self) -> None:
        """Upstream Kueue's binary with our patch (hack/patches/): its MultiKueue worker clients get
        the clientConnection qps/burst instead of client-go's 5/10 per resource, the effect of a later
        upstream change that KUEUE_VERSION predates. Built in a copy of the module's source."""
        version = self.v["KUEUE_VERSION"]
        patch = self.bins.lifted_kueue_patch
        if not patch.is_file():
            raise FleetError(f"no patch {patch.relative_to(REPO)} for upstream Kueue {version}")
        work = CACHE / "build" / f"kueue-lifted-src-{version}"
        copy_module_source(self.module_dir(f"sigs.k8s.io/kueue@{version}"), work)
        self.run(f"patch kueue {version}", ["patch", "-p1", "--forward", "-i", str(patch)], cwd=work)
        out = self.bins.path(LIFTED_KUEUE)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f"{out.name}.partial-{os.getpid()}")  # builds may race: each its own
        ldflags = f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}"
        self.run(
            f"build kueue {version} lifted",
            ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "./cmd/kueue"],
            cwd=work,
        )
        partial.rename(out)


def copy_module_source(src: Path, work: Path) -> None:
    """A writable copy of a module from the read-only module cache (for a patched build), replacing
    any earlier copy."""
    if work.exists():
        for d in [work, *(p for p in work.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
        shutil.rmtree(work)
    shutil.copytree(src, work)
    for d in [work, *work.rglob("*")]:
        d.chmod(0o755 if d.is_dir() else 0o644)


def crd_docs(files: Iterable[Path]) -> list[dict]:
    """The CustomResourceDefinitions of YAML files. Each file is parsed once: its documents are kept
    as JSON under the cache, by the file's digest (KubeRay's 3 MB of CRDs took 15 s to parse with
    PyYAML's Python loader on a busy machine, 0.1 s as JSON)."""
    docs = []
    for f in files:
        docs += [d for d in parsed_yaml(f) if d and d.get("kind") == "CustomResourceDefinition"]
    return docs


def parsed_yaml(path: Path) -> list:
    """The documents of a YAML file, through a JSON copy under CACHE/parsed (made on first use)."""
    raw = path.read_bytes()
    cached = CACHE / "parsed" / f"{hashlib.sha256(raw).hexdigest()[:20]}.json"
    try:
        return json.loads(cached.read_bytes())
    except (OSError, ValueError):
        pass
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = list(yaml.load_all(raw, Loader=loader))
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(docs))
    partial.replace(cached)
    return docs
