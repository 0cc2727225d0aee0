"""Per-task uids: leased, never shared by two live tasks, and killed to the last process.

Each task's commands run as a uid of their own (``UID_BASE`` and up), so one task
cannot read another's files, signal its processes or outlive its cleanup. A hash
of the task id would do most of the time; "most" is not a boundary, so uids are
leased from one table per host (``LEASES``, under a file lock), shared by every
worker on the host whatever its ``LOOP_HOME``. A lease is the task's until the
task ends (``release``) or its ``LOOP_HOME`` is gone; the worker that starts
releases the leases of tasks Temporal reports closed (``activities.reconcile``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

from activities.host.files import locked, write_atomic
from activities.host.proc import KILL_WAIT_S, kill_until_gone
from loop.errors import permanent

UID_BASE = 100_000
UID_SPAN = 50_000
LEASES = Path("/var/lib/loopwork/uid-leases.json")
"""Host-wide: uids are a property of the host, not of one LOOP_HOME."""
"""How long a cleanup keeps killing a task uid's processes."""


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _holds(entry: dict[str, Any], home: str, holder: str) -> bool:
    return entry.get("home") == home and entry.get("holder") == holder


def lease(home: Path, holder: str, *, table: Path = LEASES) -> int:
    """The uid ``holder`` (a task id, or a triage run) of ``home`` runs as; the same one
    every time until it is released. Raises a permanent error when none is free."""
    key = str(Path(home).resolve())
    table.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with locked(table):
        leases = _read(table)
        for uid, entry in leases.items():
            if _holds(entry, key, holder):
                return int(uid)
        for uid, entry in list(leases.items()):
            if not os.path.isdir(str(entry.get("home", ""))):
                del leases[uid]  # its LOOP_HOME is gone: nothing can release it now
        start = zlib.crc32(f"{key}\0{holder}".encode()) % UID_SPAN
        for step in range(UID_SPAN):
            uid = UID_BASE + (start + step) % UID_SPAN
            if str(uid) not in leases and not _holds_processes(uid):
                leases[str(uid)] = {"home": key, "holder": holder, "since": time.time()}
                write_atomic(table, json.dumps(leases, indent=1, sort_keys=True))
                return uid
    raise permanent(f"no free task uid: all {UID_SPAN} are leased (see {table})")


def release(home: Path, holder: str, *, table: Path = LEASES) -> int | None:
    """Give the uid back (after its processes are gone); the uid released, if any."""
    key = str(Path(home).resolve())
    if not table.exists():
        return None
    with locked(table):
        leases = _read(table)
        for uid, entry in list(leases.items()):
            if _holds(entry, key, holder):
                kill_uid(int(uid))
                del leases[uid]
                write_atomic(table, json.dumps(leases, indent=1, sort_keys=True))
                return int(uid)
    return None


def holders(home: Path, *, table: Path = LEASES) -> dict[str, int]:
    """``holder -> uid`` for the leases of one LOOP_HOME."""
    key = str(Path(home).resolve())
    return {
        str(e["holder"]): int(uid)
        for uid, e in _read(table).items()
        if isinstance(e, dict) and e.get("home") == key and "holder" in e
    }


def is_task_uid(uid: int) -> bool:
    return UID_BASE <= uid < UID_BASE + UID_SPAN


def uid_processes(uid: int, *, zombies: bool = False) -> list[int]:
    """Live processes whose real, effective or saved uid is ``uid`` (and its zombies, with
    ``zombies``)."""
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found  # no procfs: nothing to find (and no per-task uid without root)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uids: list[int] = []
        state = ""
        for line in status.splitlines():
            if line.startswith("Uid:"):
                uids = [int(x) for x in line.split()[1:4]]
            elif line.startswith("State:"):
                state = line.split()[1]
        if uid in uids and (zombies or state not in ("Z", "X")):
            found.append(int(entry))
    return found


SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def _signal_all(uid: int, *sigs: int) -> None:
    """``kill(-1, sig)`` made as ``uid``, for each of ``sigs`` in turn: the kernel signals
    every process of that uid in one pass under its task list lock, so no process forks
    away between being listed and being signalled (a chain that forks and exits outruns
    any listing of /proc).

    A new process does it (``setpriv``, then the shell's own ``kill``, one shell for all
    of ``sigs``), never a fork of the worker: a threaded process's fork that changes its
    uid can deadlock in the C library. (``kill(-1)``'s result says nothing about the uid:
    it succeeds whenever the host has another process, so only the process table, read
    frozen, tells.)"""
    kills = "; ".join(f"kill -{int(sig)} -1" for sig in sigs)
    subprocess.run(
        [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
         "/bin/sh", "-c", kills],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, timeout=10, check=False,
    )  # fmt: skip


def alive(uid: int) -> bool:
    """Whether a process of ``uid`` lives (zombies cannot run, and do not count): its
    processes are stopped at once (a stopped process cannot fork away), the process table
    is read, and they go on."""
    if os.geteuid() != 0 or not os.path.exists(SETPRIV):
        return bool(uid_processes(uid))
    _signal_all(uid, signal.SIGSTOP)
    try:
        return bool(uid_processes(uid))
    finally:
        _signal_all(uid, signal.SIGCONT)


def _holds_processes(uid: int) -> bool:
    """Any process of ``uid``, zombies included: they hold the uid's process slots
    (``RLIMIT_NPROC``) where init does not reap them, so a task there could not fork."""
    return bool(uid_processes(uid, zombies=True))


def kill_uid(uid: int, wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL every process of a task uid until the process table holds none (never any
    other uid); False when one still lives after ``wait_s``."""
    if not is_task_uid(uid) or uid == os.getuid():
        return True
    if os.geteuid() != 0 or not os.path.exists(SETPRIV):
        return kill_until_gone(lambda: uid_processes(uid), wait_s)
    deadline = time.monotonic() + wait_s
    while True:
        # What is left (if anything) stops where it is.
        _signal_all(uid, signal.SIGKILL, signal.SIGSTOP)
        if not uid_processes(uid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


class StillRunning(RuntimeError):
    """A task uid kept processes through the sweep: its next run must not start."""


def sweep(uid: int) -> None:
    """``kill_uid`` that fails loudly: the step is retried (and sweeps again) rather than
    reporting the uid empty while one of its processes lives."""
    if not kill_uid(uid):
        left = uid_processes(uid)
        raise StillRunning(f"task uid {uid} still has processes after the sweep: {left[:10]}")
