"""Task files: ``loop.loaders.load_task`` on real files and real git repositories.

Every bad case is a ``TaskFileError`` with a one-line message that names the field,
so ``loop start`` can print it and exit 2 before anything starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.contrib.pydantic import pydantic_data_converter

from loop.contracts import (
    MAX_GOAL_CHARS,
    ApproveSignal,
    Autonomy,
    ExtendBudgetSignal,
    FeedbackSignal,
    RejectSignal,
    TaskSpec,
)
from loop.errors import BadInput, TaskFileError
from loop.loaders import load_task as load
from tests.support.repos import git


def make_repo(path: Path, branch: str = "main") -> Path:
    """A real repository with one commit on ``branch``."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    (path / "app.py").write_text("x = 1\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def spec_dict(repo: Path | str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "fix-it",
        "goal": "x must be 2",
        "repo": str(repo),
        "agent": {"backend": "command", "command": [sys.executable, "agent.py"]},
        "verify": [{"name": "tests", "run": "true"}],
    }
    data.update(overrides)
    return data


def write(folder: Path, data: Any, name: str = "task.yaml") -> Path:
    file = folder / name
    file.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        file.write_text(data)
    elif name.endswith(".json"):
        file.write_text(json.dumps(data))
    else:
        file.write_text(yaml.safe_dump(data, sort_keys=False))
    return file


def load_error(file: Path) -> str:
    """The one-line message of the TaskFileError that loading ``file`` raises."""
    with pytest.raises(TaskFileError) as info:
        load(file)
    msg = str(info.value)
    assert msg.strip() and "\n" not in msg, f"message is not one line: {msg!r}"
    assert isinstance(info.value, BadInput)  # the CLI maps BadInput to exit 2
    return msg


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.update(verfy=d.pop("verify")), "verfy: unknown key; did you mean 'verify'?"),
        (lambda d: d.update(budget={"max_atempts": 3}),
         "budget.max_atempts: unknown key; did you mean 'max_attempts'?"),
        (lambda d: d["verify"][0].update(timout=3),
         "verify.0.timout: unknown key; did you mean 'timeout'?"),
        (lambda d: d["verify"].append({"name": "s", "diff_scope": {"alow": ["x"]}}),
         "verify.1.diff_scope.alow: unknown key; did you mean 'allow'?"),
        (lambda d: d["agent"].update(provider={"api": "openai", "key_evn": "K"}),
         "agent.provider.key_evn: unknown key; did you mean 'key_env'?"),
    ],
    ids=["top-level-typo", "budget", "run-gate", "scope-gate", "provider"],
)  # fmt: skip
def test_an_unknown_key_comes_first_with_the_key_it_is_closest_to(
    tmp_path: Path, repo: Path, change: Any, said: str
) -> None:
    """A top-level typo also makes ``verify`` missing: the typo is what is said, first."""
    data = spec_dict(repo)
    change(data)
    msg = load_error(write(tmp_path, data))
    assert said in msg.split(": ", 1)[1], msg


def test_an_unknown_key_close_to_nothing_names_no_key(tmp_path: Path, repo: Path) -> None:
    """The cheapest way to mislead: suggesting a key that is not close. None is named."""
    msg = load_error(write(tmp_path, spec_dict(repo, zzz=1)))
    assert "zzz: unknown key (check the spelling; see docs/reference/task-file.md)" in msg
    assert "did you mean" not in msg


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"zzz": 1}, "zzz", "unknown key"),
        ({"budget": {"max_attemps": 5}}, "budget.max_attemps", "unknown key"),
        ({"agent": {"command": ["python"], "comand": ["x"]}}, "agent.comand", "unknown key"),
        ({"goal": ""}, "goal", "at least 1"),
        ({"goal": "   \n  "}, "goal", "what must be true"),
        ({"goal": "g" * (MAX_GOAL_CHARS + 1)}, "goal", "at most 20000"),
        ({"id": "Fix-It"}, "id", "[a-z0-9]"),
        ({"id": "a" * 64}, "id", "[a-z0-9]"),
        ({"id": "-fix"}, "id", "[a-z0-9]"),
        ({"id": "fix it"}, "id", "[a-z0-9]"),
        ({"agent": {"backend": "command"}}, "agent", "command"),
        ({"agent": {"backend": "command", "command": []}}, "agent", "command"),
        ({"verify": []}, "verify", "at least 1"),
        ({"verify": [{"name": "g"}]}, "verify.0", "found: none"),
        (
            {"verify": [{"name": "g", "run": "true", "contains": ["x"]}]},
            "verify.0",
            "found: run, contains",
        ),
        (
            {"verify": [{"name": "g", "run": "true"}, {"name": "g", "no_removed_tests": True}]},
            "verify",
            "appears twice",
        ),
        ({"budget": {"max_attempts": "three"}}, "budget.max_attempts", "valid integer"),
        ({"budget": {"max_attempts": 0}}, "budget.max_attempts", "greater than or equal to 1"),
        (
            {"agent": {"command": ["python"], "timeout": -1}},
            "agent.timeout",
            "greater than or equal to 1",
        ),
        (
            {"verify": [{"name": "t", "run": "true", "timeout": -1}]},
            "verify.0.timeout",
            "greater than or equal to 1",
        ),
        ({"approval_timeout": 0}, "approval_timeout", "greater than or equal to 1"),
        ({"autonomy": "yolo"}, "autonomy", "report"),
        (
            {"verify": [{"name": "s", "diff_scope": {"allow": ["../outside/**"]}}]},
            "verify.0.diff_scope.allow",
            "relative to the repository root",
        ),
        (
            {"verify": [{"name": "s", "diff_scope": {"allow": ["src/../../x"]}}]},
            "verify.0.diff_scope.allow",
            "relative to the repository root",
        ),
        (
            {"verify": [{"name": "s", "diff_scope": {"protect": ["/etc/passwd"]}}]},
            "verify.0.diff_scope.protect",
            "relative to the repository root",
        ),
    ],
    ids=[
        "unknown-top-key",
        "unknown-nested-key",
        "unknown-agent-key",
        "empty-goal",
        "blank-goal",
        "enormous-goal",
        "id-uppercase",
        "id-too-long",
        "id-leading-dash",
        "id-space",
        "command-backend-without-command",
        "command-empty-argv",
        "verify-empty",
        "gate-no-kind",
        "gate-two-kinds",
        "duplicate-gate-names",
        "max-attempts-string",
        "max-attempts-zero",
        "agent-timeout-negative",
        "gate-timeout-negative",
        "approval-timeout-zero",
        "bad-autonomy",
        "glob-dotdot",
        "glob-dotdot-inside",
        "glob-absolute",
    ],
)
def test_invalid_field_names_the_field(
    tmp_path: Path, repo: Path, overrides: dict, field: str, words: str
) -> None:
    msg = load_error(write(tmp_path, spec_dict(repo, **overrides)))
    assert f"{field}: " in msg, msg
    assert words in msg, msg
    assert str(tmp_path / "task.yaml") in msg  # says which file


@pytest.mark.parametrize("missing", ["goal", "id", "repo", "agent", "verify"])
def test_missing_required_field(tmp_path: Path, repo: Path, missing: str) -> None:
    data = spec_dict(repo)
    del data[missing]
    msg = load_error(write(tmp_path, data))
    assert f"{missing}: required field is missing" in msg


def test_several_problems_still_one_line(tmp_path: Path, repo: Path) -> None:
    msg = load_error(write(tmp_path, spec_dict(repo, id="BAD", zzz=1, verify=[])))
    assert "more problem" in msg


def test_repo_that_does_not_exist(tmp_path: Path) -> None:
    msg = load_error(write(tmp_path, spec_dict(tmp_path / "nowhere")))
    assert "repo: " in msg and "does not exist" in msg and "nowhere" in msg


def test_repo_that_is_not_git(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    msg = load_error(write(tmp_path, spec_dict(plain)))
    assert "repo: " in msg and "not a git repository" in msg


def test_bare_repo(tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    msg = load_error(write(tmp_path, spec_dict(bare)))
    assert "repo: " in msg
    assert "bare repository" in msg, msg


def test_repo_with_no_commits(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    file = write(tmp_path, spec_dict(empty))
    msg = load_error(file)
    assert msg == f"{file}: repo: {empty.resolve()} has no commits yet; commit first"


def test_base_that_does_not_exist(tmp_path: Path, repo: Path) -> None:
    msg = load_error(write(tmp_path, spec_dict(repo, base="no-such-branch")))
    assert "base: " in msg and "'no-such-branch'" in msg and "not a branch or commit" in msg


def test_agent_command_not_findable(tmp_path: Path, repo: Path) -> None:
    data = spec_dict(repo, agent={"command": ["no-such-agent-cli-4711", "--go"]})
    msg = load_error(write(tmp_path, data))
    assert "agent.command runs 'no-such-agent-cli-4711', which is not on PATH" in msg


def test_agent_command_checks_each_program_of_a_shell_line(tmp_path: Path, repo: Path) -> None:
    """The agent guides' `sh -c "claude …"` form: `sh` exists, the agent it runs may not."""
    line = 'cd . && no-such-agent-cli-4712 -p "$(cat "$LOOP_PROMPT_FILE")" > /dev/null'
    data = spec_dict(repo, agent={"command": ["sh", "-c", line]})
    msg = load_error(write(tmp_path, data))
    assert "agent.command runs 'no-such-agent-cli-4712', which is not on PATH" in msg
    data = spec_dict(repo, agent={"command": ["sh", "-c", 'cat "$LOOP_PROMPT_FILE" > /dev/null']})
    load(write(tmp_path, data, name="fine.yaml"))  # every program exists: no error


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    file = write(tmp_path, "id: x\ngoal: fine\nrepo: [unclosed\nagent: {}\n")
    msg = load_error(file)
    assert "not valid YAML" in msg
    assert "line " in msg
    line = int(msg.split("line ")[1].split(":")[0])
    assert 3 <= line <= 5, msg


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    file = write(tmp_path, '{\n  "id": "x",\n  "goal": \n}\n', name="task.json")
    msg = load_error(file)
    assert "not valid JSON" in msg and "line 4" in msg


@pytest.mark.parametrize("text", ["- id: x\n- goal: y\n", "just a string\n", ""])
def test_yaml_that_is_not_a_mapping(tmp_path: Path, text: str) -> None:
    msg = load_error(write(tmp_path, text))
    assert "mapping" in msg


def test_missing_file(tmp_path: Path) -> None:
    msg = load_error(tmp_path / "nope.yaml")
    assert "not found" in msg and "nope.yaml" in msg


def test_a_directory_is_not_a_task_file(tmp_path: Path) -> None:
    msg = load_error(tmp_path)
    assert "not found" in msg


# --------------------------------------------------------------------------- good input


def test_relative_repo_is_relative_to_the_task_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "project" / "repo")
    file = write(tmp_path / "project" / "tasks", spec_dict("../repo"))
    elsewhere = tmp_path / "elsewhere"
    make_repo(elsewhere / "tasks" / ".." / "repo")  # a decoy the cwd would resolve to
    monkeypatch.chdir(elsewhere / "tasks")
    spec = load(file)
    assert Path(spec.repo) == repo.resolve()
    assert Path(spec.repo).is_absolute()


def test_relative_task_file_path_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo")
    write(tmp_path / "tasks", spec_dict("../repo"))
    monkeypatch.chdir(tmp_path)
    assert Path(load("tasks/task.yaml").repo) == repo.resolve()


def test_subfolder_of_repo_resolves_to_top_level(tmp_path: Path, repo: Path) -> None:
    (repo / "src").mkdir()
    spec = load(write(tmp_path, spec_dict(repo / "src")))
    assert Path(spec.repo) == repo.resolve()


def test_base_defaults_to_current_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", branch="trunk")
    git(repo, "checkout", "-q", "-b", "feature")
    spec = load(write(tmp_path, spec_dict(repo)))
    assert spec.base == "feature"


def test_detached_head_defaults_to_the_commit(tmp_path: Path, repo: Path) -> None:
    sha = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "--detach")
    spec = load(write(tmp_path, spec_dict(repo)))
    assert spec.base == sha


def test_explicit_commit_as_base(tmp_path: Path, repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    (repo / "app.py").write_text("x = 2\n")
    git(repo, "commit", "-q", "-am", "second")
    spec = load(write(tmp_path, spec_dict(repo, base=first)))
    assert spec.base == first
    short = load(write(tmp_path, spec_dict(repo, base=first[:10]), name="short.yaml"))
    assert short.base == first[:10]


def test_explicit_branch_as_base(tmp_path: Path, repo: Path) -> None:
    git(repo, "branch", "other")
    assert load(write(tmp_path, spec_dict(repo, base="other"))).base == "other"


def test_json_task_file(tmp_path: Path, repo: Path) -> None:
    spec = load(write(tmp_path, spec_dict(repo, autonomy="assisted"), name="task.json"))
    assert spec.id == "fix-it"
    assert spec.autonomy == Autonomy.ASSISTED
    assert spec.base == "main"


def test_agent_command_found_in_the_repo(tmp_path: Path, repo: Path) -> None:
    (repo / "agent.sh").write_text("#!/bin/sh\n")
    spec = load(write(tmp_path, spec_dict(repo, agent={"command": ["agent.sh"]})))
    assert spec.agent.command == ["agent.sh"]


def test_agent_command_on_path(tmp_path: Path, repo: Path) -> None:
    spec = load(write(tmp_path, spec_dict(repo, agent={"command": ["sh", "-c", "true"]})))
    assert spec.agent.command == ["sh", "-c", "true"]


def test_defaults(tmp_path: Path, repo: Path) -> None:
    spec = load(write(tmp_path, spec_dict(repo)))
    assert spec.autonomy == Autonomy.REPORT
    assert spec.budget.max_attempts == 3
    assert spec.budget.max_stalled_attempts == 2
    assert spec.approval_timeout == 86_400
    assert spec.agent.backend == "command"
    assert spec.budget.max_seconds is None and spec.budget.max_tokens is None
    assert spec.verify[0].kind == "run" and spec.verify[0].timeout == 300


@pytest.mark.parametrize("limit", ["max_tokens", "max_cost_usd"])
def test_a_budget_a_command_agent_cannot_report_is_refused(
    tmp_path: Path, repo: Path, limit: str
) -> None:
    data = spec_dict(repo, budget={limit: 5})
    msg = load_error(write(tmp_path, data))
    assert f"budget.{limit}: this command agent reports no usage" in msg
    assert "agent.usage: file" in msg


def test_a_known_agent_cli_reports_its_usage(tmp_path: Path, repo: Path) -> None:
    """Claude Code, aider and Codex say what they spent: their budgets are accepted."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\n")
    (bin_dir / "claude").chmod(0o755)
    line = f'{bin_dir}/claude -p "$(cat "$LOOP_PROMPT_FILE")" --output-format stream-json'
    data = spec_dict(repo, agent={"command": ["sh", "-c", line]}, budget={"max_cost_usd": 1})
    assert load(write(tmp_path, data)).budget.max_cost_usd == 1


def test_goal_of_exactly_the_maximum_length(tmp_path: Path, repo: Path) -> None:
    spec = load(write(tmp_path, spec_dict(repo, goal="g" * MAX_GOAL_CHARS)))
    assert len(spec.goal) == MAX_GOAL_CHARS


def test_full_example_loads(tmp_path: Path, repo: Path) -> None:
    data = spec_dict(
        repo,
        base="main",
        verify=[
            {"name": "tests", "run": "python -m pytest -q", "timeout": 30},
            {
                "name": "scope",
                "diff_scope": {"allow": ["src/**", "tests/**"], "protect": ["tests/test_x.py"]},
            },
            {"name": "keep-tests", "no_removed_tests": True},
            {"name": "answer", "contains": ["Flask", "Django"]},
        ],
        budget={
            "max_attempts": 5,
            "max_seconds": 1800,
            "max_tokens": 200000,
            "max_cost_usd": 2.0,
            "max_tool_calls": 200,
            "max_stalled_attempts": 3,
        },
        autonomy="unattended",
        approval_timeout=600,
        agent={"command": [sys.executable, "agent.py"], "usage": "file"},
    )
    spec = load(write(tmp_path, data))
    assert [g.kind for g in spec.verify] == ["run", "diff_scope", "no_removed_tests", "contains"]
    assert spec.protected_paths() == ["tests/test_x.py"]
    assert spec.budget.max_cost_usd == 2.0 and spec.approval_timeout == 600


# --------------------------------------------------------------------------- wire


def test_taskspec_round_trip_through_the_data_converter(tmp_path: Path, repo: Path) -> None:
    spec = load(
        write(
            tmp_path,
            spec_dict(
                repo,
                verify=[
                    {"name": "tests", "run": "true", "timeout": 7},
                    {"name": "scope", "diff_scope": {"allow": ["src/**"], "protect": ["t.py"]}},
                    {"name": "keep", "no_removed_tests": True},
                    {"name": "answer", "contains": ["ok"]},
                ],
                budget={"max_attempts": 4, "max_cost_usd": 1.5},
                agent={"command": [sys.executable, "agent.py"], "usage": "file"},
                autonomy="assisted",
            ),
        )
    )
    converter = pydantic_data_converter.payload_converter
    payloads = converter.to_payloads([spec])
    assert len(payloads) == 1
    (back,) = converter.from_payloads(payloads, [TaskSpec])
    assert isinstance(back, TaskSpec)
    assert back == spec
    assert back.autonomy is Autonomy.ASSISTED
    assert back.verify[1].diff_scope is not None and back.verify[1].diff_scope.protect == ["t.py"]


async def test_taskspec_round_trip_through_the_full_converter(tmp_path: Path, repo: Path) -> None:
    spec = load(write(tmp_path, spec_dict(repo)))
    (back,) = await pydantic_data_converter.decode(
        await pydantic_data_converter.encode([spec]), [TaskSpec]
    )
    assert back == spec


def test_signal_payloads_ignore_unknown_keys() -> None:
    assert ApproveSignal.model_validate({"note": "x", "zzz": 1}) == ApproveSignal(note="x")
    assert RejectSignal.model_validate({"reason": "no", "by": "me"}).reason == "no"
    assert FeedbackSignal.model_validate({"text": "t", "extra": [1]}).text == "t"
    ext = ExtendBudgetSignal.model_validate({"attempts": 2, "minutes": 5})
    assert ext == ExtendBudgetSignal(attempts=2)


def test_signal_payload_with_unknown_keys_decodes_from_the_wire() -> None:
    converter = pydantic_data_converter.payload_converter
    raw = converter.to_payloads([{"note": "ok", "zzz": 1}])
    (sig,) = converter.from_payloads(raw, [ApproveSignal])
    assert sig == ApproveSignal(note="ok")


def test_task_spec_refuses_unknown_keys_unlike_signals() -> None:
    with pytest.raises(ValueError, match="zzz"):
        TaskSpec.model_validate({**spec_dict("/r"), "zzz": 1})
