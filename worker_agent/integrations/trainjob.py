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
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kube_runtime.labels import selector_matches
from kueue_domain import api, naming
from kueue_domain import workload as wlstatus
from worker_agent.integrations import framework
from worker_agent.integrations.jobset import pods_count, pods_count_per_replica, replicas

log = structlog.get_logger("worker_agent.trainjob")

Obj = dict[str, Any]
TRAIN_JOB_KIND = api.TRAIN_JOB.kind
TRAIN_JOB_GROUP = api.TRAIN_JOB.group
INDEX_TRAIN_JOB_OWNER_UID = "trainJobOwnerUID"  # Workloads by the UID of the TrainJob controlling them
INDEX_TRAIN_JOB_OWNER_KEY = "trainJobOwnerKey"  # Workloads by "<namespace>/<name>" of that TrainJob
INDEX_TRAIN_JOB_NAMESPACE = "namespace"  # TrainJobs by namespace
INDEX_TRAIN_JOB_RUNTIME = "runtime"  # TrainJobs by "<kind>/<namespace>/<name>" of their runtime
STOP_RECHECK_SECONDS = 2.0
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


def _labels(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


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
    conditions = (train_job.get("status") or {}).get("conditions") or ()
    for ctype, succeeded in (
        (api.TRAIN_JOB_CONDITION_COMPLETE, True),
        (api.TRAIN_JOB_CONDITION_FAILED, False),
    ):
        for c in conditions:
            if c.get("type") == ctype and c.get("status") == api.CONDITION_TRUE:
                return True, succeeded, c.get("message") or ""
    return False, False, ""


def managed_by(train_job: Obj) -> str:
    return _spec(train_job).get("managedBy") or api.TRAIN_JOB_MANAGED_BY_DEFAULT


def max_execution_seconds(train_job: Obj) -> int | None:
    value = _labels(train_job).get(api.LABEL_MAX_EXEC_TIME_SECONDS)
    if value and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def workload_name(train_job: Obj) -> str:
    """GetWorkloadNameForOwnerWithGVK with the TrainJob GVK."""
    meta = train_job["metadata"]
    return naming.workload_name(meta["name"], meta["uid"], TRAIN_JOB_KIND, TRAIN_JOB_GROUP)


def prebuilt_workload_name(train_job: Obj) -> str | None:
    return naming.prebuilt_workload_name(train_job) or None


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


def train_job_podsets(train_job: Obj, runtime: Obj) -> list[Obj]:
    """One PodSet per replicated Job of the child JobSet, in order."""
    return [
        {
            "name": rj.get("name", ""),
            "count": pods_count(rj),
            "template": framework.template_for_podset(
                ((rj.get("template") or {}).get("spec") or {}).get("template")
            ),
        }
        for rj in child_job_set_spec(train_job, runtime).get("replicatedJobs") or ()
    ]


def pods_ready(train_job: Obj, runtime: Obj) -> bool:
    """Every Job is ready or succeeded: the child JobSet's replicas against jobsStatus."""
    wanted = sum(replicas(rj) for rj in child_job_set_spec(train_job, runtime).get("replicatedJobs") or ())
    statuses = (train_job.get("status") or {}).get("jobsStatus") or ()
    return wanted == sum(int(s.get("ready") or 0) + int(s.get("succeeded") or 0) for s in statuses)


def reclaimable_pods(train_job: Obj, runtime: Obj) -> list[Obj]:
    """Per replicated Job with 0 < succeeded Jobs <= replicas: succeeded x pods per replica."""
    statuses = {s.get("name"): s for s in (train_job.get("status") or {}).get("jobsStatus") or ()}
    if not statuses:
        return []
    result = []
    for rj in child_job_set_spec(train_job, runtime).get("replicatedJobs") or ():
        status = statuses.get(rj.get("name"))
        succeeded = int((status or {}).get("succeeded") or 0)
        if status is not None and 0 < succeeded <= replicas(rj):
            result.append({"name": rj.get("name", ""), "count": succeeded * pods_count_per_replica(rj)})
    return result


def equivalent(train_job: Obj, runtime: Obj, wl: Obj, flavors: Mapping[str, Obj]) -> bool:
    """Does the Workload describe this TrainJob? (As for JobSets.)"""
    spec = wl.get("spec") or {}
    if spec.get("maximumExecutionTimeSeconds") != max_execution_seconds(train_job):
        return False
    ours = train_job_podsets(train_job, runtime)
    if [p["name"] for p in ours] != [p.get("name") for p in spec.get("podSets") or ()]:
        return False
    admitted = wlstatus.is_admitted(wl)
    running = framework.expected_running_podsets(wl, flavors)
    if running is not None:
        if framework.podsets_equivalent(ours, running, ignore_tolerations=admitted):
            return True
        if not is_suspended(train_job):
            return False
    return framework.podsets_equivalent(ours, spec.get("podSets") or [], ignore_tolerations=admitted)


def pods_ready_condition(train_job: Obj, runtime: Obj, wl: Obj) -> tuple[str, str, str]:
    """(status, reason, message) of the Workload's PodsReady condition (as for Jobs)."""
    previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
    previous_reason = (previous or {}).get("reason")
    if not wlstatus.is_admitted(wl):
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START
    if pods_ready(train_job, runtime):
        recovering = previous_reason in (api.REASON_WAIT_FOR_RECOVERY, api.REASON_RECOVERED)
        reason = api.REASON_RECOVERED if recovering else api.REASON_STARTED
        return api.CONDITION_TRUE, reason, api.MSG_PODS_READY
    if (previous or {}).get(
        "status"
    ) == api.CONDITION_TRUE or previous_reason == api.REASON_WAIT_FOR_RECOVERY:
        return api.CONDITION_FALSE, api.REASON_WAIT_FOR_RECOVERY, api.MSG_WAIT_FOR_RECOVERY
    return api.CONDITION_FALSE, api.REASON_WAIT_FOR_START, api.MSG_WAIT_FOR_START


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


def controlling_train_job(wl: Obj) -> Obj | None:
    """The Workload's controller owner reference when it is a TrainJob."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or ():
        if (
            ref.get("controller")
            and ref.get("kind") == TRAIN_JOB_KIND
            and ref.get("apiVersion") == api.TRAIN_JOB.api_version
        ):
            return ref
    return None


def controller_train_job_ref(obj: Obj) -> Obj | None:
    """The object's controller owner reference when it is a TrainJob (the JobSet a TrainJob owns)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            group = (ref.get("apiVersion") or "").rpartition("/")[0]
            return ref if (group, ref.get("kind")) == (TRAIN_JOB_GROUP, TRAIN_JOB_KIND) else None
    return None


def _owner_uid_index(wl: Obj) -> tuple[str, ...]:
    ref = controlling_train_job(wl)
    return (ref["uid"],) if ref and ref.get("uid") else ()


def _owner_key_index(wl: Obj) -> tuple[str, ...]:
    ref = controlling_train_job(wl)
    return (f"{wl['metadata'].get('namespace', '')}/{ref['name']}",) if ref and ref.get("name") else ()


def _namespace_index(train_job: Obj) -> tuple[str, ...]:
    return (train_job["metadata"].get("namespace", ""),)


def _runtime_index(train_job: Obj) -> tuple[str, ...]:
    return (f"{runtime_ref(train_job)[0]}/{runtime_key(train_job)}",)


class TrainJobIntegration(framework.WorkloadWrites):
    name = api.FRAMEWORK_TRAIN_JOB

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.kube = agent.kube
        self.state = agent.state
        self.config = agent.config
        self.recorder = agent.recorder
        self.trainjobs = Informer(self.kube, api.TRAIN_JOB, name="trainjobs")
        self.trainjobs.add_index(INDEX_TRAIN_JOB_NAMESPACE, _namespace_index)
        self.trainjobs.add_index(INDEX_TRAIN_JOB_RUNTIME, _runtime_index)
        self.runtimes = Informer(self.kube, api.TRAINING_RUNTIME, name="trainingruntimes")
        self.cluster_runtimes = Informer(
            self.kube, api.CLUSTER_TRAINING_RUNTIME, name="clustertrainingruntimes"
        )
        self.state.workloads.add_index(INDEX_TRAIN_JOB_OWNER_UID, _owner_uid_index)
        self.state.workloads.add_index(INDEX_TRAIN_JOB_OWNER_KEY, _owner_key_index)
        self.controller = Controller("trainjob", self.reconcile, concurrency=3, clock=agent.clock)
        self.trainjobs.add_handler(
            on_add=self._enqueue_object,
            on_update=lambda old, new: self._enqueue_object(new),
            on_delete=self._enqueue_object,
        )
        for informer, kind in (
            (self.runtimes, api.TRAINING_RUNTIME.kind),
            (self.cluster_runtimes, api.CLUSTER_TRAINING_RUNTIME.kind),
        ):
            informer.add_handler(
                on_add=lambda obj, kind=kind: self._enqueue_for_runtime(kind, obj),
                on_update=lambda old, new, kind=kind: self._enqueue_for_runtime(kind, new),
            )
        self.state.workloads.add_handler(
            on_add=self._enqueue_for_workload,
            on_update=lambda old, new: self._enqueue_for_workload(new),
            on_delete=self._enqueue_for_workload,
        )
        self.state.local_queues.add_handler(on_add=self._enqueue_for_local_queue)
        agent.register(
            informers=[self.trainjobs, self.runtimes, self.cluster_runtimes],
            controllers=[self.controller],
            on_leading=self._enqueue_all,
            requires=api.TRAIN_JOB,
        )

    # -- event routing ---------------------------------------------------------------------------

    def _enqueue_object(self, train_job: Obj) -> None:
        self.controller.enqueue(object_key(train_job))

    def _enqueue_for_runtime(self, kind: str, runtime: Obj) -> None:
        for key in self.trainjobs.store.index_keys(INDEX_TRAIN_JOB_RUNTIME, f"{kind}/{object_key(runtime)}"):
            self.controller.enqueue(key)

    def _enqueue_for_workload(self, wl: Obj) -> None:
        for key in _owner_key_index(wl):
            self.controller.enqueue(key)

    def _enqueue_for_local_queue(self, lq: Obj) -> None:
        if lq["metadata"]["name"] == api.DEFAULT_NAME:
            namespace = lq["metadata"].get("namespace", "")
            for key in self.trainjobs.store.index_keys(INDEX_TRAIN_JOB_NAMESPACE, namespace):
                self.controller.enqueue(key)

    def _enqueue_all(self) -> None:
        for key in self.trainjobs.store.keys():
            self.controller.enqueue(key)
        for key in self.state.workloads.store.index_values(INDEX_TRAIN_JOB_OWNER_KEY):
            self.controller.enqueue(key)

    # -- the JobSet and batch/v1 Job integrations ask this ----------------------------------------

    def manages_child(self, obj: Obj) -> bool | None:
        """Whether `obj` (the JobSet a TrainJob creates) belongs to a TrainJob Kueue manages: its
        controller is a TrainJob with a queue name, or any TrainJob with manageJobsWithoutQueueName.
        None when the TrainJob is not in the cache yet."""
        ref = controller_train_job_ref(obj)
        if ref is None:
            return False
        train_job = self.trainjobs.get(f"{obj['metadata'].get('namespace', '')}/{ref.get('name')}")
        if train_job is None:
            return None
        if train_job["metadata"].get("uid") != ref.get("uid"):
            return False
        return (
            bool(_labels(train_job).get(api.LABEL_QUEUE_NAME)) or self.config.manage_jobs_without_queue_name
        )

    # -- reads -----------------------------------------------------------------------------------

    def _flavors(self) -> dict[str, Obj]:
        return {f["metadata"]["name"]: f for f in self.state.flavors.list()}

    def _runtime(self, train_job: Obj) -> Obj:
        kind, name = runtime_ref(train_job)
        informer = self.cluster_runtimes if kind == api.CLUSTER_TRAINING_RUNTIME.kind else self.runtimes
        runtime = informer.get(runtime_key(train_job))
        if runtime is None:
            raise RuntimeMissing(f"runtime '{name}' not found")
        return runtime

    def _namespace_managed(self, namespace: str) -> bool:
        return selector_matches(
            self.config.managed_jobs_namespace_selector, self.state.namespace_labels.get(namespace, {})
        )

    def _queue_name(self, train_job: Obj, owned: list[Obj]) -> str | None:
        label = _labels(train_job).get(api.LABEL_QUEUE_NAME)
        if label:
            return label
        if owned:
            return (owned[0].get("spec") or {}).get("queueName") or ""
        namespace = train_job["metadata"].get("namespace", "")
        if (
            is_suspended(train_job)
            and self.state.local_queues.get(f"{namespace}/{api.DEFAULT_NAME}") is not None
        ):
            return api.DEFAULT_NAME
        if self.config.manage_jobs_without_queue_name:
            return ""
        return None

    def _owned_workloads(self, train_job: Obj) -> list[Obj]:
        owned = self.state.workloads.by_index(INDEX_TRAIN_JOB_OWNER_UID, train_job["metadata"]["uid"])
        return sorted(
            owned, key=lambda w: (w["metadata"].get("creationTimestamp", ""), w["metadata"]["name"])
        )

    def _held_back(self, train_job: Obj, wl: Obj) -> bool:
        """As for JobSets: a TrainJob of a MultiKueue ClusterQueue that the Trainer would run here is
        never started; one managed by MultiKueue is unsuspended (nothing runs here)."""
        if managed_by(train_job) == api.MULTIKUEUE_CONTROLLER_NAME:
            return False
        names = {c.get("name") for c in wlstatus.check_states(wl)}
        cq_name = self.state.cluster_queue_for(wl)
        cq = self.state.cluster_queues.get(cq_name) if cq_name else None
        if cq is not None:
            spec = cq.get("spec") or {}
            names.update(spec.get("admissionChecks") or ())
            for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ():
                names.add(rule.get("name"))
        for name in names:
            check = self.state.admission_checks.get(name) if name else None
            if check and (check.get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME:
                return True
        return False

    # -- reconcile -------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        namespace = key.partition("/")[0]
        train_job = self.trainjobs.get(key)
        live_uid = train_job["metadata"]["uid"] if train_job is not None else None
        await self._release_orphans(key, live_uid)
        if train_job is None or train_job["metadata"].get("deletionTimestamp"):
            return None
        if not self._namespace_managed(namespace):
            return None
        if managed_by(train_job) not in (api.TRAIN_JOB_MANAGED_BY_DEFAULT, api.MULTIKUEUE_CONTROLLER_NAME):
            return None  # run by another controller
        owned = self._owned_workloads(train_job)
        queue = self._queue_name(train_job, owned)
        if queue is None:
            return None
        try:
            runtime = self._runtime(train_job)
        except RuntimeMissing as exc:
            # Upstream fails the reconcile; a runtime created later enqueues the TrainJob again.
            log.info("cannot derive the TrainJob's PodSets", trainjob=key, error=str(exc))
            return None

        prebuilt = prebuilt_workload_name(train_job)
        if prebuilt:
            wl = await self._prebuilt_workload(train_job, runtime, prebuilt)
        else:
            wl, retry = await self._ensure_one_workload(train_job, runtime, owned)
            if retry:
                return Result(requeue=True)

        # 1. Workload finished: let it go.
        if wl is not None and wlstatus.is_finished(wl):
            if api.FINALIZER_RESOURCE_IN_USE in (wl["metadata"].get("finalizers") or ()):
                await self._remove_finalizer(wl)
            return None
        # 2. Workload being deleted: stop the TrainJob and let the Workload go.
        if wl is not None and wl["metadata"].get("deletionTimestamp"):
            if not await self._stop(train_job, api.MSG_WORKLOAD_DELETED):
                return Result(requeue_after=STOP_RECHECK_SECONDS)
            await self._remove_finalizer(wl)
            return None
        # 3. TrainJob finished: finish the Workload.
        done, succeeded, message = finished(train_job)
        if done:
            if wl is not None:
                await self._finish_workload(
                    wl, api.REASON_SUCCEEDED if succeeded else api.REASON_FAILED, message, train_job
                )
            return None
        if wl is None:
            if prebuilt:
                await self._stop(train_job, api.MSG_MISSING_PREBUILT_WORKLOAD)
            elif not is_active(train_job):
                await self._create_workload(train_job, runtime, queue)
            return None
        # 4. Replicated Jobs that succeeded.
        wl = await self._sync_reclaimable_pods(train_job, runtime, wl)
        # 5. PodsReady.
        if self.config.wait_for_pods_ready is not None:
            wl = await self._sync_pods_ready(train_job, runtime, wl)
        # 6. Evicted: stop, then release the quota once nothing runs.
        evicted = wlstatus.condition(wl, api.WORKLOAD_EVICTED)
        if evicted is not None and evicted.get("status") == api.CONDITION_TRUE:
            stopped = await self._stop(train_job, evicted.get("message", ""))
            if wlstatus.has_quota_reservation(wl) and stopped:
                current = wlstatus.working_copy(wl)
                if wlstatus.clear_reservation_after_eviction(
                    current, self.agent.clock.now(), self.agent.config.features
                ):
                    await self._apply_admission_status(current)
            return None if stopped else Result(requeue_after=STOP_RECHECK_SECONDS)
        # 7. Suspended: start when admitted, else keep the Workload's queue in step.
        if is_suspended(train_job):
            if wlstatus.is_admitted(wl):
                if not self._held_back(train_job, wl):
                    await self._start(train_job, wl)
                return None
            if restored_train_job(train_job) is not None and not is_active(train_job):
                await self._stop(train_job, api.MSG_NOT_ADMITTED)  # a stop that did not finish
            if (wl.get("spec") or {}).get("queueName", "") != queue and not wlstatus.has_quota_reservation(
                wl
            ):
                with contextlib.suppress(NotFound):
                    await self.kube.patch_merge(
                        api.WORKLOAD,
                        wl["metadata"]["name"],
                        {"spec": {"queueName": queue or None}},
                        namespace=namespace,
                    )
            return None
        # 8. Running without admission.
        if not wlstatus.is_admitted(wl):
            if not await self._stop(train_job, api.MSG_NOT_ADMITTED):
                return Result(requeue_after=STOP_RECHECK_SECONDS)
        return None

    # -- Workload lookup, creation and clean-up ------------------------------------------------

    async def _ensure_one_workload(
        self, train_job: Obj, runtime: Obj, owned: list[Obj]
    ) -> tuple[Obj | None, bool]:
        flavors = self._flavors()
        match = next((wl for wl in owned if equivalent(train_job, runtime, wl, flavors)), None)
        others = [wl for wl in owned if wl is not match]
        if match is None and not is_suspended(train_job) and not finished(train_job)[0]:
            message = api.MSG_NO_MATCHING_WORKLOAD if len(others) == 1 else api.MSG_MISSING_WORKLOAD
            await self._stop(train_job, message)
        deleted = 0
        for wl in others:
            meta = wl["metadata"]
            await self._remove_finalizer(wl)
            try:
                await self.kube.delete(api.WORKLOAD, meta["name"], namespace=meta["namespace"])
            except NotFound:
                continue
            deleted += 1
            await self._event(
                train_job,
                api.EVENT_DELETED_WORKLOAD,
                api.deleted_not_matching_workload_message(meta["namespace"], meta["name"]),
            )
        if deleted:
            return match, True
        if match is not None:
            # A changed priority-class label: the Workload takes the new class and value (its pod
            # PriorityClass, when the label has none, comes from the Workload's pod sets as upstream's).
            podsets = (match.get("spec") or {}).get("podSets") or []
            match, ok = await self._follow_priority_label(
                train_job,
                match,
                _labels(train_job).get(api.LABEL_PRIORITY_CLASS) or "",
                lambda: self._priority(train_job, podsets),
            )
            if not ok:
                return None, True
        return match, False

    async def _prebuilt_workload(self, train_job: Obj, runtime: Obj, name: str) -> Obj | None:
        """A Workload created for the TrainJob beforehand (by MultiKueue): adopted, or None."""
        return await self._adopt_prebuilt(
            train_job,
            name,
            self._owner_reference(train_job),
            lambda wl: equivalent(train_job, runtime, wl, self._flavors()),
        )

    def _typed(self, train_job: Obj) -> Obj:
        return {**train_job, "apiVersion": api.TRAIN_JOB.api_version, "kind": TRAIN_JOB_KIND}

    def _owner_reference(self, train_job: Obj) -> Obj:
        return framework.owner_reference(self._typed(train_job))

    def _priority_label(self, train_job: Obj) -> str:
        """The TrainJob's `kueue.x-k8s.io/priority-class`, or the default WorkloadPriorityClass."""
        name = _labels(train_job).get(api.LABEL_PRIORITY_CLASS) or ""
        if not name and self.state.priority_classes.get(api.DEFAULT_NAME) is not None:
            name = api.DEFAULT_NAME
        return name

    def _priority(self, train_job: Obj, podsets: list[Obj]) -> tuple[Obj, str | None]:
        labels = {api.LABEL_PRIORITY_CLASS: self._priority_label(train_job)}
        wpcs = {o["metadata"]["name"]: o for o in self.state.priority_classes.list()}
        pod_priority = next(
            (
                p["template"]["spec"]["priorityClassName"]
                for p in podsets
                if p["template"]["spec"].get("priorityClassName")
            ),
            None,
        )
        return framework.priority_for(labels, wpcs, pod_priority, {})

    async def _create_workload(self, train_job: Obj, runtime: Obj, queue: str) -> None:
        podsets = train_job_podsets(train_job, runtime)
        priority, error = self._priority(train_job, podsets)
        if error:
            await self._event(train_job, api.EVENT_WORKLOAD_PRIORITY_CLASS_NOT_FOUND, error, warning=True)
            return
        body = framework.new_workload(
            self._typed(train_job),
            workload_name(train_job),
            podsets,
            queue,
            priority=priority,
            label_keys_to_copy=self.config.label_keys_to_copy,
        )
        meta = body["metadata"]
        try:
            await self.kube.create(api.WORKLOAD, body, namespace=meta["namespace"])
        except Conflict:
            return
        await self._event(
            train_job,
            api.EVENT_CREATED_WORKLOAD,
            api.created_workload_event_message(meta["namespace"], meta["name"]),
        )

    async def _release_orphans(self, key: str, live_uid: str | None) -> None:
        """Workloads of deleted TrainJobs named `key`: finished (OwnerNotFound), then let go."""
        for wl in self.state.workloads.by_index(INDEX_TRAIN_JOB_OWNER_KEY, key):
            if (controlling_train_job(wl) or {}).get("uid") == live_uid:
                continue
            await self._finish_orphan(wl)

    # -- Workload status -------------------------------------------------------------------------

    async def _sync_reclaimable_pods(self, train_job: Obj, runtime: Obj, wl: Obj) -> Obj:
        desired = reclaimable_pods(train_job, runtime)
        current = [
            {"name": r.get("name"), "count": int(r.get("count") or 0)}
            for r in (wl.get("status") or {}).get("reclaimablePods") or ()
        ]
        if sorted(desired, key=lambda r: r["name"]) == sorted(current, key=lambda r: r["name"] or ""):
            return wl
        return await self._apply_status(wl, {"reclaimablePods": desired}, api.FIELD_MANAGER_RECLAIMABLE_PODS)

    async def _sync_pods_ready(self, train_job: Obj, runtime: Obj, wl: Obj) -> Obj:
        wanted = pods_ready_condition(train_job, runtime, wl)
        previous = wlstatus.condition(wl, api.WORKLOAD_PODS_READY)
        if (
            previous is not None
            and (previous.get("status"), previous.get("reason"), previous.get("message")) == wanted
        ):
            return wl
        current = wlstatus.working_copy(wl)
        wlstatus.set_condition(current, api.WORKLOAD_PODS_READY, *wanted, self.agent.clock.now())
        condition = wlstatus.condition(current, api.WORKLOAD_PODS_READY)
        return await self._apply_status(wl, {"conditions": [condition]}, api.FIELD_MANAGER_PODS_READY)

    # -- starting and stopping the TrainJob ------------------------------------------------------

    async def _start(self, train_job: Obj, wl: Obj) -> None:
        names = [p.get("name", "") for p in (wl.get("spec") or {}).get("podSets") or ()]
        try:
            infos = framework.podset_infos(wl, self._flavors())
            started = started_train_job(train_job, names, infos)
        except framework.PodSetInfoConflict as exc:
            current = wlstatus.working_copy(wl)
            wlstatus.set_condition(
                current,
                api.WORKLOAD_FINISHED,
                api.CONDITION_TRUE,
                api.REASON_FAILED_TO_START,
                str(exc),
                self.agent.clock.now(),
            )
            await self._apply_admission_status(current)
            return
        if started is None:
            return
        try:
            await self.kube.replace(api.TRAIN_JOB, started)
        except (Conflict, NotFound):
            return  # the TrainJob's next event brings us back
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        await self._event(train_job, api.EVENT_STARTED, api.started_event_message(cq))

    async def _stop(self, train_job: Obj, message: str) -> bool:
        """Suspend, then, once no Job of it is active, remove the podset info from the Kueue runtime
        patch. True when both are done."""
        suspended = suspended_train_job(train_job)
        if suspended is not None:
            with contextlib.suppress(NotFound):
                train_job = await self.kube.replace(api.TRAIN_JOB, suspended)  # Conflict: retried
            await self._event(train_job, api.EVENT_STOPPED, message)
        if await self._still_active(train_job):
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

    async def _still_active(self, train_job: Obj) -> bool:
        if is_active(train_job):
            return True
        meta = train_job["metadata"]
        try:
            fresh = await self.kube.get(api.TRAIN_JOB, meta["name"], namespace=meta["namespace"])
        except NotFound:
            return False
        return is_active(fresh)

    async def _event(self, train_job: Obj, reason: str, note: str, warning: bool = False) -> None:
        if self.recorder is None:
            return
        regarding = self._typed(train_job)
        if warning:
            await self.recorder.warning(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
        else:
            await self.recorder.normal(regarding, reason, api.EVENT_ACTION_RECONCILE, note)
