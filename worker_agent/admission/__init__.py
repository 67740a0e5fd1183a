"""The admission state of one cluster and the scheduling loop.

`AdmissionState` keeps Kueue's two in-memory structures up to date from informer events: the
cache (a `Snapshot` of quota and of every workload holding quota) and the queue manager (pending
workloads per ClusterQueue). The scheduling loop runs engine cycles over them and writes each
decision back with one status apply; the engine itself never does I/O.

One module a responsibility: core (what all parts share), informers (the caches and their
listeners), lookups (a workload's queues and requests), routing (informer events into the cache
and the queues), structure (the quota trees and ClusterQueues' Active state), flush (batched
retries of parked workloads), loop (the scheduling cycles), decision_log (`--decision-log`),
writes (admissions and evictions) and pending (pending conditions); state puts them together.
"""

from worker_agent.admission.informers import (
    INDEX_CLUSTER_QUEUE,
    INDEX_NAMESPACE,
    INDEX_PRIORITY_CLASS,
    INDEX_QUEUE,
    on_spec_change,
    spec_changed,
)
from worker_agent.admission.loop import CYCLE_BACKOFF_INITIAL, CYCLE_BACKOFF_MAX
from worker_agent.admission.pending import (
    MAX_PARALLEL_PENDING_WRITES,
    MESSAGE_INTERVAL_ABOVE_QPS,
    PENDING_MESSAGE_MIN_INTERVAL_SECONDS,
    PENDING_WRITE_ATTEMPTS,
    PENDING_WRITE_RETRY_SECONDS,
    resource_requests,
)
from worker_agent.admission.state import AdmissionState
from worker_agent.admission.structure import cluster_queue_active_state
from worker_agent.admission.writes import DECISION_WRITE_SLOTS, MAX_PARALLEL_PREEMPTIONS

__all__ = [
    "CYCLE_BACKOFF_INITIAL",
    "CYCLE_BACKOFF_MAX",
    "DECISION_WRITE_SLOTS",
    "INDEX_CLUSTER_QUEUE",
    "INDEX_NAMESPACE",
    "INDEX_PRIORITY_CLASS",
    "INDEX_QUEUE",
    "MAX_PARALLEL_PENDING_WRITES",
    "MAX_PARALLEL_PREEMPTIONS",
    "MESSAGE_INTERVAL_ABOVE_QPS",
    "PENDING_MESSAGE_MIN_INTERVAL_SECONDS",
    "PENDING_WRITE_ATTEMPTS",
    "PENDING_WRITE_RETRY_SECONDS",
    "AdmissionState",
    "cluster_queue_active_state",
    "on_spec_change",
    "resource_requests",
    "spec_changed",
]
