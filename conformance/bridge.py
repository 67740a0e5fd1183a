"""What links the stand-in Deployments (conformance/environment.py) to our processes on a conformance fleet.

- **Readiness.** A stand-in pod becomes Ready only once it carries `kueue-federation.dev/processes-ready`
  (kwok's `stand-in-ready` stage, localfleet/agnhost.py). The bridge sets it when the processes the pod
  stands for answer /readyz: the worker_agent, and on the manager cluster the manager too. So Kueue's
  Deployment is Available only while our processes are up, as a Deployment of upstream's is while its
  pods pass their readiness probe. The operators' stand-ins get it at once.
- **Configuration changes and restarts.** Some specs (the sequential suite's) change Kueue's
  Configuration as an admin of upstream's manifests would: they edit the ConfigMap
  `kueue-system/kueue-manager-config`, then restart the Deployment `kueue-controller-manager` (a new
  `kubectl.kubernetes.io/restartedAt` in its pod template). When the bridge sees a new pod template,
  it writes the ConfigMap's `featureGates` and `multiKueue` over our processes' Configuration files
  (the rest of those files is the fleet's own: addresses, ports, certificates; the single-cluster
  suites' bridge takes the ConfigMap's whole Configuration instead, with the fleet's addresses, ports
  and certificates over it: conformance/singlecluster.py) and stops our processes on that cluster
  through their supervisors (SIGHUP: a replacement), which start them again after their initial 10 s
  back-off (localfleet/supervisor.py), as a rollout starts a new pod. The new pod is Ready once they
  answer /readyz again.

The suites then wait, as upstream, for the Deployment to be Available, for a dry-run through our
agent's webhook to succeed and for the agent's Lease to be renewed. At the end the bridge puts the
fleet's own Configuration files back."""

from __future__ import annotations

import copy
import json
import os
import signal
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from conformance import environment as envmod
from localfleet.agnhost import PROCESSES_READY_ANNOTATION, STANDS_FOR_ANNOTATION
from localfleet.common import AGENT_COMPONENT, MANAGER_COMPONENT, log
from localfleet.kube import http_ok

# The Configuration keys the bridge carries over (what the suites change).
CARRIED_KEYS = ("featureGates", "multiKueue")
# Which of our processes a cluster's Kueue stand-in stands for: the state's key and the component.
PROCESSES = (("agent", AGENT_COMPONENT), ("manager", MANAGER_COMPONENT))


def merged_config(ours: dict, theirs: dict) -> dict:
    """Our process's Configuration with the suite's `featureGates` and `multiKueue` over it: the suite's
    multiKueue fields replace ours one by one (ours keep the fleet's origin and timeouts unless the suite
    sets them); its featureGates replace ours whole (a gate it removes is off again)."""
    out = copy.deepcopy(ours)
    gates = theirs.get("featureGates")
    if gates:
        out["featureGates"] = dict(gates)
    else:
        out.pop("featureGates", None)
    mk = {k: v for k, v in (theirs.get("multiKueue") or {}).items() if v is not None}
    if mk:
        out["multiKueue"] = {**(out.get("multiKueue") or {}), **mk}
    return out


def template_key(deployment: dict) -> str:
    """What identifies a rollout of the Deployment's pod template."""
    return json.dumps(((deployment.get("spec") or {}).get("template") or {}), sort_keys=True)


def pods_to_mark(pods: list[dict], kueue_ready: bool) -> list[dict]:
    """The stand-in pods to mark processes-ready: the operators' always, Kueue's while `kueue_ready`."""
    out = []
    for pod in pods:
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        if STANDS_FOR_ANNOTATION not in annotations or PROCESSES_READY_ANNOTATION in annotations:
            continue
        if meta.get("deletionTimestamp"):
            continue
        is_kueue = meta.get("namespace") == envmod.KUEUE_NAMESPACE
        if kueue_ready or not is_kueue:
            out.append(pod)
    return out


class Api:
    """A few admin requests to one cluster's apiserver (the fleet's admin certificate)."""

    def __init__(self, server: str, cluster_dir: Path, ca: Path) -> None:
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.ctx.load_cert_chain(
            str(cluster_dir / "pki" / "admin.crt"), str(cluster_dir / "pki" / "admin.key")
        )

    def request(self, method: str, path: str, body: dict | None = None) -> dict | None:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if body is not None:
            req.add_header("Content-Type", "application/merge-patch+json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None


class RestartBridge:
    def __init__(
        self,
        run_dir: Path,
        clusters: dict[str, dict],
        interval: float = 1.0,
        merge: Callable[[dict, dict], dict] = merged_config,
    ) -> None:
        self.clusters = clusters
        self.merge = merge  # (our process's Configuration, the ConfigMap's) -> what the process gets
        self.interval = interval
        self.api = {
            name: Api(c["server"], Path(c["kubeconfig"]).parent, run_dir / "pki" / "ca.crt")
            for name, c in clusters.items()
        }
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="restart-bridge", daemon=True)
        self.seen: dict[str, str | None] = {}
        # cluster -> {component: pid stopped}: a restart not yet seen through.
        self.pending: dict[str, dict[str, int]] = {}
        # Each process's Configuration as the fleet wrote it, before any suite changed it.
        self.base: dict[str, dict] = {}
        for c in clusters.values():
            for key, _ in PROCESSES:
                path = (c.get(key) or {}).get("config")
                if path:
                    self.base[path] = yaml.safe_load(Path(path).read_text())
        self.restarts = 0

    def start(self) -> None:
        for name in self.clusters:
            self.seen[name] = self.template(name)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=15)
        for path, config in self.base.items():
            Path(path).write_text(yaml.safe_dump(config))

    def template(self, cluster: str) -> str | None:
        path = f"/apis/apps/v1/namespaces/{envmod.KUEUE_NAMESPACE}/deployments/{envmod.KUEUE_DEPLOYMENT}"
        got = self.api[cluster].request("GET", path)
        return template_key(got) if got else None

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            for name in self.clusters:
                try:
                    self.step(name)
                except Exception as e:  # keep going: what did not happen fails a spec, visibly
                    log(f"restart bridge: {name}: {e}")

    def step(self, cluster: str) -> None:
        current = self.template(cluster)
        if current is not None and self.seen.get(cluster) is not None and current != self.seen[cluster]:
            self.restart(cluster)
        if current is not None:
            self.seen[cluster] = current
        ready = self.processes_ready(cluster)
        got = self.api[cluster].request(
            "GET", "/api/v1/pods?labelSelector=control-plane%3Dcontroller-manager"
        )
        for pod in pods_to_mark((got or {}).get("items") or [], ready):
            meta = pod["metadata"]
            self.api[cluster].request(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"metadata": {"annotations": {PROCESSES_READY_ANNOTATION: "true"}}},
            )

    def status(self, cluster: str, component: str) -> dict:
        path = Path(self.clusters[cluster]["kubeconfig"]).parent / f"{component}.status.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def processes_ready(self, cluster: str) -> bool:
        c = self.clusters[cluster]
        stopped = self.pending.get(cluster, {})
        for key, component in PROCESSES:
            if not c.get(key):
                continue
            pid = self.status(cluster, component).get("pid")
            if not pid or pid == stopped.get(component):
                return False
            if not http_ok(f"{c[key]['health']}/readyz"):
                return False
        self.pending.pop(cluster, None)
        return True

    def restart(self, cluster: str) -> None:
        path = f"/api/v1/namespaces/{envmod.KUEUE_NAMESPACE}/configmaps/{envmod.CONFIG_MAP}"
        text = ((self.api[cluster].request("GET", path) or {}).get("data") or {}).get(envmod.CONFIG_KEY) or ""
        theirs = yaml.safe_load(text) or {}
        c = self.clusters[cluster]
        stopped: dict[str, int] = {}
        for key, component in PROCESSES:
            config = (c.get(key) or {}).get("config")
            if not config:
                continue
            Path(config).write_text(yaml.safe_dump(self.merge(self.base[config], theirs)))
            status = self.status(cluster, component)
            pid, supervisor = status.get("pid"), status.get("supervisorPid")
            if pid and supervisor:
                try:
                    # A replacement, as a rollout's new pod: the supervisor ends the process and starts
                    # it after its initial back-off, not a crash-loop one grown by every earlier restart.
                    os.kill(supervisor, signal.SIGHUP)
                    stopped[component] = pid
                except ProcessLookupError:
                    pass
        self.pending[cluster] = stopped
        self.restarts += 1
        log(
            f"restart bridge: {cluster}'s Kueue Deployment restarted: "
            f"restarting {', '.join(stopped) or 'nothing'}"
        )
