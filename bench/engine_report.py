"""bench.engine's printed report: one engine's result and checks, and ours against upstream side by side."""

from __future__ import annotations

import os

from bench.engine_result import Check, RunResult, rangespec_checks
from bench.stats import ratio

# ==============================================================================================
# Reporting
# ==============================================================================================


def _fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


def _limit(check: Check) -> str:
    return f"{'<=' if check.kind == 'max' else '>='} {check.limit:g} {check.unit}"


def _rows(result: RunResult) -> list[tuple[str, str]]:
    rows = [
        (
            "wall time (engine start -> done)",
            _fmt(result.wall_s, "s") + (" TIMEOUT" if result.timed_out else ""),
        ),
        ("workloads created / finished", f"{result.workloads_created:,} / {result.workloads_finished:,}"),
        ("admissions (incl. re-admissions)", f"{result.admissions:,}"),
        ("admissions per second", _fmt(result.admissions_per_s, "/s", 2)),
    ]
    for name in ("small", "medium", "large", *sorted(set(result.classes) - {"small", "medium", "large"})):
        c = result.classes.get(name)
        if c is None:
            continue
        rows.append(
            (
                f"avg time to admission, {name} (runner)",
                _fmt(
                    None if c.avg_time_to_admission_obs_ms is None else c.avg_time_to_admission_obs_ms / 1000,
                    "s",
                ),
            )
        )
        rows.append(
            (
                f"avg time to admission, {name} (API timestamps)",
                _fmt(
                    None if c.avg_time_to_admission_api_ms is None else c.avg_time_to_admission_api_ms / 1000,
                    "s",
                ),
            )
        )
        rows.append((f"  {name}: admitted / count, evictions", f"{c.admitted}/{c.count}, {c.evictions}"))
    for cls, pct in result.cq_usage_pct.items():
        rows.append((f"ClusterQueue usage, class {cls} (CQ status)", _fmt(pct, "%")))
    rows.append(("ClusterQueue usage, all (runner-seen admissions)", _fmt(result.workload_usage_pct, "%")))
    rows.append(("ClusterQueue status events seen", f"{result.cq_status_events:,}"))
    rows += [
        ("engine peak RSS (VmHWM)", _fmt(result.peak_rss_mib, "MiB")),
        ("engine CPU (user+sys)", _fmt(result.engine_cpu_s, "s")),
        ("engine process CPU per admission", _fmt(result.process_cpu_per_admission_ms, "ms", 2)),
        ("engine CPU per scheduling decision", _fmt(result.engine_cpu_per_decision_ms, "ms", 3)),
        ("harness (generator + runner) CPU", _fmt(result.harness_cpu_s, "s")),
        *(
            (f"apiserver writes, {key} (all clients)", f"{n:,}")
            for key, n in sorted(result.api_writes.items())
            if key.split(" ", 1)[1].startswith(("workloads", "clusterqueues", "localqueues", "events"))
        ),
        (
            "machine load average (1 min), start / end",
            f"{_fmt(result.load_avg_start, digits=2)} / {_fmt(result.load_avg_end, digits=2)} "
            f"on {os.cpu_count()} CPUs",
        ),
    ]
    return rows


def format_result(result: RunResult) -> str:
    lines = [
        f"== {result.engine}: {result.workloads_planned:,} workloads in "
        f"{result.cluster_queues} ClusterQueues (scale {result.scale:g})"
    ]
    if result.error:
        lines.append(f"   ERROR: {result.error}")
    if result.timed_out:
        lines.append(
            "   TIMED OUT: the averages below cover only the workloads admitted before the timeout "
            "(see admitted / count)"
        )
    width = max(len(k) for k, _ in _rows(result))
    for key, value in _rows(result):
        lines.append(f"   {key:<{width}}  {value}")
    lines.append("")
    lines.append(format_checks(result))
    return "\n".join(lines)


def format_checks(result: RunResult) -> str:
    checks = rangespec_checks(result)
    full = result.scale == 1.0 and result.cluster_queues == 30
    head = "   upstream rangespec (configs/baseline, v0.19.2)"
    if not full:
        head += ": reference only, the thresholds are for the full run (--scale 1, 30 ClusterQueues)"
    lines = [head]
    width = max(len(c.metric) for c in checks)
    for c in checks:
        digits = 1
        lines.append(
            f"   {c.metric:<{width}}  {_fmt(c.value, c.unit, digits):>12}  {_limit(c):>12}  "
            f"{'PASS' if c.passed else 'FAIL'}"
        )
    return "\n".join(lines)


def format_comparison(ours: RunResult, upstream: RunResult) -> str:
    pairs: list[tuple[str, float | None, float | None, str, bool]] = [
        ("wall time", ours.wall_s, upstream.wall_s, "s", True),
        ("admissions per second", ours.admissions_per_s, upstream.admissions_per_s, "/s", False),
    ]
    for name in ("small", "medium", "large"):
        o, u = ours.classes.get(name), upstream.classes.get(name)
        pairs.append(
            (
                f"avg time to admission, {name} (runner)",
                None
                if o is None or o.avg_time_to_admission_obs_ms is None
                else o.avg_time_to_admission_obs_ms / 1000,
                None
                if u is None or u.avg_time_to_admission_obs_ms is None
                else u.avg_time_to_admission_obs_ms / 1000,
                "s",
                True,
            )
        )
    for cls in sorted(set(ours.cq_usage_pct) | set(upstream.cq_usage_pct)):
        pairs.append(
            (
                f"ClusterQueue usage, class {cls} (CQ status)",
                ours.cq_usage_pct.get(cls),
                upstream.cq_usage_pct.get(cls),
                "%",
                False,
            )
        )
    pairs.append(
        ("ClusterQueue usage (runner-seen)", ours.workload_usage_pct, upstream.workload_usage_pct, "%", False)
    )
    pairs += [
        ("engine peak RSS", ours.peak_rss_mib, upstream.peak_rss_mib, "MiB", False),
        ("engine CPU (user+sys)", ours.engine_cpu_s, upstream.engine_cpu_s, "s", False),
        (
            "process CPU per admission",
            ours.process_cpu_per_admission_ms,
            upstream.process_cpu_per_admission_ms,
            "ms",
            False,
        ),
    ]
    width = max(len(p[0]) for p in pairs)
    lines = [f"== side by side (ours = worker_agent, upstream = minimalkueue), scale {ours.scale:g}"]
    lines.append(f"   {'metric':<{width}}  {'ours':>14}  {'upstream':>14}  {'ours/upstream':>13}")
    for name, o, u, unit, _ in pairs:
        r = ratio(o, u)
        o_text, u_text, r_text = _fmt(o, unit), _fmt(u, unit), _fmt(r, "x", 2)
        if name == "wall time":  # a timed-out run's wall time is a lower bound
            o_text = (">" if ours.timed_out else "") + o_text
            u_text = (">" if upstream.timed_out else "") + u_text
            r_text = ("" if not ours.timed_out or upstream.timed_out else ">") + r_text
        lines.append(f"   {name:<{width}}  {o_text:>14}  {u_text:>14}  {r_text:>13}")
    for result in (ours, upstream):
        if result.timed_out:
            lines.append(
                f"   {result.engine} timed out: {result.workloads_finished:,} of "
                f"{result.workloads_planned:,} finished; its averages cover only those admitted in time"
            )
    return "\n".join(lines)
