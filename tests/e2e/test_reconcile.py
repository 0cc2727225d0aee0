"""Worker start: worktrees are matched with their tasks' workflows."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from activities.host import clone
from activities.host.worktree import wip_commit
from activities.reconcile import reconcile_worktrees
from activities.workspace import WorkspaceActivities
from loop.contracts import PrepareInput
from loop.settings import Settings
from tests.support.repos import git


async def test_merged_leftovers_go_unmerged_work_stays(
    client: Client, settings: Settings, demo_repo: Path
):
    acts = WorkspaceActivities(settings)
    merged = await acts.prepare_workspace(
        PrepareInput(task_id="left-merged", repo=str(demo_repo), base="main", run_id="r1")
    )
    kept = await acts.prepare_workspace(
        PrepareInput(task_id="left-unmerged", repo=str(demo_repo), base="main", run_id="r2")
    )
    for ws in (merged, kept):
        Path(ws.path, f"{ws.task_id}.txt").write_text("work")
        await wip_commit(ws, 1)
        await clone.bring(ws.path, ws.repo, ws.branch, settings.locks)  # as commit_branch does
    # A crash between the merge into base and the worktree's removal:
    git(demo_repo, "merge", "-q", "--ff-only", merged.branch)

    found = await reconcile_worktrees(client, settings)

    assert found.removed == ["left-merged"]
    assert not Path(merged.path).exists()
    assert (
        "left-unmerged" in found.kept
        and "loop/left-unmerged holds its work" in found.kept["left-unmerged"]
    )
    assert Path(kept.path, "left-unmerged.txt").exists()
    assert git(demo_repo, "branch", "--list", merged.branch) == ""  # merged branch dropped
