"""Pure parts of the JobSet integration (jobset.x-k8s.io/jobset)."""

from __future__ import annotations

import copy
import hashlib
import re
from types import SimpleNamespace

import pytest

from kueue_domain import api
from kueue_domain.config import parse_config
from worker_agent.integrations import INTEGRATIONS, enabled_frameworks, framework
from worker_agent.integrations import jobset as js_mod

LEADER_TEMPLATE = {
    "metadata": {"labels": {"role": "leader"}},
    "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "l", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
    },
}
WORKER_TEMPLATE = {
    "metadata": {"annotations": {"note": "w"}},
    "spec": {
        "restartPolicy": "Never",
        "nodeSelector": {"disk": "ssd"},
        "containers": [{"name": "w", "image": "x", "resources": {"requests": {"cpu": "2"}}}],
    },
}


def job_set(*, suspend=True, status=None, labels=None, annotations=None, managed_by=None) -> dict:
    spec: dict = {
        "suspend": suspend,
        "replicatedJobs": [
            {
                "name": "leader",
                "replicas": 1,
                "template": {"spec": {"template": copy.deepcopy(LEADER_TEMPLATE)}},
            },
            {
                "name": "workers",
                "replicas": 3,
                "template": {
                    "spec": {"parallelism": 4, "completions": 2, "template": copy.deepcopy(WORKER_TEMPLATE)}
                },
            },
        ],
    }
    if managed_by:
        spec["managedBy"] = managed_by
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "trainer",
            "namespace": "ns",
            "uid": "uid-js",
            "resourceVersion": "7",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": status or {},
    }


FLAVORS = {
    "gpu": {
        "metadata": {"name": "gpu"},
        "spec": {
            "nodeLabels": {"accelerator": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    },
    "spot": {"metadata": {"name": "spot"}, "spec": {"nodeLabels": {"pool": "spot"}}},
}


def admitted_workload(podsets=None) -> dict:
    return {
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {
            "queueName": "lq",
            "podSets": podsets if podsets is not None else js_mod.job_set_podsets(job_set()),
        },
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "leader", "flavors": {"cpu": "spot"}, "count": 1},
                    {"name": "workers", "flavors": {"cpu": "gpu"}, "count": 6},
                ],
            },
        },
    }


def pod_template(js: dict, index: int) -> dict:
    return js["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]


def test_registered_under_upstreams_framework_name():
    assert js_mod.JobSetIntegration.name == "jobset.x-k8s.io/jobset"
    assert INTEGRATIONS["jobset.x-k8s.io/jobset"] == "worker_agent.integrations.jobset:JobSetIntegration"
    config = parse_config({"integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}})
    assert enabled_frameworks(config.frameworks) == ["batch/job", "jobset.x-k8s.io/jobset"]


def test_workload_name_is_jobframeworks_with_the_jobset_gvk():
    name = js_mod.workload_name(job_set())
    assert re.fullmatch(r"jobset-trainer-[0-9a-f]{5}", name)
    assert name[-5:] == hashlib.sha1(b"JobSet\njobset.x-k8s.io\ntrainer\nuid-js").hexdigest()[:5]


def test_one_podset_per_replicated_job():
    leader, workers = js_mod.job_set_podsets(job_set())
    assert (leader["name"], leader["count"]) == ("leader", 1)
    # replicas 3 x min(parallelism 4, completions 2)
    assert (workers["name"], workers["count"]) == ("workers", 6)
    assert leader["template"] == LEADER_TEMPLATE
    assert workers["template"] == WORKER_TEMPLATE


def test_pod_counts_default_replicas_and_parallelism_to_one():
    rj = {"name": "r", "template": {"spec": {"template": {}}}}
    assert js_mod.pods_count(rj) == 1
    rj["template"]["spec"]["parallelism"] = 5
    assert js_mod.pods_count(rj) == 5
    rj["replicas"] = 2
    rj["template"]["spec"]["completions"] = 3
    assert (js_mod.pods_count_per_replica(rj), js_mod.pods_count(rj)) == (3, 6)


def test_start_injects_the_flavors_into_every_replicated_job_and_unsuspends():
    js = job_set()
    infos = framework.podset_infos(admitted_workload(), FLAVORS)
    started = js_mod.started_job_set(js, infos)
    assert started["spec"]["suspend"] is False
    leader, workers = pod_template(started, 0), pod_template(started, 1)
    assert leader["spec"]["nodeSelector"] == {"pool": "spot"}
    assert "tolerations" not in leader["spec"]
    assert workers["spec"]["nodeSelector"] == {"disk": "ssd", "accelerator": "a100"}
    assert workers["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert leader["metadata"]["labels"][api.LABEL_PODSET] == "leader"
    assert workers["metadata"]["labels"][api.LABEL_PODSET] == "workers"
    assert js == job_set()  # the input is left alone
    assert js_mod.started_job_set(started, infos) is None  # already running


def test_start_fails_on_a_conflicting_node_selector_or_missing_podset():
    js = job_set()
    pod_template(js, 1)["spec"]["nodeSelector"] = {"accelerator": "h100"}
    with pytest.raises(framework.PodSetInfoConflict):
        js_mod.started_job_set(js, framework.podset_infos(admitted_workload(), FLAVORS))
    infos = framework.podset_infos(admitted_workload(), FLAVORS)
    del infos["workers"]
    with pytest.raises(framework.PodSetInfoConflict, match="invalid podset infos: expecting 2 podset, got 1"):
        js_mod.started_job_set(job_set(), infos)


def test_stop_suspends_and_restores_the_templates_from_the_workload():
    wl = admitted_workload()
    started = js_mod.started_job_set(job_set(), framework.podset_infos(wl, FLAVORS))
    started["status"] = {"replicatedJobsStatus": [{"name": "workers", "active": 3}]}
    stopped = js_mod.stopped_job_set(started, wl)
    assert stopped["spec"]["suspend"] is True
    assert pod_template(stopped, 0) == LEADER_TEMPLATE
    assert pod_template(stopped, 1) == WORKER_TEMPLATE
    assert js_mod.stopped_job_set(stopped, wl) is None  # nothing left to change


def test_stop_without_a_matching_workload_only_suspends():
    started = js_mod.started_job_set(job_set(), framework.podset_infos(admitted_workload(), FLAVORS))
    for wl in (None, admitted_workload(podsets=[{"name": "main", "count": 1, "template": {}}])):
        stopped = js_mod.stopped_job_set(started, wl)
        assert stopped["spec"]["suspend"] is True
        assert pod_template(stopped, 1) == pod_template(started, 1)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], (False, False, "")),
        ([{"type": "Completed", "status": "False", "message": "no"}], (False, False, "")),
        (
            [{"type": "Completed", "status": "True", "message": "jobset completed successfully"}],
            (True, True, "jobset completed successfully"),
        ),
        (
            [{"type": "Failed", "status": "True", "message": "jobset failed due to failure policy"}],
            (True, False, "jobset failed due to failure policy"),
        ),
        (
            [{"type": "StartupPolicyCompleted", "status": "True"}, {"type": "Suspended", "status": "True"}],
            (False, False, ""),
        ),
    ],
)
def test_finished_from_the_completed_and_failed_conditions(conditions, expected):
    assert js_mod.finished(job_set(status={"conditions": conditions})) == expected


def test_active_and_pods_ready_from_the_replicated_jobs_status():
    assert not js_mod.is_active(job_set())
    status = {
        "replicatedJobsStatus": [
            {"name": "leader", "ready": 1, "active": 1, "succeeded": 0},
            {"name": "workers", "ready": 2, "active": 2, "succeeded": 0},
        ]
    }
    js = job_set(status=status)
    assert js_mod.is_active(js) and not js_mod.pods_ready(js)
    status["replicatedJobsStatus"][1]["succeeded"] = 1
    assert js_mod.pods_ready(job_set(status=status))  # 1 + 3 Jobs ready or succeeded


def test_reclaimable_pods_count_succeeded_jobs_times_their_pods():
    assert js_mod.reclaimable_pods(job_set()) == []
    status = {
        "replicatedJobsStatus": [
            {"name": "leader", "succeeded": 0},
            {"name": "workers", "succeeded": 2},
        ]
    }
    assert js_mod.reclaimable_pods(job_set(status=status)) == [{"name": "workers", "count": 4}]
    status["replicatedJobsStatus"][1]["succeeded"] = 4  # more than replicas: not counted
    assert js_mod.reclaimable_pods(job_set(status=status)) == []


def test_equivalence_with_the_workload_it_was_built_from_and_as_started():
    wl = admitted_workload()
    assert js_mod.equivalent(job_set(), wl, FLAVORS)
    started = js_mod.started_job_set(job_set(), framework.podset_infos(wl, FLAVORS))
    assert js_mod.equivalent(started, wl, FLAVORS)
    changed = job_set()
    changed["spec"]["replicatedJobs"][1]["replicas"] = 4
    assert not js_mod.equivalent(changed, wl, FLAVORS)
    renamed = job_set()
    renamed["spec"]["replicatedJobs"][0]["name"] = "driver"
    assert not js_mod.equivalent(renamed, wl, FLAVORS)


def test_managed_by_defaults_to_the_jobset_controller():
    assert js_mod.managed_by(job_set()) == "jobset.sigs.k8s.io/jobset-controller"
    assert js_mod.managed_by(job_set(managed_by="kueue.x-k8s.io/multikueue")) == "kueue.x-k8s.io/multikueue"


def test_prebuilt_workload_name_annotation_first():
    both = job_set(
        labels={api.LABEL_PREBUILT_WORKLOAD_NAME: "from-label"},
        annotations={api.ANNOTATION_PREBUILT_WORKLOAD_NAME: "from-annotation"},
    )
    assert js_mod.prebuilt_workload_name(both) == "from-annotation"
    assert js_mod.prebuilt_workload_name(job_set(labels={api.LABEL_PREBUILT_WORKLOAD_NAME: "l"})) == "l"
    assert js_mod.prebuilt_workload_name(job_set()) is None


def test_controlling_job_set_reference():
    ref = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": "trainer",
        "uid": "u",
        "controller": True,
    }
    assert js_mod.controlling_job_set({"metadata": {"ownerReferences": [ref]}}) == ref
    assert (
        js_mod.controlling_job_set({"metadata": {"ownerReferences": [{**ref, "controller": False}]}}) is None
    )
    batch = {**ref, "apiVersion": "batch/v1", "kind": "Job"}
    assert js_mod.controlling_job_set({"metadata": {"ownerReferences": [batch]}}) is None


class FakeCache:
    def __init__(self, *objects: dict) -> None:
        self.objects = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objects}

    def get(self, key: str) -> dict | None:
        return self.objects.get(key)


def child_job(owner_uid: str = "uid-js") -> dict:
    ref = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "trainer", "uid": owner_uid}
    return {
        "metadata": {
            "name": "trainer-workers-0",
            "namespace": "ns",
            "ownerReferences": [{**ref, "controller": True}],
        }
    }


@pytest.mark.parametrize(
    ("labels", "without_queue_name", "owner_uid", "expected"),
    [
        ({api.LABEL_QUEUE_NAME: "lq"}, False, "uid-js", True),
        ({}, False, "uid-js", False),
        ({}, True, "uid-js", True),
        ({api.LABEL_QUEUE_NAME: "lq"}, False, "another-uid", False),
    ],
)
def test_the_jobs_of_a_managed_jobset_are_not_top_level(labels, without_queue_name, owner_uid, expected):
    integration = js_mod.JobSetIntegration.__new__(js_mod.JobSetIntegration)
    integration.objects = FakeCache(job_set(labels=labels))
    integration.config = SimpleNamespace(manage_jobs_without_queue_name=without_queue_name)
    assert integration.manages_child(child_job(owner_uid)) is expected


def test_a_job_whose_jobset_is_not_cached_is_asked_again_and_a_plain_job_is_top_level():
    integration = js_mod.JobSetIntegration.__new__(js_mod.JobSetIntegration)
    integration.objects = FakeCache()
    integration.config = SimpleNamespace(manage_jobs_without_queue_name=False)
    assert integration.manages_child(child_job()) is None
    assert integration.manages_child({"metadata": {"name": "plain", "namespace": "ns"}}) is False


@pytest.mark.parametrize(
    ("verdicts", "expected"), [([], False), ([False], False), ([None], None), ([None, True], True)]
)
def test_the_job_integration_asks_the_enabled_integrations_about_a_jobs_parent(verdicts, expected):
    from worker_agent.integrations.job import JobIntegration

    integration = JobIntegration.__new__(JobIntegration)
    parents = [SimpleNamespace(manages_child=lambda job, v=v: v) for v in verdicts]
    integration.agent = SimpleNamespace(integrations=[object(), *parents])
    assert integration._parent_managed(child_job()) is expected
