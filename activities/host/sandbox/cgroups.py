"""A cgroup per sandboxed run: its memory and process limits, and a list to kill.

A run joins its cgroup before anything else runs (the launcher writes its own pid
to ``cgroup.procs``), so every descendant is a member, ``setsid`` grandchildren
included: killing the members kills the whole run, whatever it forked. v1 (one
folder per controller) and v2 (one folder) both work; where the cgroup file system
is not writable the limits are per process (rlimits) only, and the run says so.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from activities.host.proc import KILL_WAIT_S, kill_until_gone
from loop.contracts import SandboxLimits

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENTS = ("loop", "pids/loop", "memory/loop")
"""Where run cgroups live, relative to ``CGROUP_ROOT`` (v2, then v1's two controllers)."""


def is_run_cgroup(path: str) -> bool:
    """A folder Loopwork made for a run: a recorded path outside these is never touched."""
    p = Path(path)
    return p.name.startswith("loop-") and any(p.parent == CGROUP_ROOT / q for q in PARENTS)


@dataclass
class Cgroup:
    """A per-run cgroup (v1: one per controller; v2: one) that the run joins first."""

    dirs: list[str]
    memory: bool
    pids: bool

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    @classmethod
    def create(cls, name: str, limits: SandboxLimits) -> tuple[Cgroup | None, str]:
        memory = limits.memory_mb * 1024 * 1024
        for parent in PARENTS:
            _sweep(CGROUP_ROOT / parent)
        try:
            if (CGROUP_ROOT / "cgroup.controllers").exists():
                return cls._v2(name, limits.processes, memory)
            return cls._v1(name, limits.processes, memory)
        except OSError as e:
            return None, f"no cgroup ({e.strerror or e})"

    @classmethod
    def _v1(cls, name: str, processes: int, memory: int) -> tuple[Cgroup | None, str]:
        dirs: list[str] = []
        has: dict[str, bool] = {"pids": False, "memory": False}
        for controller, limit_file, value in (
            ("pids", "pids.max", processes),
            ("memory", "memory.limit_in_bytes", memory),
        ):
            top = CGROUP_ROOT / controller
            if not (top / "cgroup.procs").exists():
                continue
            leaf = top / "loop" / name
            try:
                leaf.mkdir(parents=True, exist_ok=True)
                dirs.append(str(leaf))
                (leaf / limit_file).write_text(str(value))
            except OSError:
                cls(dirs=dirs, memory=False, pids=False).remove()
                raise
            has[controller] = True
        if not dirs:
            return None, "no cgroup (no writable pids or memory hierarchy)"
        got = ",".join(k for k, v in has.items() if v)
        return cls(dirs=dirs, memory=has["memory"], pids=has["pids"]), f"cgroup v1 {got}"

    @classmethod
    def _v2(cls, name: str, processes: int, memory: int) -> tuple[Cgroup | None, str]:
        available = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
        wanted = [c for c in ("pids", "memory") if c in available]
        if not wanted:
            return None, "no cgroup (v2 without pids or memory controllers)"
        parent = CGROUP_ROOT / "loop"
        parent.mkdir(exist_ok=True)
        enable = " ".join(f"+{c}" for c in wanted)
        for d in (CGROUP_ROOT, parent):
            current = (d / "cgroup.subtree_control").read_text().split()
            if not all(c in current for c in wanted):
                (d / "cgroup.subtree_control").write_text(enable)
        leaf = parent / name
        leaf.mkdir(exist_ok=True)
        if "pids" in wanted:
            (leaf / "pids.max").write_text(str(processes))
        if "memory" in wanted:
            (leaf / "memory.max").write_text(str(memory))
            with contextlib.suppress(OSError):
                (leaf / "memory.swap.max").write_text("0")
        got = ",".join(wanted)
        return cls(dirs=[str(leaf)], memory="memory" in wanted, pids="pids" in wanted), (
            f"cgroup v2 {got}"
        )

    def members(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in Path(f).read_text().split())
        return found

    def kill(self, wait_s: float = KILL_WAIT_S) -> bool:
        """SIGKILL every member until none is left; True when the cgroup is empty."""
        return kill_until_gone(lambda: {p for p in self.members() if not is_zombie(p)}, wait_s)

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(150):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # zombies not yet reaped keep it busy


def kill_recorded(dirs: list[str]) -> None:
    """Kill and remove the cgroups a run recorded (only folders Loopwork makes)."""
    for d in dirs:
        if is_run_cgroup(d):
            cg = Cgroup(dirs=[d], memory=False, pids=False)
            cg.kill()
            cg.remove()


ZOMBIE_WAIT_S = 3.0
"""How long an emptied run cgroup's removal waits for its zombies to be reaped."""
CGROUP_KILL_S = 0.5
"""How long killing through the cgroup alone is tried before the uid is killed too (a
chain that forks and exits can outrun any listing of members; ``kill(-1)`` as the uid
cannot be outrun)."""


def killed_and_removed(dirs: list[str], wait_s: float = CGROUP_KILL_S) -> bool:
    """Kill every member of the run's recorded cgroups and remove them; True when all are
    gone. That proves everything the run started has ended, without reading ``/proc``: the
    launcher joins them before anything of the task runs, every fork inherits them, a task
    uid cannot write a ``cgroup.procs`` to leave, nothing can join a removed cgroup, and
    the kernel refuses to remove one with members. False when there is nothing to prove it
    with (no cgroup recorded, or a folder Loopwork does not make) or the members outlived
    ``wait_s``: the caller then kills by uid and sweeps it."""
    if not dirs or not all(is_run_cgroup(d) for d in dirs):
        return False
    for d in dirs:
        if not Cgroup(dirs=[d], memory=False, pids=False).kill(wait_s):
            return False
        deadline = time.monotonic() + ZOMBIE_WAIT_S
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break  # removed while empty (by a sweep): nothing can have joined since
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)  # zombies not yet reaped keep it busy
    return True


def _sweep(parent: Path, older_than_s: float = 60.0) -> None:
    """Remove run cgroups left empty (a zombie kept one busy past its run's cleanup)."""
    try:
        children = list(parent.iterdir())
    except OSError:
        return
    for child in children:
        with contextlib.suppress(OSError):
            if (
                child.name.startswith("loop-")
                and time.time() - child.stat().st_mtime > older_than_s
            ):
                child.rmdir()  # refused while it has members: a live run keeps its own


def probe() -> str:
    """What ``loop doctor`` says about cgroups here."""
    cg, note = Cgroup.create(f"loop-probe-{os.getpid()}", SandboxLimits())
    if cg is not None:
        cg.remove()
        return f"{note} (writable: limits apply to the whole run)"
    return f"{note}; limits are per process (rlimits) only"


def is_zombie(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] in ("Z", "X")
