"""The openai backend end to end: real dev server, real git, a scripted model over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import (
    TaskResult,
    TaskSpec,
    TaskState,
)
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import COMPLETE_FIX, agent_file, write_agent
from tests.support.model_server import ScriptedModel, drop, reply, status
from tests.support.repos import ROOT
from tests.support.tasks import UNITTEST, model_task, result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(120)
KEY = "sk-test-SECRET-0123456789"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


FIX_SCRIPT = [
    reply(tool_calls=[("read_file", {"path": "slugify.py"})], usage=(1000, 50)),
    reply(
        tool_calls=[("write_file", {"path": "slugify.py", "content": COMPLETE_FIX})],
        usage=(1200, 80),
    ),
    reply(tool_calls=[("run", {"command": UNITTEST})], usage=(1400, 20)),
    reply(tool_calls=[("finish", {"answer": "slugify fixed; tests pass"})], usage=(1600, 10)),
]


async def run_task(client: Client, settings: Settings, spec: TaskSpec) -> TaskResult:
    async with build_worker(client, settings):
        handle, _ = await start_task(client, spec, settings.task_queue)
        return await result_of(handle)


async def test_read_edit_run_finish(client: Client, settings: Settings, demo_repo: Path):
    with ScriptedModel() as model:
        model.script(FIX_SCRIPT)
        result = await run_task(client, settings, model_task(demo_repo, model))
        requests = model.requests
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert len(requests) == 4
    # The second call carries the read_file result; every call sends the key, once.
    second = requests[1]["body"]["messages"]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert "def slugify" in tool_msgs[0]["content"]
    assert requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    made = result.attempts[0].make
    assert made.tool_calls == 4 and made.tokens == 1000 + 50 + 1200 + 80 + 1400 + 20 + 1600 + 10
    assert made.cost_usd > 0 and result.cost_usd == made.cost_usd
    assert made.claim == "slugify fixed; tests pass"
    assert "findall" in Path(result.worktree, "slugify.py").read_text()
    # The key appears nowhere Loopwork wrote.
    for path in settings.home.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


async def test_429_then_success_is_retried(client: Client, settings: Settings, demo_repo: Path):
    with ScriptedModel() as model:
        model.script([status(429, headers={"Retry-After": "0"}), drop(), *FIX_SCRIPT])
        result = await run_task(client, settings, model_task(demo_repo, model))
        assert len(model.requests) == 6
    assert result.state == TaskState.DONE_WITH_EVIDENCE


async def test_401_blocks_without_retry(client: Client, settings: Settings, demo_repo: Path):
    with ScriptedModel() as model:
        model.script([status(401), *FIX_SCRIPT])
        result = await run_task(client, settings, model_task(demo_repo, model))
        assert len(model.requests) == 1
    assert result.state == TaskState.BLOCKED
    assert (
        "401" in result.reason and "gpt-4o-mini" in result.reason and "127.0.0.1" in result.reason
    )
    assert KEY not in result.model_dump_json()


async def test_malformed_arguments_go_back_to_the_model(
    client: Client, settings: Settings, demo_repo: Path
):
    with ScriptedModel() as model:
        model.script([reply(tool_calls=[("write_file", "{not json")]), *FIX_SCRIPT])
        result = await run_task(client, settings, model_task(demo_repo, model))
        second = model.requests[1]["body"]["messages"]
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert next(m for m in second if m["role"] == "tool")["content"].startswith("error:")
    assert result.attempts[0].make.tool_calls == 5  # the bad call counts


async def test_escaping_path_blocks(client: Client, settings: Settings, demo_repo: Path):
    with ScriptedModel() as model:
        model.script(
            [
                reply(tool_calls=[("write_file", {"path": "../evil.py", "content": "x"})]),
                *FIX_SCRIPT,
            ]
        )
        result = await run_task(client, settings, model_task(demo_repo, model))
        assert len(model.requests) == 1
    assert result.state == TaskState.BLOCKED and "policy violation" in result.reason
    assert not (demo_repo.parent / "evil.py").exists()


def forever(n: int, usage=(100, 20)) -> list:
    return [reply(tool_calls=[("list_files", {"path": "."})], usage=usage) for _ in range(n)]


@pytest.mark.parametrize(
    ("budget", "calls", "reason"),
    [
        ({"max_tokens": 300}, 3, "token budget spent"),  # 120 per call: stops after 3
        ({"max_cost_usd": 0.00005}, 2, "cost budget spent"),
        ({"max_tool_calls": 4}, 4, "tool-call budget spent"),
    ],
)
async def test_budgets_stop_the_loop(
    client: Client, settings: Settings, demo_repo: Path, budget, calls, reason
):
    with ScriptedModel() as model:
        model.script(forever(10, usage=(100, 20) if "max_cost_usd" not in budget else (200, 20)))
        spec = model_task(
            demo_repo, model, budget={"max_attempts": 3, **budget}, approval_timeout=1
        )
        result = await run_task(client, settings, spec)
        sent = len(model.requests)
    assert sent == calls
    assert result.state == TaskState.BUDGET_EXCEEDED
    assert result.human_escalation[0].reason == reason
    assert len(result.attempts) == 1


async def test_history_per_step_does_not_grow(client: Client, settings: Settings, demo_repo: Path):
    steps = 200
    with ScriptedModel() as model:
        model.script([*forever(steps - 1), FIX_SCRIPT[-1]])
        agent = {
            "backend": "openai",
            "model": "gpt-4o-mini",
            "base_url": model.url,
            "timeout": 110,
            "max_steps": steps + 5,
        }
        spec = model_task(
            demo_repo, model, agent=agent, budget={"max_attempts": 1}, approval_timeout=1
        )
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            result = await result_of(handle)
    assert result.attempts[0].make.tool_calls == steps
    child = client.get_workflow_handle(f"{handle.id}-attempt-1")
    names: dict[int, str] = {}
    per_step: list[int] = []
    total = events = 0
    async for ev in child.fetch_history_events():
        total += ev.ByteSize()
        events += 1
        if ev.HasField("activity_task_scheduled_event_attributes"):
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            names[ev.event_id] = name
            if name == "model_step":
                per_step.append(ev.ByteSize())
        elif ev.HasField("activity_task_completed_event_attributes"):
            done = ev.activity_task_completed_event_attributes
            if names.get(done.scheduled_event_id) == "model_step":
                per_step[-1] += ev.ByteSize()
    assert len(per_step) == steps
    early, late = max(per_step[1:10]), max(per_step[-10:])
    assert late <= early + 64, (early, late)  # O(1) bytes per step, not O(step)
    assert total < 3_000_000, (total, events)  # far below Temporal's 50 MB limit


async def test_kill_9_between_model_calls_pays_nothing_twice(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    slow = [
        reply(tool_calls=[("read_file", {"path": "slugify.py"})]),
        reply(tool_calls=[("run", {"command": "sleep 30"})]),
        *FIX_SCRIPT[1:],
    ]
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "LOOP_HOME": str(settings.home),
        "LOOP_TASK_QUEUE": settings.task_queue,
    }
    log = (tmp_path / "worker.log").open("ab")
    with ScriptedModel() as model:
        model.script(slow)
        spec = model_task(demo_repo, model)
        first = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "worker.py"), env=env, cwd=ROOT, stdout=log, stderr=log
        )
        handle, _ = await start_task(client, spec, settings.task_queue)
        deadline = time.monotonic() + 60
        while len(model.requests) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # inside the `run` tool call, between model calls
        first.send_signal(signal.SIGKILL)
        await first.wait()
        second = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "worker.py"), env=env, cwd=ROOT, stdout=log, stderr=log
        )
        try:
            result = await result_of(handle)
        finally:
            second.send_signal(signal.SIGTERM)
            await second.wait()
        bodies = [json.dumps(r["body"]["messages"], sort_keys=True) for r in model.requests]
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert len(bodies) == len(slow)  # every answered call made exactly once
    assert len(set(bodies)) == len(bodies)


# --------------------------------------------------------------------------- llm_review

FIX_THEN_CHECK_FEEDBACK = """
if attempt > 1:
    fb = json.loads(pathlib.Path(os.environ["LOOP_FEEDBACK_FILE"]).read_text())
    review = [f for f in fb["failed"] if f["gate"] == "review"][0]
    (own / "seen").write_text(review["required_correction"])
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("fixed")
"""


def review_task(repo: Path, model: ScriptedModel, agent: list[str], **kw: object) -> TaskSpec:
    data = task(repo, agent, **kw)
    data["verify"].append(
        {
            "name": "review",
            "llm_review": {
                "rubric": "The fix uses a regular expression.",
                "model": "gpt-4o-mini",
                "base_url": model.url,
            },
        }
    )
    return TaskSpec.model_validate(data)


def verdict(passed: bool, correction: str = "") -> object:
    failures = (
        []
        if passed
        else [
            {
                "requirement": "uses a regex",
                "evidence": "diff line 3",
                "required_correction": correction,
            }
        ]
    )
    return reply(content=json.dumps({"passed": passed, "failures": failures}))


async def test_review_passes(client: Client, settings: Settings, demo_repo: Path, tmp_path):
    agent = write_agent(tmp_path, FIX_THEN_CHECK_FEEDBACK)
    with ScriptedModel() as model:
        model.script([verdict(True)])
        result = await run_task(client, settings, review_task(demo_repo, model, agent))
        asked = model.requests[0]["body"]
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert asked["response_format"] == {"type": "json_object"}
    prompt = asked["messages"][1]["content"]
    assert "The fix uses a regular expression." in prompt and "findall" in prompt
    assert "tests (run): pass" in prompt  # the other gates' evidence, not the maker's chat
    assert result.evidence[-1].name == "review" and result.evidence[-1].passed


async def test_review_failure_is_fed_back(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    agent = write_agent(tmp_path, FIX_THEN_CHECK_FEEDBACK)
    with ScriptedModel() as model:
        model.script([verdict(False, "use re.findall over words"), verdict(True)])
        spec = review_task(demo_repo, model, agent)
        result = await run_task(client, settings, spec)
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert len(result.attempts) == 2
    seen = agent_file(settings, spec.id, 2, "seen").read_text()
    assert "use re.findall over words" in seen


async def test_invalid_review_escalates(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    agent = write_agent(tmp_path, FIX_THEN_CHECK_FEEDBACK)
    with ScriptedModel() as model:
        model.script([reply(content="looks fine to me!")])
        spec = review_task(demo_repo, model, agent, approval_timeout=1)
        result = await run_task(client, settings, spec)
    assert result.state == TaskState.NEEDS_HUMAN  # a checker's shrug is not a pass
    assert result.human_escalation[0].reason == "uncertain checker: review"
    assert result.evidence[-1].uncertain
