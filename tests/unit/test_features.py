"""kueue_domain.features: upstream v0.19's gates and defaults, how they are set (Configuration's
featureGates, --feature-gates), what is refused, and that docs/feature-gates.md matches."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kueue_domain import features
from kueue_domain.config import ConfigError, parse_config, with_feature_gate_flag
from kueue_domain.features import GATES, FeatureGateError
from manager.config import parse_manager_config

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_upstream_v0_19s():
    gates = parse_config({}).features
    assert gates.enabled(features.UNADMITTED_WORKLOADS_OBSERVABILITY) is False
    assert gates.enabled(features.LOCAL_QUEUE_METRICS) is True
    assert gates.enabled(features.LOCAL_QUEUE_DEFAULTING) is True
    assert gates.enabled(features.WORKLOAD_PRIORITY_CLASS_DEFAULTING) is False
    assert gates.enabled(features.PARTIAL_ADMISSION) is True
    assert gates.enabled(features.MULTIKUEUE) is True
    assert gates.enabled(features.MULTIKUEUE_KUBECONFIG_PATH_VALIDATION) is False
    assert gates.enabled("UnadmittedWorkloadsExplicitStatus") is False
    assert GATES["HierarchicalCohorts"].locked


def test_configuration_feature_gates_override_defaults():
    config = parse_config(
        {"featureGates": {"UnadmittedWorkloadsObservability": True, "LocalQueueMetrics": False}}
    )
    assert config.features.enabled(features.UNADMITTED_WORKLOADS_OBSERVABILITY) is True
    assert config.features.enabled(features.LOCAL_QUEUE_METRICS) is False
    assert config.feature_gates == {"UnadmittedWorkloadsObservability": True, "LocalQueueMetrics": False}


def test_unknown_and_locked_gates_are_refused_with_the_field():
    with pytest.raises(ConfigError) as caught:
        parse_config({"featureGates": {"NoSuchGate": True, "HierarchicalCohorts": False}}, "kueue.yaml")
    (problem,) = caught.value.problems
    assert problem == (
        "featureGates: unrecognized feature gate: NoSuchGate; "
        "cannot set feature gate HierarchicalCohorts to false, feature is locked to true"
    )


def test_a_gate_we_do_not_implement_is_accepted_with_a_warning():
    config = parse_config({"featureGates": {"TopologyAwareScheduling": False, "ShortWorkloadNames": False}})
    assert config.warnings == (
        "featureGates: TopologyAwareScheduling=false is not honoured: this feature is not implemented here",
    )
    config = parse_config({"featureGates": {"FlavorFungibility": False}})
    assert config.warnings == (
        "featureGates: FlavorFungibility=false is not honoured: "
        "we always behave as upstream does with FlavorFungibility=true",
    )


def test_parse_flag_as_upstream_accepts_it():
    assert features.parse_flag("UnadmittedWorkloadsObservability=true, LocalQueueMetrics=false") == {
        "UnadmittedWorkloadsObservability": True,
        "LocalQueueMetrics": False,
    }
    assert features.parse_flag("PartialAdmission=1,MultiKueue=F") == {
        "PartialAdmission": True,
        "MultiKueue": False,
    }
    assert features.parse_flag("") == {}
    with pytest.raises(FeatureGateError, match="missing bool value for PartialAdmission"):
        features.parse_flag("PartialAdmission")
    with pytest.raises(
        FeatureGateError, match="invalid value of PartialAdmission=yes, must be true or false"
    ):
        features.parse_flag("PartialAdmission=yes")


def test_flag_applies_to_both_processes_and_not_with_the_configuration():
    config = with_feature_gate_flag(parse_config({}), "UnadmittedWorkloadsObservability=true")
    assert config.features.enabled(features.UNADMITTED_WORKLOADS_OBSERVABILITY) is True
    manager = with_feature_gate_flag(parse_manager_config({}), "MultiKueueClusterProfile=true")
    assert manager.features.enabled(features.MULTIKUEUE_CLUSTER_PROFILE) is True
    with pytest.raises(ConfigError, match="unrecognized feature gate: Bogus"):
        with_feature_gate_flag(parse_config({}), "Bogus=true")
    both = parse_config({"featureGates": {"PartialAdmission": False}})
    with pytest.raises(ConfigError, match="both with --feature-gates and in the Configuration"):
        with_feature_gate_flag(both, "LocalQueueMetrics=false")


@pytest.mark.parametrize("process", ["worker_agent", "manager"])
def test_a_bad_feature_gates_flag_stops_start_up(process):
    result = subprocess.run(
        [sys.executable, "-m", process, "--feature-gates", "UnadmittedWorkloadsObservability=maybe"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert (
        "invalid value of UnadmittedWorkloadsObservability=maybe, must be true or false" in result.stderr
    ), result.stderr
    assert "--feature-gates" in result.stderr


def test_docs_table_matches_the_registry():
    """docs/feature-gates.md lists every gate with upstream's default."""
    text = (ROOT / "docs" / "feature-gates.md").read_text()
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`(\w+)`\s*\|\s*(true|false)\s*\|", line)
        if match:
            rows[match.group(1)] = match.group(2) == "true"
    assert rows == {name: gate.default for name, gate in GATES.items()}
