"""An AppWrapper's PodSets as its own project derives them (github.com/project-codeflare/appwrapper
pkg/utils, which upstream Kueue's integration calls): pure functions over the object.

An AppWrapper wraps components, each one a whole Kubernetes object (`spec.components[].template`).
A component's pod templates are named by `podSets[]` (a `path` into the component, starting at
`template`, like `template.spec.template`, and `replicas`, 1 when unset); a component of a known kind
that declares none has them inferred: batch/v1 Job, JobSet, PyTorchJob (Master, Worker), RayCluster
and RayJob (head, worker groups), Pod, Deployment and StatefulSet. Once the AppWrapper controller has
seen the AppWrapper, the PodSets it settled on are in `status.componentStatus[].podSets` and are
used from there.

Each pod template becomes a Workload PodSet named `<appwrapper name>-<i>` (i counts the pod
templates of all components in order), its count the replicas, its template the part of the pod
template that Kueue reads, with the API server's defaults filled in (GetPodTemplateSpec).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from kueue_domain.resources import QuantityError, format_quantity, parse_quantity, quantity_format

Obj = dict[str, Any]
TEMPLATE = "template"  # the first element of every path: the component's object


class PodSetError(ValueError):
    """The AppWrapper's PodSets cannot be derived: the message says which component and why."""


# ------------------------------------------------------------------------------------------------
# Paths into a component


def value_at_path(obj: Obj, path: str) -> Any:
    """The value at `path` (`template.spec.replicatedJobs[0].template`) inside the component `obj`,
    as getValueAtPath reads it; PodSetError when a step is missing or of the wrong type."""
    if not path.startswith(TEMPLATE):
        raise PodSetError("first element of the path must be 'template'")
    processed, remaining, cursor = TEMPLATE, path[len(TEMPLATE) :], obj
    while remaining:
        if remaining.startswith("["):
            end = remaining.find("]")
            if end < 0:
                raise PodSetError(f"at path position '{processed}' invalid array index '{remaining}'")
            try:
                index = int(remaining[1:end])
            except ValueError:
                raise PodSetError(
                    f"at path position '{processed}' invalid index expression '{remaining[1:end]}'"
                ) from None
            if not isinstance(cursor, list):
                raise PodSetError(f"at path position '{processed}' found non-array value")
            if index < 0 or index >= len(cursor):
                raise PodSetError(f"at path position '{processed}' out of bounds index '{index}'")
            cursor = cursor[index]
            processed += remaining[:end]
            remaining = remaining[end + 1 :]
        elif remaining.startswith("."):
            remaining = remaining[1:]
            processed += "."
            key = re.match(r"[^.\[]*", remaining).group(0)  # type: ignore[union-attr]
            if not isinstance(cursor, dict):
                raise PodSetError(f"at path position '{processed}' non-map value")
            if key not in cursor:
                raise PodSetError(f"at path position '{processed}' missing field '{key}'")
            cursor = cursor[key]
            remaining = remaining[len(key) :]
            processed += key
        else:
            raise PodSetError(f"at path position '{processed}' invalid path element '{remaining}'")
    return cursor


def raw_template(obj: Obj, path: str) -> Obj:
    """The pod template (a map) at `path`."""
    value = value_at_path(obj, path)
    if not isinstance(value, dict):
        raise PodSetError(f"at path position '{path}' non-map value")
    return value


def _int_at(obj: Obj, path: str) -> int | None:
    """GetReplicas: the integer at `path`, None when missing or not an integer."""
    try:
        value = value_at_path(obj, path)
    except PodSetError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _replicas_at(obj: Obj, path: str) -> int:
    """inferReplicas: 1 without a path or a value there; PodSetError for a value not an integer."""
    if not path:
        return 1
    parent_path, _, field = path.rpartition(".")
    parent = raw_template(obj, parent_path) if parent_path else obj
    value = parent.get(field)
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool):
        raise PodSetError(f"at path position '{path}' non-int value {value}")
    return value


# ------------------------------------------------------------------------------------------------
# Inferred PodSets of known kinds

JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
PYTORCH_REPLICA_INDEX = "training.kubeflow.org/replica-index"
POD_INDEX_ANNOTATION = "workload.codeflare.dev.appwrapper/tas-pod-index-label"
SUBGROUP_INDEX_ANNOTATION = "workload.codeflare.dev.appwrapper/tas-sub-group-index-label"
SUBGROUP_COUNT_ANNOTATION = "workload.codeflare.dev.appwrapper/tas-sub-group-count"
# Kinds whose one pod template sits at a fixed path: (template path, replicas path).
SIMPLE_KINDS = {
    ("v1", "Pod"): ("template", ""),
    ("apps/v1", "Deployment"): ("template.spec.template", "template.spec.replicas"),
    ("apps/v1", "StatefulSet"): ("template.spec.template", "template.spec.replicas"),
}


def _job_pods(obj: Obj, prefix: str) -> int:
    """min(parallelism, completions) of the Job spec at `prefix`, parallelism 1 when unset."""
    count = _int_at(obj, f"{prefix}.parallelism")
    count = 1 if count is None else count
    completions = _int_at(obj, f"{prefix}.completions")
    return completions if completions is not None and completions < count else count


def _has_path(obj: Obj, path: str) -> bool:
    try:
        value_at_path(obj, path)
    except PodSetError:
        return False
    return True


def _list_items(obj: Obj, path: str) -> list[str]:
    """`<path>[i].` for each item of the list at `path` that has a `template` (none when absent)."""
    try:
        items = value_at_path(obj, path)
    except PodSetError:
        return []
    prefixes = [f"{path}[{i}]." for i in range(len(items) if isinstance(items, list) else 0)]
    return [p for p in prefixes if _has_path(obj, p + TEMPLATE)]


def _ray_podsets(obj: Obj, prefix: str) -> list[Obj]:
    podsets: list[Obj] = [{"replicas": 1, "path": f"{prefix}headGroupSpec.template"}]
    for group in _list_items(obj, f"{prefix}workerGroupSpecs"):
        podsets.append({"replicas": _replicas_at(obj, group + "replicas"), "path": group + TEMPLATE})
    return podsets


def _job_set_podset(obj: Obj, prefix: str) -> Obj:
    replicas = _int_at(obj, prefix + "replicas")
    replicas = 1 if replicas is None else replicas
    annotations = {
        POD_INDEX_ANNOTATION: JOB_COMPLETION_INDEX,
        SUBGROUP_INDEX_ANNOTATION: JOBSET_JOB_INDEX,
        SUBGROUP_COUNT_ANNOTATION: str(replicas),
    }
    replicas *= _job_pods(obj, prefix + "template.spec")
    return {"replicas": replicas, "path": prefix + "template.spec.template", "annotations": annotations}


def _known_kind_podsets(obj: Obj) -> list[Obj]:
    kind = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if kind == ("batch/v1", "Job"):
        annotations = {POD_INDEX_ANNOTATION: JOB_COMPLETION_INDEX}
        replicas = _job_pods(obj, "template.spec")
        return [{"replicas": replicas, "path": "template.spec.template", "annotations": annotations}]
    if kind == ("jobset.x-k8s.io/v1alpha2", "JobSet"):
        return [_job_set_podset(obj, p) for p in _list_items(obj, "template.spec.replicatedJobs")]
    if kind == ("kubeflow.org/v1", "PyTorchJob"):
        prefixes = [f"template.spec.pytorchReplicaSpecs.{t}." for t in ("Master", "Worker")]
        annotations = {POD_INDEX_ANNOTATION: PYTORCH_REPLICA_INDEX}
        return [
            {"replicas": _replicas_at(obj, p + "replicas"), "path": p + TEMPLATE, "annotations": annotations}
            for p in prefixes
            if _has_path(obj, p + TEMPLATE)
        ]
    if kind == ("ray.io/v1", "RayCluster"):
        return _ray_podsets(obj, "template.spec.")
    if kind == ("ray.io/v1", "RayJob"):
        return _ray_podsets(obj, "template.spec.rayClusterSpec.")
    if kind in SIMPLE_KINDS and _has_path(obj, SIMPLE_KINDS[kind][0]):
        path, replicas_path = SIMPLE_KINDS[kind]
        return [{"replicas": _replicas_at(obj, replicas_path), "path": path}]
    return []


def infer_podsets(obj: Obj) -> list[Obj]:
    """InferPodSets: the PodSets of a component of a known kind (none for other kinds); PodSetError
    when one of them is not a pod template."""
    podsets = _known_kind_podsets(obj)
    for podset in podsets:
        try:
            kueue_pod_template(obj, podset["path"])
        except PodSetError as exc:
            raise PodSetError(f"{podset['path']} does not refer to a v1.PodSpecTemplate: {exc}") from None
    return podsets


# ------------------------------------------------------------------------------------------------
# The pod template as Kueue reads it


def _round_up_to_milli(resources: Any) -> Any:
    """A resource list with every quantity rounded up to a thousandth (RoundUp(-3))."""
    if not isinstance(resources, dict):
        return resources
    result = {}
    for name, value in resources.items():
        try:
            quantity = parse_quantity(value)
        except QuantityError:
            result[name] = value
            continue
        rounded = Fraction(math.ceil(quantity * 1000), 1000)
        exact = rounded == quantity and isinstance(value, str)
        result[name] = value if exact else format_quantity(rounded, quantity_format(str(value)))
    return result


def _image_pull_policy(image: str) -> str:
    """Always for an image without a tag or digest or tagged `latest`, else IfNotPresent."""
    name = image.rpartition("/")[2]
    if "@" in name:
        return "IfNotPresent"
    tag = name.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _containers(containers: list[Obj]) -> list[Obj]:
    result = []
    for c in containers:
        out: Obj = {"name": c.get("name", "")}
        for key in ("image", "command", "args"):
            if c.get(key):
                out[key] = c[key]
        resources = c.get("resources") or {}
        kept = {k: _round_up_to_milli(resources[k]) for k in ("limits", "requests") if resources.get(k)}
        out["resources"] = kept
        out["terminationMessagePath"] = c.get("terminationMessagePath") or "/dev/termination-log"
        out["terminationMessagePolicy"] = c.get("terminationMessagePolicy") or "File"
        out["imagePullPolicy"] = c.get("imagePullPolicy") or _image_pull_policy(c.get("image") or "")
        if c.get("securityContext") is not None:
            out["securityContext"] = c["securityContext"]
        result.append(out)
    return result


def kueue_pod_template(obj: Obj, path: str) -> Obj:
    """GetPodTemplateSpec: the pod template at `path` reduced to what Kueue reads (labels and
    annotations; containers' names, images, commands, args, resources; scheduling fields), with the
    API server's defaults (restartPolicy Always, dnsPolicy ClusterFirst, schedulerName
    default-scheduler, preemptionPolicy PreemptLowerPriority, ...)."""
    template = raw_template(obj, path)
    spec = template.get("spec")
    if not isinstance(spec, dict):
        raise PodSetError(f"content at {path} does not contain a spec")
    meta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    result_meta: Obj = {}
    for key in ("labels", "annotations"):
        values = meta.get(key)
        if isinstance(values, dict) and values:
            result_meta[key] = {k: v for k, v in values.items() if isinstance(v, str)}
    out: Obj = {}
    if spec.get("initContainers"):
        out["initContainers"] = _containers(spec["initContainers"])
    out["containers"] = _containers(spec.get("containers") or [])
    out["restartPolicy"] = spec.get("restartPolicy") or "Always"
    if spec.get("terminationGracePeriodSeconds") is None:
        out["terminationGracePeriodSeconds"] = 30
    out["dnsPolicy"] = spec.get("dnsPolicy") or "ClusterFirst"
    out["securityContext"] = spec.get("securityContext") or {}
    out["schedulerName"] = spec.get("schedulerName") or "default-scheduler"
    out["preemptionPolicy"] = spec.get("preemptionPolicy") or "PreemptLowerPriority"
    for key in ("nodeSelector", "nodeName", "affinity", "tolerations", "priorityClassName"):
        if spec.get(key):
            out[key] = spec[key]
    if spec.get("overhead"):
        out["overhead"] = _round_up_to_milli(spec["overhead"])
    if spec.get("topologySpreadConstraints"):
        out["topologySpreadConstraints"] = spec["topologySpreadConstraints"]
    result: Obj = {"spec": out}
    if result_meta:
        result["metadata"] = result_meta
    return result


# ------------------------------------------------------------------------------------------------
# The AppWrapper's PodSets


def components(aw: Obj) -> list[Obj]:
    return list((aw.get("spec") or {}).get("components") or ())


def component_object(component: Obj, index: int) -> Obj:
    template = component.get("template")
    if not isinstance(template, dict):
        raise PodSetError(f"spec.components[{index}].template is not an object")
    return template


def component_podsets(aw: Obj) -> list[list[Obj]]:
    """EnsureComponentStatusInitialized: per component, its PodSets (path, replicas, annotations):
    those of `status.componentStatus` once it has one entry per component, else the declared ones,
    else those inferred for its kind."""
    comps = components(aw)
    statuses = (aw.get("status") or {}).get("componentStatus") or []
    if len(statuses) == len(comps):
        return [list(s.get("podSets") or ()) for s in statuses]
    result = []
    for i, component in enumerate(comps):
        declared = list(component.get("podSets") or ())
        if declared:
            result.append(declared)
            continue
        try:
            result.append(infer_podsets(component_object(component, i)))
        except PodSetError as exc:
            raise PodSetError(f"spec.components[{i}]: error inferring PodSets: {exc}") from None
    return result


def replicas(podset: Obj) -> int:
    value = podset.get("replicas")
    return 1 if value is None else int(value)


def appwrapper_podsets(aw: Obj) -> list[Obj]:
    """GetComponentPodSpecs and PodSets: one Workload PodSet per pod template of every component,
    named `<name>-<i>` (a pod template that cannot be read is left out, as upstream leaves it)."""
    name = aw["metadata"]["name"]
    result: list[Obj] = []
    for i, podsets in enumerate(component_podsets(aw)):
        if not podsets:
            continue
        obj = component_object(components(aw)[i], i)
        for podset in podsets:
            try:
                template = kueue_pod_template(obj, podset.get("path", ""))
            except PodSetError:
                continue
            result.append({"name": f"{name}-{len(result)}", "count": replicas(podset), "template": template})
    return result


def podset_count(aw: Obj) -> int:
    """How many PodSets the AppWrapper's components declare (status first), readable or not."""
    return sum(len(p) for p in component_podsets(aw))
