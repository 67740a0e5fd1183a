"""Per-PodSet request computation ("quota computation").

Pipeline for one pod template: LimitRange defaults -> limits as requests -> effective pod request
(max of regular+sidecar containers and the init-container peaks, plus overhead; pod-level requests
win) -> drop excluded prefixes -> transformations -> engine units. PodSet totals multiply by the
effective count (count - reclaimablePods, never below 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kueue_domain import api
from kueue_domain import resources as res
from kueue_domain.resources import RequestConfig

QuantityMap = dict[str, Fraction]


@dataclass(frozen=True)
class LimitRangeDefaults:
    """LimitRange defaults of a namespace, summarised (first definition of a resource wins)."""

    container_default: QuantityMap = field(default_factory=dict)
    container_default_request: QuantityMap = field(default_factory=dict)
    pod_default: QuantityMap = field(default_factory=dict)
    pod_default_request: QuantityMap = field(default_factory=dict)

    @classmethod
    def summarize(cls, limit_ranges: Sequence[Mapping[str, Any]]) -> LimitRangeDefaults:
        out = cls()
        for lr in limit_ranges:
            for item in (lr.get("spec") or {}).get("limits") or ():
                kind = item.get("type")
                if kind == "Container":
                    _setdefaults(out.container_default, item.get("default"))
                    _setdefaults(out.container_default_request, item.get("defaultRequest"))
                elif kind == "Pod":
                    _setdefaults(out.pod_default, item.get("default"))
                    _setdefaults(out.pod_default_request, item.get("defaultRequest"))
        return out


def _setdefaults(target: QuantityMap, source: Mapping[str, Any] | None) -> None:
    for name, qty in (source or {}).items():
        target.setdefault(name, res.parse_quantity(qty))


def _quantities(rl: Mapping[str, Any] | None) -> QuantityMap:
    return {name: res.parse_quantity(qty) for name, qty in (rl or {}).items()}


def _effective_requests(
    resources_spec: Mapping[str, Any] | None, default_limits: QuantityMap, default_requests: QuantityMap
) -> QuantityMap:
    """Requests after LimitRange defaulting and limits-as-requests (existing values win)."""
    resources_spec = resources_spec or {}
    requests = _quantities(resources_spec.get("requests"))
    limits = _quantities(resources_spec.get("limits"))
    for name, qty in default_limits.items():
        limits.setdefault(name, qty)
    for name, qty in default_requests.items():
        requests.setdefault(name, qty)
    for name, qty in limits.items():
        requests.setdefault(name, qty)
    return requests


def _add(target: QuantityMap, other: Mapping[str, Fraction]) -> None:
    for name, qty in other.items():
        target[name] = target.get(name, Fraction(0)) + qty


def _max_into(target: QuantityMap, other: Mapping[str, Fraction]) -> None:
    for name, qty in other.items():
        if name not in target or qty > target[name]:
            target[name] = qty


def pod_requests(
    pod_spec: Mapping[str, Any],
    limit_ranges: LimitRangeDefaults | None = None,
    runtime_class_overhead: Mapping[str, Any] | None = None,
) -> QuantityMap:
    """The Kubernetes effective pod request, with Kueue's adjustments, as exact values.

    `runtime_class_overhead` is the RuntimeClass `overhead.podFixed` of the pod's runtimeClassName,
    used only when the pod spec has no `overhead` of its own.
    """
    lr = limit_ranges or LimitRangeDefaults()
    regular: QuantityMap = {}
    for container in pod_spec.get("containers") or ():
        _add(
            regular,
            _effective_requests(
                container.get("resources"), lr.container_default, lr.container_default_request
            ),
        )

    init_peak: QuantityMap = {}
    sidecars: QuantityMap = {}
    for container in pod_spec.get("initContainers") or ():
        reqs = _effective_requests(
            container.get("resources"), lr.container_default, lr.container_default_request
        )
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to the regular containers and the later init containers.
            _add(regular, reqs)
            _add(sidecars, reqs)
            peak = dict(sidecars)
        else:
            peak = dict(reqs)
            _add(peak, sidecars)
        _max_into(init_peak, peak)

    pod = dict(regular)
    _max_into(pod, init_peak)

    pod_level = pod_spec.get("resources")
    if pod_level:
        pod_level_requests = _effective_requests(pod_level, lr.pod_default, lr.pod_default_request)
        pod.update(pod_level_requests)

    overhead = pod_spec.get("overhead")
    if not overhead and pod_spec.get("runtimeClassName") and runtime_class_overhead:
        overhead = runtime_class_overhead
    _add(pod, _quantities(overhead))
    return pod


def apply_config(requests: QuantityMap, config: RequestConfig) -> QuantityMap:
    """Drop excluded prefixes, then apply transformations."""
    if config.exclude_resource_prefixes:
        requests = {
            name: qty
            for name, qty in requests.items()
            if not any(name.startswith(prefix) for prefix in config.exclude_resource_prefixes)
        }
    if not config.transformations:
        return requests
    by_input = {t.input: t for t in config.transformations}
    if not any(name in by_input for name in requests):
        return requests
    kept: QuantityMap = {}
    outputs: QuantityMap = {}
    for name, qty in requests.items():
        transform = by_input.get(name)
        if transform is None:
            kept[name] = qty
            continue
        # Go multiplies by Quantity.Value(): integer base units, rounded up.
        input_value = res.to_amount("", qty)
        if transform.multiply_by and transform.multiply_by in requests:
            input_value *= res.to_amount("", requests[transform.multiply_by])
        for out_name, factor in transform.outputs.items():
            outputs[out_name] = outputs.get(out_name, Fraction(0)) + factor * input_value
        if transform.strategy == api.RESOURCE_TRANSFORMATION_RETAIN:
            kept[name] = qty
    for name, qty in outputs.items():
        kept[name] = kept.get(name, Fraction(0)) + max(qty, Fraction(0))
    return kept


def to_resource_list(quantities: Mapping[str, Fraction]) -> res.ResourceList:
    """Engine units, negatives floored to 0."""
    return {name: max(0, res.to_amount(name, qty)) for name, qty in quantities.items()}


@dataclass
class PodSetRequests:
    """One PodSet's requests as the engine uses them."""

    name: str
    count: int  # effective count (after reclaimablePods)
    per_pod: res.ResourceList
    min_count: int | None = None
    spec_count: int | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Required node-affinity terms: a tuple of terms, each a tuple of matchExpressions dicts.
    affinity_terms: tuple[tuple[Mapping[str, Any], ...], ...] | None = None
    # Flavors already fixed (admitted workloads): resource -> flavor.
    flavors: Mapping[str, str] | None = None

    @property
    def total(self) -> res.ResourceList:
        return {name: amount * self.count for name, amount in self.per_pod.items()}

    def scaled_to(self, count: int) -> res.ResourceList:
        return {name: amount * count for name, amount in self.per_pod.items()}


def podset_requests(
    podset: Mapping[str, Any],
    *,
    reclaimable: int = 0,
    limit_ranges: LimitRangeDefaults | None = None,
    runtime_class_overhead: Mapping[str, Any] | None = None,
    config: RequestConfig | None = None,
) -> PodSetRequests:
    """Requests of a Workload `spec.podSets[]` entry."""
    template_spec = (podset.get("template") or {}).get("spec") or {}
    per_pod = to_resource_list(
        apply_config(
            pod_requests(template_spec, limit_ranges, runtime_class_overhead), config or RequestConfig()
        )
    )
    count = int(podset.get("count", 1))
    min_count = podset.get("minCount")
    return PodSetRequests(
        name=podset.get("name") or api.DEFAULT_PODSET_NAME,
        count=max(0, count - reclaimable),
        spec_count=count,
        per_pod=per_pod,
        min_count=int(min_count) if min_count is not None else None,
        tolerations=tuple(template_spec.get("tolerations") or ()),
        node_selector=dict(template_spec.get("nodeSelector") or {}),
        affinity_terms=_required_affinity_terms(template_spec),
    )


def _required_affinity_terms(pod_spec: Mapping[str, Any]) -> tuple[tuple[Mapping[str, Any], ...], ...] | None:
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return None
    return tuple(tuple(term.get("matchExpressions") or ()) for term in terms)


def admitted_podset_requests(
    assignment: Mapping[str, Any], podset: Mapping[str, Any] | None, reclaimable: int = 0
) -> PodSetRequests:
    """Requests of an admitted PodSet from status.admission.podSetAssignments (dynamic reclaim)."""
    admitted_count = int(assignment.get("count") if assignment.get("count") is not None else 1)
    usage = res.resource_list_from_api(assignment.get("resourceUsage"))
    per_pod = {name: (amount // admitted_count if admitted_count else 0) for name, amount in usage.items()}
    spec_count = int((podset or {}).get("count", admitted_count))
    effective = max(0, spec_count - reclaimable)
    count = min(admitted_count, effective) if reclaimable else admitted_count
    template_spec = ((podset or {}).get("template") or {}).get("spec") or {}
    return PodSetRequests(
        name=assignment.get("name") or api.DEFAULT_PODSET_NAME,
        count=count,
        spec_count=spec_count,
        per_pod=per_pod,
        tolerations=tuple(template_spec.get("tolerations") or ()),
        node_selector=dict(template_spec.get("nodeSelector") or {}),
        affinity_terms=_required_affinity_terms(template_spec),
        flavors=dict(assignment.get("flavors") or {}),
    )
