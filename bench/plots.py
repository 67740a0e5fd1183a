"""The scaling series' PNG plots (matplotlib, installed by `make bench-scale`: the project's `bench`
extra): the latency CDF per configuration and the per-Workload cost along each axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from bench.federation_result import MIB, TARGET_RSS_MB
from bench.scale_series import PLOT_FILES, SeriesPoint, along

# ==============================================================================================
# Plots (matplotlib, installed by `make bench-scale`: the project's `bench` extra)
# ==============================================================================================


def _pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(
            "bench-scale: matplotlib is missing: `.venv/bin/pip install -e '.[bench]'` "
            "(`make bench-scale` does)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def configuration(p: SeriesPoint) -> str:
    return f"{p.workers} worker{'s' if p.workers != 1 else ''}, {p.workloads:,} Workloads"


def plot_latency_cdf(points: Sequence[SeriesPoint], path: Path) -> Path:
    """submitted -> Admitted, one CDF per configuration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for p in sorted(points, key=lambda p: (p.workloads, p.workers)):
        values = sorted(p.latencies_s)
        if not values:
            continue
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, fractions, where="post", label=configuration(p))
    ax.set_xlabel("submitted -> Admitted on the manager (s)")
    ax.set_ylabel("fraction of Workloads")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    ax.set_title("Latency distribution per configuration")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# What the scaling plots show: (title, [(label, value of a point)]).
PANELS: tuple[tuple[str, tuple[tuple[str, Callable[[SeriesPoint], float | None]], ...]], ...] = (
    ("manager CPU (ms per Workload)", (("manager", lambda p: p.manager_cpu_ms_per_workload),)),
    (
        "API calls per Workload",
        (
            ("manager -> manager cluster", lambda p: p.manager_api_per_workload),
            ("on the workers (manager + agents)", lambda p: p.worker_api_per_workload),
            ("the same, per worker", lambda p: p.worker_api_per_workload_per_worker),
        ),
    ),
    ("peak RSS (MiB)", (("manager", lambda p: p.manager_peak_rss_mib),)),
    (
        "submitted -> Admitted (s)",
        (("p50", lambda p: p.p50_s), ("p95", lambda p: p.p95_s), ("p99", lambda p: p.p99_s)),
    ),
)


def plot_scaling(points: Sequence[SeriesPoint], axis: str, fixed: int, path: Path) -> Path | None:
    """Per-Workload cost along one axis ("workers" or "workloads"); None when fewer than 2 points."""
    curve = along(points, axis, fixed)
    if len(curve) < 2:
        return None
    plt = _pyplot()
    xs = [getattr(p, axis) for p in curve]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (title, series) in zip(axes.flat, PANELS, strict=True):
        for label, value in series:
            pairs = [(x, value(p)) for x, p in zip(xs, curve, strict=True) if value(p) is not None]
            if pairs:
                ax.plot([x for x, _ in pairs], [y for _, y in pairs], marker="o", label=label)
        if title.startswith("peak RSS"):
            ax.axhline(TARGET_RSS_MB * 1e6 / MIB, color="red", linestyle="--", label="target 300 MB")
        ax.set_title(title, fontsize="medium")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:,}" for x in xs])
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    xlabel = "workers" if axis == "workers" else "Workloads"
    for ax in axes[1]:
        ax.set_xlabel(xlabel)
    where = f"{fixed:,} Workloads" if axis == "workers" else f"{fixed} workers"
    fig.suptitle(f"Federation manager cost vs {xlabel} ({where})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_plots(
    points: Sequence[SeriesPoint], plots_dir: Path, base_workers: int, base_workloads: int
) -> list[Path]:
    written = [plot_latency_cdf(points, plots_dir / PLOT_FILES["latency"])]
    for axis, fixed in (("workers", base_workloads), ("workloads", base_workers)):
        path = plot_scaling(points, axis, fixed, plots_dir / PLOT_FILES[axis])
        if path is not None:
            written.append(path)
    return written
