"""--kueue-cr: the Red Hat build of Kueue's `Kueue` object (kueue.openshift.io/v1) mapped onto the Kueue
Configuration with the operator's defaults, refused field by field when wrong, watched for changes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from structlog.testing import capture_logs

from kueue_domain.config import KNOWN_FRAMEWORKS, ConfigError, parse_config
from kueue_domain.operator_config import (
    FRAMEWORKS,
    FileSource,
    OperatorConfig,
    changed_fields,
    compose,
    map_kueue,
)
from manager.__main__ import build_parser as manager_parser
from manager.config import MANAGER_LEADER_ELECTION_ID, parse_manager_config
from worker_agent.__main__ import build_parser as agent_parser

# The manual's example, with every section set.
MANUAL_EXAMPLE = """
apiVersion: kueue.openshift.io/v1
kind: Kueue
metadata:
  labels:
    app.kubernetes.io/name: kueue-operator
    app.kubernetes.io/managed-by: kustomize
  name: cluster
  namespace: openshift-kueue-operator
spec:
  managementState: Managed
  config:
    integrations:
      frameworks:
      - BatchJob
      - Pod
      - LeaderWorkerSet
      labelKeysToCopy:
      - key: team
    workloadManagement:
      labelPolicy: None
    gangScheduling:
      policy: ByWorkload
      byWorkload:
        admission: Sequential
    preemption:
      preemptionPolicy: FairSharing
"""


def kueue(config: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "kueue.openshift.io/v1",
        "kind": "Kueue",
        "metadata": {"name": "cluster"},
        "spec": {"config": {"integrations": {"frameworks": ["BatchJob"]}, **(config or {})}, **spec},
    }


def configuration(obj: dict, base: dict | None = None, parse=parse_config):
    return parse(compose(base or {}, map_kueue(obj, "kueue.yaml"), "config.yaml"), "config.yaml")


def problems_of(obj) -> list[str]:
    with pytest.raises(ConfigError) as err:
        map_kueue(obj, "kueue.yaml")
    assert err.value.source == "kueue.yaml"
    return err.value.problems


# -- the mapping ----------------------------------------------------------------------------------


async def test_the_manuals_example_maps_onto_the_configuration(tmp_path: Path):
    path = tmp_path / "kueue.yaml"
    path.write_text(MANUAL_EXAMPLE)
    cfg = await OperatorConfig(FileSource(str(path))).load()
    assert cfg.frameworks == ("batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset")
    assert cfg.pod_integration_enabled
    assert cfg.label_keys_to_copy == ("team",)
    assert cfg.manage_jobs_without_queue_name is True
    assert cfg.managed_jobs_namespace_selector == {"matchLabels": {"kueue.openshift.io/managed": "true"}}
    assert cfg.wait_for_pods_ready is not None
    assert cfg.wait_for_pods_ready.block_admission is True
    assert cfg.wait_for_pods_ready.timeout_seconds == 300  # Kueue's default: the operator sets none
    assert cfg.fair_sharing is not None
    assert cfg.fair_sharing.preemption_strategies == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    assert cfg.warnings == ()
    # Everything the object does not map keeps the Configuration's defaults.
    assert cfg == parse_config(
        {
            "integrations": {
                "frameworks": ["batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"],
                "externalFrameworks": [],
                "labelKeysToCopy": ["team"],
            },
            "manageJobsWithoutQueueName": True,
            "managedJobsNamespaceSelector": {"matchLabels": {"kueue.openshift.io/managed": "true"}},
            "waitForPodsReady": {"enable": True, "blockAdmission": True},
            "fairSharing": {"enable": True},
        }
    )


def test_defaults_are_the_operators():
    """Only frameworks set (the CRD requires them): QueueName, no gang scheduling, Classical
    preemption, and only namespaces labelled kueue.openshift.io/managed=true are managed."""
    cfg = configuration(kueue())
    assert cfg.frameworks == ("batch/job",)
    assert cfg.manage_jobs_without_queue_name is False
    assert cfg.wait_for_pods_ready is None
    assert cfg.fair_sharing is None
    assert cfg.managed_jobs_namespace_selector == {"matchLabels": {"kueue.openshift.io/managed": "true"}}
    assert cfg.external_frameworks == () and cfg.label_keys_to_copy == ()


def test_an_object_without_integrations_gets_the_manuals_default_batchjob():
    obj = {"apiVersion": "kueue.openshift.io/v1", "kind": "Kueue", "metadata": {"name": "cluster"}}
    assert configuration(obj).frameworks == ("batch/job",)
    assert configuration({"spec": {"config": {}}}).frameworks == ("batch/job",)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_every_operator_framework_maps_to_a_kueue_framework(name: str):
    cfg = configuration(kueue({"integrations": {"frameworks": [name]}}))
    assert cfg.frameworks == (FRAMEWORKS[name],)
    assert FRAMEWORKS[name] in KNOWN_FRAMEWORKS


def test_framework_names_match_kueues():
    assert FRAMEWORKS["BatchJob"] == "batch/job"
    assert FRAMEWORKS["Pod"] == "pod"
    assert FRAMEWORKS["Deployment"] == "deployment"
    assert FRAMEWORKS["StatefulSet"] == "statefulset"
    assert FRAMEWORKS["JobSet"] == "jobset.x-k8s.io/jobset"
    assert FRAMEWORKS["LeaderWorkerSet"] == "leaderworkerset.x-k8s.io/leaderworkerset"
    assert FRAMEWORKS["PyTorchJob"] == "kubeflow.org/pytorchjob"
    assert FRAMEWORKS["TrainJob"] == "trainer.kubeflow.org/trainjob"
    assert FRAMEWORKS["AppWrapper"] == "workload.codeflare.dev/appwrapper"
    assert len(FRAMEWORKS) == 18


@pytest.mark.parametrize(("policy", "manage"), [("", False), ("QueueName", False), ("None", True)])
def test_label_policy(policy: str, manage: bool):
    cfg = configuration(kueue({"workloadManagement": {"labelPolicy": policy}}))
    assert cfg.manage_jobs_without_queue_name is manage


@pytest.mark.parametrize(
    ("gang", "enabled", "block"),
    [
        ({}, False, None),
        ({"policy": ""}, False, None),
        ({"policy": "None"}, False, None),
        ({"policy": "ByWorkload", "byWorkload": {"admission": "Parallel"}}, True, False),
        ({"policy": "ByWorkload", "byWorkload": {"admission": "Sequential"}}, True, True),
        ({"policy": "ByWorkload", "byWorkload": {"admission": ""}}, True, False),  # default: Parallel
        ({"policy": "ByWorkload", "byWorkload": {}}, True, False),
    ],
)
def test_gang_scheduling_maps_to_wait_for_pods_ready(gang: dict, enabled: bool, block: bool | None):
    wfpr = configuration(kueue({"gangScheduling": gang})).wait_for_pods_ready
    assert (wfpr is not None) is enabled
    if enabled:
        assert wfpr.block_admission is block


@pytest.mark.parametrize(("policy", "fair"), [("", False), ("Classical", False), ("FairSharing", True)])
def test_preemption_policy_maps_to_fair_sharing(policy: str, fair: bool):
    cfg = configuration(kueue({"preemption": {"preemptionPolicy": policy}}))
    assert (cfg.fair_sharing is not None) is fair


def test_external_frameworks_and_label_keys():
    cfg = configuration(
        kueue(
            {
                "integrations": {
                    "frameworks": ["BatchJob"],
                    "externalFrameworks": [
                        {"group": "workload.codeflare.dev", "resource": "appwrappers", "version": "v1beta2"}
                    ],
                    "labelKeysToCopy": [{"key": "example.com/team"}, {"key": "project"}],
                }
            }
        )
    )
    assert cfg.external_frameworks == ("appwrappers.v1beta2.workload.codeflare.dev",)
    assert cfg.label_keys_to_copy == ("example.com/team", "project")


def test_null_fields_count_as_omitted():
    """Go clients write `null` for empty lists; a YAML key without a value is null too."""
    obj = kueue({"integrations": {"frameworks": ["Pod"], "externalFrameworks": None}, "gangScheduling": None})
    obj["status"] = None
    cfg = configuration(obj)
    assert cfg.frameworks == ("pod",) and cfg.wait_for_pods_ready is None


def test_status_and_metadata_of_a_cluster_object_are_accepted():
    obj = kueue()
    obj["metadata"].update({"resourceVersion": "42", "uid": "u", "generation": 3, "managedFields": []})
    obj["status"] = {"conditions": [{"type": "Available", "status": "True"}], "observedGeneration": 3}
    obj["spec"].update({"managementState": "Managed", "logLevel": "Debug", "operatorLogLevel": "Normal"})
    assert configuration(obj).frameworks == ("batch/job",)


def test_unimplemented_frameworks_are_reported_in_the_objects_terms(tmp_path: Path):
    path = tmp_path / "kueue.yaml"
    path.write_text(yaml.safe_dump(kueue({"integrations": {"frameworks": ["BatchJob", "SparkApplication"]}})))
    operator = OperatorConfig(FileSource(str(path)))
    operator.preliminary()
    _, cfg = operator.build(yaml.safe_load(path.read_text()))
    assert cfg.warnings == (
        "spec.config.integrations.frameworks: SparkApplication "
        '("sparkoperator.k8s.io/sparkapplication") is not implemented by this agent and is ignored',
    )


def test_management_state_other_than_managed_is_reported():
    mapping = map_kueue(kueue(managementState="Removed"))
    assert mapping.warnings == (
        'spec.managementState: "Removed" has no effect here: the process runs with the mapped configuration',
    )
    assert map_kueue(kueue(managementState="Managed")).warnings == ()


# -- refused values ------------------------------------------------------------------------------


def test_bad_enum_values_are_refused_with_the_field_path():
    problems = problems_of(
        kueue(
            {
                "workloadManagement": {"labelPolicy": "queuename"},
                "gangScheduling": {"policy": "Foo"},
                "preemption": {"preemptionPolicy": "FairShare"},
            },
            managementState="Sometimes",
        )
    )
    assert problems == [
        'spec.managementState: "Sometimes" is not one of Managed, Unmanaged, Force, Removed',
        'spec.config.workloadManagement.labelPolicy: "queuename" is not one of QueueName, None '
        '(did you mean "QueueName"?)',
        'spec.config.gangScheduling.policy: "Foo" is not one of ByWorkload, None',
        'spec.config.preemption.preemptionPolicy: "FairShare" is not one of Classical, FairSharing '
        '(did you mean "FairSharing"?)',
    ]


def test_bad_admission_is_refused():
    problems = problems_of(
        kueue({"gangScheduling": {"policy": "ByWorkload", "byWorkload": {"admission": "X"}}})
    )
    assert problems == [
        'spec.config.gangScheduling.byWorkload.admission: "X" is not one of Parallel, Sequential'
    ]


def test_by_workload_is_required_with_by_workload_and_forbidden_otherwise():
    assert problems_of(kueue({"gangScheduling": {"policy": "ByWorkload"}})) == [
        "spec.config.gangScheduling.byWorkload: required when policy is ByWorkload"
    ]
    assert problems_of(
        kueue({"gangScheduling": {"policy": "None", "byWorkload": {"admission": "Parallel"}}})
    ) == ["spec.config.gangScheduling.byWorkload: forbidden unless policy is ByWorkload"]


def test_bad_frameworks_are_refused_with_a_hint():
    problems = problems_of(
        kueue({"integrations": {"frameworks": ["batch/job", "pod", "Pod", "Pod", "Spark"]}})
    )
    allowed = ", ".join(FRAMEWORKS)
    assert problems == [
        f'spec.config.integrations.frameworks[0]: "batch/job" is not one of {allowed} '
        '(did you mean "BatchJob"?)',
        f'spec.config.integrations.frameworks[1]: "pod" is not one of {allowed} (did you mean "Pod"?)',
        'spec.config.integrations.frameworks[3]: duplicate "Pod": each item in frameworks must be unique',
        f'spec.config.integrations.frameworks[4]: "Spark" is not one of {allowed}',
    ]
    assert problems_of(kueue({"integrations": {"frameworks": []}})) == [
        "spec.config.integrations.frameworks: must have at least one element"
    ]


def test_bad_external_frameworks_and_label_keys_are_refused():
    problems = problems_of(
        kueue(
            {
                "integrations": {
                    "frameworks": ["BatchJob"],
                    "externalFrameworks": [
                        {"group": "Example.com", "resource": "things", "version": "v1"},
                        {"resource": "things", "version": "v1"},
                    ],
                    "labelKeysToCopy": [{"key": "-bad"}, {"key": "ok"}, {"key": "ok"}],
                }
            }
        )
    )
    assert problems == [
        "spec.config.integrations.externalFrameworks[0].group: 'Example.com' is not a valid group name",
        "spec.config.integrations.externalFrameworks[1].group: required",
        "spec.config.integrations.labelKeysToCopy[0].key: '-bad' is not a valid label key",
        'spec.config.integrations.labelKeysToCopy[2].key: duplicate "ok"',
    ]


def test_unknown_fields_are_refused_like_the_configuration_parsers():
    obj = kueue(
        {"gangScheduling": {"policy": "ByWorkload", "byWorkload": {"admission": "Parallel", "timeout": 1}}}
    )
    obj["spec"]["config"]["preemptionn"] = {}
    obj["spec"]["extra"] = True
    assert problems_of(obj) == [
        'unknown field "spec.config.gangScheduling.byWorkload.timeout"',
        'unknown field "spec.config.preemptionn" (did you mean "preemption"?)',
        'unknown field "spec.extra"',
    ]


def test_wrong_types_are_refused():
    assert problems_of(kueue({"integrations": {"frameworks": "BatchJob"}})) == [
        "spec.config.integrations.frameworks: must be a list"
    ]
    assert problems_of(kueue({"preemption": {"preemptionPolicy": 1}})) == [
        "spec.config.preemption.preemptionPolicy: must be a string, got 1"
    ]
    assert problems_of(["not", "an", "object"]) == [
        "must hold one YAML object (a kueue.openshift.io/v1 Kueue)"
    ]


def test_a_configuration_or_another_name_is_not_a_kueue_object():
    assert problems_of({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration"}) == [
        "apiVersion: must be \"kueue.openshift.io/v1\", got 'config.kueue.x-k8s.io/v1beta1'",
        "kind: must be \"Kueue\", got 'Configuration'",
    ]
    obj = kueue()
    obj["metadata"]["name"] = "mine"
    assert problems_of(obj) == ["metadata.name: must be \"cluster\" (Kueue is a singleton), got 'mine'"]


# -- with --config --------------------------------------------------------------------------------


def test_a_config_file_supplies_the_fields_the_object_does_not_map():
    base = {
        "webhook": {"port": 0},
        "leaderElection": {"leaderElect": False},
        "waitForPodsReady": {"timeout": "10m"},
        "fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]},
        "clientConnection": {"qps": 50, "burst": 100},
    }
    cfg = configuration(
        kueue(
            {
                "gangScheduling": {"policy": "ByWorkload", "byWorkload": {"admission": "Parallel"}},
                "preemption": {"preemptionPolicy": "FairSharing"},
            }
        ),
        base,
    )
    assert cfg.webhook_port == 0 and cfg.leader_elect is False and (cfg.qps, cfg.burst) == (50, 100)
    assert cfg.wait_for_pods_ready.timeout_seconds == 600
    assert cfg.wait_for_pods_ready.block_admission is False
    assert cfg.fair_sharing.preemption_strategies == ("LessThanInitialShare",)
    assert base == {**base, "waitForPodsReady": {"timeout": "10m"}}  # the caller's dict is left alone


def test_a_config_file_may_not_set_what_the_object_decides():
    base = {
        "manageJobsWithoutQueueName": True,
        "integrations": {"frameworks": ["batch/job"], "podOptions": {}},
        "waitForPodsReady": {"enable": True, "timeout": "1m"},
    }
    with pytest.raises(ConfigError) as err:
        compose(base, map_kueue(kueue()), "config.yaml")
    assert err.value.source == "config.yaml"
    assert err.value.problems == [
        "integrations.frameworks: decided by the Kueue object (spec.config.integrations.frameworks); "
        "remove it from this file",
        "manageJobsWithoutQueueName: decided by the Kueue object "
        "(spec.config.workloadManagement.labelPolicy); remove it from this file",
        "waitForPodsReady.enable: decided by the Kueue object (spec.config.gangScheduling.policy); "
        "remove it from this file",
    ]


def test_the_manager_keeps_its_own_lease_name():
    assert configuration(kueue(), parse=parse_manager_config).leader_election_id == MANAGER_LEADER_ELECTION_ID


@pytest.mark.parametrize("parser", [agent_parser, manager_parser])
def test_both_processes_take_the_flags(parser):
    args = parser().parse_args(
        ["--kueue-cr", "k.yaml", "--config", "c.yaml", "--kueue-cr-poll-interval", "5"]
    )
    operator = OperatorConfig.from_args(args)
    assert isinstance(operator.source, FileSource)
    assert (operator.source.path, operator.source.interval, operator.base_path) == ("k.yaml", 5.0, "c.yaml")
    args = parser().parse_args(["--kueue-cr-from-cluster"])
    assert OperatorConfig.from_args(args).source.description == "kueue.openshift.io/v1 Kueue cluster"
    assert OperatorConfig.from_args(parser().parse_args([])) is None
    with pytest.raises(SystemExit):
        parser().parse_args(["--kueue-cr", "k.yaml", "--kueue-cr-from-cluster"])
    with pytest.raises(SystemExit):
        parser().parse_args(["--kueue-cr", "k.yaml", "--kueue-cr-poll-interval", "0"])


def test_a_bad_object_stops_the_process_before_it_connects(tmp_path: Path):
    path = tmp_path / "kueue.yaml"
    path.write_text(yaml.safe_dump(kueue({"gangScheduling": {"policy": "Foo"}})))
    for module in ("worker_agent", "manager"):
        res = subprocess.run(
            [sys.executable, "-m", module, "--kueue-cr", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert res.returncode == 2, res.stderr
        assert (
            f'{path}:\n  - spec.config.gangScheduling.policy: "Foo" is not one of ByWorkload, None'
            in res.stderr
        )


# -- changes ------------------------------------------------------------------------------------


def test_changed_fields_names_the_configuration_fields():
    old = map_kueue(kueue()).fragment
    new = map_kueue(kueue({"preemption": {"preemptionPolicy": "FairSharing"}})).fragment
    assert changed_fields(old, new) == ["fairSharing.enable"]
    assert changed_fields(old, old) == []


async def test_a_changed_file_stops_the_run_cleanly_and_asks_for_a_restart(tmp_path: Path):
    path = tmp_path / "kueue.yaml"
    path.write_text(yaml.safe_dump(kueue()))
    operator = OperatorConfig(FileSource(str(path), interval=0.05))
    first = await operator.load()
    assert first.fair_sharing is None
    started, stopped = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    with capture_logs() as logs:
        task = asyncio.create_task(operator.run_until_changed(run, None))
        await asyncio.wait_for(started.wait(), 5)
        # A change that maps to the same Configuration, then an invalid one: the run goes on.
        cosmetic = kueue(managementState="Managed")
        cosmetic["metadata"]["labels"] = {"team": "a"}
        path.write_text(yaml.safe_dump(cosmetic))
        await asyncio.sleep(0.3)
        path.write_text(yaml.safe_dump(kueue({"preemption": {"preemptionPolicy": "FairShare"}})))
        await asyncio.sleep(0.3)
        path.write_text("spec: [")  # half-written
        await asyncio.sleep(0.3)
        assert not task.done() and not stopped.is_set()
        path.write_text(yaml.safe_dump(kueue({"preemption": {"preemptionPolicy": "FairSharing"}})))
        assert await asyncio.wait_for(task, 5) is True
    assert stopped.is_set()
    events = [e["event"] for e in logs]
    assert "the changed Kueue object is invalid; keeping the running configuration" in events
    assert "the Kueue object's file is not valid YAML; keeping the running configuration" in events
    restart = [e for e in logs if e["event"] == "configuration changed; restarting"]
    assert [e["changed"] for e in restart] == [["fairSharing.enable"]]
    invalid = next(e for e in logs if e["event"].startswith("the changed Kueue object is invalid"))
    assert invalid["problems"] == [
        'spec.config.preemption.preemptionPolicy: "FairShare" is not one of Classical, FairSharing '
        '(did you mean "FairSharing"?)'
    ]
    # The restarted process reads the new object.
    second = await OperatorConfig(FileSource(str(path))).load()
    assert second.fair_sharing is not None


async def test_a_run_that_ends_by_itself_is_not_restarted(tmp_path: Path):
    path = tmp_path / "kueue.yaml"
    path.write_text(yaml.safe_dump(kueue()))
    operator = OperatorConfig(FileSource(str(path), interval=0.05))
    await operator.load()

    class Lost(Exception):
        pass

    async def lose() -> None:
        await asyncio.sleep(0.1)
        raise Lost

    with pytest.raises(Lost):
        await operator.run_until_changed(lose, None)

    async def finish() -> None:
        await asyncio.sleep(0.1)

    assert await operator.run_until_changed(finish, None) is False


def test_reexec_replaces_the_process_with_the_same_command_line(tmp_path: Path):
    """os.execv of sys.orig_argv: same PID, same arguments, output written before it is kept."""
    script = tmp_path / "again.py"
    marker = tmp_path / "marker"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            from pathlib import Path
            from kube_runtime.process import reexec
            print("run", os.getpid(), sys.argv[1:], end=" | ")
            if not Path({str(marker)!r}).exists():
                Path({str(marker)!r}).touch()
                reexec("unused", None)
            """
        )
    )
    res = subprocess.run(
        [sys.executable, str(script), "a", "--b"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert res.returncode == 0, res.stderr
    runs = res.stdout.split(" | ")[:-1]
    assert len(runs) == 2 and runs[0] == runs[1], res.stdout
    assert runs[0].endswith("['a', '--b']")
