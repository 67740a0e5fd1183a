"""bench.compare's `no_kueue` arm: what the work itself costs the fleet.

The same fleet as the other arms (1 manager + N workers, the same nodes, kwok, kube-controller-manager,
kube-scheduler and LWS / JobSet controllers), with no Kueue and no MultiKueue: the same Jobs and
LeaderWorkerSets are created straight on the workers, round robin, unsuspended and without a queue
name, at the same rates. Its CPU and API requests per Workload are the fleet's floor for this mix:
the Jobs, pods, LWS groups and their controllers. What another arm spends above it is what its
queueing and federation cost (the manager cluster's Job objects included: a federated Job has one
there and one on its worker). Its steady rate of Jobs reaching a Running pod is this machine's
ceiling for that figure with nothing in the way (bounded by the submission rate, --rate). Its
window ends once every LWS pod runs and every Job's pod has Succeeded (the Jobs' ends are work too;
the other arms' Jobs end within their longer runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bench.common import Obj, say
from bench.compare_fair import steady_rate
from bench.compare_summary import KUEUE_GROUP, phase_timeout, summarize
from bench.federation_run import job_names, job_object
from bench.fleet import LABEL_QUEUE_NAME, NAMESPACE
from bench.lws_mix import lws_object
from bench.procfs import ProcessSampler
from bench.prom import apiserver_requests, apiserver_requests_by_kind

if TYPE_CHECKING:
    from bench.compare import CompareRun

IN_FLIGHT = 50  # creates in flight at once: the pace is the rate, not the round trip


def direct(body: Obj) -> Obj:
    """A benchmark object as it is created straight on a worker: no queue name, a Job not suspended."""
    body["metadata"]["labels"].pop(LABEL_QUEUE_NAME, None)
    if body.get("kind") == "Job":
        body["spec"]["suspend"] = False
    return body


async def create_paced(
    clients: Sequence[Any],
    kind: Any,
    bodies: Sequence[tuple[str, Obj]],
    rate: float,
    on_created: Callable[[str, float], None],
) -> list[BaseException]:
    """Create `bodies` round robin over `clients` (one per worker), the i-th at start + i/rate (rate 0:
    as fast as IN_FLIGHT allows); `on_created(name, when)` as each create returns. Returns the
    failures (the run goes on without those objects)."""
    limit = asyncio.Semaphore(IN_FLIGHT)
    failures: list[BaseException] = []

    async def one(index: int, name: str, body: Obj) -> None:
        try:
            await clients[index % len(clients)].create(kind, body, NAMESPACE)
            on_created(name, time.monotonic())
        except Exception as e:
            failures.append(e)
        finally:
            limit.release()

    start = time.monotonic()
    tasks = []
    for index, (name, body) in enumerate(bodies):
        if rate > 0:
            delay = start + index / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await limit.acquire()
        tasks.append(asyncio.get_running_loop().create_task(one(index, name, body)))
    await asyncio.gather(*tasks)
    if failures:
        say(f"{len(failures)} of {len(bodies)} creates failed; first: {failures[0]!r}")
    return failures


async def wait_all(names: Sequence[str], reached: Mapping[str, float], timeout_s: float, what: str) -> bool:
    """Until every name is in `reached` (True) or `timeout_s` passed (False); progress every 5 s."""
    deadline = time.monotonic() + timeout_s
    next_progress = time.monotonic() + 5
    while True:
        seen = sum(1 for n in names if n in reached)
        if seen >= len(names):
            return True
        if time.monotonic() > deadline:
            say(f"{what}: {len(names) - seen} of {len(names)} not seen in {timeout_s:.0f}s")
            return False
        if time.monotonic() >= next_progress:
            say(f"{what}: {seen}/{len(names)}")
            next_progress += 5
        await asyncio.sleep(0.1)


async def stop_watches(informers: Sequence[tuple[Any, Any]]) -> None:
    """Stop each (informer, its client) of CompareRun.watch_pods, whatever fails."""
    for informer, client in informers:
        with contextlib.suppress(Exception):
            await informer.stop()
        with contextlib.suppress(Exception):
            await client.close()


async def lws_straight(
    run: CompareRun, clients: Sequence[Any], run_id: str, failures: list[BaseException]
) -> bool:
    """The no_kueue arm's LeaderWorkerSets, created straight on the workers (failures appended to
    `failures`); True when all their pods were seen Running in time."""
    from kueue_domain import api

    args = run.args
    lws = [f"lb-{run_id}-{i:04d}" for i in range(args.lws)]
    for name in lws:  # an LWS counts as running with every pod of every group
        run.pods.expect[name] = args.lws_replicas * args.lws_size
    say(f"no_kueue: creating {args.lws:,} LeaderWorkerSets straight on the workers")
    bodies = [(n, direct(lws_object(n, run_id, args.lws_replicas, args.lws_size))) for n in lws]
    failures += await create_paced(
        clients, api.LEADER_WORKER_SET, bodies, args.lws_rate, run.lws_submitted.__setitem__
    )
    timeout = phase_timeout(args, args.lws * args.lws_replicas)
    return await wait_all(lws, run.pods.full, timeout, "LWS")


async def measure_no_kueue(run: CompareRun) -> Obj:
    """The `no_kueue` arm's repeat on `run`'s fleet (started without Kueue): the Jobs, then the
    LeaderWorkerSets, straight on the workers; their pods watched as in the other arms."""
    from kube_runtime.client import KubeClient
    from kueue_domain import api

    args = run.args
    informers = await run.watch_pods()
    await run.sample_idle()
    sampler = ProcessSampler(run.fleet.processes(), interval=0.5)
    clients = [
        await KubeClient.from_kubeconfig_file(run.fleet.clusters[w]["kubeconfig"]) for w in run.fleet.workers
    ]
    run_id = secrets.token_hex(3)
    jobs = job_names(run_id, args.jobs)
    job_submitted: dict[str, float] = {}
    failures: list[BaseException] = []
    jobs_ran = lws_ran = jobs_ended = False
    try:
        apiservers_before = await run.scrape_apiservers("before")
        sampler.start()
        run.sampled_from = time.monotonic()
        say(f"no_kueue: creating {args.jobs:,} Jobs straight on the workers at {args.rate:g}/s")
        bodies = [(n, direct(job_object(n, run_id, keep_running=False, managed_by=False))) for n in jobs]
        failures += await create_paced(clients, api.JOB, bodies, args.rate, job_submitted.__setitem__)
        jobs_ran = await wait_all(jobs, run.pods.first, phase_timeout(args, args.jobs), "Jobs")
        if args.lws:
            lws_ran = await lws_straight(run, clients, run_id, failures)
        # The Jobs' ends are part of the work (their pods' and Jobs' last status writes, the pods'
        # finalizers): the other arms' Jobs end within their longer runs.
        jobs_ended = await wait_all(jobs, run.pods.succeeded, phase_timeout(args, args.jobs), "Jobs ended")
        await sampler.stop()
        run.sampled_s = time.monotonic() - run.sampled_from
        apiservers_after = await run.scrape_apiservers("after")
    finally:
        await stop_watches(informers)
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()
    summary = summarize(
        run.engine,
        args,
        None,
        [run.pods.first[n] - t for n, t in job_submitted.items() if n in run.pods.first],
        None,
        [run.pods.full[n] - t for n, t in run.lws_submitted.items() if n in run.pods.full],
        sampler.figures,
        apiserver_requests(apiservers_before, apiservers_after),
        apiserver_requests(apiservers_before, apiservers_after, KUEUE_GROUP),
        {},
        apiserver_requests_by_kind(apiservers_before, apiservers_after),
    )
    running = [run.pods.first[n] for n in jobs if n in run.pods.first]
    summary.update(
        {
            "kueue": "none",
            "jobs_submitted": len(job_submitted),
            "timed_out": not (jobs_ran and jobs_ended) or (bool(args.lws) and not lws_ran),
            "error": f"{len(failures)} creates failed, first: {failures[0]!r}" if failures else None,
            "lws_skipped": None,
        }
    )
    summary.update(run.fleet_figures(sampler, summary))
    summary.update(
        {
            "complete": not failures and jobs_ran and jobs_ended and (lws_ran or not args.lws),
            "binding_limit": run.engine.binding_limit(),
            "running_rate_wl_s": steady_rate(running, args.jobs),
            "jobs_ended_seen": sum(1 for n in jobs if n in run.pods.succeeded),
        }
    )
    return summary
