"""Local ports and sockets for tests that start servers or must find nothing listening."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loop.devserver import HTTP_PORT_OFFSET, UI_PORT_OFFSET


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, and neither do the ports a dev
    server derives from it (HTTP at +10, UI at +1000).

    Chosen below the kernel's ephemeral range: a port from that range (what binding port
    0 gives) can be taken between asking and binding by any outgoing connection on a
    busy machine, and a dev server that loses its HTTP port that way panics at start.
    """
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(10000, low - UI_PORT_OFFSET - 1)
        if all(_bindable(p) for p in (port, port + HTTP_PORT_OFFSET, port + UI_PORT_OFFSET)):
            return port
    raise RuntimeError(f"no free port below {low} after 1000 tries")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, ascending."""
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


@contextmanager
def listening() -> Iterator[socket.socket]:
    """A socket listening on 127.0.0.1 that accepts TCP and never answers."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        yield s
    finally:
        s.close()
