"""``run_sandboxed``: how every untrusted command starts (agents, the run tool, gates, CI).

One typed request (``SandboxRun``) in, one ``ProcResult`` out. For ``basic`` and
``strict`` the steps are the same:

1. kill what a crashed earlier try of the same run left (its pid and state files
   live in ``state_dir``, a folder of the worker's that no task uid can write);
2. lease the task's uid; work out the file view (``mounts``) and check the command
   can run as that uid, or fail for good (the task ends BLOCKED with the reason);
3. record what will be changed (state file), make the run's cgroup, lend the
   worktree to the uid (not for gates: they read), give it its own places;
4. start the launcher (forked by the worker's ``zygote``), which confines itself and
   execs the command; for a ``proxy``
   network, relay its connections to the egress proxy under a ticket;
5. afterwards, kill every process of the uid and the cgroup, take the worktree back,
   and read what the proxy refused and which writes the output says were refused.

The command's environment is built here from nothing (``sandbox_env``), sent to the
zygote beside the plan, never on a command line; the worker's Temporal
credentials and the codec key are never in it, and files holding them are covered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activities.host.gateway import GATEWAY, GATEWAY_PORT, GATEWAY_URL, Grant, host_listener
from activities.host.proc import (
    HEARTBEAT_EVERY_S,
    Proc,
    ProcResult,
    heartbeat,
    kill_stale,
    run_process,
)
from activities.host.sandbox import cgroups, egress, known, laid, launcher, ownership, seccomp, uids
from activities.host.sandbox.capabilities import Capabilities, Kind
from activities.host.sandbox.credentials import refusal as credential_refusal
from activities.host.sandbox.credentials import secret_files
from activities.host.sandbox.laid import Laid
from activities.host.sandbox.mounts import View, plan_view
from activities.host.sandbox.paths import (
    DEFAULT_PATH,
    cannot_execute,
    command_paths,
    git_dirs,
    protected_files,
    sandbox_path,
    toolchain,
    under,
)
from activities.host.sandbox.probe import inspect_host
from activities.host.sandbox.refusals import refused_protected, refused_writes
from activities.host.sandbox.zygote import ZYGOTE
from loop.contracts import SETUP_TREE, SandboxPolicy, Workspace
from loop.errors import permanent
from loop.rules.commands import programs

PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
"""The fixed minimal set passed through from the worker (``sandbox.env`` adds names)."""
SCRATCH = "/tmp"
"""TMPDIR of every run: a private tmpfs, fresh per run."""
SETUP_EXIT_S = 5.0
"""How long a launcher that could not set up is given to end before the run fails."""
FRESH_HOME = "/tmp/home"
"""HOME of gates: not there until something makes it, in a /tmp that is new each run."""


@dataclass
class SandboxRun:
    """One untrusted command and everything the sandbox needs to know about it."""

    argv: list[str]
    kind: Kind
    """``agent`` and ``tool`` may write the tree; ``gate`` (and CI) only read it."""
    policy: SandboxPolicy
    task_id: str
    """Whose uid it runs as (the lease's holder)."""
    home: Path
    """LOOP_HOME: hidden from the command."""
    tree: Path
    """The worktree (or the checkout a gate judges): the command's cwd."""
    state_dir: Path
    """The worker's own folder for this run's log, pid and state files."""
    name: str
    """The files' stem in ``state_dir`` (``agent``, ``gate-tests``, ``step-0003.tool-0``)."""
    limit_s: float
    env: dict[str, str] = field(default_factory=dict)
    """Added to the minimal environment (the LOOP_* of the protocol)."""
    writable: list[Path] = field(default_factory=list)
    """The agent's own folders (its output folder): given to the task's uid."""
    readable: list[Path] = field(default_factory=list)
    """Worker files the command may read (the prompt): shown read-only."""
    agent_home: Path | None = None
    """HOME of agents and the run tool (kept between their runs); gates get a fresh one."""
    protected: list[str] = field(default_factory=list)
    """Globs of worktree files that stay read-only for writing kinds."""
    allow_hosts: list[str] = field(default_factory=list)
    """Beyond ``policy.allow_hosts``: the openai backend's own endpoint."""
    drop_env: tuple[str, ...] = ()
    """Mode ``off`` only: prefixes left out of the worker's environment besides LOOP_*."""
    probe: list[str] | None = None
    """Run this instead of ``argv``, in the sandbox planned for ``argv`` (``missing_programs``)."""
    pass_fds: tuple[int, ...] = ()
    """Descriptors of the worker's the command inherits (a gate's report channel)."""
    hidden: list[Path] = field(default_factory=list)
    """Host folders covered besides LOOP_HOME: the repository a task's clone came from,
    which holds other tasks' branches once they are handed over."""
    gateway: Grant | None = None
    """The agent's model calls go through the worker's gateway under this grant."""
    environment: Laid | None = None
    """The repository's environment, laid read-only into the tree (``laid``)."""
    builds: bool = False
    """The run is an environment's setup: its tree is at ``SETUP_TREE`` too, its cwd."""

    @property
    def launched(self) -> list[str]:
        return self.probe or self.argv

    @property
    def log_path(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def state_file(self) -> Path:
        return self.state_dir / f"{self.name}.sandbox.json"

    @functools.cached_property
    def can(self) -> Capabilities:
        """What this run may do (its level and kind, worked out once)."""
        return Capabilities.of(self.policy, self.kind)


def hidden_for(ws: Workspace) -> list[Path]:
    """What a task's commands must not see besides LOOP_HOME: the repository its clone came
    from (other tasks' handed-over branches are there; a worktree's own repository cannot
    be hidden from it)."""
    return [Path(ws.repo)] if ws.isolated else []


def sandbox_env(policy: SandboxPolicy, home: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The fixed minimal set, the names the task passes through, then the caller's."""
    env = {
        "PATH": DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "HOME": home,
        "TMPDIR": SCRATCH,
        "USER": "loop",
        "LOGNAME": "loop",
        # The repository's git folder belongs to root: let the agent's git read it. An
        # identity too: agent CLIs (aider) write one into the repository's config when
        # git has none, which the sandbox refuses, and they stop.
        "GIT_CONFIG_COUNT": "3",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
        "GIT_CONFIG_KEY_1": "user.name",
        "GIT_CONFIG_VALUE_1": "Loopwork agent",
        "GIT_CONFIG_KEY_2": "user.email",
        "GIT_CONFIG_VALUE_2": "agent@loopwork.invalid",
    }
    for name in (*PASSED_ENV, *policy.env):
        if name in os.environ:
            env[name] = os.environ[name]
    env["PATH"] = sandbox_path(env["PATH"], dict(os.environ))
    env.update(extra)
    return env


def _rlimits(policy: SandboxPolicy, memory_cgroup: bool) -> dict[str, int]:
    mb = 1024 * 1024
    limits = policy.limits
    values = {
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_FSIZE": limits.file_size_mb * mb,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    if not memory_cgroup:
        values["RLIMIT_AS"] = limits.memory_mb * mb
    return values


def _resolve(argv0: str, cwd: str, path_env: str) -> str:
    if "/" in argv0:
        return os.path.normpath(os.path.join(cwd, argv0))
    return shutil.which(argv0, path=path_env) or ""


@dataclass
class _Prepared:
    """A run's confinement, worked out and checked before anything changes."""

    level: str
    uid: int
    tree: str
    env: dict[str, str]
    view: View
    keep: list[str]
    places: list[str]
    cwd: str


async def _prepare(run: SandboxRun) -> _Prepared | None:
    """The confinement of ``run`` (None for mode ``off``), or a permanent error saying why
    it cannot run here: the host lacks the mode, the command is missing, or the task's
    uid may not execute it."""
    host = await asyncio.to_thread(inspect_host)
    policy, can = run.policy, run.can
    if not can.confined:
        if not _resolve(run.argv[0], str(run.tree), os.environ.get("PATH", DEFAULT_PATH)):
            raise permanent(f"{run.kind} command not found: {run.argv[0]!r}")
        return None
    missing = host.unavailable(can.level)
    if missing:
        raise permanent(missing)
    # Checked at worker start too; a key given a second name since then is caught here.
    leak = await asyncio.to_thread(credential_refusal)
    if leak:
        raise permanent(f"the sandbox cannot keep the worker's credentials out: {leak}")
    uid = gid = await asyncio.to_thread(uids.lease, run.home, run.task_id)
    tree = os.path.realpath(run.tree)
    home = str(run.agent_home) if run.agent_home is not None and can.keeps_home else FRESH_HOME
    extra = dict(run.env)
    if can.own_site:
        extra["PYTHONNOUSERSITE"] = "1"
    if can.network == "proxy":
        extra.update(egress.proxy_env())
    if run.gateway is not None and _gateway_inside(run):
        extra.update(run.gateway.env(GATEWAY_URL))
        # The gateway is on the namespace's own loopback, not behind the egress proxy
        # (which would look for it on the host's); nothing else listens there.
        extra["NO_PROXY"] = extra["no_proxy"] = "127.0.0.1,localhost"
    env = sandbox_env(policy, home, extra)
    places = [os.path.realpath(p) for p in run.writable]
    if home != FRESH_HOME:
        places.append(os.path.realpath(home))

    home_dir = os.path.realpath(run.home)
    lay = run.environment

    def plan() -> tuple[View, list[str]]:
        # A run tool call is the model's: it names nothing into view, whatever it says.
        trusted = run.argv if can.trusts_argv else [sys.executable, "bash"]
        # LOOP_HOME is the worker's: naming a path in it shows nothing of it.
        named = [p for p in command_paths(trusted, env["PATH"]) if not under(p, home_dir)]
        shown = [p for p in toolchain(named) if not under(p, home_dir)]
        shown += [os.path.expanduser(p) for p in policy.readonly]
        shown += [os.path.realpath(p) for p in run.readable]
        shown += list(lay.shows) if lay is not None else []
        keep = protected_files(tree, run.protected) if can.writes_tree else []
        view = plan_view(
            strict=can.namespaces,
            uid=uid,
            gid=gid,
            tree=tree,
            tree_writable=can.writes_tree,
            read_only=[*git_dirs(tree), *(os.path.realpath(p) for p in shown)],
            writable=places,
            protected=keep,
            hide=[home_dir, *(os.path.realpath(p) for p in run.hidden)],
            secrets=secret_files(),
            tmp_bytes=policy.limits.tmp_mb * 1024 * 1024,
            shared=list(host.shared),
            laid=lay.binds(tree) if lay is not None else [],
            tree_link=SETUP_TREE if lay is not None else "",
            tree_also=SETUP_TREE if run.builds else "",
        )
        return view, keep

    view, keep = await asyncio.to_thread(plan)
    program = _resolve(run.argv[0], tree, env["PATH"])
    if not program:
        raise permanent(
            f"{run.kind} command not found: {run.argv[0]!r} (the sandbox's PATH is {env['PATH']})"
        )
    if not under(program, tree):
        why = await asyncio.to_thread(cannot_execute, program, uid, gid)
        if why:
            raise permanent(f"the sandbox cannot start the {run.kind}: {why}")
    cwd = SETUP_TREE if run.builds else tree
    return _Prepared(host.level, uid, tree, env, view, keep, places, cwd)


def _gateway_inside(run: SandboxRun) -> bool:
    """The gateway can listen in the run's own network namespace (the launcher makes one
    unless the run is unconfined or shares the host's network)."""
    return run.can.confined and run.can.network != "host"


async def check_runnable(run: SandboxRun) -> None:
    """Raise the permanent reason ``run`` could not start here; run nothing."""
    await _prepare(run)


PROBE_SCRIPT = (
    'for w; do case "$w" in */*) [ -f "$w" ] && [ -x "$w" ] ;; '
    '*) command -v "$w" >/dev/null 2>&1 ;; esac || printf "missing:%s\\n" "$w"; done'
)
"""A name is looked up on PATH (``command -v`` checks execute permission there); a path
is checked as itself, since ``command -v`` answers for any path that exists."""
PROBE_LIMIT_S = 20


async def missing_programs(run: SandboxRun) -> list[str]:
    """The programs ``run`` names (``paths.programs``) that its own sandbox, as its uid,
    cannot find or execute; runs a probe, never the command. Relative paths are left
    out: the agent may be the one to write them."""
    words = [w for w in programs(run.argv) if "/" not in w or w.startswith("/")]
    key = await asyncio.to_thread(_probe_key, run, words)
    if key is not None and known.remembered(key):
        return []
    probe = dataclasses.replace(
        run,
        kind="gate",  # reads the tree: nothing to lend, nothing to take back
        probe=["/bin/sh", "-c", PROBE_SCRIPT, "probe", *words],
        name=f"{run.name}-probe",
        limit_s=PROBE_LIMIT_S,
        writable=[],
        agent_home=None,
        pass_fds=(),
        gateway=None,
    )
    ran = await run_sandboxed(probe)
    if ran.timed_out or ran.exit_code != 0:
        raise permanent(f"the sandbox could not run a probe of the {run.kind}: {ran.output_tail}")
    lines = Path(ran.log_path).read_text(errors="replace").splitlines()
    missing = [line.removeprefix("missing:") for line in lines if line.startswith("missing:")]
    if key is not None and not missing:
        known.remember(key)
    return missing


def _probe_key(run: SandboxRun, words: list[str]) -> tuple[object, ...] | None:
    """What a probe of ``words`` for ``run`` depends on (``known``), taken before it runs;
    None when it must run every time. The task's tree is not in it (a program there makes
    no key), so later tasks of the same repository and commands are answered from it."""
    can = run.can
    path_env = (
        sandbox_env(run.policy, FRESH_HOME, run.env)["PATH"]
        if can.confined
        else {**os.environ, **run.env}.get("PATH", DEFAULT_PATH)
    )
    avoid = [
        os.path.realpath(p)
        for p in (run.tree, run.home, *run.hidden, *run.writable, run.agent_home)
        if p is not None
    ]
    found = known.fingerprint(words, path_env, avoid)
    if found is None:
        return None
    files, per_uid = found
    uid = uids.lease(run.home, run.task_id) if per_uid and can.confined else None
    rules = run.policy  # the whole policy: every field of it shapes the sandbox
    return (
        can.level,
        run.kind,
        uid,
        rules.model_dump_json(),
        tuple(run.argv),
        tuple(words),
        path_env,
        os.path.realpath(run.home),
        tuple(os.path.realpath(p) for p in run.hidden),  # the view covers these
        tuple(os.path.realpath(p) for p in run.readable),
        run.environment,
        inspect_host().bwrap,
        files,
    )


async def run_sandboxed(run: SandboxRun) -> ProcResult:
    """Run one untrusted command under ``run.policy``; see the module docstring.

    Raises a non-retryable ``ApplicationError`` when the host cannot give the mode,
    or the task's uid cannot run the command: retrying cannot fix either.
    """
    if run.gateway is not None and not _gateway_inside(run):
        # No namespace of its own to listen in: a port on the host's loopback, guarded by
        # the run's token alone.
        grant, listener = run.gateway, host_listener()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        hidden = (*run.drop_env, *([grant.key_variable] if grant.key_variable else []))
        bare = dataclasses.replace(
            run, gateway=None, env={**run.env, **grant.env(url)}, drop_env=hidden
        )
        async with GATEWAY.serving(listener, grant):
            return await run_sandboxed(bare)
    policy = run.policy
    run.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    await kill_leftovers(run.state_dir, run.name)
    ready = await _prepare(run)
    if ready is None:
        for place in [*run.writable, *([run.agent_home] if run.agent_home else [])]:
            place.mkdir(parents=True, exist_ok=True, mode=0o700)
        dropped = ("LOOP_", *run.drop_env)
        env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
        env.update(run.env)
        tree_path = str(run.tree)
        linked = (
            await asyncio.to_thread(laid.places, tree_path, run.environment, links=True)
            if run.environment is not None
            else []
        )
        try:
            ran = await run_process(
                run.launched,
                cwd=run.tree,
                env=env,
                limit_s=run.limit_s,
                log_path=run.log_path,
                pid_file=run.pid_file,
                pass_fds=run.pass_fds,
            )
        finally:
            await asyncio.to_thread(laid.remove, tree_path, linked)
        level = (await asyncio.to_thread(inspect_host)).level
        return ran.model_copy(update={"sandbox": f"off uid={os.getuid()}; host={level}"})
    uid = gid = ready.uid
    tree, env, view, keep, places = ready.tree, ready.env, ready.view, ready.keep, ready.places
    can = run.can

    state: dict[str, Any] = {"uid": uid, "cgroups": [], "lent": [], "laid": []}

    def save() -> None:
        run.state_file.write_text(json.dumps(state))

    cg, cg_note = await asyncio.to_thread(
        cgroups.Cgroup.create, f"loop-{uid}-{uuid.uuid4().hex[:8]}", policy.limits
    )
    state["cgroups"] = cg.dirs if cg is not None else []
    save()
    seccomp_fd = -1
    launch: launcher.Launch | None = None
    exec_failure, exec_code = "", 0
    network_refused: list[str] = []
    try:
        # Recorded before anything changes: a crash half-way is undone by the retry.
        state["lent"] = [ownership.record(tree, keep)] if can.writes_tree else []
        if run.environment is not None:
            state["laid"] = [tree, []]
            save()
            state["laid"][1] = await asyncio.to_thread(laid.places, tree, run.environment)
        save()
        await _beating(_lend, state["lent"], places, uid, gid, set(keep))
        seccomp_fd = seccomp.memfd()
        launch = launcher.prepare(
            launcher.plan(
                mode=can.level,
                uid=uid,
                gid=gid,
                network=can.network,
                ops=view.operations(),
                cwd=ready.cwd,
                argv=run.launched,
                rlimits=_rlimits(policy, bool(cg and cg.memory)),
                cgroup_procs=cg.procs_files if cg is not None else [],
                seccomp_fd=seccomp_fd,
                bwrap=inspect_host().bwrap,
                setpriv=inspect_host().setpriv,
                proxy_port=egress.PROXY_PORT,
                gateway_port=GATEWAY_PORT if run.gateway is not None else 0,
            ),
            extra_fds=(seccomp_fd, *run.pass_fds),
        )
        async with contextlib.AsyncExitStack() as stack:
            relay: list[egress.Egress] = []

            async def started(proc: Proc) -> None:
                assert launch is not None
                launch.close_child_fds()
                setup = await asyncio.to_thread(launcher.read_setup, launch.control)
                if setup.listener is not None:
                    relay.append(
                        await stack.enter_async_context(
                            egress.serving(
                                setup.listener,
                                task_id=run.task_id,
                                kind=run.kind,
                                allow=[*policy.allow_hosts, *run.allow_hosts],
                            )
                        )
                    )
                if setup.gateway is not None and run.gateway is not None:
                    await stack.enter_async_context(GATEWAY.serving(setup.gateway, run.gateway))
                if not setup.ready:
                    # Its end first: a launcher killed because its zygote ended is
                    # ``ProcessLost`` (retried), not a sandbox this host cannot set up.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), SETUP_EXIT_S)
                    raise permanent(f"the sandbox could not be set up: {setup.error}")

            ran = await run_process(
                run.launched,
                cwd=Path(tree),
                env=env,
                limit_s=run.limit_s,
                log_path=run.log_path,
                pid_file=run.pid_file,
                spawn=functools.partial(ZYGOTE.spawn, launch),
                started=started,
            )
            exec_failure, exec_code = launcher.read_exec_failure(launch.control)
        network_refused = relay[0].refused if relay else []
    finally:
        if launch is not None:
            launch.close()
        if seccomp_fd >= 0:
            os.close(seccomp_fd)
        removed = await asyncio.shield(_beating(_clean_up, state))
        run.state_file.unlink(missing_ok=True)
    # A command that never started wrote nothing: its launcher's "Permission denied" is
    # about executing it, not a refused write.
    # The tree is also at SETUP_TREE in a run with an environment (a link): a path there
    # is the tree's.
    aliases = (SETUP_TREE,) if run.environment is not None or run.builds else ()
    refused = (
        [] if exec_failure else await asyncio.to_thread(refused_writes, run.log_path, tree, aliases)
    )
    tried = (
        await asyncio.to_thread(refused_protected, run.log_path, tree, keep, aliases)
        if keep
        else []
    )
    who = f"uid={uid}"
    return ran.model_copy(
        update={
            "exit_code": exec_code if exec_failure else ran.exit_code,
            "not_started": exec_failure,
            "sandbox": f"{can.level} {who} net={can.network} limits=rlimits+{cg_note}; "
            f"host={ready.level}",
            "refused": refused,
            "refused_protected": tried,
            "network_refused": network_refused,
            "removed": removed,
        }
    )


def _lend(
    lent: list[dict[str, Any]], places: list[str], uid: int, gid: int, keep: set[str]
) -> None:
    for record in lent:
        ownership.lend_tree(record, uid, gid, keep)
    for place in places:
        ownership.give(place, uid, gid)


def _clean_up(state: Mapping[str, Any]) -> list[str]:
    """Kill what is left of the run (task uid, cgroup), then take the worktree back; the
    paths of repositories the run made inside it, which are removed.

    Where the run has cgroups it is killed through them, and once they are empty and
    removed nothing of it is left (``cgroups.killed_and_removed``): no process is started
    to kill by uid and ``/proc`` is not read (the two sweeps of the uid cost ~18 ms CPU a
    run). With no cgroup, or members that outlive the cgroup kill, the uid is killed and
    swept as before."""
    uid = state.get("uid")
    dirs = [str(d) for d in state.get("cgroups") or []]
    if not (isinstance(uid, int) and cgroups.killed_and_removed(dirs)):
        if isinstance(uid, int):
            uids.kill_uid(uid)
        cgroups.kill_recorded(dirs)
        if isinstance(uid, int):
            uids.sweep(uid)  # raises while one lives: the worktree is not taken back under it
    removed: list[str] = []
    for record in reversed(state.get("lent") or []):
        with contextlib.suppress(OSError):
            removed += ownership.take_back(record)
    made = state.get("laid") or []
    if len(made) == 2 and isinstance(made[0], str) and isinstance(made[1], list):
        laid.remove(made[0], [str(p) for p in made[1]])
    return removed


async def _beating(fn: Any, *args: Any) -> Any:
    """Run ``fn`` in a thread, heartbeating meanwhile (a big worktree takes a while)."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    while True:
        heartbeat()
        done, _ = await asyncio.wait({work}, timeout=HEARTBEAT_EVERY_S)
        if done:
            return work.result()


async def kill_leftovers(state_dir: Path, name: str) -> bool:
    """What a crashed earlier try of this run left behind: its process group, every
    process of its uid and cgroup, and the worktree it had lent out. True if any."""
    pid_file = state_dir / f"{name}.pid"
    state_file = state_dir / f"{name}.sandbox.json"
    found = kill_stale(pid_file)
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return found
    await _beating(_clean_up, state)
    state_file.unlink(missing_ok=True)
    return True
