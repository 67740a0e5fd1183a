"""`up`: a whole fleet, one manager cluster and N workers, started step by step (`FleetUp.run`) from
the parts in localfleet.cluster (control planes), localfleet.operator_steps (the LWS, JobSet and
Trainer controllers), localfleet.ours (our processes) and localfleet.upstream (upstream Kueue); its
certificates, ports and the manager's identity on workers."""

from __future__ import annotations

import time

import yaml

from localfleet.binaries import Binaries
from localfleet.cluster import ClusterPlan, ControlPlane, FleetOptions, etcd_prefix
from localfleet.common import MANAGER, PROJECT, REPO, fmt_duration, log, write_file
from localfleet.kube import Kubectl, sum_quantities
from localfleet.operator_steps import OperatorSteps
from localfleet.ours import OurProcesses
from localfleet.pki import (
    FRONT_PROXY_CLIENT,
    CertificateAuthority,
    kubeconfig,
    service_account_key_pair,
    write_pair,
)
from localfleet.ports import free_port
from localfleet.processes import State
from localfleet.realnodes import RealNodes
from localfleet.upstream import UpstreamKueue

# Identity the federation manager uses on each worker (client-certificate user, bound by RBAC).
MULTIKUEUE_USER = "kueue-federation:multikueue-manager"
MULTIKUEUE_ROLE_FILE = REPO / "deploy" / "rbac" / "multikueue-worker-clusterrole.yaml"


class FleetUp(ControlPlane, OperatorSteps, OurProcesses, UpstreamKueue, RealNodes):
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
            "jobset": self.opts.jobset,
            "trainer": self.opts.trainer,
            "leftOut": sorted(self.opts.left_out),
            "conformance": self.opts.conformance,
            "realNodes": self.opts.real_nodes,
        }
        self.state.save()
        self.make_pki()
        self.prepare_real_nodes()
        self.start_etcd()
        self.start_apiservers()
        self.start_controllers()
        self.install_crds()
        self.grant_metrics_reader()
        if self.opts.kueue_crds:  # else nothing to convert, and no Kueue runs
            self.start_agents(webhooks_only=not self.opts.agents)
        if self.opts.upstream_kueue:
            self.start_upstream_kueue()
        if self.opts.manager and MANAGER not in self.opts.upstream_kueue:
            self.start_manager()
        self.create_nodes()
        self.start_real_nodes()
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
        write_file(pki / "ca.key", self.ca.key_pem)
        # API aggregation: the apiservers proxy to aggregated API servers (the agents' visibility API)
        # with a client certificate of a CA of its own, as kubeadm's front-proxy CA.
        self.front_proxy_ca = CertificateAuthority(f"{PROJECT} front-proxy CA")
        self.front_proxy_ca_file = write_file(pki / "front-proxy-ca.crt", self.front_proxy_ca.cert_pem, 0o644)
        for c in self.clusters:
            for name in ("etcd", "etcd-peer", "apiserver", "kwok"):
                c.ports[name] = free_port()
            for op in self.operators():
                c.ports[f"{op.key}-webhook"] = free_port()
                c.ports[f"{op.key}-health"] = free_port()
                for extra in op.extra_ports:
                    c.ports[f"{op.key}-{extra}"] = free_port()
        for c in self.clusters:
            self.cluster_certificates(c)
            if self.runs_lws(c):
                for op in self.operators():
                    write_pair(op.cert_dir(c.dir), "tls", self.ca.issue(f"{op.key}-webhook", server=True))
            if self.runs_upstream(c):
                self.upstream_certificates(c)
            self.record_cluster(c)
        self.write_merged_kubeconfig()
        self.state.save()

    def server(self, c: ClusterPlan) -> str:
        return f"https://127.0.0.1:{c.ports['apiserver']}"

    def cluster_certificates(self, c: ClusterPlan) -> None:
        """The apiserver's serving certificate, ServiceAccount key pair and front-proxy client
        certificate; the admin's certificate and kubeconfig."""
        pki = c.dir / "pki"
        write_pair(pki, "apiserver", self.ca.issue("kube-apiserver", server=True))
        # Service-account signing key pair: the apiserver verifies with the public half.
        sa_key, sa_pub = service_account_key_pair()
        write_file(pki / "sa.key", sa_key)
        write_file(pki / "sa.pub", sa_pub, 0o644)
        write_pair(pki, "front-proxy-client", self.front_proxy_ca.issue(FRONT_PROXY_CLIENT))
        crt, key = write_pair(pki, "admin", self.ca.issue("admin", organizations=["system:masters"]))
        admin = kubeconfig(c.name, self.server(c), self.ca.cert_pem, crt, key, f"{c.name}-admin")
        write_file(c.dir / "admin.kubeconfig", yaml.safe_dump(admin))

    def record_cluster(self, c: ClusterPlan) -> None:
        """The cluster's entry in state.json."""
        self.state.data["clusters"][c.name] = {
            "role": c.role,
            "server": self.server(c),
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

    def write_merged_kubeconfig(self) -> None:
        merged: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
        for c in self.clusters:
            one = yaml.safe_load((c.dir / "admin.kubeconfig").read_text())
            for key in ("clusters", "users", "contexts"):
                merged[key] += one[key]
        merged["current-context"] = MANAGER
        path = write_file(self.opts.run_dir / "kubeconfig", yaml.safe_dump(merged))
        self.state.data["mergedKubeconfig"] = str(path)

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
