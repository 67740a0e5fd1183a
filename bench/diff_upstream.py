"""Differential runs (issue 10): one scenario against our worker_agent and against upstream Kueue.

A scenario is one multi-document YAML file of plain Kueue v1beta1 objects (docs/differential.md).
For each engine the runner starts a fresh single cluster (bench.fleet's Cluster, as bench.engine),
installs that engine's CRDs, creates every object but the Workloads, starts the engine (our
`python -m worker_agent`, or upstream v0.19.2's `minimalkueue` built from its Go module), waits
until the engine has reported on every ClusterQueue and LocalQueue, then creates the Workloads in
file order, `scenario.kueue-federation.io/after` seconds apart. Like a job integration, the runner
marks an admitted Workload Finished after its `scenario.kueue-federation.io/runs-for` seconds and
drops the reservation of an evicted one. Once nothing that matters has changed for a few seconds
it reads every Workload's outcome: state, ClusterQueue, flavor per pod set and resource,
evictions by reason and the order of first admission. It prints the differences, then
`N workloads, M differ`, and exits 0 only when M is 0.

  .venv/bin/python -m bench.diff_upstream [SCENARIO_OR_DIR ...]   (default: tests/scenarios)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import common
from bench.common import SHM, BenchError, Obj, end_on_sigterm, say, set_prog, write_json
from bench.diff_run import EngineResult, Outcome, run_engine
from bench.diff_scenario import (
    DOC_PATH,
    FIELDS,
    ORDER_TOLERANCE_S,
    SCENARIO_DIR,
    Scenario,
    ScenarioError,
    group_by_config,
    load_scenario,
    scenario_paths,
)
from bench.engine_procs import ensure_minimalkueue

# ==============================================================================================
# Comparison
# ==============================================================================================


@dataclass(frozen=True)
class Difference:
    scenario: str
    workload: str
    field: str
    ours: str
    upstream: str
    listed: str | None = None  # the reason given in docs/differential.md


def _order_label(outcome: Outcome, rank: dict[str, int], key: str) -> str:
    if outcome.first_admitted_s is None:
        return "never admitted"
    return f"#{rank[key]} at {outcome.first_admitted_s:.1f}s"


def order_inversions(
    ours: dict[str, Outcome], upstream: dict[str, Outcome], group: Any = lambda _key: ""
) -> set[str]:
    """Workloads whose first admission is clearly before another's (of the same group: scenario)
    on one engine, clearly after on the other (both gaps above ORDER_TOLERANCE_S)."""
    both = [
        k
        for k, o in ours.items()
        if o.first_admitted_s is not None and k in upstream and upstream[k].first_admitted_s is not None
    ]
    flagged: set[str] = set()
    for i, a in enumerate(both):
        for b in both[i + 1 :]:
            if group(a) != group(b):
                continue
            da = ours[b].first_admitted_s - ours[a].first_admitted_s  # type: ignore[operator]
            du = upstream[b].first_admitted_s - upstream[a].first_admitted_s  # type: ignore[operator]
            if (da > ORDER_TOLERANCE_S and du < -ORDER_TOLERANCE_S) or (
                da < -ORDER_TOLERANCE_S and du > ORDER_TOLERANCE_S
            ):
                flagged.update((a, b))
    return flagged


def _ranks(outcomes: dict[str, Outcome]) -> dict[str, int]:
    admitted = sorted((o.first_admitted_s, k) for k, o in outcomes.items() if o.first_admitted_s is not None)
    return {k: i for i, (_t, k) in enumerate(admitted, 1)}


def compare(
    scenario: Scenario, ours: EngineResult, upstream: EngineResult, listed: dict[tuple[str, str, str], str]
) -> list[Difference]:
    diffs: list[Difference] = []
    inversions = order_inversions(ours.outcomes, upstream.outcomes, scenario.origin_of)
    ours_rank, upstream_rank = _ranks(ours.outcomes), _ranks(upstream.outcomes)
    for key, mine in ours.outcomes.items():
        name_of_scenario = scenario.origin_of(key)
        theirs = upstream.outcomes.get(key)
        if theirs is None:
            continue
        for name in FIELDS:
            if name == "order":
                if key not in inversions:
                    continue
                a, b = _order_label(mine, ours_rank, key), _order_label(theirs, upstream_rank, key)
            else:
                a, b = mine.field(name), theirs.field(name)
                if a == b:
                    continue
            why = listed.get((name_of_scenario, key, name)) or listed.get((name_of_scenario, "*", name))
            diffs.append(Difference(name_of_scenario, key, name, a, b, why))
    return diffs


def known_differences(doc: Path = DOC_PATH) -> dict[tuple[str, str, str], str]:
    """Rows `| scenario.yaml | namespace/workload or * | field | why |` of the doc's
    "Known differences" table."""
    listed: dict[tuple[str, str, str], str] = {}
    try:
        text = doc.read_text()
    except OSError:
        return listed
    section = text.split("## Known differences", 1)[-1] if "## Known differences" in text else ""
    section = section.split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].endswith(".yaml") and cells[2] in FIELDS:
            listed[(cells[0], cells[1], cells[2])] = cells[3]
    return listed


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def format_differences(diffs: list[Difference]) -> str:
    rows = [["SCENARIO", "WORKLOAD", "FIELD", "OURS", "UPSTREAM", "LISTED"]]
    for d in diffs:
        rows.append([d.scenario, d.workload, d.field, d.ours, d.upstream, "yes" if d.listed else ""])
    return format_table(rows)


def format_outcomes(scenario: Scenario, results: dict[str, EngineResult]) -> str:
    rows = [["WORKLOAD", "ENGINE", "STATE", "CLUSTERQUEUE", "FLAVORS", "EVICTIONS", "ADMITTED AT"]]
    for w in scenario.workloads:
        for engine, result in results.items():
            o = result.outcomes.get(w.key)
            if o is None:
                continue
            at = "-" if o.first_admitted_s is None else f"{o.first_admitted_s:.1f}s"
            rows.append([w.key, engine, o.state, o.cluster_queue, o.flavors, o.evictions, at])
    return format_table(rows)


# ==============================================================================================
# main
# ==============================================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="diff_upstream", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("scenarios", nargs="*", help="scenario files or directories (default: tests/scenarios)")
    p.add_argument("--engine", choices=("both", "ours", "upstream"), default="both")
    p.add_argument(
        "--quiet-seconds", type=float, default=4.0, help="no Workload change this long (default 4)"
    )
    p.add_argument(
        "--timeout", type=float, default=180.0, help="seconds per scenario and engine (default 180)"
    )
    p.add_argument("--outcomes", action="store_true", help="also print every Workload's outcome per engine")
    p.add_argument(
        "--allow-listed",
        action="store_true",
        help="exit 0 when every difference is listed in docs/differential.md",
    )
    p.add_argument(
        "--together",
        action="store_true",
        help="run the scenarios as one, on one fresh cluster per engine (faster; their names must not clash)",
    )
    p.add_argument("--json", metavar="PATH", help="write outcomes and differences as JSON")
    p.add_argument("--work-dir", help="engine logs (default /tmp/kueue-federation-diff/<time>)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_prog("diff-upstream")
    end_on_sigterm()
    run_root = SHM / f"kueue-federation-diff-{os.getpid()}"
    work_root = common.work_dir(args.work_dir, "", root=Path("/tmp/kueue-federation-diff"))
    engines = ["ours", "upstream"] if args.engine == "both" else [args.engine]
    listed = known_differences()
    all_diffs: list[Difference] = []
    report: Obj = {"scenarios": {}}
    total = 0
    failed = False
    try:
        scenarios = [load_scenario(p) for p in scenario_paths(args.scenarios or [str(SCENARIO_DIR)])]
        if args.together and len(scenarios) > 1:
            scenarios = group_by_config(scenarios)
        if "upstream" in engines:
            ensure_minimalkueue()
        for scenario in scenarios:
            say(f"scenario {scenario.name}: {len(scenario.workloads)} workloads")
            work_dir = work_root / scenario.path.stem
            work_dir.mkdir(parents=True, exist_ok=True)
            results: dict[str, EngineResult] = {}
            for engine in engines:
                results[engine] = run_engine(engine, scenario, args, run_root, work_dir)
                r = results[engine]
                cpu = "n/a" if r.engine_cpu_s is None else f"{r.engine_cpu_s:.2f}s"
                how = "error" if r.error else "timed out" if r.timed_out else "quiet"
                say(
                    f"{scenario.name} on {engine}: {how}"
                    f" after {r.wall_s or 0:.1f}s, engine CPU {cpu}, {r.workload_updates} Workload updates"
                )
                failed = failed or r.error is not None or r.timed_out
            if args.outcomes or len(engines) == 1:
                print(f"== {scenario.name}", flush=True)
                print(format_outcomes(scenario, results), flush=True)
            total += len(scenario.workloads)
            diffs: list[Difference] = []
            if len(engines) == 2:
                diffs = compare(scenario, results["ours"], results["upstream"], listed)
                all_diffs.extend(diffs)
            report["scenarios"][scenario.name] = {
                "results": {k: v.to_dict() for k, v in results.items()},
                "differences": [asdict(d) for d in diffs],
            }
        differing = {(d.scenario, d.workload) for d in all_diffs}
        unlisted = {(d.scenario, d.workload) for d in all_diffs if not d.listed}
        if all_diffs:
            print(format_differences(all_diffs), flush=True)
        report["workloads"], report["differ"], report["unlisted"] = total, len(differing), len(unlisted)
        if args.json:
            write_json(args.json, report)
        say(f"engine logs in {work_root}")
        if len(engines) == 2:
            suffix = (
                f" ({len(differing) - len(unlisted)} listed in docs/differential.md)" if differing else ""
            )
            print(f"{total} workloads, {len(differing)} differ{suffix}", flush=True)
        if failed:
            return 1
        return 0 if not (unlisted if args.allow_listed else differing) else 1
    except ScenarioError as e:
        say(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        say("interrupted; clusters and engine processes were stopped")
        return 130
    except (BenchError, subprocess.SubprocessError) as e:
        say(f"error: {e}")
        return 1
    finally:
        with contextlib.suppress(OSError):
            run_root.rmdir()


if __name__ == "__main__":
    sys.exit(main())
