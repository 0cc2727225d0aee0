"""The model gateway on its own: real sockets, real HTTP, the scripted provider endpoints.

Each test attaches one or two runs' grants to the worker's gateway on host listeners
(what an unconfined run gets; a sandboxed run's listener is the same socket made in its
namespace) and calls it as an agent CLI would. What is checked is what an attacker in
the sandbox would try: no token, another run's token, another path, a huge body, a
budget that is spent; and what the gateway must get right: the real key upstream and
nowhere else, the answer streamed back unchanged, the usage measured exactly.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from activities.host.gateway import GATEWAY, host_listener
from activities.host.gateway import server as gateway_server
from activities.host.gateway.upstream import upstream_refusal
from loop.budgets import set_limits
from loop.contracts import (
    QUERY_LEDGER,
    LedgerState,
    PeriodLimits,
    TaskState,
    ledger_id_for,
)
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agent_endpoints import ScriptedClaude, ScriptedResponses, turn
from tests.support.agents import agent_file
from tests.support.gateway import KEY, attached, bearer, calling_spec, grant, raw
from tests.support.host import LEVELS, needs
from tests.support.model_server import ScriptedModel, reply
from tests.support.repos import git
from tests.support.tasks import result_of
from worker import build_worker

pytestmark = pytest.mark.timeout(60)
TOOL = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def sse_data(text: str) -> list[Any]:
    return [json.loads(line[5:]) for line in text.splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]  # fmt: skip


async def test_a_chat_completion_goes_upstream_with_the_real_key_and_is_metered() -> None:
    with ScriptedModel() as model:
        model.script([reply("hello", usage=(700, 30))])
        g = grant(model.url, model="gpt-4o-mini")
        async with attached(g) as client:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
            answer = await client.post("/v1/chat/completions", json=body, headers=bearer(g))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "hello"
    sent = model.requests[0]
    assert sent["headers"]["authorization"] == f"Bearer {KEY}"
    assert g.token not in json.dumps(sent)  # the run's token never leaves the worker
    assert (g.tokens, g.count) == (730, 1) and g.cost_usd > 0  # priced: gpt-4o-mini
    assert g.calls[0].metered and g.calls[0].model == "gpt-4o-mini"


async def test_a_streamed_chat_completion_is_asked_for_its_usage_and_streams_back() -> None:
    with ScriptedModel() as model:
        model.script([reply("streamed", usage=(120, 8))])
        g = grant(model.url)
        async with attached(g) as client:
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
            answer = await client.post("/v1/chat/completions", json=body, headers=bearer(g))
    assert answer.headers["content-type"].startswith("text/event-stream")
    chunks = sse_data(answer.text)
    assert chunks[0]["choices"][0]["delta"]["content"] == "streamed"
    assert model.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert chunks[-1]["usage"]["prompt_tokens"] == 120  # the usage chunk reached the CLI too
    assert g.tokens == 128


async def test_anthropic_messages_streamed_are_metered_from_start_and_delta() -> None:
    with ScriptedClaude(turn("hi", ("Read", {"file_path": "x"}), usage=(900, 40))) as model:
        g = grant(model.url, "anthropic")
        async with attached(g) as client:
            body = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 100,
                    "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
                    "messages": [{"role": "user", "content": "x"}]}  # fmt: skip
            answer = await client.post(
                "/v1/messages?beta=true", json=body,
                headers={"x-api-key": g.token, "anthropic-version": "2023-06-01"},
            )  # fmt: skip
    assert answer.status_code == 200
    assert next(e["type"] for e in sse_data(answer.text)) == "message_start"
    assert model.requests[0]["headers"]["x-api-key"] == KEY
    assert model.requests[0]["headers"]["anthropic-version"] == "2023-06-01"
    assert g.tokens == sum(model.usage_sent) == 940


async def test_the_responses_api_is_metered_from_response_completed() -> None:
    with ScriptedResponses(turn("done", usage=(1000, 50))) as model:
        g = grant(f"{model.url}/v1")
        async with attached(g) as client:
            body = {"model": "gpt-5", "stream": True, "tools": TOOL, "input": "x"}
            answer = await client.post("/v1/responses", json=body, headers=bearer(g))
    assert answer.status_code == 200 and "response.completed" in answer.text
    assert g.tokens == 1050


async def test_no_token_another_runs_token_another_path_and_a_huge_body_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gateway_server, "MAX_BODY", 4096)
    with ScriptedModel() as model:
        a = grant(model.url, task="task-a")
        b = grant(model.url, task="task-b")
        body = {"model": "m", "messages": []}
        async with attached(a), attached(b) as from_b:
            none = await from_b.post("/v1/chat/completions", json=body)
            stolen = await from_b.post("/v1/chat/completions", json=body, headers=bearer(a))
            elsewhere = await from_b.get("/v1/files", headers=bearer(b))
            escaped = await from_b.get("/v1/models/../../admin", headers=bearer(b))
            huge = await from_b.post(
                "/v1/chat/completions", headers=bearer(b),
                json={"model": "m", "messages": [{"role": "user", "content": "x" * 10_000}]},
            )  # fmt: skip
            # Another host, by the request's own words: an absolute target, a Host header.
            absolute = await raw(
                from_b,
                f"GET http://203.0.113.5/v1/models HTTP/1.1\r\n"
                f"Host: 203.0.113.5\r\nAuthorization: Bearer {b.token}\r\n\r\n",
            )
            hosted = await from_b.post(
                "/v1/chat/completions", json=body, headers={**bearer(b), "host": "evil.example"}
            )
    assert absolute.startswith(b"HTTP/1.1 404"), absolute
    assert hosted.status_code == 500 and len(model.requests) == 1  # the upstream's own answer
    assert model.requests[0]["headers"]["host"] == httpx.URL(model.url).netloc.decode()
    model.requests.clear()
    assert none.status_code == 401 and stolen.status_code == 403
    assert "task task-a" in stolen.json()["error"]["message"]
    assert elsewhere.status_code == 404 and escaped.status_code == 404
    assert huge.status_code == 413
    assert model.requests == []  # nothing refused reached the provider
    assert any("the token of task task-a" in r and "task-b's sandbox" in r for r in b.refused)
    assert not a.refused and a.count == 0 and b.count == 1


async def test_a_spent_budget_stops_calls_with_the_providers_error_shape() -> None:
    with ScriptedModel() as model:
        model.script([reply("x", usage=(1000, 50))] * 5)
        g = grant(model.url, max_tokens=2500)
        async with attached(g) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
            statuses = [
                (await client.post("/v1/chat/completions", json=body, headers=bearer(g)))
                for _ in range(5)
            ]
    assert [s.status_code for s in statuses] == [200, 200, 200, 400, 400]
    message = statuses[3].json()["error"]["message"]
    assert message.startswith("Loopwork: this task's token budget is spent"), message
    assert len(model.requests) == 3 and g.spent_after == 3
    assert g.tokens == 3150 and g.tokens - 2500 < 1050  # over by less than the last call


async def test_concurrent_calls_under_a_budget_overshoot_by_one_call_at_most() -> None:
    with ScriptedModel() as model:
        model.script([reply("x", usage=(1000, 50), delay=0.2)] * 8)
        g = grant(model.url, max_tokens=1000)
        async with attached(g) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
            answers = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body, headers=bearer(g))
                  for _ in range(8))
            )  # fmt: skip
    assert sorted(a.status_code for a in answers) == [200] + [400] * 7
    assert len(model.requests) == 1 and g.tokens == 1050


async def test_a_retried_try_counts_what_the_killed_one_spent(tmp_path: Path) -> None:
    """A worker killed mid-attempt leaves its calls billed; the retry of that attempt
    starts from them (the journal), so the budget holds across tries."""
    journal = tmp_path / "calls.jsonl"
    with ScriptedModel() as model:
        model.script([reply("x", usage=(1000, 50))] * 4)
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        first = grant(model.url, max_tokens=2500, journal=journal)
        async with attached(first) as client:
            for _ in range(2):
                await client.post("/v1/chat/completions", json=body, headers=bearer(first))
        journal.write_text(journal.read_text() + '{"path": "/v1/chat/comp')  # cut by the kill
        retried = grant(model.url, max_tokens=2500, journal=journal)
        retried.resume()
        assert (retried.tokens, retried.count) == (2100, 2)
        async with attached(retried) as client:
            statuses = [
                (await client.post("/v1/chat/completions", json=body, headers=bearer(retried)))
                .status_code for _ in range(2)
            ]  # fmt: skip
    assert statuses == [200, 400] and len(model.requests) == 3
    assert retried.tokens == 3150 and retried.spent_after == 3


async def test_a_token_dies_with_its_run() -> None:
    with ScriptedModel() as model:
        g = grant(model.url)
        listener = host_listener()
        port = listener.getsockname()[1]
        async with GATEWAY.serving(listener, g):
            pass
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass


async def test_a_transcript_keeps_each_call_bounded_and_without_the_key(tmp_path: Path) -> None:
    with ScriptedModel() as model:
        model.script([reply("the answer " + KEY), reply("second")])
        g = grant(model.url, transcript_dir=tmp_path)
        async with attached(g) as client:
            said = [{"role": "user", "content": f"fix it, token {g.token}"}]
            body = {"model": "m", "messages": said}
            await client.post("/v1/chat/completions", json=body, headers=bearer(g))
            big = {"model": "m", "messages": [{"role": "user", "content": "x" * 400_000}]}
            await client.post("/v1/chat/completions", json=big, headers=bearer(g))
    first = (tmp_path / "call-0001.log").read_text()
    assert first.startswith("POST /v1/chat/completions\n") and "fix it, token" in first
    assert "--- answer: 200" in first and "the answer" in first
    assert KEY not in first and g.token not in first  # redacted, though both were in it
    second = (tmp_path / "call-0002.log").read_text()
    assert "[cut at 256 KiB]" in second and len(second) < 300 * 1024 and "second" in second


def test_the_orchestrator_is_no_upstream() -> None:
    """A task file naming the Temporal frontend (or another protected service) as its
    model endpoint is refused: the gateway calls from the worker, which could reach it."""
    from activities.host.sandbox import egress

    egress.protect(["127.0.0.1:7233"])
    assert upstream_refusal("http://127.0.0.1:7233/v1")
    assert upstream_refusal("http://localhost:7233")
    assert not upstream_refusal("https://203.0.113.5/v1")  # elsewhere: no DNS needed here


# --------------------------------------------------------------------------- in a task


@pytest.mark.timeout(180)
@pytest.mark.parametrize("level", LEVELS)
async def test_a_command_agent_calls_through_the_gateway_and_never_holds_the_key(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, level: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(400, 20))] * 3)
        spec = calling_spec(tmp_path, demo_repo, level, model.url, calls=3)
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            r = await result_of(handle, within=150)
    assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
    made = r.attempts[0].make
    assert made is not None and made.metered and made.model_calls == 3
    # Usage is what the endpoint sent, streamed or not, priced by the gateway.
    assert r.tokens == 3 * 420 and r.cost_usd == pytest.approx(3 * (400 * 0.15 + 20 * 0.6) / 1e6)
    assert all(req["headers"]["authorization"] == f"Bearer {KEY}" for req in model.requests)
    left = json.loads(agent_file(settings, spec.id, 1, "output.md").read_text())
    assert left["answers"] == [200, 200, 200]
    # The key is nowhere the agent could read or leave it: its environment, its process's
    # environ, its HOME, the worktree, the commit, its log.
    assert KEY not in json.dumps(left["seen"])
    assert left["seen"]["env"]["OPENAI_API_KEY"].startswith("loop-")
    run = settings.runs / spec.id
    assert not [p for p in run.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert KEY not in git(Path(r.worktree), "show", made.commit)
    calls = [json.loads(c) for c in (run / "attempt-1" / "calls.jsonl").read_text().splitlines()]
    assert [c["tokens_in"] + c["tokens_out"] for c in calls] == [420] * 3


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("level", "network"),
    [pytest.param("basic", "none", marks=needs("basic"), id="basic-none"), ("off", "proxy")],
)
async def test_the_gateway_is_reached_without_a_network_and_without_a_sandbox(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, level: str,
    network: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """``network: none`` still has the gateway in its namespace; an unconfined run gets a
    port on the host's loopback, and the key is left out of its environment all the same."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(400, 20))] * 2)
        spec = calling_spec(tmp_path, demo_repo, level, model.url, calls=2, network=network)
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            r = await result_of(handle, within=150)
    assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
    assert r.tokens == 2 * 420 and r.attempts[0].make is not None
    left = json.loads(agent_file(settings, spec.id, 1, "output.md").read_text())
    assert left["answers"] == [200, 200] and KEY not in json.dumps(left["seen"]["env"])


@pytest.mark.timeout(180)
async def test_a_token_budget_stops_the_agent_at_the_call_that_crossed_it(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(1000, 50))] * 10)
        spec = calling_spec(
            tmp_path, demo_repo, "basic", model.url, calls=10,
            budget={"max_tokens": 2500}, approval_timeout=2,
        )  # fmt: skip
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            r = await result_of(handle, within=150)
    assert r.state == TaskState.BUDGET_EXCEEDED, r.reason
    assert r.reason.startswith("token budget spent during the attempt after 3 calls"), r.reason
    assert len(model.requests) == 3 and r.tokens == 3150  # over by less than one call
    left = json.loads(agent_file(settings, spec.id, 1, "output.md").read_text())
    assert left["answers"] == [200, 200, 200, 400]
    assert r.attempts[0].verdict is None  # nothing half-done was judged


@pytest.mark.timeout(240)
async def test_five_tasks_under_a_period_budget_pass_it_by_one_call_at_most(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    repo = str(demo_repo.resolve())
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(1000, 50))] * 60)
        specs = [
            calling_spec(tmp_path, demo_repo, "basic", model.url, calls=10, approval_timeout=2)
            for _ in range(5)
        ]
        async with build_worker(client, settings):
            await set_limits(client, repo, PeriodLimits(tokens_per_day=3000), settings.task_queue)
            handles = [(await start_task(client, s, settings.task_queue))[0] for s in specs]
            results = await asyncio.gather(*(result_of(h, within=200) for h in handles))
            ledger = client.get_workflow_handle(ledger_id_for(repo))
            state = await ledger.query(QUERY_LEDGER, result_type=LedgerState)
    forwarded = 1050 * len(model.requests)
    assert forwarded == sum(r.tokens for r in results)
    assert 3000 <= forwarded <= 3000 + 1050, [(r.state, r.reason, r.tokens) for r in results]
    assert sum(d.tokens for d in state.days.values()) == forwarded  # settled as measured
    assert all(r.state == TaskState.BUDGET_EXCEEDED for r in results)
