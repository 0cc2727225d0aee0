"""git with a fixed identity and no signing, for the repositories tests make."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
    return subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()
