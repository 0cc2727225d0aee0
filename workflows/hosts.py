"""Where a task's worktree is, and what a lost host means for it.

``prepare_workspace`` runs on the shared queue and returns the host that made the
worktree; every later step that touches it runs on that host's queue
(``workflows.steps.act(..., ws=)``). A host that stops answering ends the step
with ``HostLost``: the attempt it ran counts as failed with that evidence, and a
task on a remote repository is prepared again on another host from the branch it
pushed after every attempt (``move``); one on a local path cannot move.
docs/architecture.md, "Hosts", draws it.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        PREPARE_AND_EXPLORE,
        PREPARE_WORKSPACE,
        Evidence,
        GateResult,
        Prepared,
        PrepareExploreInput,
        PrepareInput,
        TaskSpec,
        Verdict,
        Workspace,
    )
    from workflows.steps import SHORT, HostLost, act


async def prepare(
    spec: TaskSpec, moved_from: Workspace | None = None, *, beside: Workspace | None = None
) -> Workspace:
    """A worktree on whichever host takes the step (from ``moved_from``'s pushed branch
    when the task moves), or on ``beside``'s host (a task's candidates share one)."""
    return await act(
        PREPARE_WORKSPACE,
        _preparing(spec, moved_from),
        summary=f"move the worktree off host {moved_from.host}"
        if moved_from
        else "prepare worktree",
        ws=beside,
    )


async def prepare_and_explore(spec: TaskSpec, explore_s: float) -> Prepared:
    """A task's first worktree, on whichever host takes the step, explored there."""
    return await act(
        PREPARE_AND_EXPLORE,
        PrepareExploreInput(prepare=_preparing(spec, None), task=spec),
        summary="prepare worktree and explore",
        seconds=SHORT.total_seconds() + explore_s,
    )


def _preparing(spec: TaskSpec, moved_from: Workspace | None) -> PrepareInput:
    return PrepareInput(
        task_id=spec.id,
        repo=spec.repo,
        base=spec.base,
        run_id=workflow.info().run_id,
        byproducts=spec.agent.ignore,
        moved_from=moved_from,
        covered=spec.hidden_folders(),
    )


def lost_verdict(e: HostLost) -> Verdict:
    """The verdict of an attempt whose host was lost before it had one."""
    lost = GateResult(
        name="host",
        kind="host",
        passed=False,
        requirement="the host running the attempt stays up until its verdict",
        evidence=Evidence(detail=str(e)),
    )
    return Verdict(passed=False, gates=[lost])


def stays(e: HostLost) -> str:
    """Why a task on a local path waits instead of moving."""
    return (
        f"{e}: a task on a local path cannot move; once its worker runs again, "
        "send feedback or extend_budget"
    )
