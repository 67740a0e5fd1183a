"""A local fleet of real Kubernetes control planes (one manager, N workers) on 127.0.0.1, without Docker.

Subcommands:
  build   build (or reuse from ~/.cache) kube-apiserver, kube-controller-manager, kube-scheduler,
          kubectl and etcd from the Kubernetes Go modules, plus kwok and the LeaderWorkerSet controller
  up      start the fleet: etcd + kube-apiserver + kube-controller-manager per cluster; on workers also
          kube-scheduler, kwok with fake Ready nodes, and the LWS controller with its webhooks;
          with --agents also our worker_agent (admission engine and webhooks) on every cluster, with
          --manager also our federation manager on the manager cluster, with --setup-multikueue
          also what `setup-multikueue` creates and then `sample-lws` (unless --no-sample);
          --upstream-kueue CLUSTER runs upstream Kueue there instead of ours (docs/local-fleet.md);
          --shared-etcd (one etcd, an --etcd-prefix per cluster) and --light-workers (no controllers,
          kwok, nodes or LWS on workers) make clusters light enough for 20 workers
  setup-multikueue
          the MultiKueue setup guide's objects (queues on every cluster; Secrets, MultiKueueClusters,
          MultiKueueConfig and AdmissionCheck on the manager), then how to submit and watch a Job
  sample-lws
          the sample LeaderWorkerSet (examples/sample-leaderworkerset.yaml) on the manager,
          until the manager's LWS shows every group ready on one worker; then how to look at it
  env     print shell exports (kubeconfigs, state file, PATH with the cached kubectl first)
  status  what is up, with memory per process
  down    stop exactly the recorded processes and remove the run directory (idempotent)

It runs with a plain `python3`: when PyYAML or cryptography are missing it creates the project's
.venv, installs the project there and re-executes itself with that interpreter.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from localfleet.binaries import Binaries, Builder, read_versions
from localfleet.cluster import FleetOptions
from localfleet.common import (
    AGENT_COMPONENT,
    DEFAULT_RUN_DIR,
    DEFAULT_WORKER_LOST_TIMEOUT,
    DISPATCHERS,
    MANAGER,
    MANAGER_COMPONENT,
    UPSTREAM_KUEUE_COMPONENT,
    FleetError,
    fmt_duration,
    log,
)
from localfleet.fleet import FleetUp
from localfleet.kube import (
    Kubectl,
    apiservice_available,
    cluster_metrics_token,
    http_ok,
    https_ok,
    metrics_summary,
)
from localfleet.multikueue import (
    MAX_MULTIKUEUE_CLUSTERS,
    SAMPLE_LWS_FILE,
    SAMPLE_LWS_TIMEOUT,
    localfleet_command,
    sample_lws,
    setup_multikueue,
)
from localfleet.operators import OPERATORS
from localfleet.ours import VISIBILITY_GROUP, VISIBILITY_VERSIONS
from localfleet.processes import (
    State,
    child_pid,
    down,
    fleet_is_running,
    pid_is_ours,
    rss_mib,
    stop_fleet,
    supervised_status,
)
from localfleet.realnodes import build_node_binaries, check_host, load_image, status_lines
from localfleet.upstream import upstream_kueue_clusters, upstream_kueue_config


def go_duration(text: str) -> str:
    """A non-negative Go duration (20s, 1m30s, 0), as the manager's Configuration takes it."""
    value = text.strip()
    if value == "0" or _GO_DURATION.fullmatch(value):
        return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use Go syntax such as 20s, 5m or 1h30m")


_GO_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")


def cmd_build(args: argparse.Namespace) -> None:
    Builder(Binaries(read_versions())).build_all(
        force=args.force,
        upstream_kueue=args.upstream_kueue or args.upstream_kueue_lifted,
        helm=args.helm,
        promtool=args.promtool,
        upstream_kueue_lifted=args.upstream_kueue_lifted,
    )
    if args.real_nodes:
        check_host()
        build_node_binaries(Binaries(read_versions()))


def _checked_up_args(args: argparse.Namespace) -> tuple[str, ...]:
    """Checks how `up`'s flags combine (--setup-multikueue turns on --agents and --manager);
    returns the clusters that run upstream Kueue."""
    if args.workers < 0:
        raise FleetError("--workers must be 0 (a manager cluster only) or more")
    if args.setup_multikueue:
        args.agents = args.manager = True
        if args.workers == 0:
            raise FleetError("--setup-multikueue needs at least one worker (--workers N, N >= 1)")
        if args.workers > MAX_MULTIKUEUE_CLUSTERS:
            raise FleetError(
                f"--setup-multikueue: at most {MAX_MULTIKUEUE_CLUSTERS} workers (a MultiKueueConfig lists "
                f"at most {MAX_MULTIKUEUE_CLUSTERS} clusters)"
            )
    if args.manager and not args.agents:
        raise FleetError(
            "--manager requires --agents: the manager dispatches Workloads that the worker_agents admit "
            "(use `up --agents --manager`)"
        )
    upstream = upstream_kueue_clusters(args.upstream_kueue or [], args.workers)
    if args.no_kueue_crds and (args.agents or upstream):
        raise FleetError(
            "--no-kueue-crds makes clusters that do not serve kueue.x-k8s.io: no Kueue can run there "
            "(drop --agents, --manager, --setup-multikueue and --upstream-kueue)"
        )
    if args.upstream_kueue_lifted and not upstream:
        raise FleetError("--upstream-kueue-lifted needs --upstream-kueue CLUSTER")
    if args.dispatcher == "LeastLoaded" and MANAGER in upstream:
        raise FleetError("--dispatcher LeastLoaded is ours: upstream Kueue has no such dispatcher")
    return upstream


def _fleet_options(args: argparse.Namespace, upstream: tuple[str, ...]) -> FleetOptions:
    """`up`'s flags as the FleetOptions of the fleet to start."""
    return FleetOptions(
        workers=args.workers,
        nodes=args.nodes,
        node_cpu=args.node_cpu,
        node_memory=args.node_memory,
        node_pods=args.node_pods,
        smoke=not args.no_smoke,
        agents=args.agents,
        manager=args.manager,
        setup_multikueue=args.setup_multikueue,
        run_dir=Path(args.dir),
        client_qps=args.client_qps,
        client_burst=args.client_burst,
        event_types=args.event_types,
        event_loop=args.event_loop,
        worker_lost_timeout=args.worker_lost_timeout,
        dispatcher=args.dispatcher,
        upstream_kueue=upstream,
        upstream_kueue_config=upstream_kueue_config(args.upstream_kueue_config, upstream),
        upstream_kueue_lifted=args.upstream_kueue_lifted,
        shared_etcd=args.shared_etcd,
        apiserver_profiling=args.apiserver_profiling,
        light_workers=args.light_workers,
        jobset=not args.no_jobset,
        trainer=not args.no_trainer and not args.no_jobset,
        left_out=frozenset(args.no_operator),
        kueue_crds=not args.no_kueue_crds,
        conformance=args.conformance,
        real_nodes=args.real_nodes,
    )


def cmd_up(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    upstream = _checked_up_args(args)
    bins = Binaries(read_versions())
    opts = _fleet_options(args, upstream)
    if opts.conformance and opts.light_workers:
        raise FleetError("--conformance needs pods on every cluster: drop --light-workers")
    if opts.real_nodes:
        if opts.light_workers or opts.workers == 0:
            raise FleetError(
                "--real-nodes runs nodes on workers that run pods: drop --light-workers, add workers"
            )
        check_host()
    existing = State.load(opts.run_dir)
    if existing and existing.data.get("status") == "up" and fleet_is_running(existing):
        log(f"a fleet is already up in {opts.run_dir}; `down` first to start a new one")
        return
    if existing or opts.run_dir.exists():
        log(f"cleaning up a previous run in {opts.run_dir}")
        down(opts.run_dir)
    fleet = FleetUp(opts, bins)
    # An operator the fleet leaves out is not built either.
    left_out = {op.key for op in OPERATORS} - {op.key for op in fleet.operators()}
    Builder(bins).build_all(
        upstream_kueue=bool(upstream), upstream_kueue_lifted=args.upstream_kueue_lifted, skip=left_out
    )
    try:
        fleet.run()
        if opts.setup_multikueue:
            setup_multikueue(fleet.state)
    except BaseException:
        log(f"fleet start failed; logs are in {opts.run_dir}/<cluster>/<component>.log")
        if not args.keep_on_failure:
            stop_fleet(fleet.state)
            fleet.state.data["status"] = "failed"
            fleet.state.save()
        raise
    if opts.setup_multikueue and not args.no_sample and opts.light_workers:
        log("no sample LeaderWorkerSet: --light-workers run no pods (`sample-lws` needs a full fleet)")
    elif opts.setup_multikueue and not args.no_sample:
        print()
        try:
            sample_lws(fleet.state)
        except FleetError as e:
            # The fleet itself is up and set up: keep it, so that the logs and objects can be looked at.
            raise FleetError(
                f"{e}\nthe fleet is still up in {opts.run_dir} (`{localfleet_command(opts.run_dir)} down` "
                "stops it)"
            ) from None
    log(f"up finished in {fmt_duration(time.monotonic() - t0)}")


def cmd_down(args: argparse.Namespace) -> None:
    run_dir = Path(args.dir)
    if not run_dir.exists():
        log(f"nothing to stop ({run_dir} does not exist)")
        return
    stopped = down(run_dir)
    log(f"stopped {stopped} processes and removed {run_dir}")


def cmd_load_image(args: argparse.Namespace) -> None:
    nodes = load_image(load_running_state(Path(args.dir)), Path(args.file))
    log(f"imported {args.file} into {', '.join(nodes)}")


def load_running_state(run_dir: Path) -> State:
    state = State.load(run_dir)
    if state is None:
        raise FleetError(f"no fleet in {run_dir}: run `python3 hack/localfleet.py up` first")
    return state


def cmd_setup_multikueue(args: argparse.Namespace) -> None:
    state = load_running_state(Path(args.dir))
    if state.data.get("status") != "up" or not fleet_is_running(state):
        raise FleetError(f"the fleet in {args.dir} is not up (`status` shows what runs); start it with `up`")
    setup_multikueue(state)


def cmd_sample_lws(args: argparse.Namespace) -> None:
    state = load_running_state(Path(args.dir))
    if state.data.get("status") != "up" or not fleet_is_running(state):
        raise FleetError(f"the fleet in {args.dir} is not up (`status` shows what runs); start it with `up`")
    sample_lws(state, Path(args.file), args.timeout)


def cmd_env(args: argparse.Namespace) -> None:
    state = load_running_state(Path(args.dir))
    bins = Binaries(state.data.get("versions") or read_versions())
    lines = []
    worker_index = 0
    for _name, c in state.data["clusters"].items():
        if c["role"] == "manager":
            lines.append(f"export KUBECONFIG_MANAGER={c['kubeconfig']}")
        else:
            worker_index += 1
            lines.append(f"export KUBECONFIG_WORKER{worker_index}={c['kubeconfig']}")
            if "multikueueKubeconfig" in c:
                lines.append(f"export WORKER{worker_index}_MULTIKUEUE_KUBECONFIG={c['multikueueKubeconfig']}")
    upstream = [name for name, c in state.data["clusters"].items() if "upstreamKueue" in c]
    if upstream:
        lines.append(f"export LOCALFLEET_UPSTREAM_KUEUE={','.join(upstream)}")
    lines.append(f"export LOCALFLEET_KUBECONFIG={state.data['mergedKubeconfig']}")
    lines.append(f"export LOCALFLEET_STATE={state.path}")
    lines.append(f'export PATH="{bins.k8s_dir}:$PATH"')
    print("\n".join(lines))


def cmd_status(args: argparse.Namespace) -> None:
    run_dir = Path(args.dir)
    state = State.load(run_dir)
    if state is None:
        print(f"no fleet in {run_dir}")
        return
    print(f"fleet in {run_dir}: {state.data.get('status')}")
    ca = run_dir / "pki" / "ca.crt"
    for name, c in state.data["clusters"].items():
        pki = Path(c["kubeconfig"]).parent / "pki"
        ready = ca.exists() and https_ok(f"{c['server']}/readyz", ca, pki / "admin.crt", pki / "admin.key")
        procs = [p for p in state.data["processes"] if p["cluster"] == name]
        pids = {id(p): child_pid(p) for p in procs}
        total = sum(rss_mib(pid) for pid in pids.values() if pid)
        print(
            f"  {name} ({c['role']}) {c['server']} apiserver {'ready' if ready else 'NOT ready'}, "
            f"RSS {total:.0f} MiB"
        )
        print(f"    {'COMPONENT':<24} {'PID':<8} {'STATE':<9} {'RESTARTS':<9} {'LAST EXIT':<34} RSS")
        for p in procs:
            print(process_line(state, c, p, pids[id(p)]))
    bins = Binaries(state.data.get("versions") or read_versions())
    for line in status_lines(
        state, lambda name: Kubectl(bins.path("kubectl"), state.cluster(name)["kubeconfig"])
    ):
        print(line)


def process_line(state: State, c: dict, p: dict, pid: int | None) -> str:
    """One process of a cluster in `status`: pid, state, restarts, last exit, RSS, readiness."""
    alive = pid is not None
    rss = f"{rss_mib(pid):.0f} MiB" if pid else "-"
    extra = kueue_details(state, c, p["component"], alive)
    status = supervised_status(p)
    if alive:
        running = "running"
    elif status.get("state") == "waiting" and pid_is_ours(p):
        running = "BACKOFF"  # exited; its supervisor starts it again at nextStartAt
    else:
        running = "STOPPED"
    return (
        f"    {p['component']:<24} {pid or '-'!s:<8} {running:<9} {status.get('restarts', 0)!s:<9} "
        f"{last_exit_text(status):<34} {rss}{extra}"
    )


def kueue_details(state: State, c: dict, component: str, alive: bool) -> str:
    """What `status` adds after a Kueue process (ours or upstream's): readiness, endpoints, metrics."""
    if component == AGENT_COMPONENT and "agent" in c:
        ready = alive and http_ok(f"{c['agent']['health']}/readyz")
        extra = f"  {'ready' if ready else 'NOT ready'}, webhooks {c['agent']['webhook']}"
        if alive:
            extra += ", " + metrics_summary(c["agent"]["metrics"], cluster_metrics_token(c))
        if "visibility" in c["agent"]:
            bins = Binaries(state.data.get("versions") or read_versions())
            kubectl = Kubectl(bins.path("kubectl"), c["kubeconfig"])
            available = alive and all(
                apiservice_available(kubectl, f"{v}.{VISIBILITY_GROUP}") for v in VISIBILITY_VERSIONS
            )
            extra += f", visibility API {'Available' if available else 'NOT available'}"
        return extra
    if component == MANAGER_COMPONENT and MANAGER_COMPONENT in c:
        ready = alive and http_ok(f"{c['manager']['health']}/readyz")
        metrics = c["manager"]["metrics"]
        shown = metrics_summary(metrics, cluster_metrics_token(c)) if alive else f"metrics {metrics}"
        return f"  {'ready' if ready else 'NOT ready'}, {shown}"
    if component == UPSTREAM_KUEUE_COMPONENT and "upstreamKueue" in c:
        upstream = c["upstreamKueue"]
        ready = alive and http_ok(f"{upstream['health']}/readyz")
        readiness = "ready" if ready else "NOT ready"
        extra = f"  {upstream['version']} {readiness}, webhooks {upstream['webhook']}"
        if alive:
            extra += ", " + metrics_summary(upstream["metrics"], cluster_metrics_token(c))
        return extra
    return ""


def last_exit_text(status: dict) -> str:
    """`kubectl get pods`-like: `code 1 (3m ago)`, `SIGKILL (12s ago)`, or `-`."""
    last = status.get("lastExit")
    if not last:
        return "-"
    what = last.get("signal") or (f"code {last['code']}" if "code" in last else last.get("error", "?"))
    at = status.get("lastExitAt")
    if not at:
        return what
    try:
        exited = dt.datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return what
    return f"{what} ({fmt_duration((dt.datetime.now(dt.UTC) - exited).total_seconds())} ago)"


def _add_build_parser(sub: Any) -> None:
    """`build`: which binaries besides the fleet's own."""
    b = sub.add_parser("build", help="build or reuse the cached binaries")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument(
        "--upstream-kueue",
        action="store_true",
        help="also upstream Kueue's kueue binary and manifests (what `up --upstream-kueue` runs)",
    )
    b.add_argument(
        "--upstream-kueue-lifted",
        action="store_true",
        help="also upstream Kueue patched by hack/patches/ so that its MultiKueue worker clients get the "
        "clientConnection budget (what `up --upstream-kueue-lifted` runs; docs/benchmarks.md)",
    )
    b.add_argument(
        "--helm",
        action="store_true",
        help="also the helm CLI (HELM_VERSION), for the Helm chart's tests (deploy/helm; docs/helm.md)",
    )
    b.add_argument(
        "--real-nodes",
        action="store_true",
        help="also kubelet, the pause image and the busybox test image (what `up --real-nodes N` runs; root)",
    )
    b.add_argument(
        "--promtool",
        action="store_true",
        help="also promtool (PROMTOOL_VERSION), to check deploy/monitoring's alert rules (docs/metrics.md)",
    )


def _add_up_parser(sub: Any) -> None:
    """`up`: the fleet's size, our processes and their settings, then what the clusters run."""
    u = sub.add_parser("up", help="start a manager and N workers")
    _add_up_kueue_flags(u)
    _add_up_cluster_flags(u)


def _add_up_kueue_flags(u: argparse.ArgumentParser) -> None:
    """`up`'s size of the fleet, which of our processes run and with what settings."""
    u.add_argument("--workers", type=int, default=2, help="worker clusters (0: the manager cluster only)")
    u.add_argument("--nodes", type=int, default=4, help="fake nodes per worker")
    u.add_argument("--node-cpu", default="8")
    u.add_argument("--node-memory", default="32Gi")
    u.add_argument("--node-pods", default="110")
    u.add_argument("--no-smoke", action="store_true", help="skip the LWS smoke check")
    u.add_argument(
        "--agents",
        action="store_true",
        help="also run our worker_agent (admission engine and webhooks) on every cluster",
    )
    u.add_argument(
        "--manager",
        action="store_true",
        help="also run our federation manager (MultiKueue) on the manager cluster; needs --agents",
    )
    u.add_argument(
        "--setup-multikueue",
        action="store_true",
        help="then run setup-multikueue (implies --agents --manager)",
    )
    u.add_argument(
        "--client-qps",
        type=float,
        help="clientConnection.qps of our agents and manager, per API resource (default: Kueue's 20)",
    )
    u.add_argument("--client-burst", type=int, help="clientConnection.burst (default: Kueue's 30)")
    u.add_argument(
        "--event-types",
        choices=("Warning", "Normal,Warning"),
        help="--event-types of our agents and manager (default: both; Warning: no Normal Events)",
    )
    u.add_argument(
        "--event-loop",
        choices=("asyncio", "uvloop"),
        help="--event-loop of our agents and manager (default: theirs, uvloop)",
    )
    u.add_argument(
        "--worker-lost-timeout",
        type=go_duration,
        default=DEFAULT_WORKER_LOST_TIMEOUT,
        help="multiKueue.workerLostTimeout of our manager, a Go duration (default: upstream's 15m)",
    )
    u.add_argument(
        "--dispatcher",
        choices=sorted(DISPATCHERS),
        help="multiKueue.dispatcherName of the manager (default: unset, MultiKueue's AllAtOnce)",
    )
    u.add_argument(
        "--no-sample",
        action="store_true",
        help="with --setup-multikueue: do not create the sample LeaderWorkerSet (`sample-lws`) at the end",
    )


def _add_up_cluster_flags(u: argparse.ArgumentParser) -> None:
    """`up`'s upstream Kueue and what each cluster runs or leaves out."""
    u.add_argument(
        "--upstream-kueue",
        action="append",
        metavar="CLUSTER",
        help="run upstream Kueue (KUEUE_VERSION of hack/versions.env, built on first use) on CLUSTER "
        "(manager or workerN) instead of our worker_agent, and on the manager instead of our manager "
        "too; repeatable",
    )
    u.add_argument(
        "--upstream-kueue-lifted",
        action="store_true",
        help="with --upstream-kueue: run upstream Kueue built with our patch (hack/patches/) that gives "
        "its MultiKueue worker clients the clientConnection qps/burst (client-go's 5/10 otherwise)",
    )
    u.add_argument(
        "--upstream-kueue-config",
        metavar="FILE",
        help="a YAML mapping of config.kueue.x-k8s.io/v1beta2 Configuration fields merged over the one "
        "upstream Kueue gets (e.g. fairSharing); needs --upstream-kueue",
    )
    u.add_argument(
        "--shared-etcd",
        action="store_true",
        help="one etcd for every cluster, each apiserver under its own --etcd-prefix "
        "(saves an etcd per cluster)",
    )
    u.add_argument(
        "--light-workers",
        action="store_true",
        help="workers without kube-controller-manager, kube-scheduler, kwok, nodes or the LWS controller: "
        "Workloads are admitted, no pod runs (no smoke check; for dispatch benchmarks)",
    )
    u.add_argument(
        "--no-jobset",
        action="store_true",
        help="leave JobSet out: no JobSet controller on the workers, no JobSet CRD anywhere "
        "(saves a process per worker); implies --no-trainer",
    )
    u.add_argument(
        "--no-trainer",
        action="store_true",
        help="leave Kubeflow Trainer out: no Trainer controller on the workers, no TrainJob or "
        "training runtime CRD anywhere (saves a process per worker)",
    )
    u.add_argument(
        "--no-operator",
        action="append",
        default=[],
        choices=[op.key for op in OPERATORS],
        metavar="KEY",
        help="leave one of the other projects' controllers out (repeat for more): no controller on the "
        "workers, none of its CRDs anywhere, and neither for those that need it; one of "
        + ", ".join(op.key for op in OPERATORS),
    )
    u.add_argument(
        "--no-kueue-crds",
        action="store_true",
        help="install no Kueue CRD: clusters that do not serve kueue.x-k8s.io (what a MultiKueueCluster "
        "pointing at a cluster without Kueue sees); not with --agents or --upstream-kueue",
    )
    u.add_argument(
        "--conformance",
        action="store_true",
        help="the fleet upstream Kueue's e2e suites need (make conformance): the manager cluster runs pods "
        "too (kube-scheduler, kwok, fake nodes, the LWS and JobSet controllers), and pods behave like "
        "upstream's test image: `entrypoint-tester` pods succeed, others run until ended through "
        "`kubectl exec ... curl .../exit?code=N` (docs/conformance.md)",
    )
    u.add_argument(
        "--apiserver-profiling",
        action="store_true",
        help="the kube-apiservers serve /debug/pprof (off by default): "
        "kubectl get --raw '/debug/pprof/profile?seconds=30' > cpu.pprof; go tool pprof -top cpu.pprof",
    )
    u.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help="also N real nodes per worker: containerd (Debian's, with runc and CNI plugins) and a kubelet "
        "built from the Kubernetes module; tainted and labelled kueue-federation.dev/real-node=true, so only "
        "pods that ask run real containers there (root; docs/local-fleet.md, Real nodes)",
    )
    u.add_argument("--keep-on-failure", action="store_true", help="leave processes running if start fails")


def _add_fleet_parsers(sub: Any) -> None:
    """The commands on a fleet that is up: down, status, setup-multikueue, sample-lws, env."""
    sub.add_parser("down", help="stop the recorded processes and remove the run directory")
    sub.add_parser("status", help="what is up")
    sub.add_parser(
        "setup-multikueue",
        help="queues on every cluster, and Secrets, MultiKueueClusters, MultiKueueConfig, AdmissionCheck "
        "on the manager (a fleet started with --agents --manager)",
    )
    s = sub.add_parser(
        "sample-lws",
        help="the sample LeaderWorkerSet on the manager, until every group is ready on one worker "
        "(a fleet set up with setup-multikueue)",
    )
    s.add_argument(
        "--file",
        default=str(SAMPLE_LWS_FILE),
        help="the LWS manifest (default: examples/sample-leaderworkerset.yaml)",
    )
    s.add_argument("--timeout", type=float, default=SAMPLE_LWS_TIMEOUT, help="seconds to wait (default 180)")
    sub.add_parser("env", help="print shell exports for the running fleet")
    li = sub.add_parser(
        "load-image",
        help="import an image tar (`make image`'s build/image/kueue-federation.tar) into every real node",
    )
    li.add_argument("file")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localfleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dir",
        default=os.environ.get("LOCALFLEET_DIR", str(DEFAULT_RUN_DIR)),
        help=f"run directory (default {DEFAULT_RUN_DIR}, or $LOCALFLEET_DIR)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_build_parser(sub)
    _add_up_parser(sub)
    _add_fleet_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    # Piped into `head` and the like: end quietly, as shell tools do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    handlers = {
        "build": cmd_build,
        "up": cmd_up,
        "down": cmd_down,
        "status": cmd_status,
        "env": cmd_env,
        "setup-multikueue": cmd_setup_multikueue,
        "sample-lws": cmd_sample_lws,
        "load-image": cmd_load_image,
    }
    try:
        handlers[args.command](args)
    except FleetError as e:
        log(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
