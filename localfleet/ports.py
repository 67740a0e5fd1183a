"""TCP ports for the fleet's listeners on 127.0.0.1, each handed out once and held until it is used.

Binding port 0 and closing the socket again (what `up` once did) leaves a window: the port is free
until the process it was chosen for binds it, a minute later for the last ones, and meanwhile the
kernel may give it to an outgoing connection (ports from the ephemeral range are source ports too)
or to the next `bind(0)`, even this allocator's next one. A fleet started right after another was
torn down so once lost worker3's lws-manager to `bind: address already in use`.

So a port comes from outside the kernel's ephemeral range (ip_local_port_range: no connection ever
takes it as a source port), is never handed out twice by one allocator, and stays reserved: the
allocator keeps a socket bound to it, with SO_REUSEADDR set only after the bind succeeded. Another
allocator (another fleet's `up`) cannot take it, as its plain bind fails; the program it was chosen
for can, because its listener sets SO_REUSEADDR too (Go's net.Listen, asyncio's create_server) and
Linux lets two such sockets share a port as long as the other one does not listen. The reservations
end with the allocator's process, when every program has long bound its own ports.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

HOST = "127.0.0.1"
LOWEST = 20000  # below, well-known services cluster (8080, 9090, 10250, ...)


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for source ports of outgoing connections (Linux's default if unreadable)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def candidate_range() -> range:
    """The ports to allocate from: below the ephemeral range, else above it, else anywhere."""
    low, high = ephemeral_range()
    if low - LOWEST >= 2000:
        return range(LOWEST, low)
    if 65535 - high >= 2000:
        return range(high + 1, 65536)
    return range(LOWEST, 65536)


class PortAllocator:
    """Free ports, each handed out once, reserved (a bound socket) until this object is closed."""

    def __init__(self, ports: range | None = None) -> None:
        self.ports = ports if ports is not None else candidate_range()
        self.given: set[int] = set()
        self.reservations: list[socket.socket] = []
        # A random start: fleets started together begin far apart instead of racing for the same ports.
        self.next = random.randrange(len(self.ports))
        self.lock = threading.Lock()

    def take(self) -> int:
        with self.lock:
            for _ in range(len(self.ports)):
                port = self.ports[self.next]
                self.next = (self.next + 1) % len(self.ports)
                if port in self.given:
                    continue
                reservation = reserve(port)
                if reservation is not None:
                    self.given.add(port)
                    self.reservations.append(reservation)
                    return port
        raise OSError(f"no free TCP port left in {self.ports.start}-{self.ports.stop - 1} on {HOST}")

    def close(self) -> None:
        """Give up the reservations (the ports stay given out: `take` never returns them again)."""
        with self.lock:
            for s in self.reservations:
                s.close()
            self.reservations.clear()


def reserve(port: int) -> socket.socket | None:
    """A socket bound to `port` if nothing else is bound to it (no SO_REUSEADDR at bind: any other
    socket on the port, even one in TIME_WAIT, makes it fail), then made shareable with a listener
    that sets SO_REUSEADDR; None when the port is taken."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((HOST, port))
    except OSError:
        s.close()
        return None
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return s


# One allocator per process: `localfleet up` starts one fleet, so its ports are the fleet's.
_ALLOCATOR = PortAllocator()


def free_port() -> int:
    """A port on 127.0.0.1 that no other caller of this process gets, reserved until the process ends."""
    return _ALLOCATOR.take()
