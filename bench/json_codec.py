#!/usr/bin/env python3
"""JSON decode/encode cost of one Workload watch event, stdlib json against orjson (what
kube_runtime/client.py uses since 2026-11-25). Prints microseconds per call.

  .venv/bin/python -m bench.json_codec [--number N]
"""

from __future__ import annotations

import argparse
import json
import timeit

import orjson

CONDITION = {
    "status": "True",
    "lastTransitionTime": "2026-11-25T10:00:01Z",
    "observedGeneration": 1,
}
WORKLOAD_EVENT = {
    "type": "MODIFIED",
    "object": {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "w-123",
            "namespace": "ns",
            "uid": "0b7c3f2e-1111-2222-3333-444455556666",
            "resourceVersion": "123456",
            "generation": 1,
            "creationTimestamp": "2026-11-25T10:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "managedFields": [
                {
                    "manager": "kueue-admission",
                    "operation": "Apply",
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "time": "2026-11-25T10:00:01Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:admission": {".": {}, "f:clusterQueue": {}}}},
                }
            ],
        },
        "spec": {
            "queueName": "lq",
            "priority": 100,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": "1", "memory": "200Mi"}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "reason": "QuotaReserved",
                    "message": "Quota reserved in ClusterQueue cq",
                }
                | CONDITION,
                {"type": "Admitted", "reason": "Admitted", "message": "The workload is admitted"} | CONDITION,
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"cpu": "default", "memory": "default"},
                        "resourceUsage": {"cpu": "1", "memory": "200Mi"},
                        "count": 1,
                    }
                ],
            },
        },
    },
}


def main() -> None:
    p = argparse.ArgumentParser(
        prog="bench_json", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--number", type=int, default=20000, help="calls per figure (default 20000)")
    n = p.parse_args().number
    line = json.dumps(WORKLOAD_EVENT).encode()
    body = WORKLOAD_EVENT["object"]

    def per_call(fn) -> float:
        return timeit.timeit(fn, number=n) / n * 1e6

    figures = {
        "decode, json": per_call(lambda: json.loads(line)),
        "decode, orjson": per_call(lambda: orjson.loads(line)),
        "encode, json": per_call(lambda: json.dumps(body, separators=(",", ":")).encode()),
        "encode, orjson": per_call(lambda: orjson.dumps(body)),
    }
    print(f"one Workload watch event, {len(line)} bytes; microseconds per call ({n:,} calls):")
    for name, us in figures.items():
        print(f"  {name:<16} {us:8.1f}")


if __name__ == "__main__":
    main()
