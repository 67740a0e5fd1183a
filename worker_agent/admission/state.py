"""`AdmissionState`: the parts of the admission state of one cluster, put together."""

from __future__ import annotations

from typing import Any, TextIO

from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.events import EventRecorder
from kueue_domain.config import Configuration
from worker_agent.admission.decision_log import DecisionLog
from worker_agent.admission.flush import InadmissibleFlush
from worker_agent.admission.loop import SchedulingLoop
from worker_agent.admission.pending import PendingConditionWrites
from worker_agent.admission.routing import EventRouting
from worker_agent.admission.structure import SnapshotStructure
from worker_agent.admission.writes import DecisionWrites


class AdmissionState(
    EventRouting,
    SnapshotStructure,
    InadmissibleFlush,
    SchedulingLoop,
    DecisionWrites,
    PendingConditionWrites,
):
    """Informers, the cache (snapshot) and the queue manager of one cluster, the scheduling loop
    over them and the writes of its decisions: one instance, each part in its own module."""

    def __init__(
        self,
        kube: KubeClient,
        config: Configuration,
        clock: Clock | None = None,
        metrics: Any = None,
        recorder: EventRecorder | None = None,
        decision_log: TextIO | None = None,
    ) -> None:
        self._init_core(kube, config, clock, metrics, recorder)
        # `--decision-log`: one JSON line per scheduling cycle and per inadmissible flush.
        self.decision_log = DecisionLog(decision_log)
        self._init_informers(kube)
        self._init_lookups()
        self._init_structure()
        self._init_flush()
        self._init_routing()
        self._init_loop()
        self._init_decision_writes()
        self._init_pending_writes()
        self._wire_handlers()
