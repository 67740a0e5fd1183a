"""The job framework's declarations and pure parts (worker_agent/integrations/jobframework, the
webhooks' JobWebhook table)."""

from __future__ import annotations

import pytest

from kueue_domain import api
from worker_agent.integrations import jobframework
from worker_agent.integrations.appwrapper import AppWrapperIntegration
from worker_agent.integrations.job import JobIntegration
from worker_agent.integrations.jobset import JobSetIntegration
from worker_agent.integrations.kubeflow import (
    JAXJobIntegration,
    PaddleJobIntegration,
    PyTorchJobIntegration,
    TFJobIntegration,
    XGBoostJobIntegration,
)
from worker_agent.integrations.mpijob import MPIJobIntegration
from worker_agent.integrations.raycluster import RayClusterIntegration
from worker_agent.integrations.rayjob import RayJobIntegration
from worker_agent.integrations.rayservice import RayServiceIntegration
from worker_agent.integrations.trainjob import TrainJobIntegration
from worker_agent.webhooks.server import JOB_WEBHOOKS

KUBEFLOW_KINDS = (
    PyTorchJobIntegration,
    TFJobIntegration,
    XGBoostJobIntegration,
    PaddleJobIntegration,
    JAXJobIntegration,
    MPIJobIntegration,
)
KINDS = (
    JobIntegration,
    JobSetIntegration,
    TrainJobIntegration,
    *KUBEFLOW_KINDS,
    RayJobIntegration,
    RayClusterIntegration,
    RayServiceIntegration,
    AppWrapperIntegration,
)


@pytest.mark.parametrize(
    ("kind", "controller", "informer", "prefix"),
    [
        (JobIntegration, "job", "jobs", "batchJob"),
        (JobSetIntegration, "jobset", "jobsets", "jobSet"),
        (TrainJobIntegration, "trainjob", "trainjobs", "trainJob"),
        (PyTorchJobIntegration, "pytorchjob", "pytorchjobs", "pytorchjob"),
        (TFJobIntegration, "tfjob", "tfjobs", "tfjob"),
        (XGBoostJobIntegration, "xgboostjob", "xgboostjobs", "xgboostjob"),
        (PaddleJobIntegration, "paddlejob", "paddlejobs", "paddlejob"),
        (JAXJobIntegration, "jaxjob", "jaxjobs", "jaxjob"),
        (MPIJobIntegration, "mpijob", "mpijobs", "mpijob"),
        (RayJobIntegration, "rayjob", "rayjobs", "rayJob"),
        (RayClusterIntegration, "raycluster", "rayclusters", "rayCluster"),
        (RayServiceIntegration, "rayservice", "rayservices", "rayService"),
        (AppWrapperIntegration, "appwrapper", "appwrappers", "appWrapper"),
    ],
)
def test_each_kind_keeps_its_controller_informer_and_index_names(kind, controller, informer, prefix):
    assert kind.resource.kind.lower() == controller
    assert kind.resource.plural == informer
    assert kind.index_prefix == prefix


def test_every_framework_kind_has_one_webhook_of_its_gvk():
    assert {k.name: k.resource.gvk for k in KINDS} == {name: w.gvk for name, w in JOB_WEBHOOKS.items()}


def test_the_succeeded_condition_wins_over_the_failed_one():
    obj = {
        "status": {
            "conditions": [
                {"type": "Failed", "status": "True", "message": "f"},
                {"type": "Completed", "status": "True", "message": "c"},
            ]
        }
    }
    assert jobframework.condition_finished(obj, "Completed", "Failed") == (True, True, "c")
    assert jobframework.condition_finished({}, "Completed", "Failed") == (False, False, "")


def _workload(owner_kind: str, api_version: str) -> dict:
    ref = {"apiVersion": api_version, "kind": owner_kind, "name": "a", "uid": "u", "controller": True}
    return {"metadata": {"namespace": "ns", "ownerReferences": [ref]}}


def test_owner_indexes_see_only_their_kinds_controller():
    by_uid, by_key = jobframework.owner_indexes(api.JOB_SET)
    own = _workload("JobSet", api.JOB_SET.api_version)
    assert (by_uid(own), by_key(own)) == (("u",), ("ns/a",))
    other = _workload("Job", api.JOB.api_version)
    assert (by_uid(other), by_key(other)) == ((), ())


def test_a_childs_parent_is_found_by_group_and_kind_in_any_version():
    child = _workload("JobSet", "jobset.x-k8s.io/v1alpha1")
    assert jobframework.controller_ref_of_kind(api.JOB_SET, child)["name"] == "a"
    assert jobframework.controller_ref_of_kind(api.TRAIN_JOB, child) is None


def _podset(name: str) -> dict:
    return {"name": name, "count": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}


@pytest.mark.parametrize(("compare_names", "expected"), [(True, False), (False, True)])
def test_podset_names_count_only_where_the_kind_compares_them(compare_names, expected):
    wl = {"spec": {"podSets": [_podset("main")]}}
    matches = jobframework.workload_matches([_podset("other")], True, None, wl, {}, compare_names)
    assert matches is expected
