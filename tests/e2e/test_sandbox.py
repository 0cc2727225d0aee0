"""The sandbox runner, one command at a time: what a confined command can see, reach and do.

Each test runs real commands through ``run_sandboxed`` (the launcher, bubblewrap in
strict, real namespaces, real uids) in both confining levels where it applies.
Whole tasks with hostile agents are in test_trust_boundary.py; the sandbox's rules
that run nothing (policy, egress rules, uid leases, ...) in tests/unit/test_sandbox.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from activities.gates import run_command
from activities.host import sandbox
from activities.host.proc import ProcessLost, ProcResult
from activities.host.sandbox import SandboxRun, kill_leftovers, run_sandboxed
from activities.host.sandbox import uids as leases
from activities.host.toolbox import execute
from loop.contracts import Gate, RunGate, SandboxPolicy, ToolPolicy, Workspace
from loop.errors import PERMANENT
from tests.support.host import HOST, LEVELS, needs
from tests.support.net import free_port
from tests.support.repos import git

pytestmark = [pytest.mark.timeout(90)]


# --------------------------------------------------------------------------- fixtures


class Tree:
    """A repository, a worktree of it and a LOOP_HOME (0700, as the worker makes it)."""

    def __init__(self, root: Path, task_id: str = "sbx") -> None:
        self.root = root
        self.task_id = f"{task_id}-{uuid.uuid4().hex[:6]}"
        self.repo = root / "repo"
        self.home = root / "home"
        self.home.mkdir(mode=0o700)
        self.wt = self.home / "worktrees" / self.task_id
        self.attempt = self.home / "runs" / self.task_id / "attempt-1"
        self.attempt.mkdir(parents=True, mode=0o700)
        self.own = self.attempt / "agent"
        (self.repo / "tests").mkdir(parents=True)
        (self.repo / "app.py").write_text("x = 1\n")
        (self.repo / "tests" / "test_app.py").write_text("def test_x():\n    pass\n")
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", "base")
        git(self.repo, "worktree", "add", "-q", "-b", f"loop/{self.task_id}", str(self.wt))

    @property
    def uid(self) -> int:
        return leases.lease(self.home, self.task_id)

    def request(
        self, command: str, policy: SandboxPolicy, kind: str = "agent", **kw: object
    ) -> SandboxRun:
        options: dict = {
            "argv": ["bash", "-c", command],
            "kind": kind,
            "policy": policy,
            "task_id": self.task_id,
            "home": self.home,
            "tree": self.wt,
            "state_dir": self.attempt,
            "name": f"run-{uuid.uuid4().hex[:6]}",
            "limit_s": 30,
            "env": {"LOOP_OUTPUT_FILE": str(self.own / "output.md")},
            "writable": [self.own] if kind == "agent" else [],
            "protected": ["tests/**"],
        }
        options.update(kw)
        return SandboxRun(**options)

    async def run(self, command: str, policy: SandboxPolicy, kind: str = "agent", **kw: object):
        return await run_sandboxed(self.request(command, policy, kind, **kw))


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    t = Tree(tmp_path)
    yield t
    leases.release(t.home, t.task_id)


def py(code: str) -> str:
    """A bash word that runs ``code`` with the worker's Python."""
    return f"{sys.executable} -c {shlex.quote(textwrap.dedent(code))}"


def command_lines() -> list[str]:
    """Every live process's command line (what ``ps`` shows every user)."""
    lines = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                lines.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return lines


def owners(top: Path) -> set[int]:
    return {os.lstat(p).st_uid for p in [top, *top.rglob("*")] if ".git" not in p.parts}


class Listener:
    """A TCP server on 127.0.0.1 that answers HTTP 200 ``hello``: a destination."""

    def __init__(self) -> None:
        class Hello(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"hello from the listener")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


FETCH = textwrap.dedent(
    """
    import sys, urllib.error, urllib.request
    direct = sys.argv[1] == "direct"  # direct: ignore the proxy variables
    handlers = [urllib.request.ProxyHandler({})] if direct else []
    opener = urllib.request.build_opener(*handlers)
    for url in sys.argv[2:]:
        try:
            print(opener.open(url, timeout=5).status)
        except urllib.error.HTTPError as e:
            print(e.code)
        except Exception:
            print("000")
    """
)


def fetch(*urls: str, direct: bool = False) -> str:
    """A shell command printing the HTTP status of each URL (000: it got nowhere)."""
    how = "direct" if direct else "proxy"
    return f"{sys.executable} -c {shlex.quote(FETCH)} {how} {' '.join(urls)}"


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


KEY_PLACES = {
    "tmp": "/tmp",  # a private tmpfs in every run
    "var-tmp": "/var/tmp",  # private in basic; strict shows the host's read-only
    "dev-shm": "/dev/shm",  # private in basic; strict has a /dev of its own
    "etc": "/etc",  # shown as it is
    "home": str(Path.home()),  # hidden in strict; in basic hidden only where unsearchable
    "untraversable": "/var/lib",  # in a folder of its own that the task uid cannot search
    "loop-home": "",  # LOOP_HOME: hidden
    "repo": "",  # inside the repository the worktree came from
}
"""Where a person may keep the worker's key files."""
CREDENTIALS = (
    "LOOP_CODEC_KEY_FILE",
    "LOOP_ANSWER_KEY_FILE",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_CONFIG_FILE",
)


@pytest.fixture
def key_folders(tree: Tree) -> Iterator[Callable[[str], Path]]:
    """Makes a folder of key files in a place (removed afterwards)."""
    made: list[Path] = []

    def make(place: str) -> Path:
        top = Path(KEY_PLACES[place]) if KEY_PLACES[place] else tree.home
        if place == "repo":
            top = tree.repo
        folder = top / f"loop-keys-{uuid.uuid4().hex[:6]}"
        folder.mkdir(mode=0o700 if place == "untraversable" else 0o755)
        folder.chmod(0o700 if place == "untraversable" else 0o755)
        made.append(folder)
        return folder

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("linked", [False, True], ids=["file", "link"])
@pytest.mark.parametrize("place", list(KEY_PLACES))
@pytest.mark.parametrize("mode", LEVELS)
async def test_a_key_file_anywhere_stays_out_and_the_run_starts(
    tree: Tree,
    mode: str,
    place: str,
    linked: bool,
    key_folders: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every credential file of the worker, wherever it is kept (or a link to it kept
    elsewhere: in /tmp, or from /tmp into /etc), is absent or covered in the sandbox,
    whether the command names it (so it is bound) or finds it; and the run starts (a
    key under a folder the sandbox replaces once made every run fail to set up)."""
    folder = key_folders(place)
    links = key_folders("etc" if place == "tmp" else "tmp") if linked else None
    contents: list[str] = []
    named: list[str] = []
    for name in CREDENTIALS:
        word = f"SECRET-{name}-{uuid.uuid4().hex}"
        contents.append(word)
        path = folder / name.lower()
        if name == "TEMPORAL_CONFIG_FILE":  # its profile names one more key file
            profile_key = folder / "profile.key"
            profile_key.write_text(f"SECRET-profile-{word}")
            profile_key.chmod(0o644)
            contents.append(f"SECRET-profile-{word}")
            named.append(str(profile_key))
            path.write_text(f'# {word}\n[profile.default.tls]\nclient_key_path = "{profile_key}"\n')
        else:
            path.write_text(word)
        path.chmod(0o644)  # readable by anyone: only the sandbox keeps it out
        if links is not None:
            (links / path.name).symlink_to(path)
            path = links / path.name
        monkeypatch.setenv(name, str(path))
        named.append(str(path))
    plain = folder / "not-a-key.txt"
    plain.write_text("PLAIN-CONTENT")
    plain.chmod(0o644)
    policy = SandboxPolicy(mode=mode)
    finds = await tree.run(
        f'for f in $KEYS {plain}; do cat "$f"; echo; done 2>&1; echo end',
        policy,
        env={"KEYS": " ".join(named)},
    )
    names = await tree.run(f"cat {' '.join(named)} 2>&1; echo end", policy)
    for ran in (finds, names):
        text = Path(ran.log_path).read_text()
        assert ran.exit_code == 0 and text.rstrip().endswith("end"), text
        assert not [c for c in contents if c in text], text
    if place == "etc":  # the place shows: the cover is what keeps the keys out
        assert "PLAIN-CONTENT" in Path(finds.log_path).read_text()


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_key_given_a_second_name_after_the_worker_started_stops_the_run(
    tree: Tree, mode: str, key_folders: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hard link to the codec key made while the worker runs would show the key through
    a name no cover knows: the run does not start, and says why and what to do."""
    folder = key_folders("etc")
    key = folder / "codec.key"
    key.write_text("SECRET-linked")
    monkeypatch.setenv("LOOP_CODEC_KEY_FILE", str(key))
    os.link(key, folder / "second-name")
    with pytest.raises(Exception, match="cannot keep the worker's credentials out: ") as info:
        await tree.run("cat /etc/hostname", SandboxPolicy(mode=mode))
    assert "has 2 names (hard links)" in str(info.value)


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
async def test_a_toolchain_around_loop_home_shows_the_tree_and_hides_the_rest(
    tree: Tree, mode: str
) -> None:
    """A program found in ``X/bin`` shows ``X`` (its prefix), and X may hold LOOP_HOME
    (``~/bin`` on PATH, LOOP_HOME under ``~``): the worktree inside LOOP_HOME is still there
    at its own path, and the rest of LOOP_HOME is hidden by the view, not only by its mode."""
    tree.root.chmod(0o755)  # the task's uid may look in X, as in a home folder
    (tree.root / "bin").mkdir()
    (tree.root / "bin" / "tool").write_text("#!/bin/sh\necho tool ran\n")
    (tree.root / "bin" / "tool").chmod(0o755)
    (tree.home / "temporal.db").write_text("every payload")
    env = {"PATH": f"{tree.root / 'bin'}:/usr/bin:/bin", "LOOP_OUTPUT_FILE": str(tree.own)}
    line = f"tool && cat {tree.wt}/app.py && cd {tree.wt} && pwd -P && echo y > app.py"
    ran = await tree.run("", SandboxPolicy(mode=mode), argv=["sh", "-c", line], env=env)
    assert ran.exit_code == 0, ran.output_tail
    assert ran.output_tail.splitlines() == ["tool ran", "x = 1", str(tree.wt)]
    assert (tree.wt / "app.py").read_text() == "y\n"
    tree.home.chmod(0o755)  # now only the view may keep the database out
    line = f"tool && cat {tree.home}/temporal.db || echo home-hidden"
    ran = await tree.run("", SandboxPolicy(mode=mode), argv=["sh", "-c", line], env=env)
    assert "home-hidden" in ran.output_tail and "every payload" not in ran.output_tail


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
async def test_the_egress_proxy_lets_through_only_what_is_listed(
    tree: Tree, mode: str, listener: Listener, env
) -> None:
    temporal = env.client.service_client.config.target_host.rsplit(":", 1)[1]
    sandbox.protect([f"127.0.0.1:{temporal}"])
    other = Listener()
    try:
        allowed = f"127.0.0.1:{listener.port}"
        policy = SandboxPolicy(mode=mode, allow_hosts=[allowed, f"127.0.0.1:{temporal}"])
        ran = await tree.run(
            fetch(
                f"http://{allowed}/",
                f"http://127.0.0.1:{other.port}/",
                f"http://127.0.0.1:{temporal}/",
                "https://example.com/",
            )
            + "; "
            + fetch(f"http://{allowed}/", direct=True),
            policy,
        )
        codes = ran.output_tail.split()
        assert codes[:3] == ["200", "403", "403"], ran.output_tail
        assert codes[3] == "000" and codes[4] == "000", ran.output_tail  # no way around it
        refused = "\n".join(ran.network_refused)
        assert f"127.0.0.1:{other.port}: 127.0.0.1:{other.port} is not in" in refused
        assert "is the orchestrator's" in refused and "example.com:443" in refused
        # The run tool (the model's commands) and a gate given the proxy: the same rules.
        out = await execute(
            "run",
            json.dumps({"command": fetch(f"http://{allowed}/", f"http://127.0.0.1:{other.port}/")}),
            tree.wt,
            ToolPolicy(),
            [],
            tree.attempt,
            sandbox=policy,
            task_id=tree.task_id,
            home=tree.home,
        )
        assert out.text.split()[-2:] == ["200", "403"], out.text
        gate = await tree.run(
            fetch(f"http://{allowed}/"),
            SandboxPolicy(mode=mode, gate_network="proxy", allow_hosts=[allowed]),
            kind="gate",
        )
        assert gate.output_tail.split() == ["200"]
    finally:
        other.close()


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
async def test_a_run_its_cgroup_proves_ended_needs_no_uid_sweep(
    tree: Tree, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's cgroup emptied and removed is the proof: no process is started to kill by
    uid and /proc is not read; a sleeper it left (setsid) is killed through it."""
    swept: list[int] = []
    kill_uid = leases.kill_uid

    def counted(uid: int, *args: float) -> bool:
        swept.append(uid)
        return kill_uid(uid, *args)

    monkeypatch.setattr(leases, "kill_uid", counted)
    ran = await tree.run("true", SandboxPolicy(mode=mode))
    if "limits=rlimits+cgroup" not in ran.sandbox:
        pytest.skip(
            f"this host gives a run no cgroup of its own ({ran.sandbox}), so there is no "
            "cgroup to kill through; the uid sweep that kills here is tested beside this"
        )
    assert ran.exit_code == 0 and swept == []
    sleeper = "(setsid sh -c 'touch started; exec sleep 300.4244' &)"
    left = await tree.run(
        f"{sleeper}; until [ -e started ]; do sleep 0.01; done", SandboxPolicy(mode=mode)
    )
    assert left.exit_code == 0 and swept == []
    assert not sandbox.uid_processes(tree.uid)
    assert not [a for a in command_lines() if "300.4244" in a]
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
    deadline = time.monotonic() + 5
    while not sandbox.uid_processes(uid):  # setpriv starts as root, drops to the uid after
        assert time.monotonic() < deadline, "the orphan never ran as the task's uid"
        await asyncio.sleep(0.01)
    assert sandbox.uid_processes(uid) == [orphan.pid]
    assert uid in owners(tree.wt)
    assert await kill_leftovers(request.state_dir, request.name)
    assert await asyncio.wait_for(orphan.wait(), 5) == -9
    assert owners(tree.wt) == {0}
    assert not request.state_file.exists()


# --------------------------------------------------------------------------- the zygote


async def _running(request: SandboxRun) -> int:
    """The pid of ``request``'s run once its pid file says it started."""
    deadline = time.monotonic() + 20
    while not request.pid_file.exists():
        assert time.monotonic() < deadline, "the run never started"
        await asyncio.sleep(0.01)
    return int(json.loads(request.pid_file.read_text())["pid"])


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_run_is_the_zygotes_child_yet_its_exit_and_timeout_hold(
    tree: Tree, mode: str
) -> None:
    """The worker forks nothing: its zygote does, and reaps; the pid file holds the run's
    own pid, its exit code is the command's, and a timeout still kills its tree."""
    request = tree.request("sleep 0.5; exit 3", SandboxPolicy(mode=mode))
    run = asyncio.ensure_future(run_sandboxed(request))
    pid = await _running(request)
    zygote = _parent(pid)
    assert zygote != os.getpid()
    assert _parent(zygote) == os.getpid()
    assert "launch.py" in Path(f"/proc/{zygote}/cmdline").read_text()
    ran = await run
    assert ran.exit_code == 3 and not ran.timed_out, ran.output_tail
    slow = await tree.run("(sleep 300.4245 &); sleep 300", SandboxPolicy(mode=mode), limit_s=1)
    assert slow.timed_out and slow.exit_code is None
    assert not [a for a in command_lines() if "300.4245" in a]
    assert not sandbox.uid_processes(tree.uid)


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_run_starts_with_sigpipe_at_its_default_and_nothing_blocked(
    tree: Tree, mode: str
) -> None:
    """As a shell's child would: the launcher's interpreter ignores SIGPIPE and SIGXFSZ,
    and an ignored signal would stay ignored in the command it execs."""
    ran = await tree.run("grep -E '^Sig(Ign|Blk):' /proc/self/status", SandboxPolicy(mode=mode))
    assert ran.exit_code == 0, ran.output_tail
    masks = dict(line.split(":\t") for line in ran.output_tail.split("\n") if line)
    ignored = int(masks["SigIgn"], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), (sig, masks)
    assert int(masks["SigBlk"], 16) == 0, masks


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_zygote_killed_mid_run_fails_the_run_and_the_next_starts_another(
    tree: Tree, mode: str
) -> None:
    """Nothing reports the run's exit any more: it is killed, the step fails to be retried
    (not a permanent failure), and the next run gets a new zygote."""
    request = tree.request("(sleep 300.4246 &); sleep 300", SandboxPolicy(mode=mode))
    run = asyncio.ensure_future(run_sandboxed(request))
    zygote = _parent(await _running(request))
    os.kill(zygote, signal.SIGKILL)
    with pytest.raises(ProcessLost, match="zygote ended"):
        await asyncio.wait_for(run, 20)
    assert not [a for a in command_lines() if "300.4246" in a]
    assert not sandbox.uid_processes(tree.uid)
    assert owners(tree.wt) == {0}
    after = tree.request("sleep 0.3", SandboxPolicy(mode=mode))
    again = asyncio.ensure_future(run_sandboxed(after))
    assert _parent(await _running(after)) not in (zygote, os.getpid())
    assert (await again).exit_code == 0


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_worker_killed_mid_run_leaves_the_run_to_its_retry(tree: Tree, mode: str) -> None:
    """Its zygote ends (its socket to the worker read EOF) and kills nothing; the retried
    step finds the run by its pid file and kills it, as when the worker started it. In
    strict, bubblewrap (``--die-with-parent``) ends with its parent, the zygote now, as it
    did with the worker."""
    root = Path(__file__).resolve().parents[2]
    script = textwrap.dedent(f"""
        import asyncio, sys
        from pathlib import Path
        sys.path.insert(0, {str(root)!r})
        from activities.host.sandbox import SandboxRun, run_sandboxed
        from loop.contracts import SandboxPolicy
        asyncio.run(run_sandboxed(SandboxRun(
            argv=["bash", "-c", "sleep 300.42" + "48"], kind="agent",
            policy=SandboxPolicy(mode={mode!r}), task_id={tree.task_id!r},
            home=Path({str(tree.home)!r}), tree=Path({str(tree.wt)!r}),
            state_dir=Path({str(tree.attempt)!r}), name="crashed", limit_s=60,
        )))
    """)
    # The script spells the run's command so its own command line does not show it.
    worker = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    request = tree.request("true", SandboxPolicy(mode=mode), name="crashed")
    try:
        pid = await _running(request)
        zygote = _parent(pid)
        assert _parent(zygote) == worker.pid
        deadline = time.monotonic() + 20
        while not [a for a in command_lines() if "300.4248" in a]:
            assert time.monotonic() < deadline, "the run never started its command"
            await asyncio.sleep(0.02)
    finally:
        worker.kill()
        await worker.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zygote}").exists() and "Z" not in _state(zygote):
        assert time.monotonic() < deadline, "the zygote outlived its worker"
        await asyncio.sleep(0.02)
    if mode == "basic":
        assert [a for a in command_lines() if "300.4248" in a], "the zygote killed the run"
    assert await kill_leftovers(request.state_dir, request.name)
    deadline = time.monotonic() + 10
    while [a for a in command_lines() if "300.4248" in a]:
        assert time.monotonic() < deadline, "the retry did not kill the run"
        await asyncio.sleep(0.02)
    assert not sandbox.uid_processes(tree.uid)
    assert owners(tree.wt) == {0}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.parametrize("mode", LEVELS)
async def test_two_runs_share_nothing(tree: Tree, mode: str) -> None:
    """While one run holds a descriptor of the worker and a variable of its own, the next
    sees neither: only its stdio, an empty signal mask, its own environment."""
    kept, passed = os.pipe()
    try:
        first = tree.request(
            "sleep 300.4247", SandboxPolicy(mode=mode), env={"LOOP_ONLY_FIRST": "first-run"},
            pass_fds=(passed,),
        )  # fmt: skip
        one = asyncio.ensure_future(run_sandboxed(first))
        await _running(first)
        second = await tree.run(
            "ls /proc/self/fd | tr '\\n' ' '; echo; grep SigBlk /proc/self/status; env",
            SandboxPolicy(mode=mode),
        )
        one.cancel()
        with pytest.raises(asyncio.CancelledError):
            await one
    finally:
        os.close(kept)
        os.close(passed)
    assert second.exit_code == 0, second.output_tail
    lines = second.output_tail.splitlines()
    assert lines[0].split() == ["0", "1", "2", "3"]  # 3: the folder ls reads
    assert lines[1].split() == ["SigBlk:", "0" * 16]
    assert "first-run" not in second.output_tail
    assert "LOOP_OUTPUT_FILE=" in second.output_tail


def moving(python: str = sys.executable) -> str:
    """The chain in the background, then ``alive`` when it runs (``kill -0 -1`` finds a
    process of the same uid)."""
    code = "$'import os\\nwhile True:\\n    if os.fork(): os._exit(0)\\n'"
    return f"{python} -c {code} >/dev/null 2>&1 & sleep 0.3; kill -0 -1 2>/dev/null && echo alive"


"""A process that forks and exits, forever: its pid is never the same twice, so a sweep
that lists a uid's processes and then kills them is always one step behind."""


@needs("basic")
async def test_the_sweep_proves_the_uid_empty_without_cgroups(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    from activities.host.sandbox import cgroups

    monkeypatch.setattr(cgroups.Cgroup, "create", staticmethod(lambda *_: (None, "hidden")))
    ran = await tree.run(moving(), SandboxPolicy(mode="basic"))
    assert "limits=rlimits+hidden" in ran.sandbox  # no cgroup did the killing
    assert "alive" in ran.output_tail, ran.output_tail
    assert not leases.alive(tree.uid)
    # The same chain started as the uid outside any sandbox: the sweep alone ends it.
    chained = await asyncio.create_subprocess_exec(
        "setpriv", f"--reuid={tree.uid}", f"--regid={tree.uid}", "--clear-groups",
        "bash", "-c", moving("/usr/bin/python3"), start_new_session=True, cwd="/",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    said, _ = await chained.communicate()
    assert b"alive" in said, said
    assert leases.kill_uid(tree.uid)
    assert not leases.alive(tree.uid)


@needs("basic")
async def test_a_chain_that_outruns_its_cgroup_is_swept_by_uid(tree: Tree) -> None:
    """With a cgroup too: if killing its members cannot empty it in time, the uid's own
    ``kill(-1)`` does, and the uid is proved empty before the worktree is taken back."""
    ran = await tree.run(moving(), SandboxPolicy(mode="basic"))
    assert "alive" in ran.output_tail, ran.output_tail
    assert not leases.alive(tree.uid)
    assert owners(tree.wt) == {0}


def test_the_proxy_is_started_before_the_first_run_needs_it() -> None:
    """What the worker does once it serves (``sandbox.warm_egress``): the first agent
    then finds it running; a second call starts nothing new."""
    from activities.host.sandbox import egress

    assert sandbox.warm_egress()
    first = egress._process
    assert first is not None and first.poll() is None
    assert egress._folder is not None and (egress._folder / "proxy.sock").exists()
    assert sandbox.warm_egress() and egress._process is first


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
    policy = SandboxPolicy(mode=mode)

    async def run_gate(gate: Gate) -> ProcResult:
        return (await run_command(gate, ws, tree.wt, tree.attempt, tree.home, policy)).proc

    writes = await run_gate(
        RunGate(name="writes", run="cat app.py && touch made.txt && echo wrote")
    )
    assert writes.exit_code != 0 and "x = 1" in writes.output_tail
    assert "wrote" not in writes.output_tail and not (tree.wt / "made.txt").exists()
    home = await run_gate(
        RunGate(name="home", run="echo $HOME $TMPDIR $PYTHONNOUSERSITE; test -e $HOME || echo new")
    )
    assert home.output_tail.split() == ["/tmp/home", "/tmp", "1", "new"], home
    reads = await run_gate(RunGate(name="reads", run=f"{sys.executable} app.py"))
    assert reads.exit_code == 0, reads.output_tail


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


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_probe_is_remembered_until_what_it_checked_changes(
    tree: Tree, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second task with the same command is answered without a sandbox; a program
    replaced by one the task's uid may not run is probed again, and found missing."""
    from activities.host.sandbox import known
    from activities.host.sandbox import run as runner

    probes: list[str] = []
    real = runner.run_sandboxed

    async def counted(run: SandboxRun) -> ProcResult:
        probes.append(run.name)
        return await real(run)

    monkeypatch.setattr(runner, "run_sandboxed", counted)
    monkeypatch.setattr(known, "_found", OrderedDict())  # this test's own memory
    folder = Path(tempfile.mkdtemp(prefix="loop-known-"))  # /tmp: every uid can look in
    folder.chmod(0o755)
    try:
        program = folder / "tool"

        def install(mode_bits: int) -> None:
            fresh = folder / ".tool.new"
            fresh.write_text("#!/bin/sh\nexit 0\n")
            fresh.chmod(mode_bits)
            fresh.replace(program)

        install(0o755)
        policy = SandboxPolicy(mode=mode)
        # Found on PATH, as `command -v` checks execute permission only there.
        line = ["sh", "-c", "tool --check"]
        path_env = {"PATH": f"{folder}:/usr/bin:/bin"}
        assert (
            await sandbox.missing_programs(tree.request("", policy, argv=line, env=path_env)) == []
        )
        assert (
            await sandbox.missing_programs(tree.request("", policy, argv=line, env=path_env)) == []
        )
        assert len(probes) == 1, "the second probe was answered from memory"
        install(0o700)  # root's only: the task's uid cannot execute it
        assert await sandbox.missing_programs(
            tree.request("", policy, argv=line, env=path_env)
        ) == ["tool"]
        assert len(probes) == 2
        install(0o755)
        assert (
            await sandbox.missing_programs(tree.request("", policy, argv=line, env=path_env)) == []
        )
        assert (
            await sandbox.missing_programs(tree.request("", policy, argv=line, env=path_env)) == []
        )
        assert len(probes) == 3, "a failure is never remembered; the fixed program once more"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_program_named_by_its_path_is_probed_for_the_task_uid(
    tree: Tree, mode: str
) -> None:
    """``command -v /path`` answers for any file that exists: a path in a shell line that
    the task's uid may not execute must be found missing all the same, before an attempt
    is spent on it (the command's own first word is checked before any probe)."""
    folder = Path(tempfile.mkdtemp(prefix="loop-probe-"))  # /tmp: every uid can look in
    folder.chmod(0o755)
    try:
        program = folder / "tool"
        program.write_text("#!/bin/sh\nexit 0\n")
        policy = SandboxPolicy(mode=mode)
        for bits, missing in ((0o755, []), (0o700, [str(program)]), (0o644, [str(program)])):
            program.chmod(bits)
            request = tree.request("", policy, argv=["sh", "-c", f"{program} --check"])
            assert await sandbox.missing_programs(request) == missing, oct(bits)
        assert await sandbox.missing_programs(
            tree.request("", policy, argv=["sh", "-c", f"{folder} --check"])
        ) == [str(folder)], "a folder is not a program"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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


def test_the_home_folder_and_the_database_are_the_workers_alone(tmp_path: Path) -> None:
    from loop.devserver import DevServer

    port = free_port()
    home = tmp_path / "server"
    server = DevServer.start(home=home, port=port, headless=True)
    try:
        asyncio.run(server.wait_ready())
    finally:
        server.stop()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    dbs = list(home.glob("temporal.db*"))
    assert dbs and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in dbs), dbs
