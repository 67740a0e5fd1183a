"""bench.compare's fair accounting (pure): when a Job counts as admitted, the steady rate, the
whole fleet's CPU by kind of process, the repeats of an arm folded into medians and ranges, and the
two comparisons (each side at its shipped defaults; both at one equal lifted client budget).

An arm's repeat is `complete` only when every Workload it submitted was seen admitted (or seen
Finished without its Admitted=True being seen, which counts as admitted when first seen so). Only
complete repeats give an arm's figures, and a ratio is only taken between two arms whose every
repeat completed: a truncated run is reported, never compared."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.stats import fmt, ratio

Obj = dict[str, Any]

# The comparisons: (key in "ratios", ours' arm, upstream's arm).
COMPARISONS = (
    ("defaults", "ours", "upstream"),
    ("lifted", "ours_lifted", "upstream_tuned"),
    # Ours with upstream's AllAtOnce dispatcher instead of our shipped least-loaded: like for like.
    ("all_at_once", "ours_all_at_once", "upstream_tuned"),
    # Ours lifted without its Normal Events (--event-types Warning): what they cost.
    ("warning_events", "ours_warning_events", "upstream_tuned"),
    # Ours lifted with its processes on asyncio's event loop instead of uvloop's (--event-loop asyncio).
    ("asyncio", "ours_asyncio", "upstream_tuned"),
)
# The figures of an arm (medians over its complete repeats); "higher"/"lower" is better.
ARM_FIGURES: dict[str, str] = {
    "throughput_wl_s": "higher",
    "running_rate_wl_s": "higher",
    "admit_all_s": "lower",
    "p50_admitted_s": "lower",
    "p99_admitted_s": "lower",
    "p99_running_s": "lower",
    "lws_groups_per_s": "higher",
    "lws_p99_admitted_s": "lower",
    "fleet_cpu_ms_per_wl": "lower",
    "fleet_cpu_ms_per_wl_above_idle": "lower",
    "kueue_cpu_ms_per_wl": "lower",
    "fleet_cpu_ms_per_wl_outside_kueue": "lower",
    "manager_cluster_rss_mib": "lower",
    "api_requests_per_wl": "lower",
    "api_requests_per_wl_kueue_group": "lower",
}
# The kueue.x-k8s.io requests no design can avoid for one Workload dispatched to one worker and run
# to its end, all objects read from watches (no GET, no LIST per Workload):
#   manager cluster: create the Workload; reserve quota; admit it (check Ready, clusterName and
#                    Admitted in one status write); mirror Finished                      -> 4
#   its worker:      create the copy; reserve and admit it in one write; Finished; delete the copy
#                    (its finalizer dropped in the same write that finishes it)            -> 4
KUEUE_REQUESTS_FLOOR_PER_WL = 8
# The same under Kueue's API as it stands, which any implementation that keeps it also pays (ours and
# upstream's alike): 3 more writes, each of which that floor leaves out.
#   manager cluster: nominate the worker first (nominatedClusterNames): the Workload webhook admits a
#                    new clusterName only if the stored Workload nominates it; drop the job
#                    integration's resource-in-use finalizer (metadata, not writable through /status)
#   its worker:      the worker's job integration adopts the copy (ownerReference, job-uid label): the
#                    worker's Job is created once the copy is admitted, so the copy cannot name it
KUEUE_REQUESTS_API_FLOOR_PER_WL = KUEUE_REQUESTS_FLOOR_PER_WL + 3
# The arm without Kueue (bench.compare_floor): the mix straight on the workers, the fleet's floor.
FLOOR_ARM = "no_kueue"
# What each other arm is also given above the floor arm's: what its queueing and federation cost.
ABOVE_FLOOR_FIGURES = ("fleet_cpu_ms_per_wl", "fleet_cpu_ms_per_wl_above_idle", "api_requests_per_wl")
# The ratio of ours' fleet CPU outside its Kueue processes to upstream's whole fleet CPU: where the
# whole-fleet CPU ratio would stand if ours' own processes cost nothing (a bound on what making them
# cheaper can buy; only fewer or cheaper requests go below it).
CPU_BOUND = "fleet_cpu_ratio_if_ours_kueue_cost_nothing"
# Kinds of fleet process, by their localfleet component name.
CPU_KINDS = ("apiservers", "etcd", "controllers", "kwok", "kueue")


def admitted_at(admitted: float | None, finished: float | None) -> float | None:
    """When a Job counts as admitted: Admitted=True seen, else Finished seen (its Admitted=True was
    never observed, so it was admitted no later than that)."""
    if admitted is not None:
        return admitted
    return finished


def steady_rate(times: Sequence[float], total: int) -> float | None:
    """Workloads per second between 10 % and 90 % of `total` admitted (`times`: when each was
    admitted). None unless 90 % of them were, or the span is zero."""
    if total < 2:
        return None
    ordered = sorted(times)
    lo = max(0, math.ceil(0.1 * total) - 1)
    hi = math.ceil(0.9 * total) - 1
    if hi >= len(ordered) or hi <= lo:
        return None
    span = ordered[hi] - ordered[lo]
    return (hi - lo) / span if span > 0 else None


def admit_all(submitted: Iterable[float], times: Sequence[float], total: int) -> float | None:
    """Seconds from the first submission to the last of `total` Workloads admitted (None if some
    never were)."""
    first = min(submitted, default=None)
    if first is None or len(times) < total or not times:
        return None
    return max(times) - first


def cpu_kind(component: str) -> str:
    if component in ("manager", "worker-agent", "upstream-kueue", "conversion-webhook"):
        return "kueue"
    if component.startswith("kube-apiserver") or component == "apiserver":
        return "apiservers"
    if component.startswith("etcd"):
        return "etcd"
    if component.startswith("kwok"):
        return "kwok"
    return "controllers"  # kube-controller-manager, kube-scheduler, the LWS/JobSet/Trainer controllers


def fleet_cpu(cpu_by_process: Mapping[str, float | None], workloads: int, cpus: int) -> Obj:
    """The whole fleet's CPU during the run, per Workload: total, by kind of process, and the rate
    this machine's `cpus` could sustain at that cost (the CPU ceiling)."""
    by_kind = dict.fromkeys(CPU_KINDS, 0.0)
    for label, cpu_s in cpu_by_process.items():
        if cpu_s is not None:
            by_kind[cpu_kind(label.partition("/")[2])] += cpu_s
    total = sum(by_kind.values())
    per_wl = 1000.0 * total / workloads if workloads else None
    return {
        "fleet_cpu_s": total,
        "fleet_cpu_ms_per_wl": per_wl,
        "fleet_cpu_ms_per_wl_by_kind": {k: 1000.0 * v / workloads for k, v in by_kind.items()}
        if workloads
        else {},
        "kueue_cpu_ms_per_wl": 1000.0 * by_kind["kueue"] / workloads if workloads else None,
        # What the rest of the fleet (apiservers, etcd, controllers, kwok) spends serving the arm's
        # requests and running its work: the whole-fleet CPU the arm would have if its Kueue
        # processes cost nothing at all.
        "fleet_cpu_ms_per_wl_outside_kueue": 1000.0 * (total - by_kind["kueue"]) / workloads
        if workloads
        else None,
        "cpu_ceiling_wl_s": 1000.0 * cpus / per_wl if per_wl else None,
    }


def per_floor(requests_per_wl: float | None, floor: float = KUEUE_REQUESTS_FLOOR_PER_WL) -> float | None:
    """kueue.x-k8s.io requests per Workload as a multiple of `floor` (KUEUE_REQUESTS_FLOOR_PER_WL)."""
    return None if requests_per_wl is None else requests_per_wl / floor


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def fold(repeats: Sequence[Obj | None]) -> Obj:
    """An arm's repeats (None: a repeat that failed to run) -> medians and ranges over the complete
    ones, `completed` only if every repeat ran and admitted everything."""
    done = [r for r in repeats if r and r.get("complete")]
    out: Obj = {
        "completed": bool(repeats) and len(done) == len(repeats),
        "complete_repeats": len(done),
        "repeats": list(repeats),
    }
    for key in ARM_FIGURES:
        values = [r[key] for r in done if r.get(key) is not None]
        out[key] = median(values)
        out[f"{key}_range"] = [min(values), max(values)] if values else None
    kinds = [r.get("fleet_cpu_ms_per_wl_by_kind") or {} for r in done]
    out["fleet_cpu_ms_per_wl_by_kind"] = {
        k: median([d[k] for d in kinds if k in d]) for k in CPU_KINDS if any(k in d for d in kinds)
    }
    by_kind = [r.get("api_requests_per_wl_by_kind") or {} for r in done]
    out["api_requests_per_wl_by_kind"] = {
        k: median([d.get(k, 0.0) for d in by_kind]) for k in sorted({k for d in by_kind for k in d})
    }
    ceilings = [r["cpu_ceiling_wl_s"] for r in done if r.get("cpu_ceiling_wl_s")]
    out["cpu_ceiling_wl_s"] = median(ceilings)
    first = next((r for r in repeats if r), None) or {}
    out["client_budget"] = first.get("client_budget")
    out["binding_limit"] = first.get("binding_limit")
    return out


def add_above_floor(arms: Mapping[str, Obj | None]) -> None:
    """When the floor arm completed, every other completed arm gets `above_floor`: its
    ABOVE_FLOOR_FIGURES less the floor's (what its queueing and federation cost per Workload), and
    `running_rate_of_floor`, its steady rate of Jobs reaching a Running pod as a share of the floor's
    (the same figure with nothing in the way)."""
    floor = arms.get(FLOOR_ARM)
    if not floor or not floor["completed"]:
        return
    for name, arm in arms.items():
        if not arm or name == FLOOR_ARM or not arm["completed"]:
            continue
        above: Obj = {}
        for fig in ABOVE_FLOOR_FIGURES:
            mine, base = arm.get(fig), floor.get(fig)
            above[fig] = None if mine is None or base is None else mine - base
        above["running_rate_of_floor"] = ratio(arm.get("running_rate_wl_s"), floor.get("running_rate_wl_s"))
        arm["above_floor"] = above


def compare(arms: Mapping[str, Obj | None]) -> dict[str, Obj]:
    """ratios.<defaults|lifted|all_at_once|warning_events|asyncio>: ours / theirs for every ARM_FIGURES key,
    or why there is none; with the floor arm's figures (add_above_floor), `above_floor`: ours / theirs of what
    each spends above the floor."""
    out: dict[str, Obj] = {}
    for key, ours_name, theirs_name in COMPARISONS:
        ours, theirs = arms.get(ours_name), arms.get(theirs_name)
        if not ours or not theirs:
            continue
        if not (ours["completed"] and theirs["completed"]):
            truncated = [n for n, a in ((ours_name, ours), (theirs_name, theirs)) if not a["completed"]]
            skipped = f"truncated: {', '.join(truncated)}"
            out[key] = {"ours": ours_name, "upstream": theirs_name, "skipped": skipped}
            continue
        out[key] = {
            "ours": ours_name,
            "upstream": theirs_name,
            **{fig: ratio(ours.get(fig), theirs.get(fig)) for fig in ARM_FIGURES},
            # The lowest whole-fleet CPU ratio ours could reach with the same requests: its Kueue
            # processes at no cost, against upstream's whole fleet.
            CPU_BOUND: ratio(
                ours.get("fleet_cpu_ms_per_wl_outside_kueue"), theirs.get("fleet_cpu_ms_per_wl")
            ),
        }
        if "above_floor" in ours and "above_floor" in theirs:
            mine, base = ours["above_floor"], theirs["above_floor"]
            out[key]["above_floor"] = {fig: ratio(mine[fig], base[fig]) for fig in ABOVE_FLOOR_FIGURES}
    return out


def format_arms(arms: Mapping[str, Obj | None]) -> str:
    """One table: a row per figure, a column per arm (median [min..max] over complete repeats)."""
    names = [n for n, a in arms.items() if a]
    if not names:
        return "== arms: none ran"
    lines = ["== arms (median over complete repeats, [min .. max])"]
    for name in names:
        a = arms[name]
        state = "complete" if a["completed"] else f"TRUNCATED ({a['complete_repeats']}/{len(a['repeats'])})"
        lines.append(f"   {name}: {state}; client {a['client_budget']}; binding: {a['binding_limit']}")
    width = max(len(k) for k in ARM_FIGURES) + 2
    lines.append("   " + "figure".ljust(width) + "".join(f"{n:>28}" for n in names))
    for key in ARM_FIGURES:
        cells = []
        for n in names:
            a = arms[n]
            rng = a.get(f"{key}_range")
            cell = fmt(a.get(key), digits=2)
            if rng and rng[0] != rng[1]:
                cell += f" [{fmt(rng[0], digits=2)}..{fmt(rng[1], digits=2)}]"
            cells.append(f"{cell:>28}")
        lines.append("   " + key.ljust(width) + "".join(cells))
    for kind in CPU_KINDS:
        values = [(arms[n].get("fleet_cpu_ms_per_wl_by_kind") or {}).get(kind) for n in names]
        cells = "".join(f"{fmt(v, digits=1):>28}" for v in values)
        lines.append("   " + f"  cpu ms/wl: {kind}".ljust(width) + cells)
    cells = "".join(f"{fmt(arms[n].get('cpu_ceiling_wl_s'), digits=1):>28}" for n in names)
    lines.append("   " + "cpu_ceiling_wl_s".ljust(width) + cells)
    floors = ((KUEUE_REQUESTS_FLOOR_PER_WL, "floor"), (KUEUE_REQUESTS_API_FLOOR_PER_WL, "API floor"))
    for floor, label in floors:
        cells = "".join(
            f"{fmt(per_floor(arms[n].get('api_requests_per_wl_kueue_group'), floor), digits=2):>28}"
            for n in names
        )
        lines.append("   " + f"  kueue.x-k8s.io / {label} {floor}".ljust(width) + cells)
    if any("above_floor" in arms[n] for n in names):
        for fig in (*ABOVE_FLOOR_FIGURES, "running_rate_of_floor"):
            values = [(arms[n].get("above_floor") or {}).get(fig) for n in names]
            cells = "".join(f"{fmt(v, digits=2):>28}" for v in values)
            where = f"({FLOOR_ARM})" if fig == "running_rate_of_floor" else f"above {FLOOR_ARM}"
            label = f"  {fig} {where}"
            lines.append("   " + label.ljust(width) + cells)
    lines += request_kind_lines({n: arms[n].get("api_requests_per_wl_by_kind") or {} for n in names})
    return "\n".join(lines)


# How many kinds of apiserver request the arms' table lists (the most per Workload in any arm).
TOP_REQUEST_KINDS = 15


def top_request_kinds(by_arm: Mapping[str, Mapping[str, float]], top: int = TOP_REQUEST_KINDS) -> list[str]:
    """The kinds of request with the most per Workload in any arm, most first."""
    kinds = {k for d in by_arm.values() for k in d}
    return sorted(kinds, key=lambda k: (-max(d.get(k, 0.0) for d in by_arm.values()), k))[:top]


def request_kind_lines(by_arm: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Where the arms' apiserver requests go: per Workload, by `<VERB> <group>/<resource>`."""
    kinds = top_request_kinds(by_arm)
    if not kinds:
        return []
    width = max(36, max(len(k) for k in kinds) + 4)
    lines = [f"   apiserver requests per Workload by kind (the {len(kinds)} largest)"]
    lines.append("   " + "  kind".ljust(width) + "".join(f"{n:>28}" for n in by_arm))
    for kind in kinds:
        cells = "".join(f"{fmt(d.get(kind, 0.0), digits=2):>28}" for d in by_arm.values())
        lines.append("   " + f"  {kind}".ljust(width) + cells)
    return lines


def format_comparisons(table: Mapping[str, Obj]) -> str:
    if not table:
        return "== ratios: n/a (a comparison needs both of its arms)"
    lines = [
        "== ratios ours / upstream (throughput_wl_s and lws_groups_per_s: higher is better for ours; "
        "the rest: lower)"
    ]
    for key, row in table.items():
        head = f"   {key}: {row['ours']} / {row['upstream']}"
        if row.get("skipped"):
            lines.append(f"{head}: no ratio, {row['skipped']}")
            continue
        lines.append(head)
        lines += [f"      {fig.ljust(34)}{fmt(row.get(fig), digits=2)}" for fig in ARM_FIGURES]
        if CPU_BOUND in row:
            lines.append(f"      {CPU_BOUND.ljust(50)}{fmt(row[CPU_BOUND], digits=2)}")
        for fig, value in (row.get("above_floor") or {}).items():
            lines.append(f"      {(fig + ' above ' + FLOOR_ARM).ljust(50)}{fmt(value, digits=2)}")
    return "\n".join(lines)
