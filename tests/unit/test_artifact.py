"""The checkouts gates judge: one per try, what earlier tries left swept, and the sweep
touches nothing but the trees it made itself (no link followed, no FIFO opened)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from activities.host import artifact
from tests.support.repos import git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "app.py").write_text("x = 1\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def registered(repo: Path) -> list[str]:
    """The worktrees git knows of, the main checkout aside."""
    lines = git(repo, "worktree", "list", "--porcelain").splitlines()
    trees = [line.removeprefix("worktree ") for line in lines if line.startswith("worktree ")]
    return [t for t in trees if Path(t) != repo]


async def test_a_try_sweeps_the_checkouts_earlier_tries_left(repo: Path, tmp_path: Path) -> None:
    folder, locks = tmp_path / "attempt-1", tmp_path / "locks"
    commit = git(repo, "rev-parse", "HEAD")
    # A try killed under its gates left its checkout registered.
    git(repo, "worktree", "add", "-q", "--detach", str(folder / "checkout-1"), commit)

    async with artifact.checkout(str(repo), commit, folder, 2, locks) as tree:
        assert tree == folder / "checkout-2"
        assert (tree / "app.py").read_text() == "x = 1\n"
        assert not (folder / "checkout-1").exists()
        assert registered(repo) == [str(tree)]
    assert not tree.exists()
    assert registered(repo) == []


async def test_a_checkout_git_cannot_remove_is_deleted_and_forgotten(
    repo: Path, tmp_path: Path
) -> None:
    """A gate that broke its checkout (its ``.git`` file gone): git refuses to remove the
    tree, so it is deleted by hand and git's record of it pruned, not left to pile up."""
    folder, locks = tmp_path / "attempt-1", tmp_path / "locks"
    commit = git(repo, "rev-parse", "HEAD")
    async with artifact.checkout(str(repo), commit, folder, 1, locks) as tree:
        (tree / ".git").unlink()
    assert not tree.exists()
    assert registered(repo) == []


async def test_the_sweep_follows_no_link_and_opens_no_fifo(repo: Path, tmp_path: Path) -> None:
    folder, locks = tmp_path / "attempt-1", tmp_path / "locks"
    folder.mkdir()
    commit = git(repo, "rev-parse", "HEAD")
    # Planted where the sweep looks: a link to the task's own worktree, a link to a
    # folder outside, a FIFO.
    own = tmp_path / "worktree"
    git(repo, "worktree", "add", "-q", "--detach", str(own), commit)
    (own / "work.txt").write_text("the agent's work")
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "secret").write_text("root only")
    (folder / "checkout-7").symlink_to(own)
    (folder / "checkout-8").symlink_to(canary)
    os.mkfifo(folder / "checkout-9")

    async def judged() -> None:
        async with artifact.checkout(str(repo), commit, folder, 10, locks) as tree:
            assert (tree / "app.py").exists()

    await asyncio.wait_for(judged(), 30)
    assert (own / "work.txt").read_text() == "the agent's work"
    assert registered(repo) == [str(own)]
    assert (canary / "secret").read_text() == "root only"
    assert sorted(p.name for p in folder.iterdir()) == []
