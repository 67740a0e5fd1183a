"""The single-cluster conformance harness's pure parts: the suite families and their packages, the
kind cluster's node labels on our nodes, upstream's e2e Configuration with the fleet's addresses over
it, the user roles the visibility specs bind, and one summary line per family."""

from __future__ import annotations

import re

import pytest

from conformance import build, report, singlecluster, specs

KIND_CLUSTER = {
    "kind": "Cluster",
    "nodes": [
        {"role": "control-plane"},
        {"role": "worker", "labels": {"instance-type": "on-demand"}},
        {"role": "worker", "labels": {"instance-type": "spot"}},
    ],
}


def test_each_suite_is_built_from_its_familys_directory():
    assert build.suite_package("baseline") == "./test/e2e/multikueue/baseline"
    assert build.suite_package("dra") == "./test/e2e/multikueue/dra"
    assert build.suite_package("singlecluster-baseline") == "./test/e2e/singlecluster/baseline"
    assert build.suite_package("sequential-extended") == "./test/e2e/sequential/extended"


def test_every_suite_belongs_to_one_family_and_has_specs():
    assert specs.family("sequential") == specs.MULTIKUEUE  # MultiKueue's sequential suite
    assert specs.family("sequential-baseline") == specs.SEQUENTIAL
    assert specs.family("singlecluster-extended") == specs.SINGLECLUSTER
    assert {s.suite for s in specs.SPECS} == set(specs.SUITES)
    assert len({(s.suite, s.text) for s in specs.SPECS}) == len(specs.SPECS)


@pytest.mark.parametrize("suite", [s for s in specs.SUITES if specs.family(s) != specs.MULTIKUEUE])
def test_no_spec_text_of_a_single_cluster_suite_ends_another(suite):
    # Each JUnit case is given to the longest text that ends it, so texts may end one another only
    # where the longer one names the other's containers; the skip pattern must still match one spec.
    mine = specs.of_suite(suite)
    for spec in mine:
        full = f"Describe When {spec.text}"
        assert specs.find(suite, full) == spec
        pattern = specs.skip_pattern(suite)
        assert (bool(pattern) and re.search(pattern, full) is not None) == (not spec.applies)


def test_the_kind_workers_labels_go_to_our_nodes_in_order():
    assert singlecluster.worker_node_labels(KIND_CLUSTER) == [
        {"instance-type": "on-demand"},
        {"instance-type": "spot"},
    ]
    patches = singlecluster.node_label_patches(["manager-node-1", "manager-node-0"], KIND_CLUSTER)
    assert patches == {
        "manager-node-0": {"instance-type": "on-demand"},
        "manager-node-1": {"instance-type": "spot"},
    }
    with pytest.raises(ValueError, match="2 kind worker nodes"):
        singlecluster.node_label_patches(["manager-node-0"], KIND_CLUSTER)


def test_upstreams_configuration_is_taken_whole_but_for_the_fleets_addresses():
    ours = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "namespace": "kueue-system",
        "leaderElection": {"leaderElect": True, "resourceNamespace": "kueue-system"},
        "metrics": {"bindAddress": "127.0.0.1:1"},
        "health": {"healthProbeBindAddress": "127.0.0.1:2"},
        "webhook": {"host": "127.0.0.1", "port": 3, "certDir": "/fleet/certs"},
        "featureGates": {"MultiKueueManagerQuotaAutomation": True},
    }
    theirs = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "metrics": {"enableClusterQueueResources": True},
        "leaderElection": {"leaderElect": True},
        "waitForPodsReady": {"timeout": "5m"},
        "featureGates": {"ElasticJobsViaWorkloadSlices": True},
    }
    got = singlecluster.with_environment(ours, theirs)
    assert got["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert got["metrics"] == {"enableClusterQueueResources": True, "bindAddress": "127.0.0.1:1"}
    assert got["webhook"] == {"host": "127.0.0.1", "port": 3, "certDir": "/fleet/certs"}
    assert got["leaderElection"] == {"leaderElect": True, "resourceNamespace": "kueue-system"}
    assert got["waitForPodsReady"] == {"timeout": "5m"}
    assert got["featureGates"] == {"ElasticJobsViaWorkloadSlices": True}  # the suite's gates only
    assert "metrics" not in singlecluster.with_environment({}, {"featureGates": {}})
    assert theirs["metrics"] == {"enableClusterQueueResources": True}  # not changed in place


def test_the_user_roles_the_visibility_specs_bind_are_installed():
    names = {d["metadata"]["name"] for d in singlecluster.user_role_docs()}
    assert {"kueue-batch-admin-role", "kueue-batch-user-role"} <= names
    assert all(d["kind"] == "ClusterRole" for d in singlecluster.user_role_docs())


def test_one_summary_line_per_family_then_the_total():
    mk = specs.Spec("baseline", "a")
    sc = specs.Spec("singlecluster-baseline", "b")
    skipped = specs.Spec("singlecluster-baseline", "c", "TopologyAwareScheduling is not implemented")
    res = [
        report.Result(mk, report.PASSED),
        report.Result(sc, report.FAILED, "boom"),
        report.Result(skipped, report.NOT_APPLICABLE, skipped.reason),
    ]
    assert report.family_lines(res, [specs.SINGLECLUSTER, specs.MULTIKUEUE]) == [
        "conformance multikueue: 1 passed, 0 failed, 0 not applicable of 1",
        "conformance singlecluster: 0 passed, 1 failed, 1 not applicable of 2",
        "conformance: 1 passed, 1 failed, 1 not applicable of 3",
    ]
    assert report.family_lines(res[:1], [specs.MULTIKUEUE]) == [
        "conformance multikueue: 1 passed, 0 failed, 0 not applicable of 1"
    ]
