"""The admission webhooks' defaulting and validation, without a cluster."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
import ssl
from pathlib import Path

import aiohttp
import pytest

from kueue_domain import api, fields
from kueue_domain.config import parse_config
from worker_agent.webhooks import OwnerInformers, certs, job, leaderworkerset, pod
from worker_agent.webhooks.common import Facts, Lookups
from worker_agent.webhooks.review import Request, allowed, apply_json_patch, denied, go_json, json_patch
from worker_agent.webhooks.server import HOOKS, WebhookServer

REPO = Path(__file__).resolve().parents[2]
NS = "team-a"
CONFIG = parse_config(
    {"integrations": {"frameworks": ["batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"]}}
)
FACTS = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: NS})
KUBE_SYSTEM = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: "kube-system"})
NO_CACHES = Lookups.from_objects()


def local_queue(name: str, cq: str = "cq", namespace: str = NS) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def wpc(name: str, value: int = 100) -> dict:
    return {"metadata": {"name": name}, "value": value}


def batch_job(labels: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": NS, **({"labels": labels} if labels else {})},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            **spec,
        },
    }


def plain_pod(labels: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    meta: dict = {"name": "p", "namespace": NS}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
            **spec,
        },
    }


def lws(labels: dict | None = None, leader: bool = True, ready: int = 0, size: int = 3) -> dict:
    template = {
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    }
    lwt: dict = {"size": size, "workerTemplate": copy.deepcopy(template)}
    if leader:
        lwt["leaderTemplate"] = copy.deepcopy(template)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "srv", "namespace": NS, **({"labels": labels} if labels else {})},
        "spec": {"replicas": 2, "leaderWorkerTemplate": lwt},
        "status": {"readyReplicas": ready},
    }


def owned_by(obj: dict, kind: str, api_version: str) -> dict:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "parent", "uid": "u1", "controller": True}
    ]
    return obj


# ------------------------------------------------------------------------------------------------
# batch/v1 Job defaulting


def test_job_with_queue_name_is_created_suspended():
    out = job.default(batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, NO_CACHES, FACTS)
    assert out["spec"]["suspend"] is True


def test_job_without_queue_name_is_left_alone():
    original = batch_job()
    assert job.default(original, NS, CONFIG, NO_CACHES, FACTS) == original


def test_job_gets_the_namespace_default_local_queue():
    lookups = Lookups.from_objects(local_queues=[local_queue("default")])
    out = job.default(batch_job(), NS, CONFIG, lookups, FACTS)
    assert out["metadata"]["labels"][api.LABEL_QUEUE_NAME] == "default"
    assert out["spec"]["suspend"] is True


def test_default_local_queue_waits_for_synced_caches_but_suspend_does_not():
    unsynced = Lookups.from_objects(local_queues=[local_queue("default")], synced=False)
    assert "labels" not in job.default(batch_job(), NS, CONFIG, unsynced, FACTS)["metadata"]
    out = job.default(batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, unsynced, FACTS)
    assert out["spec"]["suspend"] is True


def test_default_local_queue_respects_the_namespace_selector_and_owners():
    lookups = Lookups.from_objects(local_queues=[local_queue("default", namespace="kube-system")])
    out = job.default(batch_job(), "kube-system", CONFIG, lookups, KUBE_SYSTEM)
    assert "labels" not in out["metadata"]
    lookups = Lookups.from_objects(local_queues=[local_queue("default")])
    child = owned_by(batch_job(), "LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1")
    assert "labels" not in job.default(child, NS, CONFIG, lookups, FACTS)["metadata"]


def test_default_workload_priority_class_only_with_its_gate():
    lookups = Lookups.from_objects(priority_classes=[wpc("default")])
    on = parse_config({"featureGates": {"WorkloadPriorityClassDefaulting": True}})
    out = job.default(batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, on, lookups, FACTS)
    assert out["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] == "default"
    kept = job.default(
        batch_job({api.LABEL_QUEUE_NAME: "lq", api.LABEL_PRIORITY_CLASS: "high"}), NS, on, lookups, FACTS
    )
    assert kept["metadata"]["labels"][api.LABEL_PRIORITY_CLASS] == "high"
    # Alpha and off by default in Kueue v0.19.
    out = job.default(batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, lookups, FACTS)
    assert api.LABEL_PRIORITY_CLASS not in out["metadata"]["labels"]


def test_job_under_a_managed_ancestor_is_not_suspended():
    facts = Facts(namespace_labels=FACTS.namespace_labels, managed_ancestor=True)
    out = job.default(batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, NO_CACHES, facts)
    assert "suspend" not in out["spec"]


def test_manage_jobs_without_queue_name_suspends_in_managed_namespaces_only():
    config = parse_config({"manageJobsWithoutQueueName": True})
    assert job.default(batch_job(), NS, config, NO_CACHES, FACTS)["spec"]["suspend"] is True
    assert "suspend" not in job.default(batch_job(), "kube-system", config, NO_CACHES, KUBE_SYSTEM)["spec"]


def multikueue_lookups(check_in_strategy: bool = False, controller: str = api.MULTIKUEUE_CONTROLLER_NAME):
    cq_spec: dict = {"resourceGroups": []}
    if check_in_strategy:
        cq_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": "mk"}]}
    else:
        cq_spec["admissionChecks"] = ["mk"]
    return Lookups.from_objects(
        local_queues=[local_queue("lq", "cq")],
        cluster_queues=[{"metadata": {"name": "cq"}, "spec": cq_spec}],
        admission_checks=[{"metadata": {"name": "mk"}, "spec": {"controllerName": controller}}],
    )


@pytest.mark.parametrize("in_strategy", [False, True])
def test_job_of_a_multikueue_cluster_queue_is_managed_by_multikueue(in_strategy):
    out = job.default(
        batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, multikueue_lookups(in_strategy), FACTS
    )
    assert out["spec"]["managedBy"] == api.MULTIKUEUE_CONTROLLER_NAME
    explicit = batch_job({api.LABEL_QUEUE_NAME: "lq"}, managedBy=api.JOB_MANAGED_BY_DEFAULT)
    out = job.default(explicit, NS, CONFIG, multikueue_lookups(in_strategy), FACTS)
    assert out["spec"]["managedBy"] == api.MULTIKUEUE_CONTROLLER_NAME


def test_managed_by_is_left_alone_otherwise():
    other = job.default(
        batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, multikueue_lookups(controller="x"), FACTS
    )
    assert "managedBy" not in other["spec"]
    custom = batch_job({api.LABEL_QUEUE_NAME: "lq"}, managedBy="example.com/mine")
    assert (
        job.default(custom, NS, CONFIG, multikueue_lookups(), FACTS)["spec"]["managedBy"]
        == "example.com/mine"
    )
    unknown_queue = batch_job({api.LABEL_QUEUE_NAME: "other"})
    assert "managedBy" not in job.default(unknown_queue, NS, CONFIG, multikueue_lookups(), FACTS)["spec"]
    unsynced = multikueue_lookups()
    unsynced.synced = lambda: False
    assert (
        "managedBy"
        not in job.default(batch_job({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, unsynced, FACTS)["spec"]
    )


# ------------------------------------------------------------------------------------------------
# batch/v1 Job validation


def messages(errors) -> str:
    return fields.aggregate(errors)


def test_invalid_queue_name_is_rejected_with_kubernetes_message():
    errors = job.validate_create(batch_job({api.LABEL_QUEUE_NAME: "Bad_Name"}))
    assert messages(errors) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Bad_Name": '
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
        "and must start and end with an "
        "alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )
    assert job.validate_create(batch_job({api.LABEL_QUEUE_NAME: "good.name-1"})) == []


def test_max_execution_time_must_be_a_positive_integer():
    assert messages(job.validate_create(batch_job({api.LABEL_MAX_EXEC_TIME_SECONDS: "0"}))) == (
        "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: 0: should be greater than 0"
    )
    assert messages(job.validate_create(batch_job({api.LABEL_MAX_EXEC_TIME_SECONDS: "1m"}))) == (
        'metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "1m": '
        'strconv.Atoi: parsing "1m": invalid syntax'
    )


def test_min_parallelism_annotation_range():
    j = batch_job()
    j["metadata"]["annotations"] = {api.ANNOTATION_JOB_MIN_PARALLELISM: "2"}
    assert messages(job.validate_create(j)) == (
        "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: "
        "Invalid value: 2: should be between 0 and 1"
    )
    j["metadata"]["annotations"][api.ANNOTATION_JOB_MIN_PARALLELISM] = "1"
    assert job.validate_create(j) == []


def test_completions_equal_parallelism_needs_an_indexed_job():
    j = batch_job()
    j["metadata"]["annotations"] = {api.ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM: "true"}
    assert "should not be enabled for NonIndexed jobs" in messages(job.validate_create(j))
    j["spec"]["completionMode"] = "Indexed"
    assert job.validate_create(j) == []


def test_queue_name_is_immutable_on_a_running_job_only():
    old = batch_job({api.LABEL_QUEUE_NAME: "a"}, suspend=False)
    new = batch_job({api.LABEL_QUEUE_NAME: "b"}, suspend=False)
    assert messages(job.validate_update(old, new, NS, NO_CACHES)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "b": field is immutable'
    )
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    assert job.validate_update(old, new, NS, NO_CACHES) == []


def test_queue_name_cannot_be_cleared_where_a_default_queue_exists():
    old, new = batch_job({api.LABEL_QUEUE_NAME: "a"}, suspend=True), batch_job(suspend=True)
    assert job.validate_update(old, new, NS, NO_CACHES) == []
    lookups = Lookups.from_objects(local_queues=[local_queue("default")])
    assert messages(job.validate_update(old, new, NS, lookups)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "": '
        "queue-name must not be empty in namespace with default queue"
    )


def test_priority_class_rules():
    running = batch_job({api.LABEL_QUEUE_NAME: "a"}, suspend=False)
    with_wpc = batch_job({api.LABEL_QUEUE_NAME: "a", api.LABEL_PRIORITY_CLASS: "high"}, suspend=False)
    assert messages(job.validate_update(running, with_wpc, NS, NO_CACHES)) == (
        'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "high": '
        "WorkloadPriorityClass cannot be added to a non-suspended workload"
    )
    suspended, suspended_wpc = copy.deepcopy(running), copy.deepcopy(with_wpc)
    suspended["spec"]["suspend"] = suspended_wpc["spec"]["suspend"] = True
    assert job.validate_update(suspended, suspended_wpc, NS, NO_CACHES) == []
    assert "cannot be removed" in messages(job.validate_update(suspended_wpc, suspended, NS, NO_CACHES))


def test_several_errors_are_aggregated_like_go():
    errors = job.validate_create(
        batch_job({api.LABEL_QUEUE_NAME: "A", api.LABEL_MAX_EXEC_TIME_SECONDS: "-1"})
    )
    text = messages(errors)
    assert text.startswith('[metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "A"')
    assert text.endswith("Invalid value: -1: should be greater than 0]")


# ------------------------------------------------------------------------------------------------
# Pods


def test_pod_with_queue_name_is_gated_labelled_and_finalized():
    out = pod.default(plain_pod({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, NO_CACHES, FACTS)
    assert out["metadata"]["labels"][api.LABEL_MANAGED] == "true"
    assert out["metadata"]["finalizers"] == [api.FINALIZER_MANAGED]
    assert out["spec"]["schedulingGates"] == [{"name": api.SCHEDULING_GATE_ADMISSION}]
    assert out["metadata"]["annotations"][api.ANNOTATION_ROLE_HASH] == pod.role_hash(out["spec"])


def test_pod_with_default_queue_is_managed():
    lookups = Lookups.from_objects(local_queues=[local_queue("default")])
    out = pod.default(plain_pod(), NS, CONFIG, lookups, FACTS)
    assert out["metadata"]["labels"][api.LABEL_QUEUE_NAME] == "default"
    assert out["metadata"]["labels"][api.LABEL_MANAGED] == "true"


@pytest.mark.parametrize(
    "obj,facts",
    [
        (plain_pod(), FACTS),  # no queue name
        (plain_pod({api.LABEL_QUEUE_NAME: "lq"}), KUBE_SYSTEM),  # excluded namespace
        (plain_pod({api.LABEL_QUEUE_NAME: "lq"}), Facts(FACTS.namespace_labels, managed_ancestor=True)),
    ],
)
def test_unmanaged_pods_are_untouched(obj, facts):
    assert pod.default(obj, NS, CONFIG, NO_CACHES, facts) == obj


def test_pod_suspended_by_its_parent_is_only_gated():
    parent = {api.ANNOTATION_POD_SUSPENDING_PARENT: api.FRAMEWORK_LEADER_WORKER_SET}
    out = pod.default(plain_pod(annotations=parent), NS, CONFIG, NO_CACHES, KUBE_SYSTEM)
    assert out["spec"]["schedulingGates"] == [{"name": api.SCHEDULING_GATE_ADMISSION}]
    assert api.ANNOTATION_ROLE_HASH in out["metadata"]["annotations"]
    assert "finalizers" not in out["metadata"]
    assert "labels" not in out["metadata"]


def test_gating_keeps_other_gates_and_finalizers():
    p = plain_pod({api.LABEL_QUEUE_NAME: "lq"}, schedulingGates=[{"name": "other"}])
    p["metadata"]["finalizers"] = ["x/y"]
    out = pod.default(p, NS, CONFIG, NO_CACHES, FACTS)
    assert out["spec"]["schedulingGates"] == [{"name": "other"}, {"name": api.SCHEDULING_GATE_ADMISSION}]
    assert out["metadata"]["finalizers"] == ["x/y", api.FINALIZER_MANAGED]


def test_role_hash_is_sha256_of_the_go_encoded_spec_shape():
    spec = plain_pod()["spec"]
    expected_json = (
        '{"spec":{"affinity":null,"containers":[{"ports":null,"resources":{"requests":{"cpu":"1"}}}],'
        '"initContainers":null,"nodeSelector":null,"overhead":null,"priority":null,"resourceClaims":null,'
        '"runtimeClassName":null,"tolerations":null,"topologySpreadConstraints":null}}'
    )
    assert go_json({"spec": pod.spec_shape(spec)}) == expected_json
    assert pod.role_hash(spec) == hashlib.sha256(expected_json.encode()).hexdigest()[:8]


def test_role_hash_ignores_names_and_images_but_not_requests():
    a, b = plain_pod()["spec"], plain_pod()["spec"]
    b["containers"][0]["image"] = "other"
    b["containers"][0]["name"] = "other"
    assert pod.role_hash(a) == pod.role_hash(b)
    b["containers"][0]["resources"]["requests"]["cpu"] = "2"
    assert pod.role_hash(a) != pod.role_hash(b)
    c = plain_pod(nodeSelector={"b": "1", "a": "2"})["spec"]
    d = plain_pod(nodeSelector={"a": "2", "b": "1"})["spec"]
    assert pod.role_hash(c) == pod.role_hash(d) != pod.role_hash(a)
    with_pod_resources = plain_pod(resources={"requests": {"cpu": "1"}})["spec"]
    assert pod.role_hash(with_pod_resources) != pod.role_hash(a)


def test_go_json_escapes_like_go():
    assert go_json({"a": "<&>", "b": "é"}) == '{"a":"\\u003c\\u0026\\u003e","b":"é"}'


def test_pod_validation():
    bad_label = plain_pod({api.LABEL_MANAGED: "false"})
    assert messages(pod.validate_create(bad_label)) == (
        "metadata.labels[kueue.x-k8s.io/managed]: Forbidden: managed label value can only be 'true'"
    )
    no_count = plain_pod(annotations={api.ANNOTATION_POD_GROUP_NAME: "g"})
    assert messages(pod.validate_create(no_count)) == (
        "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: both the "
        "'kueue.x-k8s.io/pod-group-total-count' annotation and the 'kueue.x-k8s.io/pod-group-name' "
        "label should be set"
    )
    zero = plain_pod(
        annotations={api.ANNOTATION_POD_GROUP_NAME: "g", api.ANNOTATION_POD_GROUP_TOTAL_COUNT: "0"}
    )
    assert "group total count should be greater than zero" in messages(pod.validate_create(zero))
    fine = plain_pod(
        annotations={api.ANNOTATION_POD_GROUP_NAME: "g", api.ANNOTATION_POD_GROUP_TOTAL_COUNT: "2"}
    )
    assert pod.validate_create(fine) == []


def test_pod_update_rules():
    gated = {"schedulingGates": [{"name": api.SCHEDULING_GATE_ADMISSION}]}
    group = {api.ANNOTATION_POD_GROUP_NAME: "g", api.ANNOTATION_POD_GROUP_TOTAL_COUNT: "2"}
    old = plain_pod(
        {api.LABEL_QUEUE_NAME: "a"}, {**group, api.ANNOTATION_RETRIABLE_IN_GROUP: "false"}, **gated
    )
    new = plain_pod(
        {api.LABEL_QUEUE_NAME: "b"}, {**group, api.ANNOTATION_RETRIABLE_IN_GROUP: "true"}, **gated
    )
    text = messages(pod.validate_update(old, new, NS, NO_CACHES))
    assert "unretriable pod group can't be converted to retriable" in text
    assert "queue-name" not in text  # gated: the queue name may still change
    running = plain_pod({api.LABEL_QUEUE_NAME: "b"}, group)
    assert "field is immutable" in messages(pod.validate_update(old, running, NS, NO_CACHES))


def test_managed_label_on_a_pod_of_a_managed_owner_warns():
    p = owned_by(plain_pod({api.LABEL_MANAGED: "true"}), "Job", "batch/v1")
    assert pod.warnings(p, CONFIG) == [api.warning_pod_managed_label_with_managed_owner()]
    assert pod.warnings(plain_pod({api.LABEL_MANAGED: "true"}), CONFIG) == []


# ------------------------------------------------------------------------------------------------
# LeaderWorkerSet


def test_managed_lws_templates_are_stamped():
    labels = {api.LABEL_QUEUE_NAME: "lq", api.LABEL_PRIORITY_CLASS: "high"}
    out = leaderworkerset.default(lws(labels), NS, CONFIG, NO_CACHES, FACTS)
    lwt = out["spec"]["leaderWorkerTemplate"]
    for template in (lwt["leaderTemplate"], lwt["workerTemplate"]):
        assert template["metadata"]["labels"] == labels
        assert template["metadata"]["annotations"] == {
            api.ANNOTATION_POD_SUSPENDING_PARENT: "leaderworkerset.x-k8s.io/leaderworkerset",
            api.ANNOTATION_POD_GROUP_SERVING: "true",
        }
    no_leader = leaderworkerset.default(
        lws({api.LABEL_QUEUE_NAME: "lq"}, leader=False), NS, CONFIG, NO_CACHES, FACTS
    )
    assert "leaderTemplate" not in no_leader["spec"]["leaderWorkerTemplate"]
    assert no_leader["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"] == {
        api.LABEL_QUEUE_NAME: "lq"
    }


def test_unmanaged_lws_is_untouched():
    original = lws()
    assert leaderworkerset.default(original, NS, CONFIG, NO_CACHES, FACTS) == original


def test_lws_validation():
    big = lws({api.LABEL_QUEUE_NAME: "lq"})
    big["spec"]["replicas"] = 1_000_001
    assert messages(leaderworkerset.validate_create(big)) == (
        "spec.replicas: Invalid value: 1000001: must be between 0 and 1000000, inclusive"
    )
    old, new = lws({api.LABEL_QUEUE_NAME: "a"}, ready=1), lws({api.LABEL_QUEUE_NAME: "b"}, ready=1)
    assert "field is immutable" in messages(leaderworkerset.validate_update(old, new, CONFIG, FACTS))
    old["status"]["readyReplicas"] = 0
    assert leaderworkerset.validate_update(old, new, CONFIG, FACTS) == []
    removed = lws(ready=0)
    assert "field is immutable" in messages(leaderworkerset.validate_update(old, removed, CONFIG, FACTS))


def test_managed_lws_templates_and_size_are_immutable():
    old = lws({api.LABEL_QUEUE_NAME: "lq"})
    new = copy.deepcopy(old)
    new["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "y"
    new["spec"]["replicas"] = 5
    assert leaderworkerset.validate_update(old, new, CONFIG, FACTS) == []  # image and replicas may change
    new["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"][
        "requests"
    ] = {"cpu": "2"}
    new["spec"]["leaderWorkerTemplate"]["size"] = 4
    text = messages(leaderworkerset.validate_update(old, new, CONFIG, FACTS))
    assert (
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.requests.cpu: "
        'Invalid value: "2": field is immutable' in text
    )
    assert "spec.leaderWorkerTemplate.size: Invalid value: 4: field is immutable" in text


# ------------------------------------------------------------------------------------------------
# AdmissionReview and JSON Patch


def test_json_patch_round_trips_and_escapes_keys():
    before = batch_job()
    after = job.default(
        batch_job(), NS, CONFIG, Lookups.from_objects(local_queues=[local_queue("default")]), FACTS
    )
    ops = json_patch(before, after)
    assert {"op": "add", "path": "/metadata/labels", "value": {api.LABEL_QUEUE_NAME: "default"}} in ops
    assert apply_json_patch(before, ops) == after
    labelled = batch_job({"a": "b"})
    relabelled = copy.deepcopy(labelled)
    relabelled["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "q"
    assert json_patch(labelled, relabelled) == [
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "q"}
    ]
    assert json_patch({"a": 1}, {"a": 1}) == []
    assert json_patch({"a": True}, {"a": 1}) == [{"op": "replace", "path": "/a", "value": 1}]


def test_admission_review_responses():
    review = allowed([{"op": "add", "path": "/x", "value": 1}]).review("uid-1")
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    response = review["response"]
    assert response["uid"] == "uid-1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [{"op": "add", "path": "/x", "value": 1}]
    refused = denied("bad", ["careful"]).review("uid-2")["response"]
    assert refused["allowed"] is False
    assert refused["status"] == {"code": 403, "reason": "Forbidden", "message": "bad"}
    assert refused["warnings"] == ["careful"]
    with pytest.raises(ValueError):
        Request.from_review({"request": {}})


def review(operation: str, obj: dict, old: dict | None = None) -> Request:
    return Request.from_review(
        {"request": {"uid": "u", "operation": operation, "namespace": NS, "object": obj, "oldObject": old}}
    )


async def test_server_review_dispatches_and_disabled_frameworks_allow_everything():
    server = WebhookServer(
        None,  # type: ignore[arg-type] - no API calls: namespace labels known, no owners
        CONFIG,
        NO_CACHES,
        certificates=None,  # type: ignore[arg-type]
        namespace_labels={NS: {}},
    )
    response = await server.review(
        HOOKS[api.WEBHOOK_PATH_MUTATE_JOB], review("CREATE", batch_job({api.LABEL_QUEUE_NAME: "q"}))
    )
    assert response.allowed and {"op": "add", "path": "/spec/suspend", "value": True} in response.patch
    response = await server.review(
        HOOKS[api.WEBHOOK_PATH_VALIDATE_JOB], review("CREATE", batch_job({api.LABEL_QUEUE_NAME: "Q"}))
    )
    assert not response.allowed and "queue-name" in response.message
    response = await server.review(HOOKS[api.WEBHOOK_PATH_VALIDATE_JOB], review("DELETE", batch_job()))
    assert response.allowed
    jobs_only = WebhookServer(None, parse_config({}), NO_CACHES, None, namespace_labels={NS: {}})  # type: ignore[arg-type]
    pod_review = review("CREATE", plain_pod({api.LABEL_QUEUE_NAME: "q"}))
    response = await jobs_only.review(HOOKS[api.WEBHOOK_PATH_MUTATE_POD], pod_review)
    assert response.allowed and response.patch == []
    response = await server.review(HOOKS[api.WEBHOOK_PATH_MUTATE_POD], pod_review)
    assert any(op["path"] == "/spec/schedulingGates" for op in response.patch)


def test_fields_helpers():
    assert fields.atoi("+12") == 12
    with pytest.raises(fields.GoParseError, match="value out of range"):
        fields.atoi("99999999999999999999")
    with pytest.raises(fields.GoParseError, match=r'strconv.ParseBool: parsing "yes": invalid syntax'):
        fields.parse_bool("yes")
    assert fields.dns1123_subdomain_errors("a" * 254)[0] == "must be no more than 253 characters"
    assert fields.aggregate([fields.forbidden(fields.Path("a"), "x")] * 2) == "a: Forbidden: x"


# ------------------------------------------------------------------------------------------------
# Manifests and the local fleet's rewrite of them


def load_manifests() -> list[dict]:
    import yaml

    docs = []
    for name in ("mutating.yaml", "validating.yaml"):
        docs += [d for d in yaml.safe_load_all((REPO / "deploy" / "webhooks" / name).read_text()) if d]
    return docs


def test_manifests_match_the_server_routes():
    docs = {d["kind"]: d for d in load_manifests()}
    mutating, validating = docs["MutatingWebhookConfiguration"], docs["ValidatingWebhookConfiguration"]
    assert mutating["metadata"]["name"] == api.MUTATING_WEBHOOK_CONFIGURATION_NAME
    assert validating["metadata"]["name"] == api.VALIDATING_WEBHOOK_CONFIGURATION_NAME
    served = set()
    for doc in (mutating, validating):
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            served.add(path)
            assert HOOKS[path].mutating == (doc is mutating)
            assert tuple(hook["rules"][0]["operations"]) == HOOKS[path].operations
            assert hook["clientConfig"]["service"]["name"] == "kueue-webhook-service"
            assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
            excluded = hook["namespaceSelector"]["matchExpressions"][0]
            assert excluded["operator"] == "NotIn" and set(excluded["values"]) == {
                "kube-system",
                "kueue-system",
            }
    assert served == set(HOOKS)


def test_localfleet_points_our_webhooks_at_the_local_agent(tmp_path):
    import localfleet

    up = localfleet.FleetUp.__new__(localfleet.FleetUp)
    up.opts = localfleet.FleetOptions(run_dir=tmp_path)
    plan = localfleet.ClusterPlan(
        "worker1", "worker", tmp_path, ports={"agent-webhook": 19443, "agent-metrics": 1, "agent-health": 2}
    )
    docs = up.agent_webhook_configs(plan, "Q0E=")
    hooks = [h for d in docs for h in d["webhooks"]]
    assert len(hooks) == len(HOOKS)
    for hook in hooks:
        assert hook["clientConfig"]["caBundle"] == "Q0E="
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:19443/")
        assert hook["clientConfig"]["url"].removeprefix("https://127.0.0.1:19443") in HOOKS
    config = parse_config(up.agent_config(plan))
    assert (config.webhook_host, config.webhook_port) == ("127.0.0.1", 19443)
    assert config.leader_elect and config.leader_election_namespace == "kueue-system"
    assert config.health_probe_bind_address == "127.0.0.1:2"
    assert set(config.frameworks) == {
        "batch/job",
        "pod",
        "leaderworkerset.x-k8s.io/leaderworkerset",
        "jobset.x-k8s.io/jobset",
        "trainer.kubeflow.org/trainjob",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "ray.io/rayservice",
        "workload.codeflare.dev/appwrapper",
        "kubeflow.org/pytorchjob",
        "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob",
        "kubeflow.org/paddlejob",
        "kubeflow.org/jaxjob",
        "kubeflow.org/mpijob",
        "deployment",
        "statefulset",
    }


async def test_server_answers_admission_reviews_over_tls(tmp_path):
    config = parse_config(
        {
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path)},
            "internalCertManagement": {"enable": False},
        }
    )
    bundle = certs.renew(None, [], ["127.0.0.1"], dt.datetime.now(dt.UTC))
    certs.write_cert_files(tmp_path, bundle)

    class Health:
        checks: dict = {}

        def add_readiness_check(self, name, fn):
            self.checks[name] = fn

    health = Health()
    server = WebhookServer(
        None,  # type: ignore[arg-type]
        config,
        NO_CACHES,
        certs.FileCerts(config),
        namespace_labels={NS: {}},
        health_servers=[health],
    )
    await server.start()
    try:
        assert server.serving and server.port > 0
        assert health.checks["webhook-server"]() is True
        context = ssl.create_default_context(cadata=bundle.ca_cert.decode())
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "abc",
                "operation": "CREATE",
                "namespace": NS,
                "object": batch_job({api.LABEL_QUEUE_NAME: "q"}),
            },
        }
        url = f"https://127.0.0.1:{server.port}{api.WEBHOOK_PATH_MUTATE_JOB}"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=body, ssl=context) as resp:
                answer = await resp.json()
            async with session.post(url, data=b"not json", ssl=context) as resp:
                assert resp.status == 400
        assert answer["response"]["uid"] == "abc" and answer["response"]["allowed"] is True
        patch = json.loads(base64.b64decode(answer["response"]["patch"]))
        assert {"op": "add", "path": "/spec/suspend", "value": True} in patch
    finally:
        await server.stop()
    assert not server.serving


class OwnersApi:
    """Objects by (plural, namespace, name) for the ancestor walk; records the reads."""

    def __init__(self, *objs: tuple[api.Resource, dict], forbidden: tuple[str, ...] = ()) -> None:
        self.objs = {(r.plural, o["metadata"]["namespace"], o["metadata"]["name"]): o for r, o in objs}
        self.forbidden = forbidden
        self.reads: list[str] = []

    async def get(self, resource, name, namespace=None):
        from kube_runtime.client import Forbidden, NotFound

        self.reads.append(resource.plural)
        if resource.plural in self.forbidden:
            raise Forbidden({"code": 403})
        try:
            return self.objs[(resource.plural, namespace, name)]
        except KeyError:
            raise NotFound({"code": 404}) from None


def named(obj: dict, name: str) -> dict:
    obj["metadata"]["name"] = name
    return obj


async def test_managed_ancestor_walks_controller_owners():
    parent_job = named(batch_job({api.LABEL_QUEUE_NAME: "q"}), "parent")
    owners = OwnersApi((api.JOB, parent_job))
    server = WebhookServer(owners, CONFIG, NO_CACHES, None, namespace_labels={NS: {}})  # type: ignore[arg-type]
    child = owned_by(plain_pod(), "Job", "batch/v1")
    assert await server.managed_ancestor(child, NS) is True
    del parent_job["metadata"]["labels"]
    assert await server.managed_ancestor(child, NS) is False
    assert await server.managed_ancestor(plain_pod(), NS) is False
    assert await server.managed_ancestor(owned_by(plain_pod(), "ReplicaSet", "apps/v1"), NS) is False
    missing = owned_by(plain_pod(), "Job", "batch/v1")
    missing["metadata"]["ownerReferences"][0]["name"] = "gone"
    assert await server.managed_ancestor(missing, NS) is False


def lws_and_its_statefulset() -> tuple[dict, dict]:
    """A queued LWS and the StatefulSet it controls (its group pods' controller)."""
    lws_obj = named(lws({api.LABEL_QUEUE_NAME: "q"}), "parent")
    sts = owned_by(
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "parent", "namespace": NS}},
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io/v1",
    )
    return lws_obj, sts


async def test_lws_pods_reach_their_lws_through_the_statefulset():
    lws_obj, sts = lws_and_its_statefulset()
    owners = OwnersApi((api.LEADER_WORKER_SET, lws_obj), (api.STATEFUL_SET, sts))
    server = WebhookServer(owners, CONFIG, NO_CACHES, None, namespace_labels={NS: {}})  # type: ignore[arg-type]
    member = owned_by(plain_pod(), "StatefulSet", "apps/v1")
    assert await server.managed_ancestor(member, NS) is True
    # Without the LWS framework StatefulSets are not followed at all; without RBAC, not blocking.
    jobs_only = WebhookServer(owners, parse_config({}), NO_CACHES, None, namespace_labels={NS: {}})  # type: ignore[arg-type]
    owners.reads.clear()
    assert await jobs_only.managed_ancestor(member, NS) is False
    assert owners.reads == []
    denied_api = OwnersApi(
        (api.LEADER_WORKER_SET, lws_obj), (api.STATEFUL_SET, sts), forbidden=("statefulsets",)
    )
    server = WebhookServer(denied_api, CONFIG, NO_CACHES, None, namespace_labels={NS: {}})  # type: ignore[arg-type]
    assert await server.managed_ancestor(member, NS) is False


class CachedOwners:
    """An integration's informer as the ancestor walk reads it: synced, objects by namespace/name."""

    def __init__(self, resource: api.Resource, *objs: dict, label_selector: str | None = None) -> None:
        self.resource = resource
        self.label_selector = label_selector
        self.has_synced = True
        self.objs = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs}

    def get(self, key: str) -> dict | None:
        return self.objs.get(key)


async def test_owners_of_an_integration_registered_after_the_server_are_read_from_its_cache():
    """The LWS, JobSet and TrainJob integrations join the agent's informers only once the server
    is known to serve their kind, after the webhook server is built: their caches still answer
    the pods' ancestor walk (a copy of the list taken at build time sent a GET per pod)."""
    lws_obj, sts = lws_and_its_statefulset()
    owners = OwnersApi((api.LEADER_WORKER_SET, lws_obj), (api.STATEFUL_SET, sts))
    agent_informers: list = [CachedOwners(api.STATEFUL_SET, sts)]
    server = WebhookServer(
        owners,  # type: ignore[arg-type]
        CONFIG,
        NO_CACHES,
        None,  # type: ignore[arg-type]
        namespace_labels={NS: {}},
        owner_informers=OwnerInformers(agent_informers),
    )
    member = owned_by(plain_pod(), "StatefulSet", "apps/v1")
    assert await server.managed_ancestor(member, NS) is True
    assert owners.reads == ["leaderworkersets"]  # not registered yet: read from the API
    # Registered later (its kind now served), next to a label-filtered pod informer of its own.
    agent_informers.append(CachedOwners(api.LEADER_WORKER_SET, lws_obj))
    agent_informers.append(CachedOwners(api.POD, label_selector="x"))
    owners.reads.clear()
    assert await server.managed_ancestor(member, NS) is True
    assert owners.reads == []
    assert set(OwnerInformers(agent_informers)) == {api.STATEFUL_SET, api.LEADER_WORKER_SET}
    # A filtered informer of an owner kind is not a cache of every owner: not used.
    filtered = OwnerInformers([CachedOwners(api.JOB, label_selector="kueue.x-k8s.io/queue-name")])
    assert len(filtered) == 0 and filtered.get(api.JOB) is None


async def test_server_refuses_plain_http_and_malformed_reviews_and_stays_up(tmp_path):
    """What the webhook server refuses (docs/reliability.md, "Security"): plain HTTP (no TLS
    handshake, no answer), a body that is not an AdmissionReview or ConversionReview (400), a
    conversion to a version it does not serve (result Failure); a good review is answered after."""
    config = parse_config(
        {
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path)},
            "internalCertManagement": {"enable": False},
        }
    )
    bundle = certs.renew(None, [], ["127.0.0.1"], dt.datetime.now(dt.UTC))
    certs.write_cert_files(tmp_path, bundle)
    server = WebhookServer(
        None,  # type: ignore[arg-type]
        config,
        NO_CACHES,
        certs.FileCerts(config),
        namespace_labels={NS: {}},
    )
    await server.start()
    try:
        context = ssl.create_default_context(cadata=bundle.ca_cert.decode())
        base = f"127.0.0.1:{server.port}"
        mutate, convert_path = api.WEBHOOK_PATH_MUTATE_JOB, "/convert"
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.post(f"http://{base}{mutate}", json={}) as resp:
                    await resp.read()
            for path in (mutate, convert_path):
                for body in (b"not json", b"[1, 2]", b'"a string"', b"{}" if path == mutate else b"[]"):
                    async with session.post(f"https://{base}{path}", data=body, ssl=context) as resp:
                        assert resp.status == 400, (path, body, resp.status, await resp.text())
            bad_version = {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "ConversionReview",
                "request": {"uid": "u1", "desiredAPIVersion": "kueue.x-k8s.io/v1alpha1", "objects": []},
            }
            async with session.post(f"https://{base}{convert_path}", json=bad_version, ssl=context) as resp:
                answer = await resp.json()
            assert resp.status == 200
            assert answer["response"]["uid"] == "u1"
            assert answer["response"]["result"]["status"] == "Failure"
            assert "cannot convert to 'kueue.x-k8s.io/v1alpha1'" in answer["response"]["result"]["message"]
            good = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "ok", "operation": "CREATE", "namespace": NS, "object": batch_job({})},
            }
            async with session.post(f"https://{base}{mutate}", json=good, ssl=context) as resp:
                assert resp.status == 200 and (await resp.json())["response"]["allowed"] is True
        assert server.serving
    finally:
        await server.stop()
