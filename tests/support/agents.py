"""Scripted agents: Python scripts that speak the agent protocol, and what they leave;
and the mark for the tests that need a real agent CLI."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from loop.settings import Settings

COMPLETE_FIX = """import re


def slugify(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
"""
"""The demo's slugify.py, fixed (an agent body has it as ``COMPLETE``)."""

FIX_AT_ONCE = """
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("done")
"""
"""An agent body that fixes the demo on its first attempt."""

PASS_ON_SECOND = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
    out.write_text("fixed it")
else:
    fb = json.loads(pathlib.Path(os.environ["LOOP_FEEDBACK_FILE"]).read_text())
    assert fb["failed"][0]["gate"] == "tests", fb
    pathlib.Path("slugify.py").write_text(COMPLETE)
    out.write_text("fixed it properly")
"""
"""An agent body whose first attempt fails ``tests`` and whose second, given that
feedback, fixes the demo."""


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
    calls = [
        json.loads(line)
        for log in sorted(settings.runs.glob(f"{task_id}/attempt-*/agent/calls.jsonl"))
        for line in log.read_text().splitlines()
    ]
    return sorted(calls, key=lambda c: c["t"])


AGENTS_REQUIRED = os.environ.get("LOOP_AGENTS_REQUIRED") == "1"
"""``.ci/run`` sets it: a missing agent CLI (or the Node.js they run on) fails its tests
instead of skipping them."""
INSTALL = {
    "claude": "npm install -g @anthropic-ai/claude-code",
    "codex": "npm install -g @openai/codex",
    "aider": "pip install aider-chat, in a Python the task's uid can run (see .ci/run)",
    "node": "apt-get install nodejs",
}


def needs_cli(name: str) -> pytest.MarkDecorator:
    """Skip where the program is not on PATH, saying how to install it; CI installs them
    all and sets LOOP_AGENTS_REQUIRED, so there the test runs (and fails without it)."""
    return pytest.mark.skipif(
        shutil.which(name) is None and not AGENTS_REQUIRED,
        reason=f"{name} is not installed ({INSTALL[name]})",
    )
