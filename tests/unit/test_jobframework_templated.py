"""The job framework's named-pod-template kinds (jobframework.templated) with a suspend field deeper
than spec.suspend, as a Kubeflow job's runPolicy.suspend is."""

import pytest

from worker_agent.integrations import framework
from worker_agent.integrations.jobframework import templated

SUSPEND = ("spec", "runPolicy", "suspend")


def templates_of(obj):
    specs = obj.setdefault("spec", {}).setdefault("replicaSpecs", {})
    return [
        (name.lower(), specs[name].setdefault("template", {}))
        for name in ("Master", "Worker")
        if name in specs
    ]


def job(suspend=True):
    return {
        "spec": {
            "runPolicy": {"suspend": suspend},
            "replicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m"}]}}},
                "Worker": {"replicas": 2, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {}}},
            },
        }
    }


INFOS = {
    "master": {"nodeSelector": {"pool": "on-demand"}, "labels": {"x": "1"}},
    "worker": {"nodeSelector": {"pool": "spot"}, "tolerations": [{"key": "spot", "operator": "Exists"}]},
}


def test_paths():
    obj = {}
    assert templated.get_path(obj, SUSPEND) is None
    templated.set_path(obj, SUSPEND, True)
    assert obj == {"spec": {"runPolicy": {"suspend": True}}}
    assert templated.get_path(obj, SUSPEND) is True
    assert templated.get_path({"spec": 3}, SUSPEND) is None


def test_started_unsuspends_and_merges_each_named_template():
    original = job()
    started = templated.started_object(original, templates_of, INFOS, SUSPEND)
    assert started["spec"]["runPolicy"]["suspend"] is False
    master = started["spec"]["replicaSpecs"]["Master"]["template"]
    worker = started["spec"]["replicaSpecs"]["Worker"]["template"]
    assert master["spec"]["nodeSelector"] == {"pool": "on-demand"}
    assert master["spec"]["containers"] == [{"name": "m"}]
    assert master["metadata"]["labels"] == {"x": "1"}
    assert worker["spec"]["tolerations"] == [{"key": "spot", "operator": "Exists"}]
    assert worker["metadata"]["labels"] == {"a": "b"}
    assert original == job()
    assert templated.started_object(started, templates_of, INFOS, SUSPEND) is None


def test_started_refuses_infos_that_do_not_name_the_podsets():
    with pytest.raises(framework.PodSetInfoConflict, match="expecting 2 podset, got 1"):
        templated.started_object(job(), templates_of, {"master": {}}, SUSPEND)
    with pytest.raises(framework.PodSetInfoConflict, match="expecting 2 podset, got 2"):
        templated.started_object(job(), templates_of, {"master": {}, "launcher": {}}, SUSPEND)


def test_stopped_suspends_and_restores_from_the_workload():
    started = templated.started_object(job(), templates_of, INFOS, SUSPEND)
    podsets = [
        {"name": name.lower(), "template": job()["spec"]["replicaSpecs"][name]["template"]}
        for name in ("Master", "Worker")
    ]
    wl = {"spec": {"podSets": podsets}}
    stopped = templated.stopped_object(started, templates_of, wl, SUSPEND)
    assert stopped["spec"]["runPolicy"]["suspend"] is True
    master = stopped["spec"]["replicaSpecs"]["Master"]["template"]
    assert master["spec"] == {"containers": [{"name": "m"}]}
    assert not master.get("metadata", {}).get("labels")
    assert (
        stopped["spec"]["replicaSpecs"]["Worker"]["template"]
        == job()["spec"]["replicaSpecs"]["Worker"]["template"]
    )
    assert templated.stopped_object(stopped, templates_of, wl, SUSPEND) is None
    # Without a Workload whose PodSets match: only suspended.
    only = templated.stopped_object(started, templates_of, None, SUSPEND)
    assert only["spec"]["runPolicy"]["suspend"] is True
    assert only["spec"]["replicaSpecs"] == started["spec"]["replicaSpecs"]
