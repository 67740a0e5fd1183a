"""`make conformance` (`python -m conformance`): upstream Kueue's MultiKueue e2e suites against a fleet of
ours. Builds the suites (conformance/build.py), starts a conformance fleet (`localfleet up --conformance`:
a manager cluster and two workers, our worker_agent everywhere and our manager), provides what the
suites expect of their clusters (conformance/environment.py), runs each suite with the specs that do not
apply skipped (conformance/specs.py), and prints every spec's result and the summary line
`conformance: P passed, F failed, N not applicable of T`. Exit 1 if an applicable spec failed, 2 if the
harness itself could not run. docs/conformance.md has the table and the command's options."""

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
from conformance import report, specs
from conformance.bridge import RestartBridge
from localfleet.binaries import Binaries, read_versions
from localfleet.common import REPO, FleetError, log
from localfleet.kube import Kubectl
from localfleet.processes import State, wait_for

DEFAULT_DIR = "/dev/shm/kueue-federation-conformance"
LOCALFLEET = REPO / "hack" / "localfleet.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--suites",
        default=",".join(s for s in specs.SUITES if any(x.applies for x in specs.of_suite(s))),
        help="comma-separated suites to run (default: every suite with an applicable spec)",
    )
    p.add_argument(
        "--short", action="store_true", help=f"only {' and '.join(specs.SHORT_SUITES)} (make test)"
    )
    p.add_argument("--dir", default=DEFAULT_DIR, help="the fleet's run directory")
    p.add_argument("--fleet", action="store_true", help="use the fleet already up in --dir; leave it up")
    p.add_argument("--keep", action="store_true", help="leave the fleet up afterwards")
    p.add_argument("--out", default="conformance-results", help="JUnit files, suite logs and results.json")
    p.add_argument("--focus", default="", help="a ginkgo focus regex, to run some specs only")
    p.add_argument("--timeout", default="90m", help="each suite's ginkgo timeout")
    return p.parse_args(argv)


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
    admin = {name: yaml.safe_load(Path(c["kubeconfig"]).read_text()) for name, c in clusters.items()}
    kubeconfig = out / "kind.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(envmod.kind_kubeconfig(admin)))
    kubeconfig.chmod(0o600)
    options = state.data["options"]
    left_out = set(options.get("leftOut") or ())
    operators = [
        k
        for k, on in (
            ("lws", True),
            ("jobset", options.get("jobset")),
            ("ray", "ray" not in left_out),
            ("appwrapper", "appwrapper" not in left_out),
        )
        if on
    ]
    for name, c in clusters.items():
        kubectl = Kubectl(bins.path("kubectl"), c["kubeconfig"])
        agent = c.get("agent") or {}
        if not agent.get("config"):
            raise FleetError(f"{name} runs no worker_agent of ours: `up --agents` is needed")
        config = yaml.safe_load(Path(agent["config"]).read_text())
        docs = envmod.kueue_objects(name, config, manager=c.get("role") == "manager")
        docs += envmod.operator_objects(name, operators)
        kubectl("create", "namespace", envmod.KUEUE_NAMESPACE, check=False)
        for ns in {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}:
            kubectl("create", "namespace", ns, check=False)
        kubectl.apply([d for d in docs if d["kind"] != "Namespace"])
    bridge.start()
    for name, c in clusters.items():
        kubectl = Kubectl(bins.path("kubectl"), c["kubeconfig"])
        wait_for(
            f"{name} stand-in Deployments Available",
            lambda kubectl=kubectl: available(kubectl),
            180,
            interval=1,
        )
    # The ClusterProfile CRD (Open Cluster Management's cluster inventory) on the manager cluster, where
    # upstream's e2e setup installs it for the specs that connect a worker through a ClusterProfile.
    manager = next(c for c in clusters.values() if c.get("role") == "manager")
    Kubectl(bins.path("kubectl"), manager["kubeconfig"]).apply(cluster_profile_crd.read_text())
    servers = {name: c["server"] for name, c in clusters.items()}
    return envmod.suite_env(servers, str(kubeconfig))


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
    if suite == "extended":
        cmd.append(f"--ginkgo.label-filter={specs.EXTENDED_LABEL_FILTER}")
    if args.focus:
        cmd.append(f"--ginkgo.focus={args.focus}")
    log_file = out / f"{suite}.log"
    applicable = sum(s.applies for s in specs.of_suite(suite))
    log(f"running the {suite} suite ({applicable} applicable specs); output in {log_file}")
    t0 = time.monotonic()
    with log_file.open("w") as f:
        rc = subprocess.run(cmd, cwd=sb.source, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT)
    log(f"the {suite} suite exited {rc.returncode} after {time.monotonic() - t0:.0f} s")
    return junit.is_file()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    suites = list(specs.SHORT_SUITES) if args.short else [s for s in args.suites.split(",") if s]
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
    bridge = None
    try:
        sb = suites_build.build(suites)
        if not args.fleet:
            localfleet(
                args.dir, "up", "--agents", "--manager", "--conformance", "--workers", "2", "--no-smoke"
            )
        state = State.load(Path(args.dir))
        if state is None:
            raise FleetError(f"no fleet in {args.dir}")
        bridge = RestartBridge(Path(args.dir), state.data["clusters"])
        env = prepare(state, out, suites_build.cluster_profile_crd(sb), bridge)
    except FleetError as e:
        print(f"conformance: the harness could not run: {e}", file=sys.stderr)
        if bridge is not None:
            bridge.stop()
        if not args.fleet and not args.keep:
            localfleet(args.dir, "down")
        return 2
    cases: dict[str, list[report.Case] | None] = {}
    try:
        for suite in suites:
            wrote = run_suite(sb, suite, env, args, out)
            junit = out / f"junit-{suite}.xml"
            cases[suite] = report.parse_junit(junit.read_text()) if wrote else None
    finally:
        bridge.stop()
        if not args.fleet and not args.keep:
            localfleet(args.dir, "down")
    res = report.results(cases, focused=bool(args.focus))
    print(report.table(res))
    line = report.summary_line(res)
    (out / "results.json").write_text(
        json.dumps(
            {
                "summary": line,
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
    print(line)
    return report.exit_code(res)
