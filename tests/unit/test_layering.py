"""The packages' layering, read from the source with `ast` (docs/architecture.md):

    kube_runtime  <-  kueue_domain  <-  manager, worker_agent

kube_runtime is a generic Kubernetes runtime: it imports none of the others and knows nothing of
Kueue (no Kueue label, annotation, condition, reason or feature gate is defined under it; Kueue's
vocabulary is kueue_domain/api/, its conversion and gates are kueue_domain/conversion.py and
features.py). kueue_domain (Kueue's objects and configuration) imports only kube_runtime; the
manager and the worker_agent stand on both and never import each other."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kueue_domain import api, features

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("kube_runtime", "kueue_domain", "manager", "worker_agent")
# What each package may import of the others (besides itself).
ALLOWED = {
    "kube_runtime": set(),
    "kueue_domain": {"kube_runtime"},
    "manager": {"kube_runtime", "kueue_domain"},
    "worker_agent": {"kube_runtime", "kueue_domain"},
}
# Projects' own top-level packages that are not layers of the processes (tools built on them).
OTHERS = ("kubectl_multikueue",)


def imported_packages(path: Path, package: str) -> set[str]:
    """The top-level packages a module imports, relative imports resolved to its own package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(package if node.level else (node.module or "").split(".")[0])
    return found


def violations(package: str) -> list[str]:
    forbidden = (set(PACKAGES) | set(OTHERS)) - ALLOWED[package] - {package}
    problems = []
    for path in sorted((REPO / package).rglob("*.py")):
        for name in sorted(imported_packages(path, package) & forbidden):
            problems.append(f"{path.relative_to(REPO)} imports {name}")
    return problems


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_the_layers_below_it(package: str):
    assert violations(package) == []


def test_the_scan_sees_imports_of_every_form(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text(
        "import worker_agent.agent\n"
        "from manager import config\n"
        "from . import sibling\n"
        "def f():\n"
        "    from kueue_domain.config import parse_config\n"
    )
    assert imported_packages(module, "kube_runtime") == {
        "worker_agent",
        "manager",
        "kube_runtime",
        "kueue_domain",
    }


# -- kube_runtime knows nothing of Kueue

# Our own product's names, not Kueue's vocabulary: the client's User-Agent and the webhook CA's name.
OUR_NAMES = {"kueue-federation/0.1", "kueue-webhook-ca"}
# Kueue's condition types, and its reasons that are compound words (single words such as `Failed` or
# `Ready` are Kubernetes' too), and its feature gates.
KUEUE_WORDS = (
    set(api.ADMISSION_STATUS_CONDITION_TYPES)
    | {api.WORKLOAD_WAITING_FOR_REPLACEMENT_PODS, api.CONDITION_MULTIKUEUE_MANAGER_QUOTA_AUTOMATION}
    | {
        value
        for name, value in vars(api).items()
        if "REASON_" in name
        and isinstance(value, str)
        and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z0-9]*)+", value)
    }
    | set(features.GATES)
)


def defined_strings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, string) of every string in a module-level or class-level assignment."""
    tree = ast.parse(path.read_text(), filename=str(path))
    bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    for body in bodies:
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                for const in ast.walk(node.value):
                    if isinstance(const, ast.Constant) and isinstance(const.value, str):
                        yield const.lineno, const.value


def kueue_strings(path: Path) -> list[str]:
    found = []
    for line, text in defined_strings(path):
        lowered = text.lower()
        if (("kueue" in lowered or "x-k8s.io" in lowered) and text not in OUR_NAMES) or text in KUEUE_WORDS:
            found.append(f"{path.name}:{line}: {text!r}")
    return found


def test_kube_runtime_defines_no_kueue_string():
    problems = [s for path in sorted((REPO / "kube_runtime").rglob("*.py")) for s in kueue_strings(path)]
    assert problems == [], "Kueue's vocabulary belongs in kueue_domain/api/"


def test_the_string_scan_sees_kueue_labels_conditions_reasons_and_gates(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text(
        'LABEL = "kueue.x-k8s.io/queue-name"\n'
        'GROUPS = ("batch", "jobset.x-k8s.io")\n'
        "class Reasons:\n"
        '    NO_FIT = "NoMatchingFlavor"\n'
        'GATE: str = "TopologyAwareScheduling"\n'
        'CONDITION = "QuotaReserved"\n'
        'USER_AGENT = "kueue-federation/0.1"\n'
        'STATUS = "True"\n'
        "def f():\n"
        '    return "kueue.x-k8s.io"\n'
    )
    assert kueue_strings(module) == [
        "m.py:1: 'kueue.x-k8s.io/queue-name'",
        "m.py:2: 'jobset.x-k8s.io'",
        "m.py:5: 'TopologyAwareScheduling'",
        "m.py:6: 'QuotaReserved'",
        "m.py:4: 'NoMatchingFlavor'",
    ]
