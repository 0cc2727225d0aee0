"""The openai backend's tools and the ``tool_step`` activity, on a real git worktree.

The ``run`` tool's commands run in the sandbox: those tests are in tests/e2e/test_tools.py.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.host.toolbox import (
    TOOL_SCHEMAS,
    PolicyViolation,
    ToolError,
    calls,
    command_words,
    resolve_path,
)
from activities.host.toolbox.confine import read_bytes, write_bytes
from activities.tools import ToolActivities
from loop.contracts import ToolCallRef, ToolPolicy
from loop.settings import Settings
from tests.support.tools import (
    APP,
    TEST,
    Attempt,
    assert_tool_error,
    assert_violation,
    call,
    fail_artifact_writes,
    make_worktree,
)


@pytest.fixture
def wt(tmp_path: Path) -> Path:
    """A worktree of a small repository: tracked, untracked and ignored files."""
    return make_worktree(tmp_path)


@pytest.fixture
def attempt(tmp_path: Path, wt: Path) -> Attempt:
    return Attempt(tmp_path, wt)


@pytest.fixture
def acts(tmp_path: Path) -> ToolActivities:
    return ToolActivities(Settings(home=tmp_path / "home"))


# --------------------------------------------------------------------------- schemas


def test_schemas_name_every_tool_and_require_known_arguments() -> None:
    names = [s["function"]["name"] for s in TOOL_SCHEMAS]
    assert names == [
        "list_files",
        "read_file",
        "search",
        "write_file",
        "edit_file",
        "run",
        "finish",
    ]
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function"
        fn = schema["function"]
        assert len(fn["description"]) > 40
        params = fn["parameters"]
        assert set(params["required"]) <= set(params["properties"])
        json.dumps(schema)  # what the API receives


# --------------------------------------------------------------------------- list / read / search


async def test_list_files_shows_tracked_and_untracked_not_ignored(wt: Path) -> None:
    out = await call(wt, "list_files", {})
    assert out.ok
    lines = out.text.splitlines()[1:]
    assert lines == [".gitignore", "README.md", "notes.txt", "src/app.py", "tests/test_app.py"]

    sub = await call(wt, "list_files", {"path": "src"})
    assert sub.text.splitlines()[1:] == ["src/app.py"]
    assert_tool_error(await call(wt, "list_files", {"path": "nope"}), "no such directory")


async def test_list_files_is_bounded(wt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "MAX_LIST_FILES", 2)
    out = await call(wt, "list_files", {})
    assert out.text.splitlines()[1:3] == [".gitignore", "README.md"]
    assert "[3 more not shown; list a subdirectory]" in out.text


async def test_read_file_numbers_lines_and_reads_ranges(wt: Path) -> None:
    whole = await call(wt, "read_file", {"path": "src/app.py"})
    assert whole.ok
    assert whole.text.splitlines()[0] == "src/app.py (lines 1-6 of 6)"
    assert whole.text.splitlines()[1] == "1 | def add(a, b):"

    part = await call(wt, "read_file", {"path": "src/app.py", "start_line": 5, "end_line": 6})
    assert part.text.splitlines() == [
        "src/app.py (lines 5-6 of 6)",
        "5 | def sub(a, b):",
        "6 |     return a - b",
    ]
    clamped = await call(wt, "read_file", {"path": "src/app.py", "start_line": 6, "end_line": 99})
    assert clamped.text.splitlines()[1:] == ["6 |     return a - b"]

    assert_tool_error(
        await call(wt, "read_file", {"path": "src/app.py", "start_line": 7}), "has 6 line(s)"
    )
    assert_tool_error(
        await call(wt, "read_file", {"path": "src/app.py", "start_line": 3, "end_line": 2}),
        "after end_line",
    )
    assert_tool_error(await call(wt, "read_file", {"path": "src/nope.py"}), "no such file")
    assert_tool_error(await call(wt, "read_file", {"path": "src"}), "is a directory")


async def test_search_reports_path_line_text(wt: Path) -> None:
    out = await call(wt, "search", {"pattern": r"def \w+\(a"})
    assert out.ok
    assert out.text.splitlines() == ["src/app.py:1: def add(a, b):", "src/app.py:5: def sub(a, b):"]

    scoped = await call(wt, "search", {"pattern": "add", "path": "tests"})
    assert scoped.text.splitlines() == [
        "tests/test_app.py:1: from src.app import add",
        "tests/test_app.py:4: def test_add():",
        "tests/test_app.py:5:     assert add(1, 2) == 3",
    ]
    # untracked files are searched, ignored and binary ones are not
    (wt / "blob.bin").write_bytes(b"output\x00\x01")
    assert (await call(wt, "search", {"pattern": "output|note"})).text.splitlines() == [
        "notes.txt:1: an untracked note"
    ]
    assert "no match" in (await call(wt, "search", {"pattern": "zzz"})).text
    assert_tool_error(await call(wt, "search", {"pattern": "(unclosed"}), "invalid regular")


async def test_search_is_bounded(wt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "MAX_SEARCH_MATCHES", 3)
    (wt / "many.txt").write_text("hit\n" * 10)
    out = await call(wt, "search", {"pattern": "hit", "path": "many.txt"})
    assert out.text.splitlines()[:3] == ["many.txt:1: hit", "many.txt:2: hit", "many.txt:3: hit"]
    assert "more than 3 matches" in out.text


# --------------------------------------------------------------------------- write / edit


async def test_write_then_read(wt: Path) -> None:
    out = await call(wt, "write_file", {"path": "pkg/new.py", "content": "x = 1\ny = 2\n"})
    assert out.ok and out.text.startswith("created pkg/new.py")
    assert (wt / "pkg" / "new.py").read_text() == "x = 1\ny = 2\n"
    back = await call(wt, "read_file", {"path": "pkg/new.py"})
    assert back.text.splitlines()[1:] == ["1 | x = 1", "2 | y = 2"]

    script = wt / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    again = await call(wt, "write_file", {"path": "run.sh", "content": "#!/bin/sh\necho hi\n"})
    assert again.text.startswith("overwrote run.sh")
    assert script.read_text() == "#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert not [p for p in wt.iterdir() if ".tmp" in p.name]  # no temporary file left


async def test_edit_file_absent_ambiguous_exact(wt: Path) -> None:
    app = wt / "src" / "app.py"
    absent = await call(wt, "edit_file", {"path": "src/app.py", "old": "def mul(", "new": "x"})
    assert_tool_error(absent, "not found in src/app.py", "Nothing was changed")

    twice = await call(wt, "edit_file", {"path": "src/app.py", "old": "(a, b):", "new": "(a):"})
    assert_tool_error(twice, "appears 2 times in src/app.py")
    assert app.read_text() == APP

    exact = await call(
        wt, "edit_file", {"path": "src/app.py", "old": "return a - b", "new": "return b - a"}
    )
    assert exact.ok, exact.text
    assert "line 6" in exact.text
    assert app.read_text() == APP.replace("return a - b", "return b - a")
    assert_tool_error(
        await call(wt, "edit_file", {"path": "src/app.py", "old": "", "new": "x"}), "empty"
    )


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "path", ["../x", "/etc/passwd", ".git/config", "sub/.git/x", "/proc/self/environ", "a/../b"]
)
async def test_paths_outside_or_into_git_are_policy_violations(wt: Path, path: str) -> None:
    assert_violation(await call(wt, "read_file", {"path": path}), path)
    assert_violation(await call(wt, "write_file", {"path": path, "content": "x"}), path)


async def test_escaping_writes_do_not_happen(wt: Path) -> None:
    out = await call(wt, "write_file", {"path": "../escaped.txt", "content": "x"})
    assert out.policy_violation
    assert not (wt.parent / "escaped.txt").exists()


async def test_symlink_to_etc_is_refused(wt: Path) -> None:
    (wt / "etc").symlink_to("/etc")
    assert_violation(await call(wt, "read_file", {"path": "etc/passwd"}), "etc/passwd")
    assert_violation(await call(wt, "list_files", {"path": "etc"}), "etc")
    assert_violation(await call(wt, "search", {"pattern": "root", "path": "etc"}), "etc")


async def test_symlink_to_a_file_outside_is_refused(wt: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    (wt / "link.txt").symlink_to(secret)
    read = await call(wt, "read_file", {"path": "link.txt"})
    assert_violation(read, "link.txt")
    assert "secret\n" not in read.text
    assert_violation(await call(wt, "write_file", {"path": "link.txt", "content": "x"}), "link.txt")
    assert secret.read_text() == "secret\n"


async def test_symlink_inside_the_worktree_is_followed(wt: Path) -> None:
    (wt / "alias.py").symlink_to("src/app.py")
    out = await call(wt, "read_file", {"path": "alias.py"})
    assert out.ok and "1 | def add(a, b):" in out.text


def test_a_symlink_swapped_in_after_the_check_is_not_followed(wt: Path, tmp_path: Path) -> None:
    (wt / "sub").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    checked = resolve_path(wt, "sub/f.txt", write=True, protected=[])
    assert checked == wt.resolve() / "sub" / "f.txt"
    (wt / "sub").rmdir()
    (wt / "sub").symlink_to(outside)  # the race: a link replaces the folder after the check
    with pytest.raises((ToolError, PolicyViolation)):
        write_bytes(wt.resolve(), checked, "sub/f.txt", b"x")
    with pytest.raises((ToolError, PolicyViolation)):
        read_bytes(wt.resolve(), checked, "sub/f.txt")
    assert list(outside.iterdir()) == []


async def test_protected_paths_can_be_read_not_written(wt: Path) -> None:
    protected = ["tests/**"]
    test_file = wt / "tests" / "test_app.py"
    read = await call(wt, "read_file", {"path": "tests/test_app.py"}, protected=protected)
    assert read.ok and "assert add(1, 2) == 3" in read.text

    write = await call(
        wt, "write_file", {"path": "tests/test_app.py", "content": ""}, protected=protected
    )
    assert_violation(write, "tests/test_app.py")
    assert "tests/**" in write.policy_violation
    edit = await call(
        wt,
        "edit_file",
        {"path": "tests/test_app.py", "old": "== 3", "new": "== 4"},
        protected=protected,
    )
    assert_violation(edit, "tests/test_app.py")
    (wt / "alias.py").symlink_to("tests/test_app.py")
    via_link = await call(
        wt, "write_file", {"path": "alias.py", "content": ""}, protected=protected
    )
    assert_violation(via_link, "tests/test_app.py")
    assert test_file.read_text() == TEST

    other = await call(wt, "write_file", {"path": "src/ok.py", "content": ""}, protected=protected)
    assert other.ok


def test_resolve_path_raises_policy_violation() -> None:
    with pytest.raises(PolicyViolation, match="absolute"):
        resolve_path(Path("/tmp"), "/etc/passwd", write=False, protected=[])


# --------------------------------------------------------------------------- bad calls


async def test_bad_calls_are_tool_errors_not_violations(wt: Path) -> None:
    assert_tool_error(await call(wt, "read_file", '{"path": "src/app.py"'), "not valid JSON")
    assert_tool_error(await call(wt, "read_file", '["src/app.py"]'), "JSON object")
    assert_tool_error(await call(wt, "delete_everything", {}), "no tool named", "read_file")
    assert_tool_error(await call(wt, "read_file", {}), "needs the argument 'path'")
    assert_tool_error(await call(wt, "edit_file", {"path": "x", "old": "a"}), "'new'")
    assert_tool_error(await call(wt, "read_file", {"path": 3}), "must be a string")
    assert_tool_error(
        await call(wt, "read_file", {"path": "src/app.py", "start": 2}), "unknown argument"
    )


async def test_lenient_where_models_often_are(wt: Path) -> None:
    # null for an optional argument, an integer as a string, empty arguments for defaults
    out = await call(wt, "read_file", {"path": "src/app.py", "start_line": "6", "end_line": None})
    assert out.text.splitlines()[1:] == ["6 |     return a - b"]
    assert (await call(wt, "list_files", "")).ok


# --------------------------------------------------------------------------- run: refused commands


def test_command_words() -> None:
    assert command_words("FOO=1 BAR=2 pytest -q 2>&1 | tail -5") == ["pytest", "tail"]
    assert command_words("echo a#; rm x") == ["echo", "rm"]
    assert command_words("cat <(rm x) > out && ls\nwhoami") == ["cat", "rm", "ls", "whoami"]


@pytest.mark.parametrize(
    "command", ["rm -f README.md", "X=1 rm -f README.md", "echo a; /bin/rm -f README.md"]
)
async def test_run_deny_list(wt: Path, command: str) -> None:
    policy = ToolPolicy(run_deny=["rm"])
    assert_tool_error(await call(wt, "run", {"command": command}, policy=policy), "refused")
    assert (wt / "README.md").exists()


# --------------------------------------------------------------------------- finish


async def test_finish(wt: Path) -> None:
    out = await call(wt, "finish", {"answer": "fixed add; pytest passes"})
    assert out.ok and out.finished
    assert out.answer == "fixed add; pytest passes"


# --------------------------------------------------------------------------- tool_step


async def test_tool_step_stores_the_tool_message(attempt: Attempt, acts: ToolActivities) -> None:
    refs = attempt.model_step(
        3,
        ("read_file", {"path": "README.md"}),
        ("read_file", {"path": "src/app.py", "start_line": 5}),
    )
    result = await acts.tool_step(attempt.input(3, refs[1]))
    path = attempt.dir / "step-0003.tool-1.json"
    assert result.artifact == str(path)
    stored = json.loads(path.read_text())
    message = stored["message"]
    assert message["role"] == "tool"
    assert message["tool_call_id"] == "call_3_1"
    assert message["content"].splitlines()[1] == "5 | def sub(a, b):"  # call 1's arguments
    assert stored["result"] == result.model_dump(mode="json")
    assert result.output_chars == len(message["content"])
    assert "def sub" not in result.model_dump_json()  # the text stays out of history
    assert not (attempt.dir / "step-0003.tool-0.json").exists()


async def test_tool_step_reports_a_policy_violation(attempt: Attempt, acts: ToolActivities) -> None:
    (ref,) = attempt.model_step(1, ("write_file", {"path": "tests/test_app.py", "content": ""}))
    result = await acts.tool_step(attempt.input(1, ref, protected=["tests/"]))
    assert not result.ok
    assert "tests/test_app.py" in result.policy_violation
    assert (attempt.wt / "tests" / "test_app.py").read_text() == TEST
    stored = json.loads(Path(result.artifact).read_text())
    assert stored["message"]["content"].startswith("error: refused, policy violation")


async def test_tool_step_finish(attempt: Attempt, acts: ToolActivities) -> None:
    (ref,) = attempt.model_step(2, ("finish", {"answer": "done: 3 tests pass"}))
    result = await acts.tool_step(attempt.input(2, ref))
    assert result.finished and result.answer == "done: 3 tests pass"


async def test_a_retried_edit_is_not_applied_twice(
    attempt: Attempt, acts: ToolActivities, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `old` is still in the file after the edit: a blind retry would apply it again.
    edit = {"path": "src/app.py", "old": "return a + b", "new": "return a + b  # checked"}
    (ref,) = attempt.model_step(1, ("edit_file", edit))
    with monkeypatch.context() as m:
        fail_artifact_writes(m)
        with pytest.raises(OSError, match="worker killed"):
            await acts.tool_step(attempt.input(1, ref))
    retried = await acts.tool_step(attempt.input(1, ref))
    assert retried.ok
    assert (attempt.wt / "src" / "app.py").read_text().count("# checked") == 1


async def test_tool_step_without_its_model_artifact_is_permanent(
    attempt: Attempt, acts: ToolActivities
) -> None:
    ref = ToolCallRef(index=0, id="call_9_0", name="run")
    with pytest.raises(ApplicationError) as info:
        await acts.tool_step(attempt.input(9, ref))
    assert info.value.non_retryable
    assert "step-0009.model.json" in str(info.value)


async def test_a_runaway_regex_is_stopped(wt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "SEARCH_TIMEOUT_S", 1.0)
    (wt / "aaa.txt").write_text("a" * 64 + "!\n")
    started = time.monotonic()
    out = await call(wt, "search", {"pattern": "^(a+)+$", "path": "aaa.txt"})
    assert time.monotonic() - started < 8
    assert_tool_error(out, "search timed out")
