"""Plain pods, pod groups and Deployments across clusters, end to end, as `make up` runs them: a fleet
of its own (`localfleet up --agents --manager --setup-multikueue`) whose agents serve the real pod
and Deployment webhooks on every cluster. Everything is driven with kubectl on the manager, as a
user would; kwok runs the workers' pods (it completes only Job pods, so a plain pod's end is written
into its status on the worker, as its kubelet would).

a. a pod runs on a worker; the manager's pod stays gated yet shows Running and PodScheduled=True,
   then Succeeded; its Workload finishes and nothing is left on the worker;
b. a pod group runs whole on one worker and finishes (`Pods succeeded: 2/2.`);
c. a Deployment's pods are dispatched one by one and the manager's Deployment is READY 2/2, then
   3/3 after a scale-up; deleting it deletes every pod on the workers;
d. deleting a running pod on the manager deletes its copy.
"""

from __future__ import annotations

import json

import pytest
from fleet_kit import (
    MANAGER,
    NAMESPACE,
    PAUSE_IMAGE,
    QUEUE,
    Fleet,
    NotYet,
    assert_invariants,
    check_state,
    cluster_name,
    condition,
    own_fleet,
    unique,
    wait_until,
)

from kueue_domain import api

pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def mk():
    with own_fleet("kf-mk-pods-e2e-", "--agents", "--manager", keep_logs_env="MK_PODS_E2E_LOGS") as fleet:
        assert len(fleet.workers) == 2
        yield fleet


@pytest.fixture(autouse=True)
def nothing_stuck(mk):
    yield
    assert_invariants(mk)


def pod_manifest(name: str, group: str = "", total: int = 0, cpu: str = "100m") -> dict:
    labels = {api.LABEL_QUEUE_NAME: QUEUE}
    annotations = {}
    if group:
        labels[api.LABEL_POD_GROUP_NAME] = group
        annotations[api.ANNOTATION_POD_GROUP_TOTAL_COUNT] = str(total)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def gated(pod: dict) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return any(g.get("name") == api.SCHEDULING_GATE_ADMISSION for g in gates)


def phase(pod: dict | None) -> str:
    return ((pod or {}).get("status") or {}).get("phase", "")


def workload_of(mk: Fleet, pod_name: str) -> dict | None:
    for wl in mk.items(MANAGER, "workloads"):
        if any(
            r.get("kind") == "Pod" and r.get("name") == pod_name
            for r in wl["metadata"].get("ownerReferences") or ()
        ):
            return wl
    return None


def ready_on(mk: Fleet, pod_name: str):
    """The worker the Workload of `pod_name` was admitted on (check Ready), else NotYet."""

    def check():
        wl = workload_of(mk, pod_name)
        if wl is None or check_state(wl).get("state") != api.CHECK_STATE_READY:
            return NotYet(wl and check_state(wl))
        return cluster_name(wl)

    return check


def complete_on(mk: Fleet, worker: str, pod_name: str) -> None:
    mk.kubectl(
        worker, "patch", "pod", pod_name, "-n", NAMESPACE, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Succeeded"}}),
    )  # fmt: skip


def test_a_pod_runs_on_a_worker(mk):
    name = unique("solo")
    mk.create(MANAGER, pod_manifest(name))
    worker = wait_until("the pod's Workload Ready", ready_on(mk, name))

    def running_there():
        pod = mk.get(worker, "pod", name)
        return pod if pod and phase(pod) == "Running" and not gated(pod) else NotYet(pod and phase(pod))

    remote = wait_until("the copy running on its worker", running_there)
    assert remote["metadata"]["labels"][api.LABEL_MULTIKUEUE_ORIGIN] == "multikueue"

    def running_here():
        pod = mk.get(MANAGER, "pod", name)
        scheduled = condition(pod, "PodScheduled").get("status")
        return pod if phase(pod) == "Running" and scheduled == "True" else NotYet((phase(pod), scheduled))

    pod = wait_until("the manager's pod Running", running_here)
    assert gated(pod) and not pod["spec"].get("nodeName"), "the manager's pod never runs"
    assert api.FINALIZER_MANAGED in pod["metadata"]["finalizers"], "the manager's webhook made it Kueue's"

    complete_on(mk, worker, name)
    wait_until("the manager's pod Succeeded", lambda: phase(mk.get(MANAGER, "pod", name)) == "Succeeded")

    def finished():
        wl = workload_of(mk, name)
        return wl if wl and condition(wl, "Finished").get("status") == "True" else NotYet(wl)

    assert condition(wait_until("its Workload Finished", finished), "Finished")["reason"] == "Succeeded"
    wait_until("its copy gone", lambda: mk.get(worker, "pod", name) is None)
    wait_until(
        "our finalizer released",
        lambda: not (mk.get(MANAGER, "pod", name)["metadata"].get("finalizers") or ()),
    )
    mk.kubectl(MANAGER, "delete", "pod", name, "-n", NAMESPACE)


def test_a_pod_group_runs_whole_on_one_worker(mk):
    group = unique("grp")
    names = [f"{group}-a", f"{group}-b"]
    mk.create(MANAGER, *(pod_manifest(n, group=group, total=2) for n in names))

    def placed():
        wl = mk.get(MANAGER, "workloads", group)
        if wl is None or check_state(wl).get("state") != api.CHECK_STATE_READY:
            return NotYet(wl and check_state(wl))
        return cluster_name(wl)

    worker = wait_until("the group's Workload Ready", placed)
    wait_until(
        "both copies running on one worker",
        lambda: all(phase(mk.get(worker, "pod", n)) == "Running" for n in names),
    )
    for n in names:
        assert gated(mk.get(MANAGER, "pod", n))
        complete_on(mk, worker, n)

    def finished():
        wl = mk.get(MANAGER, "workloads", group)
        return wl if condition(wl, "Finished").get("status") == "True" else NotYet(wl and wl.get("status"))

    assert (
        condition(wait_until("the group finished", finished), "Finished")["message"] == "Pods succeeded: 2/2."
    )
    assert all(phase(mk.get(MANAGER, "pod", n)) == "Succeeded" for n in names)
    wait_until("the copies gone", lambda: all(mk.get(w, "pod", n) is None for w in mk.workers for n in names))
    mk.kubectl(MANAGER, "delete", "pod", *names, "-n", NAMESPACE)


def test_a_deployment_runs_through_its_pods(mk):
    name = unique("web")
    template = pod_manifest("unused")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
        },
    }
    deployment["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    mk.create(MANAGER, deployment)

    def ready(count: int):
        def check():
            status = (mk.get(MANAGER, "deployment", name) or {}).get("status") or {}
            return status.get("readyReplicas") == count or NotYet(status)

        return check

    wait_until("the Deployment READY 2/2", ready(2))
    pods = mk.items(MANAGER, "pods", "-l", f"app={name}")
    assert len(pods) == 2
    for pod in pods:
        assert gated(pod) and not pod["spec"].get("nodeName")
        annotations = pod["metadata"].get("annotations") or {}
        assert annotations[api.ANNOTATION_POD_SUSPENDING_PARENT] == "deployment"
        worker = wait_until("its Workload Ready", ready_on(mk, pod["metadata"]["name"]))
        assert phase(mk.get(worker, "pod", pod["metadata"]["name"])) == "Running"

    mk.kubectl(MANAGER, "scale", "deployment", name, "-n", NAMESPACE, "--replicas=3")
    wait_until("the Deployment READY 3/3", ready(3))

    mk.kubectl(MANAGER, "delete", "deployment", name, "-n", NAMESPACE)

    def all_gone():
        left = {c: mk.items(c, "pods", "-l", f"app={name}") for c in (MANAGER, *mk.workers)}
        return not any(left.values()) or NotYet({c: len(p) for c, p in left.items()})

    wait_until("every pod of the Deployment gone", all_gone)


def test_deleting_a_running_pod_on_the_manager_deletes_its_copy(mk):
    name = unique("doomed")
    mk.create(MANAGER, pod_manifest(name))
    worker = wait_until("the pod's Workload Ready", ready_on(mk, name))
    wait_until("the manager's pod Running", lambda: phase(mk.get(MANAGER, "pod", name)) == "Running")
    mk.kubectl(MANAGER, "delete", "pod", name, "-n", NAMESPACE, "--wait=false")
    wait_until(
        "the pod gone on both sides",
        lambda: mk.get(MANAGER, "pod", name) is None and mk.get(worker, "pod", name) is None,
    )


def test_a_deployment_on_a_worker_alone_runs_there(mk):
    """The same Deployment created on a worker (no MultiKueue check there): the worker's own agent
    admits each pod's Workload and ungates it; scaling down finishes the Workloads of the pods the
    ReplicaSet deleted (OwnerNotFound), which frees their quota."""
    worker = mk.workers[0]
    name = unique("local-web")
    template = pod_manifest("unused")["spec"]
    template["restartPolicy"] = "Always"
    mk.create(
        worker,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template},
            },
        },
    )

    def ready():
        status = (mk.get(worker, "deployment", name) or {}).get("status") or {}
        return status.get("readyReplicas") == 2 or NotYet(status)

    wait_until("the Deployment READY 2/2 on the worker", ready)
    for pod in mk.items(worker, "pods", "-l", f"app={name}"):
        assert not gated(pod) and pod["spec"].get("nodeName")
    mk.kubectl(worker, "scale", "deployment", name, "-n", NAMESPACE, "--replicas=1")

    def one_left():
        pods = mk.items(worker, "pods", "-l", f"app={name}")
        workloads = [
            w
            for w in mk.items(worker, "workloads")
            if w["metadata"]["name"].startswith(f"pod-{name}")
            and condition(w, "Finished").get("status") != "True"
        ]
        return (len(pods) == 1 and len(workloads) == 1) or NotYet(
            (len(pods), [w["metadata"]["name"] for w in workloads])
        )

    wait_until("one pod and one unfinished Workload left", one_left)
    mk.kubectl(worker, "delete", "deployment", name, "-n", NAMESPACE)
    wait_until("its pods gone", lambda: not mk.items(worker, "pods", "-l", f"app={name}"))


def test_a_statefulset_runs_on_one_worker(mk):
    """Upstream's "Should sync a StatefulSet to worker if admitted": one Workload for the whole
    StatefulSet; the worker gets the StatefulSet, whose pods its agent ungates as the group's; the
    manager's pods stay gated; deleting the StatefulSet on the manager deletes the worker's."""
    name = unique("sts")
    template = pod_manifest("unused")["spec"]
    template["restartPolicy"] = "Always"
    mk.create(
        MANAGER,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template},
            },
        },
    )

    def placed():
        for wl in mk.items(MANAGER, "workloads"):
            owner = (wl["metadata"].get("annotations") or {}).get(api.ANNOTATION_JOB_OWNER_NAME)
            if owner == name and check_state(wl).get("state") == api.CHECK_STATE_READY:
                return cluster_name(wl)
        return NotYet([w["metadata"]["name"] for w in mk.items(MANAGER, "workloads")])

    worker = wait_until("the StatefulSet's Workload Ready", placed)

    def ready_there():
        status = (mk.get(worker, "statefulset", name) or {}).get("status") or {}
        return status.get("readyReplicas") == 3 or NotYet(status)

    wait_until("3 replicas ready on the worker", ready_there, timeout=120)
    pods = mk.items(MANAGER, "pods", "-l", f"app={name}")
    assert pods and all(gated(p) for p in pods), "the manager's pods stay gated"
    mk.kubectl(MANAGER, "delete", "statefulset", name, "-n", NAMESPACE)
    wait_until("the worker's StatefulSet gone", lambda: mk.get(worker, "statefulset", name) is None)
    wait_until(
        "every pod gone",
        lambda: not any(mk.items(c, "pods", "-l", f"app={name}") for c in (MANAGER, *mk.workers)),
    )


def test_a_statefulset_on_a_worker_alone_runs_there(mk):
    """The same StatefulSet created on a worker: its agent creates the group's Workload, admits it
    and ungates the pods as the StatefulSet controller creates them one by one; deleting the
    StatefulSet finishes the Workload (OwnerNotFound), which frees its quota."""
    worker = mk.workers[1]
    name = unique("local-sts")
    template = pod_manifest("unused")["spec"]
    template["restartPolicy"] = "Always"
    mk.create(
        worker,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: QUEUE}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template},
            },
        },
    )

    def ready():
        status = (mk.get(worker, "statefulset", name) or {}).get("status") or {}
        return status.get("readyReplicas") == 2 or NotYet(status)

    wait_until("2 replicas ready", ready, timeout=120)
    workloads = [
        w for w in mk.items(worker, "workloads") if w["metadata"]["name"].startswith(f"statefulset-{name}-")
    ]
    assert len(workloads) == 1 and condition(workloads[0], "Admitted").get("status") == "True"
    wl_name = workloads[0]["metadata"]["name"]
    mk.kubectl(worker, "delete", "statefulset", name, "-n", NAMESPACE)

    def released():
        wl = mk.get(worker, "workloads", wl_name)
        return (
            wl is None
            or condition(wl, "Finished").get("reason") == "OwnerNotFound"
            or NotYet(wl.get("status"))
        )

    wait_until("its Workload finished or gone", released)


def _local_statefulset(mk: Fleet, worker: str, name: str, replicas: int, queue: str = QUEUE) -> None:
    template = pod_manifest("unused")["spec"]
    template["restartPolicy"] = "Always"
    mk.create(
        worker,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {api.LABEL_QUEUE_NAME: queue}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template},
            },
        },
    )


def _scale(mk: Fleet, worker: str, name: str, replicas: int) -> None:
    mk.kubectl(worker, "scale", "statefulset", name, "-n", NAMESPACE, f"--replicas={replicas}")


def _ready_replicas(mk: Fleet, worker: str, name: str, count: int):
    def check():
        status = (mk.get(worker, "statefulset", name) or {}).get("status") or {}
        return (status.get("readyReplicas") or 0) == count or NotYet(status)

    return check


def _sts_workload(mk: Fleet, worker: str, name: str) -> dict:
    workloads = [
        w for w in mk.items(worker, "workloads") if w["metadata"]["name"].startswith(f"statefulset-{name}-")
    ]
    assert len(workloads) == 1, [w["metadata"]["name"] for w in workloads]
    return workloads[0]


def test_a_statefulset_scaled_to_zero_is_on_hold_and_runs_again_when_scaled_up(mk):
    """Upstream's scale-to-zero specs: the pods go, the Workload stays (owned) with QuotaReserved=False
    reason OnHold, so its quota is free; scaled up again it leaves OnHold, is admitted and its pods
    run. A scale-up while the scale-down's pods are still there is refused by the webhook."""
    worker = mk.workers[1]
    name = unique("zero-sts")
    _local_statefulset(mk, worker, name, 2)
    wait_until("2 replicas ready", _ready_replicas(mk, worker, name, 2), timeout=120)
    wl_name = _sts_workload(mk, worker, name)["metadata"]["name"]
    _scale(mk, worker, name, 0)

    def on_hold():
        wl = mk.get(worker, "workloads", wl_name) or {}
        reserved = condition(wl, "QuotaReserved")
        held = reserved.get("status") == "False" and reserved.get("reason") == "OnHold"
        return (wl, reserved) if held else NotYet(reserved)

    wl, reserved = wait_until("the Workload on hold", on_hold, timeout=60)
    assert reserved["message"] == "StatefulSet scaled to zero; workload on hold"
    assert not (wl.get("status") or {}).get("admission")
    assert any(r.get("name") == name for r in wl["metadata"].get("ownerReferences") or ())

    def pods_gone():
        pods = [
            p["metadata"]["name"]
            for p in mk.items(worker, "pods", "-n", NAMESPACE)
            if p["metadata"]["name"].startswith(f"{name}-")
        ]
        return not pods or NotYet(pods)

    wait_until("the StatefulSet's pods gone", pods_gone, timeout=60)
    # Still on hold a while later: nothing re-queued it.
    assert condition(mk.get(worker, "workloads", wl_name), "QuotaReserved").get("reason") == "OnHold"

    def scaled_down():
        status = (mk.get(worker, "statefulset", name) or {}).get("status") or {}
        return not status.get("replicas") or NotYet(status)

    wait_until("the StatefulSet's status at 0 replicas", scaled_down, timeout=60)
    _scale(mk, worker, name, 2)
    wait_until("2 replicas ready again", _ready_replicas(mk, worker, name, 2), timeout=120)
    wl = mk.get(worker, "workloads", wl_name)
    assert condition(wl, "Admitted").get("status") == "True"
    assert _sts_workload(mk, worker, name)["metadata"]["name"] == wl_name  # the same Workload
    mk.kubectl(worker, "delete", "statefulset", name, "-n", NAMESPACE)


def test_a_statefulset_queue_name_can_change_while_none_of_its_pods_is_ready(mk):
    """Upstream's "change queue name after scale up from zero": created at 0 replicas on a queue
    that does not exist, scaled to 1 (its pod gated, labelled with that queue), then moved to a real
    queue: the pod's label and the Workload's queue follow, and it runs."""
    worker = mk.workers[1]
    name = unique("move-sts")
    _local_statefulset(mk, worker, name, 0, queue=f"{QUEUE}-nonexistent")
    _scale(mk, worker, name, 1)

    def pod_of(queue: str):
        def check():
            pods = [
                p for p in mk.items(worker, "pods", "-n", NAMESPACE) if p["metadata"]["name"] == f"{name}-0"
            ]
            labels = pods[0]["metadata"].get("labels") or {} if pods else {}
            return (pods and labels.get(api.LABEL_QUEUE_NAME) == queue and pods[0]) or NotYet(labels)

        return check

    assert gated(wait_until("its pod, gated", pod_of(f"{QUEUE}-nonexistent"), timeout=60))
    mk.kubectl(
        worker,
        "label",
        "statefulset",
        name,
        "-n",
        NAMESPACE,
        f"{api.LABEL_QUEUE_NAME}={QUEUE}",
        "--overwrite",
    )
    wait_until("the pod's queue label updated", pod_of(QUEUE), timeout=60)
    wait_until("1 replica ready", _ready_replicas(mk, worker, name, 1), timeout=120)
    wl = _sts_workload(mk, worker, name)
    assert wl["spec"]["queueName"] == QUEUE and condition(wl, "Admitted").get("status") == "True"
    mk.kubectl(worker, "delete", "statefulset", name, "-n", NAMESPACE)
