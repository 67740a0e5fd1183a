from fractions import Fraction

from kueue_domain.resources import RequestConfig
from worker_agent.engine.requests import (
    LimitRangeDefaults,
    pod_requests,
    podset_requests,
)


def c(name, requests=None, limits=None, restart_policy=None):
    container = {"name": name, "resources": {}}
    if requests:
        container["resources"]["requests"] = requests
    if limits:
        container["resources"]["limits"] = limits
    if restart_policy:
        container["restartPolicy"] = restart_policy
    return container


def per_pod(spec, **kw):
    return podset_requests({"name": "main", "count": 1, "template": {"spec": spec}}, **kw).per_pod


def test_sum_of_containers():
    spec = {"containers": [c("a", {"cpu": "1", "memory": "1Gi"}), c("b", {"cpu": "500m"})]}
    assert per_pod(spec) == {"cpu": 1500, "memory": 2**30}


def test_init_containers_peak_wins_when_larger():
    spec = {
        "containers": [c("a", {"cpu": "1"})],
        "initContainers": [c("i1", {"cpu": "3"}), c("i2", {"cpu": "2", "memory": "1Gi"})],
    }
    # max(sum(containers)=1, init peak=3) cpu; memory only from init (1Gi)
    assert per_pod(spec) == {"cpu": 3000, "memory": 2**30}


def test_sidecars_add_to_containers_and_later_init_containers():
    spec = {
        "containers": [c("main", {"cpu": "1"})],
        "initContainers": [
            c("setup", {"cpu": "2"}),
            c("sidecar", {"cpu": "500m"}, restart_policy="Always"),
            c("late-init", {"cpu": "2"}),
        ],
    }
    # regular + sidecar = 1.5; init peaks: setup 2, sidecar 0.5, late-init 2 + 0.5 = 2.5
    assert per_pod(spec) == {"cpu": 2500}


def test_sidecar_only_adds_when_containers_dominate():
    spec = {
        "containers": [c("main", {"cpu": "4"})],
        "initContainers": [c("sidecar", {"cpu": "1"}, restart_policy="Always")],
    }
    assert per_pod(spec) == {"cpu": 5000}


def test_limits_used_as_requests():
    spec = {
        "containers": [c("a", limits={"cpu": "2", "nvidia.com/gpu": "1"}), c("b", {"cpu": "1"}, {"cpu": "3"})]
    }
    assert per_pod(spec) == {"cpu": 3000, "nvidia.com/gpu": 1}


def test_pod_overhead_from_spec_and_runtime_class():
    spec = {"containers": [c("a", {"cpu": "1"})], "overhead": {"cpu": "100m", "memory": "10Mi"}}
    assert per_pod(spec) == {"cpu": 1100, "memory": 10 * 2**20}
    spec = {"containers": [c("a", {"cpu": "1"})], "runtimeClassName": "kata"}
    assert per_pod(spec, runtime_class_overhead={"cpu": "250m"}) == {"cpu": 1250}
    # A missing RuntimeClass means no overhead.
    assert per_pod(spec) == {"cpu": 1000}


def test_limit_range_defaults():
    lr = LimitRangeDefaults.summarize(
        [
            {
                "spec": {
                    "limits": [
                        {
                            "type": "Container",
                            "default": {"cpu": "2", "memory": "1Gi"},
                            "defaultRequest": {"cpu": "1"},
                        }
                    ]
                }
            }
        ]
    )
    spec = {"containers": [c("a"), c("b", {"cpu": "300m"})]}
    # a: request cpu 1 (defaultRequest), memory 1Gi (default limit used as request); b keeps its 300m
    assert per_pod(spec, limit_ranges=lr) == {"cpu": 1300, "memory": 2 * 2**30}


def test_pod_level_requests_take_precedence():
    spec = {"containers": [c("a", {"cpu": "1"})], "resources": {"requests": {"cpu": "4"}}}
    assert per_pod(spec) == {"cpu": 4000}


def test_count_reclaimable_and_min_count():
    ps = podset_requests(
        {
            "name": "w",
            "count": 5,
            "minCount": 2,
            "template": {"spec": {"containers": [c("a", {"cpu": "1"})]}},
        },
        reclaimable=2,
    )
    assert ps.count == 3 and ps.min_count == 2 and ps.spec_count == 5
    assert ps.total == {"cpu": 3000}
    assert podset_requests({"count": 1, "template": {"spec": {}}}, reclaimable=4).count == 0


def test_exclude_prefixes_and_transformations():
    config = RequestConfig.from_dict(
        {
            "excludeResourcePrefixes": ["example.com/"],
            "transformations": [
                {"input": "nvidia.com/mig-1g.5gb", "strategy": "Replace", "outputs": {"nvidia.com/gpu": "1"}},
                {"input": "nvidia.com/mig-2g.10gb", "outputs": {"nvidia.com/gpu": "2", "memory": "5Gi"}},
            ],
        }
    )
    spec = {
        "containers": [
            c(
                "a",
                {
                    "cpu": "1",
                    "example.com/thing": "3",
                    "nvidia.com/mig-1g.5gb": "2",
                    "nvidia.com/mig-2g.10gb": "1",
                    "memory": "1Gi",
                },
            )
        ]
    }
    assert per_pod(spec, config=config) == {
        "cpu": 1000,
        "memory": 6 * 2**30,  # 1Gi + 1 * 5Gi output added to the same-named request
        "nvidia.com/gpu": 4,  # 2*1 + 1*2
        "nvidia.com/mig-2g.10gb": 1,  # Retain keeps the input
    }


def test_transformation_multiply_by():
    config = RequestConfig.from_dict(
        {"transformations": [{"input": "gpu.slice", "multiplyBy": "gpu.count", "outputs": {"gpu.mem": "10"}}]}
    )
    assert per_pod({"containers": [c("a", {"gpu.slice": "2", "gpu.count": "3"})]}, config=config) == {
        "gpu.slice": 2,
        "gpu.count": 3,
        "gpu.mem": 60,
    }


def test_pod_requests_exact_values():
    assert pod_requests({"containers": [c("a", {"cpu": "1m"}), c("b", {"cpu": "0.5m"})]}) == {
        "cpu": Fraction(3, 2000)
    }
