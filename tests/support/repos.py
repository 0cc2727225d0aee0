"""Real git repositories: git with a fixed identity, the demo repository, the project's paths."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The project's folder (``worker.py``, ``examples/``, ...)."""
EXAMPLES = ROOT / "examples"
GIT = [
    "git",
    "-c",
    "user.name=Test",
    "-c",
    "user.email=test@localhost",
    "-c",
    "commit.gpgsign=false",
]


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` (failing on a non-zero exit); its stdout, stripped."""
    return subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_demo_repo(repo: Path) -> Path:
    """The demo's slugify repository with its bug, committed on main, at ``repo``."""
    subprocess.run(["cp", "-r", str(EXAMPLES / "demo" / "repo"), str(repo)], check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def task_clones(home: Path, repo: Path) -> list[str]:
    """The task clones under ``home`` (LOOP_HOME) made from ``repo``: each borrows the
    objects of that repository's store of base history."""
    from activities.host import clone

    store = clone.store_for((home / "stores").resolve(), str(repo.resolve())) / "objects"
    found = (home / "worktrees").resolve()
    return sorted(
        str(p)
        for p in (found.iterdir() if found.is_dir() else [])
        if str(store.resolve()) in clone.alternates(str(p / ".git"))
    )
