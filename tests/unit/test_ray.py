"""RayJobs and RayClusters without a cluster: the PodSets of a RayCluster spec (head, then the worker
groups; the containers KubeRay adds to the head), the webhooks' defaults and upstream's checks, and
the MultiKueue adapters' copy and released status."""

from __future__ import annotations

import pytest

from kueue_domain import api, fields
from kueue_domain.config import parse_config
from manager.adapters.raycluster import RayClusterAdapter, remote_ray_cluster_copy
from manager.adapters.rayjob import RayJobAdapter, ray_job_finished, remote_ray_job_copy
from manager.remote import finished_state
from worker_agent.integrations import ray
from worker_agent.webhooks import ray as hooks
from worker_agent.webhooks.common import Facts, Lookups

NS = "team-a"
CONFIG = parse_config({"integrations": {"frameworks": ["batch/job", "ray.io/rayjob", "ray.io/raycluster"]}})
FACTS = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: NS})
QUEUED = {api.LABEL_QUEUE_NAME: "lq"}


def pod(cpu: str = "1", image: str = "rayproject/ray:2.41.0") -> dict:
    return {
        "spec": {"containers": [{"name": "ray", "image": image, "resources": {"requests": {"cpu": cpu}}}]}
    }


def cluster_spec(**extra) -> dict:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": pod("1")},
        "workerGroupSpecs": [
            {"groupName": "small", "replicas": 2, "template": pod("500m")},
            {"groupName": "multi", "replicas": 3, "numOfHosts": 2, "template": pod("2")},
        ],
        **extra,
    }


def ray_cluster(labels: dict | None = None, **spec) -> dict:
    meta = {"name": "rc", "namespace": NS, "uid": "u-rc", "labels": dict(labels or {})}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": cluster_spec(**spec)}


def ray_job(labels: dict | None = None, **spec) -> dict:
    meta = {"name": "rj", "namespace": NS, "uid": "u-rj", "labels": dict(labels or {})}
    body = {
        "entrypoint": "python -c 'print(1)'",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster_spec(),
    }
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": body}


# -- PodSets ----------------------------------------------------------------------------------------


def test_podsets_are_head_then_each_worker_group_with_replicas_times_hosts():
    podsets = ray.cluster_podsets(cluster_spec(), {})
    assert [(p["name"], p["count"]) for p in podsets] == [("head", 1), ("small", 2), ("multi", 6)]
    assert podsets[1]["template"]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "500m"}}
    assert ray.worker_count({"groupName": "g"}) == 1  # replicas unset: 1
    assert ray.expected_podsets_count(cluster_spec()) == 3


def test_the_head_podset_counts_the_autoscaler_sidecar_and_the_redis_cleanup_job():
    spec = cluster_spec(enableInTreeAutoscaling=True)
    head = ray.cluster_podsets(spec, {})[0]
    assert head["template"]["spec"]["containers"][1] == {
        "name": "autoscaler",
        "resources": ray.AUTOSCALER_RESOURCES,
    }
    own = {"requests": {"cpu": "1"}}
    head = ray.cluster_podsets({**spec, "autoscalerOptions": {"resources": own}}, {})[0]
    assert head["template"]["spec"]["containers"][1]["resources"] == own
    # GCS fault tolerance: the Ray container requests at least the cleanup Job's 200m / 256Mi.
    head = ray.cluster_podsets(cluster_spec(), {ray.FT_ENABLED_ANNOTATION: "true"})[0]
    assert head["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1",
        "memory": "256Mi",
    }
    head = ray.cluster_podsets(cluster_spec(gcsFaultToleranceOptions={"redisAddress": "r:6379"}), {})[0]
    assert head["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] == "256Mi"
    # The object's own template is left alone.
    spec = cluster_spec()
    ray.cluster_podsets(spec, {ray.FT_ENABLED_ANNOTATION: "true"})
    assert spec["headGroupSpec"]["template"] == pod("1")


def test_pod_templates_are_the_objects_own_in_podset_order():
    spec = cluster_spec()
    templates = ray.cluster_pod_templates(spec)
    assert [name for name, _ in templates] == ["head", "small", "multi"]
    assert templates[1][1] is spec["workerGroupSpecs"][0]["template"]


# -- webhooks ---------------------------------------------------------------------------------------


def multikueue_lookups() -> Lookups:
    return Lookups.from_objects(
        local_queues=[{"metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}}],
        cluster_queues=[{"metadata": {"name": "cq"}, "spec": {"admissionChecks": ["mk"]}}],
        admission_checks=[
            {"metadata": {"name": "mk"}, "spec": {"controllerName": api.MULTIKUEUE_CONTROLLER_NAME}}
        ],
    )


@pytest.mark.parametrize(
    "webhook,make", [(hooks.RAY_JOB_WEBHOOK, ray_job), (hooks.RAY_CLUSTER_WEBHOOK, ray_cluster)]
)
@pytest.mark.parametrize(
    ("managed_by", "expected"),
    [
        (None, api.MULTIKUEUE_CONTROLLER_NAME),
        (ray.KUBERAY_CONTROLLER, api.MULTIKUEUE_CONTROLLER_NAME),
        ("example.com/other", "example.com/other"),
    ],
)
def test_defaulting_suspends_and_hands_a_multikueue_queued_object_to_multikueue(
    webhook, make, managed_by, expected
):
    obj = make(QUEUED, **({"managedBy": managed_by} if managed_by else {}))
    out = webhook.default(obj, NS, CONFIG, multikueue_lookups(), FACTS)
    assert out["spec"]["suspend"] is True
    assert out["spec"]["managedBy"] == expected
    plain = webhook.default(make(QUEUED), NS, CONFIG, Lookups.from_objects(), FACTS)
    assert "managedBy" not in plain["spec"]


def messages(errors) -> list[str]:
    return [str(e) for e in errors]


def test_ray_job_checks_of_a_queued_ray_job():
    check = hooks.RAY_JOB_WEBHOOK.validate_create
    assert check(ray_job(QUEUED), CONFIG) == []
    assert messages(check(ray_job(QUEUED, shutdownAfterJobFinishes=False), CONFIG)) == [
        "spec.shutdownAfterJobFinishes: Invalid value: false: a kueue managed job should delete the cluster "
        "after finishing"
    ]
    both = ray_job(QUEUED, clusterSelector={"ray.io/cluster": "c"})
    assert messages(check(both, CONFIG)) == [
        'spec.clusterSelector: Invalid value: {"ray.io/cluster":"c"}: a kueue managed job should not use an '
        "existing cluster"
    ]
    selector_only = ray_job({api.LABEL_QUEUE_NAME: "Bad_Name"}, clusterSelector={"ray.io/cluster": "c"})
    del selector_only["spec"]["rayClusterSpec"]
    assert check(selector_only, CONFIG) == []  # upstream returns before the jobframework's checks
    neither = ray_job(QUEUED)
    del neither["spec"]["rayClusterSpec"]
    assert messages(check(neither, CONFIG)) == [
        "spec.rayClusterSpec: Required value: rayClusterSpec is required for Kueue-managed jobs that don't "
        "use clusterSelector"
    ]
    # Not Kueue's: only the jobframework's checks.
    assert check(ray_job(shutdownAfterJobFinishes=False), CONFIG) == []


def test_cluster_spec_checks_autoscaling_podset_count_and_the_head_name():
    job = ray_job(QUEUED)
    job["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"] += [
        {"groupName": "head" if i == 0 else f"g{i}", "template": pod()} for i in range(17)
    ]
    assert messages(hooks.RAY_JOB_WEBHOOK.validate_create(job, CONFIG)) == [
        "spec.rayClusterSpec.enableInTreeAutoscaling: Invalid value: true: a kueue managed job should only "
        "use autoscaling when workload slicing is enabled",
        "spec.rayClusterSpec.workerGroupSpecs: Too many: 20: must have at most 18 items",
        'spec.rayClusterSpec.workerGroupSpecs[2].groupName: Forbidden: "head" is reserved for the head group',
    ]
    cluster = ray_cluster(QUEUED, enableInTreeAutoscaling=True)
    [error] = hooks.RAY_CLUSTER_WEBHOOK.validate_create(cluster, CONFIG)
    assert str(error).startswith(
        "spec.enableInTreeAutoscaling: Invalid value: true: a kueue-managed RayCluster can use autoscaling "
        "only as an elastic job"
    )


def test_updates_are_checked_only_for_objects_kueue_manages_or_did():
    lookups = Lookups.from_objects()
    bad = ray_job(shutdownAfterJobFinishes=False)
    assert hooks.RAY_JOB_WEBHOOK.validate_update(bad, bad, NS, lookups, CONFIG) == []
    was_queued = ray_job(QUEUED)
    errors = hooks.RAY_JOB_WEBHOOK.validate_update(was_queued, bad, NS, lookups, CONFIG)
    assert errors and all(e.path for e in errors)
    off = parse_config(
        {
            "integrations": {"frameworks": ["ray.io/rayjob"]},
            "featureGates": {hooks.VALIDATE_UPDATES_GATE: False},
        }
    )
    assert hooks.RAY_JOB_WEBHOOK.validate_update(was_queued, bad, NS, lookups, off) == []


# -- MultiKueue adapters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "copy,make", [(remote_ray_job_copy, ray_job), (remote_ray_cluster_copy, ray_cluster)]
)
def test_the_remote_copy_has_origin_prebuilt_workload_and_no_managed_by(copy, make):
    local = make(QUEUED, managedBy=api.MULTIKUEUE_CONTROLLER_NAME, suspend=True)
    remote = copy(local, "wl-1", "mk-origin")
    assert "managedBy" not in remote["spec"] and local["spec"]["managedBy"] == api.MULTIKUEUE_CONTROLLER_NAME
    assert remote["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == "mk-origin"
    assert remote["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == "wl-1"
    assert remote["metadata"]["labels"][api.LABEL_QUEUE_NAME] == "lq"
    assert remote["spec"]["suspend"] is True and "uid" not in remote["metadata"]


def test_finished_and_released_statuses():
    done = {"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}
    assert ray_job_finished(done) and finished_state(api.RAY_JOB, done)
    running = {"status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}}
    assert not ray_job_finished(running) and not finished_state(api.RAY_JOB, running)
    adapter = RayJobAdapter.__new__(RayJobAdapter)
    assert adapter.released_status_patch(running) == {"status": {"jobDeploymentStatus": "Suspended"}}
    assert adapter.released_status_patch(done) is None
    cluster = RayClusterAdapter.__new__(RayClusterAdapter)
    assert cluster.released_status_patch({"status": {"state": "ready"}}) == {"status": {"state": "suspended"}}
    assert cluster.released_status_patch({"status": {}}) is None


def test_the_manager_keeps_metadata_status_and_suspend_of_remote_ray_objects():
    remote = ray_job(QUEUED, suspend=False)
    remote["status"] = {"jobDeploymentStatus": "Running"}
    kept = RayJobAdapter.remote_cache_transform(remote)
    assert "rayClusterSpec" not in kept["spec"] and kept["spec"]["suspend"] is False
    assert kept["status"] == remote["status"]


def test_field_errors_render_too_many_like_go():
    assert (
        str(ray.too_many(fields.Path("spec", "x"), 20, 18))
        == "spec.x: Too many: 20: must have at most 18 items"
    )
