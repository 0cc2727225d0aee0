"""Worktree life on real git repositories: prepare, commit, merge, remove, outside writes."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.host.git import GitError, git, git_ok, lock_file, repo_lock
from activities.host.worktree import (
    changed_files,
    dirty_files,
    outside_changes,
    outside_snapshot,
    repo_top,
    restore,
    wip_commit,
)
from activities.workspace import WorkspaceActivities
from loop.contracts import (
    CommitInput,
    MergeInput,
    PrepareInput,
    RemoveInput,
    TaskSpec,
    Workspace,
)
from loop.settings import Settings
from tests.support.repos import task_clones


def sh(cwd: Path, *args: str) -> str:
    """Set-up git calls, as a person would type them (no Loopwork options)."""
    return subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def gone(path: str) -> bool:
    return not Path(path).exists()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = (tmp_path / "repo").resolve()
    r.mkdir()
    sh(r, "init", "-q", "-b", "main")
    (r / "README.md").write_text("hello\n")
    (r / "shared.txt").write_text("one\ntwo\nthree\n")
    sh(r, "add", ".")
    sh(r, "commit", "-q", "-m", "init")
    return r


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


@pytest.fixture
def acts(settings: Settings) -> WorkspaceActivities:
    return WorkspaceActivities(settings)


async def prepare(
    acts: WorkspaceActivities, repo: Path, task_id: str = "t1", run_id: str = "r1", **kw: str
) -> Workspace:
    return await acts.prepare_workspace(
        PrepareInput(task_id=task_id, repo=str(repo), run_id=run_id, **kw)
    )


async def head(path: str | Path, rev: str = "HEAD") -> str:
    return await git(["rev-parse", rev], path)


def spec(repo: Path, task_id: str = "t1") -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "id": task_id,
            "goal": "g",
            "repo": str(repo),
            "agent": {"command": ["true"]},
            "verify": [{"name": "t", "run": "true"}],
        }
    )


async def finished(acts: WorkspaceActivities, ws: Workspace, files: dict[str, str]) -> str:
    """A task that wrote ``files`` and got its branch commit."""
    for name, text in files.items():
        (Path(ws.path) / name).write_text(text)
    artifact = await wip_commit(ws, 1)
    result = await acts.commit_branch(
        CommitInput(task=spec(Path(ws.repo), ws.task_id), workspace=ws, artifact=artifact,
                    message="do it")
    )  # fmt: skip
    return result.commit


# --------------------------------------------------------------------------- git helper


async def test_git_error_is_one_line_and_git_ok(repo: Path) -> None:
    with pytest.raises(GitError) as err:
        await git(["rev-parse", "--verify", "no-such-ref"], repo)
    assert err.value.exit_code != 0
    assert "\n" not in str(err.value)
    assert "rev-parse" in str(err.value)
    assert await git_ok(["rev-parse", "HEAD"], repo)
    assert not await git_ok(["rev-parse", "--verify", "-q", "nope"], repo)
    assert await git(["rev-parse", "--verify", "-q", "nope"], repo, check=False) == ""


async def test_repo_lock_serialises(tmp_path: Path) -> None:
    inside = 0
    most = 0

    async def hold() -> None:
        nonlocal inside, most
        async with repo_lock(tmp_path / "locks", "/some/repo"):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.02)
            inside -= 1

    await asyncio.gather(*(hold() for _ in range(4)))
    assert most == 1
    assert len(list((tmp_path / "locks").glob("*.lock"))) == 1


async def test_repo_lock_waits_for_another_process_holding_its_file(tmp_path: Path) -> None:
    """Taken at once when free (no thread), waited for when another open file holds it
    (another worker process holds its own)."""
    path = lock_file(tmp_path / "locks", "/some/repo")
    path.parent.mkdir(parents=True)
    other = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        entered = asyncio.Event()

        async def take() -> None:
            async with repo_lock(tmp_path / "locks", "/some/repo"):
                entered.set()

        taking = asyncio.create_task(take())
        await asyncio.sleep(0.2)
        assert not entered.is_set()
        fcntl.flock(other, fcntl.LOCK_UN)
        await asyncio.wait_for(taking, 5)
    finally:
        os.close(other)
    assert entered.is_set()


# --------------------------------------------------------------------------- prepare


async def test_prepare_creates_worktree_from_base(
    acts: WorkspaceActivities, repo: Path, settings: Settings
) -> None:
    ws = await prepare(acts, repo)
    assert ws.branch == "loop/t1"
    assert ws.base_ref == "main" and ws.base_is_branch
    assert ws.base_commit == await head(repo)
    assert ws.repo == str(repo)
    assert Path(ws.path) == settings.worktrees.resolve() / "t1"
    assert (Path(ws.path) / "README.md").read_text() == "hello\n"
    assert await git(["symbolic-ref", "--short", "HEAD"], ws.path) == "loop/t1"
    assert await head(ws.path) == ws.base_commit
    assert await head(ws.path, "refs/heads/loop/t1") == ws.base_commit  # made by the reset
    assert not await git(["status", "--porcelain"], ws.path)
    assert (Path(ws.run_dir) / "workspace.json").is_file()


async def test_a_clone_cut_short_by_a_killed_worker_leaves_nothing_the_retry_refuses(
    acts: WorkspaceActivities, repo: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed between ``git init`` and the clone's last step left a repository
    without its alternates at the task's path, which the retry took for a stranger's and
    refused ("exists but is not a task's clone"). The clone is made beside it now."""
    from activities.host import clone

    real = clone.git

    async def dies_at_reset(args: list[str], cwd: object, **kw: object) -> str:
        if args[:1] == ["reset"]:
            raise RuntimeError("the worker died here")
        return await real(args, cwd, **kw)  # type: ignore[arg-type]  # git's own arguments

    monkeypatch.setattr(clone, "git", dies_at_reset)
    with pytest.raises(RuntimeError):
        await prepare(acts, repo)
    path = settings.worktrees.resolve() / "t1"
    assert not path.exists() and (path.parent / ".t1.making" / ".git").is_dir()
    monkeypatch.setattr(clone, "git", real)
    ws = await prepare(acts, repo)  # the retry
    assert (Path(ws.path) / "README.md").read_text() == "hello\n"
    assert not (path.parent / ".t1.making").exists()


async def test_prepare_detached_head_uses_the_commit(acts: WorkspaceActivities, repo: Path) -> None:
    commit = await head(repo)
    sh(repo, "checkout", "-q", "--detach")
    ws = await prepare(acts, repo)
    assert ws.base_ref == commit and ws.base_commit == commit
    assert not ws.base_is_branch


async def test_prepare_same_run_is_idempotent(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    (Path(ws.path) / "work.txt").write_text("in progress\n")
    sh(repo, "commit", "-q", "--allow-empty", "-m", "base moved")
    again = await prepare(acts, repo)
    assert again == ws  # same base commit although base moved on
    assert (Path(ws.path) / "work.txt").read_text() == "in progress\n"


async def test_prepare_new_run_resets_clean_tree(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    (Path(ws.path) / "old.txt").write_text("old run\n")
    old = await wip_commit(ws, 1)
    sh(repo, "commit", "-q", "--allow-empty", "-m", "base moved")
    again = await prepare(acts, repo, run_id="r2")
    assert again.base_commit == await head(repo) != ws.base_commit
    assert await head(again.path) == again.base_commit
    assert not (Path(again.path) / "old.txt").exists()
    # the earlier run's commit is kept under another name, not lost
    assert await head(repo, f"loop/t1.prev-{old[:12]}") == old


async def test_prepare_new_run_refuses_dirty_tree(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    (Path(ws.path) / "unsaved.txt").write_text("precious\n")
    with pytest.raises(ApplicationError) as err:
        await prepare(acts, repo, run_id="r2")
    assert err.value.non_retryable
    assert "uncommitted changes" in str(err.value) and ws.path in str(err.value)
    assert (Path(ws.path) / "unsaved.txt").read_text() == "precious\n"


async def test_prepare_keeps_unmerged_branch_without_worktree(
    acts: WorkspaceActivities, repo: Path
) -> None:
    sh(repo, "branch", "loop/t1")
    sh(repo, "checkout", "-q", "loop/t1")
    (repo / "earlier.txt").write_text("x\n")
    sh(repo, "add", ".")
    sh(repo, "commit", "-q", "-m", "earlier work")
    earlier = await head(repo)
    sh(repo, "checkout", "-q", "main")
    ws = await prepare(acts, repo)
    assert await head(ws.path) == ws.base_commit != earlier
    assert await head(repo, f"loop/t1.prev-{earlier[:12]}") == earlier


@pytest.mark.parametrize("problem", ["missing", "plain-dir", "bare", "missing-base"])
async def test_prepare_bad_input_is_permanent(
    acts: WorkspaceActivities, repo: Path, tmp_path: Path, problem: str
) -> None:
    base = None
    target = repo
    expected = {
        "missing": "does not exist",
        "plain-dir": "not a git repository",
        "bare": "bare",
        "missing-base": "no-such-branch",
    }[problem]
    if problem == "missing":
        target = tmp_path / "nowhere"
    elif problem == "plain-dir":
        target = tmp_path / "plain"
        target.mkdir()
    elif problem == "bare":
        target = tmp_path / "bare.git"
        sh(tmp_path, "clone", "-q", "--bare", str(repo), str(target))
    else:
        base = "no-such-branch"
    with pytest.raises(ApplicationError) as err:
        await acts.prepare_workspace(
            PrepareInput(task_id="t1", repo=str(target), base=base, run_id="r1")
        )
    assert err.value.non_retryable
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


async def test_repo_top_of_a_subdirectory(repo: Path) -> None:
    (repo / "sub").mkdir()
    assert await repo_top(str(repo / "sub")) == str(repo)


async def test_repo_top_inside_git_folder_is_not_a_working_tree(repo: Path) -> None:
    """git says "not bare" there and then fails: the one-call answer is not taken."""
    with pytest.raises(ApplicationError) as err:
        await repo_top(str(repo / ".git"))
    assert err.value.non_retryable
    assert "not inside a git working tree" in str(err.value)


async def test_concurrent_tasks_do_not_see_each_other(
    acts: WorkspaceActivities, repo: Path
) -> None:
    a, b = await asyncio.gather(prepare(acts, repo, "ta"), prepare(acts, repo, "tb"))
    assert a.path != b.path
    (Path(a.path) / "a.txt").write_text("a\n")
    (Path(b.path) / "b.txt").write_text("b\n")
    ca, cb = await asyncio.gather(wip_commit(a, 1), wip_commit(b, 1))
    assert await changed_files(a, ca) == ["a.txt"]
    assert await changed_files(b, cb) == ["b.txt"]
    assert not (Path(a.path) / "b.txt").exists()
    assert not (Path(b.path) / "a.txt").exists()
    assert await dirty_files(str(repo)) == []


async def test_each_task_has_a_clone_with_only_its_own_branch(
    acts: WorkspaceActivities, repo: Path
) -> None:
    """The other task's attempt commit is neither listed nor readable by hash in this
    clone; base history is (through the store); the repository gets only what is handed
    over."""
    a, b = await prepare(acts, repo, "ta"), await prepare(acts, repo, "tb")
    (Path(a.path) / "a.txt").write_text("secret of a\n")
    work_of_a = await wip_commit(a, 1)
    refs = await git(["for-each-ref", "--format=%(refname)"], b.path)
    assert refs.split() == ["refs/heads/loop/tb"]
    assert not await git_ok(["cat-file", "-e", work_of_a], b.path)
    objects = await git(["cat-file", "--batch-all-objects", "--batch-check"], b.path)
    assert work_of_a not in objects and b.base_commit in objects
    assert await git(["branch", "--list", "loop/*"], repo) == ""  # nothing handed over yet
    assert b.isolated and Path(b.store).is_dir() and b.commits == b.path
    # the store holds the base and is readable by every task uid, writable by none
    assert oct(Path(b.store).stat().st_mode & 0o777) == "0o755"


async def test_commit_branch_hands_the_commit_over(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    commit = await finished(acts, ws, {"task.txt": "task\n"})
    assert await head(repo, "refs/heads/loop/t1") == commit
    assert await git(["show", f"{commit}:task.txt"], repo) == "task"


async def test_a_person_checking_out_the_task_branch_is_told_where(
    acts: WorkspaceActivities, repo: Path
) -> None:
    sh(repo, "checkout", "-q", "-b", "loop/t1")
    with pytest.raises(ApplicationError) as err:
        await prepare(acts, repo)
    assert err.value.non_retryable
    assert f"branch loop/t1 is checked out in {repo}" in str(err.value)


def earlier_worktree(repo: Path, settings: Settings) -> Path:
    """Task t1's worktree as an earlier version of Loopwork made it (``git worktree add``)."""
    old = settings.worktrees.resolve() / "t1"
    old.parent.mkdir(parents=True)
    sh(repo, "worktree", "add", "-q", "-b", "loop/t1", str(old))
    return old


async def test_an_earlier_versions_worktree_gives_way_to_a_clone(
    acts: WorkspaceActivities, repo: Path, settings: Settings
) -> None:
    old = earlier_worktree(repo, settings)
    (old / "earlier.txt").write_text("x\n")
    sh(old, "add", ".")
    sh(old, "commit", "-q", "-m", "earlier work")
    earlier = await head(old)
    ws = await prepare(acts, repo, run_id="r2")
    assert ws.isolated and await head(ws.path) == ws.base_commit
    assert (await git(["worktree", "list", "--porcelain"], repo)).count("worktree ") == 1
    assert await head(repo, f"loop/t1.prev-{earlier[:12]}") == earlier


async def test_an_earlier_versions_dirty_worktree_is_kept(
    acts: WorkspaceActivities, repo: Path, settings: Settings
) -> None:
    old = earlier_worktree(repo, settings)
    (old / "unsaved.txt").write_text("precious\n")
    with pytest.raises(ApplicationError) as err:
        await prepare(acts, repo, run_id="r2")
    assert err.value.non_retryable and "uncommitted changes" in str(err.value)
    assert (old / "unsaved.txt").read_text() == "precious\n"


# --------------------------------------------------------------------------- attempt helpers


async def test_wip_commit_is_idempotent_and_skips_byproducts(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    wt = Path(ws.path)
    (wt / "pkg" / "__pycache__").mkdir(parents=True)
    (wt / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    (wt / "stray.pyc").write_bytes(b"\0")
    (wt / ".pytest_cache").mkdir()
    (wt / ".pytest_cache" / "README.md").write_text("cache\n")
    (wt / "pkg" / "m.py").write_text("x = 1\n")
    first = await wip_commit(ws, 1)
    second = await wip_commit(ws, 1)
    assert first == second != ws.base_commit
    assert await git(["log", "-1", "--format=%s"], wt) == "loop(t1): attempt 1"
    assert await changed_files(ws, first) == ["pkg/m.py"]
    assert await dirty_files(ws.path) == []  # byproducts are not reported as dirty either
    third = await wip_commit(ws, 2)  # a new attempt with no change still gets its commit
    assert third != first


async def test_changed_files_lists_edits_deletions_and_both_rename_sides(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    wt = Path(ws.path)
    (wt / "shared.txt").write_text("changed\n")
    (wt / "README.md").rename(wt / "READ.md")
    (wt / "new dir").mkdir()
    (wt / "new dir" / "n.txt").write_text("n\n")
    commit = await wip_commit(ws, 1)
    assert await changed_files(ws, commit) == ["READ.md", "README.md", "new dir/n.txt",
                                               "shared.txt"]  # fmt: skip
    assert await changed_files(ws, ws.base_commit) == []


async def test_restore_removes_edits_and_untracked_files(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    wt = Path(ws.path)
    (wt / "kept.txt").write_text("kept\n")
    start = await wip_commit(ws, 1)
    (wt / "kept.txt").write_text("edited\n")
    (wt / "README.md").unlink()
    (wt / "junk").mkdir()
    (wt / "junk" / "j.txt").write_text("j\n")
    assert sorted(await dirty_files(ws.path)) == ["README.md", "junk/j.txt", "kept.txt"]
    await restore(ws, start)
    assert await dirty_files(ws.path) == []
    assert (wt / "kept.txt").read_text() == "kept\n"
    assert (wt / "README.md").exists()
    assert not (wt / "junk").exists()


# --------------------------------------------------------------------------- commit_branch


async def test_commit_branch_squashes_and_is_idempotent(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    wt = Path(ws.path)
    (wt / "a.txt").write_text("a\n")
    await wip_commit(ws, 1)
    (wt / "b.txt").write_text("b\n")
    artifact = await wip_commit(ws, 2)
    (wt / "gate-output.log").write_text("left by a gate\n")
    inp = CommitInput(task=spec(repo), workspace=ws, artifact=artifact, message="Add a and b")
    first = await acts.commit_branch(inp)
    assert first.branch == "loop/t1"
    assert await git(["rev-parse", f"{first.commit}^@"], wt) == ws.base_commit
    assert await head(wt, f"{first.commit}^{{tree}}") == await head(wt, f"{artifact}^{{tree}}")
    body = await git(["log", "-1", "--format=%B", first.commit], wt)
    assert body.splitlines()[0] == "Add a and b"
    assert "Loop-Task: t1" in body.splitlines()
    assert await head(wt, "refs/heads/loop/t1") == first.commit
    second = await acts.commit_branch(inp)
    assert second.commit == first.commit


# --------------------------------------------------------------------------- merge


async def test_merge_fast_forwards_checked_out_base(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    commit = await finished(acts, ws, {"shared.txt": "new\n"})
    result = await acts.merge(MergeInput(workspace=ws, commit=commit, message="merge t1"))
    assert result.merged and result.how == "fast-forward"
    assert result.commit == commit == await head(repo, "refs/heads/main")
    assert (repo / "shared.txt").read_text() == "new\n"
    assert await dirty_files(str(repo)) == []


async def test_merge_commit_when_base_moved_then_already_merged(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    commit = await finished(acts, ws, {"task.txt": "task\n"})
    (repo / "other.txt").write_text("other\n")
    sh(repo, "add", ".")
    sh(repo, "commit", "-q", "-m", "meanwhile")
    moved = await head(repo)
    inp = MergeInput(workspace=ws, commit=commit, message="merge t1")
    result = await acts.merge(inp)
    assert result.merged and result.how == "merge-commit"
    assert (await git(["rev-parse", f"{result.commit}^@"], repo)).split() == [moved, commit]
    assert (repo / "task.txt").exists() and (repo / "other.txt").exists()
    again = await acts.merge(inp)
    assert again.merged and again.how == "already-merged"
    assert again.commit == result.commit == await head(repo, "refs/heads/main")


async def test_merge_refuses_dirty_base_checkout(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    commit = await finished(acts, ws, {"task.txt": "task\n"})
    (repo / "README.md").write_text("a person's edit\n")
    before = await head(repo)
    result = await acts.merge(MergeInput(workspace=ws, commit=commit, message="m"))
    assert not result.merged
    assert "uncommitted changes" in result.reason and "README.md" in result.reason
    assert await head(repo) == before
    assert (repo / "README.md").read_text() == "a person's edit\n"
    assert not (repo / "task.txt").exists()


async def test_merge_conflict_leaves_base_clean(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    commit = await finished(acts, ws, {"shared.txt": "task's version\n"})
    (repo / "shared.txt").write_text("base's version\n")
    sh(repo, "commit", "-q", "-am", "conflicting")
    before = await head(repo)
    result = await acts.merge(MergeInput(workspace=ws, commit=commit, message="m"))
    assert not result.merged
    assert "conflict" in result.reason and "shared.txt" in result.reason
    assert await head(repo) == before
    assert await dirty_files(str(repo)) == []
    assert not await git_ok(["rev-parse", "-q", "--verify", "MERGE_HEAD"], repo)
    assert (repo / "shared.txt").read_text() == "base's version\n"


async def test_merge_base_not_checked_out_updates_ref(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    sh(repo, "checkout", "-q", "-b", "elsewhere")
    commit = await finished(acts, ws, {"task.txt": "task\n"})
    result = await acts.merge(MergeInput(workspace=ws, commit=commit, message="m"))
    assert result.merged and result.how == "fast-forward"
    assert await head(repo, "refs/heads/main") == commit
    assert not (repo / "task.txt").exists()  # the checkout on another branch is untouched


async def test_merge_base_not_checked_out_merge_commit_and_conflict(
    acts: WorkspaceActivities, repo: Path
) -> None:
    a = await prepare(acts, repo, "ta")
    b = await prepare(acts, repo, "tb")
    c = await prepare(acts, repo, "tc")
    sh(repo, "checkout", "-q", "-b", "elsewhere")
    ca = await finished(acts, a, {"a.txt": "a\n", "shared.txt": "from a\n"})
    cb = await finished(acts, b, {"b.txt": "b\n"})
    cc = await finished(acts, c, {"shared.txt": "from c\n"})
    assert (await acts.merge(MergeInput(workspace=a, commit=ca, message="ma"))).merged
    rb = await acts.merge(MergeInput(workspace=b, commit=cb, message="mb"))
    assert rb.merged and rb.how == "merge-commit"
    assert await head(repo, "refs/heads/main") == rb.commit
    files = (await git(["ls-tree", "--name-only", rb.commit], repo)).split()
    assert {"a.txt", "b.txt"} <= set(files)
    assert await git(["log", "-1", "--format=%s", rb.commit], repo) == "mb"
    rc = await acts.merge(MergeInput(workspace=c, commit=cc, message="mc"))
    assert not rc.merged and "shared.txt" in rc.reason
    assert await head(repo, "refs/heads/main") == rb.commit


async def test_merge_onto_a_commit_base_is_left_to_a_person(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo, base=await head(repo))
    commit = await finished(acts, ws, {"task.txt": "task\n"})
    result = await acts.merge(MergeInput(workspace=ws, commit=commit, message="m"))
    assert not result.merged and "not a branch" in result.reason


# --------------------------------------------------------------------------- remove


async def test_remove_clean_worktree_then_noop(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    commit = await finished(acts, ws, {"task.txt": "task\n"})
    (Path(ws.path) / "__pycache__").mkdir()
    (Path(ws.path) / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert (await acts.merge(MergeInput(workspace=ws, commit=commit, message="m"))).merged
    first = await acts.remove_workspace(RemoveInput(workspace=ws, delete_branch=True))
    assert first.removed
    assert gone(ws.path)
    assert not await git_ok(["show-ref", "--verify", "--quiet", "refs/heads/loop/t1"], repo)
    assert task_clones(acts.settings.home, repo) == []
    second = await acts.remove_workspace(RemoveInput(workspace=ws, delete_branch=True))
    assert second.removed and second.reason == "already removed"


async def test_remove_keeps_unmerged_branch(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    commit = await finished(acts, ws, {"task.txt": "task\n"})
    result = await acts.remove_workspace(RemoveInput(workspace=ws, delete_branch=True))
    assert result.removed and "kept" in result.reason
    assert await head(repo, "refs/heads/loop/t1") == commit


async def test_remove_keeps_the_clones_branch_in_the_repository(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    (Path(ws.path) / "task.txt").write_text("task\n")
    work = await wip_commit(ws, 1)
    result = await acts.remove_workspace(RemoveInput(workspace=ws, delete_branch=True))
    assert result.removed and "kept" in result.reason and gone(ws.path)
    assert await head(repo, "refs/heads/loop/t1") == work


async def test_remove_never_overwrites_what_a_person_did_to_the_branch(
    acts: WorkspaceActivities, repo: Path
) -> None:
    ws = await prepare(acts, repo)
    await finished(acts, ws, {"task.txt": "task\n"})
    sh(repo, "checkout", "-q", "loop/t1")
    (repo / "task.txt").write_text("amended by a person\n")
    sh(repo, "commit", "-q", "-am", "person's fix")
    theirs = await head(repo)
    sh(repo, "checkout", "-q", "main")
    assert (await acts.remove_workspace(RemoveInput(workspace=ws))).removed
    assert await head(repo, "refs/heads/loop/t1") == theirs


async def test_remove_keeps_dirty_worktree(acts: WorkspaceActivities, repo: Path) -> None:
    ws = await prepare(acts, repo)
    (Path(ws.path) / "unsaved.txt").write_text("precious\n")
    result = await acts.remove_workspace(RemoveInput(workspace=ws))
    assert not result.removed and "uncommitted" in result.reason
    assert (Path(ws.path) / "unsaved.txt").read_text() == "precious\n"
    assert task_clones(acts.settings.home, repo) == [ws.path]


# --------------------------------------------------------------------------- outside writes


async def test_outside_snapshot_sees_writes_into_main_repo(tmp_path: Path, repo: Path) -> None:
    settings = Settings(home=repo / ".loop")  # LOOP_HOME inside the repository
    acts = WorkspaceActivities(settings)
    ws = await prepare(acts, repo)
    (repo / "README.md").write_text("dirty before\n")
    exclude = [str(settings.home)]
    before = await outside_snapshot(ws.repo, exclude)
    assert set(before) == {"README.md"}

    (repo / "escaped.txt").write_text("written by the agent\n")
    (repo / "README.md").write_text("changed again\n")
    (repo / "shared.txt").unlink()
    (settings.runs / "t1" / "log.txt").write_text("loop's own files\n")
    (Path(ws.path) / "inside.txt").write_text("the agent's own worktree\n")
    after = await outside_snapshot(ws.repo, exclude)

    assert after["shared.txt"] == "deleted"
    assert outside_changes(before, after) == ["README.md", "escaped.txt", "shared.txt"]
    assert outside_changes(after, after) == []


# --------------------------------------------------------------------------- a nested repository


async def test_the_workers_git_never_runs_a_nested_repositorys_commands(tmp_path: Path) -> None:
    """The second line of defence alone: a committed gitlink to a repository whose config
    names an fsmonitor command, owned by the worker, as a crash could leave it. (The first,
    removing such a repository before the commit, is in tests/e2e/test_trust_boundary.py.)"""
    repo, mark = tmp_path / "repo", tmp_path / "ran"
    sub = repo / "sub"
    sub.mkdir(parents=True)
    sh(repo, "init", "-q", "-b", "main")
    (sub / "f").write_text("y\n")
    sh(sub, "init", "-q")
    sh(sub, "add", "f")
    sh(sub, "commit", "-q", "-m", "s")
    sh(sub, "config", "core.fsmonitor", f"id > {mark}; false")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "gitlink")
    (sub / "f").write_text("changed\n")
    await dirty_files(str(repo))
    assert not mark.exists()
