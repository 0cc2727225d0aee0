"""The life of a task's git worktree, made safe against crashes and retries.

A worker can die between any two git commands, and Temporal will then run the
same activity again, possibly in another worker process. So each activity
here looks at what is on disk first and finishes or repeats only what is
missing: preparing an existing worktree for the same run returns it, a commit
that already has the wanted tree and parent is returned, a merge whose commit
is already in base is a no-op, removing a missing worktree succeeds.

Work is never thrown away by machinery: a worktree with uncommitted changes is
neither reset nor deleted (a person decides), and a branch tip that earlier
runs left and that base does not contain is kept under another name.

Operations on state shared by all tasks of a repository (worktree add and
remove, ref updates, merges) run under ``repo_lock``; work inside one task's
worktree needs no lock because only that task touches it.

The plain helpers other activities share (make, verify) are in
``activities.host.worktree``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.host import clone, remote
from activities.host.git import GitError, git, git_ok, repo_lock
from activities.host.proc import heartbeat
from activities.host.worktree import (
    dirty_files,
    exists,
    find_worktree,
    is_ancestor,
    is_dir,
    listing,
    only,
    repo_top,
    rev,
    split_z,
    status_paths,
    worktrees,
)
from loop import contracts
from loop.contracts import (
    COMMIT,
    MERGE,
    PREPARE_WORKSPACE,
    REMOVE_WORKSPACE,
    CommitInput,
    CommitResult,
    MergeInput,
    MergeResult,
    PrepareInput,
    RemoveInput,
    RemoveResult,
    Workspace,
    is_remote,
)
from loop.errors import permanent
from loop.settings import Settings

MARKER = "workspace.json"

PUSH_TRIES = 12
"""Pushes lost to other workers before the merge is left to a person: each loss means
another task's merge landed first, so the base is fetched and merged again."""

PUSH_BACKOFF_S = 0.1
"""The first wait after a lost push; it doubles (to at most 2 s) with full jitter, so
workers on several hosts racing for one base stop losing to each other in step."""


async def _merge_commit(top: str, base: str, commit: str, message: str) -> tuple[str, str]:
    """(the merge commit of ``base`` and ``commit``, "") or ("", why it conflicts); no
    checkout is touched (``merge-tree``)."""
    try:
        out = await git(
            ["merge-tree", "--write-tree", "--name-only", "--no-messages", base, commit], top
        )
    except GitError as e:
        if e.exit_code != 1:
            raise
        files = [ln for ln in e.stdout.splitlines()[1:] if ln]
        return "", f"merge conflict in {listing(files) or e.message}"
    tree = out.splitlines()[0]
    return await git(["commit-tree", tree, "-p", base, "-p", commit, "-m", message], top), ""


# --------------------------------------------------------------------------- marker


def read_marker(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _set_aside(run_dir: Path, label: str) -> Path:
    """An earlier run's folder, kept as ``<id>.prev-<label>`` beside it (``-2``, ... when
    that name is taken)."""
    target = run_dir.with_name(f"{run_dir.name}.prev-{label}")
    n = 1
    while target.exists():
        n += 1
        target = run_dir.with_name(f"{run_dir.name}.prev-{label}-{n}")
    os.replace(run_dir, target)
    return target


def _write_marker(run_dir: Path, owner: str, ws: Workspace) -> None:
    """Written atomically: a torn marker would make a retry look like a rerun. ``owner``
    is the run and the host it moved from: a task back on a host it left is not a retry."""
    target = run_dir / MARKER
    tmp = target.with_suffix(".tmp")
    run_id = owner.partition(":")[0]
    tmp.write_text(json.dumps({"run_id": run_id, "owner": owner, **ws.model_dump()}, indent=2))
    os.replace(tmp, target)


# --------------------------------------------------------------------------- activities


class WorkspaceActivities:
    """Temporal activities for the worktree's life; all idempotent (see module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def _resolve_base(self, top: str, base: str | None) -> tuple[str, str, bool]:
        """(base_ref, base_commit, base_is_branch) for the task's ``base``."""
        if base is None:
            head = await git(["symbolic-ref", "-q", "HEAD"], top, check=False)
            if head.startswith("refs/heads/"):
                base = head.removeprefix("refs/heads/")
            else:
                detached = await rev(top, "HEAD^{commit}")
                if detached is None:
                    raise permanent(f"repository {top} has no commit to start from")
                base = detached
        elif base.startswith("refs/heads/"):
            base = base.removeprefix("refs/heads/")
        if not base or base.startswith("-"):
            raise permanent(f"base {base!r} is not a branch or commit name")
        commit = await rev(top, f"{base}^{{commit}}")
        if commit is None:
            raise permanent(f"base {base!r} is not a branch or commit in {top}")
        is_branch = await git_ok(["show-ref", "--verify", "--quiet", f"refs/heads/{base}"], top)
        return base, commit, is_branch

    async def _remote_base(self, top: str, url: str, base: str | None) -> tuple[str, str, bool]:
        """(base_ref, base_commit, base_is_branch) for ``base`` of the remote at ``url``."""
        if base is None:
            base = await remote.default_branch(top, url)
        base = base.removeprefix("refs/heads/")
        if not base or base.startswith("-"):
            raise permanent(f"base {base!r} is not a branch or commit name")
        branch = await rev(top, f"{remote.tracking(base)}^{{commit}}")
        if branch is not None:
            return base, branch, True
        commit = await rev(top, f"{base}^{{commit}}")
        if commit is None:
            raise permanent(f"base {base!r} is not a branch or commit of {url}")
        return base, commit, False

    @activity.defn(name=PREPARE_WORKSPACE.name)
    async def prepare_workspace(self, inp: PrepareInput) -> Workspace:
        """Give the task a worktree on its own branch, starting at base, on this host.

        The same run gets back what it made (a retry after a crash); a new run of the
        task reuses a clean leftover worktree from its base and refuses a dirty one. A
        task whose host was lost (``moved_from``) continues here from its pushed branch.
        """
        moved = inp.moved_from
        url = inp.repo if is_remote(inp.repo) else ""
        if url:
            try:
                top = await remote.mirror(self.settings.repos, self.settings.locks, url)
            except remote.RemoteError as e:
                raise RuntimeError(str(e)) from None  # the network may come back: retried
            if moved is not None:
                base = moved.base_ref, moved.base_commit, moved.base_is_branch
            else:
                base = await self._remote_base(top, url, inp.base)
        else:
            top = await repo_top(inp.repo)
            base = await self._resolve_base(top, inp.base)
        base_ref, base_commit, base_is_branch = base
        path = self.settings.worktrees.resolve() / inp.task_id
        run_dir = self.settings.runs.resolve() / inp.task_id
        earlier = read_marker(run_dir).get("run_id")
        if earlier and earlier != inp.run_id:
            # Another run's folder (a --rerun): nothing of it may stand for this run's
            # (an attempt's start commit, a kept verdict), so it is moved aside whole.
            tip = await rev(str(path), "HEAD") if exists(path) else None
            await asyncio.to_thread(_set_aside, run_dir, (tip or str(earlier))[:12])
        run_dir.mkdir(parents=True, exist_ok=True)
        ws = Workspace(
            task_id=inp.task_id,
            repo=top,
            path=str(path),
            branch=contracts.branch_for(inp.task_id),
            base_ref=base_ref,
            base_commit=base_commit,
            run_dir=str(run_dir),
            base_is_branch=base_is_branch,
            byproducts=inp.byproducts,
            remote=url,
            host=self.settings.host_id,
            host_queue=self.settings.host_queue,
            host_lost_after=float(self.settings.host_lost_after),
            covered=[p for p in inp.covered if os.path.isdir(p)],
        )
        owner = inp.run_id if moved is None else f"{inp.run_id}:{moved.host}"
        start = base_commit
        if url and moved is not None:
            start = await rev(top, f"{remote.tracking(ws.branch)}^{{commit}}") or base_commit
        store = clone.store_for(self.settings.stores.resolve(), top)
        await clone.fill_store(top, store, base_commit, self.settings.locks)
        ws = ws.model_copy(update={"isolated": True, "store": str(store / "objects")})
        async with repo_lock(self.settings.locks, top):
            if exists(path):
                marker = read_marker(run_dir)
                if marker.get("owner", marker.get("run_id")) == owner:
                    try:
                        return Workspace.model_validate(marker)
                    except ValueError:
                        pass  # an unreadable marker of our own run: prepare it afresh
                await self._retire_worktree(top, path, ws.byproducts)
            if exists(path):
                if not clone.alternates(str(path / ".git")):
                    raise permanent(f"{path} exists but is not a task's clone; move it away")
                if moved is None:
                    dirty = await dirty_files(str(path), ws.byproducts)
                    if dirty:
                        raise permanent(
                            f"worktree {path} has uncommitted changes from an earlier run; "
                            f"inspect it, then remove {path}"
                        )
                    await self._clear_way(top, ws.branch, base_commit)
                    await clone.refuse_checked_out(top, ws.branch)
                    await self._keep_earlier_work(top, ws.branch, base_commit)
                    await self._keep_clone_work(str(path), top, ws.branch, base_commit)
                else:  # this task's own earlier state here, superseded by its pushed branch
                    await git(["reset", "-q", "--hard"], path)
                if await rev(path, f"{start}^{{commit}}") is None:
                    await git([*clone.ALLOW_LOCAL, "fetch", "-q", "--no-tags", top, start], path)
                await git(["checkout", "-q", "-B", ws.branch, start], path)
                await git(["clean", "-q", "-fd"], path)  # byproducts a dirty check ignores
            else:
                if moved is None:
                    await self._clear_way(top, ws.branch, base_commit)
                    await clone.refuse_checked_out(top, ws.branch)
                    await self._keep_earlier_work(top, ws.branch, base_commit)
                await clone.make(path, store, ws.branch, start, top, stored=start == base_commit)
            _write_marker(run_dir, owner, ws)
        return ws

    async def _retire_worktree(self, top: str, path: Path, byproducts: list[str]) -> None:
        """A clean git worktree at ``path`` (an earlier version's, for this task id) gives
        way to a clone; its branch is the repository's already, so nothing is lost."""
        await git(["worktree", "prune"], top)
        if find_worktree(await worktrees(top), str(path)) is None:
            return
        if await dirty_files(str(path), byproducts):
            raise permanent(
                f"worktree {path} has uncommitted changes from an earlier run; "
                f"inspect it, then `git worktree remove --force {path}`"
            )
        await git(["clean", "-q", "-fd", "--", *only(byproducts)], path)
        await git(["worktree", "remove", str(path)], top)

    async def _keep_earlier_work(self, top: str, branch: str, base_commit: str) -> None:
        """Before the task branch starts from base again: save a tip that base does not
        contain as ``<branch>.prev-<sha>``; drop the branch when it holds nothing new."""
        tip = await rev(top, f"refs/heads/{branch}")
        if tip is None:
            return
        if await is_ancestor(top, tip, base_commit):
            await git(["branch", "-q", "-D", branch], top)
            return
        await git(["branch", "-q", "-M", branch, f"{branch}.prev-{tip[:12]}"], top)

    async def _clear_way(self, top: str, branch: str, base_commit: str) -> None:
        """Git keeps no branch inside another's name: a task's ``loop/<id>`` and its
        candidates' ``loop/<id>/<name>`` (docs/concepts/candidates.md) cannot both be.
        Whichever an earlier run left in the way of ``branch`` is dropped when base holds
        it, else kept beside as ``loop/<id>.prev-[<name>-]<sha>``."""
        task, _, name = branch.removeprefix("loop/").partition("/")
        if name:
            await self._keep_earlier_work(top, f"loop/{task}", base_commit)
            return
        inside = await git(["for-each-ref", "--format=%(refname)", f"refs/heads/{branch}/"], top)
        for ref in inside.split():
            tip = await rev(top, ref)
            inner = ref.removeprefix("refs/heads/")
            if tip is None or await is_ancestor(top, tip, base_commit):
                await git(["branch", "-q", "-D", inner], top)
            else:
                aside = f"{branch}.prev-{inner.rpartition('/')[2]}-{tip[:12]}"
                await git(["branch", "-q", "-M", inner, aside], top)

    async def _keep_clone_work(self, path: str, top: str, branch: str, base_commit: str) -> None:
        """An earlier run's commits in the task's clone, where a person looks for them: the
        repository's ``<branch>.prev-<sha>`` (the clone is reset to base next)."""
        tip = await rev(path, f"refs/heads/{branch}")
        if tip is None or await is_ancestor(path, tip, base_commit):
            return
        await git(
            [*clone.ALLOW_LOCAL, "fetch", "-q", "--no-tags", path,
             f"+{tip}:refs/heads/{branch}.prev-{tip[:12]}"],
            top,
        )  # fmt: skip

    @activity.defn(name=COMMIT.name)
    async def commit_branch(self, inp: CommitInput) -> CommitResult:
        """Leave one reviewable commit on the branch: base + the verified tree. The
        attempt-by-attempt history stays in the trace, not in the repository."""
        ws = inp.workspace
        trailer = f"Loop-Task: {ws.task_id}"
        head = await git(["rev-parse", "HEAD"], ws.path)
        parents = (await git(["rev-parse", "HEAD^@"], ws.path)).split()
        squashed = False
        if parents == [ws.base_commit]:
            body = await git(["log", "-1", "--format=%B", "HEAD"], ws.path)
            squashed = trailer in body.splitlines()
        if await rev(ws.path, f"{inp.artifact}^{{commit}}") is None:
            if squashed and ws.remote:
                # Squashed and pushed by a host that was lost since: the branch is the commit.
                return CommitResult(branch=ws.branch, commit=head)
            raise permanent(f"artifact {inp.artifact!r} is not a commit in {ws.path}")
        if squashed:
            head_tree = await git(["rev-parse", "HEAD^{tree}"], ws.path)
            artifact_tree = await git(["rev-parse", f"{inp.artifact}^{{tree}}"], ws.path)
            if head_tree == artifact_tree:
                await self._hand_over_branch(ws)
                return CommitResult(branch=ws.branch, commit=head)
        message = (inp.message.strip() or f"loop({ws.task_id})") + f"\n\n{trailer}\n"
        await git(["reset", "-q", "--hard", inp.artifact], ws.path)
        await git(["reset", "-q", "--soft", ws.base_commit], ws.path)
        await git(
            ["commit", "-q", "--no-verify", "--allow-empty", "--cleanup=whitespace",
             "-m", message],
            ws.path,
        )  # fmt: skip
        await self._hand_over_branch(ws)
        return CommitResult(branch=ws.branch, commit=await git(["rev-parse", "HEAD"], ws.path))

    async def _hand_over_branch(self, ws: Workspace) -> None:
        """The reviewable commit where people and merges find it: the repository's (or the
        mirror's) ``loop/<id>``, and a URL's remote."""
        if ws.isolated:
            await clone.bring(ws.path, ws.repo, ws.branch, self.settings.locks)
        await remote.publish(ws, self.settings.locks)

    @activity.defn(name=MERGE.name)
    async def merge(self, inp: MergeInput) -> MergeResult:
        """Bring the task's commit into base; anything a person must resolve (a dirty
        checkout of base, a conflict) is a result with a reason, never a half-done merge."""
        ws = inp.workspace
        if not ws.base_is_branch:
            return MergeResult(
                merged=False,
                reason=f"base {ws.base_ref} is a commit, not a branch; merge {ws.branch} by hand",
            )
        top = ws.repo
        ref = f"refs/heads/{ws.base_ref}"
        if await rev(top, f"{inp.commit}^{{commit}}") is None:
            raise permanent(f"commit {inp.commit!r} to merge is not in {top}")
        if ws.remote:
            return await self._merge_remote(inp)
        async with repo_lock(self.settings.locks, top):
            old = await rev(top, ref)
            if old is None:
                return MergeResult(merged=False, reason=f"base branch {ws.base_ref} is gone")
            if await is_ancestor(top, inp.commit, ref):
                return MergeResult(merged=True, commit=old, how="already-merged")
            fast_forward = await is_ancestor(top, old, inp.commit)
            checkout = next(
                (
                    e["worktree"]
                    for e in await worktrees(top)
                    if e.get("branch") == ref and is_dir(e["worktree"])
                ),
                None,
            )
            if checkout is not None:
                return await self._merge_in_checkout(checkout, ref, inp, fast_forward)
            if fast_forward:
                await git(["update-ref", ref, inp.commit, old], top)
                return MergeResult(merged=True, commit=inp.commit, how="fast-forward")
            new, conflict = await _merge_commit(top, old, inp.commit, inp.message)
            if conflict:
                return MergeResult(merged=False, reason=conflict)
            await git(["update-ref", ref, new, old], top)
            return MergeResult(merged=True, commit=new, how="merge-commit")

    async def _merge_remote(self, inp: MergeInput) -> MergeResult:
        """Push the merge to the remote's base: fast-forward or a merge commit, never a
        force; a base that moved meanwhile is fetched and merged again."""
        ws = inp.workspace
        top, url, base = ws.repo, ws.remote, ws.base_ref
        async with repo_lock(self.settings.locks, top):
            for tried in range(PUSH_TRIES):
                if tried:
                    heartbeat(f"push {tried + 1} to {base}")
                    await asyncio.sleep(random.uniform(0, min(2.0, PUSH_BACKOFF_S * 2**tried)))
                try:
                    await remote.fetch(top, url)
                except remote.RemoteError as e:
                    raise RuntimeError(str(e)) from None
                tip = await rev(top, f"{remote.tracking(base)}^{{commit}}")
                if tip is None:
                    return MergeResult(
                        merged=False, reason=f"base branch {base} is gone from {url}"
                    )
                if await is_ancestor(top, inp.commit, tip):
                    return MergeResult(merged=True, commit=tip, how="already-merged")
                if await is_ancestor(top, tip, inp.commit):
                    new, how = inp.commit, "fast-forward"
                else:
                    new, conflict = await _merge_commit(top, tip, inp.commit, inp.message)
                    if conflict:
                        return MergeResult(merged=False, reason=conflict)
                    how = "merge-commit"
                try:
                    pushed = await remote.push_base(top, url, new, base)
                except remote.RemoteError as e:
                    raise RuntimeError(str(e)) from None
                if pushed:
                    return MergeResult(merged=True, commit=new, how=how)
        return MergeResult(
            merged=False,
            reason=f"{url} refused {PUSH_TRIES} pushes to {base}: it kept moving meanwhile",
        )

    async def _merge_in_checkout(
        self, checkout: str, ref: str, inp: MergeInput, fast_forward: bool
    ) -> MergeResult:
        """Merge where base is checked out, so that tree shows the result; a person's
        uncommitted edits there are left alone."""
        tracked = status_paths(
            await git(["status", "--porcelain", "-z", "--untracked-files=no"], checkout)
        )
        if tracked:
            return MergeResult(
                merged=False,
                reason=f"base checkout {checkout} has uncommitted changes: {listing(tracked)}",
            )
        if fast_forward:
            how = "fast-forward"
            args = ["merge", "-q", "--ff-only", inp.commit]
        else:
            how = "merge-commit"
            args = ["merge", "-q", "--no-ff", "--no-edit", "--no-verify", "-m", inp.message,
                    inp.commit]  # fmt: skip
        try:
            await git(args, checkout)
        except GitError as e:
            conflicted = split_z(
                await git(["diff", "--name-only", "--diff-filter=U", "-z"], checkout, check=False)
            )
            await git(["merge", "--abort"], checkout, check=False)
            if conflicted:
                return MergeResult(
                    merged=False, reason=f"merge conflict in {listing(sorted(conflicted))}"
                )
            return MergeResult(merged=False, reason=f"merge failed in {checkout}: {e.message}")
        return MergeResult(merged=True, commit=await git(["rev-parse", ref], checkout), how=how)

    @activity.defn(name=REMOVE_WORKSPACE.name)
    async def remove_workspace(self, inp: RemoveInput) -> RemoveResult:
        """Remove a finished task's worktree unless it holds uncommitted work."""
        ws = inp.workspace
        path = ws.path
        if not is_dir(ws.repo):
            return RemoveResult(removed=not exists(path), reason="repository is gone")
        async with repo_lock(self.settings.locks, ws.repo):
            if not exists(path):
                if not ws.isolated:
                    await git(["worktree", "prune"], ws.repo)
                # A crash between removing the tree and deleting the branch ends here too.
                await self._drop_branch(ws, inp.delete_branch)
                return RemoveResult(removed=True, reason="already removed")
            if ws.isolated:
                if not clone.alternates(str(Path(path) / ".git")):
                    return RemoveResult(removed=False, reason=f"{path} is not a task's clone; kept")
            elif find_worktree(await worktrees(ws.repo), path) is None:
                return RemoveResult(
                    removed=False, reason=f"{path} is not a worktree of {ws.repo}; kept"
                )
            if await dirty_files(path, ws.byproducts):
                return RemoveResult(removed=False, reason="worktree has uncommitted changes; kept")
            if ws.isolated:
                # Its branch stays in the repository, where people look; one a person
                # changed there since the hand-over is theirs, never overwritten.
                if await rev(ws.repo, f"refs/heads/{ws.branch}") is None:
                    await clone.bring_locked(path, ws.repo, ws.branch)
                await asyncio.to_thread(shutil.rmtree, path)
            else:
                # Byproducts are untracked files too, and `worktree remove` refuses those;
                # anything else untracked appearing meanwhile still makes it refuse.
                await git(["clean", "-q", "-fd", "--", *only(ws.byproducts)], path)
                await git(["worktree", "remove", path], ws.repo)
            kept = await self._drop_branch(ws, inp.delete_branch)
        return RemoveResult(removed=True, reason=kept)

    async def _drop_branch(self, ws: Workspace, delete: bool) -> str:
        """Delete the task branch only when base already holds it; else say it was kept."""
        if not delete or await rev(ws.repo, f"refs/heads/{ws.branch}") is None:
            return ""
        if not ws.base_is_branch:
            base = ws.base_commit
        elif ws.remote:
            base = remote.tracking(ws.base_ref)
        else:
            base = f"refs/heads/{ws.base_ref}"
        if await is_ancestor(ws.repo, f"refs/heads/{ws.branch}", base):
            await git(["branch", "-q", "-D", ws.branch], ws.repo)
            if ws.remote:
                await remote.delete_branch(ws.repo, ws.remote, ws.branch)
            return ""
        return f"branch {ws.branch} kept: not merged into {ws.base_ref}"
