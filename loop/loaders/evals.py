"""Eval suites and harness files, and the deterministic snapshot of a case's folder.

A case's ``source`` folder becomes a git repository under ``LOOP_HOME/eval/`` with
a deterministic commit (fixed author, date and message), so the same folder
always yields the same commit and the suite hash means the same code everywhere.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from loop.contracts import AgentSpec, Harness, Suite, TaskSpec
from loop.errors import TaskFileError
from loop.hardened import git
from loop.loaders.common import read, validated
from loop.loaders.task import resolve

PINNED = {
    "GIT_AUTHOR_NAME": "Loopwork eval",
    "GIT_AUTHOR_EMAIL": "eval@localhost",
    "GIT_COMMITTER_NAME": "Loopwork eval",
    "GIT_COMMITTER_EMAIL": "eval@localhost",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
}


def load_harness(path: Path) -> Harness:
    harness = validated(
        Harness, read(path, "harness", "name, agent, budget, instructions"), str(path)
    )
    folder = path.resolve().parent
    update: dict[str, object] = {"agent": _here(harness.agent, folder)}
    if isinstance(harness.candidates, list):
        update["candidates"] = [
            c.model_copy(update={"agent": _here(c.agent, folder)}) for c in harness.candidates
        ]
    return harness.model_copy(update=update)


def _here(agent: AgentSpec, folder: Path) -> AgentSpec:
    """Scripts named next to the harness file run from anywhere."""
    command = agent.command
    if not command:
        return agent
    resolved = [str(folder / a) if (folder / a).is_file() else a for a in command]
    return agent.model_copy(update={"command": resolved})


def load_suite(path: Path, home: Path) -> Suite:
    suite = validated(Suite, read(path, "suite", "name, cases"), str(path))
    folder = path.resolve().parent
    cases = []
    for case in suite.cases:
        if case.source is not None:
            repo, commit = snapshot(folder / case.source, home / "eval" / suite.name / case.id)
        else:
            assert case.repo is not None and case.commit is not None
            repo, commit = str((folder / case.repo).resolve()), case.commit
        spec = validated(
            TaskSpec,
            {
                "id": case.id,
                "goal": case.goal,
                "repo": repo,
                "base": commit,
                "agent": {"command": ["true"]},
                "verify": [g.model_dump() for g in case.verify],
            },
            f"{path}: case {case.id}",
        )
        resolved = resolve(spec, folder, f"{path}: case {case.id}")
        update = {"repo": resolved.repo, "commit": commit, "source": None}
        cases.append(case.model_copy(update=update | {"verify": resolved.verify}))
    return suite.model_copy(update={"cases": cases})


def _git(repo: Path, *args: str) -> str:
    done = git.run_sync(list(args), repo, allow=PINNED)
    if done.code != 0:
        raise TaskFileError(f"git {args[0]} in {repo} failed: {done.err.strip()}")
    return done.text.strip()


def snapshot(source: Path, repo: Path) -> tuple[str, str]:
    """A repository holding exactly ``source``, at a commit that depends only on its files."""
    if not source.is_dir():
        raise TaskFileError(f"case source {source} is not a folder")
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q", "-b", "main")
    for item in repo.iterdir():
        if item.name != ".git":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    shutil.copytree(source, repo, dirs_exist_ok=True)
    _git(repo, "add", "-A")
    tree = _git(repo, "write-tree")
    commit = _git(repo, "commit-tree", tree, "-m", f"eval case {source.name}")
    _git(repo, "update-ref", f"refs/eval/{commit}", commit)
    _git(repo, "reset", "-q", "--hard", commit)
    return str(repo.resolve()), commit
