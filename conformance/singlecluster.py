"""The cluster upstream Kueue's single-cluster e2e suites expect (test/e2e/singlecluster/*,
test/e2e/sequential/*), provided on a one-cluster fleet of ours (`localfleet up --agents --conformance
--workers 0`) with our worker_agent as Kueue. Upstream runs these suites on a kind cluster made from
hack/testing/kind-cluster.yaml with Kueue deployed from test/e2e/config/default; here, read from the
same module the suites are built from:

- the worker nodes' labels of kind-cluster.yaml (`instance-type: on-demand`, `spot`) on our fake nodes,
  one node per kind worker, in order;
- the Configuration of test/e2e/config/default (its frameworks, feature gates, fair sharing, TLS
  options, ...) in the ConfigMap `kueue-system/kueue-manager-config` and, with the fleet's own
  addresses, ports and certificates over it (ENVIRONMENT_FIELDS), in our agent's Configuration file:
  the agent is restarted on it through the restart bridge (conformance/bridge.py), as it is after every
  later change a sequential spec makes to the ConfigMap;
- the user-facing ClusterRoles upstream's manifests install (ours: deploy/rbac/user-roles, the same
  names and labels), which the visibility specs bind;
- the kueue-system and operator stand-ins, contexts and pods of the MultiKueue harness
  (conformance/environment.py, localfleet/agnhost.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from conformance import environment as envmod
from conformance import stand_ins
from conformance.bridge import RestartBridge
from localfleet.binaries import Binaries, read_versions
from localfleet.common import REPO, FleetError
from localfleet.kube import Kubectl
from localfleet.processes import State

# Upstream's files the cluster is prepared from, inside its module.
KIND_CLUSTER = "hack/testing/kind-cluster.yaml"
E2E_CONFIG = "test/e2e/config/default/controller_manager_config.yaml"
USER_ROLES = REPO / "deploy" / "rbac" / "user-roles"
# The fields of our agent's Configuration that are the fleet's, not Kueue's: where it listens, its
# certificates, its namespace. A suite's Configuration is taken whole but for these.
ENVIRONMENT_FIELDS = (
    ("namespace",),
    ("leaderElection", "resourceNamespace"),
    ("metrics", "bindAddress"),
    ("health", "healthProbeBindAddress"),
    ("webhook", "host"),
    ("webhook", "port"),
    ("webhook", "certDir"),
    ("internalCertManagement", "webhookSecretName"),
)


def worker_node_labels(kind_cluster: dict) -> list[dict[str, str]]:
    """The labels of each worker node of a kind cluster configuration, in order."""
    return [dict(n.get("labels") or {}) for n in kind_cluster.get("nodes") or [] if n.get("role") == "worker"]


def node_label_patches(node_names: list[str], kind_cluster: dict) -> dict[str, dict[str, str]]:
    """Which of our nodes (sorted by name) gets which kind worker's labels."""
    labels = worker_node_labels(kind_cluster)
    if len(node_names) < len(labels):
        raise ValueError(f"{len(labels)} kind worker nodes to stand for, only {len(node_names)} nodes")
    return {name: lab for name, lab in zip(sorted(node_names), labels, strict=False) if lab}


def with_environment(ours: dict, theirs: dict) -> dict:
    """The suite's Configuration (`theirs`, from the ConfigMap) with our fleet's ENVIRONMENT_FIELDS
    (from the agent's own file, `ours`) over it; a field ours does not set is left as theirs."""
    out = copy.deepcopy(theirs)
    for path in ENVIRONMENT_FIELDS:
        value = _get(ours, path)
        if value is None:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _get(doc: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def upstream_file(source: Path, relative: str) -> dict:
    return yaml.safe_load((source / relative).read_text())


def user_role_docs() -> list[dict]:
    """deploy/rbac/user-roles' ClusterRoles, in its kustomization's order."""
    k = yaml.safe_load((USER_ROLES / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for name in k.get("resources") or ():
        docs += [d for d in yaml.safe_load_all((USER_ROLES / name).read_text()) if d]
    return docs


def prepare(state: State, out: Path, source: Path, bridge: RestartBridge) -> dict[str, str]:
    """The fleet's one cluster made upstream's e2e kind cluster (`source`: the suites' module): node
    labels, user roles, stand-ins, and our agent restarted on upstream's e2e Configuration; returns the
    suites' environment."""
    clusters = state.data["clusters"]
    if len(clusters) != 1:
        raise FleetError(f"the single-cluster suites need a one-cluster fleet, not {', '.join(clusters)}")
    ((name, c),) = clusters.items()
    if not (c.get("agent") or {}).get("config"):
        raise FleetError(f"{name} runs no worker_agent of ours: `up --agents` is needed")
    kubectl = Kubectl(Binaries(read_versions()).path("kubectl"), c["kubeconfig"])
    nodes = [n["metadata"]["name"] for n in kubectl.get_json("nodes").get("items", [])]
    for node, labels in node_label_patches(nodes, upstream_file(source, KIND_CLUSTER)).items():
        kubectl("label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in labels.items()))
    kubectl.apply(user_role_docs())
    config = upstream_file(source, E2E_CONFIG)
    docs = envmod.kueue_objects(name, config, manager=False)
    stand_ins.apply(kubectl, docs + envmod.operator_objects(name, stand_ins.fleet_operators(state)))
    bridge.restart(name)  # onto the ConfigMap's Configuration: upstream's e2e one
    bridge.start()
    stand_ins.wait_available({name: kubectl})
    kubeconfig = stand_ins.write_kubeconfig(clusters, out / "kind-singlecluster.kubeconfig")
    env = envmod.suite_env({name: c["server"]}, str(kubeconfig))
    env["KIND_CLUSTER_NAME"] = name  # the sequential suites name the cluster whose Kueue they restart
    return env
