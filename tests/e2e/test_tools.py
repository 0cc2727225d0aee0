"""The ``run`` tool: model commands run in the task's sandbox, through ``execute`` and
the ``tool_step`` activity. The tools that run no command are in tests/unit/test_tools.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from activities.tools import ToolActivities
from loop.contracts import ToolPolicy
from loop.settings import Settings
from tests.support.tools import (
    Attempt,
    assert_tool_error,
    call,
    fail_artifact_writes,
    make_worktree,
)


@pytest.fixture
def wt(tmp_path: Path) -> Path:
    return make_worktree(tmp_path)


@pytest.fixture
def attempt(tmp_path: Path, wt: Path) -> Attempt:
    return Attempt(tmp_path, wt)


@pytest.fixture
def acts(tmp_path: Path) -> ToolActivities:
    return ToolActivities(Settings(home=tmp_path / "home"))


# --------------------------------------------------------------------------- run


async def test_run_reports_exit_code_and_output(wt: Path) -> None:
    out = await call(wt, "run", {"command": "echo hello && cat README.md"})
    assert out.ok
    assert out.text == "exit code 0\nhello\n# demo\n"


async def test_run_non_zero_exit_is_reported(wt: Path) -> None:
    out = await call(wt, "run", {"command": "echo boom >&2; exit 3"})
    assert_tool_error(out, "boom")
    assert out.error == "error: exit code 3"


async def test_run_allow_list(wt: Path) -> None:
    policy = ToolPolicy(run_allow=["echo", "git"])
    ok = await call(wt, "run", {"command": "echo allowed"}, policy=policy)
    assert ok.ok and "allowed" in ok.text
    assert_tool_error(
        await call(wt, "run", {"command": "touch made.txt"}, policy=policy), "`touch`", "echo, git"
    )
    assert_tool_error(
        await call(wt, "run", {"command": "echo a && touch made.txt"}, policy=policy), "`touch`"
    )
    assert not (wt / "made.txt").exists()


async def test_run_timeout(wt: Path) -> None:
    started = time.monotonic()
    out = await call(wt, "run", {"command": "sleep 30"}, policy=ToolPolicy(run_timeout=1))
    assert time.monotonic() - started < 10
    assert_tool_error(out, "timed out after 1 s")


async def test_run_env_hides_loop_variables(wt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_SECRET_THING", "hidden")
    out = await call(wt, "run", {"command": "env"})
    assert "LOOP_SECRET_THING" not in out.text
    assert "PYTHONDONTWRITEBYTECODE=1" in out.text


async def test_long_output_is_cut_with_a_note(wt: Path) -> None:
    policy = ToolPolicy(output_limit=256)
    printed = await call(
        wt, "run", {"command": f"{sys.executable} -c \"print('x' * 999 + 'END')\""}, policy=policy
    )
    assert printed.ok
    assert printed.text.endswith("[output cut: 1003 characters, showing the last 256]")
    assert "END" in printed.text  # the end of a command's output is what tells
    assert len(printed.text) < 256 + 100

    (wt / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 200)))
    read = await call(wt, "read_file", {"path": "long.txt"}, policy=policy)
    assert "1 | line 1" in read.text
    assert read.text.splitlines()[-1].startswith("[output cut: ")
    assert "showing the first 256; read further with start_line]" in read.text


# --------------------------------------------------------------------------- tool_step


async def test_tool_step_runs_once(attempt: Attempt, acts: ToolActivities) -> None:
    (ref,) = attempt.model_step(1, ("run", {"command": "echo ran >> counter.txt; echo done"}))
    first = await acts.tool_step(attempt.input(1, ref))
    second = await acts.tool_step(attempt.input(1, ref))
    assert (attempt.wt / "counter.txt").read_text() == "ran\n"
    assert first == second
    assert first.ok and first.name == "run"
    # logs and notes stay out of the step-NNNN.* names the conversation is rebuilt from
    names = sorted(p.name for p in attempt.dir.iterdir())
    assert names == ["step-0001.model.json", "step-0001.tool-0.json", "tool-logs"]


async def test_a_retried_run_is_not_started_again(
    attempt: Attempt, acts: ToolActivities, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ref,) = attempt.model_step(1, ("run", {"command": "echo ran >> counter.txt"}))
    with monkeypatch.context() as m:
        fail_artifact_writes(m)
        with pytest.raises(OSError, match="worker killed"):
            await acts.tool_step(attempt.input(1, ref))
    retried = await acts.tool_step(attempt.input(1, ref))
    assert (attempt.wt / "counter.txt").read_text() == "ran\n"
    assert not retried.ok
    stored = json.loads(Path(retried.artifact).read_text())
    assert "not started again" in stored["message"]["content"]
