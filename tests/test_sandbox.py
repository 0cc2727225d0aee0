"""The sandbox (issue 7): one runner for agents, the ``run`` tool and ``run`` gates.

The runner is tested directly for what one process can show (environment, network,
limits, escapes); real tasks through a worker show what a task sees (refused writes
recorded and BLOCKED, a fork bomb next to a task that completes, a cancel that
leaves nothing behind, strict without bubblewrap ending BLOCKED). basic mode's own
uid is tested in a folder every uid can search (pytest's tmp folders are 0700).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities import sandbox
from activities.gates import run_gate
from activities.sandbox import kill_leftovers, refused_writes, run_sandboxed, task_uid
from activities.tools import execute
from loop.contracts import (
    QUERY_STATUS,
    Gate,
    SandboxPolicy,
    TaskSpec,
    TaskState,
    TaskStatus,
    ToolPolicy,
    Workspace,
)
from loop.errors import PERMANENT
from loop.settings import Settings
from loop.tasks import start_task
from tests.conftest import COMPLETE_FIX, git, task
from worker import build_worker

HOST = sandbox.inspect_host()
needs_strict = pytest.mark.skipif(
    HOST.level != "strict", reason=f"strict sandbox unavailable here: {HOST.strict_error}"
)
needs_root = pytest.mark.skipif(not HOST.root, reason="a per-task uid needs a root worker")
pytestmark = [pytest.mark.timeout(90)]

STRICT = SandboxPolicy(mode="strict")


# --------------------------------------------------------------------------- fixtures


class Tree:
    """A repository, a worktree of it and a LOOP_HOME, under ``root``."""

    def __init__(self, root: Path, task_id: str = "sbx") -> None:
        self.root = root
        self.task_id = task_id
        self.repo = root / "repo"
        self.home = root / "home"
        self.wt = self.home / "worktrees" / task_id
        self.attempt = self.home / "runs" / task_id / "attempt-1"
        self.attempt.mkdir(parents=True)
        (self.repo / "tests").mkdir(parents=True)
        (self.repo / "app.py").write_text("x = 1\n")
        (self.repo / "tests" / "test_app.py").write_text("def test_x():\n    pass\n")
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", "base")
        git(self.repo, "worktree", "add", "-q", "-b", f"loop/{task_id}", str(self.wt))

    async def run(
        self, command: str, policy: SandboxPolicy = STRICT, kind: str = "agent", **kw: object
    ):
        options: dict = {
            "cwd": self.wt,
            "policy": policy,
            "kind": kind,
            "worktree": self.wt,
            "task_id": self.task_id,
            "limit_s": 30,
            "log_path": self.attempt / f"run-{uuid.uuid4().hex[:6]}.log",
            "pid_file": self.attempt / "run.pid",
            "hide": [self.home],
            "writable": [self.attempt] if kind == "agent" else [],
            "protected": ["tests/**"],
        }
        options.update(kw)
        return await run_sandboxed(["bash", "-c", command], **options)  # type: ignore[arg-type]


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@pytest.fixture
def open_tree() -> Iterator[Tree]:
    """A tree every uid can search: basic mode gives the task its own uid there."""
    root = Path(tempfile.mkdtemp(prefix="loop-sbx-test-", dir="/tmp"))
    root.chmod(0o755)
    t = Tree(root, task_id=f"open-{uuid.uuid4().hex[:6]}")
    try:
        yield t
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(sandbox.SCRATCH / str(task_uid(t.task_id)), ignore_errors=True)


def command_lines() -> list[str]:
    """Every live process's command line (what ``ps`` would show)."""
    lines = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and not sandbox._is_zombie(int(entry)):
            with contextlib.suppress(OSError):
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                lines.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return lines


def owners(top: Path) -> set[int]:
    return {os.lstat(p).st_uid for p in [top, *top.rglob("*")] if ".git" not in p.parts}


def py(code: str) -> str:
    """A bash word that runs ``code`` with the worker's Python."""
    return f"{sys.executable} -c {shlex_quote(textwrap.dedent(code))}"


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# --------------------------------------------------------------------------- policy


def test_task_file_policy_is_strict_and_off_needs_consent(demo_repo: Path) -> None:
    base = task(demo_repo, ["true"])
    assert TaskSpec.model_validate(base).sandbox.mode == "basic"
    with pytest.raises(ValueError, match=r"unknown|Extra inputs"):
        TaskSpec.model_validate({**base, "sandbox": {"mode": "strict", "netwrk": "none"}})
    with pytest.raises(ValueError, match="allow_unsafe_off"):
        TaskSpec.model_validate({**base, "autonomy": "assisted", "sandbox": {"mode": "off"}})
    ok = {**base, "autonomy": "assisted", "sandbox": {"mode": "off", "allow_unsafe_off": True}}
    assert TaskSpec.model_validate(ok).sandbox.mode == "off"
    assert TaskSpec.model_validate({**base, "sandbox": {"mode": "off"}}).sandbox.mode == "off"
    with pytest.raises(ValueError, match="environment variable name"):
        TaskSpec.model_validate({**base, "sandbox": {"env": ["NOT A NAME"]}})


def test_refused_writes_are_found_outside_the_worktree_only(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(
        "touch: cannot touch '/etc/x': Read-only file system\n"
        "PermissionError: [Errno 13] Permission denied: '/root/.ssh/id'\n"
        "OSError: [Errno 30] Read-only file system: '/wt/tests/t.py'\n"
        "bash: /proc/1/environ: Permission denied\n"
        "all good in /etc/passwd\n"
    )
    assert refused_writes(log, "/wt") == [
        "/etc/x (Read-only file system)",
        "/root/.ssh/id (Permission denied)",
    ]


# --------------------------------------------------------------------------- strict: the runner


@needs_strict
async def test_strict_filesystem(tree: Tree) -> None:
    secret = tree.root / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    ran = await tree.run(
        "id -u; echo fix > app.py; echo new > new.txt;"
        " echo x > tests/test_app.py; echo x > /etc/loop-probe; echo x > /root/loop-probe;"
        f" echo x > {tree.home}/probe; echo x > {tree.repo}/.git/probe;"
        f" echo answer > {tree.attempt}/output.md; rm -f {tree.attempt}/run.pid;"
        " rm -f .git; git status --short | sort | tr '\\n' ' '; echo;"
        f" cat {secret} || echo read-refused;"
        " mount -o remount,rw / 2>&1 || echo remount-refused;"
        " unshare -U true 2>&1 || echo userns-refused;"
        " unshare -Ur true 2>&1 || echo userns-root-refused",
        readonly=[secret],
    )
    out = ran.output_tail
    assert ran.exit_code == 0, out
    assert out.splitlines()[0] == str(task_uid(tree.task_id))
    assert ran.sandbox.startswith(f"strict uid={task_uid(tree.task_id)} ")
    # Writes in the worktree land; everywhere else they are refused and recorded.
    assert (tree.wt / "app.py").read_text() == "fix\n"
    assert "M app.py ?? new.txt" in out
    assert (tree.wt / "tests" / "test_app.py").read_text() == "def test_x():\n    pass\n"
    for path in ("/etc/loop-probe", "/root/loop-probe", tree.home / "probe"):
        assert not Path(path).exists()
        assert any(r.startswith(f"{path} (") for r in ran.refused), ran.refused
    assert not (tree.repo / ".git" / "probe").exists()
    assert f"{tree.repo}/.git/probe (Read-only file system)" in ran.refused
    assert not any("tests/test_app.py" in r for r in ran.refused)  # diff_scope's call
    # The LOOP_* folder: the agent's output arrives, the worker's files stay.
    assert (tree.attempt / "output.md").read_text() == "answer\n"
    assert (tree.wt / ".git").is_file()
    assert "read-refused" in out and "root only" not in out
    assert "remount-refused" in out
    assert "userns-refused" in out and "userns-root-refused" in out
    # The worktree is root's again, ready for the worker's git.
    assert owners(tree.wt) == {0}
    assert stat.S_IMODE(tree.wt.stat().st_mode) == 0o755
    assert git(tree.wt, "status", "--porcelain") == "M app.py\n?? new.txt"


@needs_strict
async def test_strict_environment_hides_the_workers_secrets(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-openai")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-planted-github")
    show = "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done"
    ran = await tree.run(show)
    assert ran.exit_code == 0
    assert "planted" not in Path(ran.log_path).read_text()
    assert "LOOP_" not in ran.output_tail
    passed = await tree.run(show, SandboxPolicy(mode="strict", env=["GITHUB_TOKEN"]))
    text = Path(passed.log_path).read_text()
    assert "GITHUB_TOKEN=ghp-planted-github" in text
    assert "sk-planted-openai" not in text


@needs_strict
async def test_strict_network_none(tree: Tree) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        connect = py(
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2)
                print("connected")
            except OSError as e:
                print("refused:", e)
            print("interfaces:", sorted(l.split(":")[0].strip()
                  for l in open("/proc/net/dev").read().splitlines()[2:]))
            """
        )
        none = await tree.run(connect, SandboxPolicy(mode="strict", network="none"))
        assert "refused:" in none.output_tail, none.output_tail
        assert "interfaces: ['lo']" in none.output_tail
        assert "net=none" in none.sandbox
        # The same command reaches the port with the host's network (the test is real).
        host = await tree.run(connect, SandboxPolicy(mode="strict", network="host"))
        assert "connected" in host.output_tail, host.output_tail
        # Gates default to no network.
        gate = await tree.run(connect, STRICT, kind="gate")
        assert "refused:" in gate.output_tail
    finally:
        server.close()


@needs_strict
async def test_strict_limits_stop_runaways(tree: Tree) -> None:
    tight = {"processes": 32, "memory_mb": 64, "cpu_seconds": 1, "file_size_mb": 1}
    policy = SandboxPolicy(mode="strict", limits=tight)
    bomb = await tree.run(
        py(
            """
            import os, time
            n = 0
            while n < 500:
                try:
                    pid = os.fork()
                except OSError as e:
                    print("fork failed after", n, e)
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
            """
        ),
        policy,
    )
    assert "fork failed after" in bomb.output_tail, bomb.output_tail
    assert int(bomb.output_tail.split("fork failed after")[1].split()[0]) < 32
    assert not sandbox.uid_processes(task_uid(tree.task_id))  # the sleepers are gone

    memory = await tree.run(
        py("b = [bytearray(16 << 20) for _ in range(32)]; print('fits')"), policy
    )
    assert memory.exit_code != 0 and "fits" not in memory.output_tail

    big = await tree.run(
        py("open('big.bin', 'wb').write(b'x' * (8 << 20)); print('wrote')"), policy
    )
    assert big.exit_code != 0 and "wrote" not in big.output_tail
    assert (tree.wt / "big.bin").stat().st_size <= 1 << 20

    started = time.monotonic()
    spin = await tree.run(py("while True: pass"), policy)
    assert spin.exit_code != 0 and not spin.timed_out
    assert time.monotonic() - started < 15


@needs_strict
async def test_strict_gate_sees_a_read_only_worktree(tree: Tree) -> None:
    ws = Workspace(
        task_id=tree.task_id,
        repo=str(tree.repo),
        path=str(tree.wt),
        branch=f"loop/{tree.task_id}",
        base_ref="main",
        base_commit=git(tree.repo, "rev-parse", "HEAD"),
        run_dir=str(tree.home / "runs" / tree.task_id),
    )
    result = await run_gate(
        Gate(name="writes", run="cat app.py && touch made.txt"), ws, tree.attempt, STRICT
    )
    assert not result.passed
    assert "x = 1" in result.evidence.output_tail
    assert "Read-only file system" in result.evidence.output_tail
    assert not (tree.wt / "made.txt").exists()
    reads = await run_gate(
        Gate(name="reads", run=f"{sys.executable} app.py"), ws, tree.attempt, STRICT
    )
    assert reads.passed, reads.evidence.output_tail


@needs_strict
async def test_strict_run_tool_names_nothing_into_view(tree: Tree) -> None:
    """The model's command line is untrusted: naming a hidden file does not show it."""
    hidden = Path.home() / f".loop-sbx-{uuid.uuid4().hex[:6]}"
    hidden.write_text("worker's file")
    hidden.chmod(0o644)
    try:
        out = await execute(
            "run",
            json.dumps(
                {
                    "command": f"cat {hidden} || echo hidden; echo made > made.txt;"
                    " echo x > tests/test_app.py || echo protected;"
                    " python3 -c 'print(6 * 7)' || python -c 'print(6 * 7)'"
                }
            ),
            tree.wt,
            ToolPolicy(),
            ["tests/**"],
            tree.attempt,
            sandbox=STRICT,
            task_id=tree.task_id,
            hide=(tree.home,),
        )
    finally:
        hidden.unlink()
    assert "worker's file" not in out.text and "hidden" in out.text
    assert "protected" in out.text and "42" in out.text
    assert (tree.wt / "made.txt").read_text() == "made\n"
    assert owners(tree.wt) == {0}


async def test_strict_without_bubblewrap_fails_closed(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOP_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(Exception) as info:
        await tree.run("echo should not run")
    assert getattr(info.value, "type", "") == PERMANENT
    assert getattr(info.value, "non_retryable", False)
    assert "bubblewrap not found at /nonexistent/bwrap" in str(info.value)


# --------------------------------------------------------------------------- basic: the runner


@needs_root
async def test_basic_gives_the_task_its_own_uid(
    open_tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = open_tree
    uid = task_uid(t.task_id)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-openai")
    basic = SandboxPolicy(mode="basic")
    ran = await t.run(
        "id -u; echo fix > app.py; echo x > tests/test_app.py; rm -f .git;"
        f" echo x > /etc/loop-probe; echo x > {t.home}/probe; echo x > {t.repo}/.git/probe;"
        " (setsid sleep 300.4242 &); cat /proc/1/environ > /dev/null || echo environ-refused;"
        f" env | grep -c planted; echo answer > {t.attempt}/output.md",
        basic,
    )
    out = ran.output_tail
    assert out.splitlines()[0] == str(uid), out
    assert ran.sandbox.startswith(f"basic uid={uid} ")
    assert (t.wt / "app.py").read_text() == "fix\n"
    assert (t.wt / "tests" / "test_app.py").read_text() == "def test_x():\n    pass\n"
    assert (t.wt / ".git").is_file()
    assert "environ-refused" in out
    assert "\n0\n" in out  # no planted variable in its environment
    for path in ("/etc/loop-probe", f"{t.home}/probe", f"{t.repo}/.git/probe"):
        assert not Path(path).exists()
        assert f"{path} (Permission denied)" in ran.refused
    assert (t.attempt / "output.md").read_text() == "answer\n"
    assert not sandbox.uid_processes(uid)  # the setsid grandchild is gone
    assert owners(t.wt) == {0} and owners(t.attempt) == {0}
    assert git(t.wt, "status", "--porcelain") == "M app.py"


async def test_basic_keeps_the_workers_uid_where_the_task_uid_cannot_reach(tree: Tree) -> None:
    ran = await tree.run("id -u", SandboxPolicy(mode="basic"))
    assert ran.exit_code == 0
    if HOST.root:
        assert ran.output_tail.strip() == "0"
        assert "cannot reach" in ran.sandbox and "is 0700" in ran.sandbox


@needs_root
async def test_cancel_kills_the_whole_tree(open_tree: Tree) -> None:
    t = open_tree
    uid = task_uid(t.task_id)
    for policy in (SandboxPolicy(mode="basic"), STRICT if HOST.level == "strict" else None):
        if policy is None:
            continue
        marker = t.attempt / "started"
        marker.unlink(missing_ok=True)
        run = asyncio.create_task(
            t.run(f"(setsid sleep 300.4243 &); touch {marker}; sleep 300", policy)
        )
        deadline = time.monotonic() + 20
        while not marker.exists():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert not sandbox.uid_processes(uid), policy.mode
        assert not [a for a in command_lines() if "300.4243" in a]
        assert owners(t.wt) == {0}


@needs_root
async def test_a_crashed_run_is_cleaned_up_by_the_retry(open_tree: Tree) -> None:
    """What a worker killed mid-run leaves: a process of the task's uid, a lent worktree."""
    t = open_tree
    uid = task_uid(t.task_id)
    pid_file = t.attempt / "agent.pid"
    state = {"uid": uid, "cgroups": [], "lent": []}
    record = sandbox._owner_record(str(t.wt), "worktree")
    sandbox._lend_tree(record, uid, uid, set())
    state["lent"].append(record)
    sandbox._state_path(pid_file).write_text(json.dumps(state))
    orphan = await asyncio.create_subprocess_exec(
        *["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"],
        start_new_session=True,
    )
    assert sandbox.uid_processes(uid) == [orphan.pid]
    assert uid in owners(t.wt)
    assert await kill_leftovers(pid_file)
    assert await asyncio.wait_for(orphan.wait(), 5) == -9
    assert owners(t.wt) == {0}
    assert not sandbox._state_path(pid_file).exists()


# --------------------------------------------------------------------------- real tasks


def agent_script(folder: Path, body: str) -> list[str]:
    """An agent that needs nothing outside its worktree and LOOP_* files."""
    script = folder / f"agent_{uuid.uuid4().hex[:6]}.py"
    script.write_text(
        "import os, pathlib, sys, time\n"
        'out = pathlib.Path(os.environ["LOOP_OUTPUT_FILE"])\n'
        f"COMPLETE = {COMPLETE_FIX!r}\n" + textwrap.dedent(body)
    )
    return [sys.executable, str(script)]


def strict_task(repo: Path, agent: list[str], **overrides: object) -> TaskSpec:
    spec = task(repo, agent, sandbox={"mode": "strict"}, budget={"max_attempts": 1})
    spec.update(overrides)
    return TaskSpec.model_validate(spec)


@needs_strict
async def test_task_refused_writes_are_recorded_and_block(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    probes = [
        "/root/loop-probe",
        "/etc/loop-probe",
        f"{settings.home}/probe",
        f"{demo_repo}/.git/probe",
    ]
    agent = agent_script(
        tmp_path,
        f"""
        for p in {probes!r} + ["tests/test_slugify.py"]:
            try:
                pathlib.Path(p).write_text("x")
            except OSError as e:
                print(e)
        pathlib.Path("notes").mkdir()
        pathlib.Path("notes/ok.txt").write_text("in the worktree")
        pathlib.Path("slugify.py").write_text(COMPLETE)
        """,
    )
    protected_before = (demo_repo / "tests" / "test_slugify.py").read_text()
    async with build_worker(client, settings):
        handle, _ = await start_task(client, strict_task(demo_repo, agent), settings.task_queue)
        result = await handle.result()
    assert result.state == TaskState.BLOCKED, result.reason
    made = result.attempts[0].make
    assert result.reason.startswith("write outside the worktree: refused by the sandbox: ")
    for p in probes:
        assert not Path(p).exists()
        assert f"refused by the sandbox: {p} (Read-only file system)" in made.outside_writes
    assert sorted(made.changed_files) == ["notes/ok.txt", "slugify.py"]
    assert "Read-only file system" in made.output_tail  # the protected file, too
    wt_protected = Path(result.worktree, "tests", "test_slugify.py").read_text()
    assert wt_protected == protected_before
    assert made.sandbox_level.startswith("strict uid=") and "host=strict" in made.sandbox_level


@needs_strict
async def test_task_fork_bomb_stops_and_the_worker_stays_responsive(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    bomb = agent_script(
        tmp_path,
        """
        n = 0
        while n < 2000:
            try:
                pid = os.fork()
            except OSError as e:
                out.write_text(f"forked {n}: {e}")
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
        time.sleep(3)  # hold every process while the other task runs
        pathlib.Path("slugify.py").write_text(COMPLETE)
        """,
    )
    fixer = agent_script(tmp_path, 'pathlib.Path("slugify.py").write_text(COMPLETE)\n')
    bomb_spec = strict_task(
        demo_repo, bomb, sandbox={"mode": "strict", "limits": {"processes": 48}}
    )
    fix_spec = strict_task(demo_repo, fixer)
    assert task_uid(bomb_spec.id) != task_uid(fix_spec.id)
    async with build_worker(client, settings):
        hb, _ = await start_task(client, bomb_spec, settings.task_queue)
        deadline = time.monotonic() + 30
        while (await hb.query(QUERY_STATUS, result_type=TaskStatus)).phase != "make":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        hf, _ = await start_task(client, fix_spec, settings.task_queue)
        fixed, bombed = await asyncio.gather(hf.result(), hb.result())
    assert fixed.state == TaskState.DONE_WITH_EVIDENCE, fixed.reason
    assert bombed.state == TaskState.DONE_WITH_EVIDENCE, bombed.reason
    claim = bombed.attempts[0].make.claim
    assert claim.startswith("forked ") and int(claim.split()[1].rstrip(":")) < 48, claim
    assert "Resource temporarily unavailable" in claim
    assert not sandbox.uid_processes(task_uid(bomb_spec.id))


@needs_strict
async def test_task_cancel_leaves_no_process_behind(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    agent = agent_script(
        tmp_path,
        """
        import subprocess
        subprocess.Popen(["sleep", "300.4244"], start_new_session=True)
        out.write_text("grandchild started")
        time.sleep(300)
        """,
    )
    spec = strict_task(demo_repo, agent)
    output = settings.runs / spec.id / "attempt-1" / "output.md"
    async with build_worker(client, settings):
        handle, _ = await start_task(client, spec, settings.task_queue)
        deadline = time.monotonic() + 30
        while not output.exists():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await handle.cancel()
        result = await handle.result()
    assert result.state == TaskState.CANCELLED
    assert not sandbox.uid_processes(task_uid(spec.id))
    assert not [a for a in command_lines() if "300.4244" in a]
    assert owners(Path(result.worktree)) == {0}


async def test_task_strict_without_bubblewrap_ends_blocked(
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOP_BWRAP", "/nonexistent/bwrap")
    agent = agent_script(tmp_path, 'pathlib.Path("slugify.py").write_text(COMPLETE)\n')
    async with build_worker(client, settings):
        handle, _ = await start_task(client, strict_task(demo_repo, agent), settings.task_queue)
        result = await handle.result()
    assert result.state == TaskState.BLOCKED
    assert "sandbox strict is not available on this host" in result.reason
    assert "bubblewrap not found at /nonexistent/bwrap" in result.reason
    assert "\n" not in result.reason
