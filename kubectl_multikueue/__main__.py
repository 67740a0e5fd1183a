"""`kubectl multikueue`: the fleet from the manager cluster: where each job runs and why it waits.

  kubectl multikueue status                     the workers (connected or not) and every ClusterQueue
  kubectl multikueue workloads [-n NS | -A]     each manager Workload: its stage, worker and why it waits
  kubectl multikueue describe KIND NAME         a Job, JobSet or LeaderWorkerSet across the fleet
  kubectl multikueue kubeconfig > w1.kubeconfig on a worker: the identity and kubeconfig the manager needs

Exit codes: 0 done; 1 an error (the message says what to fix); 2 the object is not found;
3 (`status`) a worker is not connected.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from kube_runtime.client import KubeClientError, NotFound
from kube_runtime.credentials import CredentialsError
from kube_runtime.logging import setup_logging
from kubectl_multikueue import views
from kubectl_multikueue.fleet import EVENT, JOB_SET, Fleet, Worker, describe_error
from kubectl_multikueue.identity import IdentityError, create_identity
from kueue_domain import api

EXIT_OK, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_DEGRADED = 0, 1, 2, 3

KINDS = {
    "job": api.JOB,
    "jobs": api.JOB,
    "job.batch": api.JOB,
    "jobset": JOB_SET,
    "jobsets": JOB_SET,
    "leaderworkerset": api.LEADER_WORKER_SET,
    "leaderworkersets": api.LEADER_WORKER_SET,
    "lws": api.LEADER_WORKER_SET,
}


class CommandError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# -- output ---------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """kubectl's layout: upper-case headers, columns three spaces apart, no trailing blanks."""
    cells = [[str(h) for h in headers], *[["" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def emit(data: Any, output: str | None, text: str) -> None:
    if output == "json":
        print(json.dumps(data, indent=2))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False).rstrip())
    else:
        print(text)


def as_dicts(rows: Sequence[Any]) -> list[dict]:
    return [dataclasses.asdict(r) for r in rows]


# -- status ---------------------------------------------------------------------------------------


async def cmd_status(fleet: Fleet, args: argparse.Namespace) -> int:
    workers = await fleet.connect_workers()
    worker_rows = [views.worker_row(w.cluster, fleet.secrets_namespace) for w in workers.values()]
    queue_rows: list[views.QueueRow] = []
    unreachable: list[tuple[str, str]] = []
    cqs, _ = await fleet.manager.list(api.CLUSTER_QUEUE)
    queue_rows += [
        views.queue_row("(manager)", cq) for cq in sorted(cqs, key=lambda c: c["metadata"]["name"])
    ]
    for name, queues in zip(
        workers, await asyncio.gather(*(_queues(w) for w in workers.values())), strict=True
    ):
        if isinstance(queues, str):
            unreachable.append((name, queues))
        else:
            queue_rows += [views.queue_row(name, cq) for cq in queues]
    text = [
        table(
            ["WORKER", "ACTIVE", "REASON", "MESSAGE", "KUBECONFIG"],
            [[r.name, r.active, r.reason, r.message, r.source] for r in worker_rows],
        )
        if worker_rows
        else "No MultiKueueClusters on this cluster: is it the manager?",
        "",
        table(
            ["CLUSTER", "CLUSTERQUEUE", "ACTIVE", "PENDING", "ADMITTED", "USAGE"],
            [[r.cluster, r.name, r.active, r.pending, r.admitted, r.usage] for r in queue_rows],
        ),
    ]
    if unreachable:
        text += ["", *(f"{name}: queues not shown: {why}" for name, why in unreachable)]
    data = {
        "workers": as_dicts(worker_rows),
        "clusterQueues": as_dicts(queue_rows),
        "unreachable": dict(unreachable),
    }
    emit(data, args.output, "\n".join(text))
    return EXIT_OK if worker_rows and all(r.active == "True" for r in worker_rows) else EXIT_DEGRADED


async def _queues(worker: Worker) -> list[dict] | str:
    if worker.client is None:
        return worker.error
    try:
        items, _ = await worker.client.list(api.CLUSTER_QUEUE)
    except KubeClientError as e:
        return describe_error(e)
    return sorted(items, key=lambda c: c["metadata"]["name"])


# -- workloads ------------------------------------------------------------------------------------


async def cmd_workloads(fleet: Fleet, args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else args.namespace
    workloads, _ = await fleet.manager.list(api.WORKLOAD, namespace)
    rows = await workload_rows(
        fleet, sorted(workloads, key=lambda w: (w["metadata"]["namespace"], w["metadata"]["name"]))
    )
    headers = ["NAME", "JOB", "STAGE", "WORKER", "WHY"]
    cells = [[r.name, r.job, r.stage, r.worker, r.why] for r in rows]
    if args.all_namespaces:
        headers = ["NAMESPACE", *headers]
        cells = [[r.namespace, *c] for r, c in zip(rows, cells, strict=True)]
    text = table(headers, cells) if rows else f"No Workloads found in {namespace or 'any'} namespace."
    emit(as_dicts(rows), args.output, text)
    return EXIT_OK


async def workload_rows(fleet: Fleet, workloads: list[dict]) -> list[views.WorkloadRow]:
    """Rows for manager Workloads; the workers are asked for their copies only when a Workload has
    reached them (quota reserved on the manager and not finished)."""
    checks = await fleet.multikueue_checks()
    on_workers = [
        w for w in workloads if views.multikueue_check(w, checks) and not views.is_true(w, "Finished")
    ]
    copies: dict[tuple[str, str], dict[str, dict | None]] = {}
    positions: dict[tuple[str, str], dict[str, int]] = {}
    if any(views.is_true(w, "QuotaReserved") for w in on_workers):
        workers = await fleet.connect_workers()
        namespaces = sorted({w["metadata"]["namespace"] for w in on_workers})
        for worker in workers.values():
            for ns in namespaces:
                found = await _remote_workloads(worker, ns)
                for wl in on_workers:
                    key = (wl["metadata"]["namespace"], wl["metadata"]["name"])
                    if wl["metadata"]["namespace"] == ns and found is not None:
                        copies.setdefault(key, {})[worker.name] = found.get(wl["metadata"]["name"])
                queues = {
                    (w.get("spec") or {}).get("queueName")
                    for w in on_workers
                    if w["metadata"]["namespace"] == ns
                }
                for queue in sorted(q for q in queues if q):
                    for name, pos in (await fleet.pending_positions(worker, ns, queue)).items():
                        positions.setdefault((ns, name), {})[worker.name] = pos
    running = await _jobs_running(fleet, [w for w in on_workers if views.is_true(w, "Admitted")])
    return [
        views.workload_row(wl, checks, copies.get(key), positions.get(key), key in running)
        for wl in workloads
        for key in [(wl["metadata"]["namespace"], wl["metadata"]["name"])]
    ]


async def _jobs_running(fleet: Fleet, admitted: list[dict]) -> set[tuple[str, str]]:
    """(namespace, name) of the admitted Workloads whose job object on the manager shows its pods
    ready (the manager mirrors the worker's status there): one GET per job."""
    resources = {r.kind: r for r in KINDS.values()}
    seen: dict[tuple[str, str, str], bool] = {}
    running = set()
    for wl in admitted:
        kind, _, name = views.job_of(wl).partition("/")
        namespace = wl["metadata"]["namespace"]
        if kind not in resources:
            continue
        key = (kind, namespace, name)
        if key not in seen:
            try:
                obj = await fleet.manager.get(resources[kind], name, namespace)
            except KubeClientError:
                obj = None
            seen[key] = views.job_running(kind, obj)
        if seen[key]:
            running.add((namespace, wl["metadata"]["name"]))
    return running


async def _remote_workloads(worker: Worker, namespace: str) -> dict[str, dict] | None:
    if worker.client is None:
        return None
    try:
        items, _ = await worker.client.list(
            api.WORKLOAD, namespace, label_selector=api.LABEL_MULTIKUEUE_ORIGIN
        )
    except KubeClientError:
        return None
    return {w["metadata"]["name"]: w for w in items}


# -- describe -------------------------------------------------------------------------------------


async def cmd_describe(fleet: Fleet, args: argparse.Namespace) -> int:
    resource = KINDS.get(args.kind.lower())
    if resource is None:
        raise CommandError(f"unknown kind {args.kind!r}: use one of job, jobset, leaderworkerset (lws)")
    try:
        obj = await fleet.manager.get(resource, args.name, args.namespace)
    except NotFound:
        raise CommandError(
            f'{resource.plural}.{resource.group} "{args.name}" not found in namespace {args.namespace}',
            EXIT_NOT_FOUND,
        ) from None
    uid = obj["metadata"]["uid"]
    items, _ = await fleet.manager.list(api.WORKLOAD, args.namespace)
    owned = sorted(
        (w for w in items if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences") or ())),
        key=lambda w: w["metadata"]["name"],
    )
    rows = await workload_rows(fleet, owned)
    placed = sorted({r.worker for r in rows if r.worker != "-"})
    remotes: dict[str, str] = {}
    if placed:
        workers = fleet.workers or await fleet.connect_workers()
        for name in placed:
            worker = workers.get(name)
            remotes[name] = await _remote_readiness(worker, resource, args.name, args.namespace)
    events = await _events(fleet, args.namespace, {args.name, *(w["metadata"]["name"] for w in owned)})
    data = {
        "kind": resource.kind,
        "namespace": args.namespace,
        "name": args.name,
        "workloads": as_dicts(rows),
        "workers": remotes,
        "events": events,
    }
    lines = [
        f"Name:        {args.name}",
        f"Namespace:   {args.namespace}",
        f"Kind:        {resource.kind}",
        f"Queue:       {(obj['metadata'].get('labels') or {}).get(api.LABEL_QUEUE_NAME, '<none>')}",
        f"Worker:      {', '.join(placed) or '<none yet>'}",
        "Workloads:",
        _indent(
            table(["NAME", "STAGE", "WORKER", "WHY"], [[r.name, r.stage, r.worker, r.why] for r in rows])
            if rows
            else "<none: is the worker_agent running on the manager cluster?>"
        ),
        "On the worker:",
        _indent("\n".join(f"{name}: {text}" for name, text in remotes.items()) or "<not placed yet>"),
        "Events:",
        _indent(
            table(
                ["TYPE", "REASON", "OBJECT", "MESSAGE"],
                [[e["type"], e["reason"], e["object"], e["message"]] for e in events],
            )
            if events
            else "<none>"
        ),
    ]
    emit(data, args.output, "\n".join(lines))
    return EXIT_OK


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


async def _remote_readiness(worker: Worker | None, resource: api.Resource, name: str, namespace: str) -> str:
    if worker is None:
        return "not a MultiKueueCluster of this manager"
    if worker.client is None:
        return f"cannot be read: {worker.error}"
    try:
        obj = await worker.client.get(resource, name, namespace)
    except NotFound:
        obj = None
    except KubeClientError as e:
        return f"cannot be read: {describe_error(e)}"
    return views.remote_readiness(resource.kind, obj)


async def _events(fleet: Fleet, namespace: str, names: set[str]) -> list[dict]:
    """Core events about the object and its Workloads, oldest first (as kubectl describe shows them)."""
    try:
        items, _ = await fleet.manager.list(EVENT, namespace)
    except KubeClientError:
        return []
    found = [e for e in items if (e.get("involvedObject") or {}).get("name") in names]
    found.sort(
        key=lambda e: (
            e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp") or ""
        )
    )
    return [
        {
            "type": e.get("type", ""),
            "reason": e.get("reason", ""),
            "object": f"{e['involvedObject'].get('kind', '')}/{e['involvedObject']['name']}",
            "message": e.get("message", ""),
        }
        for e in found
    ]


# -- kubeconfig -----------------------------------------------------------------------------------


async def cmd_kubeconfig(args: argparse.Namespace) -> int:
    try:
        text, notes = await create_identity(
            args.kubeconfig, args.context, args.sa_namespace, args.service_account, args.duration
        )
    except IdentityError as e:
        raise CommandError(str(e)) from None
    for note in notes:
        print(note, file=sys.stderr)
    print(text, end="")
    return EXIT_OK


# -- main -----------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig", help="the manager cluster's kubeconfig (default: $KUBECONFIG, ~/.kube/config)"
    )
    common.add_argument("--context", help="the kubeconfig context to use")
    common.add_argument(
        "-o", "--output", choices=["json", "yaml"], help="print JSON or YAML instead of a table"
    )
    common.add_argument(
        "--manager-namespace",
        default="kueue-system",
        help="where the manager reads the workers' kubeconfig Secrets (default kueue-system)",
    )
    p = argparse.ArgumentParser(
        prog="kubectl multikueue", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", parents=[common], help="the workers and every ClusterQueue of the fleet")
    w = sub.add_parser(
        "workloads", parents=[common], help="each manager Workload: stage, worker, why it waits"
    )
    w.add_argument("-n", "--namespace", default="default")
    w.add_argument("-A", "--all-namespaces", action="store_true")
    d = sub.add_parser("describe", parents=[common], help="a Job, JobSet or LeaderWorkerSet across the fleet")
    d.add_argument("kind", help="job, jobset or leaderworkerset (lws)")
    d.add_argument("name")
    d.add_argument("-n", "--namespace", default="default")
    k = sub.add_parser(
        "kubeconfig",
        parents=[common],
        help="run against a worker: create the manager's identity there and print its kubeconfig",
    )
    k.add_argument(
        "--sa-namespace", default="kueue-system", help="the ServiceAccount's namespace on the worker"
    )
    k.add_argument("--service-account", default="multikueue-sa")
    k.add_argument("--duration", default="8760h", help="the token's lifetime (default 8760h)")
    return p


async def run(args: argparse.Namespace) -> int:
    if args.command == "kubeconfig":
        return await cmd_kubeconfig(args)
    fleet = await Fleet.connect(args.kubeconfig, args.context, args.manager_namespace)
    try:
        command = {"status": cmd_status, "workloads": cmd_workloads, "describe": cmd_describe}[args.command]
        return await command(fleet, args)
    finally:
        await fleet.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # stdout is the command's output: the runtime's log (API deprecation warnings and the like) goes
    # to stderr, errors only; the command reports what went wrong itself.
    setup_logging("error", stream=sys.stderr)
    try:
        return asyncio.run(run(args))
    except CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except (KubeClientError, CredentialsError, OSError) as e:
        print(f"error: {describe_error(e)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
