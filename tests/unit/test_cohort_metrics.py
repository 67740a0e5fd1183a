"""worker_agent.cohort_metrics: upstream's cohort metrics as /metrics shows them while ClusterQueues
and Cohorts come, change and go. The steps follow upstream v0.19's fair-sharing metrics
integration test ("follows reporting correct metrics")."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from worker_agent import metrics as m
from worker_agent.cohort_metrics import CohortMetrics
from worker_agent.engine import Snapshot, WorkloadInfo
from worker_agent.metrics import Metrics

GI = float(1024**3)
QUOTA = "kueue_cohort_subtree_quota"
RESERVATIONS = "kueue_cohort_subtree_resource_reservations"
ACTIVE = "kueue_cohort_subtree_admitted_active_workloads"
RESOURCE_NAMES = {"gpu": "nvidia.com/gpu"}  # keyword arguments cannot spell it


def cq(name: str, cohort: str | None, flavor: str, **quotas: str) -> dict:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": [RESOURCE_NAMES.get(r, r) for r in quotas],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": RESOURCE_NAMES.get(r, r), "nominalQuota": q} for r, q in quotas.items()
                        ],
                    }
                ],
            }
        ]
    }
    if cohort:
        spec["cohort"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def cohort(name: str, parent: str | None = None, flavor: str | None = None, **quotas: str) -> dict:
    obj = cq(name, None, flavor, **quotas) if flavor else {"metadata": {"name": name}, "spec": {}}
    if parent:
        obj["spec"]["parentName"] = parent
    return obj


def admitted(name: str, cq_name: str, flavor: str, cpu: str) -> WorkloadInfo:
    return WorkloadInfo.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": name,
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}]},
            "status": {
                "admission": {
                    "clusterQueue": cq_name,
                    "podSetAssignments": [
                        {
                            "name": "main",
                            "flavors": {"cpu": flavor},
                            "resourceUsage": {"cpu": cpu},
                            "count": 1,
                        }
                    ],
                },
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
            },
        }
    )


class World:
    """ClusterQueues and Cohorts as the informers hold them; each change rebuilds the snapshot."""

    def __init__(self, **metrics_kwargs: Any) -> None:
        self.registry = CollectorRegistry()
        self.metrics = Metrics(self.registry, **metrics_kwargs)
        self.admitted: dict[str, int] = {}
        self.reporter = CohortMetrics(self.metrics, lambda q: self.admitted.get(q.name, 0))
        self.cqs: dict[str, dict] = {}
        self.cohorts: dict[str, dict] = {}
        self.workloads: list[WorkloadInfo] = []
        self.snapshot = Snapshot()

    def rebuild(self) -> Snapshot:
        self.snapshot = Snapshot.from_objects(
            cluster_queues=self.cqs.values(), cohorts=self.cohorts.values(), workloads=self.workloads
        )
        return self.snapshot

    def put_cq(self, obj: dict) -> None:
        self.cqs[obj["metadata"]["name"]] = obj
        self.reporter.cluster_queue_changed(self.rebuild(), obj["metadata"]["name"])

    def delete_cq(self, name: str) -> None:
        del self.cqs[name]
        self.reporter.cluster_queue_changed(self.rebuild(), name)

    def put_cohort(self, obj: dict) -> None:
        self.cohorts[obj["metadata"]["name"]] = obj
        self.reporter.cohort_changed(self.rebuild(), obj["metadata"]["name"])

    def delete_cohort(self, name: str) -> None:
        del self.cohorts[name]
        self.reporter.cohort_deleted(self.rebuild(), name)

    # -- what /metrics shows -----------------------------------------------------------------

    def series(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        out = {}
        for family in text_string_to_metric_families(generate_latest(self.registry).decode()):
            for sample in family.samples:
                if sample.name == name:
                    labels = dict(sample.labels)
                    labels.pop("replica_role")
                    out[tuple(sorted(labels.items()))] = sample.value
        return out

    def subtree(self, name: str, cohort_name: str) -> dict[tuple[str, str], float]:
        """(flavor, resource) -> value of one cohort's subtree series."""
        out = {}
        for labels, val in self.series(name).items():
            d = dict(labels)
            if d["cohort"] == cohort_name:
                out[(d["flavor"], d["resource"])] = val
        return out

    def cohort_info(self) -> dict[str, tuple[str, str]]:
        return {
            dict(k)["cohort"]: (dict(k)["parent_cohort"], dict(k)["root_cohort"])
            for k, v in self.series(m.COHORT_INFO).items()
            if v == 1
        }

    def cq_info(self) -> dict[str, tuple[str, str]]:
        return {
            dict(k)["cluster_queue"]: (dict(k)["parent_cohort"], dict(k)["root_cohort"])
            for k, v in self.series(m.CLUSTER_QUEUE_INFO).items()
            if v == 1
        }


def test_subtree_quota_and_info_follow_upstreams_integration_steps():
    w = World()
    w.put_cq(cq("cqa", None, "default", cpu="10", memory="10Gi"))
    assert w.subtree(QUOTA, "ch1") == {}
    assert w.cq_info() == {"cqa": ("", "")}

    w.put_cq(cq("cqa", "ch1", "default", cpu="10", memory="10Gi"))
    assert w.subtree(QUOTA, "ch1") == {("default", "cpu"): 10, ("default", "memory"): 10 * GI}
    assert w.cq_info() == {"cqa": ("ch1", "ch1")}

    w.put_cohort(cohort("ch1", None, "default", cpu="15", memory="15Gi"))
    w.put_cq(cq("cqb", "ch1", "default", cpu="5", memory="5Gi"))
    assert w.subtree(QUOTA, "ch1") == {("default", "cpu"): 30, ("default", "memory"): 30 * GI}
    assert w.cohort_info() == {"ch1": ("", "ch1")}
    assert w.cq_info() == {"cqa": ("ch1", "ch1"), "cqb": ("ch1", "ch1")}

    w.put_cohort(cohort("ch2", None, "default", cpu="10", memory="10Gi"))
    w.put_cq(cq("cqd", "ch2", "default", cpu="5", memory="5Gi"))
    w.put_cq(cq("cqe", "ch2", "default", cpu="5", memory="5Gi"))
    assert w.subtree(QUOTA, "ch2") == {("default", "cpu"): 20, ("default", "memory"): 20 * GI}

    w.put_cohort(cohort("root", None, "flavor1", cpu="20", gpu="5"))
    w.put_cohort(cohort("ch1", "root", "default", cpu="15", memory="15Gi"))
    w.put_cohort(cohort("ch2", "root", "default", cpu="10", memory="10Gi"))
    assert w.subtree(QUOTA, "root") == {
        ("default", "cpu"): 50,
        ("default", "memory"): 50 * GI,
        ("flavor1", "cpu"): 20,
        ("flavor1", "nvidia.com/gpu"): 5,
    }
    assert w.cohort_info() == {"root": ("", "root"), "ch1": ("root", "root"), "ch2": ("root", "root")}
    assert w.cq_info() == {
        "cqa": ("ch1", "root"),
        "cqb": ("ch1", "root"),
        "cqd": ("ch2", "root"),
        "cqe": ("ch2", "root"),
    }

    w.put_cohort(cohort("ch3", "root", "flavor1", cpu="5", gpu="1"))
    assert w.subtree(QUOTA, "ch3") == {("flavor1", "cpu"): 5, ("flavor1", "nvidia.com/gpu"): 1}
    assert w.subtree(QUOTA, "root")[("flavor1", "cpu")] == 25
    assert w.subtree(QUOTA, "root")[("flavor1", "nvidia.com/gpu")] == 6
    assert w.cohort_info()["ch3"] == ("root", "root")

    w.put_cq(cq("cqg", "ch3", "flavor2", cpu="1", memory="1Gi"))
    assert w.subtree(QUOTA, "ch3")[("flavor2", "memory")] == GI
    assert w.subtree(QUOTA, "root")[("flavor2", "cpu")] == 1
    assert w.cq_info()["cqg"] == ("ch3", "root")

    # Deleting cqg: its flavor's series go from ch3 and from root.
    w.delete_cq("cqg")
    assert w.subtree(QUOTA, "ch3") == {("flavor1", "cpu"): 5, ("flavor1", "nvidia.com/gpu"): 1}
    assert ("flavor2", "cpu") not in w.subtree(QUOTA, "root")
    assert "cqg" not in w.cq_info()

    # cqd and cqe move to ch3; then ch2, empty, is deleted.
    w.put_cq(cq("cqd", "ch3", "default", cpu="5", memory="5Gi"))
    w.put_cq(cq("cqe", "ch3", "default", cpu="5", memory="5Gi"))
    assert w.subtree(QUOTA, "ch3")[("default", "cpu")] == 10
    assert w.cq_info()["cqd"] == ("ch3", "root")
    assert w.subtree(QUOTA, "ch2") == {("default", "cpu"): 10, ("default", "memory"): 10 * GI}
    w.delete_cohort("ch2")
    assert w.subtree(QUOTA, "ch2") == {}
    assert "ch2" not in w.cohort_info()
    assert w.subtree(QUOTA, "root")[("default", "cpu")] == 40

    # A quota change of ch1 shows in ch1 and root.
    w.put_cohort(cohort("ch1", "root", "default", cpu="20", memory="15Gi"))
    assert w.subtree(QUOTA, "ch1")[("default", "cpu")] == 35
    assert w.subtree(QUOTA, "root")[("default", "cpu")] == 45


def test_reservations_and_active_workloads_for_a_cohort_and_its_ancestors():
    w = World()
    w.cohorts = {"root": cohort("root"), "team": cohort("team", "root")}
    w.cqs = {"a": cq("a", "team", "default", cpu="4"), "b": cq("b", "root", "default", cpu="4")}
    w.reporter.cluster_queue_changed(w.rebuild(), "a")
    assert w.subtree(RESERVATIONS, "team") == {}
    assert w.series(ACTIVE) == {}  # no workload has held quota here yet

    w.snapshot.add_workload(admitted("w1", "a", "default", "1500m"))
    w.admitted["a"] = 1
    w.reporter.cluster_queue_changed(w.snapshot, "a")
    assert w.subtree(RESERVATIONS, "team") == {("default", "cpu"): 1.5}
    assert w.subtree(RESERVATIONS, "root") == {("default", "cpu"): 1.5}
    assert w.series(ACTIVE) == {(("cohort", "root"),): 1, (("cohort", "team"),): 1}

    w.snapshot.add_workload(admitted("w2", "b", "default", "2"))  # reserved, not admitted yet
    w.reporter.cluster_queue_changed(w.snapshot, "b")
    assert w.subtree(RESERVATIONS, "root") == {("default", "cpu"): 3.5}
    assert w.subtree(RESERVATIONS, "team") == {("default", "cpu"): 1.5}
    assert w.series(ACTIVE)[(("cohort", "root"),)] == 1

    # Finished: the reservation series go (zero), the active gauge stays at 0.
    w.snapshot.remove_workload("ns/w1")
    w.snapshot.remove_workload("ns/w2")
    w.admitted["a"] = 0
    w.reporter.cluster_queue_changed(w.snapshot, "a")
    assert w.subtree(RESERVATIONS, "team") == {}
    assert w.subtree(RESERVATIONS, "root") == {}
    assert w.series(ACTIVE) == {(("cohort", "root"),): 0, (("cohort", "team"),): 0}


def test_the_admitted_counter_counts_in_every_ancestor_and_goes_with_the_cohort():
    w = World()
    w.metrics.cohort_subtree_admitted(["team", "root"], "high")
    w.metrics.cohort_subtree_admitted(["team", "root"], "")
    counter = "kueue_cohort_subtree_admitted_workloads_total"
    assert w.series(counter) == {
        (("cohort", "root"), ("priority_class", "")): 1,
        (("cohort", "root"), ("priority_class", "high")): 1,
        (("cohort", "team"), ("priority_class", "")): 1,
        (("cohort", "team"), ("priority_class", "high")): 1,
    }
    w.cohorts = {"root": cohort("root"), "team": cohort("team", "root")}
    w.rebuild()
    w.delete_cohort("team")
    assert {dict(k)["cohort"] for k in w.series(counter)} == {"root"}


def test_a_cycle_drops_the_cohorts_series():
    w = World()
    w.put_cohort(cohort("a", None, "default", cpu="1"))
    w.put_cohort(cohort("b", "a", "default", cpu="1"))
    assert w.subtree(QUOTA, "a") == {("default", "cpu"): 2}
    w.put_cohort(cohort("a", "b", "default", cpu="1"))
    assert w.series(QUOTA) == {}
    assert w.cohort_info() == {}


@pytest.mark.parametrize("gate", [True, False])
def test_metrics_for_cohorts_gate_switches_only_the_info_metrics(gate: bool):
    """Upstream v0.19 gates ReportCohortInfo and ReportClusterQueueInfo; the subtree metrics are
    reported either way."""
    w = World(cohort_info=gate)
    w.put_cq(cq("cqa", "ch1", "default", cpu="10"))
    text = generate_latest(w.registry).decode()
    assert ("kueue_cohort_info{" in text) is gate
    assert ("kueue_cluster_queue_info{" in text) is gate
    assert ("# TYPE kueue_cohort_info" in text) is gate
    assert w.subtree(QUOTA, "ch1") == {("default", "cpu"): 10}


def test_a_new_replica_role_reports_everything_again():
    w = World()
    w.put_cq(cq("cqa", "ch1", "default", cpu="10"))
    w.metrics.set_replica_role(m.REPLICA_ROLE_LEADER)
    assert w.series(QUOTA) == {}
    w.reporter.cluster_queue_changed(w.snapshot, "cqa")
    text = generate_latest(w.registry).decode()
    assert (
        'kueue_cohort_subtree_quota{cohort="ch1",flavor="default",replica_role="leader",resource="cpu"}'
        in text
    )
    assert w.cq_info() == {"cqa": ("ch1", "ch1")}
