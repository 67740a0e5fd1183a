"""A workload's ClusterQueue and LocalQueue, and its computed requests (memoized while pending)."""

from __future__ import annotations

from typing import Any

from worker_agent.admission.core import Obj
from worker_agent.admission.informers import INDEX_NAMESPACE, AdmissionInformers
from worker_agent.engine import LimitRangeDefaults, WorkloadInfo


class WorkloadLookups(AdmissionInformers):
    """Read the informers' caches for what the engine needs of a workload."""

    def _init_lookups(self) -> None:
        self._overheads: dict[str, Obj] | None = None
        # Pending workloads' computed requests by UID (see workload_info), and a counter bumped
        # when a LimitRange or RuntimeClass changes.
        self._requests_memo: dict[str, tuple[tuple, list[Any]]] = {}
        self._requests_generation = 0

    def cluster_queue_for(self, wl: Obj) -> str | None:
        """The ClusterQueue of a workload: from its admission, else through its LocalQueue."""
        admission = (wl.get("status") or {}).get("admission")
        if admission and admission.get("clusterQueue"):
            return admission["clusterQueue"]
        lq = self.local_queue_for(wl)
        if lq is None:
            return None
        return (lq.get("spec") or {}).get("clusterQueue")

    def local_queue_for(self, wl: Obj) -> Obj | None:
        queue = (wl.get("spec") or {}).get("queueName")
        if not queue:
            return None
        return self.local_queues.get_object(queue, wl["metadata"].get("namespace"))

    def limit_range_defaults(self, namespace: str) -> LimitRangeDefaults | None:
        ranges = self.limit_ranges.by_index(INDEX_NAMESPACE, namespace)
        return LimitRangeDefaults.summarize(ranges) if ranges else None

    def runtime_class_overheads(self) -> dict[str, Obj]:
        """RuntimeClass name -> pod overhead, rebuilt only when a RuntimeClass changes."""
        if self._overheads is None:
            self._overheads = {
                rc["metadata"]["name"]: (rc.get("overhead") or {}).get("podFixed") or {}
                for rc in self.runtime_classes.list()
            }
        return self._overheads

    def workload_info(self, wl: Obj, cluster_queue: str) -> WorkloadInfo:
        meta = wl["metadata"]
        status = wl.get("status") or {}
        memo_key = None
        podsets = None
        namespace = meta.get("namespace", "")
        if status.get("admission"):
            self._requests_memo.pop(meta.get("uid", ""), None)  # admitted: usage from the admission
        else:
            # A pending workload's requests depend on its spec (generation), reclaimable pods, the
            # namespace's LimitRanges and the RuntimeClasses: reuse them while none of these changed.
            reclaimable = tuple((r.get("name"), r.get("count")) for r in status.get("reclaimablePods") or ())
            memo_key = (meta.get("generation"), reclaimable, self._requests_generation)
            memo = self._requests_memo.get(meta.get("uid", ""))
            if memo is not None and memo[0] == memo_key:
                podsets = memo[1]
        info = WorkloadInfo.from_dict(
            wl,
            cluster_queue=cluster_queue,
            config=self.config.requests,
            limit_ranges=None if podsets is not None else self.limit_range_defaults(namespace),
            runtime_class_overheads=self.runtime_class_overheads() or None,
            requeuing_timestamp=self.requeuing_timestamp,
            pending_podsets=podsets,
        )
        if memo_key is not None and podsets is None:
            self._requests_memo[meta.get("uid", "")] = (memo_key, info.podsets)
        return info
