"""The repository stands on its own: a user clones it with nothing beside it, so no file of the
project may read, link or cite anything outside it, nor an absolute path of one machine. Every
file of the project is checked: tracked ones and new ones not yet committed, generated JSON
included."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Built from pieces, so that this file does not match itself.
SIBLING = "../" + "shared"
# An absolute path starts a word: not inside a URL or a relative path.
START = r"(?<![\w.~-])"
MACHINE_PATH = re.compile(
    START + "/(?:" + "|".join(["work", "home", "Users"]) + r")/[\w.-]+|" + START + r"/root/\.\w"
)
PARENT = str(REPO.parent).rstrip("/") + "/"
# A clone in /tmp (as the README's fresh-clone check makes) has /tmp as its parent: the project
# names /tmp work directories on purpose, and those are no sibling of the repository.
PARENT_PATH = re.compile(START + re.escape(PARENT)) if PARENT not in ("/", "/tmp/") else None


def ignored_patterns() -> list[str]:
    """The names .gitignore leaves out (the virtualenv, caches, build output), and .git itself."""
    lines = (REPO / ".gitignore").read_text().splitlines() if (REPO / ".gitignore").is_file() else []
    return [".git"] + [
        line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")
    ]


def project_files() -> list[Path]:
    """What git tracks or would track (ignored files aside); without git (a copy of the tree, as
    .ci/run makes), every file none of whose path parts .gitignore names."""
    if (REPO / ".git").exists():
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        return [REPO / name for name in out.decode().split("\0") if name and (REPO / name).is_file()]
    patterns = ignored_patterns()
    return [
        p
        for p in REPO.rglob("*")
        if p.is_file()
        and not any(fnmatch.fnmatch(part, pat) for part in p.relative_to(REPO).parts for pat in patterns)
    ]


def text_of(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None  # binary (PNG plots)
    return data.decode("utf-8", errors="replace")


def offending_lines(path: Path, text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if SIBLING in line or MACHINE_PATH.search(line) or (PARENT_PATH and PARENT_PATH.search(line)):
            found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:160]}")
    return found


def absolute_paths_in_json(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value.startswith("/") else []
    if isinstance(value, dict):
        return [p for v in value.values() for p in absolute_paths_in_json(v)]
    if isinstance(value, list):
        return [p for v in value for p in absolute_paths_in_json(v)]
    return []


def test_the_walk_sees_the_project():
    names = {p.relative_to(REPO).as_posix() for p in project_files()}
    assert {"README.md", "Makefile", "examples/sample-leaderworkerset.yaml", "docs/architecture.md"} <= names
    assert not any(name.startswith(".venv/") for name in names)


def test_no_file_refers_outside_the_repository_or_to_a_machine_path():
    found = []
    for path in project_files():
        text = text_of(path)
        if text is not None:
            found += offending_lines(path, text)
    assert not found, "files that refer outside the repository or to a machine path:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for():
    """The patterns find a sibling folder, a path of this machine and of other machines, and leave
    the paths the project itself uses alone."""
    here = REPO / "x.md"
    for bad in (
        f"see {SIBLING}/docs/x.md",
        *([f"{REPO.parent}/elsewhere/file"] if PARENT_PATH is not None else []),
        "cd /" + "work/wt12 && make",
        "cache under /" + "root/.cache/kueue-federation/bin",
        "/" + "home/someone/kubeconfig",
    ):
        assert offending_lines(here, bad), bad
    for fine in (
        "~/.cache/kueue-federation/bin",
        "/dev/shm/kueue-federation-fleet/<cluster>/<component>.log",
        '"/root/left/a"',
        "https://example.com/home/items",
        "kubectl get --raw /apis/visibility.kueue.x-k8s.io/v1beta1",
    ):
        assert not offending_lines(here, fine), fine


@pytest.mark.parametrize(
    "path", sorted(p for p in project_files() if p.suffix == ".json" and "docs" in p.relative_to(REPO).parts)
)
def test_generated_json_in_the_docs_holds_no_absolute_path(path):
    assert absolute_paths_in_json(json.loads(path.read_text())) == []
