"""What upstream Kueue's e2e suites expect of the clusters they run against, provided on a fleet of ours
(`localfleet up --conformance`). Upstream runs them on kind clusters where Kueue and the operators are
Deployments; on our fleet they are processes on this machine. So, on every cluster:

- a kubeconfig context named as kind names it (`kind-<cluster>`), and the suites' cluster names in
  MANAGER_KIND_CLUSTER_NAME, WORKER1_KIND_CLUSTER_NAME and WORKER2_KIND_CLUSTER_NAME;
- in kueue-system, a Deployment `kueue-controller-manager` that stands for our processes (the
  worker_agent, and on the manager cluster the manager too): its one pod runs on a fake node and
  becomes Available, and the Service `kueue-webhook-service` selects it, so its EndpointSlice lists a
  ready endpoint. The suites wait for both before they start; the webhooks they then call are our
  agent's, and the Lease `c1f6bfd2.kueue.x-k8s.io` they wait for is the one our agent holds;
- the ConfigMap `kueue-manager-config` holding the agent's Configuration, from which the suites read
  the enabled frameworks (they grant the manager's identity on workers the matching RBAC);
- stand-in Deployments `lws-system/lws-controller-manager` and `jobset-system/jobset-controller-manager`
  for the LWS and JobSet controllers, which run as processes too, and likewise for the other
  operators of OPERATOR_DEPLOYMENTS (the suites wait for the training-operator's on the manager
  cluster too, where upstream installs it; ours has its CRDs only);
- each cluster's apiserver address for the MultiKueue kubeconfigs the suites write, in
  CONFORMANCE_SERVER_<CLUSTER> (read by our patch to upstream's test/util.GetClusterServerAddress).

A stand-in pod is Ready only while the processes it stands for answer /readyz, and a restart of
Kueue's Deployment restarts our processes with the ConfigMap's changes (conformance/bridge.py)."""

from __future__ import annotations

import copy

import yaml

from localfleet.agnhost import STANDS_FOR_ANNOTATION

KUEUE_NAMESPACE = "kueue-system"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
WEBHOOK_SERVICE = "kueue-webhook-service"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
STAND_IN_ANNOTATION = STANDS_FOR_ANNOTATION
# The e2e image the suites put in their pods; kwok runs none, so any name works. The suites read it
# from this variable (or from a Dockerfile of upstream's repository, which the build does not have).
AGNHOST_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.53"
CLUSTER_ENV = {"manager": "MANAGER_KIND_CLUSTER_NAME", "worker1": "WORKER1_KIND_CLUSTER_NAME",
               "worker2": "WORKER2_KIND_CLUSTER_NAME"}  # fmt: skip

# Operators the suites wait for by their Deployment (namespace, name), by our operator key.
OPERATOR_DEPLOYMENTS = {
    "lws": ("lws-system", "lws-controller-manager"),
    "jobset": ("jobset-system", "jobset-controller-manager"),
    "ray": ("default", "kuberay-operator"),  # upstream's e2e setup installs it in `default`
    "trainer": ("kubeflow-system", "kubeflow-trainer-controller-manager"),
    "appwrapper": ("appwrapper-system", "appwrapper-controller-manager"),
    "training": ("kubeflow", "training-operator"),
    "mpi": ("mpi-operator", "mpi-operator"),
}
# The image the suites give Ray pods; kwok runs none (the Ray dashboard is a fleet stand-in).
KUBERAY_RAY_IMAGE = "rayproject/ray:2.41.0"


def context_name(cluster: str) -> str:
    return f"kind-{cluster}"


def kind_kubeconfig(admin_kubeconfigs: dict[str, dict]) -> dict:
    """One kubeconfig with a context `kind-<cluster>` per cluster (credentials inline, as the suites
    copy the CA data into the MultiKueue kubeconfigs they write)."""
    merged: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for cluster, kc in admin_kubeconfigs.items():
        name = context_name(cluster)
        server = kc["clusters"][0]["cluster"]
        user = kc["users"][0]["user"]
        merged["clusters"].append({"name": name, "cluster": copy.deepcopy(server)})
        merged["users"].append({"name": name, "user": copy.deepcopy(user)})
        merged["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    merged["current-context"] = context_name(next(iter(admin_kubeconfigs)))
    return merged


def server_env_key(cluster: str) -> str:
    """The variable our patch to GetClusterServerAddress reads for `cluster`."""
    return "CONFORMANCE_SERVER_" + cluster.upper().replace("-", "_")


def suite_env(servers: dict[str, str], kubeconfig_path: str) -> dict[str, str]:
    """The environment of a suite's test binary (on top of this process's)."""
    env = {
        "KUBECONFIG": kubeconfig_path,
        "E2E_TEST_AGNHOST_IMAGE": AGNHOST_IMAGE,
        "KUBERAY_RAY_IMAGE": KUBERAY_RAY_IMAGE,
    }
    for cluster, var in CLUSTER_ENV.items():
        env[var] = cluster
    for cluster, server in servers.items():
        env[server_env_key(cluster)] = server
    return env


def stand_in_deployment(namespace: str, name: str, stands_for: str) -> dict:
    labels = {"control-plane": "controller-manager", "app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {STAND_IN_ANNOTATION: stands_for},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {STAND_IN_ANNOTATION: stands_for}},
                "spec": {
                    "containers": [
                        {
                            "name": "manager",
                            "image": "kueue-federation/stand-in:local",
                            "ports": [{"containerPort": 9443, "name": "webhook-server"}],
                        }
                    ],
                    "terminationGracePeriodSeconds": 1,
                },
            },
        },
    }


def kueue_objects(cluster: str, agent_config: dict, manager: bool) -> list[dict]:
    """kueue-system's Deployment, webhook Service and configuration ConfigMap on one cluster."""
    what = "the worker_agent and the manager" if manager else "the worker_agent"
    deployment = stand_in_deployment(KUEUE_NAMESPACE, KUEUE_DEPLOYMENT, f"{what} on {cluster} (processes)")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": KUEUE_NAMESPACE},
        "spec": {
            "selector": deployment["spec"]["selector"]["matchLabels"],
            "ports": [{"port": 443, "protocol": "TCP", "targetPort": 9443}],
        },
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": KUEUE_NAMESPACE},
        "data": {CONFIG_KEY: yaml.safe_dump(agent_config, sort_keys=False)},
    }
    return [deployment, service, config_map]


def operator_objects(cluster: str, operators: list[str]) -> list[dict]:
    """Stand-ins for the operators (by key) that run as processes on `cluster`."""
    docs = []
    for key in operators:
        if key not in OPERATOR_DEPLOYMENTS:
            continue
        namespace, name = OPERATOR_DEPLOYMENTS[key]
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        docs.append(stand_in_deployment(namespace, name, f"the {key} controller on {cluster} (a process)"))
    return docs
