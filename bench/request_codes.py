"""Which requests one MultiKueue Job costs, per cluster, by verb, resource and response code.

On a running local fleet (`hack/localfleet.py up --setup-multikueue`, then `eval "$(... env)"`),
this submits N copies of examples/multikueue/sample-job.yaml on the manager, waits until every Job
there is Complete, and prints each cluster's apiserver requests per Job for Jobs and Workloads
(`apiserver_request_total` read before and after, LIST and WATCH left out). Failed writes show up
as their own rows (409: a write from a stale copy, 404: a read or delete of something gone), which
is how the second start of a Job from a stale cache was found.

    python -m bench.request_codes --jobs 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from bench import prom
from bench.common import say

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "multikueue" / "sample-job.yaml"
CLUSTERS = ("manager", "worker1", "worker2", "worker3")
RESOURCES = ("jobs", "workloads")
LEFT_OUT_VERBS = ("LIST", "WATCH")

Row = tuple[str, str, str]  # (verb, resource[/subresource], code)


def request_rows(samples: Iterable[prom.Sample], resources: Iterable[str] = RESOURCES) -> Counter[Row]:
    """apiserver_request_total summed by (verb, resource[/subresource], code) for `resources`."""
    wanted = set(resources)
    rows: Counter[Row] = Counter()
    for s in samples:
        if s.name != prom.APISERVER_REQUESTS or s.labels.get("resource") not in wanted:
            continue
        if s.labels.get("verb") in LEFT_OUT_VERBS:
            continue
        resource = s.labels["resource"]
        if s.labels.get("subresource"):
            resource += "/" + s.labels["subresource"]
        rows[(s.labels.get("verb", ""), resource, s.labels.get("code", ""))] += s.value
    return rows


def per_job(before: Mapping[Row, float], after: Mapping[Row, float], jobs: int) -> dict[Row, float]:
    """The requests between two reads, per Job (a counter that went down was reset: its value counts)."""
    out: dict[Row, float] = {}
    for row, value in after.items():
        delta = value - before.get(row, 0.0)
        delta = value if delta < 0 else delta
        if delta:
            out[row] = delta / jobs
    return dict(sorted(out.items()))


def _kubeconfigs() -> dict[str, str]:
    found = {
        c: os.environ[f"KUBECONFIG_{c.upper()}"] for c in CLUSTERS if f"KUBECONFIG_{c.upper()}" in os.environ
    }
    if "manager" not in found:
        raise SystemExit('no fleet: run `eval "$(python hack/localfleet.py env)"` first')
    return found


def _read(kubeconfigs: Mapping[str, str]) -> dict[str, Counter[Row]]:
    out = {}
    for cluster, kubeconfig in kubeconfigs.items():
        text = prom.apiserver_metrics("kubectl", kubeconfig)
        if text is None:
            raise SystemExit(f"cannot read {cluster}'s apiserver /metrics")
        out[cluster] = request_rows(prom.parse_prometheus_text(text))
    return out


def _complete(job: Mapping) -> bool:
    return any(
        c.get("type") == "Complete" and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.request_codes", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--jobs", type=int, default=60, help="sample Jobs to submit (default 60)")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for them all")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the last Complete")
    args = parser.parse_args(argv)
    kubeconfigs = _kubeconfigs()
    manager = ["kubectl", "--kubeconfig", kubeconfigs["manager"], "-n", args.namespace]
    before = _read(kubeconfigs)
    started = time.monotonic()
    names = []
    for _ in range(args.jobs):
        res = subprocess.run(
            [*manager, "create", "-f", str(SAMPLE), "-o", "name"], check=True, capture_output=True, text=True
        )
        names.append(res.stdout.strip().rpartition("/")[2])
    wanted = set(names)
    while True:
        res = subprocess.run(
            [*manager, "get", "jobs", "-o", "json"], check=True, capture_output=True, text=True
        )
        done = {j["metadata"]["name"] for j in json.loads(res.stdout)["items"] if _complete(j)}
        if wanted <= done:
            break
        if time.monotonic() - started > args.timeout:
            raise SystemExit(
                f"{len(wanted - done)} of {args.jobs} Jobs not Complete after {args.timeout:.0f}s"
            )
        time.sleep(2)
    say(f"{args.jobs} Jobs Complete in {time.monotonic() - started:.1f}s; settling {args.settle:.0f}s")
    time.sleep(args.settle)
    after = _read(kubeconfigs)
    total = 0.0
    for cluster in kubeconfigs:
        rows = per_job(before[cluster], after[cluster], args.jobs)
        print(f"== {cluster}: {sum(rows.values()):.2f} requests per Job")
        for (verb, resource, code), value in rows.items():
            print(f"   {value:6.2f}  {verb:7} {resource:18} {code}")
        total += sum(rows.values())
    print(f"== every cluster: {total:.2f} requests per Job (Jobs and Workloads; LIST and WATCH left out)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
