"""bench.federation's run: the Jobs it submits (at a target rate, from a pool of clients), its watch
of the manager's Workloads, the manager's and agents' /metrics before and after, and /proc."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import os
import secrets
import time
from pathlib import Path

from bench.common import BenchError, Obj, cancel, condition_true, say
from bench.federation_result import STAGES, Recorder, RunResult, latencies, throughput
from bench.fleet import (
    AGENT_COMPONENT,
    JOB_CPU_MILLI,
    JOB_IMAGE,
    JOB_MEMORY_MI,
    LABEL_BENCH_RUN,
    LABEL_QUEUE_NAME,
    LOCAL_QUEUE,
    MANAGER_COMPONENT,
    NAMESPACE,
    Fleet,
)
from bench.procfs import ProcessSampler
from bench.prom import (
    Sample,
    buckets_delta,
    counter_delta,
    histogram_buckets,
    metric_by_label,
    metric_sum,
    scrape,
)
from bench.stats import distribution, fmt, histogram_distribution

# What every benchmark Job asks for, and where it goes (the objects of `localfleet setup-multikueue`).
ADMISSION_CHECK = "sample-multikueue"
CLUSTER_QUEUE = "cluster-queue"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
KEEP_RUNNING_ANNOTATION = "kueue-federation.dev/keep-running"

# The manager's metrics (manager/metrics.py) and client-go's request counter.
METRIC_DISPATCHED = "multikueue_workloads_dispatched_total"
METRIC_ADMITTED = "multikueue_workloads_admitted_total"
METRIC_STAGE = "kueue_federation_multikueue_dispatch_stage_seconds"
METRIC_REQUESTS = "rest_client_requests_total"
METRIC_REQUESTS_BY_CLIENT = (
    "kueue_worker_agent_api_requests_total"  # client label: main, events, worker/<name>
)


# ==============================================================================================
# The run: submitter and watch
# ==============================================================================================


def job_object(name: str, run_id: str, *, keep_running: bool, managed_by: bool) -> Obj:
    template_meta: Obj = {"annotations": {KEEP_RUNNING_ANNOTATION: "true"}} if keep_running else {}
    spec: Obj = {
        "parallelism": 1,
        "completions": 1,
        "suspend": True,
        "template": {
            "metadata": template_meta,
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": JOB_IMAGE,
                        "resources": {
                            "requests": {"cpu": f"{JOB_CPU_MILLI}m", "memory": f"{JOB_MEMORY_MI}Mi"}
                        },
                    }
                ],
            },
        },
    }
    if managed_by:
        spec["managedBy"] = MANAGED_BY_MULTIKUEUE
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {LABEL_QUEUE_NAME: LOCAL_QUEUE, LABEL_BENCH_RUN: run_id},
        },
        "spec": spec,
    }


def job_names(run_id: str, count: int) -> list[str]:
    width = len(str(max(count - 1, 0)))
    return [f"fb-{run_id}-{i:0{width}d}" for i in range(count)]


class FederationRun:
    def __init__(self, fleet: Fleet, args: argparse.Namespace, mode: str, jobs: int, work_dir: Path) -> None:
        self.fleet = fleet
        self.args = args
        self.mode = mode
        self.jobs = jobs
        self.work_dir = work_dir
        self.run_id = secrets.token_hex(3)
        self.names = job_names(self.run_id, jobs)
        self.recorder = Recorder(self.names)
        self.warmup_name = f"fb-{self.run_id}-warmup"
        self.warmup = Recorder([self.warmup_name])
        self.explicit_managed_by = bool(args.set_managed_by)
        self.now = time.monotonic
        self.errors: list[str] = []
        self.first_submit: float | None = None

    # -- clients and the watch ---------------------------------------------------------------

    async def _open(self) -> None:
        from kube_runtime.client import KubeClient
        from kube_runtime.informer import Informer
        from kueue_domain import api

        path = self.fleet.manager_kubeconfig
        # No client-side rate limit: the submitter's pace is --rate, the watch is one stream.
        self.clients = [await KubeClient.from_kubeconfig_file(path) for _ in range(self.args.clients)]
        self.watch_client = await KubeClient.from_kubeconfig_file(path)
        self.informer = Informer(self.watch_client, api.WORKLOAD, namespace=NAMESPACE, name="bench-workloads")
        self.informer.add_handler(
            on_add=self._on_workload, on_update=lambda _old, new: self._on_workload(new)
        )
        self.informer.start()
        async with asyncio.timeout(60):
            await self.informer.wait_synced()

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self.informer.stop()
        for client in [*self.clients, self.watch_client]:
            with contextlib.suppress(Exception):
                await client.close()

    def _on_workload(self, wl: Obj) -> None:
        now = self.now()
        if self.recorder.observe_workload(wl, now) is None:
            self.warmup.observe_workload(wl, now)

    # -- readiness and warm-up ---------------------------------------------------------------

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        """The AdmissionCheck and every MultiKueueCluster Active on the manager cluster."""
        from kube_runtime.client import KubeClientError
        from kueue_domain import api

        client = self.clients[0]
        deadline = self.now() + timeout_s
        waiting = "?"
        while self.now() < deadline:
            try:
                check = await client.get(api.ADMISSION_CHECK, ADMISSION_CHECK)
                clusters, _ = await client.list(api.MULTIKUEUE_CLUSTER)
                cq = await client.get(api.CLUSTER_QUEUE, CLUSTER_QUEUE)
                inactive = [c["metadata"]["name"] for c in clusters if not condition_true(c, "Active")]
                if not condition_true(check, "Active"):
                    waiting = f"AdmissionCheck {ADMISSION_CHECK} Active"
                elif not clusters or inactive:
                    waiting = f"MultiKueueClusters Active ({', '.join(inactive) or 'none yet'})"
                elif not condition_true(cq, "Active"):
                    waiting = f"ClusterQueue {CLUSTER_QUEUE} Active"
                else:
                    return
            except KubeClientError as e:
                waiting = f"the MultiKueue objects ({e})"
            await asyncio.sleep(0.5)
        raise BenchError(
            f"timed out after {timeout_s:.0f}s waiting for {waiting}; manager log tail:\n"
            f"{self.fleet.log_tail('manager', self.fleet.manager_component)}"
        )

    async def run_warmup(self, timeout_s: float = 120.0) -> None:
        """One Job through the whole path first: checks the setup and whether our webhook sets managedBy."""
        from kueue_domain import api

        body = job_object(
            self.warmup_name, self.run_id, keep_running=False, managed_by=self.explicit_managed_by
        )
        created = await self.clients[0].create(api.JOB, body)
        self.warmup.submitted(self.warmup_name, self.now(), created)
        rec = self.warmup.jobs[self.warmup_name]
        if not self.explicit_managed_by and rec.managed_by != MANAGED_BY_MULTIKUEUE:
            say(
                f"the webhook left spec.managedBy {rec.managed_by!r} on the warm-up Job: setting "
                f"{MANAGED_BY_MULTIKUEUE!r} explicitly from now on"
            )
            self.explicit_managed_by = True
            await self.clients[0].delete(
                api.JOB, self.warmup_name, NAMESPACE, propagation_policy="Background"
            )
            self.warmup = Recorder([self.warmup_name])
            body = job_object(self.warmup_name, self.run_id, keep_running=False, managed_by=True)
            await asyncio.sleep(1)
            created = await self.clients[0].create(api.JOB, body)
            self.warmup.submitted(self.warmup_name, self.now(), created)
        deadline = self.now() + timeout_s
        while not self.warmup.all_done():
            if self.now() > deadline:
                raise BenchError(
                    f"the warm-up Job {NAMESPACE}/{self.warmup_name} was not Admitted "
                    f"within {timeout_s:.0f}s; "
                    f"manager log tail:\n{self.fleet.log_tail('manager', self.fleet.manager_component)}"
                )
            await asyncio.sleep(0.1)
        rec = self.warmup.jobs[self.warmup_name]
        assert rec.submitted is not None
        say(
            f"warm-up Job Admitted {((rec.admitted or rec.finished or 0) - rec.submitted):.2f}s after "
            "its submission"
        )

    # -- the submitter -----------------------------------------------------------------------

    async def _create(self, index: int) -> None:
        from kube_runtime.client import AlreadyExists, ConnectionLost
        from kueue_domain import api

        name = self.names[index]
        body = job_object(
            name, self.run_id, keep_running=self.args.keep_running, managed_by=self.explicit_managed_by
        )
        client = self.clients[index % len(self.clients)]
        started = self.now()
        for attempt in range(1, 6):
            try:
                created = await client.create(api.JOB, body)
                break
            except AlreadyExists:
                if attempt == 1:
                    raise
                created = body  # an earlier attempt got through before its connection broke
                break
            except ConnectionLost:
                if attempt == 5:
                    raise
                await asyncio.sleep(0.2 * attempt)
        self.recorder.submitted(name, self.now(), created, started)

    async def submit(self, rate: float) -> tuple[float, float]:
        """Create every Job, the i-th at start + i/rate (rate 0: as fast as the in-flight limit
        allows). Returns (first submission start, last create returned)."""
        limit = asyncio.Semaphore(self.args.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []

        async def one(index: int) -> None:
            try:
                await self._create(index)
            except Exception as e:  # recorded; the run goes on without this Job
                failures.append(e)
            finally:
                limit.release()

        start = self.first_submit = self.now()
        for index in range(self.jobs):
            if rate > 0:
                delay = start + index / rate - self.now()
                if delay > 0:
                    await asyncio.sleep(delay)
            await limit.acquire()
            task = asyncio.get_running_loop().create_task(one(index))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
        if failures:
            self.errors.append(f"{len(failures)} creates failed, first: {failures[0]!r}")
            say(f"{len(failures)} Job creates failed; first: {failures[0]!r}")
        return start, self.now()

    # -- the whole run -----------------------------------------------------------------------

    def write_jobs_csv(self, path: Path, origin: float) -> None:
        """One line per Job: its times in seconds since the first submission started."""
        columns = ("create_started", "submitted", "workload_seen", "admitted", "finished")

        def cell(value: float | None) -> str:
            return "" if value is None else f"{value - origin:.3f}"

        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["job", *columns, "managed_by"])
            for rec in self.recorder.jobs.values():
                out.writerow([rec.name, *(cell(getattr(rec, c)) for c in columns), rec.managed_by or ""])

    async def cleanup_jobs(self) -> None:
        """On a reused fleet: delete this run's Jobs (their Workloads go with them)."""
        try:
            await self.clients[0].request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
                params={
                    "labelSelector": f"{LABEL_BENCH_RUN}={self.run_id}",
                    "propagationPolicy": "Background",
                },
                request_timeout=120,
            )
            say(f"deleted this run's Jobs (label {LABEL_BENCH_RUN}={self.run_id})")
        except Exception as e:
            say(f"could not delete this run's Jobs: {e!r}")

    async def _scrape(self, tag: str) -> tuple[list[Sample], dict[str, list[Sample]]]:
        """The manager's /metrics and every worker_agent's, each kept in the work directory."""
        manager = await asyncio.to_thread(
            scrape,
            self.fleet.manager_metrics_url,
            self.work_dir / f"manager.{tag}.metrics.txt",
            self.fleet.metrics_token("manager"),
        )
        agents = {
            c: await asyncio.to_thread(
                scrape, u, self.work_dir / f"{c}-agent.{tag}.metrics.txt", self.fleet.metrics_token(c)
            )
            for c, u in self.fleet.agent_metrics_urls().items()
        }
        return manager, agents

    def _progress(self, sampler: ProcessSampler, started: float) -> str:
        rss = sampler.peak(f"manager/{MANAGER_COMPONENT}")
        return (
            f"[{self.now() - started:6.1f}s] submitted {self.recorder.submitted_count:,}/{self.jobs:,}, "
            f"Admitted {self.recorder.admitted_count:,}, finished {self.recorder.finished_count:,}, "
            f"manager peak RSS {fmt(rss, 'MiB')}, load {os.getloadavg()[0]:.2f}"
        )

    async def run(self) -> RunResult:
        args = self.args
        rate = args.rate
        result = RunResult(
            mode=self.mode,
            jobs=self.jobs,
            rate_target=rate,
            clients=args.clients,
            concurrency=args.concurrency,
            keep_running=args.keep_running,
            client_budget=self.fleet.client_budget(),
        )
        cpu0 = time.process_time()
        sampler = ProcessSampler(self.fleet.processes(), interval=0.5)
        submit_task: asyncio.Task[tuple[float, float]] | None = None
        await self._open()
        try:
            await self.wait_ready()
            await self.run_warmup()
            result.managed_by = "explicit" if self.explicit_managed_by else "webhook"
            before, agents_before = await self._scrape("before")
            result.load_start = list(os.getloadavg())
            sampler.start()
            say(
                f"submitting {self.jobs:,} Jobs ({'unlimited rate' if rate == 0 else f'{rate:g}/s'}), "
                f"run {self.run_id}"
            )
            submit_task = asyncio.get_running_loop().create_task(self.submit(rate), name="submitter")
            started = self.now()
            next_progress = started + args.progress_every
            timeout_at: float | None = None
            next_liveness = started
            while True:
                if submit_task.done():
                    submit_task.result()  # a crash of the submitter itself ends the run
                    if timeout_at is None:
                        timeout_at = self.now() + args.timeout
                if submit_task.done() and self.recorder.done_count >= self.recorder.submitted_count:
                    break
                if timeout_at is not None and self.now() > timeout_at:
                    result.timed_out = True
                    say(f"timed out {args.timeout:.0f}s after the last submission")
                    break
                dead = self.fleet.dead_processes() if self.now() >= next_liveness else []
                next_liveness = max(next_liveness, self.now() + 1.0)
                if dead:
                    raise BenchError(
                        f"fleet processes exited: {', '.join(dead)}; manager log tail:\n"
                        f"{self.fleet.log_tail('manager', self.fleet.manager_component)}"
                    )
                if self.now() >= next_progress:
                    say(self._progress(sampler, started))
                    next_progress += args.progress_every
                await asyncio.sleep(0.1)
            say(self._progress(sampler, started))
            await sampler.stop()
            result.load_end = list(os.getloadavg())
            first_submit, last_submit = submit_task.result()
            after, agents_after = await self._scrape("after")
            self._fill(result, before, after, agents_before, agents_after, sampler, first_submit, last_submit)
        except BenchError as e:
            result.error = str(e)
            say(f"run failed: {e}")
        finally:
            await cancel(submit_task)
            if self.first_submit is not None:
                with contextlib.suppress(OSError):
                    self.write_jobs_csv(self.work_dir / "jobs.csv", self.first_submit)
            if not self.fleet.owned and not args.keep_jobs:
                await self.cleanup_jobs()
            await self._close()
            result.harness_cpu_s = time.process_time() - cpu0
            if self.errors and not result.error:
                result.error = "; ".join(self.errors)
        return result

    def _fill(
        self,
        result: RunResult,
        before: list[Sample],
        after: list[Sample],
        agents_before: dict[str, list[Sample]],
        agents_after: dict[str, list[Sample]],
        sampler: ProcessSampler,
        first_submit: float,
        last_submit: float,
    ) -> None:
        records = list(self.recorder.jobs.values())
        result.submitted = self.recorder.submitted_count
        result.admitted = self.recorder.admitted_count
        result.finished = sum(1 for r in records if r.finished is not None)
        result.done_unadmitted = sum(1 for r in records if r.finished is not None and r.admitted is None)
        result.not_done = sum(1 for r in records if r.finished is None and r.admitted is None)
        result.submission_s = last_submit - first_submit
        if result.submission_s > 0:
            result.submission_rate = result.submitted / result.submission_s
        done = [t for r in records for t in (r.admitted or r.finished,) if t is not None]
        if done:
            result.run_s = max(done) - first_submit
        result.throughput_per_s = throughput(records)
        result.to_admitted = distribution(latencies(records, "admitted"))
        result.to_workload = distribution(latencies(records, "workload_seen"))
        result.create_call = distribution(latencies(records, "submitted", start="create_started"))
        for stage in STAGES:
            buckets = buckets_delta(
                histogram_buckets(before, METRIC_STAGE, stage=stage),
                histogram_buckets(after, METRIC_STAGE, stage=stage),
            )
            total = metric_sum(after, f"{METRIC_STAGE}_sum", stage=stage) - metric_sum(
                before, f"{METRIC_STAGE}_sum", stage=stage
            )
            result.stages[stage] = histogram_distribution(buckets, total)
        if after:
            result.dispatched_total = metric_sum(after, METRIC_DISPATCHED) - metric_sum(
                before, METRIC_DISPATCHED
            )
            result.admitted_total = metric_sum(after, METRIC_ADMITTED) - metric_sum(before, METRIC_ADMITTED)
            by_host = counter_delta(
                metric_by_label(before, METRIC_REQUESTS, "host"),
                metric_by_label(after, METRIC_REQUESTS, "host"),
            )
            result.manager_requests = by_host.get(self.fleet.host_of("manager"), 0.0)
            for worker in self.fleet.workers:
                host = self.fleet.host_of(worker)
                result.worker_requests[worker] = by_host.get(host)

            def by_resource(samples: list[Sample]) -> dict[str, float]:
                out: dict[str, float] = {}
                for s in samples:
                    if s.name == METRIC_REQUESTS_BY_CLIENT:
                        key = f"{s.labels.get('client')} {s.labels.get('method')} {s.labels.get('resource')}"
                        out[key] = out.get(key, 0.0) + s.value
                return out

            result.manager_requests_by_resource = {
                k: v for k, v in sorted(counter_delta(by_resource(before), by_resource(after)).items()) if v
            }
        for cluster, samples in agents_after.items():
            if samples:
                result.agent_requests[cluster] = metric_sum(samples, METRIC_REQUESTS) - metric_sum(
                    agents_before.get(cluster) or [], METRIC_REQUESTS
                )
        for label, figures in sampler.figures.items():
            cluster, _, component = label.partition("/")
            if component == MANAGER_COMPONENT:
                result.manager = figures
            elif component == AGENT_COMPONENT:
                result.agents[cluster] = figures
            else:
                result.others[label] = figures
