"""The JobSet webhooks (defaulting and validation) and their routes, without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kueue_domain import api, fields
from kueue_domain.config import parse_config
from worker_agent.webhooks import common, jobset
from worker_agent.webhooks.common import Facts, Lookups
from worker_agent.webhooks.review import Request
from worker_agent.webhooks.server import HOOKS, WebhookServer

REPO = Path(__file__).resolve().parents[2]
NS = "team-a"
CONFIG = parse_config({"integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}})
FACTS = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: NS})
NO_CACHES = Lookups.from_objects()


def job_set(labels: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    meta: dict = {"name": "js", "namespace": NS}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    template = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {"spec": {"template": template}}},
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": template}},
                },
            ],
            **spec,
        },
    }


def multikueue_lookups(controller: str = api.MULTIKUEUE_CONTROLLER_NAME) -> Lookups:
    return Lookups.from_objects(
        local_queues=[{"metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}}],
        cluster_queues=[{"metadata": {"name": "cq"}, "spec": {"admissionChecks": ["mk"]}}],
        admission_checks=[{"metadata": {"name": "mk"}, "spec": {"controllerName": controller}}],
    )


def messages(errors) -> str:
    return fields.aggregate(errors)


# ------------------------------------------------------------------------------------------------
# Defaulting


def test_a_jobset_with_a_queue_name_is_created_suspended():
    out = jobset.default(job_set({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, NO_CACHES, FACTS)
    assert out["spec"]["suspend"] is True


def test_a_jobset_without_a_queue_name_is_left_alone_unless_kueue_manages_all_jobs():
    original = job_set()
    assert jobset.default(original, NS, CONFIG, NO_CACHES, FACTS) == original
    every = parse_config({"manageJobsWithoutQueueName": True})
    assert jobset.default(job_set(), NS, every, NO_CACHES, FACTS)["spec"]["suspend"] is True


def test_the_default_local_queue_and_priority_class_are_applied():
    lookups = Lookups.from_objects(
        local_queues=[{"metadata": {"name": "default", "namespace": NS}, "spec": {"clusterQueue": "cq"}}],
        priority_classes=[{"metadata": {"name": "default"}, "value": 5}],
    )
    config = parse_config({"featureGates": {"WorkloadPriorityClassDefaulting": True}})
    out = jobset.default(job_set(), NS, config, lookups, FACTS)
    assert out["metadata"]["labels"] == {
        api.LABEL_QUEUE_NAME: "default",
        api.LABEL_PRIORITY_CLASS: "default",
    }
    assert out["spec"]["suspend"] is True


def test_a_jobset_of_a_multikueue_cluster_queue_is_managed_by_multikueue():
    out = jobset.default(job_set({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, multikueue_lookups(), FACTS)
    assert out["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    # The JobSet controller's own value may be replaced too (CanDefaultManagedBy).
    explicit = job_set({api.LABEL_QUEUE_NAME: "lq"}, managedBy="jobset.sigs.k8s.io/jobset-controller")
    out = jobset.default(explicit, NS, CONFIG, multikueue_lookups(), FACTS)
    assert out["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"


def test_managed_by_is_left_alone_otherwise():
    custom = job_set({api.LABEL_QUEUE_NAME: "lq"}, managedBy="example.com/mine")
    assert jobset.default(custom, NS, CONFIG, multikueue_lookups(), FACTS)["spec"]["managedBy"] == (
        "example.com/mine"
    )
    other_check = jobset.default(
        job_set({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, multikueue_lookups("example.com/x"), FACTS
    )
    assert "managedBy" not in other_check["spec"]
    off = parse_config({"featureGates": {"MultiKueue": False}})
    out = jobset.default(job_set({api.LABEL_QUEUE_NAME: "lq"}), NS, off, multikueue_lookups(), FACTS)
    assert "managedBy" not in out["spec"]


# ------------------------------------------------------------------------------------------------
# Validation


def test_an_invalid_queue_name_names_the_label():
    errors = jobset.validate_create(job_set({api.LABEL_QUEUE_NAME: "Bad_Name"}), CONFIG)
    assert messages(errors).startswith(
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Bad_Name": '
    )
    assert jobset.validate_create(job_set({api.LABEL_QUEUE_NAME: "good.name-1"}), CONFIG) == []


def test_prebuilt_workloads_are_supported_for_jobsets():
    labels = {api.LABEL_QUEUE_NAME: "lq", api.LABEL_PREBUILT_WORKLOAD_NAME: "wl-1"}
    assert jobset.validate_create(job_set(labels), CONFIG) == []


def test_elastic_jobsets_are_forbidden():
    js = job_set({api.LABEL_QUEUE_NAME: "lq"}, {api.ANNOTATION_ELASTIC_JOB: "true"})
    assert messages(jobset.validate_create(js, CONFIG)) == (
        "metadata.annotations[kueue.x-k8s.io/elastic-job]: Forbidden: "
        'elastic job is not supported for "jobset.x-k8s.io/v1alpha2, Kind=JobSet"'
    )


def test_the_queue_name_is_immutable_on_a_running_jobset_only():
    old = job_set({api.LABEL_QUEUE_NAME: "a"}, suspend=False)
    new = job_set({api.LABEL_QUEUE_NAME: "b"}, suspend=False)
    assert messages(jobset.validate_update(old, new, NS, NO_CACHES, CONFIG)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "b": field is immutable'
    )
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    assert jobset.validate_update(old, new, NS, NO_CACHES, CONFIG) == []


def test_the_queue_name_cannot_be_cleared_where_a_default_queue_exists():
    old, new = job_set({api.LABEL_QUEUE_NAME: "a"}, suspend=True), job_set(suspend=True)
    lookups = Lookups.from_objects(
        local_queues=[{"metadata": {"name": "default", "namespace": NS}, "spec": {"clusterQueue": "cq"}}]
    )
    assert messages(jobset.validate_update(old, new, NS, lookups, CONFIG)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "": '
        "queue-name must not be empty in namespace with default queue"
    )


def test_update_errors_come_before_create_errors():
    old = job_set({api.LABEL_QUEUE_NAME: "a"}, suspend=False)
    new = job_set({api.LABEL_QUEUE_NAME: "a", api.LABEL_MAX_EXEC_TIME_SECONDS: "0"}, suspend=False)
    assert messages(jobset.validate_update(old, new, NS, NO_CACHES, CONFIG)) == (
        '[metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "0": field is immutable, '
        "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: 0: should be greater than 0]"
    )


# ------------------------------------------------------------------------------------------------
# Routes, owners and manifests


def review(operation: str, obj: dict, old: dict | None = None) -> Request:
    return Request.from_review(
        {"request": {"uid": "u", "operation": operation, "namespace": NS, "object": obj, "oldObject": old}}
    )


def server(config=CONFIG) -> WebhookServer:
    return WebhookServer(None, config, NO_CACHES, None, namespace_labels={NS: {}})  # type: ignore[arg-type]


async def test_the_server_routes_jobsets_when_the_framework_is_enabled():
    created = review("CREATE", job_set({api.LABEL_QUEUE_NAME: "lq"}))
    response = await server().review(HOOKS["/mutate-jobset-x-k8s-io-v1alpha2-jobset"], created)
    assert response.allowed and {"op": "add", "path": "/spec/suspend", "value": True} in response.patch
    bad = review("CREATE", job_set({api.LABEL_QUEUE_NAME: "Q"}))
    response = await server().review(HOOKS["/validate-jobset-x-k8s-io-v1alpha2-jobset"], bad)
    assert not response.allowed and "metadata.labels[kueue.x-k8s.io/queue-name]" in response.message
    jobs_only = server(parse_config({}))
    response = await jobs_only.review(HOOKS["/validate-jobset-x-k8s-io-v1alpha2-jobset"], bad)
    assert response.allowed


@pytest.mark.parametrize("frameworks", [["batch/job", "jobset.x-k8s.io/jobset"], ["batch/job"]])
def test_a_job_of_a_jobset_is_owned_by_a_managed_kind_only_with_jobsets_enabled(frameworks):
    child = {
        "metadata": {
            "name": "js-workers-0",
            "ownerReferences": [
                {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "controller": True}
            ],
        }
    }
    config = parse_config({"integrations": {"frameworks": frameworks}})
    assert common.owner_kind_managed(child, config) == ("jobset.x-k8s.io/jobset" in frameworks)


def test_the_manifests_register_both_jobset_webhooks():
    hooks = {}
    for name in ("mutating.yaml", "validating.yaml"):
        for doc in yaml.safe_load_all((REPO / "deploy" / "webhooks" / name).read_text()):
            for hook in (doc or {}).get("webhooks") or ():
                hooks[hook["name"]] = hook
    mutate, validate = hooks["mjobset.kb.io"], hooks["vjobset.kb.io"]
    assert mutate["clientConfig"]["service"]["path"] == "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
    assert validate["clientConfig"]["service"]["path"] == "/validate-jobset-x-k8s-io-v1alpha2-jobset"
    for hook, operations in ((mutate, ["CREATE"]), (validate, ["CREATE", "UPDATE"])):
        assert hook["rules"] == [
            {
                "apiGroups": ["jobset.x-k8s.io"],
                "apiVersions": ["v1alpha2"],
                "operations": operations,
                "resources": ["jobsets"],
            }
        ]
