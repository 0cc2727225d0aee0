"""The sandbox runner, one command at a time: what a confined command can see, reach and do.

Each test runs real commands through ``run_sandboxed`` (the launcher, bubblewrap in
strict, real namespaces, real uids) in both confining levels where it applies; no
Temporal server. The egress proxy beside a real server is in tests/e2e/test_sandbox.py,
whole tasks with hostile agents in tests/e2e/test_trust_boundary.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
import time
import uuid
from pathlib import Path

import pytest

from activities.gates import Bench, run_gate
from activities.host import sandbox
from activities.host.files import read_untrusted
from activities.host.sandbox import kill_leftovers
from activities.host.sandbox import uids as leases
from activities.host.sandbox.egress_rules import Refused, choose
from activities.host.sandbox.probe import HostSupport
from activities.host.sandbox.refusals import refused_writes
from activities.host.toolbox import execute
from loop.contracts import Gate, SandboxPolicy, TaskSpec, ToolPolicy, Workspace
from loop.errors import PERMANENT
from tests.support.git import git
from tests.support.levels import HOST, LEVELS, needs
from tests.support.sandbox import Listener, Tree, command_lines, owners, py
from tests.support.tasks import task

pytestmark = [pytest.mark.timeout(90)]


# --------------------------------------------------------------------------- the task file


def test_the_policy_refuses_what_would_open_the_boundary(demo_repo: Path) -> None:
    base = task(demo_repo, ["true"])
    base["sandbox"] = {}
    spec = TaskSpec.model_validate(base)
    assert spec.sandbox.mode == "basic" and spec.sandbox.network == "proxy"
    assert spec.sandbox.gate_network == "none"
    with pytest.raises(ValueError, match=r"unknown|Extra inputs"):
        TaskSpec.model_validate({**base, "sandbox": {"mode": "strict", "netwrk": "none"}})
    with pytest.raises(ValueError, match="allow_unsafe_off"):
        TaskSpec.model_validate({**base, "autonomy": "assisted", "sandbox": {"mode": "off"}})
    with pytest.raises(ValueError, match="allow_unsafe_host_network"):
        TaskSpec.model_validate({**base, "sandbox": {"network": "host"}})
    with pytest.raises(ValueError, match="allow_unsafe_host_network"):
        TaskSpec.model_validate({**base, "sandbox": {"gate_network": "host"}})
    ok = {"network": "host", "allow_unsafe_host_network": True}
    assert TaskSpec.model_validate({**base, "sandbox": ok}).sandbox.network == "host"
    for name in ("TEMPORAL_API_KEY", "LOOP_CODEC_KEY_FILE", "loop_home"):
        with pytest.raises(ValueError, match="never enter a sandbox"):
            TaskSpec.model_validate({**base, "sandbox": {"env": [name]}})
    with pytest.raises(ValueError, match="needs its port"):
        TaskSpec.model_validate({**base, "sandbox": {"allow_hosts": ["127.0.0.1"]}})
    hosts = ["API.example.com", "*.pypi.org:443", "127.0.0.1:8080", "[::1]:9"]
    got = TaskSpec.model_validate({**base, "sandbox": {"allow_hosts": hosts}})
    assert got.sandbox.allow_hosts == ["api.example.com", "*.pypi.org:443", *hosts[2:]]


def test_egress_rules() -> None:
    allow = ["api.example.com", "*.pypi.org", "127.0.0.1:8080", "local.test:9000"]
    deny = ["127.0.0.1:7233"]
    assert choose("api.example.com", 443, ["93.184.215.14"], allow, deny) == "93.184.215.14"
    assert choose("files.pypi.org", 443, ["151.101.0.223"], allow, deny) == "151.101.0.223"
    assert choose("127.0.0.1", 8080, ["127.0.0.1"], allow, deny) == "127.0.0.1"
    cases = [
        ("api.example.com", 8443, ["93.184.215.14"], "not in sandbox.allow_hosts"),
        ("pypi.org", 443, ["151.101.0.223"], "not in sandbox.allow_hosts"),  # not the apex
        ("evil.com", 443, ["6.6.6.6"], "not in sandbox.allow_hosts"),
        ("api.example.com", 443, ["127.0.0.1"], "non-public address not listed"),  # rebinding
        ("api.example.com", 443, ["169.254.169.254"], "non-public"),  # cloud metadata
        ("local.test", 9000, ["10.0.0.5"], "non-public address not listed as 10.0.0.5:9000"),
        ("127.0.0.1", 8081, ["127.0.0.1"], "not in sandbox.allow_hosts"),
        ("api.example.com", 443, [], "does not resolve"),
    ]
    for host, port, addresses, why in cases:
        with pytest.raises(Refused, match=why):
            choose(host, port, addresses, allow, deny)
    with pytest.raises(Refused, match="the worker's own service"):
        choose("127.0.0.1", 7233, ["127.0.0.1"], [*allow, "127.0.0.1:7233"], deny)
    # The same service by another name of a local address: refused all the same.
    sandbox.protect(["127.0.0.1:7233"])
    deny = sandbox.egress.protected()
    for host, ip in [("0.0.0.0", "0.0.0.0"), ("::ffff:127.0.0.1", "::ffff:127.0.0.1")]:
        listed = ["0.0.0.0:7233", "[::ffff:127.0.0.1]:7233"]
        with pytest.raises(Refused, match="the worker's own service"):
            choose(host, 7233, [ip], listed, deny)


def test_refused_writes_name_the_path_the_error_is_about(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(
        "touch: cannot touch '/etc/x': Read-only file system\n"
        "PermissionError: [Errno 13] Permission denied: '/root/.ssh/id'\n"
        "OSError: [Errno 30] Read-only file system: '/wt/tests/t.py'\n"
        "bash: /proc/1/environ: Permission denied\n"
        "all good in /etc/passwd\n"
        "/tmp/agent.sh: line 3: tests/test_x.py: Permission denied\n"
        "mkdir: cannot create directory ‘/opt/y’: Read-only file system\n"
        "OSError: [Errno 30] Read-only file system: '/etc/shadow' -> '/run/link'\n"
    )
    assert refused_writes(log, "/wt") == [
        "/etc/x (Read-only file system)",
        "/root/.ssh/id (Permission denied)",
        "/opt/y (Read-only file system)",
        "/run/link (Read-only file system)",
    ]


def test_reading_a_file_a_sandbox_wrote(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root only")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 5000)
    (tmp_path / "ok").write_text("claim")
    assert read_untrusted(tmp_path / "ok", 100) == (b"claim", "")
    assert read_untrusted(tmp_path / "missing", 100) == (b"", "missing")
    data, why = read_untrusted(tmp_path / "link", 100)
    assert data == b"" and "symbolic link" in why
    started = time.monotonic()
    data, why = read_untrusted(tmp_path / "fifo", 100)  # no writer: would block forever
    assert data == b"" and "not a regular file" in why and time.monotonic() - started < 1
    data, why = read_untrusted(tmp_path / "big", 100)
    assert data == b"x" * 100 and "5000 bytes" in why


def test_a_host_without_root_says_what_to_change() -> None:
    host = HostSupport(
        level="off",
        root=False,
        bwrap="/usr/bin/bwrap",
        bwrap_version="0.8.0",
        bwrap_error="",
        basic_trial="",
        setpriv="/usr/bin/setpriv",
        userns="available",
        cgroup="not used",
        seccomp=True,
    )
    why = host.unavailable("basic")
    assert "needs a root worker" in why and "sandbox.mode: off" in why
    assert host.unavailable("strict").startswith("sandbox strict is not available")


# --------------------------------------------------------------------------- uids


def test_uid_leases_are_never_shared(tmp_path: Path) -> None:
    table = tmp_path / "leases.json"
    home = tmp_path / "home"
    home.mkdir()
    got = [leases.lease(home, f"task-{i}", table=table) for i in range(200)]
    assert len(set(got)) == 200 and all(leases.is_task_uid(u) for u in got)
    assert leases.lease(home, "task-7", table=table) == got[7]  # the same holder, the same
    assert leases.release(home, "task-7", table=table) == got[7]
    assert leases.holders(home, table=table).get("task-7") is None
    gone = tmp_path / "gone"
    gone.mkdir()
    stale = leases.lease(gone, "x", table=table)
    gone.rmdir()  # its LOOP_HOME is gone: the lease is reclaimed by the next one
    leases.lease(home, "y", table=table)
    assert str(stale) not in json.loads(table.read_text())


# --------------------------------------------------------------------------- both levels


@pytest.mark.parametrize("mode", LEVELS)
async def test_the_files_a_command_sees(tree: Tree, mode: str) -> None:
    secret = tree.root / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    other_task = tree.home / "runs" / "other" / "attempt-1"
    other_task.mkdir(parents=True)
    (other_task / "prompt.md").write_text("other task's prompt")
    (tree.home / "temporal.db").write_text("every payload")
    # What a hostile agent does, from a script: nothing it names is on the command line.
    script = tree.root / "hostile.sh"
    script.write_text(
        "id -u; echo fix > app.py; echo new > new.txt; echo x > tests/test_app.py\n"
        "echo x > /etc/loop-probe; echo x > /root/loop-probe\n"
        f"echo x > {tree.home}/probe; echo x > {tree.repo}/.git/probe\n"
        f"echo answer > {tree.own}/output.md; echo x > {tree.attempt}/forged.pid\n"
        "rm -f .git; git status --short | sort | tr '\\n' ' '; echo\n"
        f"cat {secret} || echo read-refused\n"
        f"cat {other_task}/prompt.md {tree.home}/temporal.db || echo home-hidden\n"
        "echo planted > /tmp/conftest.py; ls /tmp\n"
        "unshare -U true 2>&1 || echo userns-refused\n"
    )
    script.chmod(0o755)
    ran = await tree.run("", SandboxPolicy(mode=mode), argv=["bash", str(script)])
    out = ran.output_tail
    assert ran.exit_code == 0, out
    assert out.splitlines()[0] == str(tree.uid) and tree.uid not in (0, os.getuid())
    assert ran.sandbox.startswith(f"{mode} uid={tree.uid} net=proxy")
    # Writes in the worktree land; everywhere else they are refused and recorded.
    assert (tree.wt / "app.py").read_text() == "fix\n"
    assert "M app.py ?? new.txt" in out
    assert (tree.wt / "tests" / "test_app.py").read_text() == "def test_x():\n    pass\n"
    for path in ("/etc/loop-probe", "/root/loop-probe", tree.home / "probe"):
        assert not Path(path).exists()
        assert any(r.startswith(f"{path} (") for r in ran.refused), ran.refused
    assert not (tree.repo / ".git" / "probe").exists()
    assert any(r.startswith(f"{tree.repo}/.git/probe") for r in ran.refused)
    assert not any("tests/test_app.py" in r for r in ran.refused)  # diff_scope's call
    # Its own folder takes its output; the worker's folder beside it takes nothing.
    assert (tree.own / "output.md").read_text() == "answer\n"
    assert not (tree.attempt / "forged.pid").exists()
    assert (tree.wt / ".git").is_file()
    assert "read-refused" in out and "root only" not in out
    assert "home-hidden" in out and "other task's prompt" not in out and "every payload" not in out
    assert "userns-refused" in out
    assert not Path("/tmp/conftest.py").exists()  # its /tmp was its own
    # The worktree is the worker's again, ready for its git.
    assert owners(tree.wt) == {0}
    assert git(tree.wt, "status", "--porcelain") == "M app.py\n?? new.txt"


@pytest.mark.parametrize("mode", LEVELS)
async def test_the_environment_holds_no_secret_of_the_worker(
    tree: Tree, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tree.root / "codec.key"
    key.write_text("0123456789abcdef" * 4)
    key.chmod(0o644)  # readable by anyone: the sandbox must cover it anyway
    monkeypatch.setenv("LOOP_CODEC_KEY_FILE", str(key))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-openai")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-planted-github")
    monkeypatch.setenv("TEMPORAL_API_KEY", "planted-temporal")
    show = (
        "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done;"
        f" cat {key}; echo end"
    )
    ran = await tree.run(show, SandboxPolicy(mode=mode))
    text = Path(ran.log_path).read_text()
    assert ran.exit_code == 0 and text.rstrip().endswith("end"), text
    assert "planted" not in text and "0123456789abcdef" not in text
    passed = await tree.run(show, SandboxPolicy(mode=mode, env=["GITHUB_TOKEN"]))
    text = Path(passed.log_path).read_text()
    assert "GITHUB_TOKEN=ghp-planted-github" in text
    assert "sk-planted-openai" not in text and "planted-temporal" not in text


@pytest.mark.parametrize("mode", LEVELS)
async def test_no_secret_on_a_command_line(
    tree: Tree, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a sandbox is given goes through its environment: ``ps`` never shows it."""
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-planted-on-the-command-line")
    run = asyncio.ensure_future(
        tree.run(
            "touch $LOOP_OUTPUT_FILE; sleep 30",
            SandboxPolicy(mode=mode, env=["GITHUB_TOKEN"]),
            env={"LOOP_OUTPUT_FILE": str(tree.own / "output.md"), "LOOP_TOKEN": "ghp-too"},
        )
    )
    try:
        deadline = time.monotonic() + 20
        while not (tree.own / "output.md").exists():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        lines = command_lines()
        assert any("sleep 30" in line for line in lines)
        assert not [line for line in lines if "planted" in line or "ghp-too" in line]
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_link_under_a_protect_glob_shows_nothing(
    tree: Tree, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A protected path that is a link (in the repository, or left by an earlier run) is
    not bound: bound read-only, it would show what it points to, a covered secret too."""
    key = tree.root / "codec.key"
    key.write_text("CODEC-KEY-SECRET")
    key.chmod(0o644)
    monkeypatch.setenv("LOOP_CODEC_KEY_FILE", str(key))
    (tree.wt / "tests" / "fixture.txt").symlink_to(os.path.relpath(key, tree.wt / "tests"))
    ran = await tree.run("cat tests/fixture.txt; echo end", SandboxPolicy(mode=mode))
    assert "CODEC-KEY-SECRET" not in Path(ran.log_path).read_text()


@pytest.mark.parametrize("mode", LEVELS)
async def test_protected_files_cannot_be_set_aside(tree: Tree, mode: str) -> None:
    (tree.wt / "src" / "tests").mkdir(parents=True)
    (tree.wt / "src" / "tests" / "test_deep.py").write_text("def test_y():\n    pass\n")
    ran = await tree.run(
        "mv tests tests.old || echo kept-1; mv src/tests src/t || echo kept-2;"
        " echo new > tests/test_new.py && echo added",
        SandboxPolicy(mode=mode),
        protected=["tests/**", "src/tests/**"],
    )
    assert all(w in ran.output_tail for w in ("kept-1", "kept-2", "added")), ran.output_tail
    assert (tree.wt / "tests" / "test_app.py").is_file()
    assert (tree.wt / "src" / "tests" / "test_deep.py").is_file()
    assert stat.S_IMODE((tree.wt / "tests").stat().st_mode) == 0o755  # given back as it was
    assert owners(tree.wt) == {0}


@needs("basic")
async def test_basic_leaves_nothing_in_shared_folders(tree: Tree) -> None:
    """Folders any user may write (and System V IPC) are the run's own in basic."""
    name = f"loop-probe-{uuid.uuid4().hex[:6]}"
    ran = await tree.run(
        f"echo x > /run/lock/{name} && echo wrote; ipcmk -M 4096 >/dev/null && echo shm",
        SandboxPolicy(mode="basic"),
    )
    assert "wrote" in ran.output_tail and "shm" in ran.output_tail, ran.output_tail
    assert not Path(f"/run/lock/{name}").exists()
    segments = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    assert not [s for s in segments if int(s.split()[7]) == tree.uid]  # uid column


async def test_one_sandbox_cannot_exhaust_the_workers_descriptors(
    tree: Tree, listener: Listener
) -> None:
    from activities.host.sandbox.egress import MAX_CONNECTIONS

    mode = "strict" if not HOST.unavailable("strict") else "basic"
    hold = py(
        """
        import socket, time
        held = []
        for _ in range(300):
            try:
                held.append(socket.create_connection(("127.0.0.1", 3128), timeout=2))
            except OSError:
                break
        time.sleep(1)
        alive = 0
        for s in held:
            s.setblocking(False)
            try:
                alive += s.recv(1) != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
        print("alive", alive)
        """
    )
    before = len(os.listdir("/proc/self/fd"))
    ran = await tree.run(hold, SandboxPolicy(mode=mode))
    alive = int(ran.output_tail.split("alive")[1].split()[0])
    assert alive <= MAX_CONNECTIONS, ran.output_tail
    assert len(os.listdir("/proc/self/fd")) < before + 16


@pytest.mark.parametrize("mode", LEVELS)
async def test_network_none_reaches_nothing(tree: Tree, mode: str, listener: Listener) -> None:
    connect = py(
        f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {listener.port}), timeout=2)
            print("connected")
        except OSError as e:
            print("refused:", e)
        print("interfaces:", sorted(l.split(":")[0].strip()
              for l in open("/proc/net/dev").read().splitlines()[2:]))
        """
    )
    none = await tree.run(connect, SandboxPolicy(mode=mode, network="none"))
    assert "refused:" in none.output_tail, none.output_tail
    assert "interfaces: ['lo']" in none.output_tail
    # Gates default to no network; the same command on the host's network connects.
    gate = await tree.run(connect, SandboxPolicy(mode=mode), kind="gate")
    assert "refused:" in gate.output_tail
    unsafe = SandboxPolicy(mode=mode, network="host", allow_unsafe_host_network=True)
    host = await tree.run(connect, unsafe)
    assert "connected" in host.output_tail, host.output_tail


@pytest.mark.parametrize("mode", LEVELS)
async def test_cancel_kills_the_whole_tree(tree: Tree, mode: str) -> None:
    marker = tree.own / "started"
    run = asyncio.ensure_future(
        tree.run(f"(setsid sleep 300.4243 &); touch {marker}; sleep 300", SandboxPolicy(mode=mode))
    )
    deadline = time.monotonic() + 20
    while not marker.exists():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not sandbox.uid_processes(tree.uid)
    assert not [a for a in command_lines() if "300.4243" in a]
    assert owners(tree.wt) == {0}


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_crashed_run_is_cleaned_up_by_the_retry(tree: Tree, mode: str) -> None:
    """What a worker killed mid-run leaves: a process of the task's uid, a lent worktree,
    the state file in the worker's own folder that says what to undo."""
    from activities.host.sandbox import ownership

    uid = tree.uid
    request = tree.request("true", SandboxPolicy(mode=mode))
    record = ownership.record(str(tree.wt))
    ownership.lend_tree(record, uid, uid, set())
    request.state_file.write_text(json.dumps({"uid": uid, "cgroups": [], "lent": [record]}))
    orphan = await asyncio.create_subprocess_exec(
        *["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"],
        start_new_session=True,
    )
    # setpriv takes the uid a moment after it starts: wait for it (a loaded host is slow).
    deadline = time.monotonic() + 5
    while True:
        found = sandbox.uid_processes(uid)
        if found == [orphan.pid] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    assert found == [orphan.pid]
    assert uid in owners(tree.wt)
    assert await kill_leftovers(request.state_dir, request.name)
    assert await asyncio.wait_for(orphan.wait(), 5) == -9
    assert owners(tree.wt) == {0}
    assert not request.state_file.exists()


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_gate_reads_and_never_writes(tree: Tree, mode: str) -> None:
    ws = Workspace(
        task_id=tree.task_id,
        repo=str(tree.repo),
        path=str(tree.wt),
        branch=f"loop/{tree.task_id}",
        base_ref="main",
        base_commit=git(tree.repo, "rev-parse", "HEAD"),
        run_dir=str(tree.home / "runs" / tree.task_id),
    )
    bench = Bench(tree=tree.wt, log_dir=tree.attempt, home=tree.home)
    policy = SandboxPolicy(mode=mode)
    writes = await run_gate(
        Gate(name="writes", run="cat app.py && touch made.txt && echo wrote"), ws, bench, policy
    )
    assert not writes.passed and "x = 1" in writes.evidence.output_tail
    assert "wrote" not in writes.evidence.output_tail and not (tree.wt / "made.txt").exists()
    home = await run_gate(
        Gate(name="home", run="echo $HOME $TMPDIR $PYTHONNOUSERSITE; test -e $HOME || echo new"),
        ws,
        bench,
        policy,
    )
    assert home.evidence.output_tail.split() == ["/tmp/home", "/tmp", "1", "new"], home
    reads = await run_gate(Gate(name="reads", run=f"{sys.executable} app.py"), ws, bench, policy)
    assert reads.passed, reads.evidence.output_tail


async def test_the_run_tool_names_nothing_into_view(tree: Tree) -> None:
    """The model's command line is untrusted: naming a hidden file does not show it."""
    hidden = Path.home() / f".loop-sbx-{uuid.uuid4().hex[:6]}"
    hidden.write_text("worker's file")
    hidden.chmod(0o644)
    mode = "strict" if not HOST.unavailable("strict") else "basic"
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
            sandbox=SandboxPolicy(mode=mode),
            task_id=tree.task_id,
            home=tree.home,
        )
    finally:
        hidden.unlink()
    assert "worker's file" not in out.text and "hidden" in out.text
    assert "protected" in out.text and "42" in out.text
    assert (tree.wt / "made.txt").read_text() == "made\n"
    assert owners(tree.wt) == {0}


async def test_a_command_the_task_uid_cannot_run_is_refused_before_it_starts(
    tree: Tree,
) -> None:
    script = tree.root / "agent.sh"
    script.write_text("#!/bin/sh\necho never\n")
    script.chmod(0o744)  # the owner's (root) only
    mode = "basic" if not HOST.unavailable("basic") else "off"
    with pytest.raises(Exception) as info:
        await tree.run("", SandboxPolicy(mode=mode), argv=[str(script)])
    if mode == "basic":
        assert getattr(info.value, "type", "") == PERMANENT
        assert f"may not execute {script} (mode 0744, owner uid 0)" in str(info.value)
    with pytest.raises(Exception, match="command not found: 'no-such-agent'"):
        await tree.run("", SandboxPolicy(mode=mode), argv=["no-such-agent"])


# --------------------------------------------------------------------------- strict only


@needs("strict")
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
    assert not sandbox.uid_processes(tree.uid)  # the sleepers are gone

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


async def test_strict_without_bubblewrap_fails_closed(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOP_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(Exception) as info:
        await tree.run("echo should not run", SandboxPolicy(mode="strict"))
    assert getattr(info.value, "type", "") == PERMANENT
    assert getattr(info.value, "non_retryable", False)
    assert "sandbox strict is not available on this host" in str(info.value)


def test_a_tree_of_any_depth_is_walked_and_removed_without_recursion(tmp_path: Path) -> None:
    from activities.host import tree

    top = tmp_path / "top"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3000):  # by descriptor: the path is far beyond PATH_MAX
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    entries = list(tree.walk(str(top)))
    assert len(entries) == tree.MAX_DEPTH and entries[-1].too_deep
    root = os.open(top, os.O_RDONLY)
    try:
        tree.remove(root, "d")
    finally:
        os.close(root)
    assert list(top.iterdir()) == []
