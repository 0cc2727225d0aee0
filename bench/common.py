"""Shared helpers for the benchmarks: servers, workers, the demo repository, tables.

Benchmarks are scripts, not tests: they measure and print tables. Each one is
run as ``.venv/bin/python bench/<name>.py [--quick]`` from the repository root.
Nothing here is part of Loopwork; it only drives it the way a user would.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # loop/, workflows/, worker.py and tests/ (the scripted model)
    sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402

from loop import logs  # noqa: E402
from loop.devserver import DevServer, temporal_binary  # noqa: E402

DEMO_REPO = ROOT / "examples" / "demo" / "repo"
UNITTEST = f"{sys.executable} -m unittest discover -s tests -t ."
COMPLETE_FIX = '''"""Turn titles into URL slugs."""

import re


def slugify(text: str) -> str:
    """Lowercase words of letters and digits, joined by single hyphens."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
'''
GIT = ["git", "-c", "user.name=Bench", "-c", "user.email=bench@localhost"]
GIT += ["-c", "commit.gpgsign=false"]


# --------------------------------------------------------------------------- the machine


def machine() -> dict[str, str]:
    """nproc, CPU model, RAM, Python and the temporal CLI version."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    try:
        out = subprocess.run(
            [str(temporal_binary()), "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out = "unknown"
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "ram": ram,
        "python": platform.python_version(),
        "temporal": out,
        "kernel": platform.release(),
    }


def print_machine(title: str) -> dict[str, str]:
    """The benchmark's header; also quiets in-process activity logs (warnings only)."""
    logs.configure("WARNING", json=False)
    info = machine()
    print(f"# {title}")
    print(
        f"machine: {info['nproc']} cores ({info['cpu']}), {info['ram']} RAM, "
        f"Python {info['python']}, {info['temporal']}"
    )
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"load average at start: {load_average()} (other processes share these cores)")
    print()
    atexit.register(lambda: print(f"load average at end: {load_average()}"))
    return info


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (a hint that something else was running)."""
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "unknown"


def byte_compile(root: Path = ROOT) -> None:
    """Compile a checkout's Python files, as an install does: where the environment sets
    PYTHONDONTWRITEBYTECODE (this machine does), every worker start and every workflow
    run's sandbox would otherwise compile the source of what it imports again."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "activities", "loop", "workflows",
         "worker.py", "bench"],
        cwd=root, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


# --------------------------------------------------------------------------- tables


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> None:
    """A Markdown table with aligned columns (numbers right, text left)."""
    rows = [list(r) for r in rows]
    cells = [[_cell(v) for v in r] for r in rows]
    numeric = [
        all(
            isinstance(r[i], int | float) and not isinstance(r[i], bool)
            for r in rows
            if r[i] not in ("", "…")
        )
        for i in range(len(headers))
    ]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "| " + " | ".join(parts) + " |"

    if title:
        print(f"## {title}\n")
    print(line(list(headers)))
    print(
        "| "
        + " | ".join(
            ("-" * (w - 1) + ":") if n else "-" * w for w, n in zip(widths, numeric, strict=True)
        )
        + " |"
    )
    for r in cells:
        print(line(r))
    print(flush=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def temp_home(prefix: str = "loop-bench-") -> Iterator[Path]:
    """A throwaway LOOP_HOME (kept when LOOP_BENCH_KEEP=1, for post-mortems), in a
    folder of its own: the sandbox hides LOOP_HOME from agents and gates, so scripts
    and repositories go beside it (``home.parent``)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        (path / "home").mkdir()
        yield path / "home"
    finally:
        if os.environ.get("LOOP_BENCH_KEEP") != "1":
            shutil.rmtree(path, ignore_errors=True)
        else:
            print(f"(kept {path})")


@contextlib.asynccontextmanager
async def loopwork_server(home: Path, metrics_port: int | None = None) -> AsyncIterator[DevServer]:
    """Loopwork's embedded server (its DYNAMIC_CONFIG and SQLITE_PRAGMAS) on a free port."""
    server = DevServer.start(home=home, port=free_port(), headless=True, metrics_port=metrics_port)
    try:
        await server.wait_ready()
        yield server
    finally:
        server.stop()


DEFAULT_SERVER_FLAGS = ("--ip", "127.0.0.1", "--headless", "--log-level", "warn")


def start_default_server(home: Path, extra: Sequence[str] = (), *, db: bool = True) -> DevServer:
    """Plain ``temporal server start-dev --db-filename <tmp>``: no dynamic config, no pragmas.

    Only the address (``--ip``, ``--port``), ``--headless`` and ``--log-level`` are
    given, so it can run next to anything else; none of them changes how fast it is.
    ``extra`` adds flags (for ablations); ``db=False`` keeps the store in memory.
    Returned as a ``DevServer`` so ``wait_ready`` and ``stop`` work the same.
    """
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = home / "default-server.log"
    args = [str(temporal_binary()), "server", "start-dev"]
    if db:
        args += ["--db-filename", str(home / "default.db")]
    args += ["--port", str(port), *DEFAULT_SERVER_FLAGS, *extra]
    log = log_path.open("wb")
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=home,
        start_new_session=True,
    )
    return DevServer(
        process=process,
        ip="127.0.0.1",
        port=port,
        ui_port=None,
        home=home,
        log_file=log_path,
        _log=log,
    )


@contextlib.asynccontextmanager
async def default_server(
    home: Path, extra: Sequence[str] = (), *, db: bool = True
) -> AsyncIterator[DevServer]:
    """The default dev server (see :func:`start_default_server`), ready, stopped after."""
    server = start_default_server(home, extra, db=db)
    try:
        await server.wait_ready()
        yield server
    finally:
        server.stop()


async def connect(address: str) -> Client:
    return await Client.connect(address, data_converter=pydantic_data_converter)


METRICS_SETTLE_S = 2.0


def requests(metrics_port: int) -> Counter[str]:
    """The frontend's ``service_requests`` of the ``default`` namespace, by operation, from
    a server started with ``metrics_port``. The server's counters reach its endpoint a
    moment after the request: read once the last one has settled."""
    time.sleep(METRICS_SETTLE_S)
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    counts: Counter[str] = Counter()
    for line in text.decode().splitlines():
        if not line.startswith("service_requests{"):
            continue
        labels, value = line[len("service_requests{") :].rsplit("} ", 1)
        fields = dict(part.split("=", 1) for part in labels.split(","))
        if fields.get("service_name") == '"frontend"' and fields.get("namespace") == '"default"':
            counts[fields["operation"].strip('"')] += int(float(value))
    return counts


# --------------------------------------------------------------------------- workers


def worker_env(address: str, home: Path, task_queue: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "LOOP_HOME": str(home),
        "LOOP_TASK_QUEUE": task_queue,
        **extra,
    }


def spawn_worker(
    address: str,
    home: Path,
    task_queue: str,
    log_path: Path,
    *,
    argv: Sequence[str] | None = None,
    **extra_env: str,
) -> subprocess.Popen[bytes]:
    """``python worker.py`` (or ``argv``) as a subprocess with the given address, home and queue."""
    log = log_path.open("ab")
    try:
        return subprocess.Popen(
            list(argv or [sys.executable, str(ROOT / "worker.py")]),
            cwd=ROOT,
            env=worker_env(address, home, task_queue, **extra_env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


async def wait_for_log(
    log_path: Path, text: str, proc: subprocess.Popen[bytes], within: float = 60
) -> float:
    """Wait until ``text`` appears in the log; returns the time.time() it was seen."""
    import asyncio

    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(OSError):
            if text in log_path.read_text(errors="replace"):
                return time.time()
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}; log {log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{text!r} not in {log_path} after {within} s")
        await asyncio.sleep(0.02)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15) -> int | None:
    """SIGTERM (a worker drains), then SIGKILL if it takes too long."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def rss_kib(pid: int) -> int:
    """VmRSS of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(CPU seconds of the process, of its waited-for children) from /proc/<pid>/stat;
    (0, 0) once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / tick, (cutime + cstime) / tick


def live_children(pid: int) -> list[int]:
    """The live children of every thread of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def tree_rss_kib(pid: int) -> int:
    """VmRSS of a process plus its children (the dev server is one process, but be safe)."""
    total = rss_kib(pid)
    with contextlib.suppress(OSError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for child in children:
            with contextlib.suppress(OSError, RuntimeError):
                total += tree_rss_kib(int(child))
    return total


# --------------------------------------------------------------------------- tasks


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_demo_repo(folder: Path) -> Path:
    """The demo's slugify repository (with its bug), committed on ``main``."""
    repo = folder / "repo"
    shutil.copytree(DEMO_REPO, repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def script_agent(folder: Path, body: str) -> list[str]:
    """A scripted command agent (Python); ``body`` runs with os, pathlib, time, json imported."""
    path = folder / f"agent_{uuid.uuid4().hex[:6]}.py"
    path.write_text("import json, os, pathlib, sys, time\n" + body)
    return [sys.executable, str(path)]


def task_spec(repo: Path, agent: list[str], **overrides: Any) -> dict[str, Any]:
    """A task file as a dict: the demo's goal, the given agent, ``report`` autonomy."""
    spec: dict[str, Any] = {
        "id": f"b-{uuid.uuid4().hex[:10]}",
        "goal": 'slugify("Hello, World!") must return "hello-world".',
        "repo": str(repo),
        "base": "main",
        "agent": {"backend": "command", "command": agent, "timeout": 120},
        "verify": [{"name": "tests", "run": UNITTEST, "timeout": 60}],
        "budget": {"max_attempts": 3},
        "autonomy": "report",
    }
    spec.update(overrides)
    return spec
