"""MultiKueue group copies are admitted on a worker as one (worker_agent/engine/gang.py)."""

from engine_builders import admitted, cluster_queue, snapshot, workload_obj

from kueue_domain import api
from worker_agent.engine import QueueManager, Scheduler
from worker_agent.engine.workloads import WorkloadInfo


def group_copy(name: str, cq: str, *, primary: str = "", members: tuple[str, ...] = (), **kwargs):
    obj = workload_obj(name, **kwargs)
    annotations = {}
    if primary:
        annotations[api.ANNOTATION_MULTIKUEUE_GROUP_PRIMARY] = primary
    if members:
        annotations[api.ANNOTATION_MULTIKUEUE_GROUP_MEMBERS] = ",".join(members)
    obj["metadata"]["annotations"] = annotations
    return WorkloadInfo.from_dict(obj, cluster_queue=cq)


def lws_group(prefix: str, groups: int, cpu: str, created: int = 0) -> list[WorkloadInfo]:
    """One LWS's group copies: `<prefix>-0` is the primary; leader + 1 worker pod per group."""
    names = [f"{prefix}-{i}" for i in range(groups)]

    def podsets():
        template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}
        return [
            {"name": "leader", "count": 1, "template": template},
            {"name": "worker", "count": 1, "template": template},
        ]

    copies = [group_copy(names[0], "cq", members=tuple(names[1:]), podsets=podsets(), created=created)]
    copies += [group_copy(n, "cq", primary=names[0], podsets=podsets(), created=created) for n in names[1:]]
    return copies


def make(cpu: str, pending, admitted_wls=()):
    snap = snapshot([cluster_queue("cq", flavors={"default": {"cpu": cpu}})], workloads=list(admitted_wls))
    queues = QueueManager()
    queues.ensure("cq")
    for wl in pending:
        queues.push(wl)
    return snap, queues, Scheduler(snap, queues)


def admitted_keys(result):
    return sorted(d.workload_key for d in result.admitted)


def test_a_group_that_fits_is_admitted_in_one_cycle_each_with_its_own_podsets():
    snap, _, sched = make("4", lws_group("a", 2, "1"))
    result = sched.schedule()
    assert admitted_keys(result) == ["default/a-0", "default/a-1"]
    for decision in result.admitted:
        assignments = decision.admission["podSetAssignments"]
        assert [(a["name"], a["count"], a["resourceUsage"]["cpu"]) for a in assignments] == [
            ("leader", 1, "1"),
            ("worker", 1, "1"),
        ]
    assert snap.cluster_queues["cq"].usage[("default", "cpu")] == 4000


def test_a_group_that_does_not_fit_as_a_whole_admits_nobody_and_says_why():
    # One group (2 cpu) would fit in 3 cpu; the two together (4 cpu) do not.
    snap, _, sched = make("3", lws_group("a", 2, "1"))
    result = sched.schedule()
    assert result.admitted == []
    messages = {d.workload_key: d.message for d in result.requeued}
    assert set(messages) == {"default/a-0", "default/a-1"}
    assert messages["default/a-0"].startswith("The group of 2 workloads does not fit as a whole: ")
    assert "insufficient" in messages["default/a-0"] or "4" in messages["default/a-0"]
    assert snap.cluster_queues["cq"].usage.get(("default", "cpu"), 0) == 0


def test_a_member_waits_for_its_primary_and_the_group_goes_in_when_it_arrives():
    primary, member = lws_group("a", 2, "1")
    _snap, queues, sched = make("4", [member])
    (requeue,) = sched.schedule().requeued
    assert requeue.workload_key == "default/a-1"
    assert requeue.message == 'Waiting to be admitted together with its group\'s primary workload "a-0"'
    queues.push(primary)
    assert admitted_keys(sched.schedule()) == ["default/a-0", "default/a-1"]


def test_a_primary_waits_for_missing_members():
    primary, member = lws_group("a", 2, "1")
    _, queues, sched = make("4", [primary])
    (requeue,) = sched.schedule().requeued
    assert requeue.message == "Waiting for the other workloads of its group to be queued: [a-1]"
    queues.push(member)
    assert admitted_keys(sched.schedule()) == ["default/a-0", "default/a-1"]


def test_a_member_added_after_its_primary_holds_quota_is_admitted_alone():
    # Scaling up: group 2 arrives while groups 0 and 1 run.
    primary_obj_admitted = admitted("a-0", "cq", usage={"cpu": "2"})
    new_member = lws_group("a", 3, "1")[2]
    _, _, sched = make("8", [new_member], admitted_wls=[primary_obj_admitted])
    assert admitted_keys(sched.schedule()) == ["default/a-2"]


def test_two_groups_competing_for_one_worker_never_split():
    # 6 cpu: group a (4 cpu) goes in whole; group b (4 cpu) waits whole, though one of its
    # Workloads (2 cpu) would fit alone.
    copies = lws_group("a", 2, "1", created=0) + lws_group("b", 2, "1", created=1)
    snap, _, sched = make("6", copies)
    admitted_now = []
    for _ in range(6):
        admitted_now += admitted_keys(sched.schedule())
    assert sorted(admitted_now) == ["default/a-0", "default/a-1"]
    assert snap.cluster_queues["cq"].usage[("default", "cpu")] == 4000


def test_members_with_different_podsets_are_admitted_one_by_one():
    primary = group_copy("a-0", "cq", members=("a-1",), cpu="1")
    member = group_copy("a-1", "cq", primary="a-0", cpu="2")
    _, _, sched = make("2", [primary, member])
    admitted_now = []
    for _ in range(4):
        admitted_now += admitted_keys(sched.schedule())
    assert admitted_now == ["default/a-0"]  # a-1 (2 cpu) no longer fits: nothing forced them together
