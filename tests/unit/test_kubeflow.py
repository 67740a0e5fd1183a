"""The Kubeflow kinds (training-operator v1 and MPIJob v2beta1) on the job framework, their webhooks
and their MultiKueue adapters, without a cluster: PodSets in upstream's order, run and stop under
spec.runPolicy, finished, pods ready, active, priority class, managedBy, the webhooks' defaults, the
worker's copy and the status mirror."""

from __future__ import annotations

import pytest

from kueue_domain import api
from kueue_domain.config import parse_config
from manager.adapters.kubeflow import (
    KubeflowJobAdapter,
    kubeflow_job_finished,
    released_status_patch,
    remote_kubeflow_copy,
)
from manager.adapters.mirrored import status_patch
from manager.adapters.mpijob import MPIJobAdapter
from worker_agent.integrations import kubeflow, mpijob
from worker_agent.integrations.jobframework import templated
from worker_agent.webhooks.common import Facts, Lookups
from worker_agent.webhooks.kubeflow import WEBHOOKS

NS = "team-a"
FACTS = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: NS})
CONFIG = parse_config({"integrations": {"frameworks": ["batch/job", *WEBHOOKS]}})


def template(priority_class: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"labels": {"app": "x"}}, "spec": spec}


def job(kind: kubeflow.KubeflowKind, specs: dict, labels: dict | None = None, **run_policy) -> dict:
    meta: dict = {"name": "j", "namespace": NS, "uid": "u1"}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": kind.resource.api_version,
        "kind": kind.resource.kind,
        "metadata": meta,
        "spec": {kind.replica_specs_field: specs, "runPolicy": run_policy},
    }


def pytorch(**run_policy) -> dict:
    specs = {"Worker": {"replicas": 3, "template": template()}, "Master": {"template": template()}}
    return job(kubeflow.PYTORCH_JOB, specs, **run_policy)


# ------------------------------------------------------------------------------------------------
# PodSets


def test_pytorchjob_podsets_are_master_then_worker_in_lower_case_with_replicas_default_one():
    podsets = kubeflow.podsets(pytorch(), kubeflow.PYTORCH_JOB)
    assert [(p["name"], p["count"]) for p in podsets] == [("master", 1), ("worker", 3)]
    assert podsets[0]["template"]["spec"]["containers"][0]["name"] == "c"


def test_tfjob_podsets_follow_upstreams_replica_type_order_and_skip_absent_ones():
    specs = {t: {"replicas": 1, "template": template()} for t in ("Evaluator", "Worker", "PS", "Chief")}
    specs["Master"] = None  # a null spec is no replica type
    names = [p["name"] for p in kubeflow.podsets(job(kubeflow.TF_JOB, specs), kubeflow.TF_JOB)]
    assert names == ["chief", "ps", "worker", "evaluator"]


@pytest.mark.parametrize(
    ("kind", "types", "names"),
    [
        (kubeflow.XGBOOST_JOB, ("Worker", "Master"), ["master", "worker"]),
        (kubeflow.PADDLE_JOB, ("Worker", "Master"), ["master", "worker"]),
        (kubeflow.JAX_JOB, ("Worker",), ["worker"]),
        (mpijob.MPI_JOB, ("Worker", "Launcher"), ["launcher", "worker"]),
    ],
)
def test_each_kind_reads_its_own_replica_specs_field(kind, types, names):
    obj = job(kind, {t: {"template": template()} for t in types})
    assert [p["name"] for p in kubeflow.podsets(obj, kind)] == names
    other = job(kubeflow.PYTORCH_JOB, {t: {"template": template()} for t in types})
    assert kubeflow.podsets(other, kind) == []  # another kind's field is not read


# ------------------------------------------------------------------------------------------------
# Run and stop under spec.runPolicy


def info(selector: dict) -> dict:
    return {
        "nodeSelector": selector,
        "tolerations": [],
        "labels": {},
        "annotations": {},
        "schedulingGates": [],
    }


def test_run_unsuspends_runpolicy_and_merges_each_replicas_info_then_stop_restores():
    kind = kubeflow.PYTORCH_JOB
    obj = pytorch(suspend=True)
    wl = {"spec": {"podSets": kubeflow.podsets(obj, kind)}}
    templates_of = lambda o: kubeflow.pod_templates(o, kind)  # noqa: E731
    infos = {"master": info({"zone": "a"}), "worker": info({"zone": "b"})}
    started = templated.started_object(obj, templates_of, infos, kubeflow.SUSPEND_PATH)
    assert started["spec"]["runPolicy"]["suspend"] is False
    specs = started["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"zone": "b"}
    assert "suspend" not in started["spec"]  # the kind has no spec.suspend
    stopped = templated.stopped_object(started, templates_of, wl, kubeflow.SUSPEND_PATH)
    assert stopped["spec"]["runPolicy"]["suspend"] is True
    assert "nodeSelector" not in stopped["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert stopped == {**obj, "spec": {**obj["spec"], "runPolicy": {"suspend": True}}}


def test_run_refuses_infos_that_do_not_name_every_replica_type():
    kind = kubeflow.PYTORCH_JOB
    with pytest.raises(Exception, match="expecting 2 podset, got 1"):
        templated.started_object(
            pytorch(suspend=True),
            lambda o: kubeflow.pod_templates(o, kind),
            {"master": info({})},
            kubeflow.SUSPEND_PATH,
        )


# ------------------------------------------------------------------------------------------------
# Status, priority, managedBy


def with_status(obj: dict, **status) -> dict:
    return {**obj, "status": status}


def test_finished_pods_ready_and_active_from_the_operators_status():
    running = with_status(
        pytorch(),
        conditions=[{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}],
        replicaStatuses={"Master": {"active": 1}, "Worker": {"active": 0, "succeeded": 3}},
    )
    assert kubeflow.pods_ready(running) and kubeflow.is_active(running)
    assert kubeflow.finished(running) == (False, False, "")
    done = with_status(
        pytorch(),
        conditions=[
            {"type": "Running", "status": "False"},
            {"type": "Succeeded", "status": "True", "message": "PyTorchJob j is successfully completed."},
        ],
        replicaStatuses={"Master": {"succeeded": 1}},
    )
    assert kubeflow.finished(done) == (True, True, "PyTorchJob j is successfully completed.")
    assert not kubeflow.pods_ready(done) and not kubeflow.is_active(done)
    failed = with_status(pytorch(), conditions=[{"type": "Failed", "status": "True", "message": "m"}])
    assert kubeflow.finished(failed) == (True, False, "m")


def test_priority_class_from_the_scheduling_policy_then_the_first_replica_in_order():
    kind = kubeflow.PYTORCH_JOB
    specs = {"Worker": {"template": template("low")}, "Master": {"template": template("high")}}
    assert kubeflow.priority_class(job(kind, specs), kind) == "high"
    policy = job(kind, specs, schedulingPolicy={"priorityClass": "top"})
    assert kubeflow.priority_class(policy, kind) == "top"
    launcher_first = job(
        mpijob.MPI_JOB, {"Worker": {"template": template("w")}, "Launcher": {"template": template()}}
    )
    assert kubeflow.priority_class(launcher_first, mpijob.MPI_JOB) == "w"


def test_managed_by_defaults_to_each_operators_own_value():
    assert kubeflow.managed_by(pytorch(), kubeflow.PYTORCH_JOB) == "kubeflow.org/training-operator"
    mpi = job(mpijob.MPI_JOB, {})
    assert kubeflow.managed_by(mpi, mpijob.MPI_JOB) == "kubeflow.org/mpi-operator"
    multikueue = pytorch(managedBy=api.MULTIKUEUE_CONTROLLER_NAME)
    assert kubeflow.managed_by(multikueue, kubeflow.PYTORCH_JOB) == api.MULTIKUEUE_CONTROLLER_NAME


def test_the_integration_classes_declare_upstreams_framework_names():
    assert mpijob.MPIJobIntegration.name == "kubeflow.org/mpijob"
    assert mpijob.MPIJobIntegration.suspend_path == ("spec", "runPolicy", "suspend")
    assert kubeflow.TFJobIntegration.name == "kubeflow.org/tfjob"
    assert kubeflow.TFJobIntegration.resource is api.TF_JOB
    assert mpijob.MPIJobIntegration.managed_by_default == "kubeflow.org/mpi-operator"


# ------------------------------------------------------------------------------------------------
# Webhooks


def multikueue_lookups() -> Lookups:
    """A LocalQueue `lq` of a ClusterQueue with a MultiKueue AdmissionCheck."""
    queue = {"metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}}
    check = {"metadata": {"name": "mk"}, "spec": {"controllerName": api.MULTIKUEUE_CONTROLLER_NAME}}
    cq = {"metadata": {"name": "cq"}, "spec": {"admissionChecks": ["mk"]}}
    return Lookups.from_objects(local_queues=[queue], cluster_queues=[cq], admission_checks=[check])


def test_the_webhook_suspends_under_run_policy_and_defaults_managed_by_for_multikueue():
    hook = WEBHOOKS[api.FRAMEWORK_PYTORCH_JOB]
    obj = job(kubeflow.PYTORCH_JOB, {"Worker": {"template": template()}}, labels={api.LABEL_QUEUE_NAME: "lq"})
    out = hook.default(obj, NS, CONFIG, multikueue_lookups(), FACTS)
    assert out["spec"]["runPolicy"] == {"suspend": True, "managedBy": api.MULTIKUEUE_CONTROLLER_NAME}
    assert "suspend" not in out["spec"] and "managedBy" not in out["spec"]
    plain = hook.default(obj, NS, CONFIG, Lookups.from_objects(), FACTS)
    assert plain["spec"]["runPolicy"] == {"suspend": True}


def test_the_webhook_keeps_another_controllers_managed_by():
    hook = WEBHOOKS[api.FRAMEWORK_MPI_JOB]
    obj = job(mpijob.MPI_JOB, {}, labels={api.LABEL_QUEUE_NAME: "lq"}, managedBy="example.com/other")
    out = hook.default(obj, NS, CONFIG, multikueue_lookups(), FACTS)
    assert out["spec"]["runPolicy"]["managedBy"] == "example.com/other"
    own = job(mpijob.MPI_JOB, {}, labels={api.LABEL_QUEUE_NAME: "lq"}, managedBy="kubeflow.org/mpi-operator")
    out = hook.default(own, NS, CONFIG, multikueue_lookups(), FACTS)
    assert out["spec"]["runPolicy"]["managedBy"] == api.MULTIKUEUE_CONTROLLER_NAME


def test_a_prebuilt_workload_is_refused_for_jaxjobs_only():
    labels = {api.LABEL_QUEUE_NAME: "lq", api.LABEL_PREBUILT_WORKLOAD_NAME: "wl"}
    jax = job(kubeflow.JAX_JOB, {}, labels=labels)
    errors = WEBHOOKS[api.FRAMEWORK_JAX_JOB].validate_create(jax, CONFIG)
    assert [e.detail for e in errors] == ['Is not supported for "kubeflow.org/v1, Kind=JAXJob"']
    tf = job(kubeflow.TF_JOB, {}, labels=labels)
    assert WEBHOOKS[api.FRAMEWORK_TF_JOB].validate_create(tf, CONFIG) == []


# ------------------------------------------------------------------------------------------------
# MultiKueue adapters


def test_the_worker_copy_has_no_managed_by_and_carries_the_origin_and_prebuilt_workload():
    local = pytorch(managedBy=api.MULTIKUEUE_CONTROLLER_NAME, suspend=True)
    local["metadata"].update(resourceVersion="7", labels={api.LABEL_QUEUE_NAME: "lq"})
    copy_ = remote_kubeflow_copy(local, "pytorchjob-j-abcde", "origin-1")
    assert copy_["spec"]["runPolicy"] == {"suspend": True}
    assert copy_["spec"]["pytorchReplicaSpecs"] == local["spec"]["pytorchReplicaSpecs"]
    assert copy_["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == "origin-1"
    assert copy_["metadata"]["labels"][api.LABEL_QUEUE_NAME] == "lq"
    assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == "pytorchjob-j-abcde"
    assert "resourceVersion" not in copy_["metadata"] and "uid" not in copy_["metadata"]
    assert (copy_["apiVersion"], copy_["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert local["spec"]["runPolicy"]["managedBy"] == api.MULTIKUEUE_CONTROLLER_NAME  # left alone


def test_the_whole_worker_status_is_mirrored_finished_and_released():
    remote = {
        "conditions": [{"type": "Succeeded", "status": "True", "message": "done"}],
        "replicaStatuses": {"Master": {"succeeded": 1, "selector": "training.kubeflow.org/job-name=j"}},
        "completionTime": "2026-12-02T17:00:00Z",
    }
    local = with_status(pytorch(), replicaStatuses={"Master": {"active": 1}, "Worker": {"active": 2}})
    patch = status_patch(local, remote)
    assert patch["status"]["conditions"] == remote["conditions"]
    assert patch["status"]["replicaStatuses"]["Master"]["selector"] == "training.kubeflow.org/job-name=j"
    assert status_patch(with_status(pytorch(), **remote), remote) is None
    assert kubeflow_job_finished({"status": remote}) and not kubeflow_job_finished(local)
    assert released_status_patch(local) == {
        "status": {"replicaStatuses": {"Master": {"active": 0}, "Worker": {"active": 0}}}
    }
    assert released_status_patch(with_status(pytorch(), **remote)) is None


class _Objects:
    def __init__(self, *objs: dict) -> None:
        self.by_key = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs}

    def get(self, key: str) -> dict | None:
        return self.by_key.get(key)


def test_managed_by_multikueue_is_read_under_run_policy_with_each_kinds_reason():
    objects = _Objects(pytorch(managedBy="kubeflow.org/training-operator"))
    adapter = KubeflowJobAdapter(None, objects, api.PYTORCH_JOB)
    assert adapter.is_managed(NS, "j") == (
        False,
        'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not "kubeflow.org/training-operator"',
    )
    mpi = job(mpijob.MPI_JOB, {}, managedBy="")
    assert MPIJobAdapter(None, _Objects(mpi)).is_managed(NS, "j") == (
        False,
        'Expecting spec.runPolicy.managedBy to be "kueue.x-k8s.io/multikueue" not ""',
    )
    ours = _Objects(job(mpijob.MPI_JOB, {}, managedBy=api.MULTIKUEUE_CONTROLLER_NAME))
    assert MPIJobAdapter(None, ours).is_managed(NS, "j") == (True, "")
    cached = KubeflowJobAdapter.remote_cache_transform(pytorch())
    assert "pytorchReplicaSpecs" not in cached["spec"] and "runPolicy" in cached["spec"]
