"""Percentiles and distributions (of samples, of Prometheus histograms), averages and ratios, and
the plain-text formatting every benchmark's report uses."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bench.prom import Buckets, histogram_quantile


def average(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def total(values: Sequence[float | None]) -> float | None:
    """The sum of the values present; None when none is."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def per(value: float | None, count: int) -> float | None:
    return None if value is None or count <= 0 else value / count


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) of `values`, interpolated between closest ranks (numpy's default)."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Distribution:
    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


def distribution(values: Sequence[float]) -> Distribution:
    if not values:
        return Distribution()
    return Distribution(
        count=len(values),
        mean=sum(values) / len(values),
        p50=percentile(values, 0.5),
        p95=percentile(values, 0.95),
        p99=percentile(values, 0.99),
        max=max(values),
    )


def histogram_distribution(buckets: Buckets, total_seconds: float | None = None) -> Distribution:
    """Count, mean (from the histogram's _sum, when given) and estimated quantiles."""
    count = int(buckets[-1][1]) if buckets else 0
    if count == 0:
        return Distribution()
    return Distribution(
        count=count,
        mean=None if total_seconds is None else total_seconds / count,
        p50=histogram_quantile(0.5, buckets),
        p95=histogram_quantile(0.95, buckets),
        p99=histogram_quantile(0.99, buckets),
    )


# ==============================================================================================
# Formatting (pure)
# ==============================================================================================


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


def fmt_dist(d: Distribution, unit: str = "s", digits: int = 3) -> str:
    if not d.count:
        return "n/a (no observations)"
    return f"{fmt(d.p50, digits=digits)} / {fmt(d.p95, digits=digits)} / {fmt(d.p99, digits=digits)} {unit}"


def loads(values: Iterable[float]) -> str:
    return "/".join(f"{x:.2f}" for x in values)


def table(rows: Sequence[tuple[str, str, str, str]], header: tuple[str, str, str, str]) -> str:
    """A plain-text table: columns padded to the widest cell, a rule under the header."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(4)]
    widths[3] = 0  # the last column is not padded
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * max(w, len(header[i])) for i, w in enumerate(widths)).rstrip())
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)
