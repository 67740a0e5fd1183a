"""Invariants over random ClusterQueues, cohorts, workloads and repeated cycles."""

from __future__ import annotations

from engine_builders import cluster_queue, resource_flavor, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker_agent.engine import Preempt, QueueManager, Scheduler, SchedulerConfig, Snapshot
from worker_agent.engine.flavorassigner import check_flavor
from worker_agent.engine.snapshot import potential_available

POLICIES = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
FLAVORS = [
    resource_flavor("plain", labels={"pool": "plain"}),
    resource_flavor(
        "spot", labels={"pool": "spot"}, taints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}]
    ),
]


@st.composite
def setups(draw):
    n_cqs = draw(st.integers(1, 5))
    n_cohorts = draw(st.integers(1, 2))
    cqs = []
    for i in range(n_cqs):
        cohort = draw(st.one_of(st.none(), st.sampled_from([f"co{j}" for j in range(n_cohorts)])))
        flavors = {}
        for flavor in draw(st.sampled_from([["plain"], ["spot"], ["plain", "spot"], ["spot", "plain"]])):
            nominal = draw(st.integers(0, 10))
            borrowing = draw(st.one_of(st.none(), st.integers(0, 6))) if cohort else None
            lending = draw(st.one_of(st.none(), st.integers(0, nominal))) if cohort else None
            flavors[flavor] = {
                "cpu": (
                    str(nominal),
                    None if borrowing is None else str(borrowing),
                    None if lending is None else str(lending),
                )
            }
        preemption = {
            "withinClusterQueue": draw(st.sampled_from(POLICIES)),
            "reclaimWithinCohort": draw(st.sampled_from(["Never", "LowerPriority", "Any"])),
        }
        if preemption["reclaimWithinCohort"] != "Never" and draw(st.booleans()):
            preemption["borrowWithinCohort"] = {
                "policy": "LowerPriority",
                "maxPriorityThreshold": draw(st.integers(0, 3)),
            }
        fungibility = {
            "whenCanBorrow": draw(st.sampled_from(["MayStopSearch", "TryNextFlavor"])),
            "whenCanPreempt": draw(st.sampled_from(["MayStopSearch", "TryNextFlavor"])),
        }
        cqs.append(
            cluster_queue(
                f"cq{i}",
                cohort=cohort,
                flavors=flavors,
                preemption=preemption,
                fungibility=fungibility,
                strategy=draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
            )
        )
    n_wls = draw(st.integers(1, 25))
    wls = []
    for i in range(n_wls):
        kwargs = {}
        if draw(st.booleans()):
            kwargs["tolerations"] = [{"key": "spot", "operator": "Exists"}]
        if draw(st.integers(0, 4)) == 0:
            kwargs["nodeSelector"] = {"pool": draw(st.sampled_from(["plain", "spot"]))}
        wls.append(
            dict(
                name=f"w{i}",
                cq=f"cq{draw(st.integers(0, n_cqs - 1))}",
                cpu=str(draw(st.integers(1, 4))),
                count=draw(st.integers(1, 2)),
                priority=draw(st.integers(0, 4)),
                created=draw(st.integers(0, 100)),
                **kwargs,
            )
        )
    finish_every = draw(st.integers(2, 6))
    fair = draw(st.booleans())
    return cqs, wls, finish_every, fair


def check_quota_invariants(snap: Snapshot) -> None:
    for cq in snap.cluster_queues.values():
        for fr, quota in cq.quotas.items():
            usage = cq.usage.get(fr, 0)
            # (1) never above nominal + what it may borrow
            assert usage <= potential_available(cq, fr), (cq.name, fr)
            # (2) borrowing limit
            if quota.borrowing_limit is not None:
                assert usage <= quota.nominal + quota.borrowing_limit, (cq.name, fr)
            assert usage == sum(wl.usage.get(fr, 0) for wl in cq.workloads.values())
    for cohort in snap.cohorts.values():
        for fr, usage in cohort.usage.items():
            # (1) no cohort above its lendable capacity (the root's subtree quota)
            if cohort.parent is None:
                assert usage <= cohort.subtree_quota.get(fr, 0), (cohort.name, fr)
            # (2) lending limits: others never take more than a CQ lends
            expected = sum(max(0, c.usage.get(fr, 0) - c.local_quota.get(fr, 0)) for c in cohort.children())
            assert usage == expected


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_invariants_over_cycles(setup):
    cqs, wl_specs, finish_every, fair = setup
    snap = Snapshot.from_objects(cluster_queues=cqs, resource_flavors=FLAVORS)
    queues = QueueManager()
    for cq in cqs:
        queues.ensure(cq["metadata"]["name"], cq["spec"]["queueingStrategy"])
    infos = {}
    for spec in wl_specs:
        spec = dict(spec)
        wl = workload(spec.pop("name"), spec.pop("cq"), **spec)
        infos[wl.key] = wl
    # Lower priorities arrive first, so that later arrivals have someone to preempt.
    arrivals = sorted(infos.values(), key=lambda w: w.priority)
    first_wave, second_wave = arrivals[: len(arrivals) // 2], arrivals[len(arrivals) // 2 :]
    for wl in first_wave:
        queues.push(wl)
    sched = Scheduler(snap, queues, SchedulerConfig(fair_sharing=fair))
    preempted_ever: set[str] = set()
    priorities = {k: w.priority for k, w in infos.items()}
    for cycle in range(40):
        if cycle == 4:
            for wl in second_wave:
                queues.push(wl)
        result = sched.schedule()
        for decision in result.decisions:
            if isinstance(decision, Preempt):
                # (5) never twice (victims are removed once preempted, so a repeat is a bug)
                assert decision.victim_key not in preempted_ever
                preempted_ever.add(decision.victim_key)
                preemptor, victim = infos[decision.preemptor_key], infos[decision.victim_key]
                # (3) strictly lower priority, except LowerOrNewerEqualPriority (equal and newer) or Any
                if victim.priority >= preemptor.priority:
                    preemptor_cq = snap.cluster_queues[preemptor.cluster_queue]
                    if victim.cluster_queue == preemptor.cluster_queue:
                        assert preemptor_cq.preemption.within_cluster_queue == "LowerOrNewerEqualPriority"
                        assert victim.priority == preemptor.priority
                        assert preemptor.order_time < victim.order_time
                    else:
                        assert preemptor_cq.preemption.reclaim_within_cohort == "Any"
        for admit in result.admitted:
            wl = infos[admit.workload_key]
            cq = snap.cluster_queues[wl.cluster_queue]
            # (4) every assignment fits its flavors
            for psa, ps in zip(wl.admission.podset_assignments, wl.podsets, strict=True):
                for rname, flavor in psa.flavors.items():
                    assert cq.rg_by_resource[rname].flavors.count(flavor) == 1
                    assert (flavor, rname) in cq.quotas
                    assert check_flavor(ps, flavor, snap.flavors) is None
        # Complete preemptions and finish some workloads so that the queues keep moving. The quota
        # invariants hold once this cycle's victims are gone, not before: as upstream's scheduler
        # does (its `fits` simulates the removal of every workload preempted in the cycle), an
        # entry that fits is admitted into room its cycle's victims still hold until they leave.
        for decision in result.preempted:
            snap.remove_workload(decision.victim_key)
            sched.observe_removed(decision.victim_key)
        check_quota_invariants(snap)
        if cycle > 8 and cycle % finish_every == 0 and snap.workloads:
            oldest = next(iter(snap.workloads))
            snap.remove_workload(oldest)
        queues.flush(list(queues.queues))
        check_quota_invariants(snap)
    assert set(priorities) == set(infos)


def _usage_state(snap: Snapshot) -> dict[str, dict]:
    nodes = [*snap.cluster_queues.values(), *snap.cohorts.values()]
    return {node.name: {fr: v for fr, v in node.usage.items() if v} for node in nodes}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups(), st.randoms(use_true_random=False))
def test_usage_depends_only_on_cluster_queue_usage(setup, rng):
    """What the scheduler's fit checks rely on (Scheduler._fits_without): taking victims' usage out
    one by one in any order, or summed per ClusterQueue, gives every node the same usage, and
    putting it back restores the snapshot."""
    cqs, wl_specs, _, _ = setup
    snap = Snapshot.from_objects(cluster_queues=cqs, resource_flavors=FLAVORS)
    queues = QueueManager()
    for cq in cqs:
        queues.ensure(cq["metadata"]["name"], cq["spec"]["queueingStrategy"])
    for spec in wl_specs:
        spec = dict(spec)
        queues.push(workload(spec.pop("name"), spec.pop("cq"), **spec))
    sched = Scheduler(snap, queues, SchedulerConfig())
    for _ in range(6):
        sched.schedule()
    before = _usage_state(snap)
    victims = rng.sample(list(snap.workloads.values()), k=rng.randint(0, len(snap.workloads)))

    for victim in victims:
        snap.cluster_queues[victim.cluster_queue].remove_usage(victim.usage)
    one_by_one = _usage_state(snap)
    for victim in reversed(victims):
        snap.cluster_queues[victim.cluster_queue].add_usage(victim.usage)
    assert _usage_state(snap) == before

    summed: dict[str, dict] = {}
    for victim in rng.sample(victims, k=len(victims)):
        amounts = summed.setdefault(victim.cluster_queue, {})
        for fr, val in victim.usage.items():
            amounts[fr] = amounts.get(fr, 0) + val
    for name, amounts in summed.items():
        snap.cluster_queues[name].remove_usage(amounts)
    assert _usage_state(snap) == one_by_one
    for name, amounts in summed.items():
        snap.cluster_queues[name].add_usage(amounts)
    assert _usage_state(snap) == before
