"""The job framework's pure parts: Workload names and bodies, pod-set information, template merge
and restore, and PodSet equivalence."""

from __future__ import annotations

import hashlib

import pytest

from kube_runtime.client import Conflict, NotFound
from kueue_domain import api, naming
from worker_agent.integrations import framework


def test_workload_name_is_kind_name_and_sha1_of_kind_group_name_uid():
    name = naming.workload_name("sample-job", "uid-1", "Job", "batch")
    digest = hashlib.sha1(b"Job\nbatch\nsample-job\nuid-1").hexdigest()
    assert name == f"job-sample-job-{digest[:5]}"


def test_workload_name_prefix_is_cut_to_247_characters():
    name = naming.workload_name("x" * 300, "uid", "Job", "batch")
    assert len(name) == 247 + 6
    assert name.startswith("job-xxx")


def _job(**labels):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "uid-1",
            "labels": labels,
            "annotations": {"provreq.kueue.x-k8s.io/a": "b", "other": "c"},
        },
    }


def test_new_workload_body():
    body = framework.new_workload(
        _job(team="a", **{api.LABEL_MAX_EXEC_TIME_SECONDS: "30"}),
        "job-j-abcde",
        [{"name": "main", "count": 1, "template": {"spec": {}}}],
        "lq",
        priority={"priority": 0},
        label_keys_to_copy=["team"],
    )
    meta = body["metadata"]
    assert meta["labels"] == {"team": "a", api.LABEL_JOB_UID: "uid-1"}
    assert meta["annotations"] == {"provreq.kueue.x-k8s.io/a": "b"}
    assert meta["finalizers"] == [api.FINALIZER_RESOURCE_IN_USE]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "j",
            "uid": "uid-1",
            "blockOwnerDeletion": True,
            "controller": True,
        }
    ]
    assert body["spec"]["queueName"] == "lq"
    assert body["spec"]["maximumExecutionTimeSeconds"] == 30


def test_new_workload_without_queue_name_leaves_the_field_out():
    body = framework.new_workload(_job(), "w", [], "", priority={"priority": 0})
    assert "queueName" not in body["spec"]


def test_priority_resolution_order():
    wpcs = {"high": {"metadata": {"name": "high"}, "value": 1000}}
    pcs = {
        "pod-pc": {"metadata": {"name": "pod-pc"}, "value": 50},
        "d1": {"metadata": {"name": "d1"}, "value": 7, "globalDefault": True},
    }
    assert framework.priority_for({api.LABEL_PRIORITY_CLASS: "high"}, wpcs, "pod-pc", pcs)[0] == {
        "priorityClassName": "high",
        "priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD,
        "priority": 1000,
    }
    assert framework.priority_for({}, wpcs, "pod-pc", pcs)[0]["priority"] == 50
    assert framework.priority_for({}, wpcs, None, pcs)[0]["priorityClassName"] == "d1"
    assert framework.priority_for({}, {}, None, {})[0] == {"priority": 0}
    spec, error = framework.priority_for({api.LABEL_PRIORITY_CLASS: "missing"}, wpcs, None, pcs)
    assert spec == {} and error


FLAVORS = {
    "f1": {"metadata": {"name": "f1"}, "spec": {"nodeLabels": {"pool": "a"}, "tolerations": [{"key": "t"}]}},
}


def _admitted(labels=None, checks=None):
    return {
        "metadata": {"name": "w", "namespace": "ns", "labels": labels or {}},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 3, "template": {"spec": {}}}]},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f1"}, "count": 2}],
            },
            "admissionChecks": checks or [],
        },
    }


def _wl(name=None, source=api.PRIORITY_CLASS_SOURCE_WORKLOAD, priority=0, reserved=False):
    spec = {"priority": priority}
    if name:
        spec.update(priorityClassName=name, priorityClassSource=source)
    status = {"conditions": [{"type": api.WORKLOAD_QUOTA_RESERVED, "status": "True"}]} if reserved else {}
    return {"metadata": {"name": "wl", "namespace": "ns"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("wl", "label", "follows"),
    [
        (_wl("high", priority=300), "high", False),  # nothing changed
        (_wl("high", priority=300), "low", True),  # the label changed
        (_wl("high", priority=300, reserved=True), "low", True),  # admitted: still follows
        (_wl(None), "low", True),  # a class added while suspended and pending
        (_wl(None, reserved=True), "low", False),  # the API refuses a class on a reserved Workload
        (_wl(None), "", False),  # no class and no label
        (_wl("pc", source=api.PRIORITY_CLASS_SOURCE_POD), "low", False),  # a pod PriorityClass
    ],
)
def test_which_workloads_follow_the_priority_class_label(wl, label, follows):
    assert framework.priority_follows_label(wl, label) is follows


def test_priority_patch_is_none_when_class_and_value_are_already_there():
    resolved = {
        "priorityClassName": "low",
        "priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD,
        "priority": 100,
    }
    assert framework.priority_patch(_wl("low", priority=100), resolved) is None
    assert framework.priority_patch(_wl("high", priority=300), resolved) == resolved
    # A value that drifted under the same name is written too.
    assert framework.priority_patch(_wl("low", priority=7), resolved) == resolved
    # Back to no class: the class fields are cleared.
    assert framework.priority_patch(_wl("low", priority=100), {"priority": 0}) == {
        "priorityClassName": None,
        "priorityClassSource": None,
        "priority": 0,
    }


class _Kube:
    """Records merge patches; raises `error` when set."""

    def __init__(self, error=None):
        self.error, self.patches = error, []

    async def patch_merge(self, resource, name, patch, namespace=None):
        if self.error is not None:
            raise self.error
        self.patches.append((resource.kind, namespace, name, patch))
        return {"metadata": {"name": name, "namespace": namespace}, "spec": patch["spec"]}


LOW = {"priorityClassName": "low", "priorityClassSource": api.PRIORITY_CLASS_SOURCE_WORKLOAD, "priority": 100}


async def test_follow_priority_label_writes_the_resolved_priority_with_the_resource_version():
    kube = _Kube()
    wl = _wl("high", priority=300)
    wl["metadata"]["resourceVersion"] = "42"
    written, ok = await framework.follow_priority_label(kube, wl, "low", lambda: (LOW, None))
    assert ok and written["spec"] == LOW
    assert kube.patches == [("Workload", "ns", "wl", {"metadata": {"resourceVersion": "42"}, "spec": LOW})]


async def test_follow_priority_label_resolves_nothing_when_the_label_did_not_change():
    def resolve():
        raise AssertionError("resolved without a change")

    assert await framework.follow_priority_label(_Kube(), _wl("low", priority=100), "low", resolve) == (
        None,
        True,
    )


async def test_follow_priority_label_asks_for_a_retry_when_the_class_is_missing_or_the_write_fails():
    wl = _wl("high", priority=300)
    wl["metadata"]["resourceVersion"] = "1"
    missing = await framework.follow_priority_label(_Kube(), wl, "gone", lambda: ({}, "not found"))
    assert missing == (None, False)
    conflict = Conflict({"code": 409}, "Conflict", "the object has been modified")
    assert await framework.follow_priority_label(_Kube(conflict), wl, "low", lambda: (LOW, None)) == (
        None,
        False,
    )
    gone = NotFound({"code": 404}, "NotFound", "gone")
    assert await framework.follow_priority_label(_Kube(gone), wl, "low", lambda: (LOW, None)) == (None, True)


def test_podset_infos_from_flavors_and_ready_checks():
    checks = [
        {"name": "ac", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"x": "y"}}]},
        {"name": "pending", "state": "Pending", "podSetUpdates": [{"name": "main", "labels": {"z": "1"}}]},
    ]
    info = framework.podset_infos(_admitted(checks=checks), FLAVORS)["main"]
    assert info["count"] == 2
    assert info["nodeSelector"] == {"pool": "a"}
    assert info["tolerations"] == [{"key": "t"}]
    assert info["labels"] == {
        api.LABEL_PODSET: "main",
        api.LABEL_LOCAL_QUEUE_NAME: "lq",
        api.LABEL_CLUSTER_QUEUE_NAME: "cq",
        "x": "y",
    }


def test_podset_infos_mark_pods_of_a_multikueue_copy():
    info = framework.podset_infos(_admitted(labels={api.LABEL_MULTIKUEUE_ORIGIN: "multikueue"}), FLAVORS)
    assert info["main"]["labels"][api.LABEL_MULTIKUEUE_WORKER_WORKLOAD_POD] == "true"


def test_merge_and_restore_template():
    original = {
        "metadata": {"labels": {"app": "x", "controller-uid": "u"}},
        "spec": {"nodeSelector": {"zone": "1"}, "containers": [{"name": "c"}]},
    }
    info = framework.podset_infos(_admitted(), FLAVORS)["main"]
    merged = framework.merge_into_template(original, info)
    assert merged["spec"]["nodeSelector"] == {"zone": "1", "pool": "a"}
    assert merged["spec"]["tolerations"] == [{"key": "t"}]
    assert merged["metadata"]["labels"][api.LABEL_PODSET] == "main"
    saved = {"metadata": {"labels": {"app": "x"}}, "spec": {"nodeSelector": {"zone": "1"}}}
    restored = framework.restore_template(merged, saved, keep_label_keys=["controller-uid"])
    assert restored["metadata"]["labels"] == {"app": "x", "controller-uid": "u"}
    assert restored["spec"]["nodeSelector"] == {"zone": "1"}
    assert "tolerations" not in restored["spec"]
    assert restored["spec"]["containers"] == [{"name": "c"}]
    # The merge copies what it changes and leaves the template it was given as it was.
    assert original == {
        "metadata": {"labels": {"app": "x", "controller-uid": "u"}},
        "spec": {"nodeSelector": {"zone": "1"}, "containers": [{"name": "c"}]},
    }


def test_merge_rejects_a_conflicting_node_selector():
    info = framework.podset_infos(_admitted(), FLAVORS)["main"]
    with pytest.raises(framework.PodSetInfoConflict):
        framework.merge_into_template({"spec": {"nodeSelector": {"pool": "b"}}}, info)


def test_template_for_podset_keeps_labels_annotations_and_last_env_var():
    template = {
        "metadata": {"labels": {"job-name": "j", "keep": "1"}, "annotations": {"a": "b"}, "name": "x"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "env": [{"name": "A", "value": "1"}, {"name": "B"}, {"name": "A", "value": "2"}],
                }
            ]
        },
    }
    result = framework.template_for_podset(template, drop_label_keys=["job-name"])
    assert result["metadata"] == {"labels": {"keep": "1"}, "annotations": {"a": "b"}}
    assert result["spec"]["containers"][0]["env"] == [{"name": "B"}, {"name": "A", "value": "2"}]
    # A copy: changing the PodSet's template leaves the job's alone.
    result["metadata"]["annotations"]["a"] = "changed"
    result["spec"]["containers"][0]["name"] = "changed"
    assert template["metadata"]["annotations"] == {"a": "b"}
    assert template["spec"]["containers"][0]["name"] == "c"
    assert len(template["spec"]["containers"][0]["env"]) == 3


def _podset(count=1, cpu="1", tolerations=None, min_count=None):
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if tolerations:
        spec["tolerations"] = tolerations
    podset = {"name": "main", "count": count, "template": {"spec": spec}}
    if min_count is not None:
        podset["minCount"] = min_count
    return podset


def test_podsets_equivalent_compares_counts_resources_and_tolerations():
    assert framework.podsets_equivalent([_podset(cpu="1")], [_podset(cpu="1000m")])
    assert not framework.podsets_equivalent([_podset(count=2)], [_podset(count=1)])
    assert not framework.podsets_equivalent([_podset(cpu="2")], [_podset(cpu="1")])
    assert not framework.podsets_equivalent([_podset(min_count=1)], [_podset()])
    tolerated = _podset(tolerations=[{"key": "t"}])
    assert not framework.podsets_equivalent([tolerated], [_podset()])
    assert framework.podsets_equivalent([tolerated], [_podset()], ignore_tolerations=True)


def test_expected_running_podsets_add_flavor_tolerations_and_partial_count():
    wl = _admitted()
    wl["spec"]["podSets"][0] = _podset(count=3, min_count=1)
    running = framework.expected_running_podsets(wl, FLAVORS)
    assert running[0]["count"] == 2
    assert running[0]["template"]["spec"]["tolerations"] == [{"key": "t"}]
    wl["status"]["conditions"] = []
    assert framework.expected_running_podsets(wl, FLAVORS) is None


def test_podset_infos_queue_labels_follow_assign_queue_labels_for_pods():
    wl = _admitted()
    labels = framework.podset_infos(wl, FLAVORS)["main"]["labels"]
    assert labels[api.LABEL_LOCAL_QUEUE_NAME] == wl["spec"]["queueName"]
    assert labels[api.LABEL_CLUSTER_QUEUE_NAME] == wl["status"]["admission"]["clusterQueue"]
    off = framework.podset_infos(wl, FLAVORS, queue_labels=False)["main"]["labels"]
    assert api.LABEL_LOCAL_QUEUE_NAME not in off and api.LABEL_CLUSTER_QUEUE_NAME not in off
    assert off[api.LABEL_PODSET] == "main"
    # A ClusterQueue name that is no valid label value (a DNS subdomain with dots) is left out.
    wl["status"]["admission"]["clusterQueue"] = "team.a.queue"
    dotted = framework.podset_infos(wl, FLAVORS)["main"]["labels"]
    assert api.LABEL_CLUSTER_QUEUE_NAME not in dotted
    assert dotted[api.LABEL_LOCAL_QUEUE_NAME] == wl["spec"]["queueName"]
