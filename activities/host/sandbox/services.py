"""Which ports no sandbox may reach, whatever a task lists: the orchestrator's, every one.

The egress proxy refuses these even when ``allow_hosts`` names them. They are worked
out, not listed by hand, because a Temporal server listens on more than its
frontend: the HTTP API (``loop dev`` pins it at the frontend's port + 10, as a stock
server does; a bare ``temporal server start-dev`` picks a random one), the history,
matching and worker services, metrics. So:

- for each seed on this host (the frontend ``TEMPORAL_ADDRESS`` names, its UI at
  +1000, the worker's metrics), the process that listens there is found from the
  kernel's socket table (``/proc/net/tcp*``, then the socket's inode among
  ``/proc/<pid>/fd``) and every port that process listens on is refused, on every
  address of the host;
- Loopwork's own servers on this host (``loop ui``, ``loop codec-server``) say where
  they listen in ``LOOP_HOME/services/`` (``loop.services``); those, and their
  defaults (8300, 8081), are refused the same way;
- a seed on another host (a cluster, Temporal Cloud) is refused at every port of
  every address it resolves to.

The answer is kept ``REFRESH_S`` seconds: a server that restarts on new ports is
seen within that.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from activities.host.sandbox.egress_rules import address_entry
from loop.services import registered

REFRESH_S = 10.0
DEFAULTS = ("localhost:7233", "localhost:8233", "localhost:7243", "127.0.0.1:8300",
            "127.0.0.1:8081")  # fmt: skip
"""A stock frontend, its UI and HTTP API; the review page's and codec server's defaults."""
LISTEN = "0A"


def _address(hex_ip: str) -> str:
    raw = bytes.fromhex(hex_ip)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def listening(proc: Path = Path("/proc")) -> dict[int, tuple[str, int]]:
    """This network namespace's listening TCP sockets: inode -> (address, port)."""
    found: dict[int, tuple[str, int]] = {}
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (proc / "net" / name).read_text().splitlines()[1:]:
                parts = line.split()
                if len(parts) < 10 or parts[3] != LISTEN:
                    continue
                ip, port = parts[1].split(":")
                found[int(parts[9])] = (_address(ip), int(port, 16))
    return found


def sockets_of(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """The socket inodes process ``pid`` holds (none when it is gone or not ours to read)."""
    inodes: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.scandir(proc / str(pid) / "fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def owners(inodes: set[int], proc: Path = Path("/proc")) -> set[int]:
    """The processes that hold any of ``inodes``."""
    found: set[int] = set()
    for entry in os.scandir(proc):
        if entry.name.isdigit() and sockets_of(int(entry.name), proc) & inodes:
            found.add(int(entry.name))
    return found


def _split(hostport: str) -> tuple[str, int] | None:
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _addresses(host: str) -> set[str]:
    try:
        return {str(i[4][0]) for i in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return set()


@dataclass
class Protected:
    """The seeds (``host:port`` of the orchestrator and the worker's services) and where
    Loopwork's servers register; ``entries`` is the proxy's deny list."""

    seeds: list[str] = field(default_factory=list)
    home: Path | None = None
    local: set[str] = field(default_factory=set)
    """Every address of this host (``egress.local_addresses``)."""
    _cached: tuple[float, list[str]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, seeds: list[str], home: Path | None, local: set[str]) -> None:
        with self._lock:
            self.seeds, self.home, self.local, self._cached = list(seeds), home, local, None

    def entries(self) -> list[str]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > REFRESH_S:
                self._cached = (time.monotonic(), self._work_out())
            return list(self._cached[1])

    def _work_out(self) -> list[str]:
        seeds = [*DEFAULTS, *self.seeds]
        if self.home is not None:
            seeds += [s.address for s in registered(self.home)]
        local_ports: set[int] = set()
        deny: set[str] = set()
        for seed in seeds:
            split = _split(seed)
            if split is None:
                continue
            host, port = split
            found = _addresses(host)
            if not found or any(ipaddress.ip_address(ip).is_loopback or ip in self.local
                                for ip in found):  # fmt: skip
                local_ports.add(port)
            else:
                deny.update(address_entry(ip, 0) for ip in found)  # elsewhere: every port
        local_ports |= self._ports_of_owners(local_ports)
        deny.update(address_entry(ip, p) for ip in self.local for p in local_ports)
        return sorted(deny)

    def _ports_of_owners(self, ports: Iterable[int]) -> set[int]:
        """Every port the processes that listen on ``ports`` listen on (the Temporal
        server's history, matching, worker and HTTP ports with its frontend's)."""
        table = listening()
        wanted = {inode for inode, (_, port) in table.items() if port in set(ports)}
        if not wanted:
            return set()
        held: set[int] = set()
        for pid in owners(wanted):
            held |= sockets_of(pid)
        return {table[i][1] for i in held if i in table}
