"""Dominant Resource Share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .snapshot import QuotaNode, potential_available

MAX_INT64 = 9223372036854775807


@dataclass(frozen=True, order=True)
class Share:
    """A node's weighted share; compares like upstream (zero-weight borrowers above everything)."""

    infinite: bool
    value: Fraction  # the unweighted ratio when infinite, else ratio / weight
    ratio: Fraction = Fraction(0)  # borrowed * 1000 / lendable, unrounded (upstream v0.19: a float)
    resource: str = ""

    @property
    def weighted_share(self) -> int:
        """`status.fairSharing.weightedShare`."""
        if self.infinite:
            return MAX_INT64
        return -((-self.value.numerator) // self.value.denominator)

    @property
    def precise(self) -> float:
        """upstream's PreciseWeightedShare (what the weighted-share metrics report)."""
        return math.inf if self.infinite else float(self.value)


ZERO_SHARE = Share(False, Fraction(0))


def dominant_resource_share(node: QuotaNode) -> Share:
    """DRS of a CQ or cohort from its current usage (simulate a workload by adding its usage first)."""
    parent = node.parent
    if parent is None:
        return ZERO_SHARE
    borrowed: dict[str, int] = {}
    for fr, quota in node.subtree_quota.items():
        amount = node.usage.get(fr, 0) - quota
        if amount > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + amount
    if not borrowed:
        return ZERO_SHARE
    lendable: dict[str, int] = {}
    for fr in parent.subtree_quota:
        if fr[1] in borrowed:
            lendable[fr[1]] = lendable.get(fr[1], 0) + potential_available(parent, fr)
    ratio, dominant = Fraction(0), ""
    for rname in sorted(borrowed):
        lr = lendable.get(rname, 0)
        if lr > 0:
            r = Fraction(borrowed[rname] * 1000, lr)
            if r > ratio:
                ratio, dominant = r, rname
    if node.fair_weight == 0:
        return Share(True, ratio, ratio, dominant)
    return Share(False, ratio / node.fair_weight, ratio, dominant)
