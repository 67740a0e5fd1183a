"""Upstream Kueue (`up --upstream-kueue CLUSTER`): its manager binary in place of our processes on the
clusters named, with its CRDs, webhook configurations and Configuration rewritten for 127.0.0.1.
`UpstreamKueue` is the part of `localfleet.fleet.FleetUp` that starts it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from localfleet.binaries import LIFTED_KUEUE, Binaries, crd_docs
from localfleet.cluster import ClusterPlan, FleetOptions
from localfleet.common import (
    AGENT_FRAMEWORKS,
    AGENT_NAMESPACE,
    MANAGER,
    MULTIKUEUE_ORIGIN,
    UPSTREAM_KUEUE_COMPONENT,
    FleetError,
    b64,
    write_file,
)
from localfleet.kube import http_ok
from localfleet.multikueue import resource_flavor
from localfleet.pki import CertificateAuthority, write_pair
from localfleet.ports import free_port
from localfleet.processes import State, wait_for

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


class UpstreamKueue:
    """FleetUp's steps for upstream Kueue (see localfleet.fleet.FleetUp for the attributes they use)."""

    opts: FleetOptions
    bins: Binaries
    state: State
    clusters: list[ClusterPlan]
    ca: CertificateAuthority

    def upstream_etc_upper(self, c: ClusterPlan) -> Path:
        """The upper layer of the private /etc upstream Kueue sees (an overlay on the real /etc)."""
        return c.dir / "kueue-etc" / "upper"

    def upstream_certificates(self, c: ClusterPlan) -> None:
        """Ports and certificates of upstream's kueue: its webhook's, and its metrics' in the private /etc."""
        for name in ("kueue-webhook", "kueue-metrics", "kueue-health"):
            c.ports[name] = free_port()
        write_pair(c.dir / "kueue-certs", "tls", self.ca.issue("kueue-webhook", server=True))
        metrics_certs = self.upstream_etc_upper(c) / UPSTREAM_KUEUE_METRICS_CERTS.removeprefix("/etc/")
        write_pair(metrics_certs, "tls", self.ca.issue("kueue-metrics", server=True))

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

    def upstream_binary(self) -> Path:
        """The kueue binary: the release, or with `up --upstream-kueue-lifted` our patched build."""
        return self.bins.path(LIFTED_KUEUE if self.opts.upstream_kueue_lifted else "kueue")

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
            str(self.upstream_binary()),
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
        if self.opts.upstream_kueue_lifted:
            version += " (patched: worker clients get the clientConnection budget)"
        self.step(f"starting upstream Kueue {version} on {', '.join(c.name for c in chosen)}")
        for c in chosen:
            config = self.upstream_config(c)
            cfg = write_file(c.dir / "upstream-kueue-config.yaml", yaml.safe_dump(config), 0o644)
            if c.name == MANAGER:
                # Upstream's MultiKueue manager reads the worker Secrets from its config namespace.
                self.state.cluster(c.name)["multikueueSecretsNamespace"] = config["namespace"]
            self.state.cluster(c.name)["upstreamKueue"] = {
                "version": self.bins.versions["KUEUE_VERSION"],
                "liftedWorkerClients": self.opts.upstream_kueue_lifted,
                "config": str(cfg),
                "health": f"http://127.0.0.1:{c.ports['kueue-health']}",
                "metrics": f"https://127.0.0.1:{c.ports['kueue-metrics']}/metrics",
                "webhook": f"https://127.0.0.1:{c.ports['kueue-webhook']}",
            }
            self.state.start(
                c.name,
                UPSTREAM_KUEUE_COMPONENT,
                self.upstream_command(c, cfg),
                program=str(self.upstream_binary()),
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
