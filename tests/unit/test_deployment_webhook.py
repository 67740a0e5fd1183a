"""The Deployment webhook (upstream's deployment integration): a managed Deployment's pod template is
stamped so that its pods are gated single pods of the pod integration; the queue name is fixed once a
replica is ready and may never be removed."""

from __future__ import annotations

import copy

from kueue_domain import api
from kueue_domain.config import parse_config
from worker_agent.integrations import enabled_frameworks
from worker_agent.webhooks import deployment, pod
from worker_agent.webhooks.common import Facts, Lookups

NS = "team-a"
CONFIG = parse_config({"integrations": {"frameworks": ["deployment"]}})
FACTS = Facts(namespace_labels={api.LABEL_NAMESPACE_NAME: NS})
NO_CACHES = Lookups.from_objects()


def a_deployment(labels: dict | None = None, ready: int = 0) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS, "labels": dict(labels or {})},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
        "status": {"readyReplicas": ready},
    }


def test_a_queued_deployment_hands_its_pods_to_the_pod_integration() -> None:
    labels = {api.LABEL_QUEUE_NAME: "lq", api.LABEL_PRIORITY_CLASS: "high"}
    out = deployment.default(a_deployment(labels), NS, CONFIG, NO_CACHES, FACTS)
    template = out["spec"]["template"]["metadata"]
    assert template["annotations"] == {api.ANNOTATION_POD_SUSPENDING_PARENT: "deployment"}
    assert template["labels"] == {
        "app": "web",
        api.LABEL_MANAGED: "true",
        api.LABEL_QUEUE_NAME: "lq",
        api.LABEL_PRIORITY_CLASS: "high",
    }
    # The pod webhook then gates such a pod without any queue check.
    a_pod = {"metadata": copy.deepcopy(template), "spec": copy.deepcopy(out["spec"]["template"]["spec"])}
    gated = pod.default(a_pod, NS, CONFIG, NO_CACHES, Facts())
    assert pod.is_gated(gated)
    assert api.FINALIZER_MANAGED not in (gated["metadata"].get("finalizers") or ())


def test_a_deployment_without_a_queue_is_left_alone() -> None:
    original = a_deployment()
    assert deployment.default(original, NS, CONFIG, NO_CACHES, FACTS) == original


def test_the_queue_name_is_fixed_once_a_replica_is_ready() -> None:
    old = a_deployment({api.LABEL_QUEUE_NAME: "lq"}, ready=1)
    new = a_deployment({api.LABEL_QUEUE_NAME: "other"}, ready=1)
    errors = deployment.validate_update(old, new, CONFIG)
    assert [e.path for e in errors] == ["metadata.labels[kueue.x-k8s.io/queue-name]"]
    assert deployment.validate_update(a_deployment({api.LABEL_QUEUE_NAME: "lq"}), new, CONFIG) == []


def test_the_queue_name_may_never_be_removed() -> None:
    old = a_deployment({api.LABEL_QUEUE_NAME: "lq"})
    errors = deployment.validate_update(old, a_deployment(), CONFIG)
    assert [e.path for e in errors] == ["metadata.labels[kueue.x-k8s.io/queue-name]"]


def test_an_invalid_queue_name_is_refused() -> None:
    errors = deployment.validate_create(a_deployment({api.LABEL_QUEUE_NAME: "Not_A_Name"}), CONFIG)
    assert [e.path for e in errors] == ["metadata.labels[kueue.x-k8s.io/queue-name]"]


def test_the_deployment_framework_implies_the_pod_integration() -> None:
    assert enabled_frameworks(("deployment",)) == ["pod", "deployment"]
