"""A write into the main checkout: caught where the agent has the worker's rights, impossible
where it has its own.

An agent of mode ``off`` runs as the worker, so the main checkout is compared before and
after its attempt and a change there blocks the task. A sandboxed command agent runs as the
task's uid over a read-only host: the same write fails in the agent, and there is nothing
to compare (the worker no longer runs ``git status`` of the whole checkout around it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskState
from loop.settings import Settings
from tests.support.agents import write_agent
from tests.support.tasks import result_of, start, task
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

WRITE_OUTSIDE = """
pathlib.Path("slugify.py").write_text(COMPLETE)
try:
    pathlib.Path({target!r}).write_text("# the agent was here\\n")
    tried = "written"
except OSError as e:
    tried = type(e).__name__
out.write_text(json.dumps({{"outside": tried}}))
"""


@pytest.mark.parametrize("mode", ["off", "basic"])
async def test_a_write_into_the_main_checkout_blocks_or_fails(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
):
    target = demo_repo / "README.md"
    before = target.read_bytes()
    agent = write_agent(tmp_path, WRITE_OUTSIDE.format(target=str(target)))
    sandbox = {"mode": mode, "allow_unsafe_off": True} if mode == "off" else {"mode": mode}
    spec = task(demo_repo, agent, sandbox=sandbox, budget={"max_attempts": 1})
    async with build_worker(client, settings):
        result = await result_of(await start(client, settings, spec))
    make = result.attempts[0].make
    if mode == "off":
        assert json.loads(make.claim) == {"outside": "written"}
        assert result.state == TaskState.BLOCKED, result.reason
        assert result.reason == "write outside the worktree: README.md"
        assert make.outside_writes == ["README.md"]
    else:
        # Read-only (OSError: EROFS), not the uid's (PermissionError), or not in the view at
        # all (the test's checkout is under /tmp, which the sandbox has a private one of).
        refused = ("OSError", "PermissionError", "FileNotFoundError")
        assert json.loads(make.claim)["outside"] in refused, make.claim
        assert target.read_bytes() == before
        assert make.outside_writes == []
        assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
