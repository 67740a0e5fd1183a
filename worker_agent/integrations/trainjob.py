"""Kubeflow Trainer v2 TrainJobs (trainer.kubeflow.org/v1alpha1, integration
`trainer.kubeflow.org/trainjob`): one Workload `trainjob-<name>-<hash5>` per managed TrainJob.

A TrainJob names a runtime (`spec.runtimeRef`: a ClusterTrainingRuntime, the default, or a
TrainingRuntime of its namespace) whose `template` is a JobSet spec; the Trainer controller builds a
JobSet from it and the TrainJob's own fields. Its PodSets are those of that JobSet, derived as
upstream Kueue does (getChildJobSet, then the JobSet's PodSets): one per replicated Job, count
replicas x min(parallelism, completions), with

- the TrainJob's `spec.runtimePatches` merged into the replicated Jobs' templates (maps merged,
  containers, env, volumes, volume mounts and scheduling gates merged by name, other lists replaced:
  the strategic merge patch of a Job template);
- the trainer step (the replicated Job labelled `trainer.kubeflow.org/trainjob-ancestor-step:
  trainer`) run as 1 Job of `numNodes` pods: `spec.trainer.numNodes`, else the runtime's
  `mlPolicy.numNodes` (1 when unset), for plain, torch, JAX and XGBoost policies; its `node`
  container with `spec.trainer.resourcesPerNode`, image, command, args and env;
- the dataset and model initializer steps run as 1 Job; every other replicated Job keeps its
  replicas, with completions = parallelism.

MPI policies (a launcher beside the nodes), the schedulers' pod groups (coscheduling, Volcano) and
the runtime's `podGroupPolicy` are not derived.

Start and stop go through `spec.suspend` and the runtime patch whose manager is
`kueue.x-k8s.io/manager` (the webhook adds it on create): on admission the assigned flavors' node
selector and tolerations and the podset labels and annotations are written into that patch, one
replicated Job each, and the TrainJob is unsuspended in the same update (the Trainer webhook lets a
patch change while the TrainJob is, or becomes, suspended). On eviction it is suspended; once none of
its Jobs is active the patch's replicated Jobs are removed. A TrainJob `Complete` or `Failed`
finishes its Workload with that condition's message.

Which TrainJobs are managed, and MultiKueue, as for JobSets (managedBy `kueue.x-k8s.io/multikueue`:
unsuspended on admission, never run here). The JobSet a managed TrainJob owns is not a top-level job:
the JobSet integration leaves it, and its Jobs, to the TrainJob's Workload (`manages_child`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any

import structlog

from kube_runtime.client import Conflict, Forbidden, Invalid, NotFound
from kube_runtime.informer import Informer, object_key
from kueue_domain import api, naming
from worker_agent.integrations import framework, jobframework
from worker_agent.integrations.jobset import (
    replicated_jobs_podsets,
    replicated_jobs_ready,
    replicated_jobs_reclaimable,
)

log = structlog.get_logger("worker_agent.trainjob")

Obj = dict[str, Any]
TRAIN_JOB_KIND = api.TRAIN_JOB.kind
TRAIN_JOB_GROUP = api.TRAIN_JOB.group
INDEX_TRAIN_JOB_RUNTIME = "runtime"  # TrainJobs by "<kind>/<namespace>/<name>" of their runtime
# A replicated Job's role (the Trainer's ancestor label) whose Job runs once.
SINGLE_JOB_ANCESTORS = (
    api.TRAIN_JOB_ANCESTOR_TRAINER,
    api.TRAIN_JOB_ANCESTOR_DATASET_INITIALIZER,
    api.TRAIN_JOB_ANCESTOR_MODEL_INITIALIZER,
)
# Lists of a pod or Job template a strategic merge patch merges by key (patchMergeKey), not replaces.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "schedulingGates": "name",
    "imagePullSecrets": "name",
    "ports": "containerPort",
}


class RuntimeMissing(Exception):
    """The TrainJob's runtime is not (yet) known here."""


# ------------------------------------------------------------------------------------------------
# Pure parts: reading a TrainJob


def _spec(train_job: Obj) -> Obj:
    return train_job.get("spec") or {}


def runtime_ref(train_job: Obj) -> tuple[str, str]:
    """(kind, name) of the runtime; kind ClusterTrainingRuntime when unset (the CRD's default)."""
    ref = _spec(train_job).get("runtimeRef") or {}
    return ref.get("kind") or api.CLUSTER_TRAINING_RUNTIME.kind, ref.get("name") or ""


def runtime_key(train_job: Obj) -> str:
    """The runtime's informer key: `name` for a ClusterTrainingRuntime, `namespace/name` otherwise."""
    kind, name = runtime_ref(train_job)
    if kind == api.CLUSTER_TRAINING_RUNTIME.kind:
        return name
    return f"{train_job['metadata'].get('namespace', '')}/{name}"


def is_suspended(train_job: Obj) -> bool:
    return _spec(train_job).get("suspend") is True


def is_active(train_job: Obj) -> bool:
    """A Job of the TrainJob has active pods (status.jobsStatus[].active)."""
    return any(int(s.get("active") or 0) > 0 for s in (train_job.get("status") or {}).get("jobsStatus") or ())


def finished(train_job: Obj) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the TrainJob's `Complete`, then `Failed`, condition."""
    return jobframework.condition_finished(
        train_job, api.TRAIN_JOB_CONDITION_COMPLETE, api.TRAIN_JOB_CONDITION_FAILED
    )


def workload_name(train_job: Obj) -> str:
    """GetWorkloadNameForOwnerWithGVK with the TrainJob GVK."""
    meta = train_job["metadata"]
    return naming.workload_name(meta["name"], meta["uid"], TRAIN_JOB_KIND, TRAIN_JOB_GROUP)


def kueue_runtime_patch(train_job: Obj) -> Obj | None:
    """The `spec.runtimePatches` entry of manager `kueue.x-k8s.io/manager`."""
    for patch in _spec(train_job).get("runtimePatches") or ():
        if patch.get("manager") == api.TRAIN_JOB_RUNTIME_PATCH_MANAGER:
            return patch
    return None


def new_kueue_runtime_patch() -> Obj:
    """What the webhook appends on create: the patch with an empty JobSet spec."""
    return {
        "manager": api.TRAIN_JOB_RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {}}},
    }


# ------------------------------------------------------------------------------------------------
# Pure parts: the JobSet a TrainJob becomes


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """The strategic merge patch of a Job template, for the fields a runtime patch can hold: maps
    merged recursively, lists of MERGE_KEYS merged by their key, other lists and values replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        result = copy.deepcopy(base)
        for k, v in patch.items():
            result[k] = strategic_merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return result
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        result = copy.deepcopy(base)
        for item in patch:
            index = next(
                (
                    i
                    for i, old in enumerate(result)
                    if isinstance(old, dict)
                    and isinstance(item, dict)
                    and old.get(merge_key) == item.get(merge_key)
                ),
                None,
            )
            if index is None:
                result.append(copy.deepcopy(item))
            else:
                result[index] = strategic_merge(result[index], item)
        return result
    return copy.deepcopy(patch)


def _ancestor(replicated_job: Obj) -> str:
    return (((replicated_job.get("template") or {}).get("metadata") or {}).get("labels") or {}).get(
        api.TRAIN_JOB_LABEL_ANCESTOR, ""
    )


def _node_container(replicated_job: Obj) -> Obj | None:
    pod_spec = (((replicated_job.get("template") or {}).get("spec") or {}).get("template") or {}).get(
        "spec"
    ) or {}
    for container in pod_spec.get("containers") or ():
        if container.get("name") == api.TRAIN_JOB_CONTAINER_NODE:
            return container
    return None


def _upsert_env(container: Obj, env: list[Obj]) -> None:
    current = list(container.get("env") or ())
    for var in env:
        index = next((i for i, old in enumerate(current) if old.get("name") == var.get("name")), None)
        if index is None:
            current.append(copy.deepcopy(var))
        else:
            current[index] = copy.deepcopy(var)
    if current:
        container["env"] = current


def child_job_set_spec(train_job: Obj, runtime: Obj) -> Obj:
    """The spec of the JobSet the Trainer builds for `train_job` from `runtime` (the parts that
    decide its PodSets: replicated Jobs, their replicas, parallelism, completions and templates)."""
    template = copy.deepcopy(((runtime.get("spec") or {}).get("template") or {}).get("spec") or {})
    rjobs = template.get("replicatedJobs") or []
    # The runtime patches, in order, each replicated Job's template patched by name.
    for patch in _spec(train_job).get("runtimePatches") or ():
        spec_patch = (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")) or {}
        for rjob_patch in spec_patch.get("replicatedJobs") or ():
            if not rjob_patch.get("template"):
                continue
            for rjob in rjobs:
                if rjob.get("name") == rjob_patch.get("name"):
                    rjob["template"] = strategic_merge(rjob.get("template") or {}, rjob_patch["template"])
    ml_policy = (runtime.get("spec") or {}).get("mlPolicy")
    trainer = _spec(train_job).get("trainer") or {}
    mpi = bool((ml_policy or {}).get("mpi"))
    for rjob in rjobs:
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        parallelism = job_spec.get("parallelism")
        count = 1 if parallelism is None else int(parallelism)
        ancestor = _ancestor(rjob)
        if ancestor == api.TRAIN_JOB_ANCESTOR_TRAINER:
            if ml_policy is not None:
                count = int(ml_policy.get("numNodes") or 1)
            if trainer.get("numNodes") is not None and not mpi:
                count = int(trainer["numNodes"])  # the plain, torch, JAX and XGBoost policies
            container = _node_container(rjob)
            if container is not None:
                for field in ("image", "command", "args"):
                    if trainer.get(field) is not None:
                        container[field] = copy.deepcopy(trainer[field])
                resources = trainer.get("resourcesPerNode") or {}
                if resources.get("limits") is not None or resources.get("requests") is not None:
                    container["resources"] = {
                        k: copy.deepcopy(resources[k]) for k in ("limits", "requests") if resources.get(k)
                    }
                _upsert_env(container, trainer.get("env") or [])
        job_spec["parallelism"] = count
        job_spec["completions"] = count
        if ancestor in SINGLE_JOB_ANCESTORS:
            rjob["replicas"] = 1
    template["replicatedJobs"] = rjobs
    return template


def _child_replicated_jobs(train_job: Obj, runtime: Obj) -> list[Obj]:
    return list(child_job_set_spec(train_job, runtime).get("replicatedJobs") or ())


def _jobs_status(train_job: Obj) -> list[Obj]:
    return list((train_job.get("status") or {}).get("jobsStatus") or ())


def train_job_podsets(train_job: Obj, runtime: Obj) -> list[Obj]:
    """One PodSet per replicated Job of the child JobSet, in order."""
    return replicated_jobs_podsets(_child_replicated_jobs(train_job, runtime))


def pods_ready(train_job: Obj, runtime: Obj) -> bool:
    """Every Job is ready or succeeded: the child JobSet's replicas against jobsStatus."""
    return replicated_jobs_ready(_child_replicated_jobs(train_job, runtime), _jobs_status(train_job))


def reclaimable_pods(train_job: Obj, runtime: Obj) -> list[Obj]:
    """Per replicated Job with 0 < succeeded Jobs <= replicas: succeeded x pods per replica."""
    return replicated_jobs_reclaimable(_child_replicated_jobs(train_job, runtime), _jobs_status(train_job))


# ------------------------------------------------------------------------------------------------
# Pure parts: the TrainJob as it is started and stopped


def replicated_job_patches(podset_names: list[str], infos: Mapping[str, Obj]) -> list[Obj]:
    """RunWithPodSetsInfo's ReplicatedJobPatch per PodSet: the podset info's labels and annotations
    on the pod template's metadata, its node selector and tolerations on the pod spec."""
    patches = []
    for name in podset_names:
        info = infos[name]
        meta = {k: dict(info[k]) for k in ("labels", "annotations") if info.get(k)}
        pod_spec: Obj = {}
        if info.get("nodeSelector"):
            pod_spec["nodeSelector"] = dict(info["nodeSelector"])
        if info.get("tolerations"):
            pod_spec["tolerations"] = copy.deepcopy(info["tolerations"])
        if info.get("schedulingGates"):
            pod_spec["schedulingGates"] = copy.deepcopy(info["schedulingGates"])
        patches.append(
            {"name": name, "template": {"spec": {"template": {"metadata": meta, "spec": pod_spec}}}}
        )
    return patches


def started_train_job(train_job: Obj, podset_names: list[str], infos: Mapping[str, Obj]) -> Obj | None:
    """RunWithPodSetsInfo: the Kueue runtime patch holding every PodSet's info, and unsuspended. None
    when it is not suspended. Raises PodSetInfoConflict when the admission lacks a PodSet's info.
    A TrainJob without the Kueue patch (created before the webhook ran) gets one."""
    if not is_suspended(train_job):
        return None
    if len(infos) != len(podset_names) or any(name not in infos for name in podset_names):
        # podset.BadPodSetsInfoLenError
        raise framework.PodSetInfoConflict(
            f"invalid podset infos: expecting {len(podset_names)} podset, got {len(infos)}"
        )
    result = copy.deepcopy(train_job)
    patch = kueue_runtime_patch(result)
    if patch is None:
        patch = new_kueue_runtime_patch()
        result["spec"].setdefault("runtimePatches", []).append(patch)
    template = patch.setdefault("trainingRuntimeSpec", {}).setdefault("template", {})
    template.setdefault("spec", {})["replicatedJobs"] = replicated_job_patches(podset_names, infos)
    result["spec"]["suspend"] = False
    return result


def suspended_train_job(train_job: Obj) -> Obj | None:
    """Stop's first step: `spec.suspend: true`, the runtime patches untouched (the Trainer webhook
    refuses a patch change while a Job of the TrainJob is active). None when already suspended."""
    if is_suspended(train_job):
        return None
    result = copy.deepcopy(train_job)
    result.setdefault("spec", {})["suspend"] = True
    return result


def restored_train_job(train_job: Obj) -> Obj | None:
    """RestorePodSetsInfo: the Kueue runtime patch's replicated Jobs removed. None when there is
    nothing to remove."""
    patch = kueue_runtime_patch(train_job)
    spec = (((patch or {}).get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
    if not spec.get("replicatedJobs"):
        return None
    result = copy.deepcopy(train_job)
    ours = kueue_runtime_patch(result)
    assert ours is not None
    del ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return result


# ------------------------------------------------------------------------------------------------
# The integration


def controller_train_job_ref(obj: Obj) -> Obj | None:
    """The object's controller owner reference when it is a TrainJob (the JobSet a TrainJob owns)."""
    return jobframework.controller_ref_of_kind(api.TRAIN_JOB, obj)


def _runtime_index(train_job: Obj) -> tuple[str, ...]:
    return (f"{runtime_ref(train_job)[0]}/{runtime_key(train_job)}",)


class TrainJobIntegration(jobframework.JobReconciler):
    """The JobSet a managed TrainJob owns, and its Jobs, are left to the TrainJob's Workload
    (`manages_child`, asked by the JobSet integration)."""

    name = api.FRAMEWORK_TRAIN_JOB
    resource = api.TRAIN_JOB
    index_prefix = "trainJob"
    managed_by_default = api.TRAIN_JOB_MANAGED_BY_DEFAULT

    def watch_more(self) -> list[Informer]:
        self.objects.add_index(INDEX_TRAIN_JOB_RUNTIME, _runtime_index)
        self.runtimes = Informer(self.kube, api.TRAINING_RUNTIME, name="trainingruntimes")
        self.cluster_runtimes = Informer(
            self.kube, api.CLUSTER_TRAINING_RUNTIME, name="clustertrainingruntimes"
        )
        for informer, kind in (
            (self.runtimes, api.TRAINING_RUNTIME.kind),
            (self.cluster_runtimes, api.CLUSTER_TRAINING_RUNTIME.kind),
        ):
            informer.add_handler(
                on_add=lambda obj, kind=kind: self._enqueue_for_runtime(kind, obj),
                on_update=lambda old, new, kind=kind: self._enqueue_for_runtime(kind, new),
            )
        return [self.runtimes, self.cluster_runtimes]

    def _enqueue_for_runtime(self, kind: str, runtime: Obj) -> None:
        for key in self.objects.store.index_keys(INDEX_TRAIN_JOB_RUNTIME, f"{kind}/{object_key(runtime)}"):
            self.controller.enqueue(key)

    def _runtime(self, train_job: Obj) -> Obj:
        kind, name = runtime_ref(train_job)
        informer = self.cluster_runtimes if kind == api.CLUSTER_TRAINING_RUNTIME.kind else self.runtimes
        runtime = informer.get(runtime_key(train_job))
        if runtime is None:
            raise RuntimeMissing(f"runtime '{name}' not found")
        return runtime

    # -- the kind's hooks ------------------------------------------------------------------------

    def ready(self, key: str, train_job: Obj) -> bool:
        try:
            self._runtime(train_job)
        except RuntimeMissing as exc:
            # Upstream fails the reconcile; a runtime created later enqueues the TrainJob again.
            log.info("cannot derive the TrainJob's PodSets", trainjob=key, error=str(exc))
            return False
        return True

    def podsets(self, train_job: Obj) -> list[Obj]:
        return train_job_podsets(train_job, self._runtime(train_job))

    is_active = staticmethod(is_active)
    finished = staticmethod(finished)

    def pods_ready(self, train_job: Obj) -> bool:
        return pods_ready(train_job, self._runtime(train_job))

    def reclaimable_pods(self, train_job: Obj, wl: Obj) -> list[Obj]:
        return reclaimable_pods(train_job, self._runtime(train_job))

    async def on_pending(self, key: str, train_job: Obj, wl: Obj) -> None:
        if restored_train_job(train_job) is not None and not is_active(train_job):
            await self.stop(train_job, None, api.MSG_NOT_ADMITTED)  # a stop that did not finish

    async def run(self, train_job: Obj, wl: Obj, infos: Mapping[str, Obj]) -> bool:
        names = [p.get("name", "") for p in (wl.get("spec") or {}).get("podSets") or ()]
        started = started_train_job(train_job, names, infos)
        if started is None:
            return False
        try:
            await self.kube.replace(api.TRAIN_JOB, started)
        except (Conflict, NotFound):
            return False  # the TrainJob's next event brings us back
        return True

    async def stop(self, train_job: Obj, wl: Obj | None, message: str) -> bool:
        """Suspend, then, once no Job of it is active, remove the podset info from the Kueue runtime
        patch. True when both are done."""
        suspended = suspended_train_job(train_job)
        if suspended is not None:
            with contextlib.suppress(NotFound):
                train_job = await self.kube.replace(api.TRAIN_JOB, suspended)  # Conflict: retried
            await self._event(train_job, api.EVENT_STOPPED, message)
        if await self._still_active(train_job, count_running=False):
            return False
        restored = restored_train_job(train_job)
        if restored is None:
            return True
        try:
            await self.kube.replace(api.TRAIN_JOB, restored)
        except NotFound:
            return True
        except (Forbidden, Invalid, Conflict) as exc:
            # The Trainer webhook refuses while its JobSet still has active Jobs.
            log.info(
                "cannot restore the TrainJob's runtime patch yet",
                trainjob=object_key(train_job),
                error=str(exc),
            )
            return False
        return True

    async def may_release(self, train_job: Obj) -> bool:
        return True  # its stop read the API already: nothing runs
