"""--event-types: which Events our processes write (Normal and Warning by default, or Warning alone);
--event-loop: the loop they run on (uvloop by default)."""

from __future__ import annotations

import asyncio

import pytest

from kube_runtime.events import EventRecorder
from manager.__main__ import build_parser as manager_parser
from worker_agent.__main__ import build_parser as agent_parser

REGARDING = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}


class NoClient:
    """Any request fails the test: a filtered Event must never reach the API."""

    def __getattr__(self, name):
        raise AssertionError(f"the recorder used its client ({name}) for an Event it should skip")


@pytest.mark.parametrize("parser", [agent_parser, manager_parser])
def test_both_processes_write_both_types_unless_told(parser):
    assert parser().parse_args([]).event_types == ("Normal", "Warning")
    assert parser().parse_args(["--event-types", "Warning"]).event_types == ("Warning",)
    assert parser().parse_args(["--event-types", "Warning, Normal"]).event_types == ("Warning", "Normal")


@pytest.mark.parametrize("parser", [agent_parser, manager_parser])
def test_both_processes_run_on_uvloop_unless_told(parser):
    assert parser().parse_args([]).event_loop == "uvloop"
    assert parser().parse_args(["--event-loop", "asyncio"]).event_loop == "asyncio"


@pytest.mark.parametrize("value", ["", "Info", "Warning,Debug"])
def test_an_unknown_type_is_refused_with_the_types_it_takes(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        agent_parser().parse_args(["--event-types", value])
    assert exit_info.value.code == 2
    assert "takes Normal or Warning, comma-separated" in capsys.readouterr().err


async def test_a_recorder_told_warning_only_skips_normal_events_without_a_request():
    recorder = EventRecorder(NoClient(), "test", "instance", types=("Warning",))
    recorder.record(REGARDING, "Normal", "QuotaReserved", "Admission", "skipped")
    await recorder.flush()
    assert recorder.skipped == 1 and recorder.dropped == 0
    assert recorder._writer is None  # nothing was queued, so no writer started


async def test_a_recorder_told_warning_only_still_queues_warnings():
    recorder = EventRecorder(NoClient(), "test", "instance", types=("Warning",))
    recorder.record(REGARDING, "Warning", "Pending", "Admission", "queued")
    assert recorder.skipped == 0
    await asyncio.sleep(0)  # the writer runs, meets NoClient and drops the Event: it did try
    await recorder.flush()
    assert recorder.dropped == 1
