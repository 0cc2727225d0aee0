"""The task file: YAML or JSON in, a validated ``TaskSpec`` with an absolute repo out.

Everything that can be checked before a workflow starts is checked here, so that
bad input costs a one-line message and exit code 2, never a started task that
fails later: unknown keys, types and ranges (pydantic), the repository (exists,
is a non-bare git repository), the base (resolves to a commit) and the agent
command (can be found).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from loop.contracts import TaskSpec
from loop.errors import TaskFileError
from loop.loaders.common import read, validated
from loop.rules.commands import programs


def load_task(path: str | Path) -> TaskSpec:
    file = Path(path)
    data = read(file, "task", "id, goal, repo, agent, verify")
    return resolve(validated(TaskSpec, data, str(file)), file.resolve().parent, str(file))


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
    )


def resolve(spec: TaskSpec, folder: Path, source: str) -> TaskSpec:
    """Absolute repo (relative to the task file's folder), a concrete base, a findable agent."""
    repo = Path(spec.repo).expanduser()
    repo = (folder / repo).resolve() if not repo.is_absolute() else repo.resolve()
    if not repo.is_dir():
        raise TaskFileError(f"{source}: repo: {repo} does not exist")
    bare = _git(repo, "rev-parse", "--is-bare-repository")
    if bare.returncode != 0:
        raise TaskFileError(f"{source}: repo: {repo} is not a git repository (run `git init`)")
    if bare.stdout.strip() == "true":
        raise TaskFileError(f"{source}: repo: {repo} is a bare repository; point at a clone")
    top = Path(_git(repo, "rev-parse", "--show-toplevel").stdout.strip())
    if _git(top, "rev-parse", "--verify", "-q", "HEAD").returncode != 0:
        raise TaskFileError(f"{source}: repo: {top} has no commits yet; commit first")
    base = spec.base
    if base is None:
        branch = _git(top, "symbolic-ref", "--short", "-q", "HEAD")
        base = branch.stdout.strip() if branch.returncode == 0 else None
        if base is None:
            base = _git(top, "rev-parse", "--verify", "HEAD").stdout.strip()
    if _git(top, "rev-parse", "--verify", "-q", f"{base}^{{commit}}").returncode != 0:
        raise TaskFileError(f"{source}: base: {base!r} is not a branch or commit in {top}")
    command = spec.agent.command or []
    for exe in programs(command) if command else []:
        findable = shutil.which(exe) is not None or (top / exe).exists() or (folder / exe).is_file()
        if not findable:
            raise TaskFileError(
                f"{source}: agent.command runs {exe!r}, which is not on PATH, not a file, and "
                "not in the repo"
            )
    return spec.model_copy(update={"repo": str(top), "base": base})
