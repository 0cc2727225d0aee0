"""A task's diff outlives its worktree and its branch: merged, rejected or done, ``loop
trace`` (and the review page, in test_ui_browser.py) shows the last attempt's change,
read from the repository's ``refs/loopwork/<id>`` once the task's clone is gone."""

from __future__ import annotations

import shutil
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from loop.contracts import TaskState
from loop.settings import Settings
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.repos import git
from tests.support.tasks import result_of, start, task, wait_for
from tests.support.ui import run_loop
from worker import build_worker


def assert_diff_shown(said: str, base: str) -> None:
    assert f"diff {base[:12]}.." in said and "1 file(s), +" in said, said
    assert "  modified  slugify.py  +" in said, said


async def test_a_merged_tasks_diff_is_kept_under_a_ref_of_its_own(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    base = git(demo_repo, "rev-parse", "main")
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        code, said = await run_loop(env, settings, "approve", spec["id"])
        assert code == 0, said
        r = await result_of(handle)
    assert r.state == TaskState.DONE_WITH_EVIDENCE and r.final_action == "merged"
    assert not Path(r.worktree).exists()  # the clone is gone, the branch too
    assert git(demo_repo, "branch", "--list", f"loop/{spec['id']}") == ""
    wip = r.attempts[-1].make.commit
    assert git(demo_repo, "rev-parse", f"refs/loopwork/{spec['id']}") == wip
    code, said = await run_loop(env, settings, "trace", spec["id"])
    assert code == 0, said
    assert_diff_shown(said, base)
    assert f"git -C {demo_repo} diff {base[:12]} {wip[:12]}" in said
    # The cheapest way to lose it again: git's own garbage collection.
    git(demo_repo, "gc", "-q", "--prune=now")
    code, said = await run_loop(env, settings, "trace", spec["id"])
    assert_diff_shown(said, base)


async def test_a_rejected_tasks_diff_outlives_its_clone(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    base = git(demo_repo, "rev-parse", "main")
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        code, said = await run_loop(env, settings, "reject", spec["id"], "--reason", "no")
        assert code == 0, said
        r = await result_of(handle)
    assert r.state == TaskState.REJECTED and Path(r.worktree).is_dir()
    code, said = await run_loop(env, settings, "trace", spec["id"])
    assert_diff_shown(said, base)
    assert f"git -C {r.worktree} diff" in said  # read from its clone while it is there
    shutil.rmtree(r.worktree)  # a person tidies up
    code, said = await run_loop(env, settings, "trace", spec["id"])
    assert_diff_shown(said, base)
    assert f"git -C {demo_repo} diff" in said  # then from the repository's kept ref
    # Without the clone and the kept ref, the trace says why, in one line.
    git(demo_repo, "update-ref", "-d", f"refs/loopwork/{spec['id']}")
    git(demo_repo, "gc", "-q", "--prune=now")
    code, said = await run_loop(env, settings, "trace", spec["id"])
    assert code == 0 and "diff: git diff " in said and "bad object" in said, said
