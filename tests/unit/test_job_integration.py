"""Pure parts of the batch/v1 Job integration."""

from __future__ import annotations

import hashlib
import re

from kueue_domain import api, naming
from worker_agent.integrations import framework
from worker_agent.integrations import job as job_mod


def job(
    parallelism=2,
    completions=4,
    *,
    suspend=True,
    status=None,
    annotations=None,
    labels=None,
    completion_mode=None,
    template_labels=None,
):
    spec = {
        "suspend": suspend,
        "template": {
            "metadata": {
                "labels": {
                    "batch.kubernetes.io/controller-uid": "uid-1",
                    "batch.kubernetes.io/job-name": "sample-job",
                    "controller-uid": "uid-1",
                    "job-name": "sample-job",
                    **(template_labels or {}),
                }
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
        },
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    if completion_mode:
        spec["completionMode"] = completion_mode
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample-job",
            "namespace": "ns",
            "uid": "uid-1",
            "resourceVersion": "1",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": status or {},
    }


def admitted_workload(count=2, podset_count=2, min_count=None, conditions=None):
    podset = {"name": "main", "count": podset_count, "template": {"spec": {}}}
    if min_count is not None:
        podset["minCount"] = min_count
    return {
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"queueName": "lq", "podSets": [podset]},
        "status": {
            "conditions": conditions
            if conditions is not None
            else [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}, "count": count}],
            },
        },
    }


FLAVORS = {"f": {"metadata": {"name": "f"}, "spec": {"nodeLabels": {"pool": "a"}}}}


def test_workload_name_format_and_hash():
    name = naming.workload_name("sample-job", "uid-1", job_mod.JOB_KIND, job_mod.JOB_GROUP)
    assert re.fullmatch(r"job-sample-job-[0-9a-f]{5}", name)
    assert name[-5:] == hashlib.sha1(b"Job\nbatch\nsample-job\nuid-1").hexdigest()[:5]


def test_podset_count_is_min_of_parallelism_and_completions():
    assert job_mod.pods_count(job(2, 4)) == 2
    assert job_mod.pods_count(job(5, 3)) == 3
    assert job_mod.pods_count(job(None, None)) == 1
    assert job_mod.pods_count(job(3, None)) == 3


def test_podset_drops_legacy_template_labels_only():
    (podset,) = job_mod.job_podsets(job(template_labels={"app": "x"}))
    assert podset["name"] == "main"
    assert podset["count"] == 2
    assert podset["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/job-name": "sample-job",
        "app": "x",
    }
    assert "minCount" not in podset


def test_min_parallelism_annotation_becomes_min_count():
    (podset,) = job_mod.job_podsets(job(4, 4, annotations={api.ANNOTATION_JOB_MIN_PARALLELISM: "2"}))
    assert podset["minCount"] == 2
    (podset,) = job_mod.job_podsets(job(4, 4, annotations={api.ANNOTATION_JOB_MIN_PARALLELISM: "9"}))
    assert "minCount" not in podset


def test_suspended_active_and_finished():
    assert job_mod.is_suspended(job())
    assert not job_mod.is_suspended(job(annotations={api.ANNOTATION_STOPPING: "true"}))
    assert not job_mod.is_suspended(job(suspend=False))
    assert job_mod.is_active(job(status={"active": 1}))
    done = job(status={"conditions": [{"type": "Complete", "status": "True", "message": "ok"}]})
    assert job_mod.finished(done) == (True, True, "ok")
    failed = job(status={"conditions": [{"type": "Failed", "status": "True", "message": "bad"}]})
    assert job_mod.finished(failed) == (True, False, "bad")
    assert job_mod.finished(job())[0] is False


def test_pods_ready_counts_succeeded_ready_and_uncounted():
    assert not job_mod.pods_ready(job(2, 4, status={"ready": 1}))
    assert job_mod.pods_ready(job(2, 4, status={"ready": 1, "succeeded": 1}))
    assert job_mod.pods_ready(job(2, 4, status={"ready": 1, "uncountedTerminatedPods": {"succeeded": ["a"]}}))


def test_pods_ready_condition_transitions():
    wl = admitted_workload()
    ready = job(status={"ready": 2})
    assert job_mod.pods_ready_condition(ready, wl) == ("True", "Started", api.MSG_PODS_READY)
    wl["status"]["conditions"].append({"type": "PodsReady", "status": "True", "reason": "Started"})
    assert job_mod.pods_ready_condition(job(status={"ready": 1}), wl)[:2] == ("False", "WaitForRecovery")
    wl["status"]["conditions"][-1] = {"type": "PodsReady", "status": "False", "reason": "WaitForRecovery"}
    assert job_mod.pods_ready_condition(job(status={"ready": 1}), wl)[:2] == ("False", "WaitForRecovery")
    assert job_mod.pods_ready_condition(ready, wl)[:2] == ("True", "Recovered")
    not_admitted = admitted_workload(conditions=[])
    assert job_mod.pods_ready_condition(ready, not_admitted) == (
        "False",
        "WaitForStart",
        api.MSG_WAIT_FOR_START,
    )


def test_reclaimable_pods():
    # 2 of 4 completions done with parallelism 3: 2 remain, 1 pod is reclaimable.
    assert job_mod.reclaimable_count(job(3, 4, status={"succeeded": 2})) == 1
    assert job_mod.reclaimable_count(job(3, 4, status={"succeeded": 1})) == 0
    assert job_mod.reclaimable_count(job(1, 4, status={"succeeded": 3})) == 0
    indexed = job(3, 4, completion_mode="Indexed", status={"completedIndexes": "0,2", "failedIndexes": "3,9"})
    assert job_mod.reclaimable_count(indexed) == 2
    assert job_mod.parse_indexes("1,3-5,7") == {1, 3, 4, 5, 7}


def test_reclaimable_pods_never_decrease_while_reserved():
    wl = admitted_workload(podset_count=3)
    wl["status"]["reclaimablePods"] = [{"name": "main", "count": 2}]
    assert job_mod.desired_reclaimable_pods(job(3, 4, status={"succeeded": 2}), wl) == [
        {"name": "main", "count": 2}
    ]
    wl["status"]["conditions"] = []
    assert job_mod.desired_reclaimable_pods(job(3, 4, status={"succeeded": 2}), wl) == [
        {"name": "main", "count": 1}
    ]


def test_start_injects_podset_info_and_unsuspends():
    wl = admitted_workload()
    info = framework.podset_infos(wl, FLAVORS)["main"]
    started = job_mod.started_job(job(), job_mod.main_podset(wl), info)
    assert started["spec"]["suspend"] is False
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a"}
    labels = started["spec"]["template"]["metadata"]["labels"]
    assert labels[api.LABEL_PODSET] == "main"
    assert labels[api.LABEL_CLUSTER_QUEUE_NAME] == "cq"
    assert labels[api.LABEL_LOCAL_QUEUE_NAME] == "lq"
    assert started["spec"]["parallelism"] == 2
    assert job_mod.started_job(job(suspend=False), job_mod.main_podset(wl), info) is None


PARTIAL_ADMISSION = {
    api.ANNOTATION_JOB_MIN_PARALLELISM: "1",
    api.ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM: "true",
}


def partially_admitted(parallelism: int = 4) -> tuple[dict, dict, dict]:
    """(an Indexed Job of `parallelism` pods that allows partial admission, its Workload admitted
    for 2 of 4, that Job started)."""
    original = job(parallelism, 4, annotations=PARTIAL_ADMISSION, completion_mode="Indexed")
    wl = admitted_workload(count=2, podset_count=4, min_count=1)
    wl["spec"]["podSets"][0]["template"] = job_mod.job_podsets(original)[0]["template"]
    info = framework.podset_infos(wl, FLAVORS)["main"]
    return original, wl, job_mod.started_job(original, job_mod.main_podset(wl), info)


def test_partial_admission_sets_parallelism_and_stop_restores_it():
    original, wl, started = partially_admitted()
    assert (started["spec"]["parallelism"], started["spec"]["completions"]) == (2, 2)
    assert job_mod.equivalent(started, wl, FLAVORS)

    stopping = job_mod.suspending_job(started)
    assert stopping["spec"]["suspend"] is True
    assert stopping["metadata"]["annotations"][api.ANNOTATION_STOPPING] == "true"
    assert not job_mod.is_suspended(stopping)
    assert job_mod.suspending_job(stopping) is None
    restored = job_mod.restored_job(stopping, job_mod.main_podset(wl))
    assert (restored["spec"]["parallelism"], restored["spec"]["completions"]) == (4, 4)
    assert api.ANNOTATION_STOPPING not in restored["metadata"]["annotations"]
    assert job_mod.is_suspended(restored)
    template = restored["spec"]["template"]
    assert "nodeSelector" not in template["spec"]
    # The selector labels stay although the Workload's copy leaves them out.
    assert template["metadata"]["labels"] == original["spec"]["template"]["metadata"]["labels"]


def test_equivalence_follows_the_running_job():
    original = job()
    wl = admitted_workload()
    wl["spec"]["podSets"][0]["template"] = job_mod.job_podsets(original)[0]["template"]
    assert job_mod.equivalent(original, wl, FLAVORS)
    running = job_mod.started_job(
        original, job_mod.main_podset(wl), framework.podset_infos(wl, FLAVORS)["main"]
    )
    assert job_mod.equivalent(running, wl, FLAVORS)
    bigger = job(3, 4, suspend=False)
    assert not job_mod.equivalent(bigger, wl, FLAVORS)
    with_limit = job(labels={api.LABEL_MAX_EXEC_TIME_SECONDS: "60"})
    assert not job_mod.equivalent(with_limit, wl, FLAVORS)


def test_controlling_job_reference():
    wl = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "a", "uid": "u1"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "b", "uid": "u2", "controller": True},
            ]
        }
    }
    assert job_mod.controlling_job(wl)["name"] == "b"
    assert job_mod._owner_uid_index(wl) == ("u2",)
    wl["metadata"]["namespace"] = "ns"
    wl["metadata"]["labels"] = {api.LABEL_JOB_UID: "u2"}
    assert job_mod._owner_key_index(wl) == ("ns/b",)
    assert job_mod._job_uid_label_index(wl) == ("u2",)
    assert job_mod.controlling_job({"metadata": {}}) is None


def test_prebuilt_workload_name_annotation_first():
    both = job(
        annotations={api.ANNOTATION_PREBUILT_WORKLOAD_NAME: "a"},
        labels={api.LABEL_PREBUILT_WORKLOAD_NAME: "b"},
    )
    assert job_mod.prebuilt_workload_name(both) == "a"
    assert job_mod.prebuilt_workload_name(job(labels={api.LABEL_PREBUILT_WORKLOAD_NAME: "b"})) == "b"
    assert job_mod.prebuilt_workload_name(job()) is None


def _apply_json_patch(obj, ops):
    """The `test` and `replace` operations of RFC 6902 on plain paths (all start_patch uses);
    None when a test fails, as the apiserver refuses the whole patch then."""
    import copy as _copy

    result = _copy.deepcopy(obj)
    for op in ops:
        *parents, last = op["path"].lstrip("/").split("/")
        node = result
        for part in parents:
            node = node[part]
        if op["op"] == "test":
            if node.get(last) != op["value"]:
                return None
        elif op["op"] == "replace":
            assert last in node, f"replace of a missing {op['path']} is refused by the apiserver"
            node[last] = op["value"]
        elif op["op"] == "add":
            node[last] = op["value"]
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return result


def test_the_start_is_one_patch_that_fails_only_when_what_it_read_changed():
    wl = admitted_workload()
    info = framework.podset_infos(wl, FLAVORS)["main"]
    original = job()
    started = job_mod.started_job(original, job_mod.main_podset(wl), info)
    ops = job_mod.start_patch(original, started)
    assert all("resourceVersion" not in op["path"] for op in ops)
    # The job controller's status write meanwhile (a new resourceVersion) does not stop it.
    later = job(status={"conditions": [{"type": "Suspended", "status": "True"}]})
    later["metadata"]["resourceVersion"] = "2"
    patched = _apply_json_patch(later, ops)
    assert patched["spec"] == started["spec"] and patched["status"] == later["status"]
    # A change to what the start was computed from does: already started, the template edited, the
    # Job replaced by another of the same name.
    assert _apply_json_patch(job(suspend=False), ops) is None
    assert _apply_json_patch(job(template_labels={"edited": "yes"}), ops) is None
    other = job()
    other["metadata"]["uid"] = "uid-2"
    assert _apply_json_patch(other, ops) is None


def test_a_partial_admission_start_patches_the_counts_it_read():
    original, _, started = partially_admitted()
    ops = job_mod.start_patch(original, started)
    patched = _apply_json_patch(original, ops)
    assert (patched["spec"]["parallelism"], patched["spec"]["completions"]) == (2, 2)
    assert patched["spec"] == started["spec"]
    assert _apply_json_patch(partially_admitted(3)[0], ops) is None
