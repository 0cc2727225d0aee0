"""What agent CLIs print, read back: their usage, what went wrong, and what a person sees.

The sample lines are what Claude Code 2.1, aider 0.86 and Codex 0.171 printed against
scripted endpoints (the real CLIs run in tests/e2e/test_agents.py); numbers are kept.
"""

from __future__ import annotations

import json

import pytest

from loop.contracts import BudgetFigures, MakeResult, TaskSpec, Usage
from loop.rules import budget, explain, usage
from loop.rules.clis import usage_source
from loop.rules.commands import programs

CLAUDE_RESULT = (
    '{"type":"result","subtype":"success","is_error":false,"num_turns":4,'
    '"result":"Fixed slugify.","total_cost_usd":0.29976,"usage":{"input_tokens":59237,'
    '"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":141}}'
)
CLAUDE_ASSISTANT = (
    '{"type":"assistant","message":{"usage":{"input_tokens":59237,"output_tokens":1}}}'
)
CLAUDE_401 = (
    '{"type":"result","subtype":"success","is_error":true,"api_error_status":401,'
    '"result":"Invalid API key · Fix external API key","total_cost_usd":0,'
    '"usage":{"input_tokens":0,"output_tokens":0}}'
)
AIDER = """Aider v0.86.2
Tokens: 719 sent, 17 received. Cost: $0.0024 message, $0.0024 session.
Applied edit to slug.py
Tokens: 1.2k sent, 83 received. Cost: $0.0037 message, $0.0061 session.
"""
AIDER_401 = """litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect
API key provided: scripted server.
The API provider is not able to authenticate you. Check your API key.
"""
CODEX = "\n".join(
    json.dumps(event)
    for event in (
        {"type": "thread.started", "thread_id": "01a2"},
        {"type": "item.completed", "item": {"type": "error", "message": "Model metadata …"}},
        {"type": "turn.completed", "usage": {"input_tokens": 32296, "cached_input_tokens": 100,
                                             "output_tokens": 310, "reasoning_output_tokens": 12}},
    )
)  # fmt: skip
CODEX_REFUSED = (
    '{"type":"error","message":"Reconnecting... waiting for network (Connection failed: '
    'error sending request)"}'
)


def test_claude_code_usage_is_the_result_event_not_the_message_starts() -> None:
    got = usage.read("claude-code", f"{CLAUDE_ASSISTANT}\n{CLAUDE_RESULT}\n", None)
    assert (got.tokens_in, got.tokens_out, got.cost_usd) == (59337, 141, 0.29976)
    assert got.found and not got.error


def test_claude_code_errors_are_read_from_is_error() -> None:
    got = usage.read("claude-code", CLAUDE_401, None)
    assert got.error == "claude: Invalid API key · Fix external API key" and got.fatal


def test_aider_tokens_add_up_and_cost_is_the_session_total() -> None:
    got = usage.read("aider", AIDER, None)
    assert (got.tokens_in, got.tokens_out) == (719 + 1200, 17 + 83)
    assert got.cost_usd == 0.0061


def test_aider_exits_0_on_a_refused_key_and_the_output_says_so() -> None:
    got = usage.read("aider", AIDER_401, None)
    assert got.fatal and got.error.startswith("aider: the endpoint refused the key")


def test_codex_reports_tokens_only_and_waits_for_a_network_forever() -> None:
    got = usage.read("codex", CODEX, None)
    assert (got.tokens_in, got.tokens_out, got.cost_usd) == (32296, 322, None)
    refused = usage.read("codex", CODEX_REFUSED, None)
    assert refused.fatal and "cannot be reached" in refused.error


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"tokens_in": 10, "tokens_out": 5, "cost_usd": 0.01}', (10, 5, 0.01, "")),
        (b'{"tokens": 7}', (7, 0, None, "")),
        (b'{"tokens_in": -1}', (0, 0, None, "LOOP_USAGE_FILE: tokens must be whole numbers >= 0")),
        (b'{"tokens_in": 1, "cost_usd": "lots"}', (0, 0, None, "LOOP_USAGE_FILE: cost_usd must")),
        (b"\xff\xfe", (0, 0, None, "LOOP_USAGE_FILE is not JSON")),
        (b"[1, 2]", (0, 0, None, "LOOP_USAGE_FILE is not a JSON object")),
    ],
)
def test_the_usage_file_is_hostile_input(data: bytes, expected: tuple) -> None:
    got = usage.read("none", "", data)
    tokens_in, tokens_out, cost, error = expected
    assert (got.tokens_in, got.tokens_out, got.cost_usd) == (tokens_in, tokens_out, cost)
    assert got.error.startswith(error) and got.found == (not error)


def test_the_usage_file_wins_over_the_log_but_keeps_its_error() -> None:
    got = usage.read("claude-code", CLAUDE_401, json.dumps({"tokens_in": 3}).encode())
    assert got.tokens_in == 3 and got.fatal and "Invalid API key" in got.error


def test_usage_source_finds_the_cli_in_a_shell_line() -> None:
    line = 'CLAUDE_CODE_MAX_RETRIES=2 claude -p "$(cat "$LOOP_PROMPT_FILE")" --verbose'
    assert usage_source(["sh", "-c", line], "auto") == "claude-code"
    assert usage_source(["/opt/aider/bin/aider", "--yes-always"], "auto") == "aider"
    assert usage_source(["python3", "agent.py"], "auto") == "none"
    assert usage_source(["python3", "agent.py"], "file") == "file"


def test_programs_of_a_shell_line_skip_arithmetic_builtins_and_redirections() -> None:
    line = "n=$(cat f || echo 0); echo $((n+1)) > f; if [ -x t ]; then exec make test; fi"
    assert programs(["bash", "-c", line]) == ["bash", "cat", "make"]


def made(**fields: object) -> MakeResult:
    return MakeResult.model_validate({"attempt": 1, "log_path": "/runs/t/agent.log", **fields})


def test_agent_trouble_in_one_line_with_its_log() -> None:
    assert explain.agent_trouble(made(exit_code=0)) == ""
    assert explain.agent_trouble(made(exit_code=2, output_tail="x\nboom\n")) == (
        "the agent exited 2: boom (log: /runs/t/agent.log)"
    )
    slept = made(exit_code=-9, timed_out=True, duration_s=60.4)
    assert explain.agent_trouble(slept).startswith("the agent timed out after 60 s")
    missing = made(exit_code=127, output_tail="sh: 1: claude: not found")
    assert explain.agent_trouble(missing) == (
        "the agent could not start (exit 127): sh: 1: claude: not found (log: /runs/t/agent.log)"
    )
    assert explain.could_not_start(missing)
    quiet = made(exit_code=0, agent_error="aider: the endpoint refused the key")
    assert "the endpoint refused the key" in explain.agent_trouble(quiet)
    assert not explain.could_not_start(quiet)
    assert explain.could_not_start(quiet.model_copy(update={"agent_error_fatal": True}))


def test_a_budget_without_reported_usage_is_named() -> None:
    spec = TaskSpec.model_validate(
        {"id": "t", "goal": "g", "repo": "/r", "agent": {"command": ["x"], "usage": "file"},
         "verify": [{"name": "t", "run": "true"}], "budget": {"max_cost_usd": 1}}
    )  # fmt: skip
    assert explain.unpriced_budget(spec, made()) == "budget.max_cost_usd"
    assert explain.unpriced_budget(spec, made(usage_reported=True)) == ""


@pytest.mark.parametrize("kind", ["tokens", "cost_usd", "tool_calls"])
def test_a_budget_is_spent_when_used_exactly(kind: str) -> None:
    """``>=``, not ``>``: a limit of 100 tokens allows 100, and no call after them."""
    limits = {"tokens": None, "cost_usd": None, "tool_calls": None, kind: 100}
    used = Usage(**{kind: 100})
    assert budget.spent(used, limits["tokens"], limits["cost_usd"], limits["tool_calls"])
    under = Usage(**{kind: 99})
    assert not budget.spent(under, limits["tokens"], limits["cost_usd"], limits["tool_calls"])


def test_extending_adds_to_a_limit_and_keeps_no_limit() -> None:
    assert budget.extended(100, 50) == 150
    assert budget.extended(None, 50) is None
    left = budget.status(BudgetFigures(tokens=100), BudgetFigures(tokens=100)).left
    assert left.tokens == 0  # clamped, never negative


def test_programs_of_a_shell_line_skip_here_document_bodies() -> None:
    heredoc = "python - <<'EOF'\nimport index\nfrom pathlib import Path\nEOF\nls -l"
    assert programs(["sh", "-c", heredoc]) == ["sh", "python", "ls"]
    tabs = 'cat <<-"END" > f\n\tindex here\n\tEND\nmake test'
    assert programs(["bash", "-c", tabs]) == ["bash", "cat", "make"]
    here_string = 'grep x <<< "index"; echo hi'
    assert programs(["bash", "-c", here_string]) == ["bash", "grep"]


def test_json_nested_past_the_parser_is_no_usage_and_no_crash() -> None:
    """What an agent leaves is read as hostile: a usage file or a log line nested 10,000
    deep is not JSON to the reader (no ``RecursionError`` ends the step), and the lines
    around it are still read."""
    deep = "[" * 10_000 + "]" * 10_000
    assert usage.from_file(deep.encode()).error == "LOOP_USAGE_FILE is not JSON"
    result = (
        '{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.5,'
        '"usage":{"input_tokens":10,"output_tokens":2}}'
    )
    said = usage.read("claude-code", "{" + '"a":' * 10_000 + "\n" + result + "\n", None)
    assert (said.tokens_in, said.tokens_out, said.error) == (10, 2, "")


def test_tool_arguments_nested_past_the_bound_are_the_models_error() -> None:
    from activities.host.toolbox.arguments import parse_arguments
    from activities.host.toolbox.outcome import ToolError

    with pytest.raises(ToolError, match="the JSON nests deeper than 64 levels"):
        parse_arguments("read_file", '{"path": ' + "[" * 10_000 + "]" * 10_000 + "}")
