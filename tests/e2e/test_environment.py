"""A repository's own environment, end to end: built once in the sandbox, laid read-only into
every attempt's and gate's sandbox, shared by tasks on the same key (docs/guides/environment.md).

The calc repository (``tests.support.environments``) cannot import without its environment:
its code is in ``src/`` (importable only through the editable install's path) and imports
``dep`` (installed by the setup). Tests that need the package registry are in
test_environment_registry.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.gates import Ran, run_command
from activities.host import environments
from activities.host.sandbox import Laid
from activities.host.sandbox.paths import sandbox_path
from activities.host.toolbox import execute
from loop.contracts import (
    SETUP_TREE,
    GateResult,
    RunGate,
    SuiteReport,
    TaskResult,
    TaskSpec,
    TaskState,
    ToolPolicy,
    Workspace,
)
from loop.settings import Settings
from tests.support.agents import write_agent
from tests.support.environments import FIXED, TESTS, environment, make_env_repo
from tests.support.host import LEVELS, needs
from tests.support.repos import git
from tests.support.tasks import replays, result_of, start, task
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

FIX_AND_TRY_THE_ENVIRONMENT = f"""
calc = pathlib.Path("src/calc/__init__.py")
calc.write_text({FIXED!r})
pathlib.Path("tests/test_more.py").write_text(
    "import unittest\\nfrom calc import add\\n\\n\\nclass More(unittest.TestCase):\\n"
    "    def test_one_and_one(self):\\n        self.assertEqual(add(1, 1), 2)\\n"
)
site = next(pathlib.Path(".venv/lib").glob("python3*/site-packages"))
tried = {{}}
for name, write in (
    ("dep", lambda: (site / "dep.py").write_text("VALUE = 99\\n")),
    ("new", lambda: (site / "planted.py").write_text("X = 1\\n")),
    ("through the link", lambda: pathlib.Path({SETUP_TREE!r}, ".venv", "planted").write_text("")),
    ("emptied", lambda: __import__("shutil").rmtree(".venv")),
    ("moved away", lambda: pathlib.Path(".venv").rename("venv-aside")),
):
    try:
        write()
        tried[name] = "written"
    except OSError as e:
        tried[name] = e.errno
(own / "tried.json").write_text(json.dumps(tried))
out.write_text("fixed add")
"""
"""Fixes the bug, adds a regression test, and tries to change the environment four ways."""


TESTS_ONLY = [{"name": "tests", "run": TESTS, "timeout": 60}]


def env_task(repo: Path, agent: list[str], level: str, **overrides: object) -> dict:
    spec = task(
        repo,
        agent,
        verify=[
            {"name": "tests", "run": TESTS, "timeout": 60},
            {"name": "new-test", "regression_test": True},
        ],
        environment=environment(),
        sandbox={"mode": level},
    )
    spec.update(overrides)
    return spec


def events(result: TaskResult, kind: str) -> list[str]:
    return [e.detail for e in result.events if e.kind == kind]


def gate(result: TaskResult, name: str) -> GateResult:
    verdict = result.attempts[-1].verdict
    assert verdict is not None
    return next(g for g in verdict.gates if g.name == name)


def report(result: TaskResult, name: str) -> SuiteReport:
    """The per-test report the gate's verdict was made of (kept with its run)."""
    summary = gate(result, name).evidence.tests
    assert summary is not None
    ran = Ran.model_validate_json(Path(summary.report_path).read_text())
    assert ran.report is not None
    return ran.report


@pytest.mark.parametrize("level", LEVELS)
async def test_a_task_needing_its_environment_reaches_done(
    client: Client, settings: Settings, tmp_path: Path, level: str
) -> None:
    repo = make_env_repo(tmp_path / "repo")
    agent = write_agent(tmp_path, FIX_AND_TRY_THE_ENVIRONMENT)
    spec = env_task(repo, agent, level)
    async with build_worker(client, settings):
        result = await result_of(await start(client, settings, spec), within=150)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert len(result.attempts) == 1
    built = events(result, "environment")
    assert len(built) == 1 and ": built in " in built[0], built

    # At base the tests ran and failed by id (not at import): the environment was there.
    brief = Path(result.explore_brief).read_text()
    assert "fails at base: `tests.test_calc.Calc.test_add`" in brief, brief
    assert "- `.venv`: the repository's dependencies, installed by `python3" in brief, brief
    # The commit's run: judged by test id, the one failing at base passes now.
    tests = report(result, "tests")
    assert tests.tests["tests.test_calc.Calc.test_add"].outcome == "passed"
    assert "1 required now pass" in gate(result, "tests").evidence.detail
    # regression_test ran the new test on base's code, with the environment too: it
    # failed there on the bug, not on an import.
    regression = gate(result, "new-test").evidence.tests
    assert regression is not None
    [failing] = regression.failing
    assert failing.id == "tests.test_more.More.test_one_and_one"
    assert failing.outcome == "failed" and "AssertionError: 0 != 2" in failing.message, failing

    # The agent could change nothing of it: every write refused, the folder stayed.
    tried = json.loads(
        (settings.runs / spec["id"] / "attempt-1" / "agent" / "tried.json").read_text()
    )
    erofs, ebusy = 30, 16
    assert set(tried.values()) <= {erofs, ebusy}, tried
    assert tried["moved away"] == ebusy and tried["dep"] == erofs, tried
    [kept] = environments.listing(settings.home)
    root = environments.envs(settings.home) / kept.key / "tree" / ".venv"
    [dep] = root.glob("lib/python3*/site-packages/dep.py")
    assert dep.read_text() == "VALUE = 1\n"
    assert not list(root.glob("lib/python3*/site-packages/planted.py"))
    # Nothing of it is left in the worktree: no empty .venv the agent would seem to make.
    assert not (Path(result.worktree) / ".venv").exists()
    assert result.attempts[0].make is not None and not result.attempts[0].make.ignored_files


@needs("basic")
async def test_tasks_on_one_key_share_one_build_even_at_once(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    """Two tasks started together build the environment once (the other waits for it and
    takes it); a third finds it at once. Each holds it while it runs, none after."""
    repo = make_env_repo(tmp_path / "repo")
    agent = write_agent(tmp_path, f"pathlib.Path('src/calc/__init__.py').write_text({FIXED!r})")
    slow = environment(setup=[*environment()["setup"], "sleep 1"])
    specs = [env_task(repo, agent, "basic", environment=slow, verify=TESTS_ONLY) for _ in range(3)]
    async with build_worker(client, settings):
        handles = [await start(client, settings, s) for s in specs[:2]]
        together = [await result_of(h, within=150) for h in handles]
        third = await result_of(await start(client, settings, specs[2]), within=150)
    results = [*together, third]
    assert [r.state for r in results] == [TaskState.DONE_WITH_EVIDENCE] * 3, results
    said = [events(r, "environment")[0] for r in results]
    assert sum(": built in " in s for s in said) == 1, said
    assert sum(": cache hit " in s for s in said) == 2, said
    logs = [settings.runs / s["id"] / "environment" / "setup.log" for s in specs]
    assert [log.exists() for log in logs].count(True) == 1, "the setup ran more than once"
    [kept] = environments.listing(settings.home)
    assert kept.holders == [], "a task that ended still holds it"


@needs("basic")
async def test_a_setup_that_fails_blocks_at_once_with_its_log(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    repo = make_env_repo(tmp_path / "repo")
    failing = "echo 'ERROR: no matching distribution for nope==9' >&2; exit 3"
    spec = env_task(
        repo,
        write_agent(tmp_path, "out.write_text('never runs')"),
        "basic",
        environment=environment(setup=["python3 -m venv --without-pip .venv", failing]),
    )
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        result = await result_of(handle, within=60)
        closed = (await handle.describe()).close_time
        history = [e async for e in handle.fetch_history_events()]
    assert result.state == TaskState.BLOCKED
    assert result.attempts == [], "an attempt was spent"
    reason = result.reason
    assert f"`{failing}` exited 3" in reason, reason
    assert "no matching distribution for nope==9" in reason, reason
    assert str(settings.runs / spec["id"] / "environment" / "setup.log") in reason, reason
    # One try (a failed setup is never retried), and the task ended within 2 s of it.
    [build] = [
        e
        for e in history
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "build_environment"
    ]
    tries = [
        e.activity_task_started_event_attributes.attempt
        for e in history
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id == build.event_id
    ]
    assert tries == [1], tries
    failed_at = (settings.runs / spec["id"] / "environment" / "setup-2.log").stat().st_mtime
    assert closed is not None and closed.timestamp() - failed_at <= 2.0, (
        closed.timestamp() - failed_at
    )
    assert environments.listing(settings.home) == [], "a failed build was kept"


class _Counted(BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"fetched")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def server() -> Iterator[tuple[int, list[str]]]:
    """A local HTTP server: its port, and the paths asked of it."""
    hits: list[str] = []
    handler = type("Handler", (_Counted,), {"hits": hits})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def fetch(port: int) -> str:
    return (
        'python3 -c "import urllib.request; '
        f"print(urllib.request.urlopen('http://127.0.0.1:{port}/pkg').read())\""
    )


@needs("basic")
async def test_the_setup_reaches_only_the_hosts_it_lists(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    """Through the egress proxy: a listed host answers, another is refused and the reason
    says so; the agent does not get the setup's hosts."""
    repo = make_env_repo(tmp_path / "repo")
    with server() as (listed, listed_hits), server() as (other, other_hits):
        reach = f"urllib.request.urlopen('http://127.0.0.1:{listed}/agent', timeout=5)"
        agent = write_agent(
            tmp_path,
            f"""
import urllib.request
try:
    {reach}
    (own / "reached.txt").write_text("yes")
except OSError as e:
    (own / "reached.txt").write_text(str(e))
pathlib.Path("src/calc/__init__.py").write_text({FIXED!r})
""",
        )
        ok, refused = (
            env_task(
                repo,
                agent,
                "basic",
                verify=TESTS_ONLY,
                environment=environment(
                    setup=[*environment()["setup"], fetch(port)],
                    allow_hosts=[f"127.0.0.1:{listed}"],
                ),
            )
            for port in (listed, other)
        )
        async with build_worker(client, settings):
            done = await result_of(await start(client, settings, ok), within=120)
            blocked = await result_of(await start(client, settings, refused), within=120)
    assert done.state == TaskState.DONE_WITH_EVIDENCE, done.reason
    assert listed_hits == ["/pkg"], "the setup did not reach the host it lists"
    assert "yes" != (settings.runs / ok["id"] / "attempt-1" / "agent" / "reached.txt").read_text()
    assert done.attempts[0].make is not None
    assert f"127.0.0.1:{listed}" in " ".join(done.attempts[0].make.network_refused)
    assert blocked.state == TaskState.BLOCKED
    assert other_hits == [], "the proxy let the setup reach a host it does not list"
    assert f"the egress proxy refused 127.0.0.1:{other}" in blocked.reason, blocked.reason


CHANGES_ITS_REQUIREMENTS = f"""
if attempt == 1:
    pathlib.Path("requirements.txt").write_text("dep==\\n")  # the setup fails on it
    out.write_text("unpinned dep")
else:
    pathlib.Path("requirements.txt").write_text("dep==2\\n")
    pathlib.Path("src/calc/__init__.py").write_text(
        {FIXED!r}.replace("return a + b", "return a + b if dep.VALUE == 2 else 0")
    )
    out.write_text("dep 2, fixed")
"""
"""Attempt 1 breaks the environment's setup; attempt 2 needs ``dep`` 2 to pass."""


@needs("basic")
async def test_an_attempt_that_changes_a_key_file_is_judged_with_its_own_environment(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    repo = make_env_repo(tmp_path / "repo")
    spec = env_task(
        repo, write_agent(tmp_path, CHANGES_ITS_REQUIREMENTS), "basic", verify=TESTS_ONLY
    )
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        result = await result_of(handle, within=150)
    await replays(handle, "environment")
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    first, second = (a.verdict for a in result.attempts)
    assert first is not None and second is not None
    # A setup the attempt broke fails its verdict (the next attempt is told), no more.
    [broken] = first.gates
    assert (broken.name, broken.passed) == ("environment", False)
    assert "requirements.txt pins no dep version" in broken.evidence.detail
    assert "requirements.txt" in broken.requirement
    # Its fix passes only with dep 2 installed: the gates ran with the one built for it.
    assert second.passed
    assert second.environment.startswith("built for this attempt, which changes requirements.txt")
    said = events(result, "environment")
    assert len(said) == 3 and "attempt 1: " in said[1] and "attempt 2: " in said[2], said
    assert len(environments.listing(settings.home)) == 2


# ------------------------------------------------------------------ one run at a time


async def built_env(
    tmp_path: Path, level: str, setup: list[str] | None = None
) -> tuple[TaskSpec, Workspace, Path]:
    """The calc repository's environment built at ``level``, and a workspace with it."""
    repo = make_env_repo(tmp_path / "repo")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    spec = TaskSpec.model_validate(
        env_task(
            repo,
            ["true"],
            level,
            environment=environment(**({"setup": setup} if setup else {})),
            sandbox={"mode": level, "allow_unsafe_off": True},
        )
    )
    base = git(repo, "rev-parse", "HEAD")
    planned = await environments.plan(spec, str(repo), base)
    run_dir = home / "runs" / spec.id
    found = await environments.Builder(
        home=home,
        locks=home / "locks",
        spec=spec,
        repo=str(repo),
        commit=base,
        state_dir=run_dir / "environment",
        hidden=[],
    ).find_or_build(planned)
    checkout = tmp_path / "checkout"
    git(repo, "worktree", "add", "-q", "--detach", str(checkout), base)
    ws = Workspace(
        task_id=spec.id,
        repo=str(repo),
        path=str(checkout),
        branch="main",
        base_ref="main",
        base_commit=base,
        run_dir=str(run_dir),
        environment=found,
    )
    return spec, ws, home


async def gate_in(spec: TaskSpec, ws: Workspace, home: Path, line: str) -> tuple[int | None, str]:
    ran = await run_command(
        RunGate(name="probe", run=line, report="exit"),
        ws,
        Path(ws.path),
        Path(ws.run_dir) / "probe",
        home,
        spec.sandbox,
    )
    return ran.proc.exit_code, Path(ran.proc.log_path).read_text()


async def test_off_links_the_environment_for_the_run_only(tmp_path: Path) -> None:
    """``off`` has no mounts: the tree gets a link to the kept environment while the run
    lasts (the weaker promise: the run is the worker's user)."""
    spec, ws, home = await built_env(tmp_path, "off")
    code, said = await gate_in(
        spec, ws, home, "readlink .venv; .venv/bin/python -c 'import dep; print(dep.VALUE)'"
    )
    assert code == 0, said
    assert said.splitlines() == [str(Path(ws.environment.root) / ".venv"), "1"], said
    assert not os.path.lexists(Path(ws.path) / ".venv")


@pytest.mark.parametrize("level", LEVELS)
async def test_a_link_where_the_environment_goes_is_replaced_not_followed(
    tmp_path: Path, level: str
) -> None:
    """A commit that holds ``.venv`` as a link to elsewhere: the environment is laid in its
    place, nothing is mounted or written where the link pointed."""
    spec, ws, home = await built_env(tmp_path, level)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (Path(ws.path) / ".venv").symlink_to(elsewhere)
    code, said = await gate_in(
        spec, ws, home, ".venv/bin/python -c 'import dep, calc; print(dep.VALUE, calc.__file__)'"
    )
    assert code == 0, said
    assert said.split() == ["1", f"{SETUP_TREE}/src/calc/__init__.py"], said
    assert list(elsewhere.iterdir()) == []
    assert not os.path.lexists(Path(ws.path) / ".venv")


@needs("basic")
async def test_what_a_setup_links_to_is_shown_only_if_its_programs_live_there(
    tmp_path: Path,
) -> None:
    """A link's text is the setup's: a link to a folder the task's uid could not read
    does not make it visible to later runs; the interpreter a virtualenv points at is."""
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "key").write_text("hunter2")
    setup = [*environment()["setup"], f"ln -s {secret / 'key'} .venv/stolen"]
    spec, ws, home = await built_env(tmp_path, "basic", setup)
    assert ws.environment is not None
    assert not [s for s in ws.environment.shows if str(tmp_path) in s], ws.environment.shows
    path = sandbox_path(os.environ["PATH"], dict(os.environ))  # python3 as the sandbox finds it
    python = Path(os.path.realpath(shutil.which("python3", path=path) or "")).parent.parent
    assert any(python.as_posix().startswith(s) for s in ws.environment.shows), ws.environment
    code, said = await gate_in(spec, ws, home, "cat .venv/stolen")
    assert code != 0 and "hunter2" not in said, said


# ------------------------------------------------------------------ loop env


async def loop(home: Path, *args: str) -> tuple[int, str, str]:
    """``loop ARGS`` as a person runs it on this host (its LOOP_HOME)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOP_", "TEMPORAL_"))}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "loop"),
        *args,
        env={**env, "LOOP_HOME": str(home), "COLUMNS": "200"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@needs("basic")
async def test_loop_env_builds_ahead_lists_and_prunes(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    repo = make_env_repo(tmp_path / "repo")
    # The agent works until the test says "go" (a file in its folder): the task holds its
    # environment all that time.
    agent = write_agent(
        tmp_path,
        "deadline = time.time() + 60\n"
        "while not (own / 'go').exists() and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
        f"pathlib.Path('src/calc/__init__.py').write_text({FIXED!r})\n",
    )
    spec = env_task(repo, agent, "basic", verify=TESTS_ONLY)
    file = tmp_path / "task.yaml"
    file.write_text(yaml.safe_dump(spec))
    home = settings.home
    home.mkdir(mode=0o700, exist_ok=True)

    code, out, err = await loop(home, "start", str(file), "--print")
    assert code == 0 and json.loads(out)["environment"]["setup"] == environment()["setup"]
    assert err.splitlines()[1:3] == [f"  $ {c}" for c in environment()["setup"]], err

    code, out, err = await loop(home, "env", "build", str(file))
    assert code == 0, err
    assert ": built in " in out, out
    code, out, _ = await loop(home, "env", "build", str(file))
    assert code == 0 and ": cache hit " in out, out
    code, out, _ = await loop(home, "env", "ls", "--json")
    [kept] = json.loads(out)
    assert kept["repository"] == str(repo) and kept["holders"] == [] and kept["size"] > 0

    # A task started after it takes it as it is, and holds it while it runs.
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for_holder(home, spec["id"])
        code, out, _ = await loop(home, "env", "prune", "--older-than", "0")
        own = settings.runs / spec["id"] / "attempt-1" / "agent"
        for _ in range(600):  # the agent's folder is made when its attempt opens
            if own.is_dir():
                break
            await asyncio.sleep(0.05)
        (own / "go").touch()
        assert code == 0 and out.startswith("0 removed"), out
        result = await result_of(handle, within=120)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert ": cache hit " in events(result, "environment")[0]
    code, out, _ = await loop(home, "trace", spec["id"])  # offline: from the trace file
    said = [line.split()[1:3] for line in out.splitlines() if " environment " in line]
    assert code == 0 and said == [["environment", f"{kept['key'][:12]}:"]], out
    assert ": cache hit in " in out, out

    code, out, _ = await loop(home, "env", "prune", "--older-than", "0")
    assert code == 0 and f"removed {kept['key'][:12]}" in out, out
    assert environments.listing(home) == []
    code, _, err = await loop(home, "env", "prune")
    assert code == 2 and err.startswith("error: say what to prune"), err


async def wait_for_holder(home: Path, task_id: str) -> None:
    for _ in range(300):
        if any(task_id in k.holders for k in environments.listing(home)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{task_id} never held its environment")


@needs("basic")
async def test_auto_runs_the_repository_s_own_setup_script_in_the_sandbox(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    """``environment: auto`` reads the repository's ``.loopwork/setup.sh`` and says so
    before anything starts; the script runs as any setup does (the sandbox, the task file's
    hosts: none here, so its attempt at the network is refused)."""
    repo = make_env_repo(tmp_path / "repo")
    script = repo / ".loopwork" / "setup.sh"
    script.parent.mkdir()
    script.write_text(
        "set -e\n"
        "python3 -m venv --without-pip .venv\n"
        "bash tools/install.sh\n"
        "python3 -c \"import urllib.request; urllib.request.urlopen('http://example.com')\" "
        "|| echo 'no network for me'\n"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a setup script")
    agent = write_agent(tmp_path, f"pathlib.Path('src/calc/__init__.py').write_text({FIXED!r})")
    spec = env_task(repo, agent, "basic", verify=TESTS_ONLY, environment="auto")
    file = tmp_path / "task.yaml"
    file.write_text(yaml.safe_dump(spec))
    settings.home.mkdir(mode=0o700, exist_ok=True)
    code, _, err = await loop(settings.home, "start", str(file), "--print")
    assert code == 0 and err.splitlines()[:2] == [
        "environment (from the repository's .loopwork/setup.sh), run once per key in the sandbox:",
        "  $ bash .loopwork/setup.sh",
    ], err
    async with build_worker(client, settings):
        result = await result_of(await start(client, settings, spec), within=150)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    log = (settings.runs / spec["id"] / "environment" / "setup.log").read_text()
    assert "no network for me" in log and "the egress proxy refused: example.com" in log, log


@needs("basic")
async def test_the_model_loop_s_run_tool_has_it_too(tmp_path: Path) -> None:
    """The openai backend's ``run`` tool runs in the worktree with the environment laid,
    as the agent's command does, and cannot change it either."""
    spec, ws, home = await built_env(tmp_path, "basic")
    (tmp_path / "logs").mkdir()
    out = await execute(
        "run",
        json.dumps(
            {
                "command": ".venv/bin/python -c 'import calc, dep; print(dep.VALUE)'; "
                "touch .venv/x 2>/dev/null || echo refused"
            }
        ),
        Path(ws.path),
        ToolPolicy(),
        [],
        tmp_path / "logs",
        sandbox=spec.sandbox,
        task_id=spec.id,
        home=home,
        environment=Laid.of(ws.environment),
    )
    assert out.text.split()[-2:] == ["1", "refused"], out.text
