"""The Configuration's `admissionFairSharing` in v1beta1 and v1beta2: upstream's defaults
(apis/config/*/defaults.go) and validation messages (pkg/config/validation.go)."""

import pytest

from kueue_domain.config import ConfigError, go_duration, parse_config


@pytest.mark.parametrize("version", ["config.kueue.x-k8s.io/v1beta1", "config.kueue.x-k8s.io/v1beta2"])
def test_defaults_and_values(version):
    config = parse_config({"apiVersion": version, "admissionFairSharing": {}})
    afs = config.admission_fair_sharing
    assert (afs.half_life_seconds, afs.sampling_interval_seconds, afs.resource_weights) == (0.0, 300.0, {})
    assert config.admission_fair_sharing_enabled == afs  # the gate is on upstream
    config = parse_config(
        {
            "apiVersion": version,
            "admissionFairSharing": {
                "usageHalfLifeTime": "168h",
                "usageSamplingInterval": "30s",
                "resourceWeights": {"cpu": 2, "nvidia.com/gpu": 0.5},
            },
        }
    )
    afs = config.admission_fair_sharing
    assert (afs.half_life_seconds, afs.sampling_interval_seconds) == (168 * 3600.0, 30.0)
    assert afs.resource_weights == {"cpu": 2.0, "nvidia.com/gpu": 0.5}
    assert parse_config({"apiVersion": version}).admission_fair_sharing is None


def test_the_gate_off_leaves_it_unused():
    config = parse_config(
        {"admissionFairSharing": {"usageHalfLifeTime": "1h"}, "featureGates": {"AdmissionFairSharing": False}}
    )
    assert config.admission_fair_sharing is not None
    assert config.admission_fair_sharing_enabled is None
    assert config.warnings == ()


def test_invalid_values_are_refused_with_upstreams_messages():
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "admissionFairSharing": {
                    "usageHalfLifeTime": "-90m",
                    "usageSamplingInterval": "-1s",
                    "resourceWeights": {"memory": 0.5, "cpu": -1},
                },
            },
            "kueue.yaml",
        )
    assert caught.value.problems == [
        'admissionFairSharing.usageHalfLifeTime: Invalid value: "-1h30m0s": '
        "must be greater than or equal to 0",
        # Upstream's message shows usageHalfLifeTime's value here.
        'admissionFairSharing.usageSamplingInterval: Invalid value: "-1h30m0s": must be greater than 0',
        'admissionFairSharing.resourceWeights[cpu]: Invalid value: {"cpu":-1,"memory":0.5}: '
        "must be greater than or equal to 0",
    ]
    with pytest.raises(ConfigError) as caught:
        parse_config({"admissionFairSharing": {"usageHalfLifeTme": "1h", "resourceWeights": {"cpu": "x"}}})
    assert caught.value.problems == [
        'unknown field "admissionFairSharing.usageHalfLifeTme" (did you mean "usageHalfLifeTime"?)',
        "admissionFairSharing.resourceWeights[cpu]: must be a number, got 'x'",
    ]


def test_go_duration_strings():
    assert [go_duration(s) for s in (0, 1.5, 90, 3600, -5400, 0.002)] == [
        "0s",
        "1.5s",
        "1m30s",
        "1h0m0s",
        "-1h30m0s",
        "2ms",
    ]
