"""`make conformance` (`python -m conformance`): upstream Kueue's e2e suites against fleets of ours.
Builds the suites (conformance/build.py); runs the MultiKueue family on a conformance fleet of a
manager cluster and two workers (`localfleet up --conformance`: our worker_agent everywhere and our
manager) prepared as conformance/environment.py says, and the single-cluster and sequential families on
a one-cluster fleet with our worker_agent as Kueue, prepared as upstream's kind cluster
(conformance/singlecluster.py); skips the specs that do not apply (conformance/specs.py) and prints
every spec's result and a summary line per family, `conformance <family>: P passed, F failed, N not
applicable of T`. Exit 1 if an applicable spec failed, 2 if the harness itself could not run.
docs/conformance.md has the tables and the command's options."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from conformance import build as suites_build
from conformance import environment as envmod
from conformance import report, singlecluster, specs, stand_ins
from conformance.bridge import RestartBridge
from localfleet.binaries import Binaries, read_versions
from localfleet.common import REPO, FleetError, log
from localfleet.kube import Kubectl
from localfleet.processes import State

DEFAULT_DIR = "/dev/shm/kueue-federation-conformance"
# The fleets the suites run on: the MultiKueue suites on a manager cluster and two workers, the
# single-cluster and sequential ones on one cluster with our worker_agent as Kueue (its nodes as many
# as upstream's kind cluster has workers).
MULTIKUEUE_FLEET, SINGLE_FLEET = "multikueue", "single"
UP_ARGS = {
    MULTIKUEUE_FLEET: ("--agents", "--manager", "--conformance", "--workers", "2", "--no-smoke"),
    SINGLE_FLEET: ("--agents", "--conformance", "--workers", "0", "--nodes", "2", "--no-smoke"),
}
LOCALFLEET = REPO / "hack" / "localfleet.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--suites",
        default=",".join(
            s
            for s in specs.SUITES
            if specs.family(s) in specs.DEFAULT_FAMILIES and any(x.applies for x in specs.of_suite(s))
        ),
        help="comma-separated suites or families (multikueue, singlecluster, sequential) to run "
        f"(default: every suite of {', '.join(specs.DEFAULT_FAMILIES)} with an applicable spec)",
    )
    p.add_argument(
        "--short", action="store_true", help=f"only {' and '.join(specs.SHORT_SUITES)} (make test)"
    )
    p.add_argument("--dir", default=DEFAULT_DIR, help="the MultiKueue suites' fleet's run directory")
    p.add_argument(
        "--single-dir",
        default=DEFAULT_DIR + "-single",
        help="the single-cluster and sequential suites' fleet's run directory",
    )
    p.add_argument(
        "--fleet",
        action="store_true",
        help="use the fleets already up in --dir / --single-dir; leave them up",
    )
    p.add_argument("--keep", action="store_true", help="leave the fleet up afterwards")
    p.add_argument("--out", default="conformance-results", help="JUnit files, suite logs and results.json")
    p.add_argument("--focus", default="", help="a ginkgo focus regex, to run some specs only")
    p.add_argument("--timeout", default="90m", help="each suite's ginkgo timeout")
    return p.parse_args(argv)


def fleet_of(suite: str) -> str:
    return MULTIKUEUE_FLEET if specs.family(suite) == specs.MULTIKUEUE else SINGLE_FLEET


def localfleet(run_dir: str, *args: str) -> None:
    cmd = [sys.executable, str(LOCALFLEET), "--dir", run_dir, *args]
    log("$ " + " ".join(cmd[1:]))
    if subprocess.run(cmd).returncode != 0:
        raise FleetError(f"localfleet {' '.join(args)} failed (logs in {run_dir})")


def prepare(state: State, out: Path, cluster_profile_crd: Path, bridge: RestartBridge) -> dict[str, str]:
    """Kind-style contexts, the kueue-system stand-ins and the configuration ConfigMap on every cluster,
    made Ready by the bridge (started here); returns the suites' environment."""
    bins = Binaries(read_versions())
    clusters = state.data["clusters"]
    kubeconfig = stand_ins.write_kubeconfig(clusters, out / "kind.kubeconfig")
    operators = stand_ins.fleet_operators(state)
    kubectls = {name: Kubectl(bins.path("kubectl"), c["kubeconfig"]) for name, c in clusters.items()}
    for name, c in clusters.items():
        agent = c.get("agent") or {}
        if not agent.get("config"):
            raise FleetError(f"{name} runs no worker_agent of ours: `up --agents` is needed")
        config = yaml.safe_load(Path(agent["config"]).read_text())
        docs = envmod.kueue_objects(name, config, manager=c.get("role") == "manager")
        stand_ins.apply(kubectls[name], docs + envmod.operator_objects(name, operators))
    bridge.start()
    stand_ins.wait_available(kubectls)
    # The ClusterProfile CRD (Open Cluster Management's cluster inventory) on the manager cluster, where
    # upstream's e2e setup installs it for the specs that connect a worker through a ClusterProfile.
    manager = next(c for c in clusters.values() if c.get("role") == "manager")
    Kubectl(bins.path("kubectl"), manager["kubeconfig"]).apply(cluster_profile_crd.read_text())
    servers = {name: c["server"] for name, c in clusters.items()}
    return envmod.suite_env(servers, str(kubeconfig))


def run_suite(sb: suites_build.SuiteBinaries, suite: str, env: dict[str, str], args, out: Path) -> bool:
    """Run one suite; True if it wrote a JUnit report."""
    junit = out / f"junit-{suite}.xml"
    junit.unlink(missing_ok=True)
    cmd = [
        str(sb.path(suite)),
        f"--ginkgo.junit-report={junit}",
        f"--ginkgo.timeout={args.timeout}",
        "--ginkgo.v",
        "--ginkgo.no-color",
    ]
    skip = specs.skip_pattern(suite)
    if skip:
        cmd.append(f"--ginkgo.skip={skip}")
    if specs.LABEL_FILTERS.get(suite):
        cmd.append(f"--ginkgo.label-filter={specs.LABEL_FILTERS[suite]}")
    if args.focus:
        cmd.append(f"--ginkgo.focus={args.focus}")
    log_file = out / f"{suite}.log"
    applicable = sum(s.applies for s in specs.of_suite(suite))
    log(f"running the {suite} suite ({applicable} applicable specs); output in {log_file}")
    t0 = time.monotonic()
    # From its package's directory, as `go test` runs it (the kueuectl spec finds
    # ../../../../bin/kubectl-kueue from there).
    cwd = sb.source / suites_build.suite_package(suite)
    with log_file.open("w") as f:
        rc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT)
    log(f"the {suite} suite exited {rc.returncode} after {time.monotonic() - t0:.0f} s")
    return junit.is_file()


def fleet_dir(args: argparse.Namespace, fleet: str) -> str:
    return args.dir if fleet == MULTIKUEUE_FLEET else args.single_dir


def start_fleet(fleet: str, sb: suites_build.SuiteBinaries, args, out: Path) -> tuple[RestartBridge, dict]:
    """The fleet's bridge (started) and the suites' environment, the fleet started unless --fleet."""
    run_dir = fleet_dir(args, fleet)
    if not args.fleet:
        localfleet(run_dir, "up", *UP_ARGS[fleet])
    state = State.load(Path(run_dir))
    if state is None:
        raise FleetError(f"no fleet in {run_dir}")
    clusters = state.data["clusters"]
    if fleet == MULTIKUEUE_FLEET:
        bridge = RestartBridge(Path(run_dir), clusters)
        return bridge, prepare(state, out, suites_build.cluster_profile_crd(sb), bridge)
    bridge = RestartBridge(Path(run_dir), clusters, merge=singlecluster.with_environment)
    return bridge, singlecluster.prepare(state, out, sb.source, bridge)


def run_on_fleet(
    fleet: str, suites: list[str], sb: suites_build.SuiteBinaries, args, out: Path
) -> dict[str, list[report.Case] | None]:
    """Each suite's JUnit cases (None: it wrote no report), run on a fleet of the kind it needs."""
    bridge = None
    cases: dict[str, list[report.Case] | None] = {}
    try:
        bridge, env = start_fleet(fleet, sb, args, out)
        for suite in suites:
            wrote = run_suite(sb, suite, env, args, out)
            junit = out / f"junit-{suite}.xml"
            cases[suite] = report.parse_junit(junit.read_text()) if wrote else None
    finally:
        if bridge is not None:
            bridge.stop()
        if not args.fleet and not args.keep:
            localfleet(fleet_dir(args, fleet), "down")
    return cases


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    asked = list(specs.SHORT_SUITES) if args.short else [s for s in args.suites.split(",") if s]
    suites = [s for name in asked for s in specs.FAMILIES.get(name, (name,))]  # a family: its suites
    unknown = [s for s in suites if s not in specs.SUITES]
    if unknown:
        print(
            f"unknown suite(s) {', '.join(unknown)}; the suites are {', '.join(specs.SUITES)}",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cases: dict[str, list[report.Case] | None] = {}
    try:
        sb = suites_build.build(suites)
        for fleet in (MULTIKUEUE_FLEET, SINGLE_FLEET):
            mine = [s for s in suites if fleet_of(s) == fleet]
            if mine:
                cases.update(run_on_fleet(fleet, mine, sb, args, out))
    except FleetError as e:
        print(f"conformance: the harness could not run: {e}", file=sys.stderr)
        return 2
    families = {specs.family(s) for s in suites}
    table = tuple(s for s in specs.SPECS if specs.family(s.suite) in families)
    res = report.results(cases, table, focused=bool(args.focus))
    print(report.table(res))
    lines = report.family_lines(res, [specs.family(s) for s in suites])
    (out / "results.json").write_text(
        json.dumps(
            {
                "summary": lines,
                "suites": suites,
                "seconds": round(time.monotonic() - started),
                "specs": [
                    {"suite": r.spec.suite, "spec": r.spec.text, "outcome": r.outcome, "detail": r.detail}
                    for r in res
                ],
            },
            indent=2,
        )
        + "\n"
    )
    print("\n".join(lines))
    return report.exit_code(res)
