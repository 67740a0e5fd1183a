"""The packages' layering, read from the source with `ast` (docs/architecture.md):

    kube_runtime  <-  kueue_domain  <-  manager, worker_agent

kube_runtime is generic Kubernetes runtime and imports none of the others; kueue_domain (Kueue's
objects and configuration, the processes' start) imports only kube_runtime; the manager and the
worker_agent stand on both and never import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
