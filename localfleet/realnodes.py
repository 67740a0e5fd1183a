"""Real nodes beside kwok's fake ones (`up --real-nodes N`): per node one containerd (Debian's, with
Debian's runc and CNI plugins) and one kubelet built from the same Kubernetes module graph as the
fleet's apiservers. `RealNodes` is the part of `localfleet.fleet.FleetUp` that makes them; the
machine-side pieces (bridge, cgroups, kernel settings, teardown) are localfleet.nodehost's.

Real nodes are tainted and labelled `kueue-federation.dev/real-node=true`: only a pod that tolerates
the taint and selects the label runs a real container (REAL_NODE_SCHEDULING); every other pod still
lands on kwok's nodes, so a fleet with real nodes behaves as one without for everything else."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from kube_runtime import certs
from localfleet import nodehost
from localfleet.binaries import Binaries, Builder, kubernetes_ldflags
from localfleet.cluster import ClusterPlan, FleetOptions
from localfleet.common import CACHE, FleetError, write_file
from localfleet.ociimage import (
    BUSYBOX,
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    build_busybox_image,
    build_pause_image,
    busybox_version,
)
from localfleet.pki import CertificateAuthority, kubeconfig, write_pair
from localfleet.ports import free_port
from localfleet.processes import State, wait_for

REAL_NODE_KEY = "kueue-federation.dev/real-node"
# What a pod adds to run on a real node.
REAL_NODE_SCHEDULING = {
    "nodeSelector": {REAL_NODE_KEY: "true"},
    "tolerations": [{"key": REAL_NODE_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
}
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
PACKAGES = "containerd runc containernetworking-plugins busybox-static gcc libc6-dev iproute2"
MAX_NODES = 13  # node k's pods get .32+16k to .47+16k of the fleet's /24
KUBELET_APISERVER_CLIENT = "kube-apiserver-kubelet-client"


def host_problems() -> list[str]:
    """What this machine lacks for real nodes (empty when nothing): root, the packages, cgroups."""
    problems = []
    if os.geteuid() != 0:
        problems.append("real nodes need root (containerd, kubelet, a bridge and cgroups)")
    for tool in ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "gcc", "ip"):
        if not shutil.which(tool):
            problems.append(f"{tool} is not installed")
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN / plugin).is_file():
            problems.append(f"the CNI plugin {CNI_BIN / plugin} is not installed")
    if not BUSYBOX.is_file():
        problems.append(f"{BUSYBOX} (busybox-static) is not installed")
    if not nodehost.cgroup_hierarchies():
        problems.append(
            f"no cgroup v1 hierarchy is mounted under {nodehost.CGROUP_FS} (cgroup v2 is not supported yet)"
        )
    return problems


def check_host() -> None:
    problems = host_problems()
    if problems:
        raise FleetError(
            "--real-nodes cannot run here: "
            + "; ".join(problems)
            + f". As root: apt-get install {PACKAGES} (docs/local-fleet.md, Real nodes). Nothing was started."
        )


# -- binaries and images ---------------------------------------------------------------------------


def kubelet_dir(bins: Binaries) -> Path:
    return CACHE / "bin" / f"kubelet-v{bins.versions['K8S_VERSION']}"


def pause_version(builder: Builder) -> str:
    makefile = builder.module_dir(f"k8s.io/kubernetes@v{builder.v['K8S_VERSION']}") / "build/pause/Makefile"
    for line in makefile.read_text().splitlines():
        if line.startswith("TAG ?="):
            return line.split("=", 1)[1].strip()
    raise FleetError(f"no `TAG ?=` in {makefile}")


def node_artifacts(bins: Binaries) -> dict[str, Path]:
    d = kubelet_dir(bins)
    return {
        "kubelet": d / "kubelet",
        "pause": d / "pause.tar",
        "busybox": d / f"busybox-{busybox_version()}.tar",
    }


def build_node_binaries(bins: Binaries) -> dict[str, Path]:
    """kubelet (cmd/kubelet of the apiservers' wrapper module), the pause image compiled from that
    module's build/pause/linux/pause.c, and the busybox image; each made once, then cached."""
    paths = node_artifacts(bins)
    builder = Builder(bins)
    if not paths["kubelet"].is_file() or not paths["pause"].is_file():
        builder.check_go()
        version = bins.versions["K8S_VERSION"]
        wrapper = builder.kubernetes_wrapper(version)
        paths["kubelet"].parent.mkdir(parents=True, exist_ok=True)
        if not paths["kubelet"].is_file():
            partial = paths["kubelet"].with_name("kubelet.partial")
            builder.run(
                "build kubelet",
                ["go", "build", "-trimpath", "-tags", "selinux,notest,grpcnotrace", "-ldflags",
                 " ".join(kubernetes_ldflags(version)), "-o", str(partial), "k8s.io/kubernetes/cmd/kubelet"],
                cwd=wrapper,
            )  # fmt: skip
            partial.rename(paths["kubelet"])
        if not paths["pause"].is_file():
            src = builder.module_dir(f"k8s.io/kubernetes@v{version}") / "build/pause/linux/pause.c"
            tag = pause_version(builder)
            build_pause_image(src, tag, paths["pause"])
            (paths["pause"].parent / "pause.version").write_text(tag)
    if not paths["busybox"].is_file():
        build_busybox_image(paths["busybox"])
    return paths


def busybox_image() -> str:
    """The image test pods on real nodes run (`sh`, `echo`, `sleep`, ...), imported into every node."""
    return BUSYBOX_IMAGE.format(version=busybox_version())


# -- the FleetUp steps -----------------------------------------------------------------------------


class RealNodes:
    """FleetUp's steps for real nodes (see localfleet.fleet.FleetUp for the attributes they use)."""

    opts: FleetOptions
    bins: Binaries
    state: State
    clusters: list[ClusterPlan]
    ca: CertificateAuthority
    ca_file: Path

    def real_node_clusters(self) -> list[ClusterPlan]:
        return [c for c in self.clusters if c.is_worker and self.runs_pods(c)] if self.opts.real_nodes else []

    def real_node_names(self, c: ClusterPlan) -> list[str]:
        return [f"{c.name}-real-{i}" for i in range(self.opts.real_nodes)]

    def apiserver_kubelet_flags(self, c: ClusterPlan) -> list[str]:
        """How the apiserver reaches kubelets (logs, exec): by InternalIP, with a client certificate."""
        if c not in self.real_node_clusters():
            return []
        pki = c.dir / "pki"
        return [
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
        ]

    def prepare_real_nodes(self) -> None:
        """Before the apiservers start: images and kubelet, the bridge, the cgroups, the certificates."""
        clusters = self.real_node_clusters()
        if not clusters:
            return
        count = len(clusters) * self.opts.real_nodes
        if count > MAX_NODES:
            raise FleetError(f"at most {MAX_NODES} real nodes per fleet ({count} asked for)")
        self.step(
            f"preparing {count} real nodes (containerd + kubelet) on {', '.join(c.name for c in clusters)}"
        )
        artifacts = build_node_binaries(self.bins)
        fid = nodehost.fleet_id(self.opts.run_dir)
        info: dict = {"cgroup": f"/{nodehost.CGROUP_TOP}/{fid}", "network": f"kf-{fid}", "nodes": []}
        self.state.data["realNodes"] = info
        self.state.save()
        nodehost.prepare_sysctls()
        info.update(nodehost.make_bridge(self.opts.run_dir, count))
        self.state.save()
        k = 0
        for c in clusters:
            write_pair(
                c.dir / "pki",
                "kubelet-client",
                self.ca.issue(KUBELET_APISERVER_CLIENT, organizations=["system:masters"]),
            )
            for name in self.real_node_names(c):
                info["nodes"].append(self.plan_node(c, name, k, info, artifacts))
                k += 1
        self.state.save()

    def plan_node(self, c: ClusterPlan, name: str, k: int, info: dict, artifacts: dict[str, Path]) -> dict:
        d = c.dir / "nodes" / name
        ip = info["nodeIPs"][k]
        node = {
            "cluster": c.name,
            "name": name,
            "dir": str(d),
            "ip": ip,
            "containerdSocket": str(d / "containerd.sock"),
            "kubeletPort": free_port(),
            "healthzPort": free_port(),
            "cgroupRoot": f"{info['cgroup']}/{name}",
            "images": [str(artifacts["pause"]), str(artifacts["busybox"])],
            "kubelet": str(artifacts["kubelet"]),
        }
        nodehost.make_cgroup(node["cgroupRoot"])
        pair = certs.issue_serving_cert(
            self.ca.cert_pem, self.ca.key_pem, [name], [ip], dt.datetime.now(dt.UTC), common_name=name
        )
        write_pair(d / "pki", "kubelet", pair)
        crt, key = write_pair(d / "pki", "node", self.ca.issue(f"system:node:{name}", ["system:nodes"]))
        config = kubeconfig(c.name, self.server(c), self.ca.cert_pem, crt, key, f"system:node:{name}")
        write_file(d / "kubelet.kubeconfig", yaml.safe_dump(config))
        pause = (Path(artifacts["pause"]).parent / "pause.version").read_text().strip()
        write_file(d / "containerd.toml", containerd_config(d, PAUSE_IMAGE.format(version=pause)), 0o644)
        write_file(d / "cni" / "10-bridge.conflist", json.dumps(cni_config(d, info, k), indent=1), 0o644)
        write_file(d / "kubelet.yaml", yaml.safe_dump(kubelet_config(d, node, self.ca_file)), 0o644)
        return node

    def start_real_nodes(self) -> None:
        """containerd, its images, then kubelet, on every real node; until each node is Ready."""
        clusters = self.real_node_clusters()
        if not clusters:
            return
        info = self.state.data["realNodes"]
        t0 = time.monotonic()
        self.step("starting containerd and kubelet on the real nodes")
        for c in clusters:
            # kubelets act as system:node:<name> in system:nodes (no Node authorizer: RBAC's role).
            self.kubectl(c)(
                "create", "clusterrolebinding", "kueue-federation:nodes", "--clusterrole=system:node",
                "--group=system:nodes", check=False,
            )  # fmt: skip
        nodes = info["nodes"]
        for n in nodes:
            d = Path(n["dir"])
            containerd = [shutil.which("containerd") or "containerd", f"--config={d / 'containerd.toml'}"]
            self.state.start(n["cluster"], f"containerd-{n['name']}", containerd)
        for n in nodes:
            wait_for(
                f"{n['name']} containerd",
                lambda n=n: ctr(n, "version").returncode == 0,
                60,
                procs=self.procs(n["cluster"], f"containerd-{n['name']}"),
            )
            for image in n["images"]:
                res = ctr(n, "images", "import", image)
                if res.returncode != 0:
                    raise FleetError(f"{n['name']}: ctr images import {image} failed: {res.stderr.strip()}")
        for n in nodes:
            self.state.start(n["cluster"], f"kubelet-{n['name']}", kubelet_command(n))
        for n in nodes:
            c = next(x for x in clusters if x.name == n["cluster"])
            wait_for(
                f"real node {n['name']} Ready",
                lambda c=c, n=n: node_ready(self.kubectl(c), n["name"]),
                120,
                interval=0.2,
                procs=self.procs(n["cluster"], f"kubelet-{n['name']}"),
            )
        nodehost.restore_sysctls()
        info["readySeconds"] = round(time.monotonic() - t0, 1)
        self.state.save()
        self.step(f"{len(nodes)} real nodes Ready {info['readySeconds']}s after containerd started")


def ctr(node: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ctr", "--address", node["containerdSocket"], "--namespace", "k8s.io", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def node_ready(kubectl, name: str) -> bool:
    res = kubectl("get", "node", name, "-o", "json", check=False)
    if res.returncode != 0:
        return False
    conds = {x["type"]: x["status"] for x in json.loads(res.stdout).get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def containerd_config(d: Path, pause_image: str) -> str:
    """containerd 1.6's configuration (version 2): everything under the node's directory, runc with
    cgroupfs, CNI from Debian's plugins, and oom_score_adj kept at or above containerd's own."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{d / "containerd/root"}"
state = "{d / "containerd/state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{d / "containerd.sock"}"
[ttrpc]
  address = "{d / "containerd.sock.ttrpc"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "containerd/opt"}"
[{cri}]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d / "containerd/runc"}"
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{d / "cni"}"
  max_conf_num = 1
"""


def cni_config(d: Path, info: dict, k: int) -> dict:
    """bridge + host-local on the fleet's bridge: node k's pods get 16 addresses of the /24, a route
    to the bridge's gateway address, and neither masquerading nor forwarding (isGateway false)."""
    base = info["subnet"].rsplit(".", 1)[0]
    return {
        "cniVersion": "0.4.0",
        "name": info["network"],
        "plugins": [
            {
                "type": "bridge",
                "bridge": info["bridge"],
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(d / "cni-ipam"),
                    "ranges": [
                        [
                            {
                                "subnet": info["subnet"],
                                "rangeStart": f"{base}.{32 + 16 * k}",
                                "rangeEnd": f"{base}.{47 + 16 * k}",
                                "gateway": info["gateway"],
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def kubelet_config(d: Path, node: dict, ca_file: Path) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node["ip"],
        "port": node["kubeletPort"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node["healthzPort"],
        "tlsCertFile": str(d / "pki" / "kubelet.crt"),
        "tlsPrivateKeyFile": str(d / "pki" / "kubelet.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        # Only cgroup v1 may be there: kubelet 1.36 refuses it unless told not to.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node["cgroupRoot"],
        "containerRuntimeEndpoint": f"unix://{node['containerdSocket']}",
        "failSwapOn": False,
        "maxPods": 16,
        "podLogsDir": str(d / "pod-logs"),
        "volumePluginDir": str(d / "volume-plugins"),
        "registerWithTaints": [{"key": REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"}],
        # The machine is shared (tmpfs, other fleets): evict only when it is really full.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "kubeAPIQPS": 50,
        "kubeAPIBurst": 100,
    }


def kubelet_command(n: dict) -> list[str]:
    d = Path(n["dir"])
    return [
        n["kubelet"],
        f"--config={d / 'kubelet.yaml'}",
        f"--kubeconfig={d / 'kubelet.kubeconfig'}",
        f"--hostname-override={n['name']}",
        f"--node-ip={n['ip']}",
        f"--root-dir={d / 'kubelet'}",
        f"--node-labels={REAL_NODE_KEY}=true",
        "--v=1",
    ]


def load_image(state: State, image: Path) -> list[str]:
    """`load-image FILE`: an image tar (docker-archive or OCI, e.g. `make image`'s) into every real
    node's containerd, as `ctr -n k8s.io images import` does; returns the nodes it went to."""
    nodes = (state.data.get("realNodes") or {}).get("nodes", [])
    if not nodes:
        raise FleetError(
            f"the fleet in {state.run_dir} has no real nodes (start it with `up --real-nodes N`)"
        )
    if not image.is_file():
        raise FleetError(f"{image}: no such file (`make image` writes build/image/kueue-federation.tar)")
    for n in nodes:
        res = ctr(n, "images", "import", str(image))
        if res.returncode != 0:
            raise FleetError(f"{n['name']}: ctr images import {image} failed: {res.stderr.strip()}")
    return [n["name"] for n in nodes]


def status_lines(state: State, kubectl_for) -> list[str]:
    """`status`: each real node with its address and readiness."""
    info = state.data.get("realNodes")
    if not info:
        return []
    lines = [
        f"  real nodes on bridge {info.get('bridge')} ({info.get('subnet')}), cgroup {info.get('cgroup')}"
    ]
    for n in info.get("nodes", []):
        ready = node_ready(kubectl_for(n["cluster"]), n["name"])
        lines.append(
            f"    {n['name']:<24} {n['cluster']:<10} {n['ip']:<15} {'Ready' if ready else 'NOT Ready'}"
        )
    return lines
