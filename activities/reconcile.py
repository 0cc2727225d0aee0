"""Worktrees reconciled with open workflows when a worker starts.

A crash can fall between two steps that belong together: a merge into base and
the removal of the merged worktree, or a run that ended while its worker was
gone. At start, each worktree under LOOP_HOME is matched with its task's
workflow: a running task's worktree is left alone; a finished task's worktree
whose branch base already holds, and which is clean, is removed (it was
waiting for that removal); every other one is kept and listed, because it
holds work a person may want (a report, a rejected or blocked attempt).

Task uids are reconciled the same way: a lease whose task is no longer running
(terminated, or ended while its worker was gone) goes back to the pool.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.host import sandbox
from activities.host.worktree import is_ancestor, rev
from activities.summarize import release_task
from activities.workspace import MARKER, WorkspaceActivities, read_marker
from loop.contracts import RemoveInput, Workspace, workflow_id_for
from loop.settings import Settings


class Reconciled(BaseModel):
    running: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    kept: dict[str, str] = Field(default_factory=dict)
    """Task id -> why its worktree stays."""


async def reconcile_worktrees(client: Client, settings: Settings) -> Reconciled:
    found = Reconciled()
    if not settings.runs.is_dir():
        return found
    workspaces = WorkspaceActivities(settings)
    for run_dir in sorted(p for p in settings.runs.iterdir() if (p / MARKER).is_file()):
        marker = read_marker(run_dir)
        try:
            ws = Workspace.model_validate(marker)
        except ValueError:
            continue
        if not (settings.worktrees / ws.task_id).is_dir():
            continue
        try:
            desc = await client.get_workflow_handle(workflow_id_for(ws.task_id)).describe()
            status = desc.status
        except RPCError:
            status = None  # the server forgot it (a new dev server): treat as finished
        if status == WorkflowExecutionStatus.RUNNING:
            found.running.append(ws.task_id)
            continue
        base = f"refs/heads/{ws.base_ref}" if ws.base_is_branch else ws.base_commit
        tip = await rev(ws.commits, f"refs/heads/{ws.branch}")
        if tip is not None and await is_ancestor(ws.repo, tip, base):
            removed = await workspaces.remove_workspace(
                RemoveInput(workspace=ws, delete_branch=True)
            )
            if removed.removed:
                found.removed.append(ws.task_id)
                continue
            found.kept[ws.task_id] = removed.reason
        else:
            state = status.name if status else "unknown to the server"
            found.kept[ws.task_id] = f"task ended ({state}); {ws.branch} holds its work"
    return found


async def release_leases(client: Client, settings: Settings) -> list[str]:
    """Release the uids of this LOOP_HOME's tasks that no longer run; their ids."""
    released: list[str] = []
    for holder in sandbox.holders(settings.home):
        if holder.startswith("triage-"):
            continue  # a triage run's, released by the run itself
        try:
            desc = await client.get_workflow_handle(workflow_id_for(holder)).describe()
            status = desc.status
        except RPCError:
            status = None
        if status != WorkflowExecutionStatus.RUNNING:
            release_task(settings, holder)
            released.append(holder)
    return released
