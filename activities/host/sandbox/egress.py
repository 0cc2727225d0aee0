"""The worker's side of the egress proxy: one proxy.py process, one relay per run.

A sandbox with ``network: proxy`` has a network namespace of its own with only
``lo`` in it. The launcher listens there on ``127.0.0.1:3128`` and hands the
listening socket to the worker, which accepts on it (the socket belongs to the
sandbox's namespace, the worker to the host's) and relays each connection to
the proxy's unix socket, in a folder only the worker can open. The proxy
(``proxy.py`` from PyPI, a maintained HTTP proxy; Loopwork parses no HTTP)
decides with ``egress_plugin``: the relay's first line names the run's ticket,
the ticket file names the task and what it may reach.

The proxy is one process per worker process, started by the worker once it serves
(``warm``; or by the first run that needs it), killed with the worker; a watchdog
in it ends it when the worker dies, so a ``kill -9`` of the worker does not leave
it behind.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from activities.host.sandbox.egress_rules import address_entry
from activities.host.sandbox.paths import DEFAULT_PATH
from activities.host.sandbox.services import Protected

PROXY_PORT = 3128
"""Where the proxy answers inside every sandbox's own network namespace."""
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
START_TIMEOUT_S = 20.0
CHUNK = 64 * 1024
MAX_REFUSALS = 20
MAX_CONNECTIONS = 64
"""Connections one run may hold open through the proxy at once: each costs the worker
two file descriptors, and the worker serves every task."""

_lock = threading.Lock()
_process: subprocess.Popen[bytes] | None = None
_folder: Path | None = None
_protected = Protected()


def proxy_env() -> dict[str, str]:
    """The variables every HTTP client reads, in both spellings; nothing bypasses it."""
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = PROXY_URL
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


def resolve(hostport: str) -> list[str]:
    """``host:port`` as the ``ip:port`` entries it resolves to (the deny list's form)."""
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return []
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    except OSError:
        return []
    return sorted({address_entry(str(i[4][0]), int(port)) for i in infos})


def endpoint_entries(base_url: str | None, *, openai: bool) -> list[str]:
    """``allow_hosts`` entries for a model endpoint the task itself names (``agent.base_url``),
    or the ``openai`` backend's default: its ``host:port`` and the addresses it resolves to,
    so a local endpoint (``http://localhost:8000/v1``) is reachable without listing it."""
    url = base_url or (os.environ.get("OPENAI_BASE_URL") if openai else None)
    if not url and openai:
        url = "https://api.openai.com/v1"
    if not url:
        return []
    parts = urlsplit(url)
    if not parts.hostname:
        return []
    port = parts.port or (443 if parts.scheme == "https" else 80)
    named = address_entry(parts.hostname, port)
    return list(dict.fromkeys([named, *resolve(named)]))


def local_addresses() -> set[str]:
    """Every address of this host: loopback, "any", and each interface's (from procfs)."""
    found = {"127.0.0.1", "::1", "0.0.0.0", "::"}
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for before, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line:
                found.add(before.split()[-1])
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0]
            found.add(str(ipaddress.ip_address(int(raw, 16))))
    return found


def protect(services: list[str], home: Path | None = None) -> None:
    """The orchestrator and the worker's own services: refused to every sandbox even when
    a task lists them (``services.Protected``: every port their processes listen on,
    on every local address; every port of a host elsewhere). Called by the
    composition root; ``home`` is where Loopwork's servers register."""
    _protected.reset(services, home, local_addresses())


def protected() -> list[str]:
    if not _protected.local:
        protect([])
    return _protected.entries()


def _stop() -> None:
    """Stop the proxy and remove its folder, so a worker leaves nothing in /tmp."""
    global _process, _folder
    if _process is not None and _process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(_process.pid, signal.SIGKILL)
        _process.wait()
    _process = None
    if _folder is not None:
        shutil.rmtree(_folder, ignore_errors=True)
        _folder = None


MAIN = "activities.host.sandbox.egress_main"
"""The proxy's module: its folder and this worker's pid are its arguments."""


def _running() -> tuple[Path, Path]:
    """The proxy's folder and socket, starting the proxy when it is not running."""
    global _process, _folder
    with _lock:
        if _process is not None and _process.poll() is None and _folder is not None:
            return _folder, _folder / "proxy.sock"
        _stop()
        _folder = Path(tempfile.mkdtemp(prefix="loop-egress-"))  # 0700, the worker's
        sock = _folder / "proxy.sock"
        package_root = Path(__file__).resolve().parents[3]  # where `activities` is
        env = {
            "PATH": os.environ.get("PATH", DEFAULT_PATH),
            "LANG": "C.UTF-8",
            "LOOP_EGRESS_DIR": str(_folder),
            "PYTHONPATH": str(package_root),
        }
        with (_folder / "proxy.log").open("ab") as log:
            _process = subprocess.Popen(
                [sys.executable, "-m", MAIN, str(_folder), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=_folder,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sock.exists():
            if _process.poll() is not None or time.monotonic() > deadline:
                tail = (_folder / "proxy.log").read_text(errors="replace")[-500:]
                _stop()
                raise OSError(f"the egress proxy did not start: {tail.strip() or 'no output'}")
            time.sleep(0.02)
        return _folder, sock


atexit.register(_stop)


def warm() -> bool:
    """Start the proxy now, so the first agent of a worker does not wait for it (its
    start is ~1 s and ~1 CPU-second, mostly proxy.py's import). The worker calls it in a
    thread once it serves; a proxy that cannot start is left for the first run that needs
    it to report. True when it runs."""
    try:
        _running()
    except OSError:
        return False
    return True


@dataclass
class Egress:
    """One run's way out: its ticket, and the refusals the proxy recorded for it."""

    ticket: str
    folder: Path
    refused: list[str] = field(default_factory=list)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _relay(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sock: Path, ticket: str
) -> None:
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(str(sock))
    except OSError:
        writer.close()
        return
    try:
        # PROXY protocol v1: the "source address" is the ticket (at most 57 bytes a line).
        up_writer.write(f"PROXY TCP4 {ticket} 127.0.0.1 1 {PROXY_PORT}\r\n".encode())
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
    finally:
        for w in (writer, up_writer):
            with contextlib.suppress(Exception):
                w.close()


@contextlib.asynccontextmanager
async def serving(
    listener: socket.socket, *, task_id: str, kind: str, allow: list[str]
) -> AsyncIterator[Egress]:
    """Relay what ``listener`` (a socket in the sandbox's namespace) accepts to the
    proxy, under a ticket allowing ``allow``, until the block ends."""
    folder, sock = await asyncio.to_thread(_running)
    run = Egress(ticket=secrets.token_hex(12), folder=folder)
    ticket_file = folder / f"{run.ticket}.json"
    record = {"task": task_id, "kind": kind, "allow": allow, "deny": protected()}
    ticket_file.write_text(json.dumps(record))
    relays: set[asyncio.Task[None]] = set()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(relays) >= MAX_CONNECTIONS:
            writer.close()  # over its share: refused, the worker's descriptors are for all
            return
        relays.add(task)
        try:
            await _relay(reader, writer, sock, run.ticket)
        finally:
            relays.discard(task)

    listener.setblocking(False)
    server = await asyncio.start_server(accepted, sock=listener)
    try:
        yield run
    finally:
        server.close()
        for task in list(relays):
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
        refusals = folder / f"{run.ticket}.refused"
        with contextlib.suppress(OSError, ValueError):
            lines = refusals.read_text().splitlines()
            seen = dict.fromkeys(
                f"{e['host']}: {e['reason']}" for e in map(json.loads, lines[: MAX_REFUSALS * 10])
            )
            run.refused = list(seen)[:MAX_REFUSALS]
        refusals.unlink(missing_ok=True)
        ticket_file.unlink(missing_ok=True)
