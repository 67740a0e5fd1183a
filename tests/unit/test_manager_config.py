"""manager.config: the manager reads the worker_agent's Configuration with its own Lease name,
parses and validates `multiKueue`, and defaults feature gates as upstream does."""

from __future__ import annotations

import pytest

from kueue_domain import features
from kueue_domain.config import ConfigError
from manager.config import feature_enabled, parse_manager_config

INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_manager_config(data, "manager.yaml")
    assert caught.value.source == "manager.yaml"
    return caught.value.problems


# -- the Lease -------------------------------------------------------------------------------


def test_lease_name_defaults_to_the_managers_own() -> None:
    assert parse_manager_config({}).leader_election_id == "kueue-federation-manager"
    assert parse_manager_config(None).leader_election_id == "kueue-federation-manager"
    assert parse_manager_config({"leaderElection": {"leaderElect": True}}).leader_election_id == (
        "kueue-federation-manager"
    )


def test_lease_name_from_leader_election_resource_name() -> None:
    config = parse_manager_config({"leaderElection": {"resourceName": "my-manager-lease"}})
    assert config.leader_election_id == "my-manager-lease"


# -- multiKueue ------------------------------------------------------------------------------


def test_multikueue_defaults() -> None:
    mk = parse_manager_config({}).multikueue
    assert mk.gc_interval_seconds == 60
    assert mk.origin == "multikueue"
    assert mk.worker_lost_timeout_seconds == 900
    assert mk.dispatcher_name == ALL_AT_ONCE
    assert mk.incremental_step_size == 3


def test_multikueue_fields_are_parsed() -> None:
    mk = parse_manager_config(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "multiKueue": {
                "gcInterval": "90s",
                "origin": "manager-east",
                "workerLostTimeout": "1h30m",
                "dispatcherName": INCREMENTAL,
                "incrementalDispatcherConfig": {"stepSize": 2},
            },
        }
    ).multikueue
    assert mk.gc_interval_seconds == 90
    assert mk.origin == "manager-east"
    assert mk.worker_lost_timeout_seconds == 5400
    assert mk.dispatcher_name == INCREMENTAL
    assert mk.incremental_step_size == 2


def test_zero_gc_interval_is_allowed() -> None:
    assert parse_manager_config({"multiKueue": {"gcInterval": "0"}}).multikueue.gc_interval_seconds == 0


def test_an_external_dispatcher_name_is_accepted() -> None:
    config = parse_manager_config({"multiKueue": {"dispatcherName": "example.com/my-dispatcher"}})
    assert config.multikueue.dispatcher_name == "example.com/my-dispatcher"


def test_incremental_dispatcher_step_defaults_to_three() -> None:
    config = parse_manager_config({"multiKueue": {"dispatcherName": INCREMENTAL}})
    assert config.multikueue.incremental_step_size == 3


@pytest.mark.parametrize(
    ("multikueue", "expected"),
    [
        ({"gcInterval": "-1m"}, "multiKueue.gcInterval: must be greater than or equal to 0"),
        ({"workerLostTimeout": "-5s"}, "multiKueue.workerLostTimeout: must be greater than or equal to 0"),
        ({"origin": "not a label!"}, "multiKueue.origin: 'not a label!' is not a valid label value"),
        ({"origin": "x" * 64}, f"multiKueue.origin: {'x' * 64!r} is not a valid label value"),
        ({"origin": "-leading-dash"}, "multiKueue.origin: '-leading-dash' is not a valid label value"),
        (
            {"incrementalDispatcherConfig": {"stepSize": 2}},
            "multiKueue.incrementalDispatcherConfig: may only be set when dispatcherName is "
            "'kueue.x-k8s.io/multikueue-dispatcher-incremental'",
        ),
        (
            {"dispatcherName": INCREMENTAL, "incrementalDispatcherConfig": {"stepSize": 0}},
            "multiKueue.incrementalDispatcherConfig.stepSize: must be greater than or equal to 1",
        ),
        (
            {"dispatcherName": INCREMENTAL, "incrementalDispatcherConfig": {"stepSize": -2}},
            "multiKueue.incrementalDispatcherConfig.stepSize: must be greater than or equal to 1",
        ),
        (
            {"gcInterval": "soon"},
            "multiKueue.gcInterval: invalid duration 'soon': use Go syntax such as 30s, 5m, 1h30m",
        ),
        ({"stepSize": 2}, 'unknown field "multiKueue.stepSize"'),
    ],
)
def test_bad_multikueue_values_are_refused(multikueue: dict, expected: str) -> None:
    assert problems({"multiKueue": multikueue}) == [expected]


def test_every_problem_is_reported_at_once() -> None:
    found = problems({"multiKueue": {"gcInterval": "-1s", "workerLostTimeout": "-1s", "origin": "bad value"}})
    assert found == [
        "multiKueue.gcInterval: must be greater than or equal to 0",
        "multiKueue.workerLostTimeout: must be greater than or equal to 0",
        "multiKueue.origin: 'bad value' is not a valid label value",
    ]


def test_config_error_message_names_the_file_and_each_problem() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_manager_config({"multiKueue": {"gcInterval": "-1s"}}, "/etc/kueue/manager.yaml")
    assert str(caught.value) == (
        "invalid configuration /etc/kueue/manager.yaml:\n"
        "  - multiKueue.gcInterval: must be greater than or equal to 0"
    )


# -- feature gates ---------------------------------------------------------------------------


def test_feature_gate_defaults_are_upstream_v0_19s() -> None:
    config = parse_manager_config({})
    assert feature_enabled(config, features.MULTIKUEUE) is True
    assert feature_enabled(config, features.MULTIKUEUE_CLUSTER_PROFILE) is False
    # Alpha and off in v0.19 (on from v0.20).
    assert feature_enabled(config, features.MULTIKUEUE_KUBECONFIG_PATH_VALIDATION) is False
    assert feature_enabled(config, features.MULTIKUEUE_INCREMENTAL_DISPATCHER_CONFIG) is True
    assert feature_enabled(config, features.MULTIKUEUE_INCREMENTAL_DISPATCHER_RESPECT_CONFIG_ORDER) is True
    assert feature_enabled(config, "WorkloadIdentifierAnnotations") is True
    with pytest.raises(KeyError):
        feature_enabled(config, "NoSuchGate")


def test_feature_gates_in_the_file_override_the_defaults() -> None:
    config = parse_manager_config(
        {
            "featureGates": {
                "MultiKueueClusterProfile": True,
                "MultiKueueIncrementalDispatcherRespectConfigOrder": False,
            }
        }
    )
    assert feature_enabled(config, "MultiKueueClusterProfile") is True
    assert feature_enabled(config, "MultiKueueIncrementalDispatcherRespectConfigOrder") is False
    assert feature_enabled(config, features.MULTIKUEUE) is True


def test_an_unknown_feature_gate_in_the_file_is_refused() -> None:
    with pytest.raises(ConfigError, match="featureGates: unrecognized feature gate: SomethingNew"):
        parse_manager_config({"featureGates": {"SomethingNew": True}})
