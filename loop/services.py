"""Where Loopwork's own servers listen on this host, so no sandbox may reach them.

``loop ui`` and ``loop codec-server`` each write one file in ``LOOP_HOME/services/``
while they run (``<kind>-<pid>.json``: the address they listen on); the worker reads
the folder when it works out the ports the egress proxy refuses
(``activities.host.sandbox.services``). A file whose process is gone is ignored and
removed; a port that a task lists in ``allow_hosts`` is refused all the same.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FOLDER = "services"


@dataclass(frozen=True)
class Service:
    kind: str
    pid: int
    address: str
    """``host:port`` it listens on."""


@contextlib.contextmanager
def register(home: Path, kind: str, address: str) -> Iterator[None]:
    """Say where this process listens while the block runs."""
    folder = home / FOLDER
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{kind}-{os.getpid()}.json"
    path.write_text(json.dumps({"kind": kind, "pid": os.getpid(), "address": address}))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def registered(home: Path) -> list[Service]:
    """The servers that said where they listen and still run."""
    found: list[Service] = []
    folder = home / FOLDER
    with contextlib.suppress(OSError):
        for path in folder.glob("*.json"):
            try:
                data = json.loads(path.read_text())
                service = Service(str(data["kind"]), int(data["pid"]), str(data["address"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if _alive(service.pid):
                found.append(service)
            else:
                path.unlink(missing_ok=True)
    return found
