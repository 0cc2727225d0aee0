"""One sandbox for everything untrusted Loopwork runs: agents, the ``run`` tool, ``run`` gates.

An agent runs code a model wrote, from text anyone could have written; a gate
runs the code the agent wrote. ``run_sandboxed`` is the one way all three are
started (typed policy in, ``ProcResult`` out), on top of ``proc.run_process``
(heartbeats, output tail, timeout, group kill). Three levels, from the task
file's ``sandbox.mode``:

``strict`` (bubblewrap, the worker is root)
    A new mount, pid, ipc, uts and cgroup namespace (and network namespace for
    ``network: none``): the host read-only; empty tmpfs over ``/home``,
    ``/root``, ``/run``, ``LOOP_HOME`` and any folder the task's uid could not
    search anyway; a private sized ``/tmp``; the worktree bound writable (read-only
    for gates), its ``.git``, the main repository's git folder and every protected
    file read-only; the attempt folder writable for the agent's LOOP_* files.
    The command runs under a per-task numeric uid (``setpriv``, every capability
    dropped, ``no_new_privs``) with a seccomp filter that refuses new user
    namespaces and ``setns``. bubblewrap's ``--disable-userns`` needs its own user
    namespace, which would map the task's uid onto root outside: file ownership
    and the process limit (never enforced for uid 0) would then be root's again,
    so the filter does that job instead.
``basic`` (no bubblewrap)
    A minimal environment, limits, its own session, and the per-task uid when the
    worker is root and that uid can reach what the run needs (the command, the
    worktree, the attempt folder); when it cannot (a toolchain or ``LOOP_HOME``
    under a folder only root may search, such as ``/root``), the run keeps the
    worker's uid and says so in ``ProcResult.sandbox`` and the trace.
``off``
    The worker's user and environment (minus Loopwork's own LOOP_*), as before.

Limits never use ``preexec_fn`` (it can deadlock a threaded worker): ``prlimit``
wraps the command (where it is missing, in basic mode, the worker's Python sets
them and execs), and a pids/memory cgroup (v1 or v2) is joined by a two-line
shell wrapper before anything else runs, when the cgroup filesystem is
writable. The whole tree dies with the run: bubblewrap's pid namespace dies
with its first process, every process of the task's uid is killed, and every
process left in the run's cgroup, ``setsid`` grandchildren included.

The worktree belongs to root between runs (the worker's git needs that); before
a writing run it is lent to the task's uid and given back afterwards, also by a
retry after a crash (a state file next to the pid file says what to undo).

``strict`` never degrades: a host without what it needs fails the activity
non-retryably, so the task ends BLOCKED with a one-line reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pathspec

from activities.proc import HEARTBEAT_EVERY_S, ProcResult, heartbeat, kill_stale, run_process
from loop.contracts import SandboxLimits, SandboxPolicy
from loop.errors import permanent

Kind = Literal["agent", "tool", "gate"]

UID_BASE = 100_000
UID_SPAN = 50_000
"""Per-task uids are ``UID_BASE + crc32(task id) % UID_SPAN``: stable across attempts."""
HIDDEN = ("/home", "/root", "/run", "/tmp")
"""Replaced by empty tmpfs in strict mode (``/tmp`` by a private writable one)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
"""The fixed minimal set passed through from the worker (``sandbox.env`` adds names)."""
SCRATCH = Path("/tmp/loop-sandbox")
"""basic mode: ``SCRATCH/<uid>`` is the task's HOME and TMPDIR."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
KILL_WAIT_S = 3.0
"""How long the cleanup keeps killing a task uid's or cgroup's processes."""
REFUSED_SCAN_BYTES = 1 << 20
MAX_REFUSED = 20
IGNORED_REFUSALS = ("/proc", "/sys", "/dev")

_REFUSAL = re.compile(r"Read-only file system|Permission denied|EROFS|EACCES")
_LAUNCHER = re.compile(r"failed to execute|cannot execute|exec(ve)? failed|can't execute", re.I)
_QUOTED = re.compile(r"""'(/[^'\n]*)'|"(/[^"\n]*)"|(?<![\w.~/-])(/[^\s:'",;()\[\]]+)""")

# --------------------------------------------------------------------------- the host


def bwrap_path() -> str:
    """bubblewrap: ``LOOP_BWRAP`` when set (a test points it at nothing), else on PATH."""
    configured = os.environ.get("LOOP_BWRAP")
    if configured:
        return configured
    return shutil.which("bwrap") or ""


def task_uid(task_id: str) -> int:
    return UID_BASE + zlib.crc32(task_id.encode()) % UID_SPAN


_ARCHES = {
    # audit arch, clone, unshare, clone3, setns, x32 syscalls share the table
    "x86_64": (0xC000003E, 56, 272, 435, 308, True),
    "aarch64": (0xC00000B7, 220, 97, 435, 268, False),
}
_CLONE_NEWUSER = 0x10000000


def seccomp_program() -> bytes | None:
    """A classic BPF filter: no new user namespace (``unshare``/``clone`` with
    CLONE_NEWUSER: EPERM), no ``setns`` (EPERM), ``clone3`` answers ENOSYS so libc
    falls back to ``clone``, whose flags the filter can read; other ABIs: EPERM."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit, clone, unshare, clone3, setns, x32 = arch
    ld, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050001, 0x00050026
    program: list[tuple[int, int | str, int | str, int]] = []
    labels: dict[str, int] = {}

    def emit(code: int, k: int = 0, jt: int | str = 0, jf: int | str = 0) -> None:
        program.append((code, jt, jf, k))

    emit(ld, 4)  # seccomp_data.arch
    emit(jeq, audit, jf="deny")
    emit(ld, 0)  # seccomp_data.nr
    if x32:
        emit(jge, 0x40000000, jt="deny")
    emit(jeq, unshare, jt="flags")
    emit(jeq, clone, jt="flags")
    emit(jeq, clone3, jt="nosys")
    emit(jeq, setns, jt="deny")
    emit(ret, allow)
    labels["flags"] = len(program)
    emit(ld, 16)  # the first argument's low word: the flags of unshare and clone
    emit(jset, _CLONE_NEWUSER, jt="deny")
    emit(ret, allow)
    labels["deny"] = len(program)
    emit(ret, eperm)
    labels["nosys"] = len(program)
    emit(ret, enosys)

    def offset(i: int, target: int | str) -> int:
        return labels[target] - i - 1 if isinstance(target, str) else target

    return b"".join(
        struct.pack("=HBBI", code, offset(i, jt), offset(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(program)
    )


def _seccomp_fd() -> int:
    program = seccomp_program()
    assert program is not None
    fd = os.memfd_create("loop-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass(frozen=True)
class HostSupport:
    """What this host can do; ``level`` is what ``loop doctor`` prints."""

    level: Literal["strict", "basic", "off"]
    root: bool
    bwrap: str
    bwrap_version: str
    bwrap_error: str
    setpriv: str
    prlimit: str
    userns: str
    cgroup: str
    seccomp: bool

    @property
    def strict_error(self) -> str:
        """Why strict is not available here; empty when it is."""
        if not self.bwrap:
            return "bubblewrap (bwrap) is not installed"
        if self.bwrap_error:
            return self.bwrap_error
        if not self.root:
            return "strict gives each task its own uid, which needs a root worker"
        if not self.setpriv or not self.prlimit:
            return "setpriv and prlimit (util-linux) are needed inside the sandbox"
        if not self.seccomp:
            return f"no seccomp filter for {platform.machine()}"
        return ""

    def lines(self) -> list[str]:
        bw = f"{self.bwrap} ({self.bwrap_version})" if self.bwrap_version else self.bwrap
        if not self.bwrap:
            bw = "not found (install bubblewrap for strict)"
        elif self.bwrap_error:
            bw += f": {self.bwrap_error}"
        return [
            f"bubblewrap: {bw}",
            f"worker uid: {os.getuid()}"
            + ("" if self.root else " (not root: no per-task uid, no strict)"),
            f"setpriv: {self.setpriv or 'not found'}",
            f"prlimit: {self.prlimit or 'not found (basic sets limits with Python instead)'}",
            f"user namespaces: {self.userns}",
            f"seccomp filter: {'yes' if self.seccomp else 'no'} ({platform.machine()})",
            f"cgroups: {self.cgroup}",
        ]


def _bwrap_trial(bwrap: str) -> tuple[str, str]:
    """(version, error): run a tiny sandbox the way real runs do."""
    if not os.path.exists(bwrap):
        where = " (LOOP_BWRAP)" if os.environ.get("LOOP_BWRAP") else ""
        return "", f"bubblewrap not found at {bwrap}{where}"
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError as e:
        return "", f"cannot run {bwrap}: {e.strerror or e}"
    version = out.stdout.strip().removeprefix("bubblewrap ").strip() or "unknown version"
    if seccomp_program() is None:
        return version, f"no seccomp filter for {platform.machine()}"
    fd = _seccomp_fd()
    try:
        args = [bwrap, *_fixed_args(fd, network="none"), "--"]
        setpriv = shutil.which("setpriv")
        if os.geteuid() == 0 and setpriv:
            args += _setpriv(setpriv, UID_BASE, UID_BASE)
        args.append("/bin/true")
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
            pass_fds=(fd,),
            env={"PATH": DEFAULT_PATH},
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return version, f"bubblewrap does not start: {e}"
    finally:
        os.close(fd)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return version, f"bubblewrap cannot make a sandbox here: {reason}"
    return version, ""


def _userns() -> str:
    try:
        n = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        return "unknown"
    if n <= 0:
        return "disabled (user.max_user_namespaces = 0; not needed by a root worker)"
    return "available (not needed by a root worker; nested ones are refused in the sandbox)"


@functools.lru_cache(maxsize=8)
def _inspect(bwrap: str) -> HostSupport:
    root = os.geteuid() == 0
    version, error = _bwrap_trial(bwrap) if bwrap else ("", "")
    setpriv = shutil.which("setpriv") or ""
    prlimit = shutil.which("prlimit") or ""
    cg_note = _cgroup_probe() if root else "not used (the worker is not root)"
    host = HostSupport(
        level="off",
        root=root,
        bwrap=bwrap,
        bwrap_version=version,
        bwrap_error=error,
        setpriv=setpriv,
        prlimit=prlimit,
        userns=_userns(),
        cgroup=cg_note,
        seccomp=seccomp_program() is not None,
    )
    # basic needs nothing beyond the worker's Python (limits fall back to it).
    level: Literal["strict", "basic", "off"] = "basic" if host.strict_error else "strict"
    return dataclasses.replace(host, level=level)


def inspect_host() -> HostSupport:
    """What this host supports (cached per bubblewrap path)."""
    return _inspect(bwrap_path())


def probe() -> str:
    """``strict`` | ``basic`` | ``off``: the strongest level this host supports."""
    return inspect_host().level


def host_record() -> dict[str, str]:
    """For the worker's start-up log line: the level and why."""
    host = inspect_host()
    return {"level": host.level, "why": "; ".join(host.lines())}


# --------------------------------------------------------------------------- cgroups


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
        for parent in (
            CGROUP_ROOT / "loop",
            CGROUP_ROOT / "pids/loop",
            CGROUP_ROOT / "memory/loop",
        ):
            _sweep(parent)
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
        deadline = time.monotonic() + wait_s
        while True:
            alive = {p for p in self.members() if not _is_zombie(p)}
            if not alive:
                return True
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

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


def _cgroup_probe() -> str:
    cg, note = Cgroup.create(f"probe-{os.getpid()}", SandboxLimits())
    if cg is not None:
        cg.remove()
        return f"{note} (writable: limits apply to the whole run)"
    return f"{note}; limits are per process (prlimit) only"


# --------------------------------------------------------------------------- processes


def _is_zombie(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def uid_processes(uid: int) -> list[int]:
    """Live processes whose real, effective or saved uid is ``uid``."""
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
        if uid in uids and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def kill_uid(uid: int, wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL every process of a task uid until none is left (never uid 0 or the worker's)."""
    if uid < UID_BASE or uid == os.getuid():
        return True
    deadline = time.monotonic() + wait_s
    while True:
        pids = uid_processes(uid)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


# --------------------------------------------------------------------------- ownership


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _depth(path: str) -> int:
    return len(Path(path).parts)


def _owner_record(path: str, what: str) -> dict[str, Any]:
    """What to restore: the folder's mode and owner (``what``: ``worktree`` or ``folder``)."""
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    return {"path": path, "what": what, "mode": mode, "uid": st.st_uid, "gid": st.st_gid}


def _lend_tree(record: Mapping[str, Any], uid: int, gid: int, keep: set[str]) -> None:
    """Give the worktree's content to the task's uid; the folder itself stays the
    worker's, group-writable and sticky, so ``.git`` (and protected files in basic
    mode) cannot be replaced. Hard-linked files are skipped: their other name may be
    outside the worktree."""
    top = record["path"]
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d != ".git"]
            filenames = [f for f in filenames if f != ".git"]
        for name in (*dirnames, *filenames):
            full = os.path.join(dirpath, name)
            if os.path.relpath(full, top) in keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                est = os.lstat(full)
                if stat.S_ISREG(est.st_mode) and est.st_nlink > 1:
                    continue
                os.lchown(full, uid, gid)
    os.chown(top, record["uid"], gid)
    os.chmod(top, 0o1770 | (record["mode"] & 0o005))


def _take_back(record: Mapping[str, Any]) -> None:
    """Everything under the folder back to its owner; set-id bits of what others made go."""
    top, uid, gid = record["path"], record["uid"], record["gid"]
    if not os.path.isdir(top) or os.path.islink(top):
        return
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d != ".git"]
            filenames = [f for f in filenames if f != ".git"]
        for name in (*dirnames, *filenames):
            full = os.path.join(dirpath, name)
            with contextlib.suppress(FileNotFoundError):
                est = os.lstat(full)
                if est.st_uid == uid and est.st_gid == gid:
                    continue
                os.lchown(full, uid, gid)
                if not stat.S_ISLNK(est.st_mode) and est.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    os.chmod(full, stat.S_IMODE(est.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    os.chown(top, uid, gid)
    os.chmod(top, record["mode"])


def _share_dir(record: Mapping[str, Any], gid: int) -> None:
    """A folder the task's uid may add files to (sticky: the worker's files stay put)."""
    os.chown(record["path"], record["uid"], gid)
    os.chmod(record["path"], 0o1770)


def _scratch(uid: int) -> str:
    """basic mode's HOME/TMPDIR: ``/tmp/loop-sandbox/<uid>``, the task uid's own."""
    with contextlib.suppress(FileExistsError):
        SCRATCH.mkdir(mode=0o711)
    st = os.lstat(SCRATCH)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise permanent(f"{SCRATCH} is not a folder of the worker's user; remove it")
    os.chmod(SCRATCH, 0o711)
    home = SCRATCH / str(uid)
    with contextlib.suppress(FileExistsError):
        home.mkdir(mode=0o700)
    hst = os.lstat(home)
    if not stat.S_ISDIR(hst.st_mode):
        raise permanent(f"{home} is not a folder; remove it")
    os.chown(home, uid, uid)
    return str(home)


# --------------------------------------------------------------------------- paths


def _searchable(st: os.stat_result, uid: int, gid: int) -> bool:
    mode = st.st_mode
    if st.st_uid == uid:
        return bool(mode & 0o100)
    if st.st_gid == gid:
        return bool(mode & 0o010)
    return bool(mode & 0o001)


def blocked_ancestor(path: str, uid: int, gid: int) -> str:
    """The first folder above ``path`` that ``uid`` may not search; empty when none."""
    parts = Path(path).parts
    current = "/"
    for part in parts[1:-1] if len(parts) > 1 else ():
        current = os.path.join(current, part)
        try:
            st = os.stat(current)
        except OSError:
            return ""
        if not _searchable(st, uid, gid):
            return current
    return ""


def _symlink_chain(path: str) -> list[str]:
    """``path``, each link it goes through, and where it ends (absolute, existing)."""
    chain: list[str] = []
    current = os.path.abspath(path)
    for _ in range(20):
        chain.append(current)
        if not os.path.islink(current):
            break
        target = os.readlink(current)
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    real = os.path.realpath(path)
    if real not in chain:
        chain.append(real)
    return [p for p in chain if os.path.exists(p)]


_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def command_paths(argv: list[str], path_env: str) -> list[str]:
    """Executables and files a command names: absolute paths, and command words found on
    PATH. For ``bash -c LINE`` the line is split too (best effort)."""
    words = list(argv)
    if len(argv) >= 3 and argv[1] == "-c":
        try:
            words = [argv[0], *shlex.split(argv[2], comments=True)]
        except ValueError:
            words = [argv[0], *argv[2].split()]
    found: list[str] = []
    for word in words:
        word = _ASSIGNMENT.sub("", word)
        if word.startswith("/") and word.strip("/"):
            if os.path.exists(word):
                found.append(word)
        elif word and "/" not in word and re.fullmatch(r"[\w.+-]+", word):
            where = shutil.which(word, path=path_env)
            if where:
                found.append(where)
    return found


def toolchain(paths: Iterable[str]) -> list[str]:
    """What must be visible for those commands to run: for ``…/bin/x`` its prefix
    (an interpreter needs its library), else the file itself; every link followed."""
    exposed: list[str] = []
    for p in paths:
        for element in _symlink_chain(p):
            parent = os.path.dirname(element)
            if os.path.isdir(element):
                exposed.append(element)
            elif os.path.basename(parent) == "bin" and os.path.dirname(parent) != "/":
                exposed.append(os.path.dirname(parent))
            else:
                exposed.append(element)
    return _outermost(exposed)


def _outermost(paths: Iterable[str]) -> list[str]:
    ordered = sorted(set(paths), key=lambda p: (_depth(p), p))
    kept: list[str] = []
    for p in ordered:
        if not any(_under(p, k) for k in kept):
            kept.append(p)
    return kept


def protected_files(worktree: str, globs: list[str]) -> list[str]:
    """Files of the worktree (outside ``.git``) that a ``protect`` glob matches."""
    if not globs:
        return []
    spec = pathspec.GitIgnoreSpec.from_lines(globs)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(worktree):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), worktree)
            if rel != ".git" and spec.match_file(rel):
                found.append(rel)
    return sorted(found)


def _git_dirs(worktree: str) -> list[str]:
    """The worktree's ``.git`` and the repository's git folder (``--git-common-dir``)."""
    dot_git = os.path.join(worktree, ".git")
    dirs = [dot_git] if os.path.lexists(dot_git) else []
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--git-dir", "--git-common-dir"],
            cwd=worktree,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env={"PATH": os.environ.get("PATH", DEFAULT_PATH), "GIT_CONFIG_NOSYSTEM": "1"},
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return dirs
    for line in out:
        if line.strip():
            dirs.append(os.path.realpath(os.path.join(worktree, line.strip())))
    return _outermost(dirs)


# --------------------------------------------------------------------------- the runner


@dataclass
class _Plan:
    mode: Literal["strict", "basic"]
    uid: int
    gid: int
    shared: str = ""
    """Why a basic run keeps the worker's uid (empty: it has the task's own)."""
    home: str = "/tmp"
    network: str = "host"
    binds: list[tuple[str, bool]] = field(default_factory=list)
    """(path, writable) bound at the same path (strict)."""
    hides: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)


def _state_path(pid_file: Path) -> Path:
    return pid_file.with_name(pid_file.name + ".sandbox.json")


def _fixed_args(seccomp_fd: int, *, network: str, tmp_bytes: int = 64 << 20) -> list[str]:
    args = [
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--perms", "1777", "--tmpfs", "/dev/shm",
        "--proc", "/proc",
        "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "loop-sandbox",
        "--new-session", "--die-with-parent",
        "--cap-drop", "ALL",
        "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
        "--seccomp", str(seccomp_fd),
    ]  # fmt: skip
    if network == "none":
        args.append("--unshare-net")
    return args


def _mount_args(plan: _Plan) -> list[str]:
    """Hides (tmpfs), the folders leading to mounts inside a tmpfs (made 0755, so the
    task's uid can walk to them), and the binds, parents first; then the hides turn
    read-only, so a write there fails loudly (EROFS)."""
    hides = [h for h in _outermost(plan.hides) if h != "/tmp"]
    bind_paths = [b for b, _ in plan.binds]
    ops: list[tuple[int, int, str, list[str]]] = []
    made: set[str] = set()

    def folders_to(path: str) -> None:
        inside = [h for h in (*hides, "/tmp") if _under(path, h) and path != h]
        if not inside:
            return
        current = max(inside, key=len)
        for part in Path(path).relative_to(current).parts[:-1]:
            current = os.path.join(current, part)
            if current in made or any(_under(current, b) for b in bind_paths):
                continue
            made.add(current)
            ops.append((_depth(current), 1, current, ["--perms", "0755", "--dir", current]))

    for h in hides:
        folders_to(h)
        ops.append((_depth(h), 0, h, ["--tmpfs", h]))
    for path, writable in plan.binds:
        folders_to(path)
        flag = "--bind" if writable else "--ro-bind"
        ops.append((_depth(path), 2, path, [flag, path, path]))
    ops.sort(key=lambda op: (op[0], op[1], op[2]))
    args = [a for *_, op in ops for a in op]
    for h in hides:
        args += ["--remount-ro", h]
    return args


def _limit(value: int, which: int) -> int:
    """A limit no higher than the worker's own hard limit (raising it needs privileges)."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


_SETRLIMIT = """
import os, resource, sys
n = int(sys.argv[1])
pairs, command = sys.argv[2 : 2 + 2 * n], sys.argv[2 + 2 * n :]
for name, value in zip(pairs[::2], pairs[1::2]):
    resource.setrlimit(getattr(resource, name), (int(value), int(value)))
os.execvp(command[0], command)
"""
"""Where ``prlimit`` is missing (basic mode only): the worker's Python sets them, then execs."""


def _prlimit(prlimit: str, limits: SandboxLimits, *, address_space: bool) -> list[str]:
    mb = 1024 * 1024
    values = {
        "nproc": _limit(limits.processes, resource.RLIMIT_NPROC),
        "cpu": _limit(limits.cpu_seconds, resource.RLIMIT_CPU),
        "fsize": _limit(limits.file_size_mb * mb, resource.RLIMIT_FSIZE),
        "nofile": _limit(limits.open_files, resource.RLIMIT_NOFILE),
        "core": 0,
    }
    if address_space:
        values["as"] = _limit(limits.memory_mb * mb, resource.RLIMIT_AS)
    if prlimit:
        return [prlimit, *(f"--{k}={v}" for k, v in values.items()), "--"]
    pairs = [a for k, v in values.items() for a in (f"RLIMIT_{k.upper()}", str(v))]
    return [sys.executable, "-I", "-S", "-c", _SETRLIMIT, str(len(values)), *pairs]


def _setpriv(setpriv: str, uid: int, gid: int) -> list[str]:
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


_JOIN = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
    'exec "$@"'
)
"""Join the run's cgroups, then become the command (so every descendant is a member)."""


def sandbox_env(policy: SandboxPolicy, home: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The fixed minimal set, the names the task passes through, then the caller's."""
    env = {
        "PATH": DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "USER": "loop",
        "LOGNAME": "loop",
        # The repository's git folder belongs to root: let the agent's git read it.
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
    }
    for name in (*PASSED_ENV, *policy.env):
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra)
    return env


def refused_writes(log_path: Path, worktree: str) -> list[str]:
    """Paths outside the worktree that the output says a write to was refused.

    Read-only file system (EROFS) is a refused write by definition; Permission denied
    (EACCES) may also be a refused read of something the task had no business reading.
    Inside the worktree the sandbox refuses only protected files: ``diff_scope``'s call.
    """
    try:
        with log_path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - REFUSED_SCAN_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = _REFUSAL.search(line)
        if not m or _LAUNCHER.search(line):
            continue
        why = (
            "Read-only file system"
            if "Read-only" in m.group(0) or "EROFS" in m.group(0)
            else ("Permission denied")
        )
        for groups in _QUOTED.findall(line):
            raw = next((g for g in groups if g), "")
            path = os.path.normpath(raw)
            if not path.startswith("/") or _under(path, worktree):
                continue
            if any(_under(path, p) for p in IGNORED_REFUSALS):
                continue
            found.setdefault(path, why)
            if len(found) >= MAX_REFUSED:
                break
    return [f"{p} ({why})" for p, why in found.items()]


def _plan(
    *,
    argv: list[str],
    host_root: bool,
    policy: SandboxPolicy,
    kind: Kind,
    worktree: str,
    task_id: str,
    readonly: list[str],
    writable: list[str],
    protected: list[str],
    hide: list[str],
    env_path: str,
) -> _Plan:
    uid = gid = task_uid(task_id) if host_root else os.getuid()
    network = policy.gate_network if kind == "gate" else policy.network
    # The task file's commands (agent, gates) are trusted to say what they need; a
    # ``run`` tool call is the model's, so it decides nothing: it gets the worker's
    # Python, whatever the command line names (else naming a file under /root would
    # show it, or make basic mode fall back to the worker's uid).
    trusted = argv if kind != "tool" else [sys.executable]
    covered = [*HIDDEN, *hide]
    tools = [
        t
        for t in toolchain(command_paths(trusted, env_path))
        if not any(_under(h, t) for h in covered)  # never a hidden folder or one above it
    ]
    if policy.mode == "basic":
        plan = _Plan(mode="basic", uid=uid, gid=gid, network=network)
        if not host_root:
            plan.shared = "the worker is not root"
        elif not shutil.which("setpriv"):
            plan.shared = "setpriv is not installed"
        else:
            for path in [worktree, *writable, *tools]:
                blocked = blocked_ancestor(path, uid, gid)
                if blocked:
                    mode = stat.S_IMODE(os.stat(blocked).st_mode)
                    plan.shared = f"uid {uid} cannot reach {path} ({blocked} is {mode:04o})"
                    break
        if plan.shared:
            plan.uid, plan.gid = os.getuid(), os.getgid()
        plan.protected = protected
        return plan
    plan = _Plan(mode="strict", uid=uid, gid=gid, network=network)
    extra = [os.path.realpath(os.path.expanduser(p)) for p in [*policy.readonly, *readonly]]
    needed: list[tuple[str, bool]] = [(worktree, kind != "gate")]
    needed += [(g, False) for g in _git_dirs(worktree)]
    needed += [(w, True) for w in writable]
    needed += [
        (p, False) for p in [*tools, *extra] if os.path.exists(p) and not _under(p, worktree)
    ]
    if network == "host" and os.path.islink("/etc/resolv.conf"):
        needed.append((os.path.realpath("/etc/resolv.conf"), False))
    hides = [h for h in (*HIDDEN, *hide) if os.path.isdir(h)]
    for path, _ in needed:
        if any(_under(path, h) for h in hides):
            continue
        blocked = blocked_ancestor(path, uid, gid)
        if blocked:
            hides.append(blocked)  # uid could not see past it anyway
    # /tmp is the private scratch, writable: what it holds of the host (LOOP_HOME in
    # tests, say) gets its own read-only tmpfs, so a write there fails as EROFS too.
    plan.hides = _outermost(r for r in (os.path.realpath(h) for h in hides) if r != "/tmp")
    binds: dict[str, bool] = {}
    for path, rw in needed:  # all of them, visible or not: the list is the sandbox's view
        binds[path] = binds.get(path, False) or rw
    if kind != "gate":
        for rel in protected:
            binds[os.path.join(worktree, rel)] = False
    plan.binds = sorted(binds.items(), key=lambda b: (_depth(b[0]), b[0]))
    plan.protected = protected
    return plan


def _describe(plan: _Plan, cg_note: str, level: str) -> str:
    who = f"uid={plan.uid}"
    if plan.shared:
        who += f" (the worker's: {plan.shared})"
    net = plan.network if plan.mode == "strict" else "host (basic does not isolate it)"
    return f"{plan.mode} {who} net={net} limits={cg_note}; host={level}"


async def run_sandboxed(
    argv: list[str],
    *,
    cwd: Path,
    policy: SandboxPolicy,
    kind: Kind,
    worktree: Path,
    task_id: str,
    limit_s: float,
    log_path: Path,
    pid_file: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    readonly: Iterable[Path | str] = (),
    writable: Iterable[Path | str] = (),
    protected: Iterable[str] = (),
    hide: Iterable[Path | str] = (),
    drop_env: tuple[str, ...] = (),
) -> ProcResult:
    """Run an agent, a ``run`` tool call or a ``run`` gate under ``policy``.

    ``writable`` folders (the attempt folder of an agent) are bound writable and
    shared with the task's uid; ``protected`` globs name worktree files that stay
    read-only; ``hide`` adds folders to cover (``LOOP_HOME``); ``readonly`` adds host
    paths to show; ``drop_env`` names prefixes that mode ``off`` (the worker's
    environment) leaves out besides LOOP_*. Raises a non-retryable ``ApplicationError``
    when strict is asked for and this host cannot give it.
    """
    extra = dict(extra_env or {})
    shared_dirs = [os.path.realpath(w) for w in writable]
    host = await asyncio.to_thread(inspect_host)
    if policy.mode == "off":
        hidden = ("LOOP_", *drop_env)
        env = {k: v for k, v in os.environ.items() if not k.startswith(hidden)}
        env.update(extra)
        ran = await run_process(
            argv, cwd=cwd, env=env, limit_s=limit_s, log_path=log_path, pid_file=pid_file
        )
        return ran.model_copy(update={"sandbox": f"off uid={os.getuid()}; host={host.level}"})
    if policy.mode == "strict" and host.strict_error:
        raise permanent(f"sandbox strict is not available on this host: {host.strict_error}")
    if pid_file is not None:
        await kill_leftovers(pid_file)
    top = os.path.realpath(worktree)
    plan = await asyncio.to_thread(
        _plan,
        argv=argv,
        host_root=host.root,
        policy=policy,
        kind=kind,
        worktree=top,
        task_id=task_id,
        readonly=[str(p) for p in readonly],
        writable=shared_dirs,
        protected=await asyncio.to_thread(protected_files, top, list(protected)),
        hide=[h for h in (os.path.realpath(h) for h in hide) if h != "/"],
        env_path=os.environ.get("PATH", DEFAULT_PATH),
    )
    own_uid = not plan.shared and plan.uid != os.getuid()
    if plan.mode == "basic":
        plan.home = await asyncio.to_thread(_scratch, plan.uid)
    env = sandbox_env(policy, plan.home, extra)

    state: dict[str, Any] = {"uid": plan.uid if own_uid else None, "cgroups": [], "lent": []}
    state_file = _state_path(pid_file) if pid_file is not None else None

    def save() -> None:
        if state_file is not None:
            state_file.parent.mkdir(parents=True, exist_ok=True)
            state_file.write_text(json.dumps(state))

    cg, cg_note = await asyncio.to_thread(
        Cgroup.create, f"loop-{plan.uid}-{uuid.uuid4().hex[:8]}", policy.limits
    )
    if cg is not None:
        state["cgroups"] = cg.dirs
    save()
    fd = -1
    try:
        if own_uid:
            # Recorded before anything changes: a crash half-way is undone by the retry.
            records = [_owner_record(top, "worktree")] if kind != "gate" else []
            records += [_owner_record(w, "folder") for w in shared_dirs]
            state["lent"] = records
            save()
            await _beating(_lend, records, plan)
        limits = _prlimit(host.prlimit, policy.limits, address_space=not (cg and cg.memory))
        inner = [*limits]
        if own_uid:
            inner += _setpriv(host.setpriv, plan.uid, plan.gid)
        inner += argv
        pass_fds: tuple[int, ...] = ()
        if plan.mode == "strict":
            fd = _seccomp_fd()
            pass_fds = (fd,)
            tmp_bytes = policy.limits.tmp_mb * 1024 * 1024
            command = [
                host.bwrap,
                *_fixed_args(fd, network=plan.network, tmp_bytes=tmp_bytes),
                *_mount_args(plan),
                "--chdir", os.path.realpath(cwd),
                "--clearenv",
                *[a for k, v in env.items() for a in ("--setenv", k, v)],
                "--",
                *inner,
            ]  # fmt: skip
        else:
            command = inner
        if cg is not None:
            command = [
                "/bin/sh",
                "-c",
                _JOIN,
                "loop-cgroup",
                str(len(cg.dirs)),
                *cg.procs_files,
                *command,
            ]
        ran = await run_process(
            command,
            cwd=cwd,
            env=env,
            limit_s=limit_s,
            log_path=log_path,
            pid_file=pid_file,
            pass_fds=pass_fds,
        )
    finally:
        if fd >= 0:
            os.close(fd)
        await asyncio.shield(_beating(_clean_up, state))
        if state_file is not None:
            state_file.unlink(missing_ok=True)
    # A command that never started (126/127) wrote nothing: its launcher's
    # "Permission denied" is about executing it, not a refused write.
    started = ran.exit_code not in (126, 127)
    refused = await asyncio.to_thread(refused_writes, log_path, top) if started else []
    return ran.model_copy(
        update={
            "sandbox": _describe(
                plan, f"{'prlimit' if host.prlimit else 'setrlimit'}+{cg_note}", host.level
            ),
            "refused": refused,
        }
    )


def _lend(records: list[dict[str, Any]], plan: _Plan) -> None:
    """Lend the worktree (writing kinds) and the writable folders to the task's uid."""
    for record in records:
        if record["what"] == "worktree":
            _lend_tree(record, plan.uid, plan.gid, set(plan.protected))
        else:
            _share_dir(record, plan.gid)


def _clean_up(state: Mapping[str, Any]) -> None:
    """Kill what is left of the run (task uid, cgroup), then take the folders back."""
    uid = state.get("uid")
    if uid is not None:
        kill_uid(int(uid))
    for d in state.get("cgroups") or []:
        cg = Cgroup(dirs=[d], memory=False, pids=False)
        cg.kill()
        cg.remove()
    if uid is not None:
        kill_uid(int(uid), wait_s=0.5)
    for record in reversed(state.get("lent") or []):
        with contextlib.suppress(OSError):
            _take_back(record)


async def _beating(fn: Any, *args: Any) -> Any:
    """Run ``fn`` in a thread, heartbeating meanwhile (a big worktree takes a while)."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    while True:
        heartbeat()
        done, _ = await asyncio.wait({work}, timeout=HEARTBEAT_EVERY_S)
        if done:
            return work.result()


async def kill_leftovers(pid_file: Path) -> bool:
    """What a crashed earlier try left behind: its process group (``kill_stale``), every
    process of its uid and cgroup, and the worktree it had lent out. True if any."""
    found = kill_stale(pid_file)
    state_file = _state_path(pid_file)
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return found
    await _beating(_clean_up, state)
    state_file.unlink(missing_ok=True)
    return True
