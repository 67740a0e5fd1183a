"""meta.SetStatusCondition semantics over dict conditions."""

from __future__ import annotations

import copy
import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from kube_runtime.conditions import (
    find_status_condition,
    format_time,
    is_status_condition_false,
    is_status_condition_present_and_equal,
    is_status_condition_true,
    parse_time,
    remove_status_condition,
    set_status_condition,
)

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5, microseconds=700)


def admitted(
    status: str = "True", reason: str = "Admitted", message: str = "The workload is admitted", **extra
):
    return {"type": "Admitted", "status": status, "reason": reason, "message": message, **extra}


def test_time_format_is_rfc3339_seconds_utc():
    assert format_time(T1) == "2026-01-01T12:05:00Z"
    assert format_time(dt.datetime(2026, 1, 1, 13, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == (
        "2026-01-01T12:00:00Z"
    )
    assert format_time(dt.datetime(2026, 1, 1)) == "2026-01-01T00:00:00Z"  # naive is UTC
    assert parse_time("2026-01-01T12:05:00Z") == T0 + dt.timedelta(minutes=5)
    assert parse_time("2026-01-01T12:05:00.123456Z").microsecond == 123456
    assert parse_time(format_time(T0)) == T0


def test_new_condition_is_appended_with_now_as_transition_time():
    conditions: list[dict] = []
    assert set_status_condition(conditions, admitted(observedGeneration=3), T0)
    assert conditions == [
        {
            "type": "Admitted",
            "status": "True",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-01-01T12:00:00Z",
            "reason": "Admitted",
            "message": "The workload is admitted",
        }
    ]


def test_new_condition_keeps_an_explicit_transition_time():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted(lastTransitionTime="2025-06-01T00:00:00Z"), T0)
    assert conditions[0]["lastTransitionTime"] == "2025-06-01T00:00:00Z"
    conditions = []
    set_status_condition(conditions, admitted(lastTransitionTime=T1), T0)
    assert conditions[0]["lastTransitionTime"] == "2026-01-01T12:05:00Z"


def test_status_change_moves_transition_time():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted(), T0)
    assert set_status_condition(
        conditions, admitted("False", "NoReservation", "The workload has no reservation"), T1
    )
    [cond] = conditions
    assert cond["status"] == "False" and cond["reason"] == "NoReservation"
    assert cond["message"] == "The workload has no reservation"
    assert cond["lastTransitionTime"] == "2026-01-01T12:05:00Z"


def test_status_change_uses_the_new_explicit_transition_time():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted(), T0)
    set_status_condition(conditions, admitted("False", lastTransitionTime="2026-02-02T00:00:00Z"), T1)
    assert conditions[0]["lastTransitionTime"] == "2026-02-02T00:00:00Z"


def test_reason_and_message_change_keeps_transition_time():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted("False", "NoReservation", "a"), T0)
    assert set_status_condition(conditions, admitted("False", "UnsatisfiedAdmissionChecks", "b"), T1)
    [cond] = conditions
    assert (cond["reason"], cond["message"]) == ("UnsatisfiedAdmissionChecks", "b")
    assert cond["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_explicit_transition_time_is_ignored_without_status_change():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted(), T0)
    assert not set_status_condition(conditions, admitted(lastTransitionTime="2030-01-01T00:00:00Z"), T1)
    assert conditions[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_no_change_returns_false():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted(observedGeneration=2), T0)
    before = copy.deepcopy(conditions)
    assert not set_status_condition(conditions, admitted(observedGeneration=2), T1)
    assert conditions == before


def test_observed_generation_is_updated_alone_and_dropped_at_zero():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted(observedGeneration=1), T0)
    assert set_status_condition(conditions, admitted(observedGeneration=2), T1)
    assert conditions[0]["observedGeneration"] == 2
    assert conditions[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert set_status_condition(conditions, admitted(), T1)
    assert "observedGeneration" not in conditions[0]


def test_other_conditions_are_untouched():
    conditions: list[dict] = []
    set_status_condition(
        conditions, {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}, T0
    )
    set_status_condition(conditions, admitted(), T0)
    set_status_condition(conditions, admitted("False"), T1)
    assert [c["type"] for c in conditions] == ["QuotaReserved", "Admitted"]
    assert conditions[0]["status"] == "True" and conditions[0]["message"] == ""


def test_find_remove_and_predicates():
    conditions: list[dict] = []
    set_status_condition(conditions, admitted(), T0)
    set_status_condition(conditions, {"type": "Evicted", "status": "False", "reason": "QuotaReserved"}, T0)
    assert find_status_condition(conditions, "Admitted")["status"] == "True"
    assert find_status_condition(conditions, "Finished") is None
    assert find_status_condition(None, "Admitted") is None
    assert is_status_condition_true(conditions, "Admitted")
    assert not is_status_condition_false(conditions, "Admitted")
    assert is_status_condition_false(conditions, "Evicted")
    assert not is_status_condition_true(conditions, "Finished")
    assert not is_status_condition_false(conditions, "Finished")
    assert is_status_condition_present_and_equal(conditions, "Evicted", "False")
    assert not is_status_condition_present_and_equal(None, "Evicted", "False")
    assert remove_status_condition(conditions, "Admitted")
    assert not remove_status_condition(conditions, "Admitted")
    assert [c["type"] for c in conditions] == ["Evicted"]


CONDITIONS = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Admitted", "QuotaReserved", "Evicted"]),
        "status": st.sampled_from(["True", "False", "Unknown"]),
        "reason": st.text(min_size=1, max_size=8),
        "message": st.text(max_size=20),
    },
    optional={
        "observedGeneration": st.integers(0, 5),
        "lastTransitionTime": st.sampled_from(["2025-01-01T00:00:00Z", ""]),
    },
)


@given(st.lists(CONDITIONS, max_size=4), CONDITIONS)
def test_applying_the_same_condition_twice_is_idempotent(existing, new):
    conditions: list[dict] = []
    for condition in existing:
        set_status_condition(conditions, condition, T0)
    set_status_condition(conditions, new, T0)
    after_first = copy.deepcopy(conditions)
    assert not set_status_condition(conditions, new, T1)
    assert conditions == after_first
    assert is_status_condition_present_and_equal(conditions, new["type"], new["status"])
