"""The CLI at its edges: an approval says the merge was requested, then what it came to;
a cancel waits for the task to stop, or says how to follow it. (Ctrl-C and the worker
note during ``--wait`` are in test_progress.py; unknown keys in tests/unit.)"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from loop.contracts import Phase, TaskState
from loop.settings import Settings
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.repos import git
from tests.support.tasks import result_of, start, task, wait_for
from tests.support.ui import run_loop
from worker import build_worker

SLOW = """
time.sleep(60)
"""


async def test_approve_says_merge_requested_then_why_the_merge_did_not_happen(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """Base is checked out in the repository with an edit of its own: the approval is
    taken, the merge is not done, and ``loop approve`` says both, in that order."""
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        (demo_repo / "README.md").write_text("a person's edit, not committed\n")
        code, said = await run_loop(env, settings, "approve", spec["id"])
        await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN)
        (demo_repo / "README.md").unlink()
        git(demo_repo, "checkout", "--", "README.md")
        retried, again = await run_loop(env, settings, "approve", spec["id"])
        r = await result_of(handle)
    assert code == 0, said
    lines = said.strip().splitlines()
    asked = f"{spec['id']}: approved; merge of loop/{spec['id']} into main requested (commit "
    assert lines[0].startswith(asked), said
    assert lines[1] == (
        f"{spec['id']}: NEEDS_HUMAN: cannot merge: base checkout {demo_repo} has uncommitted "
        "changes: README.md"
    ), said
    assert lines[2].startswith(f"answer with: loop approve {spec['id']}  |  loop reject "), said
    assert "merged" not in lines[0].replace("merge of", "")  # never said before it is so
    assert retried == 0 and "approved; merge requested again" in again, again
    assert f"{spec['id']}: DONE_WITH_EVIDENCE: verified and merged into main" in again
    assert r.state == TaskState.DONE_WITH_EVIDENCE and r.final_action == "merged"


async def test_cancel_waits_for_the_task_to_stop(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, SLOW))
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.phase == Phase.MAKE)
        code, said = await run_loop(env, settings, "cancel", spec["id"])
        desc = await handle.describe()
    assert code == 0, said
    assert said.splitlines() == [
        f"cancel requested for {spec['id']}; waiting for it to stop",
        f"{spec['id']}: CANCELLED: cancelled by request",
    ]
    assert desc.status is not None and desc.status.name == "COMPLETED"  # stopped when it said


async def test_cancel_without_a_worker_says_how_to_follow_it(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, SLOW))
    handle = await start(client, settings, spec)  # no worker: it cannot stop yet
    code, said = await run_loop(env, settings, "cancel", spec["id"])
    assert code == 0, said
    assert f"cancel requested for {spec['id']}; no worker polls task queue" in said
    assert "ends CANCELLED once one runs (`loop worker`)" in said
    assert f"follow it with `loop status {spec['id']}`" in said
    async with build_worker(client, settings):
        assert (await result_of(handle)).state == TaskState.CANCELLED  # as it said
