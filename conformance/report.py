"""What `make conformance` reports: the result of every spec of the table (conformance/specs.py), read
from the suites' JUnit files, and the summary line. Pure: JUnit text in, results out."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from conformance.specs import FAMILIES, SPECS, Spec, find

PASSED, FAILED, NOT_APPLICABLE, NOT_RUN = "passed", "failed", "not applicable", "not run"
_LABELS = re.compile(r"(\s\[[^\]]*\])+$")


@dataclass(frozen=True)
class Result:
    spec: Spec
    outcome: str
    detail: str = ""  # the failure's message, or the reason it does not apply or did not run


@dataclass(frozen=True)
class Case:
    """One JUnit test case of a suite: a spec, or a suite node such as [SynchronizedBeforeSuite]."""

    name: str
    status: str  # passed, failed, skipped, pending
    message: str = ""


def spec_text(case_name: str) -> str:
    """A ginkgo JUnit case name without its node type prefix ("[It] ") and its labels suffix."""
    name = re.sub(r"^\[[A-Za-z]+\]\s*", "", case_name.strip())
    return _LABELS.sub("", name)


def parse_junit(text: str) -> list[Case]:
    """The test cases of a ginkgo JUnit report."""
    root = ET.fromstring(text)
    cases = []
    for tc in root.iter("testcase"):
        failure = tc.find("failure")
        if failure is None:
            failure = tc.find("error")
        status = tc.get("status") or ""
        if failure is not None:
            status = "failed"
        elif not status:
            status = "skipped" if tc.find("skipped") is not None else "passed"
        message = ""
        if failure is not None:
            message = (failure.get("message") or failure.text or "").strip()
        cases.append(Case(tc.get("name") or "", status, message))
    return cases


def results(
    suite_cases: dict[str, list[Case] | None], specs: tuple[Spec, ...] = SPECS, focused: bool = False
) -> list[Result]:
    """Each spec of the table with its outcome. A suite absent from `suite_cases` was not asked for;
    one mapped to None never produced a report (its build or start failed). With `focused` (a
    `--focus` run), an applicable spec that did not run was left out by the focus, not failed."""
    out = []
    for spec in specs:
        if not spec.applies:
            out.append(Result(spec, NOT_APPLICABLE, spec.reason))
            continue
        if spec.suite not in suite_cases:
            out.append(Result(spec, NOT_RUN, f"the {spec.suite} suite was not run"))
            continue
        cases = suite_cases[spec.suite]
        if cases is None:
            out.append(Result(spec, FAILED, f"the {spec.suite} suite wrote no report"))
            continue
        mine = [c for c in cases if find(spec.suite, spec_text(c.name), specs) == spec]
        suite_failures = [c for c in cases if c.status == "failed" and "Suite]" in c.name]
        if any(c.status == "failed" for c in mine):
            msg = next(c.message for c in mine if c.status == "failed")
            out.append(Result(spec, FAILED, first_line(msg)))
        elif any(c.status == "passed" for c in mine):
            out.append(Result(spec, PASSED))
        elif suite_failures:
            out.append(Result(spec, FAILED, "suite setup failed: " + first_line(suite_failures[0].message)))
        elif focused:
            out.append(Result(spec, NOT_RUN, "left out by --focus"))
        else:
            out.append(Result(spec, FAILED, "the spec did not run (skipped by the suite)"))
    return out


def first_line(message: str, limit: int = 240) -> str:
    line = next((x.strip() for x in message.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def summary_line(res: list[Result]) -> str:
    count = {o: sum(r.outcome == o for r in res) for o in (PASSED, FAILED, NOT_APPLICABLE, NOT_RUN)}
    line = (
        f"conformance: {count[PASSED]} passed, {count[FAILED]} failed, "
        f"{count[NOT_APPLICABLE]} not applicable of {len(res)}"
    )
    if count[NOT_RUN]:
        line += f" ({count[NOT_RUN]} not run: left out by --suites or --focus)"
    return line


def family_lines(res: list[Result], families: list[str]) -> list[str]:
    """The summary line of each suite family asked for (in FAMILIES' order), of its specs only; then,
    with more than one, the line of them all."""
    asked = [f for f in FAMILIES if f in families]
    lines = []
    for fam in asked:
        mine = [r for r in res if r.spec.suite in FAMILIES[fam]]
        lines.append(summary_line(mine).replace("conformance:", f"conformance {fam}:", 1))
    if len(asked) > 1:
        lines.append(summary_line([r for r in res if any(r.spec.suite in FAMILIES[f] for f in asked)]))
    return lines


def table(res: list[Result]) -> str:
    """One line a spec: outcome, suite, text, and the reason or failure."""
    lines = []
    for r in res:
        detail = f"  -- {r.detail}" if r.detail else ""
        lines.append(f"{r.outcome:<15} {r.spec.suite:<11} {r.spec.text}{detail}")
    return "\n".join(lines)


def exit_code(res: list[Result]) -> int:
    return 1 if any(r.outcome == FAILED for r in res) else 0
