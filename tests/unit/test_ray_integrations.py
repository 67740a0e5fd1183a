"""The RayJob and RayCluster integrations without a cluster: PodSets in upstream's order (head, worker
groups, the RayJob's submitter), start and stop of the pod templates with the podset infos, finished,
active and pods ready."""

from __future__ import annotations

import copy

import pytest

from worker_agent.integrations import framework
from worker_agent.integrations import raycluster as rc
from worker_agent.integrations import rayjob as rj
from worker_agent.integrations.jobframework import templated

FLAVORS = {
    "rf": {
        "metadata": {"name": "rf"},
        "spec": {"nodeLabels": {"pool": "a"}, "tolerations": [{"key": "pool", "operator": "Exists"}]},
    }
}


def pod(cpu: str) -> dict:
    return {
        "spec": {
            "containers": [
                {"name": "ray", "image": "rayproject/ray:2.41.0", "resources": {"requests": {"cpu": cpu}}}
            ]
        }
    }


def cluster_spec() -> dict:
    return {
        "headGroupSpec": {"template": pod("1")},
        "workerGroupSpecs": [{"groupName": "workers", "replicas": 2, "template": pod("500m")}],
    }


def ray_job(**spec) -> dict:
    body = {"suspend": True, "submissionMode": "K8sJobMode", "rayClusterSpec": cluster_spec(), **spec}
    return {"metadata": {"name": "rj", "namespace": "ns", "uid": "u1"}, "spec": body}


def ray_cluster() -> dict:
    return {
        "metadata": {"name": "rc", "namespace": "ns", "uid": "u2"},
        "spec": {"suspend": True, **cluster_spec()},
    }


def admitted(podsets: list[dict]) -> dict:
    return {
        "spec": {"podSets": podsets},
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": p["name"], "flavors": {"cpu": "rf"}, "count": p["count"]} for p in podsets
                ],
            }
        },
    }


def test_ray_job_podsets_head_workers_then_the_default_submitter():
    podsets = rj.podsets(ray_job())
    assert [(p["name"], p["count"]) for p in podsets] == [("head", 1), ("workers", 2), ("submitter", 1)]
    [submitter] = podsets[2]["template"]["spec"]["containers"]
    assert submitter == {
        "name": "ray-job-submitter",
        "image": "rayproject/ray:2.41.0",
        "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        },
    }
    own = {"spec": {"containers": [{"name": "s", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]}}
    assert rj.podsets(ray_job(submitterPodTemplate=own))[2]["template"] == own
    # HTTPMode and InteractiveMode have no submitter; SidecarMode runs it in the head pod.
    assert [p["name"] for p in rj.podsets(ray_job(submissionMode="HTTPMode"))] == ["head", "workers"]
    head = rj.podsets(ray_job(submissionMode="SidecarMode"))[0]
    assert [c["name"] for c in head["template"]["spec"]["containers"]] == ["ray", "ray-job-submitter"]


def start(obj: dict, integration_podsets, templates) -> dict:
    infos = framework.podset_infos(admitted(integration_podsets(obj)), FLAVORS)
    return templated.started_object(obj, templates, infos, ("spec", "suspend"))


def test_a_ray_job_starts_with_the_flavors_in_every_template_and_the_submitter_written():
    job = ray_job()
    started = start(job, rj.podsets, rj.pod_templates)
    assert started["spec"]["suspend"] is False and "submitterPodTemplate" not in job["spec"]
    for template in (
        started["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
        started["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
        started["spec"]["submitterPodTemplate"],
    ):
        assert template["spec"]["nodeSelector"] == {"pool": "a"}
        assert template["spec"]["tolerations"] == [{"key": "pool", "operator": "Exists"}]
    assert started["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["name"] == "ray-job-submitter"
    # Stopped: suspended, templates as the Workload recorded them (the submitter's stays written).
    wl = {"spec": {"podSets": rj.podsets(job)}}
    stopped = templated.stopped_object(started, rj.pod_templates, wl, ("spec", "suspend"))
    assert stopped["spec"]["suspend"] is True
    assert "nodeSelector" not in stopped["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in stopped["spec"]["submitterPodTemplate"]["spec"]
    assert rj.podsets(stopped) == rj.podsets(job)


def test_a_ray_cluster_starts_and_stops_its_head_and_worker_templates():
    cluster = ray_cluster()
    assert [(p["name"], p["count"]) for p in rc.podsets(cluster)] == [("head", 1), ("workers", 2)]
    started = start(cluster, rc.podsets, rc.pod_templates)
    assert started["spec"]["suspend"] is False
    assert started["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {"pool": "a"}
    wl = {"spec": {"podSets": rc.podsets(cluster)}}
    stopped = templated.stopped_object(started, rc.pod_templates, wl, ("spec", "suspend"))
    assert stopped["spec"]["suspend"] is True and rc.podsets(stopped) == rc.podsets(cluster)
    with pytest.raises(framework.PodSetInfoConflict):
        templated.started_object(cluster, rc.pod_templates, {"head": {}}, ("spec", "suspend"))


def test_ray_job_state_active_finished_and_pods_ready():
    job = ray_job()
    assert not rj.is_active(job)  # New ("")
    for deployment, active in (("Initializing", True), ("Running", True), ("Suspended", False)):
        job["status"] = {"jobDeploymentStatus": deployment}
        assert rj.is_active(job) is active
    job["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "done"}
    assert rj.finished(job) == (True, True, "done")
    job["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "boom"}
    assert rj.finished(job) == (True, False, "boom")
    job["status"] = {"jobDeploymentStatus": "Running", "rayClusterStatus": {"state": "ready"}}
    assert rj.pods_ready(job) and rj.finished(job)[0] is False
    assert rj.on_existing_cluster(ray_job(clusterSelector={"ray.io/cluster": "c"}))


def test_ray_cluster_never_finishes_and_is_active_when_ready():
    cluster = copy.deepcopy(ray_cluster())
    assert not rc.is_active(cluster) and rc.finished(cluster) == (False, True, "")
    cluster["status"] = {"state": "ready"}
    assert rc.is_active(cluster) and rc.pods_ready(cluster)
    cluster["status"] = {"state": "failed", "reason": "bad"}
    assert rc.finished(cluster) == (False, False, "bad")
