"""worker_agent --config: a Kueue v1beta1 Configuration file, strictly checked, upstream defaults."""

from __future__ import annotations

import pytest
import yaml

from kueue_domain.config import ConfigError, load_config, parse_config, parse_duration

FULL_V1BETA1 = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: :8081
metrics:
  bindAddress: :8080
  enableClusterQueueResources: true
webhook:
  port: 9443
leaderElection:
  leaderElect: true
  resourceName: c1f6bfd2.kueue.x-k8s.io
controller:
  groupKindConcurrency:
    Job.batch: 5
    Workload.kueue.x-k8s.io: 10
clientConnection:
  qps: 50
  burst: 100
manageJobsWithoutQueueName: true
managedJobsNamespaceSelector:
  matchLabels:
    kueue-managed: "true"
waitForPodsReady:
  enable: true
  timeout: 10m
  recoveryTimeout: 3m
  requeuingStrategy:
    timestamp: Creation
    backoffLimitCount: 5
    backoffBaseSeconds: 10
integrations:
  frameworks:
  - batch/job
  - leaderworkerset.x-k8s.io/leaderworkerset
  labelKeysToCopy:
  - team
fairSharing:
  enable: true
  preemptionStrategies: [LessThanInitialShare]
resources:
  excludeResourcePrefixes: [example.com/]
  transformations:
  - input: nvidia.com/mig-1g.5gb
    strategy: Replace
    outputs:
      example.com/accelerator-memory: 5Gi
multiKueue:
  gcInterval: 30s
  origin: my-manager
  workerLostTimeout: 5m
featureGates:
  PartialAdmission: true
"""


def test_a_full_upstream_v1beta1_file_is_accepted_with_its_values(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(FULL_V1BETA1)
    cfg = load_config(path)
    assert cfg.namespace == "kueue-system"
    assert cfg.manage_jobs_without_queue_name is True
    assert cfg.managed_jobs_namespace_selector == {"matchLabels": {"kueue-managed": "true"}}
    assert cfg.qps == 50 and cfg.burst == 100
    wfpr = cfg.wait_for_pods_ready
    assert wfpr.timeout_seconds == 600 and wfpr.recovery_timeout_seconds == 180
    assert wfpr.block_admission is True  # v1beta1: defaults to the value of enable
    assert wfpr.requeuing.timestamp == "Creation"
    assert wfpr.requeuing.backoff_limit_count == 5 and wfpr.requeuing.backoff_base_seconds == 10
    assert wfpr.requeuing.backoff_max_seconds == 3600
    assert cfg.frameworks == ("batch/job", "leaderworkerset.x-k8s.io/leaderworkerset")
    assert cfg.pod_integration_enabled  # LWS implies pod
    assert cfg.label_keys_to_copy == ("team",)
    assert cfg.fair_sharing.preemption_strategies == ("LessThanInitialShare",)
    assert cfg.requests.transformations[0].strategy == "Replace"
    assert cfg.requests.exclude_resource_prefixes == ("example.com/",)
    assert cfg.multikueue.gc_interval_seconds == 30 and cfg.multikueue.origin == "my-manager"
    assert cfg.multikueue.worker_lost_timeout_seconds == 300
    assert cfg.feature_gates == {"PartialAdmission": True}
    assert cfg.warnings == ()


def test_v1beta1_defaults():
    cfg = parse_config({})
    assert cfg.namespace == "kueue-system"
    assert cfg.manage_jobs_without_queue_name is False
    assert cfg.managed_jobs_namespace_selector == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "kueue-system"],
            }
        ]
    }
    assert cfg.wait_for_pods_ready is None  # v1beta1: enable defaults to false
    assert cfg.frameworks == ("batch/job",)
    assert not cfg.pod_integration_enabled
    assert cfg.fair_sharing is None
    assert (cfg.qps, cfg.burst) == (20.0, 30)
    assert cfg.multikueue.worker_lost_timeout_seconds == 900
    assert cfg.multikueue.dispatcher_name == "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"


def test_selector_default_follows_the_configured_namespace():
    cfg = parse_config({"namespace": "queues"})
    assert cfg.managed_jobs_namespace_selector["matchExpressions"][0]["values"] == ["kube-system", "queues"]


def test_waitforpodsready_enabled_uses_v1beta1_timeout_default():
    wfpr = parse_config({"waitForPodsReady": {"enable": True}}).wait_for_pods_ready
    assert wfpr.timeout_seconds == 300 and wfpr.block_admission is True
    assert wfpr.requeuing.timestamp == "Eviction"
    assert (
        parse_config(
            {"waitForPodsReady": {"enable": True, "blockAdmission": False}}
        ).wait_for_pods_ready.block_admission
        is False
    )


def test_fair_sharing_enabled_without_strategies_gets_both():
    cfg = parse_config({"fairSharing": {"enable": True}})
    assert cfg.fair_sharing.preemption_strategies == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")


def problems_of(data) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data, "test.yaml")
    assert "test.yaml" in str(err.value)
    return err.value.problems


def test_unknown_fields_are_refused_with_their_path_and_a_suggestion():
    problems = problems_of({"waitForPodsReady": {"enabled": True}, "integration": {}, "bogus": 1})
    assert 'unknown field "waitForPodsReady.enabled" (did you mean "enable"?)' in problems
    assert 'unknown field "integration" (did you mean "integrations"?)' in problems
    assert 'unknown field "bogus"' in problems


def test_every_problem_is_reported_at_once():
    problems = problems_of(
        {
            "clientConnection": {"qps": "fast"},
            "waitForPodsReady": {"enable": True, "timeout": "ten minutes"},
            "integrations": {"frameworks": "batch/job"},
        }
    )
    assert len(problems) == 3
    assert any(p.startswith("clientConnection.qps: must be a number") for p in problems)
    assert any(p.startswith("waitForPodsReady.timeout: invalid duration 'ten minutes'") for p in problems)
    assert "integrations.frameworks: must be a list" in problems


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"apiVersion": "config.kueue.x-k8s.io/v1alpha1"},
            'apiVersion: must be "config.kueue.x-k8s.io/v1beta1" or "config.kueue.x-k8s.io/v1beta2"',
        ),
        ({"kind": "KueueConfig"}, 'kind: must be "Configuration"'),
        (
            {"waitForPodsReady": {"enable": True, "timeout": "0s"}},
            "waitForPodsReady.timeout: must be greater than 0",
        ),
        (
            {"waitForPodsReady": {"enable": True, "requeuingStrategy": {"timestamp": "Now"}}},
            'waitForPodsReady.requeuingStrategy.timestamp: must be "Eviction" or "Creation"',
        ),
        (
            {"waitForPodsReady": {"enable": True, "requeuingStrategy": {"backoffBaseSeconds": -1}}},
            "waitForPodsReady.requeuingStrategy.backoffBaseSeconds: must be greater than or equal to 0",
        ),
        ({"integrations": {"frameworks": ["batch/job", "batch/job"]}}, 'duplicate framework "batch/job"'),
        (
            {"integrations": {"frameworks": ["batch/jobs"]}},
            'unknown framework "batch/jobs" (did you mean "batch/job"?)',
        ),
        (
            {
                "fairSharing": {
                    "enable": True,
                    "preemptionStrategies": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"],
                }
            },
            "fairSharing.preemptionStrategies: must be one of",
        ),
        (
            {"multiKueue": {"origin": "not a label!"}},
            "multiKueue.origin: 'not a label!' is not a valid label value",
        ),
        ({"multiKueue": {"gcInterval": "-1m"}}, "multiKueue.gcInterval: must be greater than or equal to 0"),
        (
            {
                "resources": {
                    "transformations": [{"input": "a", "outputs": {}}, {"input": "a", "outputs": {}}]
                }
            },
            'resources.transformations[1].input: duplicate input "a"',
        ),
        ({"manageJobsWithoutQueueName": "yes"}, "manageJobsWithoutQueueName: must be true or false"),
        ({"clientConnection": {"qps": 0}}, "clientConnection: qps and burst must be greater than 0"),
    ],
)
def test_invalid_values_name_the_field(data, expected):
    assert any(expected in p for p in problems_of(data)), problems_of(data)


def test_frameworks_we_do_not_implement_are_accepted_with_a_warning():
    spark = "sparkoperator.k8s.io/sparkapplication"
    cfg = parse_config({"integrations": {"frameworks": ["batch/job", spark], "podOptions": {}}})
    assert cfg.frameworks == ("batch/job", spark)
    assert any(spark in w for w in cfg.warnings)
    assert any("podOptions is deprecated" in w for w in cfg.warnings)


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("namespace: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text(yaml.safe_dump("just a string"))
    with pytest.raises(ConfigError, match="one YAML object"):
        load_config(scalar)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("30s", 30),
        ("5m", 300),
        ("1h30m", 5400),
        ("300ms", 0.3),
        ("1.5h", 5400),
        ("-2s", -2),
        ("2m3.5s", 123.5),
    ],
)
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "5 m", "1d", "five"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_a_bad_quantity_in_a_transformation_is_refused():
    problems = problems_of({"resources": {"transformations": [{"input": "a", "outputs": {"b": "lots"}}]}})
    assert len(problems) == 1 and problems[0].startswith("resources.transformations:")
    assert "lots" in problems[0]


def test_object_retention_policies_are_read_as_seconds():
    config = parse_config(
        {
            "objectRetentionPolicies": {
                "workloads": {"afterFinished": "1h30m", "afterDeactivatedByKueue": "0s"}
            }
        }
    )
    assert config.workload_retention.after_finished_seconds == 5400.0
    assert config.workload_retention.after_deactivated_by_kueue_seconds == 0.0
    unset = parse_config({}).workload_retention
    assert (unset.after_finished_seconds, unset.after_deactivated_by_kueue_seconds) == (None, None)


def test_a_negative_retention_is_refused_with_the_field_named():
    with pytest.raises(ConfigError) as err:
        parse_config({"objectRetentionPolicies": {"workloads": {"afterDeactivatedByKueue": "-5m"}}})
    assert (
        'objectRetentionPolicies.workloads.afterDeactivatedByKueue: Invalid value: "-5m": '
        "must be greater than or equal to 0"
    ) in str(err.value)


def test_v1beta2_is_read_with_its_own_meaning():
    """v1beta2 has no `enable` fields: `fairSharing` present turns it on, and waitForPodsReady is
    on unless DisableWaitForPodsReady (30m timeout, blockAdmission false, recovery = timeout)."""
    cfg = parse_config(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
            "tls": {"minVersion": "VersionTLS12", "cipherSuites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]},
            "metrics": {"enableClusterQueueResources": True},
        }
    )
    assert cfg.fair_sharing is not None
    wfpr = cfg.wait_for_pods_ready
    assert (wfpr.timeout_seconds, wfpr.block_admission, wfpr.recovery_timeout_seconds) == (1800, False, 1800)
    set_timeout = parse_config(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "waitForPodsReady": {"timeout": "2m"}}
    ).wait_for_pods_ready
    assert (set_timeout.timeout_seconds, set_timeout.recovery_timeout_seconds) == (120, 120)
    off = parse_config(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "featureGates": {"DisableWaitForPodsReady": True}}
    )
    assert off.wait_for_pods_ready is None and off.fair_sharing is None


def test_v1beta1_fields_are_refused_in_v1beta2():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "waitForPodsReady": {"enable": True, "timeout": "5m"},
            }
        )
    assert "waitForPodsReady.enable: unknown field in config.kueue.x-k8s.io/v1beta2" in str(err.value)


def test_no_file_means_upstreams_v0_19_defaults():
    """Upstream defaults a missing file as v1beta2: waitForPodsReady on (v0.19's change)."""
    cfg = load_config(None)
    assert cfg.wait_for_pods_ready is not None and cfg.wait_for_pods_ready.timeout_seconds == 1800
    assert cfg.fair_sharing is None


def test_the_visibility_server_block_gives_the_visibility_address():
    assert parse_config({}).visibility_bind_address is None
    cfg = parse_config({"visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": 9443}})
    assert cfg.visibility_bind_address == "127.0.0.1:9443"
    assert parse_config({"visibilityServer": {}}).visibility_bind_address == ":8082"
    with pytest.raises(ConfigError) as err:
        parse_config({"visibilityServer": {"bindAddress": "localhost", "bindPort": 0}})
    assert 'visibilityServer.bindAddress: Invalid value: "localhost": must be a valid IP address' in str(
        err.value
    )
    assert "visibilityServer.bindPort: Invalid value: 0: must be a valid port number (1-65535)" in str(
        err.value
    )


def test_a_configuration_marshalled_from_go_is_read_with_its_zero_values_defaulted():
    # Upstream's sequential e2e suites write back the Configuration they read, marshalled from Go:
    # unset durations and names come as "0s" and "", which upstream's defaulting fills in.
    cfg = parse_config(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "leaderElection": {
                "leaderElect": True,
                "leaseDuration": "0s",
                "renewDeadline": "0s",
                "retryPeriod": "0s",
                "resourceLock": "",
                "resourceName": "",
                "resourceNamespace": "kueue-system",
            },
            "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
        }
    )
    assert (cfg.lease_duration_seconds, cfg.renew_deadline_seconds, cfg.retry_period_seconds) == (15, 10, 2)
    assert cfg.leader_election_id == "c1f6bfd2.kueue.x-k8s.io"
    assert cfg.requests.quota_check_strategy == "IgnoreUndeclared"
