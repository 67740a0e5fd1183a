"""Controllers of other projects that a fleet runs next to Kueue: LeaderWorkerSet, JobSet,
Kubeflow Trainer (TrainJobs, which it runs as JobSets), KubeRay's ray-operator (RayJobs,
RayClusters, RayServices; with the Ray dashboard stand-in of localfleet.raydashboard), AppWrapper,
Kubeflow's training-operator (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob) and the MPI Operator
(MPIJob v2beta1).

Most are controller-runtime managers built from their Go modules, configured by a file of their own
(webhook port and certificate directory, no leader election, no internal certificate management) or
by flags, serving mutating and validating webhooks that the fleet points at the local process, as
envtest does. One `Operator` describes each; `OperatorSteps` (localfleet.operator_steps) starts them,
`Builder` (localfleet.binaries) builds them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from localfleet.common import FleetError

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
    # Whether the fleet also waits for its health port's /readyz (a process whose webhook port opens
    # before its webhooks are registered).
    readyz: bool = False

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

    def overlay(self, src: Path) -> dict[str, str]:
        """Go source files (path relative to the module's root `src` -> text) that its build replaces
        or adds; none by default. With some, it builds a copy of the pinned version's source with
        them written in (a `replace` of the module to that copy)."""
        return {}

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


@dataclass(frozen=True)
class TrainingOperator(TrainerOperator):
    """Kubeflow's training-operator v1 (cmd/training-operator.v1) takes flags, not a file. Its webhook
    server reads controller-runtime's default certificate directory under $TMPDIR (a TMPDIR of its
    own per cluster, as for Trainer). Before it starts its controllers it waits for its certificate
    rotator (open-policy-agent's cert-controller), which needs the Secret
    `training-operator-webhook-cert` in its namespace (`prepare` creates it empty; the rotator fills
    it with a CA of its own that nothing here uses, and injects it into no webhook configuration: the
    fleet's are named with the key prefix) and then only checks that a file
    `/tmp/k8s-webhook-server/serving-certs/tls.crt` exists, a path fixed in its source with no flag.
    `prepare` puts an empty placeholder there when there is none (never read: its webhook server
    serves the fleet's certificate from its own TMPDIR), so fleets running at once share it
    harmlessly. Only its five v1 kinds are enabled (`--enable-scheme`): its MPIJob v1 controller would
    need the v1 MPIJob CRD, which clashes with the MPI Operator's v2beta1 one and is not installed."""

    schemes: tuple[str, ...] = ("pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob")

    def config(self, webhook_port: int, health_port: int, cert_dir: str) -> None:
        return None

    def args(self, config_file: Path | None, webhook_port: int, health_port: int, cert_dir: str) -> list[str]:
        return [
            "--leader-elect=false",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            f"--webhook-server-port={webhook_port}",
            *[f"--enable-scheme={s}" for s in self.schemes],
            "--zap-log-level=info",
        ]

    def env(self, cluster_dir: Path) -> dict[str, str]:
        return {**super().env(cluster_dir), "MY_POD_NAMESPACE": self.namespace}

    def prepare(self, kubectl: Kubectl, cluster_dir: Path) -> None:
        secret = TRAINING_OPERATOR_CERT_SECRET
        kubectl("create", "secret", "generic", secret, "-n", self.namespace, check=False)
        placeholder = TRAINING_OPERATOR_FIXED_CERT
        if not placeholder.exists():
            placeholder.parent.mkdir(parents=True, exist_ok=True)
            placeholder.touch()


TRAINING_OPERATOR_CERT_SECRET = "training-operator-webhook-cert"
TRAINING_OPERATOR_FIXED_CERT = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")

TRAINING_OPERATOR = TrainingOperator(
    key="training",
    title="Kubeflow training-operator",
    version_key="TRAINING_OPERATOR_VERSION",
    module="github.com/kubeflow/training-operator",
    package="github.com/kubeflow/training-operator/cmd/training-operator.v1",
    binary="training-operator",
    crd_dir="manifests/base/crds",
    webhooks="manifests/base/webhook/manifests.yaml",
    config_api="",
    namespace="kubeflow",
    pod_label="training.kubeflow.org/job-name",  # it has no pod webhook
    version_var=None,
    crd_skip=("kubeflow.org_mpijobs.yaml",),  # v1 MPIJob: the MPI Operator's v2beta1 CRD has the name
    readyz=True,  # its webhook port opens before its certificate rotator lets it register the webhooks
)

# The flag the MPI Operator's overlay adds for its health check address (see MPIOperator).
MPI_HEALTH_FLAG = "localfleet-health-address"
MPI_HEALTH_OVERLAY = f"""\
package app

import "flag"

// Written by localfleet: the health check's address as a flag (a fleet runs one MPI Operator per
// worker on one machine); the stock ":8080" by default.
var localfleetHealthAddress = flag.String("{MPI_HEALTH_FLAG}", ":8080", "address of the health check")
"""


@dataclass(frozen=True)
class MPIOperator(Operator):
    """The MPI Operator v2 (cmd/mpi-operator, MPIJob kubeflow.org/v2beta1; its launcher is a batch/v1
    Job) takes flags, serves no webhooks and always runs leader election (a Lease in namespace
    `mpi-operator`). It binds its health check to ":8080", a constant in cmd/mpi-operator/app with no
    flag (`--monitoring-port` is its metrics port, off by default), so the fleet builds a copy of the
    pinned source with one expression changed: the address comes from a flag it adds,
    `--localfleet-health-address` (each worker's own port); the rest of the source is the pinned
    version's."""

    def config(self, webhook_port: int, health_port: int, cert_dir: str) -> None:
        return None

    def args(self, config_file: Path | None, webhook_port: int, health_port: int, cert_dir: str) -> list[str]:
        return [
            "--monitoring-port=0",
            f"--lock-namespace={self.namespace}",
            f"--{MPI_HEALTH_FLAG}=127.0.0.1:{health_port}",
        ]

    def overlay(self, src: Path) -> dict[str, str]:
        app = "cmd/mpi-operator/app"
        text = (src / app / "server.go").read_text()
        stock = 'Addr:    fmt.Sprintf(":%d", healthCheckPort),'
        if stock not in text:
            raise FleetError(f"{src / app / 'server.go'}: no {stock!r} to point at the fleet's health port")
        return {
            f"{app}/server.go": text.replace(stock, "Addr:    *localfleetHealthAddress,", 1),
            f"{app}/localfleet_health.go": MPI_HEALTH_OVERLAY,
        }


MPI_OPERATOR = MPIOperator(
    key="mpi",
    title="MPI Operator",
    version_key="MPI_OPERATOR_VERSION",
    module="github.com/kubeflow/mpi-operator",
    package="github.com/kubeflow/mpi-operator/cmd/mpi-operator",
    binary="mpi-operator",
    crd_dir="manifests/base",  # its CRD next to its Deployment and RBAC (only CRDs are taken)
    webhooks=None,
    config_api="",
    namespace="mpi-operator",
    pod_label="training.kubeflow.org/job-name",  # it has no pod webhook
    version_var="pkg/version.Version",
)

OPERATORS = (LWS, JOBSET, TRAINER, RAY, APPWRAPPER, TRAINING_OPERATOR, MPI_OPERATOR)
