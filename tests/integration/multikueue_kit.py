"""MultiKueue on the test fleet: a worker_agent in-process on the manager cluster and on each
worker, the manager in-process, and the setup guide's objects (Secrets, MultiKueueClusters, a
MultiKueueConfig, an AdmissionCheck, queues) under names unique to the test. Each test uses its
own origin, so the copies of one test are invisible to the next one's manager."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admission_kit import cluster_queue, eventually, local_queue, resource_flavor, running_agent, unique

from kube_runtime.client import AlreadyExists, KubeClient, NotFound
from kube_runtime.conditions import find_status_condition
from kube_runtime.informer import Informer
from kueue_domain import api
from manager.config import ManagerOptions, parse_manager_config
from manager.manager import Manager

Obj = dict[str, Any]
CONFIG_NAMESPACE = "kueue-system"
TEST_OPTIONS = ManagerOptions(
    remote_event_batch_seconds=0.1, watch_inactivity_timeout=6.0, path_poll_interval=0.2
)


KEEP_RUNNING_ANNOTATION = "kueue-federation.dev/keep-running"  # kwok never completes such pods


def mk_job(
    name: str, queue: str = "main", cpu: str = "1", managed: bool = True, keep_running: bool = False
) -> Obj:
    """A suspended batch/v1 Job for the manager (spec.managedBy as the Job webhook would set it)."""
    spec: Obj = {
        "suspend": True,
        "parallelism": 1,
        "completions": 1,
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
            },
        },
    }
    if keep_running:
        spec["template"]["metadata"]["annotations"] = {KEEP_RUNNING_ANNOTATION: "true"}
    if managed:
        spec["managedBy"] = api.MANAGED_BY_MULTIKUEUE
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: queue}},
        "spec": spec,
    }


def condition(obj: Obj | None, ctype: str) -> Obj | None:
    return find_status_condition(((obj or {}).get("status") or {}).get("conditions"), ctype)


def active(obj: Obj | None) -> tuple[str, str, str] | None:
    c = condition(obj, "Active")
    return (c["status"], c["reason"], c["message"]) if c else None


def check_state(wl: Obj | None, check: str) -> Obj | None:
    for state in ((wl or {}).get("status") or {}).get("admissionChecks") or ():
        if state.get("name") == check:
            return state
    return None


@dataclass
class MultiKueueEnv:
    fleet: Any
    manager_kube: KubeClient
    namespace: str
    prefix: str
    worker_kubes: dict[str, KubeClient] = field(default_factory=dict)
    clusters: dict[str, str] = field(default_factory=dict)  # MultiKueueCluster name -> fleet worker
    check: str = ""
    config_name: str = ""
    origin: str = ""
    cleanup: list[tuple[KubeClient, api.Resource, str, str | None]] = field(default_factory=list)
    manager: Manager | None = None
    frameworks: list[str] | None = None
    _manager_task: asyncio.Task[None] | None = None

    # -- objects -------------------------------------------------------------------------------

    async def create(self, kube: KubeClient, resource: api.Resource, obj: Obj) -> Obj:
        created = await kube.create(resource, obj, namespace=obj["metadata"].get("namespace"))
        self.cleanup.append((kube, resource, obj["metadata"]["name"], obj["metadata"].get("namespace")))
        return created

    def worker_kubeconfig_text(self, worker: str) -> str:
        return Path(self.fleet.multikueue_kubeconfig(worker)).read_text()

    async def put_secret(self, name: str, kubeconfig_text: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": CONFIG_NAMESPACE},
            "stringData": {"kubeconfig": kubeconfig_text},
        }
        try:
            await self.create(self.manager_kube, api.SECRET, body)
        except AlreadyExists:
            await self.manager_kube.replace(api.SECRET, {**body, "metadata": body["metadata"]})

    async def add_cluster(self, name: str, secret: str | None = None, path: str | None = None) -> None:
        kube_config = (
            {"locationType": "Path", "location": path}
            if path
            else {"locationType": "Secret", "location": secret or f"{name}-secret"}
        )
        await self.create(
            self.manager_kube,
            api.MULTIKUEUE_CLUSTER,
            {
                "apiVersion": api.API_VERSION,
                "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {"kubeConfig": kube_config},
            },
        )

    async def add_config(self, clusters: list[str]) -> None:
        await self.create(
            self.manager_kube,
            api.MULTIKUEUE_CONFIG,
            {
                "apiVersion": api.API_VERSION,
                "kind": "MultiKueueConfig",
                "metadata": {"name": self.config_name},
                "spec": {"clusters": clusters},
            },
        )

    async def add_check(self) -> None:
        await self.create(
            self.manager_kube,
            api.ADMISSION_CHECK,
            {
                "apiVersion": api.API_VERSION,
                "kind": "AdmissionCheck",
                "metadata": {"name": self.check},
                "spec": {
                    "controllerName": api.MULTIKUEUE_CONTROLLER_NAME,
                    "parameters": {
                        "apiGroup": api.GROUP,
                        "kind": "MultiKueueConfig",
                        "name": self.config_name,
                    },
                },
            },
        )

    async def add_queues(
        self,
        kube: KubeClient,
        cpu: str,
        checks: list[str] | None = None,
        preemption: Obj | None = None,
        memory: str | None = None,
    ) -> str:
        rf, cq = unique("rf"), unique("cq")
        await self.create(kube, api.RESOURCE_FLAVOR, resource_flavor(rf))
        quota = {"cpu": cpu, **({"memory": memory} if memory else {})}
        body = cluster_queue(cq, {rf: quota}, admission_checks=checks, preemption=preemption)
        await self.create(kube, api.CLUSTER_QUEUE, body)
        await kube.create(api.LOCAL_QUEUE, local_queue(self.namespace, "main", cq), namespace=self.namespace)
        return cq

    # -- reading -------------------------------------------------------------------------------

    async def get(
        self, kube: KubeClient, resource: api.Resource, name: str, namespace: str | None = None
    ) -> Obj | None:
        try:
            return await kube.get(resource, name, namespace)
        except NotFound:
            return None

    async def cluster_active(self, name: str) -> tuple[str, str, str] | None:
        return active(await self.get(self.manager_kube, api.MULTIKUEUE_CLUSTER, name))

    async def wait_connected(self, seconds: float = 30) -> None:
        """Until the manager reports every worker's MultiKueueCluster Active (connected)."""

        async def all_active() -> bool:
            states = [await self.cluster_active(name) for name in self.clusters]
            return all(state is not None and state[0] == "True" for state in states)

        await eventually(all_active, timeout=seconds)

    async def check_active(self) -> tuple[str, str, str] | None:
        return active(await self.get(self.manager_kube, api.ADMISSION_CHECK, self.check))

    async def job_workload(self, job_name: str) -> Obj | None:
        items, _ = await self.manager_kube.list(api.WORKLOAD, namespace=self.namespace)
        for wl in items:
            refs = wl["metadata"].get("ownerReferences") or ()
            if any(r.get("kind") == "Job" and r.get("name") == job_name for r in refs):
                return wl
        return None

    async def remote(self, cluster: str, resource: api.Resource, name: str) -> Obj | None:
        return await self.get(self.worker_kubes[self.clusters[cluster]], resource, name, self.namespace)

    async def wait_copies_gone(self, cluster: str, *names: str) -> None:
        """Wait until `cluster` holds no Workload copy of these names. The manager records the
        winner first and deletes the other workers' copies right after, so a loser's copy may
        still be there when the check turns Ready."""

        async def gone() -> bool | None:
            return all([not await self.remote(cluster, api.WORKLOAD, n) for n in names]) or None

        await eventually(gone)

    async def remote_workloads(self, cluster: str) -> list[Obj]:
        items, _ = await self.worker_kubes[self.clusters[cluster]].list(
            api.WORKLOAD, namespace=self.namespace
        )
        return items

    async def describe(self, name: str) -> str:
        """The manager's Workload and every worker's copy, in one line each: what a failed wait
        prints, so that a failure in CI says where the Workload stood."""

        def line(wl: Obj | None) -> str:
            if wl is None:
                return "absent"
            status = wl.get("status") or {}

            def entries(field: str, key: str, value: str) -> list[str]:
                return [
                    f"{e.get(key)}={e.get(value)}({e.get('message', '')[:120]})"
                    for e in status.get(field) or ()
                ]

            return (
                f"clusterName={status.get('clusterName')!r} "
                f"nominated={status.get('nominatedClusterNames')!r} "
                f"checks={entries('admissionChecks', 'name', 'state')} "
                f"conditions={entries('conditions', 'type', 'status')}"
            )

        lines = [f"manager: {line(await self.get(self.manager_kube, api.WORKLOAD, name, self.namespace))}"]
        for cluster in self.clusters:
            try:
                lines.append(f"{cluster}: {line(await self.remote(cluster, api.WORKLOAD, name))}")
            except Exception as exc:  # a paused or stopped worker: say so, keep the rest
                lines.append(f"{cluster}: unreadable ({type(exc).__name__})")
        return "\n".join(lines)

    async def wait_for(self, check: Any, seconds: float, workload: str) -> Any:
        """`eventually(check)`; on timeout the error also says where `workload` stood."""
        try:
            return await eventually(check, timeout=seconds)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await self.describe(workload)}") from None

    async def workload_of(self, kind: str, name: str) -> Obj:
        """The manager's Workload whose owner is the `kind` object `name` (within 30 s)."""

        async def found():
            items, _ = await self.manager_kube.list(api.WORKLOAD, namespace=self.namespace)
            for wl in items:
                refs = wl["metadata"].get("ownerReferences") or ()
                if any(r.get("kind") == kind and r.get("name") == name for r in refs):
                    return wl
            return None

        return await eventually(found, timeout=30)

    async def placed(self, wl_name: str, seconds: float = 60, not_on: str | None = None) -> str:
        """The worker the manager's Workload runs on once its MultiKueue check is Ready (on a worker
        other than `not_on`)."""

        async def ready():
            current = await self.get(self.manager_kube, api.WORKLOAD, wl_name, self.namespace)
            state = check_state(current, self.check)
            where = ((current or {}).get("status") or {}).get("clusterName")
            return where if state and state["state"] == "Ready" and where != not_on else None

        return await self.wait_for(ready, seconds, wl_name)

    async def invariant_violations(self, lost: tuple[str, ...] = ()) -> list[str]:
        """What is wrong, read from the API, with the promise that nothing is stuck or leaked: every
        manager Workload of this test is Finished; or Admitted, with exactly one copy, admitted, on
        the worker it names, whose job exists and is not suspended; or pending without a
        half-done eviction and saying why. No manager Job is suspended with pods counted active;
        no copy is left on a worker for a Workload that does not run there. `lost`: workers the
        test made unreachable for good (their copies are not read)."""
        problems: list[str] = []
        workloads, _ = await self.manager_kube.list(api.WORKLOAD, namespace=self.namespace)
        reachable = [c for c in self.clusters if c not in lost]
        copies = {
            c: {w["metadata"]["name"]: w for w in await self.remote_workloads(c) if _ours(w, self.origin)}
            for c in reachable
        }
        placed: dict[str, str] = {}
        for wl in workloads:
            name, status = wl["metadata"]["name"], wl.get("status") or {}
            state = check_state(wl, self.check)
            if state is None:
                continue
            if _true(wl, api.WORKLOAD_FINISHED):
                continue
            if _true(wl, api.WORKLOAD_ADMITTED):
                cluster = status.get("clusterName")
                if cluster in lost:
                    problems.append(f"{name}: admitted on the lost worker {cluster}")
                    continue
                holders = [c for c in reachable if name in copies[c]]
                if holders != [cluster] or not _true(copies[cluster][name], api.WORKLOAD_ADMITTED):
                    problems.append(f"{name}: admitted on {cluster!r}, copies on {holders}")
                    continue
                placed[name] = cluster
                resource, owner = _job_owner(wl)
                job = await self.remote(cluster, resource, owner) if owner else None
                if owner and (job is None or (job.get("spec") or {}).get("suspend")):
                    problems.append(
                        f"{name}: admitted on {cluster} where its {resource.kind} is missing or suspended"
                    )
                continue
            if _true(wl, api.WORKLOAD_EVICTED) and _true(wl, api.WORKLOAD_QUOTA_RESERVED):
                problems.append(f"{name}: evicted but still holding quota")
            elif status.get("clusterName"):
                problems.append(f"{name}: not admitted but placed on {status['clusterName']}")
            elif _true(wl, api.WORKLOAD_QUOTA_RESERVED):
                holders = [c for c in reachable if name in copies[c]]
                if not holders and not state.get("message"):
                    problems.append(f"{name}: holds quota, has no copy and its check says nothing")
            elif not (condition(wl, api.WORKLOAD_QUOTA_RESERVED) or {}).get("message"):
                problems.append(f"{name}: pending and nothing says why")
        for cluster in reachable:
            for name, copy_ in copies[cluster].items():
                if _true(copy_, api.WORKLOAD_ADMITTED) and placed.get(name) != cluster:
                    problems.append(f"{name}: a copy admitted on {cluster} for a Workload not placed there")
        jobs, _ = await self.manager_kube.list(api.JOB, namespace=self.namespace)
        for job in jobs:
            if (job.get("spec") or {}).get("suspend") and (job.get("status") or {}).get("active"):
                problems.append(f"Job {job['metadata']['name']}: suspended with active pods counted")
        if self.frameworks and api.FRAMEWORK_JOB_SET in self.frameworks:
            job_sets, _ = await self.manager_kube.list(api.JOB_SET, namespace=self.namespace)
            for js in job_sets:
                statuses = (js.get("status") or {}).get("replicatedJobsStatus") or ()
                if (js.get("spec") or {}).get("suspend") and any(r.get("active") for r in statuses):
                    problems.append(f"JobSet {js['metadata']['name']}: suspended with active Jobs counted")
        if self.frameworks and api.FRAMEWORK_TRAIN_JOB in self.frameworks:
            train_jobs, _ = await self.manager_kube.list(api.TRAIN_JOB, namespace=self.namespace)
            for tj in train_jobs:
                statuses = (tj.get("status") or {}).get("jobsStatus") or ()
                if (tj.get("spec") or {}).get("suspend") and any(r.get("active") for r in statuses):
                    problems.append(f"TrainJob {tj['metadata']['name']}: suspended with active Jobs counted")
        return problems

    async def assert_invariants(self, lost: tuple[str, ...] = (), settle: float = 40) -> None:
        """Once the scenario has settled (within `settle` seconds: the GC and a last dispatch may run),
        invariant_violations finds nothing."""

        async def holds():
            return not await self.invariant_violations(lost) or None

        try:
            await eventually(holds, timeout=settle)
        except AssertionError:
            raise AssertionError(f"invariants broken: {await self.invariant_violations(lost)}") from None

    async def events(self, name: str, reason: str) -> list[str]:
        items, _ = await self.manager_kube.list(api.EVENT, namespace=self.namespace)
        return [
            e.get("note", "")
            for e in items
            if (e.get("regarding") or {}).get("name") == name and e.get("reason") == reason
        ]

    async def event_note(
        self,
        name: str,
        reason: str,
        note: str,
        timeout: float = 20,  # noqa: ASYNC109 - a polling deadline, as in eventually
    ) -> list[str]:
        """Wait until an event about `name` with this reason and note is written (events are queued
        and written after the status change they report), and return the notes of that reason."""

        async def written():
            notes = await self.events(name, reason)
            return notes if note in notes else None

        try:
            return await eventually(written, timeout=timeout)
        except AssertionError:
            raise AssertionError(f"no {reason} event {note!r}: {await self.events(name, reason)}") from None

    # -- the manager ---------------------------------------------------------------------------

    async def start_manager(
        self, config: Obj | None = None, options: ManagerOptions = TEST_OPTIONS
    ) -> Manager:
        data = {
            "namespace": CONFIG_NAMESPACE,
            "leaderElection": {"leaderElect": False},
            "multiKueue": {"origin": self.origin, "workerLostTimeout": "8s", "gcInterval": "1s"},
        }
        if self.frameworks:
            data["integrations"] = {"frameworks": self.frameworks}
        for key, value in (config or {}).items():
            data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
        self.manager = Manager(
            self.manager_kube,
            parse_manager_config(data),
            options=options,
            metrics_bind_address="0",
            health_bind_address="0",
        )
        self._manager_task = asyncio.get_running_loop().create_task(self.manager.run())
        async with asyncio.timeout(30):
            await self.manager.leading.wait()
        return self.manager

    async def stop_manager(self) -> None:
        if self._manager_task is not None:
            self._manager_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._manager_task
        self._manager_task = self.manager = None

    # -- fleet processes -----------------------------------------------------------------------

    def apiserver_pid(self, cluster: str) -> int:
        worker = self.clusters[cluster]
        for proc in self.fleet.state["processes"]:
            if proc.get("cluster") == worker and proc.get("component") == "kube-apiserver":
                return program_pid(proc)
        raise AssertionError(f"no kube-apiserver recorded for {worker}")

    @contextlib.contextmanager
    def paused_apiserver(self, cluster: str):
        """SIGSTOP the worker's kube-apiserver for the block (SIGCONT afterwards, whatever happens)."""
        import os

        pid = self.apiserver_pid(cluster)
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


def _true(obj: Obj | None, ctype: str) -> bool:
    found = condition(obj, ctype)
    return found is not None and found.get("status") == "True"


def _ours(obj: Obj, origin: str) -> bool:
    """A copy this test's manager made (a worker's own Workloads in the namespace are not)."""
    return (obj["metadata"].get("labels") or {}).get(api.LABEL_MULTIKUEUE_ORIGIN) == origin


def _job_owner(wl: Obj) -> tuple[api.Resource, str]:
    """The job object (a batch/v1 Job or a JobSet) that owns a Workload; "" for other owners."""
    refs = wl["metadata"].get("ownerReferences") or ()
    for resource in (api.JOB, api.JOB_SET):
        name = next((r["name"] for r in refs if r.get("kind") == resource.kind), "")
        if name:
            return resource, name
    return api.JOB, ""


@contextlib.asynccontextmanager
async def observed(kube: KubeClient, resource: api.Resource, namespace: str):
    """{name: [every state seen]} of the objects of `resource` in `namespace` while the block
    runs, deleted ones included (a watch sees states that are gone before any GET could)."""
    seen: dict[str, list[Obj]] = {}

    def record(obj: Obj) -> None:
        seen.setdefault(obj["metadata"]["name"], []).append(obj)

    informer = Informer(kube, resource, namespace=namespace, name=f"test/{resource.plural}")
    informer.add_handler(on_add=record, on_update=lambda _old, new: record(new), on_delete=record)
    informer.start()
    try:
        await informer.wait_synced()
        yield seen
    finally:
        await informer.stop()


def program_pid(proc: Obj) -> int:
    """The pid of a fleet process's program (localfleet supervises it: its supervisor writes the
    current pid, which changes when the program is restarted, into the record's status file)."""
    if proc.get("status"):
        return json.loads(Path(proc["status"]).read_text())["pid"]
    return proc["pid"]


async def _strip_workload_finalizers(kube: KubeClient, namespace: str) -> None:
    with contextlib.suppress(NotFound):
        items, _ = await kube.list(api.WORKLOAD, namespace=namespace)
        for wl in items:
            with contextlib.suppress(NotFound):
                await kube.patch_merge(
                    api.WORKLOAD,
                    wl["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                    namespace=namespace,
                )


@contextlib.asynccontextmanager
async def multikueue(
    fleet: Any,
    manager_kube: KubeClient,
    namespace: str,
    *,
    worker_cpu: dict[str, str] | None = None,
    manager_cpu: str = "8",
    setup: bool = True,
    manager_config: Obj | None = None,
    start_manager: bool = True,
    worker_preemption: Obj | None = None,
    manager_preemption: Obj | None = None,
    frameworks: list[str] | None = None,
    manager_agent: bool = True,
    invariants: bool = True,
    memory: str | None = None,
):
    """`worker_cpu`: {fleet worker: ClusterQueue cpu quota}; by default both workers with 4 cpu.
    `worker_preemption`, `manager_preemption`: the workers' and the manager's ClusterQueue
    `preemption` policy. `manager_agent=False`: no
    worker_agent on the manager cluster, so the test writes the manager Workloads' admission status
    itself (states the agent passes through too quickly to test). When the test body ends without
    an error and the manager is running, the block ends with `env.assert_invariants()` unless
    `invariants=False` (a test that leaves a state the check refuses on purpose). `memory`: a memory
    quota in every ClusterQueue besides cpu (none by default)."""
    worker_cpu = worker_cpu or {"worker1": "4", "worker2": "4"}
    agent_config = {"integrations": {"frameworks": frameworks}} if frameworks else None
    prefix = unique("mk")
    env = MultiKueueEnv(fleet, manager_kube, namespace, prefix)
    env.check, env.config_name, env.origin = f"{prefix}-check", f"{prefix}-config", prefix
    with contextlib.suppress(AlreadyExists):
        await manager_kube.create(
            api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONFIG_NAMESPACE}}
        )
    stack = contextlib.AsyncExitStack()
    try:
        for worker, cpu in worker_cpu.items():
            kube = await stack.enter_async_context(
                await KubeClient.from_kubeconfig_file(fleet.kubeconfig(worker))
            )
            env.worker_kubes[worker] = kube
            env.clusters[f"{prefix}-{worker}"] = worker
            await kube.create(
                api.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
            await env.add_queues(kube, cpu, preemption=worker_preemption, memory=memory)
            await stack.enter_async_context(running_agent(kube, agent_config))
        if setup:
            for cluster, worker in env.clusters.items():
                await env.put_secret(f"{cluster}-secret", env.worker_kubeconfig_text(worker))
                await env.add_cluster(cluster)
            await env.add_config(list(env.clusters))
            await env.add_check()
            await env.add_queues(
                manager_kube, manager_cpu, checks=[env.check], preemption=manager_preemption, memory=memory
            )
        if manager_agent:
            await stack.enter_async_context(running_agent(manager_kube, agent_config))
        env.frameworks = frameworks
        if start_manager:
            await env.start_manager(manager_config)
        yield env
        if invariants and env.manager is not None:
            await env.assert_invariants()
    finally:
        await env.stop_manager()
        await stack.aclose()
        for kube in env.worker_kubes.values():
            await _strip_workload_finalizers(kube, namespace)
            with contextlib.suppress(NotFound):
                await kube.delete(api.NAMESPACE, namespace)
        await _strip_workload_finalizers(manager_kube, namespace)
        for kube, resource, name, ns in reversed(env.cleanup):
            with contextlib.suppress(NotFound):
                await kube.delete(resource, name, ns)
            if not resource.namespaced:
                with contextlib.suppress(NotFound):
                    await kube.patch_merge(resource, name, {"metadata": {"finalizers": None}})


__all__ = ["MultiKueueEnv", "check_state", "condition", "eventually", "mk_job", "multikueue", "observed"]


# The frameworks of a manager that federates JobSets (and Jobs).
JOB_SET_FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset"]


def job_set(
    name: str, workers: int = 2, cpu: str = "1", keep_running: bool = False, queue: str = "main"
) -> Obj:
    """The setup guide's shape of JobSet, queued to `queue`: a `leader` Job of one pod and a `workers`
    Job of `workers` pods, `cpu` each (total 1 + workers pods)."""
    pod: Obj = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        }
    }
    if keep_running:
        pod["metadata"] = {"annotations": {KEEP_RUNNING_ANNOTATION: "true"}}

    def replicated(rj: str, pods: int) -> Obj:
        job = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": copy.deepcopy(pod)}
        return {"name": rj, "replicas": 1, "template": {"spec": job}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: queue}},
        "spec": {"replicatedJobs": [replicated("leader", 1), replicated("workers", workers)]},
    }


# The frameworks of a manager that federates TrainJobs (and the JobSets and Jobs they make).
TRAIN_JOB_FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"]


def training_runtime(name: str, cpu: str = "500m", keep_running: bool = False) -> Obj:
    """A ClusterTrainingRuntime shaped like Trainer's torch-distributed: one replicated Job `node`,
    the trainer step, whose container `node` asks for `cpu` (1 node unless the TrainJob says)."""
    pod: Obj = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "node", "image": "busybox", "resources": {"requests": {"cpu": cpu}}},
            ],
        }
    }
    if keep_running:
        pod["metadata"] = {"annotations": {KEEP_RUNNING_ANNOTATION: "true"}}
    return {
        "apiVersion": api.CLUSTER_TRAINING_RUNTIME.api_version,
        "kind": api.CLUSTER_TRAINING_RUNTIME.kind,
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {api.TRAIN_JOB_LABEL_ANCESTOR: "trainer"}},
                                "spec": {"backoffLimit": 0, "template": pod},
                            },
                        }
                    ]
                }
            },
        },
    }


def train_job(name: str, runtime: str, nodes: int = 2, cpu: str | None = "1", queue: str = "main") -> Obj:
    """A TrainJob of the ClusterTrainingRuntime `runtime` on `nodes` nodes of `cpu` each (None: the
    runtime's), queued to `queue`."""
    trainer: Obj = {"numNodes": nodes}
    if cpu is not None:
        trainer["resourcesPerNode"] = {"requests": {"cpu": cpu}}
    return {
        "apiVersion": api.TRAIN_JOB.api_version,
        "kind": api.TRAIN_JOB.kind,
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: queue}},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer},
    }


# The frameworks of a manager that federates LeaderWorkerSets (and the pods they make).
LWS_FRAMEWORKS = ["batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"]


def lws(name: str, replicas: int = 2, size: int = 2, cpu: str = "1") -> dict:
    """A LeaderWorkerSet queued to `main`: `replicas` groups of `size` pods of `cpu` each."""
    template = {
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {api.LABEL_QUEUE_NAME: "main"}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}},
    }
