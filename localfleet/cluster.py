"""One cluster's control plane and what runs pods there: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok with its fake nodes. `ControlPlane` is the part of `localfleet.fleet.FleetUp`
that starts them (the LeaderWorkerSet controller and the smoke check: localfleet.operator_steps)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from localfleet.agnhost import write_pod_behaviour
from localfleet.binaries import Binaries, crd_docs
from localfleet.common import (
    DEFAULT_RUN_DIR,
    DEFAULT_WORKER_LOST_TIMEOUT,
    REPO,
    write_file,
)
from localfleet.kube import (
    METRICS_TOKEN_FILE,
    http_ok,
    https_ok,
    metrics_reader_token,
)
from localfleet.pki import FRONT_PROXY_CLIENT, CertificateAuthority
from localfleet.processes import State, wait_for

OUR_CRDS = REPO / "deploy" / "crds"


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
    # --event-types of our agents and manager (`up --event-types Warning`); None: both types.
    event_types: str | None = None
    # --event-loop of our agents and manager (`up --event-loop asyncio`); None: their default (uvloop).
    event_loop: str | None = None
    # multiKueue.workerLostTimeout of our manager (a Go duration); tests shorten it.
    worker_lost_timeout: str = DEFAULT_WORKER_LOST_TIMEOUT
    # multiKueue.dispatcherName of the manager (ours or upstream's); None: not set (AllAtOnce).
    dispatcher: str | None = None
    # Clusters that run upstream Kueue instead of our worker_agent (and, for the manager, our manager).
    upstream_kueue: tuple[str, ...] = ()
    # Top-level fields merged over the config.kueue.x-k8s.io/v1beta2 Configuration upstream Kueue gets
    # (`up --upstream-kueue-config FILE`), e.g. fairSharing for the differential runner.
    upstream_kueue_config: dict = field(default_factory=dict)
    # Upstream Kueue built with hack/patches/' worker-client budget patch (`up --upstream-kueue-lifted`).
    upstream_kueue_lifted: bool = False
    # One etcd (the manager's) serves every apiserver, each under its own key prefix (--etcd-prefix).
    shared_etcd: bool = False
    # The apiservers serve /debug/pprof (`up --apiserver-profiling`): where their CPU goes, read with
    # `kubectl get --raw '/debug/pprof/profile?seconds=30' > cpu.pprof` and `go tool pprof`.
    apiserver_profiling: bool = False
    # Workers without kube-controller-manager, kube-scheduler, kwok, nodes or the LWS controller:
    # Workloads are admitted there, no pod is ever created (enough for MultiKueue dispatch benchmarks).
    light_workers: bool = False
    # The JobSet controller on workers and its CRD everywhere (`up --no-jobset`: neither).
    jobset: bool = True
    # Kubeflow Trainer likewise (`up --no-trainer`; `--no-jobset` leaves it out too: it runs JobSets).
    trainer: bool = True
    # Keys of localfleet.operators' Operators the fleet leaves out (`up --no-operator KEY`).
    left_out: frozenset[str] = frozenset()
    # Kueue's CRDs on every cluster (`up --no-kueue-crds`: none, a cluster that serves no kueue.x-k8s.io).
    kueue_crds: bool = True
    # `up --conformance` (make conformance): the manager cluster runs pods too (kube-scheduler, kwok,
    # fake nodes, the LWS and JobSet controllers), and pods behave like upstream's e2e image
    # (localfleet/agnhost.py).
    conformance: bool = False
    # Real nodes per worker (`up --real-nodes N`): containerd + kubelet each (localfleet.realnodes).
    real_nodes: int = 0


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


def runs_pods(c: ClusterPlan, light_workers: bool, manager_pods: bool = False) -> bool:
    """Whether a cluster gets kube-scheduler, kwok, nodes and the LWS controller: every worker but light
    ones, and the manager cluster of a conformance fleet (`manager_pods`)."""
    return (c.is_worker and not light_workers) or (not c.is_worker and manager_pods)


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


class ControlPlane:
    """FleetUp's control-plane steps (see localfleet.fleet.FleetUp for the attributes they use)."""

    opts: FleetOptions
    bins: Binaries
    state: State
    clusters: list[ClusterPlan]
    ca: CertificateAuthority

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
                    f"--profiling={'true' if self.opts.apiserver_profiling else 'false'}",
                    # ConfigMaps bypass the watch cache, so compacting etcd makes a stale watch get 410 Gone
                    # deterministically (tests of informer re-list use ConfigMaps).
                    "--watch-cache-sizes=configmaps#0",
                    *self.apiserver_kubelet_flags(c),
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
            if c.is_worker and not self.runs_pods(c):
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
            if not self.runs_pods(c):
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
            stages = [*self.bins.kwok_stages, ready_again]
            if self.opts.conformance:  # pods end as upstream's e2e image does, not by themselves
                stock_ready = next(s for s in stages if s.name == "pod-ready.yaml")
                stages = [s for s in stages if s.name not in ("pod-complete.yaml", "pod-ready.yaml")]
                stages += write_pod_behaviour(c.dir, Path(admin), self.bins.path("kubectl"), stock_ready)
            self.state.start(
                c.name,
                "kwok",
                [
                    str(self.bins.path("kwok")),
                    f"--kubeconfig={admin}",
                    *[f"--config={s}" for s in stages],
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--node-ip=127.0.0.1",
                    f"--server-address=127.0.0.1:{c.ports['kwok']}",
                    # The nodes' kubelet port: the apiserver sends `pods/exec` and `pods/log` to kwok.
                    f"--node-port={c.ports['kwok']}",
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
        titles = ", ".join(op.title for op in self.operators())
        self.step(f"installing {titles}{' and Kueue' if self.opts.kueue_crds else ''} CRDs")
        kueue = sorted(OUR_CRDS.glob("*.yaml")) if self.opts.kueue_crds else []
        # cluster-autoscaler's ProvisioningRequest CRD everywhere (the provisioning-request check).
        others = [*self.operator_crds(), *self.bins.provisioning_request_crds]
        ours = crd_docs([*others, *kueue])
        threads = []
        errors: list[Exception] = []

        def install(c: ClusterPlan) -> None:
            try:
                if self.runs_upstream(c):
                    docs = crd_docs(others) + self.upstream_crds(c)
                else:
                    docs = ours
                names = [d["metadata"]["name"] for d in docs]
                kubectl = self.kubectl(c)
                # Every operator's CRDs at once (over 10 MB): on a loaded machine the three apiservers
                # took more than kubectl's usual 2 minutes to store them all.
                kubectl.apply(docs if self.runs_upstream(c) else self.local_conversion(c, docs), timeout=600)
                established = [f"crd/{n}" for n in names]  # as slow as the apply on a busy machine
                kubectl("wait", "--for=condition=Established", "--timeout=300s", *established, timeout=330)
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

    def create_nodes(self) -> None:
        workers = [c for c in self.clusters if self.runs_pods(c)]
        if not workers:
            return
        self.step(
            f"creating {self.opts.nodes} fake nodes per {'cluster' if self.opts.conformance else 'worker'} "
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

    def runs_pods(self, c: ClusterPlan) -> bool:
        return runs_pods(c, self.opts.light_workers, manager_pods=self.opts.conformance)
