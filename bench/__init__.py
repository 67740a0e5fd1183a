"""The benchmarks and the differential runs against upstream Kueue (docs/benchmarks.md,
docs/differential.md). Each entry point is a module run with `python -m bench.<name>` from the
repository root (the Makefile's bench-* and diff-upstream targets do that):

  bench.engine           admission throughput of one engine on one cluster (Kueue's scheduler baseline)
  bench.federation       MultiKueue dispatch of Jobs (and a LeaderWorkerSet mix) through a fleet
  bench.compare          the same mix through ours and upstream Kueue, at shipped and at equal lifted budgets
  bench.scale            the manager's cost per Workload against workers and Workloads, with plots
  bench.manager_memory   what the manager's caches hold, per informer (tracemalloc)
  bench.replay_baseline  the baseline's mix replayed on the pure admission engine (no cluster)
  bench.json_codec       stdlib json against orjson on one Workload watch event
  bench.diff_upstream    one scenario against our worker_agent and upstream Kueue, workload by workload
  bench.request_codes    a running fleet's apiserver requests per MultiKueue Job, by verb and response code

The parts they share, once: bench.fleet (start a local fleet or a single cluster, tear it down,
keep our processes' logs), bench.procfs (CPU seconds and RSS from /proc), bench.prom (Prometheus
text, /metrics scrapes, apiserver request counts), bench.stats (percentiles, formatting),
bench.plots (matplotlib) and bench.common (messages, errors, JSON output).

Run with a plain `python3 -m bench.<name>`, the package re-executes the command with the project's
.venv when the project's modules are not importable.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _bootstrap() -> None:
    """Re-exec `python -m bench.<name> ...` with the project's .venv when kube_runtime, PyYAML or
    aiohttp are missing (only when run as a command: an import from a test never re-executes)."""
    import importlib.util

    if sys.argv[:1] != ["-m"]:  # `-m` while runpy locates the module: we are the command
        return
    if all(importlib.util.find_spec(m) is not None for m in ("kube_runtime", "yaml", "aiohttp")):
        return
    repo = Path(__file__).resolve().parent.parent
    venv_python = repo / ".venv" / "bin" / "python"
    if Path(sys.prefix).resolve() == (repo / ".venv").resolve() or not venv_python.exists():
        sys.exit("bench: run `make venv` first (the project's .venv is missing or incomplete)")
    os.execv(str(venv_python), [str(venv_python), *sys.orig_argv[1:]])


_bootstrap()
