"""localfleet.ports: a fleet's ports are never handed out twice, nor taken between choice and use."""

from __future__ import annotations

import socket

import pytest

from localfleet import ports


def test_one_allocator_never_hands_out_a_port_twice():
    allocator = ports.PortAllocator()
    try:
        taken = [allocator.take() for _ in range(300)]
        assert len(set(taken)) == len(taken)
        assert all(p in allocator.ports for p in taken)
    finally:
        allocator.close()


def test_the_process_wide_free_port_never_repeats_itself():
    taken = [ports.free_port() for _ in range(100)]
    assert len(set(taken)) == len(taken)


def test_ports_come_from_outside_the_ephemeral_range():
    """Outgoing connections take their source ports from the ephemeral range: never from ours."""
    low, high = ports.ephemeral_range()
    candidates = ports.candidate_range()
    if candidates == range(ports.LOWEST, 65536):
        pytest.skip(f"the ephemeral range {low}-{high} leaves no room outside it")
    assert candidates.stop <= low or candidates.start > high


def test_a_reserved_port_is_not_given_to_another_fleet_but_its_program_can_listen_on_it():
    small = range(ports.LOWEST, ports.LOWEST + 400)
    first, second = ports.PortAllocator(small), ports.PortAllocator(small)
    try:
        held = {first.take() for _ in range(20)}
        others = {second.take() for _ in range(20)}
        assert not held & others
        # The program binds as Go's net.Listen and asyncio's create_server do: with SO_REUSEADDR.
        port = next(iter(held))
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ports.HOST, port))
        listener.listen()
        with listener, socket.create_connection((ports.HOST, port), timeout=2):
            pass
    finally:
        first.close()
        second.close()


def test_a_port_in_use_is_skipped_and_an_exhausted_range_says_so():
    busy = socket.socket()
    busy.bind((ports.HOST, 0))
    port = busy.getsockname()[1]
    allocator = ports.PortAllocator(range(port, port + 1))
    try:
        with pytest.raises(OSError, match="no free TCP port"):
            allocator.take()
        busy.close()
        assert allocator.take() == port
        with pytest.raises(OSError, match="no free TCP port"):
            allocator.take()  # handed out once already
    finally:
        busy.close()
        allocator.close()
