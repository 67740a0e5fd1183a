"""The Helm chart (deploy/helm/kueue-federation) and the kustomize bases it mirrors, rendered for tests:
`helm` from the project's binary cache (`localfleet.py build --helm`) and the bases through
`kubectl kustomize` (the cached kubectl) or, without one, read in Python the way kustomize reads them."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "kueue-federation"
DEPLOY = REPO / "deploy"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kueue-federation"
# Kinds kustomize's namespace transformer leaves alone (the ones our bases hold).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "APIService",
}


def versions() -> dict[str, str]:
    out = {}
    for line in (REPO / "hack" / "versions.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def helm_binary() -> Path:
    return CACHE / "bin" / f"helm-{versions()['HELM_VERSION']}" / "helm"


def kubectl_binary() -> Path:
    return CACHE / "bin" / f"kubernetes-v{versions()['K8S_VERSION']}" / "kubectl"


def require_helm() -> Path:
    """The cached helm; a test without it skips, unless KF_REQUIRE_HELM=1 (`make test`) makes it fail."""
    helm = helm_binary()
    if not helm.is_file():
        message = f"helm is not in the binary cache ({helm}): python3 hack/localfleet.py build --helm"
        if os.environ.get("KF_REQUIRE_HELM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return helm


def helm(*args: str, input: str | None = None, check: bool = True, env: dict | None = None) -> str:
    res = subprocess.run(
        [str(require_helm()), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )
    if check and res.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res.stdout


def load_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(*sets: str, namespace: str = "kueue-system", release: str = "kf") -> list[dict]:
    """`helm template` of the chart with `--set` values (each "key=value"); a fresh copy each call."""
    return copy.deepcopy(_render(sets, namespace, release))


@functools.cache
def _render(sets: tuple[str, ...], namespace: str, release: str) -> list[dict]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for s in sets:
        args += ["--set", s]
    return load_docs(helm(*args))


def key(doc: dict) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta["name"], meta.get("namespace", "")


def by_key(docs: list[dict]) -> dict[tuple[str, str, str], dict]:
    out: dict[tuple[str, str, str], dict] = {}
    for doc in docs:
        # The same object in two bases (the metrics-reader role is in both, so that either is
        # complete on its own) is one object once applied; a different one is an error.
        assert key(doc) not in out or out[key(doc)] == doc, f"{key(doc)} rendered twice, differently"
        out[key(doc)] = doc
    return out


def kustomize_python(directory: Path) -> list[dict]:
    """A kustomization as kustomize builds ours: resources (files and directories), the namespace on
    every namespaced object, configMapGenerator with files and disableNameSuffixHash, images."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for resource in k.get("resources") or ():
        path = directory / resource
        docs += kustomize_python(path) if path.is_dir() else load_docs(path.read_text())
    for gen in k.get("configMapGenerator") or ():
        options = gen.get("options") or {}
        assert options.get("disableNameSuffixHash"), "only generators without a name hash are read"
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": gen["name"], "labels": dict(options.get("labels") or {})},
                "data": {Path(f).name: (directory / f).read_text() for f in gen.get("files") or ()},
            }
        )
    namespace = k.get("namespace")
    for doc in docs:
        if namespace and doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = namespace
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in k.get("images") or ()}
    for doc in docs:
        if doc["kind"] == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                c["image"] = images.get(c["image"], c["image"])
    return docs


def kustomize(directory: Path) -> list[dict]:
    """`kubectl kustomize DIR` with the cached kubectl, or kustomize_python without one."""
    kubectl = kubectl_binary()
    if not kubectl.is_file():
        return kustomize_python(directory)
    res = subprocess.run(
        [str(kubectl), "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return load_docs(res.stdout)


def kustomize_bases() -> dict[str, list[dict]]:
    """Every base the chart mirrors; deploy/rbac's remote role is a plain file without a kustomization
    (deploy/rbac/user-roles is part of deploy/worker-agent)."""
    bases = {name: kustomize(DEPLOY / name) for name in ("crds", "worker-agent", "manager", "monitoring")}
    bases["rbac"] = load_docs((DEPLOY / "rbac" / "multikueue-worker-clusterrole.yaml").read_text())
    return bases
