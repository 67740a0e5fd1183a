"""TrainJobs without a cluster: the PodSets derived from a TrainJob and its runtime, the Kueue runtime
patch on start and stop, finished, the webhooks' defaults and validation, and the MultiKueue adapter's
copy and status mirror."""

from __future__ import annotations

import pytest

from kueue_domain import api, fields
from kueue_domain.config import parse_config
from manager.adapters.trainjob import (
    released_status_patch,
    remote_train_job_copy,
    status_patch,
    train_job_finished,
)
from worker_agent.integrations import framework
from worker_agent.integrations import trainjob as tj
from worker_agent.webhooks import trainjob as hooks
from worker_agent.webhooks.common import Facts, Lookups

NS = "team-a"
CONFIG = parse_config({"integrations": {"frameworks": ["batch/job", "trainer.kubeflow.org/trainjob"]}})
FACTS = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: NS})
TRAINER = {api.TRAIN_JOB_LABEL_ANCESTOR: "trainer"}


def runtime(ml_policy: dict | None = None, extra: list | None = None) -> dict:
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": TRAINER},
            "spec": {
                "template": {
                    "spec": {
                        "tolerations": [{"key": "gpu", "operator": "Exists"}],
                        "containers": [
                            {"name": "node", "image": "torch", "resources": {"requests": {"cpu": "500m"}}},
                        ],
                    }
                }
            },
        },
    }
    spec: dict = {"template": {"spec": {"replicatedJobs": [*(extra or []), node]}}}
    if ml_policy is not None:
        spec["mlPolicy"] = ml_policy
    return {"metadata": {"name": "torch"}, "spec": spec}


def initializer() -> dict:
    return {
        "name": "dataset-initializer",
        "replicas": 3,
        "template": {
            "metadata": {"labels": {api.TRAIN_JOB_LABEL_ANCESTOR: "dataset-initializer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "i"}]}}},
        },
    }


def train_job(trainer: dict | None = None, labels: dict | None = None, **spec) -> dict:
    meta: dict = {"name": "tj", "namespace": NS, "uid": "uid-1"}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": meta,
        "spec": {"runtimeRef": {"name": "torch"}, **({"trainer": trainer} if trainer else {}), **spec},
    }


# -- PodSets ----------------------------------------------------------------------------------------


def test_podsets_follow_num_nodes_resources_per_node_and_the_initializers():
    job = train_job({"numNodes": 4, "resourcesPerNode": {"requests": {"cpu": "2"}}, "image": "mine"})
    podsets = tj.train_job_podsets(job, runtime({"numNodes": 1, "torch": {}}, extra=[initializer()]))
    assert [(p["name"], p["count"]) for p in podsets] == [("dataset-initializer", 1), ("node", 4)]
    node = podsets[1]["template"]["spec"]["containers"][0]
    assert node["resources"] == {"requests": {"cpu": "2"}}
    assert node["image"] == "mine"


def test_without_num_nodes_the_runtime_policy_decides_and_without_a_policy_parallelism():
    assert [p["count"] for p in tj.train_job_podsets(train_job(), runtime({"numNodes": 3, "torch": {}}))] == [
        3
    ]
    assert [p["count"] for p in tj.train_job_podsets(train_job(), runtime())] == [1]
    plain = tj.train_job_podsets(train_job({"numNodes": 2}), runtime())
    assert [p["count"] for p in plain] == [2]


def test_runtime_patches_merge_into_the_templates_by_name():
    patch = {
        "manager": "example.com/other",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "metadata": {"labels": {"team": "a"}},
                                        "spec": {
                                            "nodeSelector": {"pool": "x"},
                                            "tolerations": [{"key": "other", "operator": "Exists"}],
                                            "containers": [
                                                {"name": "node", "env": [{"name": "A", "value": "1"}]}
                                            ],
                                        },
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    [podset] = tj.train_job_podsets(train_job(runtimePatches=[patch]), runtime())
    template = podset["template"]
    assert template["metadata"]["labels"] == {"team": "a"}
    assert template["spec"]["nodeSelector"] == {"pool": "x"}
    # Tolerations have no merge key: replaced, as a strategic merge patch does.
    assert template["spec"]["tolerations"] == [{"key": "other", "operator": "Exists"}]
    container = template["spec"]["containers"][0]
    assert container["image"] == "torch" and container["env"] == [{"name": "A", "value": "1"}]


# -- start, stop, finish ----------------------------------------------------------------------------


def admitted_workload() -> dict:
    return {
        "metadata": {"name": "wl", "namespace": NS},
        "spec": {"queueName": "lq", "podSets": [{"name": "node", "count": 2}]},
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "node", "count": 2, "flavors": {"cpu": "rf"}}],
            }
        },
    }


FLAVORS = {
    "rf": {
        "metadata": {"name": "rf"},
        "spec": {"nodeLabels": {"pool": "a"}, "tolerations": [{"key": "pool", "operator": "Exists"}]},
    }
}


def test_start_writes_the_podset_info_into_the_kueue_runtime_patch_and_unsuspends():
    job = train_job(suspend=True, runtimePatches=[tj.new_kueue_runtime_patch()])
    infos = framework.podset_infos(admitted_workload(), FLAVORS)
    started = tj.started_train_job(job, ["node"], infos)
    assert started["spec"]["suspend"] is False
    [rjob] = tj.kueue_runtime_patch(started)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    pod = rjob["template"]["spec"]["template"]
    assert pod["spec"] == {
        "nodeSelector": {"pool": "a"},
        "tolerations": [{"key": "pool", "operator": "Exists"}],
    }
    assert pod["metadata"]["labels"][api.LABEL_PODSET] == "node"
    # The JobSet the Trainer builds from it has the flavor's node selector.
    [podset] = tj.train_job_podsets(started, runtime())
    assert podset["template"]["spec"]["nodeSelector"] == {"pool": "a"}
    assert tj.started_train_job(started, ["node"], infos) is None  # running already
    with pytest.raises(framework.PodSetInfoConflict):
        tj.started_train_job(job, ["node", "launcher"], infos)


def test_start_adds_the_kueue_runtime_patch_when_the_webhook_did_not():
    other = {"manager": "example.com/other"}
    job = train_job(suspend=True, runtimePatches=[other])
    started = tj.started_train_job(job, ["node"], framework.podset_infos(admitted_workload(), FLAVORS))
    assert [p["manager"] for p in started["spec"]["runtimePatches"]] == [
        "example.com/other",
        api.TRAIN_JOB_RUNTIME_PATCH_MANAGER,
    ]


def test_stop_suspends_first_and_then_clears_the_patch():
    job = train_job(suspend=True, runtimePatches=[tj.new_kueue_runtime_patch()])
    running = tj.started_train_job(job, ["node"], framework.podset_infos(admitted_workload(), FLAVORS))
    suspended = tj.suspended_train_job(running)
    assert suspended["spec"]["suspend"] is True
    assert suspended["spec"]["runtimePatches"] == running["spec"]["runtimePatches"]
    assert tj.suspended_train_job(suspended) is None
    restored = tj.restored_train_job(suspended)
    assert tj.kueue_runtime_patch(restored) == {
        "manager": api.TRAIN_JOB_RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {}}},
    }
    assert tj.restored_train_job(restored) is None


def test_finished_from_complete_then_failed():
    def with_conditions(*conditions):
        return {**train_job(), "status": {"conditions": list(conditions)}}

    complete = {"type": "Complete", "status": "True", "message": "jobset completed successfully"}
    failed = {"type": "Failed", "status": "True", "message": "boom"}
    assert tj.finished(with_conditions(complete)) == (True, True, "jobset completed successfully")
    assert tj.finished(with_conditions(failed)) == (True, False, "boom")
    assert tj.finished(with_conditions({"type": "Suspended", "status": "True"})) == (False, False, "")


def test_reclaimable_pods_and_activity_come_from_jobs_status():
    job = {
        **train_job({"numNodes": 2}),
        "status": {"jobsStatus": [{"name": "node", "succeeded": 1, "active": 0}]},
    }
    assert tj.reclaimable_pods(job, runtime()) == [{"name": "node", "count": 2}]
    assert not tj.is_active(job)
    assert tj.workload_name(job).startswith("trainjob-tj-")


def test_a_jobset_of_a_managed_trainjob_is_its_child():
    ref = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": "tj",
        "controller": True,
    }
    assert tj.controller_train_job_ref({"metadata": {"ownerReferences": [ref]}}) == ref
    other = {**ref, "apiVersion": "example.com/v1"}
    assert tj.controller_train_job_ref({"metadata": {"ownerReferences": [other]}}) is None


# -- webhooks ---------------------------------------------------------------------------------------


def multikueue_lookups() -> Lookups:
    return Lookups.from_objects(
        local_queues=[{"metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}}],
        cluster_queues=[{"metadata": {"name": "cq"}, "spec": {"admissionChecks": ["mk"]}}],
        admission_checks=[
            {"metadata": {"name": "mk"}, "spec": {"controllerName": api.MULTIKUEUE_CONTROLLER_NAME}}
        ],
    )


def test_defaulting_suspends_a_queued_trainjob_and_adds_the_kueue_runtime_patch():
    job = train_job(labels={api.LABEL_QUEUE_NAME: "lq"}, suspend=False)
    out = hooks.default(job, NS, CONFIG, Lookups.from_objects(), FACTS)
    assert out["spec"]["suspend"] is True
    assert out["spec"]["runtimePatches"] == [tj.new_kueue_runtime_patch()]
    assert "managedBy" not in out["spec"]
    again = hooks.default(out, NS, CONFIG, Lookups.from_objects(), FACTS)
    assert again["spec"]["runtimePatches"] == [tj.new_kueue_runtime_patch()]  # not twice
    unqueued = hooks.default(train_job(suspend=False), NS, CONFIG, Lookups.from_objects(), FACTS)
    assert unqueued["spec"]["suspend"] is False


@pytest.mark.parametrize(
    ("managed_by", "expected"),
    [
        (None, api.MULTIKUEUE_CONTROLLER_NAME),
        (api.TRAIN_JOB_MANAGED_BY_DEFAULT, api.MULTIKUEUE_CONTROLLER_NAME),
        ("example.com/other", "example.com/other"),
    ],
)
def test_managed_by_defaults_to_multikueue_on_a_multikueue_queue(managed_by, expected):
    spec = {"managedBy": managed_by} if managed_by else {}
    job = train_job(labels={api.LABEL_QUEUE_NAME: "lq"}, **spec)
    assert hooks.default(job, NS, CONFIG, multikueue_lookups(), FACTS)["spec"]["managedBy"] == expected


def test_a_bad_queue_name_is_refused_naming_the_field():
    errors = hooks.validate_create(train_job(labels={api.LABEL_QUEUE_NAME: "Not_A_Name"}))
    assert "metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value" in fields.aggregate(errors)
    running = train_job(labels={api.LABEL_QUEUE_NAME: "a"}, suspend=False)
    moved = train_job(labels={api.LABEL_QUEUE_NAME: "b"}, suspend=False)
    assert "field is immutable" in fields.aggregate(
        hooks.validate_update(running, moved, NS, Lookups.from_objects())
    )


# -- MultiKueue adapter -----------------------------------------------------------------------------


def test_the_worker_copy_has_no_managed_by_nor_kueue_patch_and_carries_the_origin():
    other = {"manager": "example.com/other"}
    local = train_job(
        labels={api.LABEL_QUEUE_NAME: "lq"},
        managedBy=api.MULTIKUEUE_CONTROLLER_NAME,
        suspend=True,
        runtimePatches=[tj.new_kueue_runtime_patch(), other],
    )
    local["metadata"]["resourceVersion"] = "7"
    copy_ = remote_train_job_copy(local, "trainjob-tj-abcde", "origin-1")
    assert "managedBy" not in copy_["spec"]
    assert copy_["spec"]["runtimePatches"] == [other]
    assert copy_["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == "origin-1"
    assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == "trainjob-tj-abcde"
    assert "resourceVersion" not in copy_["metadata"] and "uid" not in copy_["metadata"]
    alone = remote_train_job_copy(train_job(runtimePatches=[tj.new_kueue_runtime_patch()]), "w", "o")
    assert "runtimePatches" not in alone["spec"]


def test_the_whole_worker_status_is_mirrored_and_released():
    remote = {
        "conditions": [{"type": "Complete", "status": "True", "message": "done"}],
        "jobsStatus": [{"name": "node", "active": 0, "succeeded": 1}],
    }
    local = {**train_job(), "status": {"jobsStatus": [{"name": "node", "active": 2, "ready": 2}]}}
    patch = status_patch(local, remote)
    assert patch["status"]["conditions"] == remote["conditions"]
    assert status_patch({**local, "status": remote}, remote) is None
    assert train_job_finished({"status": remote})
    assert released_status_patch(local) == {
        "status": {"jobsStatus": [{"name": "node", "active": 0, "ready": 0}]}
    }
