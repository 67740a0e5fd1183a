"""The manager's configuration: the same `config.kueue.x-k8s.io/v1beta1` Configuration the
worker reads (kueue_domain.config: Kueue has one file for both roles), with the manager's own
defaults, plus the few tunables that are not part of the Configuration API."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kueue_domain import api
from kueue_domain.config import Configuration, load_config, parse_config
from manager.liveness import LivenessSettings

# Both processes run in kueue-system on the manager cluster: they must not share a Lease.
MANAGER_LEADER_ELECTION_ID = "kueue-federation-manager"


@dataclasses.dataclass(frozen=True)
class ManagerOptions:
    """Tunables outside the Configuration API; tests shorten the timeouts."""

    # Remote events are batched per Workload for this long (upstream: 1 s, §0.4); shorter here
    # because it adds directly to the time from remote admission to `Admitted` on the manager.
    remote_event_batch_seconds: float = 0.25
    # A worker watch that delivers nothing (not even a bookmark) for this long counts as lost.
    watch_inactivity_timeout: float = 60.0
    # How often each worker's apiserver is probed, and the silence after which it counts as lost.
    worker_liveness: LivenessSettings = dataclasses.field(default_factory=LivenessSettings)
    kubeconfig_path_prefix: str = api.KUBECONFIG_PATH_PREFIX
    # How often kubeconfig files (locationType: Path) are checked for changes.
    path_poll_interval: float = 1.0
    workload_concurrency: int = 16
    # The Incremental dispatcher's round (upstream: 5 minutes, not configurable).
    incremental_round_seconds: float = api.INCREMENTAL_ROUND_TIMEOUT
    # The least-loaded dispatcher's round: how long one worker has to admit before the next is added.
    least_loaded_round_seconds: float = api.LEAST_LOADED_ROUND_TIMEOUT


def feature_enabled(config: Configuration, name: str) -> bool:
    """A gate's effective value (upstream v0.19 default unless set); kueue_domain.features lists them."""
    return config.features.enabled(name)


def parse_manager_config(data: Any, source: str = "<config>") -> Configuration:
    config = parse_config(data, source)
    if not ((data or {}).get("leaderElection") or {}).get("resourceName"):
        config = dataclasses.replace(config, leader_election_id=MANAGER_LEADER_ELECTION_ID)
    return config


def load_manager_config(path: str | Path | None) -> Configuration:
    return load_config(path, parse_manager_config)
