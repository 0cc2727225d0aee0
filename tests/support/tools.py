"""The openai backend's toolbox for tests: a small worktree, calling a tool, a tool step's
attempt folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import activities.tools as tool_activities
from activities.host.toolbox import ToolOutcome, execute
from loop.contracts import ToolCallRef, ToolPolicy, ToolStepInput, Workspace
from tests.support.repos import git

APP = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST = "from src.app import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def make_worktree(tmp_path: Path) -> Path:
    """A worktree of a small repository: tracked, untracked and ignored files."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "app.py").write_text(APP)
    (repo / "tests" / "test_app.py").write_text(TEST)
    (repo / "README.md").write_text("# demo\n")
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    path = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "loop/t", str(path))
    (path / "notes.txt").write_text("an untracked note\n")
    (path / "build").mkdir()
    (path / "build" / "out.txt").write_text("ignored output\n")
    return path


async def call(
    wt: Path,
    name: str,
    args: dict | str,
    *,
    policy: ToolPolicy | None = None,
    protected: list[str] | None = None,
) -> ToolOutcome:
    """Run tool ``name`` with ``args`` (a dict, or raw JSON text) in the worktree ``wt``."""
    arguments = args if isinstance(args, str) else json.dumps(args)
    return await execute(
        name, arguments, wt, policy or ToolPolicy(), protected or [], wt.parent / "logs"
    )


def assert_tool_error(out: ToolOutcome, *needles: str) -> None:
    """The call failed as a tool error (the model may try again), not a policy violation."""
    assert not out.ok
    assert not out.policy_violation
    assert out.error.startswith("error:")
    assert out.text.startswith("error:")
    for needle in needles:
        assert needle in out.text, out.text


def assert_violation(out: ToolOutcome, path: str) -> None:
    """The call was refused as a policy violation about ``path``, in one line."""
    assert not out.ok
    assert path in out.policy_violation, out.policy_violation
    assert "\n" not in out.policy_violation
    assert out.text.startswith("error:")


class Attempt:
    """An attempt folder with model artifacts, and ToolStepInputs that point into it."""

    def __init__(self, tmp_path: Path, wt: Path) -> None:
        self.dir = tmp_path / "run" / "attempt-1"
        self.dir.mkdir(parents=True)
        self.wt = wt
        self.ws = Workspace(
            task_id="t",
            repo=str(tmp_path / "repo"),
            path=str(wt),
            branch="loop/t",
            base_ref="main",
            base_commit="0" * 40,
            run_dir=str(tmp_path / "run"),
        )

    def model_step(self, step: int, *calls: tuple[str, dict]) -> list[ToolCallRef]:
        tool_calls = [
            {
                "id": f"call_{step}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ]
        message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
        (self.dir / f"step-{step:04d}.model.json").write_text(json.dumps({"message": message}))
        return [
            ToolCallRef(index=i, id=c["id"], name=c["function"]["name"])
            for i, c in enumerate(tool_calls)
        ]

    def input(self, step: int, ref: ToolCallRef, **kw: object) -> ToolStepInput:
        return ToolStepInput(
            task_id="t",
            attempt=1,
            step=step,
            call=ref,
            attempt_dir=str(self.dir),
            workspace=self.ws,
            policy=kw.get("policy", ToolPolicy()),  # type: ignore[arg-type]
            protected=kw.get("protected", []),  # type: ignore[arg-type]
        )


def fail_artifact_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker 'dies' after the tool ran, before its artifact is written."""
    real = tool_activities.write_atomic

    def flaky(path: Path, text: str) -> None:
        if path.name.endswith(".pending.json"):
            return real(path, text)
        raise OSError("worker killed")

    monkeypatch.setattr(tool_activities, "write_atomic", flaky)
