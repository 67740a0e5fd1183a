"""StatefulSets: the webhook stamps a queued StatefulSet's template and makes each of its pods a
member of one serving pod group named after the StatefulSet (on a MultiKueue worker, after the
manager's StatefulSet); another framework's StatefulSets (a LeaderWorkerSet's) are left alone; the
MultiKueue copy carries the manager's UID."""

from __future__ import annotations

import asyncio
import copy

import pytest

from kube_runtime.client import Conflict
from kueue_domain import api
from kueue_domain.config import parse_config
from kueue_domain.naming import workload_name
from manager.adapters.statefulset import StatefulSetAdapter, remote_statefulset_copy
from worker_agent.integrations import enabled_frameworks
from worker_agent.integrations import statefulset as sts_mod
from worker_agent.webhooks import statefulset
from worker_agent.webhooks.common import Facts, Lookups

NS = "team-a"
CONFIG = parse_config({"integrations": {"frameworks": ["statefulset"]}})
FACTS = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: NS})
NO_CACHES = Lookups.from_objects()


def a_statefulset(
    labels: dict | None = None, replicas: int = 3, template_annotations: dict | None = None
) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS, "uid": "uid-db", "labels": dict(labels or {})},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}, "annotations": dict(template_annotations or {})},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }


def test_a_queued_statefulset_template_is_stamped() -> None:
    out = statefulset.default(a_statefulset({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, NO_CACHES, FACTS)
    annotations = out["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {api.ANNOTATION_POD_SUSPENDING_PARENT: "statefulset"}


def test_another_frameworks_statefulset_is_left_alone() -> None:
    lws_owned = a_statefulset(
        {api.LABEL_QUEUE_NAME: "lq"},
        template_annotations={
            api.ANNOTATION_POD_SUSPENDING_PARENT: "leaderworkerset.x-k8s.io/leaderworkerset"
        },
    )
    assert statefulset.default(lws_owned, NS, CONFIG, NO_CACHES, FACTS) == lws_owned
    scaled = copy.deepcopy(lws_owned)
    scaled["spec"]["replicas"] = 9
    assert statefulset.validate_update(lws_owned, scaled, CONFIG, FACTS) == []


def test_a_pod_becomes_a_member_of_the_statefulsets_group() -> None:
    sts = a_statefulset({api.LABEL_QUEUE_NAME: "lq", api.LABEL_PRIORITY_CLASS: "high"})
    name = workload_name("db", "uid-db", "StatefulSet", "apps")
    assert name.startswith("statefulset-db-")
    pod = {"metadata": {"name": "db-0", "labels": {"app": "db"}, "annotations": {}}, "spec": {}}
    out = statefulset.stamp_pod(pod, sts, CONFIG)
    assert out["metadata"]["labels"] == {
        "app": "db",
        api.LABEL_MANAGED: "true",
        api.LABEL_QUEUE_NAME: "lq",
        api.LABEL_PRIORITY_CLASS: "high",
    }
    assert out["metadata"]["annotations"] == {
        api.ANNOTATION_PREBUILT_WORKLOAD_NAME: name,
        api.ANNOTATION_POD_GROUP_NAME: name,
        api.ANNOTATION_POD_GROUP_TOTAL_COUNT: "3",
        api.ANNOTATION_POD_GROUP_FAST_ADMISSION: "true",
        api.ANNOTATION_POD_GROUP_SERVING: "true",
        api.ANNOTATION_POD_GROUP_POD_INDEX_LABEL: "apps.kubernetes.io/pod-index",
        api.ANNOTATION_ROLE_HASH: "main",
    }
    assert statefulset.stamp_pod(pod, a_statefulset(), CONFIG) == pod  # not Kueue's


def test_a_worker_copy_names_the_group_after_the_managers_statefulset() -> None:
    local = a_statefulset({api.LABEL_QUEUE_NAME: "lq"})
    name = workload_name("db", "uid-db", "StatefulSet", "apps")
    remote = remote_statefulset_copy(local, name, "origin-1")
    assert remote["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == "origin-1"
    assert remote["metadata"]["annotations"][api.ANNOTATION_PREBUILT_WORKLOAD_NAME] == name
    assert remote["metadata"]["annotations"][api.ANNOTATION_MULTIKUEUE_ORIGIN_UID] == "uid-db"
    assert remote["spec"] == local["spec"]
    remote["metadata"]["uid"] = "uid-on-the-worker"
    assert statefulset.workload_name(remote) == name
    adapter = StatefulSetAdapter.__new__(StatefulSetAdapter)
    assert adapter.workload_keys_for(remote) == [f"{NS}/{name}"]


def test_replicas_and_template_are_fixed_while_managed() -> None:
    old = a_statefulset({api.LABEL_QUEUE_NAME: "lq"})
    errors = statefulset.validate_update(
        old, a_statefulset({api.LABEL_QUEUE_NAME: "lq"}, replicas=4), CONFIG, FACTS
    )
    assert [e.path for e in errors] == ["spec.replicas"]
    assert (
        statefulset.validate_update(
            old, a_statefulset({api.LABEL_QUEUE_NAME: "lq"}, replicas=0), CONFIG, FACTS
        )
        == []
    )


def test_the_statefulset_framework_implies_the_pod_integration() -> None:
    assert enabled_frameworks(("statefulset",)) == ["pod", "statefulset"]


def test_a_scale_up_from_zero_waits_for_the_scale_down_and_its_workload() -> None:
    """Upstream's checks: pods of the scale-down still there, or its Workload still there and not on
    hold (being deleted), refuse the scale-up; a Workload on hold, or none, allows it."""
    old = a_statefulset({api.LABEL_QUEUE_NAME: "lq"}, replicas=0)
    up = a_statefulset({api.LABEL_QUEUE_NAME: "lq"}, replicas=3)
    assert statefulset.scales_up_from_zero(old, up)
    terminating = copy.deepcopy(up)
    terminating["status"] = {"replicas": 2}
    errors = statefulset.validate_update(old, terminating, CONFIG, FACTS)
    assert [(e.path, e.detail) for e in errors] == [("spec.replicas", "scaling down is still in progress")]
    assert not statefulset.scales_up_from_zero(old, terminating)

    live = Facts(namespace_labels=FACTS.namespace_labels, earlier_workload_on_hold=False)
    errors = statefulset.validate_update(old, up, CONFIG, live)
    assert [(e.path, e.detail) for e in errors] == [
        ("spec.replicas", "workload from previous scale-down is still being deleted")
    ]
    on_hold = Facts(namespace_labels=FACTS.namespace_labels, earlier_workload_on_hold=True)
    assert statefulset.validate_update(old, up, CONFIG, on_hold) == []
    assert statefulset.validate_update(old, up, CONFIG, FACTS) == []  # no Workload


def test_a_deleted_statefulsets_workload_is_finalized_again_after_a_failed_attempt() -> None:
    # Upstream's "should admit group that fits": the StatefulSet deleted, letting its Workload go
    # failed on a Conflict; the retry must still finalize it (it did not: the deleted StatefulSet
    # was forgotten before the attempt, and the Workload kept its finalizer for good).
    class Gone:
        def get(self, key: str) -> None:
            return None

    integration = sts_mod.StatefulSetIntegration.__new__(sts_mod.StatefulSetIntegration)
    integration.statefulsets = Gone()
    integration.config = parse_config({"integrations": {"frameworks": ["statefulset"]}})
    sts = statefulset.default(a_statefulset({api.LABEL_QUEUE_NAME: "lq"}), NS, CONFIG, NO_CACHES, FACTS)
    attempts: list[str] = []

    async def finalize(gone: dict) -> None:
        attempts.append(gone["metadata"]["name"])
        if len(attempts) == 1:
            raise Conflict({"code": 409}, "Conflict", "the object has been modified")

    integration._finalize = finalize
    integration._deleted = {f"{NS}/db": sts}
    with pytest.raises(Conflict):
        asyncio.run(integration.reconcile(f"{NS}/db"))
    asyncio.run(integration.reconcile(f"{NS}/db"))  # the controller's retry
    assert attempts == ["db", "db"]
    assert integration._deleted == {}
    asyncio.run(integration.reconcile(f"{NS}/db"))  # once done, nothing more
    assert attempts == ["db", "db"]
