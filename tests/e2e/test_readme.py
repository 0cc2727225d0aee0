"""The shell blocks of the README and the documentation pages marked
``<!-- tested: tests/e2e/test_readme.py … -->`` run as written, line by line, against a
private server, worker and LOOP_HOME, in a copy of ``examples/``; and the sample output
the triage guide shows for its dry run is what the command prints. So the pages cannot
drift from the code unnoticed. A marked block follows its page: moving one to another
page keeps it tested.

The other blocks need what a test here cannot give (an API key and a real agent CLI's
provider, Docker, a second terminal); the commands they show are covered by the
end-to-end tests of what they do (test_agents, test_fleet, test_cli, test_ui_browser).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.settings import Settings
from tests.support.repos import EXAMPLES, ROOT
from tests.support.temporal import local_server
from worker import build_worker

pytestmark = pytest.mark.timeout(300)
MARK = "<!-- tested: tests/e2e/test_readme.py"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TRIAGE_GUIDE = ROOT / "docs" / "guides" / "triage.md"


def marked_blocks() -> list[tuple[str, list[str]]]:
    """(page:line, commands) of every marked ``sh`` block of every page; comments dropped."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith(MARK) and lines[i + 1] == "```sh":
                end = lines.index("```", i + 2)
                commands = [re.sub(r"\s+#\s.*$", "", c).strip() for c in lines[i + 2 : end]]
                where = f"{page.relative_to(ROOT)}:{i + 2}"
                found.append((where, [c for c in commands if c]))
    return found


def sample_after(page: Path, first_command: str) -> list[str]:
    """The output block ``page`` shows after the block that starts with a command."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_command))
    opened = lines.index("```", lines.index("```", start) + 1)
    closed = lines.index("```", opened + 1)
    return lines[opened + 1 : closed]


def rows(text: list[str]) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in text if "│" in line]


def test_the_marked_blocks_are_found() -> None:
    """A marker left on a block that is gone (or a renamed marker) must not pass silently."""
    first = {commands[0] for _, commands in marked_blocks()}
    assert "sh examples/triage/make-repo.sh" in first
    assert "temporal workflow count --query 'LoopState=\"NEEDS_HUMAN\"'" in first


async def test_readme_blocks_run_as_written(settings: Settings, tmp_path: Path) -> None:
    """A private server: the blocks start tasks under the examples' fixed ids."""
    async with local_server() as server:
        await run_blocks(server.client, settings, tmp_path)


async def run_blocks(client: Client, settings: Settings, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "LOOP_HOME": str(settings.home),
        "LOOP_TASK_QUEUE": settings.task_queue,
        "COLUMNS": "400",
    }
    outputs: dict[str, str] = {}
    async with build_worker(client, settings):
        for where, commands in marked_blocks():
            for command in commands:
                proc = await asyncio.create_subprocess_exec(
                    "bash", "-c", command, cwd=tmp_path, env=env,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                out, _ = await asyncio.wait_for(proc.communicate(), 180)
                text = out.decode(errors="replace")
                assert proc.returncode == 0, f"{where}: `{command}` failed:\n{text}"
                outputs[command] = text

    shown = sample_after(TRIAGE_GUIDE, "sh examples/triage/make-repo.sh")
    printed = outputs["loop triage examples/triage/sources.yaml --dry-run"].splitlines()
    assert rows(shown) == rows(printed)
    summary = [ln for ln in printed if ln.startswith("dry run:")]
    assert summary and summary[0] in shown
    assert "started 3" in outputs["loop triage examples/triage/sources.yaml"]
