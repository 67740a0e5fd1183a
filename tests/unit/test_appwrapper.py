"""AppWrappers: PodSets from their components as the AppWrapper project derives them, start and stop
through `podSetInfos`, finish by phase (worker_agent/integrations/appwrapper*.py), and the manager's
adapter (manager/adapters/appwrapper.py)."""

from __future__ import annotations

import pytest

from kueue_domain import api
from kueue_domain.config import parse_config
from manager.adapters.appwrapper import appwrapper_finished, released_status_patch, remote_appwrapper_copy
from manager.remote import finished_state, job_end_condition
from worker_agent.integrations import framework
from worker_agent.integrations.appwrapper import (
    finished,
    is_active,
    pods_ready,
    started_appwrapper,
    stopped_appwrapper,
)
from worker_agent.integrations.appwrapper_podsets import (
    PodSetError,
    appwrapper_podsets,
    component_podsets,
    value_at_path,
)
from worker_agent.webhooks import appwrapper as aw_webhook
from worker_agent.webhooks import common
from worker_agent.webhooks.common import Facts, Lookups
from worker_agent.webhooks.review import Request
from worker_agent.webhooks.server import HOOKS, WebhookServer

CONFIG = parse_config({"integrations": {"frameworks": ["batch/job", "workload.codeflare.dev/appwrapper"]}})


def _pod(cpu="1", **spec):
    return {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        }
    }


def _job(parallelism=None, completions=None):
    spec = {"template": _pod()}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}


def _aw(*components, name="aw", suspend=True, status=None):
    obj = {
        "apiVersion": api.APPWRAPPER.api_version,
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": "ns", "uid": "u"},
        "spec": {"suspend": suspend, "components": list(components)},
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_a_wrapped_job_is_one_podset_of_min_parallelism_completions_named_after_the_appwrapper():
    podsets = appwrapper_podsets(_aw({"template": _job(parallelism=4, completions=3)}))
    assert [(p["name"], p["count"]) for p in podsets] == [("aw-0", 3)]
    spec = podsets[0]["template"]["spec"]
    # GetPodTemplateSpec's defaults, as the API server would fill them in.
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert (spec["dnsPolicy"], spec["schedulerName"]) == ("ClusterFirst", "default-scheduler")
    assert spec["preemptionPolicy"] == "PreemptLowerPriority"
    container = spec["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["resources"] == {"requests": {"cpu": "1"}}


def test_podsets_are_numbered_across_components_and_declared_ones_win_over_inference():
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "spec": {"replicas": 2, "template": _pod("250m")},
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": _pod()["spec"]}
    declared = {"template": _job(), "podSets": [{"path": "template.spec.template", "replicas": 5}]}
    podsets = appwrapper_podsets(_aw({"template": deployment}, {"template": pod}, declared))
    assert [(p["name"], p["count"]) for p in podsets] == [("aw-0", 2), ("aw-1", 1), ("aw-2", 5)]
    assert podsets[0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"


def test_the_controllers_component_status_is_used_once_it_has_one_entry_per_component():
    status = {"componentStatus": [{"podSets": [{"path": "template.spec.template", "replicas": 7}]}]}
    podsets = appwrapper_podsets(_aw({"template": _job()}, status=status))
    assert [p["count"] for p in podsets] == [7]


def test_pytorchjob_jobset_and_raycluster_podsets_are_inferred_in_upstreams_order():
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 3, "template": _pod()},
                "Master": {"template": _pod()},
            }
        },
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "spec": {
            "replicatedJobs": [{"replicas": 2, "template": {"spec": {"parallelism": 3, "template": _pod()}}}]
        },
    }
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "spec": {
            "headGroupSpec": {"template": _pod()},
            "workerGroupSpecs": [{"replicas": 4, "template": _pod()}],
        },
    }
    per_component = component_podsets(_aw({"template": pytorch}, {"template": jobset}, {"template": ray}))
    assert [[(p["path"], p["replicas"]) for p in c] for c in per_component] == [
        [
            ("template.spec.pytorchReplicaSpecs.Master.template", 1),
            ("template.spec.pytorchReplicaSpecs.Worker.template", 3),
        ],
        [("template.spec.replicatedJobs[0].template.spec.template", 6)],
        [("template.spec.headGroupSpec.template", 1), ("template.spec.workerGroupSpecs[0].template", 4)],
    ]


def test_paths_read_as_upstream_reads_them_and_bad_ones_say_where():
    obj = {"spec": {"list": [{"a": 1}]}}
    assert value_at_path(obj, "template.spec.list[0].a") == 1
    with pytest.raises(PodSetError, match="first element of the path must be 'template'"):
        value_at_path(obj, "spec.list")
    with pytest.raises(PodSetError, match="missing field 'nope'"):
        value_at_path(obj, "template.spec.nope")
    with pytest.raises(PodSetError, match="out of bounds index '3'"):
        value_at_path(obj, "template.spec.list[3]")
    bad = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": "not a template"}}
    with pytest.raises(PodSetError, match=r"spec.components\[0\]: error inferring PodSets"):
        appwrapper_podsets(_aw({"template": bad}))


def _infos(*names, selector=None):
    return {
        n: {"name": n, "labels": {api.LABEL_PODSET: n}, "annotations": {}, "nodeSelector": selector or {}}
        for n in names
    }


def test_start_writes_podset_infos_per_component_and_unsuspends_without_touching_templates():
    aw = _aw({"template": _job()}, {"template": _job()})
    started = started_appwrapper(aw, _infos("aw-0", "aw-1", selector={"zone": "a"}))
    assert started["spec"]["suspend"] is False
    assert [c["podSetInfos"] for c in started["spec"]["components"]] == [
        [{"labels": {api.LABEL_PODSET: "aw-0"}, "nodeSelector": {"zone": "a"}}],
        [{"labels": {api.LABEL_PODSET: "aw-1"}, "nodeSelector": {"zone": "a"}}],
    ]
    assert [c["template"] for c in started["spec"]["components"]] == [
        c["template"] for c in aw["spec"]["components"]
    ]
    assert started_appwrapper(started, _infos("aw-0", "aw-1")) is None  # already running
    with pytest.raises(
        framework.PodSetInfoConflict, match="invalid podset infos: expecting 2 podsets, got 1"
    ):
        started_appwrapper(aw, _infos("aw-0"))


def test_stop_suspends_and_clears_every_podset_info_in_one_update():
    running = started_appwrapper(_aw({"template": _job()}), _infos("aw-0"))
    stopped = stopped_appwrapper(running)
    assert stopped["spec"]["suspend"] is True
    assert "podSetInfos" not in stopped["spec"]["components"][0]
    assert stopped_appwrapper(stopped) is None


def _status(phase="Running", **conditions):
    return {
        "phase": phase,
        "conditions": [
            {"type": t, "status": s, "reason": "r", "message": "m"} for t, s in conditions.items()
        ],
    }


def test_active_ready_and_finished_come_from_the_appwrappers_conditions_and_phase():
    running = _aw(status=_status(QuotaReserved="True", PodsReady="True"))
    assert is_active(running) and pods_ready(running)
    assert finished(running) == (False, False, "")
    assert finished(_aw(status=_status("Succeeded"))) == (True, True, "AppWrapper finished successfully")
    assert finished(_aw(status=_status("Failed", ResourcesDeployed="True")))[0] is False
    assert finished(_aw(status=_status("Failed", ResourcesDeployed="False"))) == (
        True,
        False,
        "AppWrapper failed",
    )


def test_the_workers_copy_has_managed_by_cleared_the_origin_label_and_the_prebuilt_workload():
    local = _aw({"template": _job()})
    local["metadata"]["labels"] = {api.LABEL_QUEUE_NAME: "q"}
    local["spec"]["managedBy"] = api.MANAGED_BY_MULTIKUEUE
    copy_ = remote_appwrapper_copy(local, "appwrapper-aw-1a2b3", "origin1")
    assert "managedBy" not in copy_["spec"] and local["spec"]["managedBy"] == api.MANAGED_BY_MULTIKUEUE
    assert copy_["metadata"]["labels"] == {api.LABEL_QUEUE_NAME: "q", api.LABEL_MULTIKUEUE_ORIGIN: "origin1"}
    assert copy_["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == "appwrapper-aw-1a2b3"
    assert copy_["spec"]["components"] == local["spec"]["components"]


def test_the_manager_reads_the_end_of_an_appwrapper_from_its_phase():
    done = _aw(status=_status("Succeeded"))
    assert appwrapper_finished(done) and finished_state(api.APPWRAPPER, done)
    assert not finished_state(api.APPWRAPPER, _aw(status=_status("Running")))
    ended = job_end_condition(api.APPWRAPPER, _aw(status=_status("Failed")))
    assert (ended["reason"], ended["message"]) == (api.REASON_FAILED, "AppWrapper failed")
    assert job_end_condition(api.APPWRAPPER, done)["reason"] == api.REASON_SUCCEEDED


def test_a_released_appwrapper_reports_its_quota_no_longer_reserved():
    local = _aw(status=_status(QuotaReserved="True", PodsReady="True"))
    patch = released_status_patch(local)
    by_type = {c["type"]: c for c in patch["status"]["conditions"]}
    assert by_type["QuotaReserved"]["status"] == "False" and by_type["PodsReady"]["status"] == "True"
    assert released_status_patch(_aw(status=_status(QuotaReserved="False"))) is None


# ------------------------------------------------------------------------------------------------
# Kueue's AppWrapper webhooks


def _lookups(controller: str = api.MULTIKUEUE_CONTROLLER_NAME) -> Lookups:
    return Lookups.from_objects(
        local_queues=[{"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}],
        cluster_queues=[{"metadata": {"name": "cq"}, "spec": {"admissionChecks": ["mk"]}}],
        admission_checks=[{"metadata": {"name": "mk"}, "spec": {"controllerName": controller}}],
    )


def _queued_aw(**spec) -> dict:
    aw = _aw({"template": _job()}, suspend=False)
    aw["metadata"]["labels"] = {api.LABEL_QUEUE_NAME: "lq"}
    aw["spec"].pop("suspend")
    aw["spec"].update(spec)
    return aw


def test_a_queued_appwrapper_is_suspended_and_managed_by_multikueue_where_its_queue_says_so():
    facts = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: "ns"})
    out = aw_webhook.default(_queued_aw(), "ns", CONFIG, _lookups(), facts)
    assert out["spec"]["suspend"] is True and out["spec"]["managedBy"] == api.MANAGED_BY_MULTIKUEUE
    own = _queued_aw(managedBy=api.APPWRAPPER_MANAGED_BY_DEFAULT)
    assert (
        aw_webhook.default(own, "ns", CONFIG, _lookups(), facts)["spec"]["managedBy"]
        == api.MANAGED_BY_MULTIKUEUE
    )
    other = _queued_aw(managedBy="example.com/mine")
    assert (
        aw_webhook.default(other, "ns", CONFIG, _lookups(), facts)["spec"]["managedBy"] == "example.com/mine"
    )
    plain = aw_webhook.default(_queued_aw(), "ns", CONFIG, _lookups("example.com/check"), facts)
    assert "managedBy" not in plain["spec"]


async def test_the_server_routes_appwrappers_and_a_job_an_appwrapper_owns_is_left_to_it():
    server = WebhookServer(None, CONFIG, Lookups.from_objects(), None, namespace_labels={"ns": {}})  # type: ignore[arg-type]
    bad = _queued_aw()
    bad["metadata"]["labels"][api.LABEL_QUEUE_NAME] = "Q"
    request = Request(uid="u", operation="CREATE", namespace="ns", obj=bad)
    response = await server.review(HOOKS["/validate-workload-codeflare-dev-v1beta2-appwrapper"], request)
    assert not response.allowed and "metadata.labels[kueue.x-k8s.io/queue-name]" in response.message
    ref = {"apiVersion": api.APPWRAPPER.api_version, "kind": "AppWrapper", "name": "aw", "controller": True}
    child = {"metadata": {"name": "j", "ownerReferences": [ref]}}
    assert common.owner_kind_managed(child, CONFIG)
    assert not common.owner_kind_managed(child, parse_config({}))
