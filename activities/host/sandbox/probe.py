"""What this host can confine, found by trying: ``loop doctor`` prints it, runs rely on it.

Each level is tried the way real runs use it (the launcher, and bubblewrap for
strict, starting ``/bin/true`` as a task uid in a network namespace of its own),
so a host that lacks a piece says which. A task that asks for a level the host
cannot give ends BLOCKED with that reason; nothing runs with less.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from activities.host.proc import ProcessLost
from activities.host.sandbox import cgroups, launcher, seccomp
from activities.host.sandbox.mounts import plan_view
from activities.host.sandbox.paths import DEFAULT_PATH, world_writable_folders
from activities.host.sandbox.uids import UID_BASE, UID_SPAN
from activities.host.sandbox.zygote import ZYGOTE
from loop.contracts import SandboxLevel

Level = SandboxLevel
PROBE_UID = UID_BASE + UID_SPAN
"""Outside the leased range: a trial never runs as a uid some task holds."""


def bwrap_path() -> str:
    """bubblewrap: ``LOOP_BWRAP`` when set (a test points it at nothing), else on PATH."""
    configured = os.environ.get("LOOP_BWRAP")
    if configured:
        return configured
    return shutil.which("bwrap") or ""


@dataclass(frozen=True)
class HostSupport:
    """What this host can do; ``level`` is what ``loop doctor`` prints."""

    level: Level
    root: bool
    bwrap: str
    bwrap_version: str
    bwrap_error: str
    basic_trial: str
    """Why the basic trial failed; empty when it ran."""
    setpriv: str
    userns: str
    cgroup: str
    seccomp: bool
    shared: tuple[str, ...] = ()
    """Folders any user may write, each a private tmpfs in basic."""

    @property
    def basic_error(self) -> str:
        """Why ``basic`` (and so ``strict``) is not available here; empty when it is."""
        if not self.root:
            return (
                "each task runs as a uid of its own, which needs a root worker "
                f"(this one runs as uid {os.getuid()})"
            )
        if not self.seccomp:
            return f"no seccomp filter for {platform.machine()}"
        return self.basic_trial

    @property
    def strict_error(self) -> str:
        """Why ``strict`` is not available here; empty when it is."""
        if self.basic_error:
            return self.basic_error
        if not self.bwrap:
            return "bubblewrap (bwrap) is not installed"
        if self.bwrap_error:
            return self.bwrap_error
        if not self.setpriv:
            return "setpriv (util-linux) is needed inside the sandbox"
        return ""

    def unavailable(self, mode: str) -> str:
        """Why ``mode`` cannot run here, with what to do about it; empty when it can."""
        if mode == SandboxLevel.STRICT and self.strict_error:
            return f"sandbox strict is not available on this host: {self.strict_error}"
        if mode == SandboxLevel.BASIC and self.basic_error:
            return (
                f"sandbox basic is not available on this host: {self.basic_error}; "
                "run the worker as root, or set sandbox.mode: off (the agent then runs "
                "as the worker, with its network and files)"
            )
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
            + ("" if self.root else " (not root: no per-task uid, so only mode off)"),
            "namespaces (network, mount) for a task uid: "
            + ("yes" if self.root and not self.basic_trial else self.basic_error or "no"),
            f"setpriv: {self.setpriv or 'not found'}",
            f"user namespaces: {self.userns}",
            f"seccomp filter: {'yes' if self.seccomp else 'no'} ({platform.machine()})",
            f"cgroups: {self.cgroup}",
            "world-writable folders (private in basic): " + (", ".join(self.shared) or "none"),
        ]


GUARANTEES: dict[SandboxLevel, list[str]] = {
    SandboxLevel.STRICT: [
        "runs as the task's own leased uid, never root or the worker; no capabilities",
        "host read-only; /home, /root, /run, LOOP_HOME hidden; private /tmp",
        "own network: none, or HTTP(S) to allow_hosts through the egress proxy",
        "own pid namespace; no new user namespaces (seccomp); limits and a cgroup",
        "gates run on a clean read-only checkout of the attempt's commit",
    ],
    SandboxLevel.BASIC: [
        "runs as the task's own leased uid, never root or the worker; no capabilities",
        "ordinary file permissions; LOOP_HOME and unreachable folders hidden; private /tmp",
        "own network: none, or HTTP(S) to allow_hosts through the egress proxy",
        "no new user namespaces (seccomp); limits and a cgroup; no pid namespace",
        "gates run on a clean read-only checkout of the attempt's commit",
    ],
    SandboxLevel.OFF: [
        "nothing: the agent runs as the worker, with its files, network and environment "
        "(minus LOOP_*); only for trusted agents (autonomy: report, or allow_unsafe_off)",
    ],
}
"""What each level promises on a host that supports it (docs/concepts/trust-boundary.md)."""


def _trial(mode: Level, bwrap: str, setpriv: str) -> str:
    """Start ``/bin/true`` the way a real run would; the reason it failed, or empty."""
    program = seccomp.program()
    if program is None:
        return f"no seccomp filter for {platform.machine()}"
    tree = tempfile.mkdtemp(prefix="loop-probe-")
    os.chmod(tree, 0o755)
    fd = seccomp.memfd()
    view = plan_view(
        strict=mode == SandboxLevel.STRICT,
        uid=PROBE_UID,
        gid=PROBE_UID,
        tree=tree,
        tree_writable=False,
        read_only=[],
        writable=[],
        protected=[],
        hide=[],
        secrets=[],
        tmp_bytes=16 << 20,
    )
    plan = launcher.plan(
        mode=mode,
        uid=PROBE_UID,
        gid=PROBE_UID,
        network="none",
        ops=view.operations(),
        cwd=tree,
        argv=["/bin/true"],
        rlimits={},
        cgroup_procs=[],
        seccomp_fd=fd,
        bwrap=bwrap,
        setpriv=setpriv,
    )
    launch = launcher.prepare(plan, extra_fds=(fd,))
    log = os.memfd_create("loop-probe-log", os.MFD_CLOEXEC)
    try:
        child = ZYGOTE.start(launch, Path(tree), {"PATH": DEFAULT_PATH}, log)
        launch.close_child_fds()
        setup = launcher.read_setup(launch.control, 20)
        code = child.wait(20)
        os.lseek(log, 0, os.SEEK_SET)
        out = os.read(log, 1 << 16)
    except (OSError, RuntimeError, ProcessLost) as e:
        return f"the sandbox does not start: {e}"
    finally:
        launch.close()
        os.close(log)
        os.close(fd)
        os.rmdir(tree)
    if setup.error:
        return setup.error
    if code != 0:
        lines = out.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"the trial sandbox exited {code}"
    return ""


def _bwrap_version(bwrap: str) -> tuple[str, str]:
    """(version, error)."""
    if not os.path.exists(bwrap):
        where = " (LOOP_BWRAP)" if os.environ.get("LOOP_BWRAP") else ""
        return "", f"bubblewrap not found at {bwrap}{where}"
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError as e:
        return "", f"cannot run {bwrap}: {e.strerror or e}"
    return out.stdout.strip().removeprefix("bubblewrap ").strip() or "unknown version", ""


def _userns() -> str:
    try:
        n = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        return "unknown"
    if n <= 0:
        return "disabled (user.max_user_namespaces = 0; not needed by a root worker)"
    return "available (not needed by a root worker; refused inside the sandbox)"


@functools.lru_cache(maxsize=8)
def _inspect(bwrap: str) -> HostSupport:
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") or ""
    basic = _trial(SandboxLevel.BASIC, "", "") if root else "not root"
    version, bw_error = _bwrap_version(bwrap) if bwrap else ("", "")
    if bwrap and not bw_error and root and not basic:
        if not setpriv:
            bw_error = "setpriv (util-linux) is needed inside the sandbox"
        else:
            failed = _trial(SandboxLevel.STRICT, bwrap, setpriv)
            bw_error = f"bubblewrap cannot make a sandbox here: {failed}" if failed else ""
    host = HostSupport(
        level=SandboxLevel.OFF,
        root=root,
        bwrap=bwrap,
        bwrap_version=version,
        bwrap_error=bw_error,
        basic_trial=basic if root else "",
        setpriv=setpriv,
        userns=_userns(),
        cgroup=cgroups.probe() if root else "not used (the worker is not root)",
        seccomp=seccomp.program() is not None,
        shared=tuple(world_writable_folders()) if root else (),
    )
    level = (
        SandboxLevel.OFF
        if host.basic_error
        else SandboxLevel.BASIC
        if host.strict_error
        else SandboxLevel.STRICT
    )
    return dataclasses.replace(host, level=level)


def inspect_host() -> HostSupport:
    """What this host supports (cached per bubblewrap path)."""
    return _inspect(bwrap_path())


def host_record() -> dict[str, str]:
    """For the worker's start-up log line: the level and why."""
    host = inspect_host()
    return {"level": host.level, "why": "; ".join(host.lines())}
