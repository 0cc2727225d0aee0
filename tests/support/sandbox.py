"""Running commands through the sandbox runner: a place to run them, and what to look at."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import textwrap
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from activities.host.sandbox import SandboxRun, run_sandboxed
from activities.host.sandbox import uids as leases
from loop.contracts import SandboxPolicy
from tests.support.git import git


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

    def release(self) -> None:
        leases.release(self.home, self.task_id)

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
