"""Putting conformance/environment.py's objects on a fleet's clusters: the kind-style kubeconfig, the
stand-in Deployments and ConfigMap applied, and the wait until every stand-in is Available (the restart
bridge makes Kueue's Ready once our processes answer). Shared by the MultiKueue harness
(conformance/run.py) and the single-cluster one (conformance/singlecluster.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conformance import environment as envmod
from localfleet.kube import Kubectl
from localfleet.processes import State, wait_for


def write_kubeconfig(clusters: dict[str, dict], path: Path) -> Path:
    """One kubeconfig with a `kind-<cluster>` context per cluster (the first is the current one)."""
    admin = {name: yaml.safe_load(Path(c["kubeconfig"]).read_text()) for name, c in clusters.items()}
    path.write_text(yaml.safe_dump(envmod.kind_kubeconfig(admin)))
    path.chmod(0o600)
    return path


def fleet_operators(state: State) -> list[str]:
    """The operators (by key) the fleet runs and the suites wait for by their Deployment."""
    options = state.data["options"]
    left_out = set(options.get("leftOut") or ())
    on = {"lws": True, "jobset": options.get("jobset"), "trainer": options.get("trainer")}
    return [k for k in envmod.OPERATOR_DEPLOYMENTS if on.get(k, True) and k not in left_out]


def apply(kubectl: Kubectl, docs: list[dict]) -> None:
    """kueue-system, the docs' Namespaces, then the other docs."""
    kubectl("create", "namespace", envmod.KUEUE_NAMESPACE, check=False)
    for ns in {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}:
        kubectl("create", "namespace", ns, check=False)
    kubectl.apply([d for d in docs if d["kind"] != "Namespace"])


def wait_available(kubectls: dict[str, Kubectl]) -> None:
    for name, kubectl in kubectls.items():
        wait_for(
            f"{name} stand-in Deployments Available",
            lambda kubectl=kubectl: available(kubectl),
            300,  # Kueue's after our agent's restart, which waits out its old lease, on a loaded machine
            interval=1,
        )


def available(kubectl: Kubectl) -> bool:
    res = kubectl(
        "get", "deployments", "-A", "-l", "control-plane=controller-manager", "-o", "json", check=False
    )
    if res.returncode != 0:
        return False
    items = json.loads(res.stdout)["items"]
    return bool(items) and all(
        any(
            c["type"] == "Available" and c["status"] == "True"
            for c in (d.get("status") or {}).get("conditions") or []
        )
        for d in items
    )
