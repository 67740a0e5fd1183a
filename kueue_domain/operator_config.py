"""Operator-style configuration: the Red Hat build of Kueue's `Kueue` object (`kueue.openshift.io/v1`,
cluster-scoped, named `cluster`) instead of, or on top of, a Kueue Configuration file.

Both processes accept it from a file (`--kueue-cr PATH`) or from the cluster they run against
(`--kueue-cr-from-cluster`). The object is checked as strictly as a Configuration file (unknown
fields and bad values are refused with the field's path), then mapped onto the Configuration
fields the Red Hat operator derives from it, with the operator's defaults:

    spec.config.integrations.frameworks          -> integrations.frameworks (BatchJob -> batch/job, ...)
    spec.config.integrations.externalFrameworks  -> integrations.externalFrameworks (resource.version.group)
    spec.config.integrations.labelKeysToCopy     -> integrations.labelKeysToCopy
    spec.config.workloadManagement.labelPolicy   -> manageJobsWithoutQueueName (None: true)
    spec.config.gangScheduling                   -> waitForPodsReady.enable / .blockAdmission
    spec.config.preemption.preemptionPolicy      -> fairSharing.enable (FairSharing: true)
    (always)                                     -> managedJobsNamespaceSelector
                                                    (matchLabels kueue.openshift.io/managed=true)

Every other Configuration field keeps its default, or comes from `--config` when both are given.
The object is then watched (a file is polled, the cluster object is watched); when the Configuration
it maps to changes, the process stops cleanly and executes itself again with the same arguments.
docs/operator-config.md describes all of it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import difflib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
import yaml

from kube_runtime.client import KubeClient, NotFound
from kube_runtime.informer import Informer
from kueue_domain import api
from kueue_domain.config import (
    ANY,
    KNOWN_FRAMEWORKS,
    ConfigError,
    Configuration,
    _check,
    _List,
    parse_config,
)

log = structlog.get_logger("operator_config")

GROUP = "kueue.openshift.io"
API_VERSION = f"{GROUP}/v1"
KIND = "Kueue"
NAME = "cluster"
KUEUE = api.Resource(GROUP, "v1", "kueues", KIND, namespaced=False)
# The Red Hat build's namespace opt-in: only namespaces with this label set to "true" are managed.
MANAGED_NAMESPACE_LABEL = "kueue.openshift.io/managed"
DEFAULT_POLL_INTERVAL = 2.0
# What amain() returns when the process must execute itself again (never an exit status).
RESTART = -1

# The operator's framework names (its KueueIntegration enum) and the Kueue names they stand for.
FRAMEWORKS: dict[str, str] = {
    "BatchJob": "batch/job",
    "RayJob": "ray.io/rayjob",
    "RayCluster": "ray.io/raycluster",
    "RayService": "ray.io/rayservice",
    "JobSet": "jobset.x-k8s.io/jobset",
    "MPIJob": "kubeflow.org/mpijob",
    "PaddleJob": "kubeflow.org/paddlejob",
    "PyTorchJob": "kubeflow.org/pytorchjob",
    "TFJob": "kubeflow.org/tfjob",
    "TrainJob": "trainer.kubeflow.org/trainjob",
    "XGBoostJob": "kubeflow.org/xgboostjob",
    "JaxJob": "kubeflow.org/jaxjob",
    "AppWrapper": "workload.codeflare.dev/appwrapper",
    "Pod": "pod",
    "Deployment": "deployment",
    "StatefulSet": "statefulset",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/leaderworkerset",
    "SparkApplication": "sparkoperator.k8s.io/sparkapplication",
}
assert set(FRAMEWORKS.values()) <= KNOWN_FRAMEWORKS
DEFAULT_FRAMEWORKS = ("BatchJob",)  # the manual's default

LABEL_POLICIES = ("QueueName", "None")
GANG_POLICIES = ("ByWorkload", "None")
GANG_ADMISSIONS = ("Parallel", "Sequential")
PREEMPTION_POLICIES = ("Classical", "FairSharing")
MANAGEMENT_STATES = ("Managed", "Unmanaged", "Force", "Removed")
LOG_LEVELS = ("Normal", "Debug", "Trace", "TraceAll")

SCHEMA: dict[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "metadata": ANY,
    "status": ANY,
    "spec": {
        # operator.openshift.io/v1 OperatorSpec, inlined by the Kueue type.
        "managementState": str,
        "logLevel": str,
        "operatorLogLevel": str,
        "unsupportedConfigOverrides": ANY,
        "observedConfig": ANY,
        "config": {
            "integrations": {
                "frameworks": _List(str),
                "externalFrameworks": _List({"group": str, "resource": str, "version": str}),
                "labelKeysToCopy": _List({"key": str}),
            },
            "workloadManagement": {"labelPolicy": str},
            "gangScheduling": {"policy": str, "byWorkload": {"admission": str}},
            "preemption": {"preemptionPolicy": str},
        },
    },
}

# The Configuration fields the Kueue object decides, and the field of the object each comes from.
OWNED_FIELDS: dict[tuple[str, ...], str] = {
    ("integrations", "frameworks"): "spec.config.integrations.frameworks",
    ("integrations", "externalFrameworks"): "spec.config.integrations.externalFrameworks",
    ("integrations", "labelKeysToCopy"): "spec.config.integrations.labelKeysToCopy",
    ("manageJobsWithoutQueueName",): "spec.config.workloadManagement.labelPolicy",
    ("managedJobsNamespaceSelector",): f"the namespace opt-in ({MANAGED_NAMESPACE_LABEL}=true)",
    ("waitForPodsReady", "enable"): "spec.config.gangScheduling.policy",
    ("waitForPodsReady", "blockAdmission"): "spec.config.gangScheduling.byWorkload.admission",
    ("fairSharing", "enable"): "spec.config.preemption.preemptionPolicy",
}

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?"
)


@dataclasses.dataclass(frozen=True)
class Mapping:
    """The Configuration fields (v1beta1 shape) a Kueue object maps to, and what to tell the user."""

    fragment: dict[str, Any]
    warnings: tuple[str, ...] = ()


def _drop_nulls(value: Any) -> Any:
    """A null field counts as omitted (Go clients write `null` for empty lists and pointers)."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _one_of(path: str, value: Any, allowed: tuple[str, ...], problems: list[str]) -> str:
    """`value` if it is one of `allowed` or empty (the operator's default); else a problem and ""."""
    if value == "":
        return ""
    if value in allowed:
        return value
    message = f'{path}: "{value}" is not one of {", ".join(allowed)}'
    folded = {a.lower(): a for a in allowed}
    hint = folded.get(str(value).lower()) or next(
        iter(difflib.get_close_matches(str(value), list(allowed), n=1)), None
    )
    problems.append(message + (f' (did you mean "{hint}"?)' if hint else ""))
    return ""


def _frameworks(raw: list[str] | None, problems: list[str]) -> list[str]:
    path = "spec.config.integrations.frameworks"
    if raw is None:
        raw = list(DEFAULT_FRAMEWORKS)
    elif not raw:
        problems.append(f"{path}: must have at least one element")
    elif len(raw) > len(FRAMEWORKS):
        problems.append(f"{path}: must have at most {len(FRAMEWORKS)} elements, got {len(raw)}")
    by_kueue_name = {v: k for k, v in FRAMEWORKS.items()}
    seen: set[str] = set()
    names = []
    for i, name in enumerate(raw):
        if name in seen:
            problems.append(f'{path}[{i}]: duplicate "{name}": each item in frameworks must be unique')
            continue
        seen.add(name)
        if name in FRAMEWORKS:
            names.append(FRAMEWORKS[name])
            continue
        message = f'{path}[{i}]: "{name}" is not one of {", ".join(FRAMEWORKS)}'
        hint = by_kueue_name.get(name) or {k.lower(): k for k in FRAMEWORKS}.get(name.lower())
        hint = hint or next(iter(difflib.get_close_matches(name, list(FRAMEWORKS), n=1)), None)
        problems.append(message + (f' (did you mean "{hint}"?)' if hint else ""))
    return names


def _external_frameworks(raw: list[dict[str, str]], problems: list[str]) -> list[str]:
    path = "spec.config.integrations.externalFrameworks"
    if len(raw) > 32:
        problems.append(f"{path}: must have at most 32 elements, got {len(raw)}")
    groups: set[str] = set()
    out = []
    for i, item in enumerate(raw):
        rules = (("group", _DNS_SUBDOMAIN, 253), ("resource", _DNS_LABEL, 63), ("version", _DNS_LABEL, 63))
        ok = True
        for key, pattern, limit in rules:
            value = item.get(key)
            if not value:
                problems.append(f"{path}[{i}].{key}: required")
                ok = False
            elif len(value) > limit or not pattern.fullmatch(value):
                problems.append(f"{path}[{i}].{key}: {value!r} is not a valid {key} name")
                ok = False
        if not ok:
            continue
        if item["group"] in groups:
            problems.append(f'{path}[{i}].group: duplicate "{item["group"]}"')
        groups.add(item["group"])
        out.append(f"{item['resource']}.{item['version']}.{item['group']}")
    return out


def _label_keys(raw: list[dict[str, str]], problems: list[str]) -> list[str]:
    path = "spec.config.integrations.labelKeysToCopy"
    if len(raw) > 64:
        problems.append(f"{path}: must have at most 64 elements, got {len(raw)}")
    keys: list[str] = []
    for i, item in enumerate(raw):
        key = item.get("key")
        if not key:
            problems.append(f"{path}[{i}].key: required")
        elif len(key) > 317 or not _LABEL_KEY.fullmatch(key):
            problems.append(f"{path}[{i}].key: {key!r} is not a valid label key")
        elif key in keys:
            problems.append(f'{path}[{i}].key: duplicate "{key}"')
        else:
            keys.append(key)
    return keys


def _header_problems(data: dict[str, Any]) -> list[str]:
    """What is wrong with the object's apiVersion, kind and metadata.name."""
    problems: list[str] = []
    if data.get("apiVersion", API_VERSION) != API_VERSION:
        problems.append(f'apiVersion: must be "{API_VERSION}", got {data.get("apiVersion")!r}')
    if data.get("kind", KIND) != KIND:
        problems.append(f'kind: must be "{KIND}", got {data.get("kind")!r}')
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        problems.append("metadata: must be an object")
    elif metadata.get("name", NAME) != NAME:
        problems.append(
            f'metadata.name: must be "{NAME}" (Kueue is a singleton), got {metadata.get("name")!r}'
        )
    return problems


def _gang_scheduling(config: dict[str, Any], problems: list[str]) -> tuple[str, str]:
    """`spec.config.gangScheduling`: its policy and, under ByWorkload, its admission ("" unset)."""
    gang = config.get("gangScheduling") or {}
    raw_policy = gang.get("policy", "")
    gang_policy = _one_of("spec.config.gangScheduling.policy", raw_policy, GANG_POLICIES, problems)
    by_workload = gang.get("byWorkload")
    admission = ""
    if gang_policy == "ByWorkload":
        if by_workload is None:
            problems.append("spec.config.gangScheduling.byWorkload: required when policy is ByWorkload")
        else:
            admission = _one_of(
                "spec.config.gangScheduling.byWorkload.admission",
                by_workload.get("admission", ""),
                GANG_ADMISSIONS,
                problems,
            )
    elif by_workload is not None and raw_policy in ("", *GANG_POLICIES):
        problems.append("spec.config.gangScheduling.byWorkload: forbidden unless policy is ByWorkload")
    return gang_policy, admission


def _fragment(
    frameworks: list[str],
    external: list[str],
    label_keys: list[str],
    label_policy: str,
    gang_policy: str,
    admission: str,
    preemption: str,
) -> dict[str, Any]:
    """The Configuration fields the checked Kueue object maps to."""
    # The operator's mapping: "" means its default (QueueName, no gang scheduling, Parallel, Classical).
    if gang_policy == "ByWorkload":
        wait_for_pods_ready = {"enable": True, "blockAdmission": admission == "Sequential"}
    else:
        wait_for_pods_ready = {"enable": False}
    fragment = {
        "integrations": {
            "frameworks": frameworks,
            "externalFrameworks": external,
            "labelKeysToCopy": label_keys,
        },
        "manageJobsWithoutQueueName": label_policy == "None",
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}},
        "waitForPodsReady": wait_for_pods_ready,
        "fairSharing": {"enable": preemption == "FairSharing"},
    }
    return fragment


def map_kueue(data: Any, source: str = "<kueue>") -> Mapping:
    """Check a Kueue object (a dict) and map it; ConfigError names every field that is wrong."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"must hold one YAML object (a {API_VERSION} {KIND})"])
    data = _drop_nulls(data)
    problems = _header_problems(data)
    shape: list[str] = []
    _check(data, SCHEMA, "", shape)
    if shape:  # what follows reads the fields as the types they must have
        raise ConfigError(source, problems + shape)

    warnings: list[str] = []
    spec = data.get("spec") or {}
    state = _one_of("spec.managementState", spec.get("managementState", ""), MANAGEMENT_STATES, problems)
    if state in ("Unmanaged", "Removed"):
        warnings.append(
            f'spec.managementState: "{state}" has no effect here: the process runs with the mapped '
            "configuration"
        )
    for key in ("logLevel", "operatorLogLevel"):
        _one_of(f"spec.{key}", spec.get(key, ""), LOG_LEVELS, problems)
    config = spec.get("config") or {}

    integrations = config.get("integrations") or {}
    frameworks = _frameworks(integrations.get("frameworks"), problems)
    external = _external_frameworks(integrations.get("externalFrameworks") or [], problems)
    label_keys = _label_keys(integrations.get("labelKeysToCopy") or [], problems)

    label_policy = _one_of(
        "spec.config.workloadManagement.labelPolicy",
        (config.get("workloadManagement") or {}).get("labelPolicy", ""),
        LABEL_POLICIES,
        problems,
    )

    gang_policy, admission = _gang_scheduling(config, problems)

    preemption = _one_of(
        "spec.config.preemption.preemptionPolicy",
        (config.get("preemption") or {}).get("preemptionPolicy", ""),
        PREEMPTION_POLICIES,
        problems,
    )
    if problems:
        raise ConfigError(source, problems)

    fragment = _fragment(frameworks, external, label_keys, label_policy, gang_policy, admission, preemption)
    return Mapping(fragment, tuple(warnings))


def _get(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def compose(base: Any, mapping: Mapping, base_source: str) -> dict[str, Any]:
    """The Configuration (a dict) from a `--config` file's data and a mapped Kueue object. A field the
    Kueue object decides may not be set in the file as well: which one wins would be a guess."""
    base = copy.deepcopy(base) if base is not None else {}
    if not isinstance(base, dict):
        raise ConfigError(base_source, ["the file must hold one YAML object (a Configuration)"])
    problems = [
        f"{'.'.join(path)}: decided by the Kueue object ({origin}); remove it from this file"
        for path, origin in OWNED_FIELDS.items()
        if _get(base, path) is not None
    ]
    if problems:
        raise ConfigError(base_source, problems)
    for path in OWNED_FIELDS:
        value = _get(mapping.fragment, path)
        if value is None:
            continue
        target = base
        for key in path[:-1]:
            target = target.setdefault(key, {})
            if not isinstance(target, dict):  # the role's parser reports the bad type
                break
        else:
            target[path[-1]] = copy.deepcopy(value)
    return base


def _flatten(fragment: dict[str, Any]) -> dict[str, Any]:
    return {".".join(path): _get(fragment, path) for path in OWNED_FIELDS}


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The Configuration fields whose mapped value differs, for the restart's log line."""
    before, after = _flatten(old), _flatten(new)
    return [key for key in after if before.get(key) != after.get(key)]


# ------------------------------------------------------------------------------------------
# Where the object comes from


def _read_yaml(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(path, [f"cannot read the file: {e.strerror}"]) from e
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(path, [f"not valid YAML ({what}): {e}"]) from e


class FileSource:
    """`--kueue-cr PATH`: read the file; while running, poll its content every `interval` seconds."""

    def __init__(self, path: str, interval: float = DEFAULT_POLL_INTERVAL) -> None:
        self.path = path
        self.interval = interval
        self.description = path
        self._text: str | None = None

    async def read(self, kube: KubeClient | None = None) -> Any:
        try:
            self._text = await asyncio.to_thread(Path(self.path).read_text)
        except OSError as e:
            raise ConfigError(self.path, [f"cannot read the file: {e.strerror}"]) from e
        try:
            return yaml.safe_load(self._text)
        except yaml.YAMLError as e:
            raise ConfigError(self.path, [f"not valid YAML: {e}"]) from e

    def _read_text(self) -> str | None:
        try:
            return Path(self.path).read_text()
        except OSError:
            return None

    async def changes(self, kube: KubeClient | None = None) -> AsyncIterator[Any]:
        """Each new content of the file, parsed; unreadable or malformed content is logged and skipped."""
        unreadable = False
        while True:
            await asyncio.sleep(self.interval)
            text = await asyncio.to_thread(self._read_text)
            if text is None:
                if not unreadable:
                    log.warning("cannot read the Kueue object's file; keeping the running configuration",
                                path=self.path)  # fmt: skip
                unreadable = True
                continue
            unreadable = False
            if text == self._text:
                continue
            self._text = text
            try:
                obj = yaml.safe_load(text)
            except yaml.YAMLError as e:
                log.error("the Kueue object's file is not valid YAML; keeping the running configuration",
                          path=self.path, error=str(e))  # fmt: skip
                continue
            yield obj


class ClusterSource:
    """`--kueue-cr-from-cluster`: the cluster-scoped Kueue object named `cluster`, watched."""

    description = f"{API_VERSION} {KIND} {NAME}"

    async def read(self, kube: KubeClient | None = None) -> Any:
        assert kube is not None
        try:
            return await kube.get(KUEUE, NAME)
        except NotFound as e:
            raise ConfigError(
                self.description,
                [
                    f"not found: create the {KIND} object named {NAME!r} (the CRD {KUEUE.plural}.{GROUP} "
                    "must be installed), or run with --config"
                ],
            ) from e

    async def changes(self, kube: KubeClient | None = None) -> AsyncIterator[Any]:
        """The object each time the watch sees it added or changed; a deletion is logged."""
        assert kube is not None
        seen: asyncio.Queue[Any] = asyncio.Queue()

        def deleted(_obj: Any) -> None:
            log.warning(f"the {KIND} object {NAME!r} was deleted; keeping the running configuration")

        informer = Informer(kube, KUEUE, field_selector=f"metadata.name={NAME}", name="kueue-cr")
        informer.add_handler(
            on_add=seen.put_nowait, on_update=lambda _old, new: seen.put_nowait(new), on_delete=deleted
        )
        informer.start()
        try:
            while True:
                yield await seen.get()
        finally:
            await informer.stop()


# ------------------------------------------------------------------------------------------
# The process side: loading, watching, restarting (the flags: kueue_domain/bootstrap.py)


class OperatorConfig:
    """A process's configuration from a Kueue object: loaded once, then watched for changes."""

    def __init__(
        self,
        source: FileSource | ClusterSource,
        base_path: str | None = None,
        parse: Callable[[Any, str], Configuration] = parse_config,
    ) -> None:
        self.source = source
        self.base_path = base_path
        self.parse = parse
        self.base: Any = None
        self.mapping: Mapping | None = None

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, parse: Callable[[Any, str], Configuration] = parse_config
    ) -> OperatorConfig | None:
        """None unless --kueue-cr or --kueue-cr-from-cluster was given."""
        if args.kueue_cr:
            return cls(FileSource(args.kueue_cr, args.kueue_cr_poll_interval), args.config, parse)
        if args.kueue_cr_from_cluster:
            return cls(ClusterSource(), args.config, parse)
        return None

    @property
    def _base_source(self) -> str:
        return self.base_path or self.source.description

    def preliminary(self) -> Configuration:
        """The `--config` file alone (for the client settings needed to read the cluster object),
        already refused if it sets a field that the Kueue object decides."""
        self.base = _read_yaml(self.base_path, "a Configuration") if self.base_path else {}
        compose(self.base, Mapping({}), self._base_source)
        return self.parse(self.base, self._base_source)

    def build(self, obj: Any) -> tuple[Mapping, Configuration]:
        """Map `obj` and parse the resulting Configuration; ConfigError if either is wrong."""
        mapping = map_kueue(obj, self.source.description)
        config = self.parse(compose(self.base, mapping, self._base_source), self._base_source)
        # The agent's own warning about frameworks it does not implement, in the object's terms.
        names = {v: k for k, v in FRAMEWORKS.items()}
        warnings = []
        for warning in config.warnings:
            match = re.match(r'integrations\.frameworks: "([^"]+)" (.*)', warning)
            if match and match.group(1) in names:
                warning = (
                    f"spec.config.integrations.frameworks: {names[match.group(1)]} "
                    f'("{match.group(1)}") {match.group(2)}'
                )
            warnings.append(warning)
        return mapping, dataclasses.replace(config, warnings=(*mapping.warnings, *warnings))

    async def load(self, kube: KubeClient | None = None) -> Configuration:
        if self.base is None:
            self.preliminary()
        self.mapping, config = self.build(await self.source.read(kube))
        log.info(
            f"configuration from the {KIND} object",
            source=self.source.description,
            frameworks=self.mapping.fragment["integrations"]["frameworks"],
        )
        return config

    async def wait_for_change(self, kube: KubeClient | None = None) -> list[str]:
        """Return (the changed Configuration fields) once the object maps to a different, valid
        Configuration; an invalid object is logged and the running configuration kept."""
        assert self.mapping is not None, "load() first"
        # Closed on return or cancellation: the cluster source's watch stops with it.
        async with contextlib.aclosing(self.source.changes(kube)) as changes:
            async for obj in changes:
                try:
                    mapping, _ = self.build(obj)
                except ConfigError as exc:
                    log.error(
                        f"the changed {KIND} object is invalid; keeping the running configuration",
                        source=exc.source,
                        problems=exc.problems,
                    )
                    continue
                changed = changed_fields(self.mapping.fragment, mapping.fragment)
                if changed:
                    return changed
                log.debug(
                    f"the {KIND} object changed; its Configuration did not", source=self.source.description
                )
        return []  # pragma: no cover - the sources never end

    async def run_until_changed(self, run: Callable[[], Awaitable[None]], kube: KubeClient | None) -> bool:
        """Await `run()`; True once it was stopped cleanly because the Configuration changed."""
        main = asyncio.ensure_future(run())
        watch = asyncio.ensure_future(self.wait_for_change(kube))
        try:
            await asyncio.wait({main, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch.done() and not main.done():
                if watch.cancelled() or watch.exception() is not None:
                    log.error("watching the Kueue object failed; changes are not picked up",
                              error=None if watch.cancelled() else repr(watch.exception()))  # fmt: skip
                    await main
                    return False
                log.info("configuration changed; restarting", changed=watch.result())
                await _cancel(main)
                return True
            await main
            return False
        finally:
            await _cancel(main, watch)


async def _cancel(*tasks: asyncio.Future[Any]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
