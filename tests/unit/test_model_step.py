"""model_step against a scripted OpenAI-compatible server (real sockets, the real openai client)."""

from __future__ import annotations

import hashlib
import json
import socket
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model import (
    SYSTEM_PROMPT,
    ModelActivities,
    model_artifact,
    preflight,
    tool_artifact,
)
from loop import pricing
from loop.contracts import ModelStepInput, ModelStepResult
from loop.errors import PERMANENT, BadInput
from loop.settings import Settings
from tests.support.model_server import ScriptedModel, drop, reply, status

KEY = "sk-test-Zq8uXw3Secret0042"
PROMPT = "# Task (attempt 1)\n\n## Goal\n\nMake the tests pass.\n"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} (test schema)",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": [],
            },
        },
    }
    for name in ("read_file", "run", "finish")
]
ARTIFACT_KEYS = {"message", "usage", "finish_reason", "model", "cost_usd"}


@pytest.fixture
def server():
    with ScriptedModel() as s:
        yield s


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def acts(home: Path) -> ModelActivities:
    return ModelActivities(Settings(home=home), tools=TOOLS)


@pytest.fixture
def attempt_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runs" / "t1" / "attempt-1"
    d.mkdir(parents=True)
    (d / "prompt.md").write_text(PROMPT)
    return d


def step_input(
    attempt_dir: Path, step: int, server: ScriptedModel | None, **kw: object
) -> ModelStepInput:
    fields: dict = {
        "task_id": "t1",
        "attempt": 1,
        "step": step,
        "attempt_dir": str(attempt_dir),
        "model": "gpt-4o-mini",
        "base_url": server.url if server else None,
        "max_tokens": 777,
    }
    fields.update(kw)
    return ModelStepInput.model_validate(fields)


def write_tool(attempt_dir: Path, step: int, index: int, call_id: str, content: str) -> None:
    tool_artifact(attempt_dir, step, index).write_text(
        json.dumps(
            {
                "message": {"role": "tool", "tool_call_id": call_id, "content": content},
                "result": {"ok": True},
            }
        )
    )


async def failure(acts: ModelActivities, inp: ModelStepInput) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await acts.model_step(inp)
    return info.value


# --------------------------------------------------------------------------- a good answer


async def test_tool_calls_written_to_artifact_and_referenced(server, acts, attempt_dir):
    server.script(
        [
            reply(
                "let me look",
                tool_calls=[("read_file", {"path": "a.py"}), ("run", '{"cmd": "pytest"')],
                usage=(1000, 200),
            )
        ]
    )
    result = await acts.model_step(step_input(attempt_dir, 1, server))

    path = model_artifact(attempt_dir, 1)
    assert path.name == "step-0001.model.json"
    art = json.loads(path.read_text())
    assert set(art) == ARTIFACT_KEYS
    msg = art["message"]
    assert msg["role"] == "assistant" and msg["content"] == "let me look"
    calls = msg["tool_calls"]
    assert [c["type"] for c in calls] == ["function", "function"]
    assert [c["function"]["name"] for c in calls] == ["read_file", "run"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "a.py"}
    assert calls[1]["function"]["arguments"] == '{"cmd": "pytest"'  # kept raw, even malformed
    assert art["usage"]["prompt_tokens"] == 1000 and art["usage"]["completion_tokens"] == 200
    assert art["finish_reason"] == "tool_calls"
    assert art["model"] == "gpt-4o-mini"

    assert [(r.index, r.id, r.name) for r in result.tool_calls] == [
        (0, calls[0]["id"], "read_file"),
        (1, calls[1]["id"], "run"),
    ]
    assert (result.step, result.tokens_in, result.tokens_out) == (1, 1000, 200)
    assert result.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.60) / 1e6)
    assert art["cost_usd"] == result.cost_usd
    assert result.content == "let me look"
    assert result.finish_reason == "tool_calls"
    assert result.artifact == str(path)
    assert result.artifact_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not [p for p in attempt_dir.iterdir() if p.name.endswith(".tmp")]

    (req,) = server.requests
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    body = req["body"]
    assert body["model"] == "gpt-4o-mini"
    assert body["max_tokens"] == 777
    assert "max_completion_tokens" not in body
    assert [t["function"]["name"] for t in body["tools"]] == ["read_file", "run", "finish"]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == SYSTEM_PROMPT
    assert "finish(answer)" in SYSTEM_PROMPT
    assert body["messages"][1]["content"] == PROMPT


async def test_answered_step_is_not_paid_twice(server, acts, attempt_dir):
    server.script([reply(tool_calls=[("read_file", {"path": "x"})], usage=(50, 7))])
    first = await acts.model_step(step_input(attempt_dir, 1, server))
    again = await acts.model_step(step_input(attempt_dir, 1, server))
    # A second request would find the script empty and fail with a 500.
    assert len(server.requests) == 1 and server.exhausted == 0
    assert again == first


async def test_step_two_rebuilds_the_conversation(server, acts, attempt_dir):
    server.script(
        [
            reply(None, tool_calls=[("read_file", {"path": "a.py"}), ("run", {"cmd": "ls"})]),
            reply("all done", usage=(300, 4)),
        ]
    )
    one = await acts.model_step(step_input(attempt_dir, 1, server))
    write_tool(attempt_dir, 1, 0, one.tool_calls[0].id, "print('a')\n")
    write_tool(attempt_dir, 1, 1, one.tool_calls[1].id, "a.py\n")

    two = await acts.model_step(step_input(attempt_dir, 2, server))

    messages = server.requests[1]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assert messages[1]["content"] == PROMPT
    step1 = json.loads(model_artifact(attempt_dir, 1).read_text())["message"]
    assert messages[2] == step1
    assert [c["id"] for c in messages[2]["tool_calls"]] == [c.id for c in one.tool_calls]
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": one.tool_calls[0].id,
        "content": "print('a')\n",
    }
    assert messages[4]["tool_call_id"] == one.tool_calls[1].id
    assert two.tool_calls == [] and two.content == "all done" and two.finish_reason == "stop"
    art2 = json.loads(model_artifact(attempt_dir, 2).read_text())
    assert "tool_calls" not in art2["message"]


async def test_missing_tool_artifact_is_permanent_and_sends_nothing(server, acts, attempt_dir):
    server.script([reply(tool_calls=[("read_file", {"path": "a"}), ("run", {"cmd": "ls"})])])
    one = await acts.model_step(step_input(attempt_dir, 1, server))
    write_tool(attempt_dir, 1, 0, one.tool_calls[0].id, "ok")  # tool-1 is missing

    err = await failure(acts, step_input(attempt_dir, 2, server))
    assert err.non_retryable and err.type == PERMANENT
    assert "step-0001.tool-1.json" in err.message
    assert len(server.requests) == 1
    assert not model_artifact(attempt_dir, 2).exists()


async def test_missing_prompt_is_permanent(server, acts, attempt_dir):
    (attempt_dir / "prompt.md").unlink()
    err = await failure(acts, step_input(attempt_dir, 1, server))
    assert err.non_retryable and "prompt.md" in err.message
    assert server.requests == []


async def test_history_stays_small_however_long_the_conversation(server, acts, attempt_dir):
    server.script([reply("x" * 50_000, tool_calls=[("read_file", {"path": "big"})])])
    one = await acts.model_step(step_input(attempt_dir, 1, server))
    write_tool(attempt_dir, 1, 0, one.tool_calls[0].id, "y" * 200_000)
    server.script([reply("z" * 50_000, tool_calls=[("run", {"cmd": "ls"})])])
    two = await acts.model_step(step_input(attempt_dir, 2, server))

    assert len(server.requests[1]["body"]["messages"][3]["content"]) == 200_000
    assert len(one.content) == 2_000 and len(two.content) == 2_000
    art = json.loads(model_artifact(attempt_dir, 2).read_text())
    assert len(art["message"]["content"]) == 50_000  # the whole text stays on disk
    sizes = [len(r.model_dump_json()) for r in (one, two)]
    assert max(sizes) < 3_000
    assert abs(sizes[0] - sizes[1]) < 100


# --------------------------------------------------------------------------- errors


async def test_429_is_retryable_after_retry_after(server, acts, attempt_dir):
    server.script([status(429, headers={"Retry-After": "3"})])
    err = await failure(acts, step_input(attempt_dir, 1, server))
    assert err.non_retryable is False
    assert err.next_retry_delay == timedelta(seconds=3)
    assert "429 Too Many Requests" in err.message
    assert not model_artifact(attempt_dir, 1).exists()
    assert len(server.requests) == 1  # the client itself does not retry


async def test_500_is_retryable(server, acts, attempt_dir):
    server.script([status(500), status(503, body="upstream down")])
    err = await failure(acts, step_input(attempt_dir, 1, server))
    assert err.non_retryable is False and err.next_retry_delay is None
    assert err.message.startswith(f"model gpt-4o-mini at {server.url}: 500 Internal Server Error")
    err = await failure(acts, step_input(attempt_dir, 1, server))
    assert err.non_retryable is False and "503" in err.message and "upstream down" in err.message
    assert len(server.requests) == 2


async def test_dropped_connection_is_retryable(server, acts, attempt_dir):
    server.script([drop()])
    err = await failure(acts, step_input(attempt_dir, 1, server))
    assert err.non_retryable is False
    assert err.type == "ModelConnection"
    assert server.url in err.message
    assert len(server.requests) == 1


async def test_refused_connection_is_retryable(acts, attempt_dir):
    with ScriptedModel() as gone:
        url = gone.url
    err = await failure(acts, step_input(attempt_dir, 1, None, base_url=url))
    assert err.non_retryable is False and err.type == "ModelConnection"


async def test_401_is_permanent_and_never_shows_the_key(server, acts, attempt_dir):
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}. Bearer {KEY}"}}
    server.script([status(401, body=echo)])
    with capture_logs() as logs:
        err = await failure(acts, step_input(attempt_dir, 1, server))
    assert err.non_retryable is True and err.type == PERMANENT
    assert err.message.startswith(f"model gpt-4o-mini at {server.url}: 401 Unauthorized")
    assert "\n" not in err.message
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # it was sent
    assert "Zq8uXw3" not in err.message
    assert err.__cause__ is None  # the openai exception (with the raw body) is not attached
    assert "Zq8uXw3" not in json.dumps(logs, default=str)
    assert any(e.get("event") == "model call failed" for e in logs)


async def test_404_and_other_4xx_are_permanent(server, acts, attempt_dir):
    server.script([status(404), status(400), status(403), status(422)])
    for code in (404, 400, 403, 422):
        err = await failure(acts, step_input(attempt_dir, 1, server))
        assert err.non_retryable is True, code
        assert f": {code} " in err.message
    assert len(server.requests) == 4


async def test_response_without_choices_is_permanent(server, acts, attempt_dir):
    empty = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
    server.script([status(200, body=empty)])
    err = await failure(acts, step_input(attempt_dir, 1, server))
    assert err.non_retryable is True and "no choices" in err.message
    assert not model_artifact(attempt_dir, 1).exists()


async def test_exhausted_script_is_noticed(server, acts, attempt_dir):
    err = await failure(acts, step_input(attempt_dir, 1, server))
    assert "script exhausted" in err.message and server.exhausted == 1


# --------------------------------------------------------------------------- request details


async def test_base_url_from_env_and_key_default(server, acts, attempt_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_API_KEY")
    server.script([reply("hi", usage=None)])
    result = await acts.model_step(step_input(attempt_dir, 1, None, max_tokens=64))
    assert server.requests[0]["headers"]["authorization"] == "Bearer not-needed"
    assert server.requests[0]["body"]["max_tokens"] == 64
    assert (result.tokens_in, result.tokens_out, result.cost_usd) == (0, 0, 0.0)


async def test_reasoning_models_get_max_completion_tokens(server, acts, attempt_dir):
    server.script([reply("ok")])
    await acts.model_step(step_input(attempt_dir, 1, server, model="o4-mini", max_tokens=99))
    body = server.requests[0]["body"]
    assert body["max_completion_tokens"] == 99 and "max_tokens" not in body


async def test_heartbeats_while_the_call_runs(server, acts, attempt_dir):
    server.script([reply("slow", delay=2.6)])
    beats: list[tuple] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    result = await env.run(acts.model_step, step_input(attempt_dir, 1, server))
    assert isinstance(result, ModelStepResult) and result.content == "slow"
    assert len(beats) >= 2


async def test_the_default_tools_are_the_toolbox(home, attempt_dir, server):
    from activities.host.toolbox import TOOL_SCHEMAS

    server.script([reply("ok")])
    await ModelActivities(Settings(home=home)).model_step(step_input(attempt_dir, 1, server))
    sent = [t["function"]["name"] for t in server.requests[0]["body"]["tools"]]
    assert sent == [t["function"]["name"] for t in TOOL_SCHEMAS]


# --------------------------------------------------------------------------- pricing


async def test_unknown_model_costs_nothing_and_warns_once(server, acts, attempt_dir):
    model = f"acme-coder-{uuid.uuid4().hex[:6]}"
    server.script([reply(tool_calls=[("run", {})], usage=(10, 10)), reply("x", usage=(10, 10))])
    with capture_logs() as logs:
        one = await acts.model_step(step_input(attempt_dir, 1, server, model=model))
        write_tool(attempt_dir, 1, 0, one.tool_calls[0].id, "")
        two = await acts.model_step(step_input(attempt_dir, 2, server, model=model))
    assert one.cost_usd == 0.0 and two.cost_usd == 0.0
    warnings = [e for e in logs if "no price for model" in e["event"]]
    assert len(warnings) == 1
    assert warnings[0]["event"] == (
        f"no price for model {model}; cost counted as 0; add it to LOOP_HOME/prices.json"
    )
    assert warnings[0]["log_level"] == "warning"


async def test_prices_json_overrides_and_adds(server, home, attempt_dir):
    home.mkdir(parents=True)
    (home / "prices.json").write_text(
        json.dumps({"gpt-4o-mini": {"input": 1, "output": 2}, "acme": {"input": 3, "output": 0}})
    )
    acts = ModelActivities(Settings(home=home), tools=TOOLS)
    server.script([reply("a", usage=(1000, 200))])
    result = await acts.model_step(step_input(attempt_dir, 1, server))
    assert result.cost_usd == pytest.approx((1000 * 1 + 200 * 2) / 1e6)
    assert pricing.cost("acme-v2", 1_000_000, 5, acts.prices) == pytest.approx(3.0)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"m": {"input": 1}}',
        '{"m": {"input": -1, "output": 1}}',
        '{"m": {"input": "1", "output": 1}}',
    ],
)
def test_invalid_prices_file_is_a_clear_error(home: Path, content: str):
    home.mkdir(parents=True)
    (home / "prices.json").write_text(content)
    with pytest.raises(BadInput) as info:
        ModelActivities(Settings(home=home))
    assert str(home / "prices.json") in str(info.value)
    assert '{"model": {"input": x, "output": y}}' in str(info.value)


def test_versioned_names_priced_by_family():
    prices = pricing.load_prices(Path("/nonexistent-loop-home"))
    mini = pricing.cost("gpt-4o-mini", 1_000_000, 1_000_000, prices)
    assert mini == pytest.approx(0.15 + 0.60)
    assert pricing.cost("gpt-4o-mini-2024-07-18", 1_000_000, 1_000_000, prices) == mini
    assert pricing.cost("gpt-4o-2024-08-06", 1_000_000, 0, prices) == pytest.approx(2.50)
    assert pricing.cost("gpt-4.1-nano-2025-04-14", 0, 1_000_000, prices) == pytest.approx(0.40)
    assert pricing.cost("openai/gpt-4.1-mini", 1_000_000, 0, prices) == pytest.approx(0.40)
    assert pricing.cost("claude-sonnet-4-20250514", 1_000_000, 0, prices) == pytest.approx(3.0)
    assert pricing.cost("claude-3.5-haiku", 0, 1_000_000, prices) == pytest.approx(4.0)
    assert pricing.lookup("gpt-4oo", prices) is None  # a prefix must end at a boundary
    assert pricing.lookup("gpt-4.10", prices) is None
    assert pricing.lookup("o3-mini-high", prices) == prices["o3-mini"]
    assert pricing.cost("claude-sonnet-4-5-20250929", 1_000_000, 0, prices) == pytest.approx(3.0)
    # A tier is not its family: each costs several times as much.
    assert [pricing.lookup(m, prices) for m in ("o1-pro", "gpt-5-pro", "o3-pro")] == [None] * 3


async def test_preflight_before_the_first_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint that answers passes; one that is down, or remote without a key, is a
    permanent error in one line (the task ends BLOCKED before any attempt)."""
    with ScriptedModel() as model:
        await preflight(model.url, "gpt-4o-mini", bound_s=2)  # no error, no model call
        assert model.requests == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ApplicationError) as down:
        await preflight(f"http://127.0.0.1:{port}/v1", "gpt-4o-mini", bound_s=2)
    assert down.value.non_retryable
    assert f"model gpt-4o-mini at http://127.0.0.1:{port}/v1: connection failed" in str(down.value)
    assert str(down.value).endswith("unreachable for 2 s")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ApplicationError) as keyless:
        await preflight("https://models.example.invalid/v1", "gpt-4o-mini", bound_s=2)
    assert "OPENAI_API_KEY is not set in the worker's environment" in str(keyless.value)
