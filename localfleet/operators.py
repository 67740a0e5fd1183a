"""Controllers of other projects that a fleet runs next to Kueue: LeaderWorkerSet, JobSet,
Kubeflow Trainer (TrainJobs, which it runs as JobSets), KubeRay's ray-operator (RayJobs,
RayClusters, RayServices; with the Ray dashboard stand-in of localfleet.raydashboard) and AppWrapper.

All are controller-runtime managers built from their Go modules, configured by a file of their own
(webhook port and certificate directory, no leader election, no internal certificate management) and
serving mutating and validating webhooks that the fleet points at the local process, as envtest
does. One `Operator` describes each; `OperatorSteps` (localfleet.operator_steps) starts them,
`Builder` (localfleet.binaries) builds them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localfleet.kube import Kubectl


@dataclass(frozen=True)
class Operator:
    key: str  # short name: ports "<key>-webhook"/"<key>-health", directory "<key>-certs"
    title: str  # for log lines
    version_key: str  # in hack/versions.env
    module: str  # Go module
    package: str  # its main package
    binary: str  # the executable's name in the cache
    crd_dir: str  # in the module: every *.yaml there is a CRD
    webhooks: str | None  # in the module: its webhook configurations (None: it serves none)
    config_api: str  # apiVersion of its Configuration file
    namespace: str  # where it would run in a real cluster (some controllers look it up)
    pod_label: str  # the label its pods carry: its pod webhooks see only those
    # The variable its version is linked into; None: the module has none.
    version_var: str | None = "pkg/version.GitVersion"
    # Another Operator it needs (its CRDs and controller): left out with it.
    requires: str | None = None
    # CRD files of its crd_dir that the fleet does not install (one that clashes with another
    # operator's CRD of the same name, for instance).
    crd_skip: tuple[str, ...] = ()
    # Ports it needs beyond "<key>-webhook" and "<key>-health", allocated as "<key>-<name>".
    extra_ports: tuple[str, ...] = ()

    def ldflags(self, version: str) -> str:
        if self.version_var is None:
            return "-s -w"
        return f"-s -w -X {self.module}/{self.version_var}={version}"

    def cert_dir(self, cluster_dir: Path) -> Path:
        """Where its webhook serving certificate (tls.crt, tls.key) goes."""
        return cluster_dir / f"{self.key}-certs"

    def env(self, cluster_dir: Path) -> dict[str, str]:
        """Environment its process needs beyond KUBECONFIG."""
        return {}

    def process_env(self, cluster_dir: Path, ports: dict[str, int]) -> dict[str, str]:
        """`env`, for an operator that needs its cluster's fleet ports too (`ports`: the cluster's)."""
        return self.env(cluster_dir)

    def companions(self, cluster_dir: Path, ports: dict[str, int]) -> list[tuple[str, list[str]]]:
        """Fleet components that run next to it on each cluster it runs on, started before it:
        (component name, argv); none by default."""
        return []

    def args(self, config_file: Path | None, webhook_port: int, health_port: int, cert_dir: str) -> list[str]:
        """Its command-line flags (after the binary); `config_file` is what `config` returned, written."""
        return [f"--config={config_file}", "--zap-log-level=info"]

    def prepare(self, kubectl: Kubectl, cluster_dir: Path) -> None:
        """Anything the cluster needs before its process starts (`kubectl` is the cluster's
        kubectl); nothing by default."""

    def config(self, webhook_port: int, health_port: int, cert_dir: str) -> dict | None:
        """Its Configuration file: webhooks on 127.0.0.1 with certificates from `cert_dir` (None: it
        takes no file, `args` says everything)."""
        return {
            "apiVersion": self.config_api,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": cert_dir},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        }

    def webhook_configs(self, docs: list[dict], port: int, ca_bundle: str) -> list[dict]:
        """Its webhook manifests pointed at the local process and the fleet's CA, named with its key as a
        prefix (the stock names clash between projects); its pod webhooks limited to its own pods, as
        its kustomize overlay does."""
        for doc in docs:
            doc["metadata"]["name"] = f"{self.key}-{doc['metadata']['name']}"
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
                if any("pods" in r.get("resources", []) for r in hook.get("rules", [])):
                    hook["objectSelector"] = {
                        "matchExpressions": [{"key": self.pod_label, "operator": "Exists"}]
                    }
        return docs


LWS = Operator(
    key="lws",
    title="LeaderWorkerSet",
    version_key="LWS_VERSION",
    module="sigs.k8s.io/lws",
    package="sigs.k8s.io/lws/cmd",
    binary="lws-manager",
    crd_dir="config/crd/bases",
    webhooks="config/webhook/manifests.yaml",
    config_api="config.lws.x-k8s.io/v1alpha1",
    namespace="lws-system",
    pod_label="leaderworkerset.sigs.k8s.io/name",
)

JOBSET = Operator(
    key="jobset",
    title="JobSet",
    version_key="JOBSET_VERSION",
    module="sigs.k8s.io/jobset",
    package="sigs.k8s.io/jobset",  # its main package is the module's root
    binary="jobset-manager",
    crd_dir="config/components/crd/bases",
    webhooks="config/components/webhook/manifests.yaml",
    config_api="config.jobset.x-k8s.io/v1alpha1",
    namespace="jobset-system",
    pod_label="jobset.sigs.k8s.io/jobset-name",
)


@dataclass(frozen=True)
class TrainerOperator(Operator):
    """Kubeflow Trainer's Configuration (config.trainer.kubeflow.org/v1alpha1, decoded strictly) has
    no certificate directory: its webhook server reads controller-runtime's default,
    $TMPDIR/k8s-webhook-server/serving-certs, so each cluster's process gets a TMPDIR of its own."""

    def config(self, webhook_port: int, health_port: int, cert_dir: str) -> dict:
        return {
            "apiVersion": self.config_api,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "webhook": {"port": webhook_port, "host": "127.0.0.1"},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        }

    def tmp_dir(self, cluster_dir: Path) -> Path:
        return cluster_dir / f"{self.key}-tmp"

    def cert_dir(self, cluster_dir: Path) -> Path:
        return self.tmp_dir(cluster_dir) / "k8s-webhook-server" / "serving-certs"

    def env(self, cluster_dir: Path) -> dict[str, str]:
        return {"TMPDIR": str(self.tmp_dir(cluster_dir))}


TRAINER = TrainerOperator(
    key="trainer",
    title="Kubeflow Trainer",
    version_key="TRAINER_VERSION",
    module="github.com/kubeflow/trainer/v2",
    package="github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
    binary="trainer-controller-manager",
    crd_dir="manifests/base/crds",
    webhooks="manifests/base/webhook/manifests.yaml",
    config_api="config.trainer.kubeflow.org/v1alpha1",
    namespace="kubeflow-system",
    pod_label="trainer.kubeflow.org/trainjob-ancestor-step",  # it has no pod webhook
    version_var=None,
    requires="jobset",
)


@dataclass(frozen=True)
class RayOperator(Operator):
    """KubeRay's ray-operator takes flags, not a Configuration file, and serves no webhooks (it would
    only with ENABLE_WEBHOOKS=true). It binds two ports: metrics (its default :8080 would clash
    between fleets) on the port the fleet allocates as "<key>-webhook", health on "<key>-health".
    Its Ray dashboard client speaks plain HTTP to each head Service's DNS name, and Go's client
    sends that through HTTP_PROXY: the fleet points it at the dashboard stand-in
    (localfleet.raydashboard) of the cluster, port "<key>-dashboard"."""

    extra_ports: tuple[str, ...] = ("dashboard",)

    def config(self, webhook_port: int, health_port: int, cert_dir: str) -> None:
        return None

    def args(self, config_file: Path | None, webhook_port: int, health_port: int, cert_dir: str) -> list[str]:
        return [
            f"--metrics-addr=127.0.0.1:{webhook_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            "--enable-leader-election=false",
            "--log-stdout-encoder=console",
        ]

    def process_env(self, cluster_dir: Path, ports: dict[str, int]) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{ports[f'{self.key}-dashboard']}"
        # Loopback (the apiserver) is never proxied by Go; NO_PROXY says so for any other client.
        return {"HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": "127.0.0.1,localhost"}

    def companions(self, cluster_dir: Path, ports: dict[str, int]) -> list[tuple[str, list[str]]]:
        port = ports[f"{self.key}-dashboard"]
        return [("ray-dashboard", [sys.executable, "-m", "localfleet.raydashboard", f"--port={port}"])]


RAY = RayOperator(
    key="ray",
    title="KubeRay",
    version_key="KUBERAY_VERSION",
    module="github.com/ray-project/kuberay/ray-operator",
    package="github.com/ray-project/kuberay/ray-operator",  # main.go at the module's root
    binary="ray-operator",
    crd_dir="config/crd/bases",
    webhooks=None,
    config_api="",
    namespace="ray-system",
    pod_label="ray.io/cluster",  # it has no pod webhook
    version_var=None,
    # RayCronJob is behind a feature gate that is off; Kueue does not integrate it.
    crd_skip=("ray.io_raycronjobs.yaml",),
)


@dataclass(frozen=True)
class AppWrapperOperator(Operator):
    """The AppWrapper controller (github.com/project-codeflare/appwrapper/cmd) reads its configuration
    from a ConfigMap (`--config NAME` in the namespace $NAMESPACE), which `prepare` writes from the
    file `config` returns, and embeds no Kueue of its own: it deploys an AppWrapper's components
    once `spec.suspend` is false, which the cluster's Kueue (our worker_agent) decides.

    It runs without its webhooks: v1.2.2 binds its webhook server to the fixed port 9443 on every
    address (cmd/main.go has no flag or configuration field for it), which two fleets on one machine
    cannot share, and with webhooks on it rotates a certificate of its own for the in-cluster Service
    name. So `webhooksEnabled: false` (and no certificate rotation); nothing reads its `/readyz`,
    whose check would start the webhook server. Metrics are off, health is on a fleet port."""

    def ldflags(self, version: str) -> str:
        return f"-s -w -X main.BuildVersion={version}"

    def env(self, cluster_dir: Path) -> dict[str, str]:
        return {"NAMESPACE": self.namespace}

    def args(self, config_file: Path | None, webhook_port: int, health_port: int, cert_dir: str) -> list[str]:
        return [f"--config={APPWRAPPER_CONFIG_MAP}", "--zap-log-level=info"]

    def config(self, webhook_port: int, health_port: int, cert_dir: str) -> dict:
        return {
            "webhooksEnabled": False,
            "controllerManager": {
                "metrics": {"bindAddress": "0"},
                "health": {"bindAddress": f"127.0.0.1:{health_port}"},
                "leaderElection": False,
            },
            "certManagement": {"certificateDir": cert_dir},
            # No node health monitor (Autopilot's GPU taints; kwok nodes have no GPUs) and no
            # SubjectAccessReviews (a webhook check, and the webhook is off).
            "appwrapper": {
                "autopilot": {"injectAntiAffinities": False, "monitorNodes": False},
                "userRBACAdmissionCheck": False,
            },
        }

    def prepare(self, kubectl: Kubectl, cluster_dir: Path) -> None:
        """The ConfigMap it reads its configuration from: the file `config` was written to."""
        config_file = cluster_dir / f"{self.key}-config.yaml"
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": APPWRAPPER_CONFIG_MAP, "namespace": self.namespace},
            "data": {"config.yaml": config_file.read_text()},
        }
        kubectl.apply([config_map])


APPWRAPPER_CONFIG_MAP = "appwrapper-operator-config"

APPWRAPPER = AppWrapperOperator(
    key="appwrapper",
    title="AppWrapper",
    version_key="APPWRAPPER_VERSION",
    module="github.com/project-codeflare/appwrapper",
    package="github.com/project-codeflare/appwrapper/cmd",
    binary="appwrapper-manager",
    crd_dir="config/crd/bases",
    webhooks=None,
    config_api="",  # its configuration is a ConfigMap, not a Configuration object
    namespace="appwrapper-system",
    pod_label="workload.codeflare.dev/appwrapper",
)

OPERATORS = (LWS, JOBSET, TRAINER, RAY, APPWRAPPER)
