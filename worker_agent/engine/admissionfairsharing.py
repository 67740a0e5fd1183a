"""Admission Fair Sharing (the AdmissionFairSharing gate with the Configuration's
`admissionFairSharing`): each LocalQueue's decayed consumed usage, the entry penalty an admission
adds until it is settled, and the usage the workloads of a `UsageBasedAdmissionFairSharing`
ClusterQueue are ordered by.

As upstream (pkg/util/admissionfairsharing, pkg/cache/queue/afs): amounts are per resource name in
base units (cpu in cores), exact decimals; a product with a float factor is rounded down to nine
decimal places, so repeated decay reaches zero. Times are seconds on the caller's clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from kueue_domain import resources as res

Amounts = dict[str, Fraction]

DEFAULT_SAMPLING_INTERVAL_SECONDS = 300.0  # usageSamplingInterval's default (5m)
_SCALE = 10**9  # mulByFloatScale


@dataclass(frozen=True)
class AfsConfig:
    """`admissionFairSharing`: usageHalfLifeTime (0: consumed usage is reset at every sample),
    usageSamplingInterval and resourceWeights (a resource not named weighs 1)."""

    half_life_seconds: float = 0.0
    sampling_interval_seconds: float = DEFAULT_SAMPLING_INTERVAL_SECONDS
    resource_weights: Mapping[str, float] = field(default_factory=dict)


def alpha_rate(sampling: float, half_life: float) -> float:
    """The weight of a new sample after `sampling` seconds: 1 - 0.5^(sampling / halfLife)."""
    if half_life == 0:
        return 0.0
    return 1.0 - math.pow(0.5, sampling / half_life)


def mul_by_float(amounts: Mapping[str, Fraction], factor: float) -> Amounts:
    """Every amount times `factor` (taken as the shortest decimal that prints it), rounded toward
    zero to nine decimal places."""
    exact = Fraction(repr(float(factor)))
    return {name: Fraction(math.trunc(value * exact * _SCALE), _SCALE) for name, value in amounts.items()}


def merge_sum(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> Amounts:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, Fraction(0)) + value
    return out


def decayed_consumed(
    old: Mapping[str, Fraction], new: Mapping[str, Fraction], elapsed: float, half_life: float
) -> Amounts:
    """old * (1 - alpha) + new * alpha, alpha = alpha_rate(elapsed, halfLife)."""
    alpha = alpha_rate(elapsed, half_life)
    return merge_sum(mul_by_float(old, 1 - alpha), mul_by_float(new, alpha))


def entry_penalty(total_requests: Mapping[str, Fraction], config: AfsConfig) -> Amounts:
    """What an admission adds to its LocalQueue's usage until it is settled: the requests times
    alpha_rate(usageSamplingInterval, usageHalfLifeTime)."""
    return mul_by_float(
        total_requests, alpha_rate(config.sampling_interval_seconds, config.half_life_seconds)
    )


def usage_value(
    consumed: Mapping[str, Fraction],
    penalty: Mapping[str, Fraction],
    lq_weight: float,
    resource_weights: Mapping[str, float],
) -> float:
    """sum(resourceWeight * amount) over consumed plus penalty, divided by the LocalQueue's weight
    (infinite for a weight of 0 or less, so such a queue goes last)."""
    every = merge_sum(consumed, penalty)
    total = 0.0
    for name in sorted(every):
        total += resource_weights.get(name, 1.0) * float(every[name])
    if lq_weight <= 0:
        return math.inf
    return total / lq_weight


def base_amounts(engine_amounts: Mapping[str, int]) -> Amounts:
    """Engine units (cpu in millicores) as base-unit amounts."""
    return {
        name: Fraction(value, 1000) if name == res.CPU else Fraction(value)
        for name, value in engine_amounts.items()
    }


def amounts_to_api(amounts: Mapping[str, Fraction]) -> dict[str, str]:
    """A ResourceList as upstream writes it (DecimalSI quantities)."""
    return {name: res.format_fraction(value) for name, value in sorted(amounts.items())}


def amounts_from_api(resource_list: Mapping[str, str | int | float] | None) -> Amounts:
    out: Amounts = {}
    for name, text in (resource_list or {}).items():
        try:
            out[name] = res.parse_quantity(text)
        except res.QuantityError:
            continue
    return out


@dataclass
class LedgerEntry:
    """One LocalQueue's consumed history, the penalties of its admissions not yet settled (per
    Workload, so pushing twice replaces, and dropping takes out exactly what was pushed), and when
    the history was last decayed."""

    resources: Amounts = field(default_factory=dict)
    last_update: float = 0.0
    status_accounted: bool = False
    penalties: dict[str, Amounts] = field(default_factory=dict)

    def pending_penalty(self) -> Amounts:
        total: Amounts = {}
        for amounts in self.penalties.values():
            total = merge_sum(total, amounts)
        return {name: value for name, value in total.items() if value != 0}


class UsageLedger:
    """Every LocalQueue's entry (keyed "namespace/name") and weight (`spec.fairSharing.weight`).
    `version` changes with every change that can change a queue's usage, so queue orders built on
    it know when to sort again."""

    def __init__(self, config: AfsConfig) -> None:
        self.config = config
        self.entries: dict[str, LedgerEntry] = {}
        self.weights: dict[str, float] = {}
        self.version = 0
        self._usage: dict[str, float] = {}  # usage() per LocalQueue at this version

    def _changed(self) -> None:
        self.version += 1
        self._usage.clear()

    def set_weight(self, lq_key: str, weight: float | None) -> None:
        weight = 1.0 if weight is None else weight
        if self.weights.get(lq_key, 1.0) != weight:
            self._changed()
        self.weights[lq_key] = weight

    def usage(self, lq_key: str) -> float:
        """The usage the ClusterQueue orders by: consumed plus pending penalty, weighted."""
        cached = self._usage.get(lq_key)
        if cached is not None:
            return cached
        entry = self.entries.get(lq_key)
        consumed = entry.resources if entry is not None else {}
        penalty = entry.pending_penalty() if entry is not None else {}
        value = usage_value(consumed, penalty, self.weights.get(lq_key, 1.0), self.config.resource_weights)
        self._usage[lq_key] = value
        return value

    def has_pending_penalty(self, lq_key: str) -> bool:
        entry = self.entries.get(lq_key)
        return entry is not None and bool(entry.pending_penalty())

    def push_penalty(
        self, lq_key: str, wl_key: str, total_requests: Mapping[str, Fraction], now: float
    ) -> None:
        """An admission's entry penalty (replacing an earlier one of the same Workload); a new entry
        starts its decay clock now and still takes the persisted status in."""
        entry = self.entries.get(lq_key)
        if entry is None:
            entry = self.entries[lq_key] = LedgerEntry(last_update=now)
        entry.penalties[wl_key] = entry_penalty(total_requests, self.config)
        self._changed()

    def sub_penalty(self, lq_key: str, wl_key: str) -> Amounts | None:
        """Drop a penalty that will never be settled (admission write failed, Workload deleted,
        finished or moved); no entry is created."""
        entry = self.entries.get(lq_key)
        if entry is None or wl_key not in entry.penalties:
            return None
        self._changed()
        return entry.penalties.pop(wl_key)

    def settle(self, lq_key: str, wl_key: str, admitted_usage: Mapping[str, Fraction], now: float) -> None:
        """A Workload became Admitted: decay the history towards the LocalQueue's admitted usage
        and fold that Workload's penalty in (once)."""
        entry = self.entries.get(lq_key)
        if entry is None:
            entry = self.entries[lq_key] = LedgerEntry(last_update=now)
        elapsed = max(0.0, now - entry.last_update)
        consumed = decayed_consumed(entry.resources, admitted_usage, elapsed, self.config.half_life_seconds)
        entry.resources = merge_sum(consumed, entry.penalties.pop(wl_key, {}))
        entry.last_update = max(now, entry.last_update)
        self._changed()

    def seed(self, lq_key: str, status_consumed: Mapping[str, Fraction] | None, now: float) -> bool:
        """The LocalQueue's persisted `consumedResources` taken in once per process; True when the
        entry existed already (the sampling interval then applies)."""
        entry = self.entries.get(lq_key)
        seeded = dict(status_consumed or {})
        if entry is None:
            self.entries[lq_key] = LedgerEntry(resources=seeded, last_update=now, status_accounted=True)
            self._changed()
            return False
        if not entry.status_accounted:
            entry.resources = merge_sum(entry.resources, seeded)
            entry.status_accounted = True
            self._changed()
        return True

    def due_in(self, lq_key: str, existed: bool, now: float) -> float | None:
        """Seconds until the next sample of an existing entry, or None when it is due now (also
        while a penalty waits to be settled)."""
        entry = self.entries.get(lq_key)
        if not existed or entry is None or self.has_pending_penalty(lq_key):
            return None
        remaining = self.config.sampling_interval_seconds - (now - entry.last_update)
        return remaining if remaining > 0 else None

    def sample(self, lq_key: str, admitted_usage: Mapping[str, Fraction], now: float) -> Amounts:
        """One sampling tick: the history decays towards the admitted usage (or is reset, with a
        half-life of 0). Returns what `status...consumedResources` shows."""
        entry = self.entries.setdefault(lq_key, LedgerEntry(last_update=now, status_accounted=True))
        if self.config.half_life_seconds == 0:
            entry.resources = {}
        else:
            elapsed = max(0.0, now - entry.last_update)
            entry.resources = decayed_consumed(
                entry.resources, admitted_usage, elapsed, self.config.half_life_seconds
            )
        entry.last_update = max(now, entry.last_update)
        self._changed()
        return dict(entry.resources)

    def delete(self, lq_key: str) -> None:
        if self.entries.pop(lq_key, None) is not None:
            self._changed()
        self.weights.pop(lq_key, None)
