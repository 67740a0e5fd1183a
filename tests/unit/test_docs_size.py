"""The docs stay readable in minutes and their links lead somewhere: the two pages that grew into
notebooks (the benchmarks, the MultiKueue setup transcript) stay under 400 lines, dated runs going
to docs/benchmarks/history/; every relative link in README.md and docs/**/*.md names a file that
exists, and an anchor into a markdown file names one of its headings (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHORT_PAGES = ("docs/benchmarks.md", "docs/multikueue-setup.md")
MAX_LINES = 400

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose_lines(path: Path):
    """(number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path):
        match = HEADING.match(line)
        if match:
            name = slug(match.group(2))
            count = seen.get(name, 0)
            seen[name] = count + 1
            found.add(name if count == 0 else f"{name}-{count}")
    return found


def relative_links(path: Path):
    """(number, target) of every link that is not a URL."""
    for number, line in prose_lines(path):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not SCHEME.match(target):
                yield number, target


@pytest.mark.parametrize("page", SHORT_PAGES)
def test_the_short_pages_stay_short(page):
    lines = len((REPO / page).read_text().splitlines())
    assert lines < MAX_LINES, f"{page} has {lines} lines; move dated runs or transcripts out of it"


def test_every_relative_link_names_a_file_that_exists():
    broken = []
    for path in markdown_files():
        for number, target in relative_links(path):
            file_part = target.partition("#")[0]
            if file_part and not (path.parent / file_part).exists():
                broken.append(f"{path.relative_to(REPO)}:{number}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_every_anchor_names_a_heading():
    cache: dict[Path, set[str]] = {}
    broken = []
    for path in markdown_files():
        for number, target in relative_links(path):
            file_part, _, anchor = target.partition("#")
            target_path = (path.parent / file_part).resolve() if file_part else path
            if not anchor or target_path.suffix != ".md" or not target_path.is_file():
                continue
            if target_path not in cache:
                cache[target_path] = anchors(target_path)
            if anchor not in cache[target_path]:
                broken.append(f"{path.relative_to(REPO)}:{number}: {target}")
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)


def test_the_checks_catch_what_they_are_for(tmp_path):
    page = tmp_path / "a.md"
    page.write_text(
        "# A page\n\n## Where the `apiservers'` CPU goes\n\n[x](b.md) [y](#a-page) `[z](gone.md)`\n"
        "```\n[w](also-gone.md)\n```\n[u](https://example.com/x)\n"
    )
    assert anchors(page) == {"a-page", "where-the-apiservers-cpu-goes"}
    assert [target for _, target in relative_links(page)] == ["b.md", "#a-page"]
