"""stop_candidates / close_candidate: a task's candidates on their host.

``stop_candidates`` runs the moment one candidate is chosen: the pool refuses every
other candidate's next model call from then on, whatever its workflow is doing (its
cancellation reaches its agent at the next heartbeat, seconds later; the pool is read
before every call). ``close_candidate`` runs when the task ends, for each candidate: its
uid goes back with every process of it, its worktree goes (not the chosen one's: the
task's finalize decided on that), and its branch is deleted or, with
``keep_candidates``, kept with its last commit (docs/concepts/candidates.md).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from temporalio import activity

from activities.host import clone, pool, remote
from activities.host.git import git, repo_lock
from activities.host.worktree import exists, rev
from activities.summarize import release_task
from loop.contracts import (
    CLOSE_CANDIDATE,
    STOP_CANDIDATES,
    CloseCandidateInput,
    CloseCandidateResult,
    StopCandidatesInput,
    StopCandidatesResult,
    Usage,
)
from loop.rules.candidates import name_of
from loop.settings import Settings


class CandidateActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=STOP_CANDIDATES.name)
    async def stop_candidates(self, inp: StopCandidatesInput) -> StopCandidatesResult:
        file = pool.pool_file(self.settings.home, inp.key)
        await asyncio.to_thread(pool.choose, file, inp.chosen)
        return StopCandidatesResult()

    @activity.defn(name=CLOSE_CANDIDATE.name)
    async def close_candidate(self, inp: CloseCandidateInput) -> CloseCandidateResult:
        ws = inp.workspace
        await asyncio.to_thread(release_task, self.settings, ws.task_id)
        said = ""
        if Path(ws.repo).is_dir():
            async with repo_lock(self.settings.locks, ws.repo):
                said = await self._branch(inp)
                removed = not inp.keep_worktree and await asyncio.to_thread(_remove, ws.path)
        else:
            removed = False
        spent = Usage()
        if inp.key:
            file = pool.pool_file(self.settings.home, inp.key)
            tally = await asyncio.to_thread(pool.read, file)
            spent = tally.members.get(name_of(ws.task_id), spent)
            if inp.last:
                file.unlink(missing_ok=True)
        return CloseCandidateResult(removed=removed, branch=said, spent=spent)

    async def _branch(self, inp: CloseCandidateInput) -> str:
        """The candidate's branch in the repository (and a URL's remote): kept with its
        last commit, or deleted; the chosen one's is the task's finalize's."""
        ws = inp.workspace
        ref = f"refs/heads/{ws.branch}"
        if inp.keep_worktree:
            return ""
        if inp.keep_branch:
            # A URL's remote has it already: each attempt's commit is pushed there.
            tip = await rev(ws.path, ref) if exists(Path(ws.path)) else None
            if await rev(ws.repo, ref) is None and tip not in (None, ws.base_commit):
                await clone.bring_locked(ws.path, ws.repo, ws.branch)
            elif await rev(ws.repo, ref) is None:
                return f"{ws.branch}: no commit to keep"
            return f"{ws.branch} kept"
        if await rev(ws.repo, ref) is not None:
            await git(["branch", "-q", "-D", ws.branch], ws.repo)
        if ws.remote:
            await remote.delete_branch(ws.repo, ws.remote, ws.branch)
        return f"{ws.branch} deleted"


def _remove(path: str) -> bool:
    """The candidate's clone goes: a task's clone only (one that borrows objects), never
    a folder that is anything else."""
    if not exists(Path(path)):
        return True
    if not clone.alternates(str(Path(path) / ".git")):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not exists(Path(path))
