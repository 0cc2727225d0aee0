"""The sandbox's rules, decided without running anything: the task file's policy, egress
rules, refusals read from a log, reading what a sandbox wrote, host support, uid leases
and tree walks. Commands run through the sandbox in tests/e2e/test_sandbox.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activities.host import sandbox
from activities.host.sandbox import known
from activities.host.sandbox import uids as leases
from activities.host.sandbox.egress_rules import Refused, choose
from activities.host.sandbox.probe import HostSupport
from activities.host.sandbox.refusals import refused_writes
from loop.contracts import TaskSpec
from loop.hardened.files import read_untrusted
from tests.support.tasks import task

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
    with pytest.raises(Refused, match="is the orchestrator's"):
        choose("127.0.0.1", 7233, ["127.0.0.1"], [*allow, "127.0.0.1:7233"], deny)
    # The same service by another name of a local address: refused all the same.
    sandbox.protect(["127.0.0.1:7233"])
    deny = sandbox.egress.protected()
    for host, ip in [("0.0.0.0", "0.0.0.0"), ("::ffff:127.0.0.1", "::ffff:127.0.0.1")]:
        listed = ["0.0.0.0:7233", "[::ffff:127.0.0.1]:7233"]
        with pytest.raises(Refused, match="is the orchestrator's"):
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


# --------------------------------------------------------------------------- tree walks


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


# --------------------------------------------------------------------------- remembered probes


def _program(folder: Path, name: str = "tool", mode: int = 0o755) -> Path:
    """A program written beside ``folder/name`` and renamed in: a new file, as an install."""
    folder.mkdir(parents=True, exist_ok=True)
    fresh = folder / f".{name}.new"
    fresh.write_text("#!/bin/sh\nexit 0\n")
    fresh.chmod(mode)
    fresh.replace(folder / name)
    return folder / name


def test_a_probe_fingerprint_changes_with_what_the_probe_checked(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    second.mkdir()
    program = _program(first)
    path_env = f"{second}:{first}"

    def print_of(*words: str) -> object:
        found = known.fingerprint(list(words), path_env, avoid=[])
        assert found is not None
        return found

    before = print_of("tool")
    assert print_of("tool") == before, "nothing changed: the same key"
    (first / "unrelated").write_text("x")  # a file made beside it: its folder's mtime moves
    assert print_of("tool") == before
    _program(first)
    assert print_of("tool") != before, "a program replaced is probed again"
    replaced = print_of("tool")
    program.chmod(0o700)
    assert print_of("tool") != replaced, "a program its uid may no longer run"
    program.chmod(0o755)
    chmodded = print_of("tool")
    _program(second)
    assert print_of("tool") != chmodded, "a program earlier in PATH shadows it"
    shadowed = print_of("tool")
    first.chmod(0o700)
    assert print_of("tool") != shadowed, "a folder on the way closed"
    first.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(program)
    through = print_of(str(link))
    program.unlink()
    _program(first, mode=0o744)
    assert print_of(str(link)) != through, "where a link leads is followed"


def test_a_probe_is_not_remembered_for_the_tasks_own_files(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    program = _program(tree / "bin")
    assert known.fingerprint([str(program)], "/usr/bin", avoid=[str(tree)]) is None
    assert known.fingerprint(["tool"], f"{tree / 'bin'}:/usr/bin", avoid=[str(tree)]) is None
    assert known.fingerprint(["tool"], "bin:/usr/bin", avoid=[]) is None, "a relative PATH"
    found = known.fingerprint(["sh"], "/usr/bin:/bin", avoid=[str(tree)])
    assert found is not None and found[1] is False, "the system's sh: the same for every uid"


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="giving a file to a task uid takes chown, which only root may do (workers that "
    "hand out task uids run as root; CI does)",
)
def test_a_program_a_task_uid_owns_is_remembered_per_uid(tmp_path: Path) -> None:
    program = _program(tmp_path / "bin")
    os.chown(program, leases.UID_BASE + 7, leases.UID_BASE + 7)
    found = known.fingerprint([str(program)], "/usr/bin", avoid=[])
    assert found is not None and found[1] is True


# --------------------------------------------------------------------------- the launcher


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=10,
    )
)
def test_the_launchers_messages_are_json(value: object) -> None:
    """It writes its own (``json`` costs every run ~8 ms of imports); the worker reads
    them with ``json``. Lone surrogates come back escaped, as ``json.dumps`` writes them."""
    from activities.host.sandbox.launch import _json

    written = _json(value)
    written.encode()  # what it sends must encode, whatever an error message holds
    assert json.loads(written) == value


def test_the_launcher_imports_little() -> None:
    """It starts once per sandboxed run: what it imports is paid every time."""
    script = (
        "import sys; path = sys.argv[1]; "
        "exec(compile(open(path).read(), path, 'exec'), {'__name__': 'launch'}); "
        "print(' '.join(sorted(sys.modules)))"
    )
    launch = Path(sandbox.__file__).with_name("launch.py")
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", script, str(launch)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    heavy = {"json", "re", "socket", "enum", "functools", "warnings", "selectors"}
    assert not heavy & set(out), sorted(heavy & set(out))


def test_the_launchers_plan_holds_plain_values() -> None:
    """marshal writes no enum: the level reaches the launcher as the text it compares."""
    import marshal

    from activities.host.sandbox import launcher
    from loop.contracts import SandboxLevel

    plan = launcher.plan(
        mode=SandboxLevel.BASIC, uid=100_001, gid=100_001, network="none", ops=[], cwd="/",
        argv=["true"], rlimits={"RLIMIT_CORE": 0}, cgroup_procs=[], seccomp_fd=-1,
    )  # fmt: skip
    launch = launcher.prepare(plan)
    try:
        read = marshal.loads(marshal.dumps(launch.plan))  # as the zygote's request holds it
    finally:
        launch.close()
    assert type(read["mode"]) is str and read["mode"] == "basic"
    assert read["argv"] == ["true"] and read["rlimits"] == {"RLIMIT_CORE": 0}


def test_a_worktrees_git_folders_are_asked_again_when_its_git_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sandboxed run needs them (they are shown read-only); git is asked once per
    worktree while its ``.git`` and what git answered stay what they were."""
    from activities.host.sandbox import paths
    from tests.support.repos import git as run_git

    asked: list[str] = []
    real = paths.git.run_sync

    def counted(args: list[str], cwd: object = None, **kw: object) -> object:
        asked.append(str(cwd))
        return real(args, cwd, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(paths.git, "run_sync", counted)
    monkeypatch.setattr(paths, "_git_dirs", {})
    repo, other = tmp_path / "repo", tmp_path / "other"
    for r in (repo, other):
        r.mkdir()
        run_git(r, "init", "-q", "-b", "main")
        run_git(r, "commit", "-q", "--allow-empty", "-m", "base")
    wt = tmp_path / "wt"
    run_git(repo, "worktree", "add", "-q", "-b", "w", str(wt))
    first = paths.git_dirs(str(wt))
    assert str(repo / ".git") in first
    assert paths.git_dirs(str(wt)) == first and len(asked) == 1, "kept"
    (wt / ".git").write_text(f"gitdir: {other / '.git'}\n")  # the same file, new content
    assert str(other / ".git") in paths.git_dirs(str(wt)) and len(asked) == 2
    assert paths.git_dirs(str(repo)) == [str(repo / ".git")] and len(asked) == 3
    (repo / ".git").rename(tmp_path / "moved.git")
    (other / ".git").rename(repo / ".git")  # another repository's folder in its place
    assert paths.git_dirs(str(repo)) == [str(repo / ".git")] and len(asked) == 4
