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
