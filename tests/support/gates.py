"""A repository for gate tests: a base commit, and commits that play an agent's attempt."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

from activities.gates import Bench, Judging, Ran, run_command
from loop.contracts import AgentSpec, Gate, MakeResult, RunGate, SandboxPolicy, TaskSpec, Workspace
from tests.support.repos import git

APP = "def add(a, b):\n    return a + b\n"
TESTS = """\
from src.app import add


def test_one():
    assert add(1, 2) == 3


def test_two():
    assert add(2, 2) == 4
"""


class GateRepo:
    """A repository with a base commit; ``agent_commit`` plays the agent's attempt."""

    def __init__(self, root: Path) -> None:
        self.path = root / "repo"
        self.run_dir = root / "run"
        self.home = root / "home"
        self._policy = SandboxPolicy()
        self.path.mkdir(parents=True)
        self.run_dir.mkdir()
        git(self.path, "init", "-q", "-b", "main")
        self.write({"src/app.py": APP, "tests/test_app.py": TESTS})
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--no-verify", "-m", "base")
        self.base = git(self.path, "rev-parse", "HEAD")

    def write(self, files: dict[str, str | None]) -> None:
        for rel, text in files.items():
            target = self.path / rel
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)

    @property
    def workspace(self) -> Workspace:
        return Workspace(
            task_id="t",
            repo=str(self.path),
            path=str(self.path),
            branch="loop/t",
            base_ref="main",
            base_commit=self.base,
            run_dir=str(self.run_dir),
        )

    @property
    def bench(self) -> Bench:
        """Where its gates run: the repository itself here (verify uses a clean checkout)."""
        return Bench(tree=self.path, log_dir=self.run_dir, home=self.home)

    def task(self, *gates: Gate, sandbox: SandboxPolicy | None = None) -> TaskSpec:
        return TaskSpec(
            id="t",
            goal="make it so",
            repo=str(self.path),
            agent=AgentSpec(command=["true"]),
            verify=list(gates) or [RunGate(name="noop", run="true")],
            sandbox=sandbox or SandboxPolicy(),
        )

    async def elsewhere(self, gate: Gate, commit: str, label: str) -> Ran:
        """A gate's command on a checkout of ``commit`` (as verify runs base and overlays)."""
        folder = self.run_dir / f"{label}-{uuid.uuid4().hex[:6]}"
        tree = folder / "tree"
        folder.mkdir(parents=True)
        git(self.path, "worktree", "add", "-q", "--detach", str(tree), commit)
        try:
            return await run_command(gate, self.workspace, tree, folder, self.home, self._policy)
        finally:
            with contextlib.suppress(Exception):
                git(self.path, "worktree", "remove", "--force", str(tree))

    def judging(
        self, make: MakeResult | None = None, *gates: Gate, sandbox: SandboxPolicy | None = None
    ) -> Judging:
        """One verdict's context on this repository: the gates judge ``make`` (default:
        base itself) in the repository's own tree."""
        task = self.task(*gates, sandbox=sandbox)
        self._policy = task.sandbox
        made = make or MakeResult(attempt=1, commit=self.base, start_commit=self.base)
        return Judging(task, self.workspace, made, self.bench, self.elsewhere)

    def agent_commit(self, files: dict[str, str | None], claim: str = "") -> MakeResult:
        self.write(files)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--no-verify", "--allow-empty", "-m", "wip")
        commit = git(self.path, "rev-parse", "HEAD")
        changed = git(self.path, "diff", "--name-only", self.base, commit).splitlines()
        return MakeResult(attempt=1, commit=commit, changed_files=changed, claim=claim)
