#!/usr/bin/env python3
"""What the federation manager's caches hold, per informer: fill them the way the manager does
(a Manager built from the fleet's manager Configuration; its informers on the manager cluster and
one RemoteClient per worker, connected with the worker's MultiKueue kubeconfig), then measure each
cache with tracemalloc. Writes nothing to any cluster.

Each object is decoded from its own JSON document, as the watch delivers it (a list response
decodes a page at once and shares its keys, which a long-running manager's cache does not), once
as the server sends it and once as the cache keeps it (after the informer's transform).

  .venv/bin/python -m bench.manager_memory --dir /dev/shm/kf-mem [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import yaml

from bench.common import Obj, write_json
from kube_runtime.client import KubeClient
from kube_runtime.informer import strip_managed_fields
from kube_runtime.logging import setup_logging
from manager.config import load_manager_config
from manager.manager import Manager

KIB = 1024


def decoded_bytes(objs: list[Obj], transform: Any = None) -> int:
    """Bytes (tracemalloc) that `objs` take once decoded one document each, transformed if given."""
    texts = [json.dumps(obj) for obj in objs]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    decoded = [json.loads(text) for text in texts]
    if transform is not None:
        decoded = [transform(obj) for obj in decoded]
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del decoded
    return size


def measure(name: str, transform: Any, raw: list[Obj]) -> Obj:
    """One cache: objects; bytes as served, without managedFields, and as cached (the informer's
    transform)."""
    n = len(raw)
    row: Obj = {"cache": name, "objects": n}
    for column, size in (
        ("served", decoded_bytes(raw)),
        ("noManagedFields", decoded_bytes(raw, strip_managed_fields)),
        ("cached", decoded_bytes(raw, transform) if transform is not None else None),
    ):
        if size is None:
            size = row["servedKiB"] * KIB
        row[f"{column}KiB"] = size / KIB
        row[f"{column}KiBPerObject"] = size / KIB / n if n else 0.0
    return row


def read_fleet(run_dir: Path) -> tuple[str, Path, dict[str, Obj]]:
    """(manager cluster kubeconfig, manager Configuration path, each worker's MultiKueue kubeconfig)."""
    clusters = json.loads((run_dir / "state.json").read_text())["clusters"]
    manager_cluster = next(c for c in clusters.values() if c["role"] == "manager")
    workers = {
        name: yaml.safe_load(
            Path(c.get("multikueueKubeconfig") or run_dir / name / "multikueue.kubeconfig").read_text()
        )
        for name, c in clusters.items()
        if c["role"] != "manager"
    }
    return manager_cluster["kubeconfig"], run_dir / "manager" / "manager-config.yaml", workers


async def amain(run_dir: Path) -> list[Obj]:
    kubeconfig, config_path, workers = read_fleet(run_dir)
    config = load_manager_config(config_path)
    kube = await KubeClient.from_kubeconfig_file(kubeconfig)
    mgr = Manager(kube, config, metrics_bind_address="0", health_bind_address="0")
    # (cache name, transform, objects as served), measured once every cache is gone: strings the
    # live caches interned would otherwise not count.
    caches: list[tuple[str, Any, list[Obj]]] = []
    remotes = []
    try:
        for informer in mgr.informers:
            informer.start()
        for informer in mgr.informers:
            await informer.wait_synced()
        for informer in mgr.informers:
            raw, _ = await kube.list(informer.resource, informer.namespace)
            caches.append((f"manager/{informer.name}", informer.store._transform, raw))
        for name, worker_kubeconfig in workers.items():
            remote = mgr._new_remote_client(name)
            remotes.append(remote)
            _, error = await remote.refresh(worker_kubeconfig)
            if error:
                raise SystemExit(f"cannot connect to worker {name}: {error}")
            for resource, informer in remote._informers.items():
                raw, _ = await remote.kube.list(resource, label_selector=informer.label_selector)
                caches.append((f"{name}/{resource.plural}", informer.store._transform, raw))
    finally:
        for remote in remotes:
            await remote.close()
        for informer in mgr.informers:
            await informer.stop()
        await kube.close()
    del mgr, remotes
    return [measure(name, transform, raw) for name, transform, raw in caches]


def table(rows: list[Obj]) -> str:
    lines = [
        "| cache | objects | KiB per object: as served / without managedFields / cached | MiB cached |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cache']} | {r['objects']:,} | {r['servedKiBPerObject']:.1f} / "
            f"{r['noManagedFieldsKiBPerObject']:.1f} / {r['cachedKiBPerObject']:.1f} | "
            f"{r['cachedKiB'] / KIB:.1f} |"
        )
    totals = [sum(r[f"{c}KiB"] for r in rows) / KIB for c in ("served", "noManagedFields", "cached")]
    objects = sum(r["objects"] for r in rows)
    lines.append(f"| total, MiB | {objects:,} | {totals[0]:.1f} / {totals[1]:.1f} / {totals[2]:.1f} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="manager_memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dir", required=True, help="the running fleet's directory (localfleet --dir)")
    p.add_argument("--json", help="also write the rows as JSON")
    args = p.parse_args(argv)
    setup_logging("warning")
    rows = asyncio.run(amain(Path(args.dir)))
    print(table(rows))
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
