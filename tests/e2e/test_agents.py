"""The real agent CLIs run the shipped examples against local scripted endpoints.

``examples/claude-code.yaml``, ``aider.yaml`` and ``codex.yaml`` run as shipped: the
test sets only the repository (the demo's), the provider's endpoint and a planted key
in the worker's environment, and picks the sandbox level. Each fixes the demo's bug
after one round of feedback through the worker's model gateway, with its usage
measured there, and the key nowhere in the sandbox. Then
what goes wrong, said where people look, before attempts burn: a missing key, an
endpoint that is down or refuses the key, an agent that is not installed, a gate that
cannot run at base.

A CLI that is not installed skips its tests with the reason; ``.ci/run`` installs all
three (``LOOP_AGENTS_REQUIRED`` turns those skips into failures there).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from loop.contracts import (
    SIGNAL_APPROVE,
    ApproveSignal,
    FinalAction,
    TaskResult,
    TaskSpec,
    TaskState,
)
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agent_endpoints import ScriptedClaude, ScriptedResponses, refuse, turn
from tests.support.agents import COMPLETE_FIX, needs_cli
from tests.support.host import LEVELS
from tests.support.model_server import ScriptedModel, reply
from tests.support.repos import EXAMPLES, ROOT, git
from tests.support.tasks import result_of, wait_for
from worker import build_worker

pytestmark = pytest.mark.timeout(300)

HALF_FIX = 'def slugify(text: str) -> str:\n    return text.lower().replace(" ", "-")\n'
"""Attempt 1's change: still wrong for "Hello, World!" (the tests gate fails)."""


def example(name: str, repo: Path, level: str, endpoint: str, **changes: Any) -> TaskSpec:
    """The shipped example with the test's repository, sandbox level and model endpoint
    (the provider's ``base_url``: the gateway calls it from the worker)."""
    data = yaml.safe_load((EXAMPLES / name).read_text())
    data["id"] = f"{data['id']}-{level}-{os.urandom(3).hex()}"
    data["repo"] = str(repo)
    data["sandbox"]["mode"] = level
    data["agent"]["provider"]["base_url"] = endpoint
    data.update(changes)
    return TaskSpec.model_validate(data)


def assert_key_nowhere(settings: Settings, r: TaskResult, repo: Path, key: str) -> None:
    """The real key stayed in the worker: no file the run left (agent log, HOME, output,
    claim, calls), no commit, nothing in the result has it."""
    run = settings.runs / r.task_id
    leaked = [p for p in run.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert key not in git(repo, "log", "-p", "--all") and key not in r.model_dump_json()
    assert all(a.make is not None and a.make.metered for a in r.attempts)


async def approved(client: Client, spec: TaskSpec, queue: str) -> TaskResult:
    """The examples are ``assisted``: wait for the approval, give it, take the result."""
    handle, _ = await start_task(client, spec, queue)
    st = await wait_for(handle, lambda s: s.state.waiting, within=240)
    assert st.state == TaskState.AWAITING_APPROVAL, (st.state, st.reason)
    await handle.signal(SIGNAL_APPROVE, ApproveSignal(note="looks right"))
    return await result_of(handle, within=60)


def attempt_log(settings: Settings, r: TaskResult, n: int) -> str:
    return (settings.runs / r.task_id / f"attempt-{n}" / "agent.log").read_text()


def assert_fixed_after_feedback(r: TaskResult, repo: Path) -> None:
    assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
    assert r.final_action == FinalAction.MERGED
    first, second = r.attempts
    assert [g.name for g in first.verdict.gates if not g.passed] == ["tests"]
    assert second.verdict.passed and second.feedback is not None
    assert (repo / "slugify.py").read_text() == COMPLETE_FIX
    # Only the fix was committed: no history, cache or settings file of the agent's.
    assert git(repo, "show", "--name-only", "--format=", "main") == "slugify.py"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- Claude Code


def claude_turns(content: str) -> list:
    return [
        turn("Reading the code.", ("Read", {"file_path": "{cwd}/slugify.py"})),
        turn("", ("Write", {"file_path": "{cwd}/slugify.py", "content": content})),
        turn("slugify is fixed."),
    ]


@needs_cli("claude")
@pytest.mark.parametrize("level", LEVELS)
async def test_claude_code_example(
    client: Client, settings: Settings, demo_repo: Path, level: str, monkeypatch
) -> None:
    with ScriptedClaude(*claude_turns(HALF_FIX), *claude_turns(COMPLETE_FIX)) as model:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000")
        spec = example("claude-code.yaml", demo_repo, level, model.url)
        async with build_worker(client, settings):
            r = await approved(client, spec, settings.task_queue)
    assert_fixed_after_feedback(r, demo_repo)
    # The key went to the endpoint from the gateway, and nowhere in the sandbox.
    assert all(req["headers"]["x-api-key"] == "sk-ant-test-0000" for req in model.requests)
    assert_key_nowhere(settings, r, demo_repo, "sk-ant-test-0000")
    # The transcript is in agent.log; tokens are what the endpoint sent, measured by the
    # gateway and priced by the model each answer names.
    log = attempt_log(settings, r, 2)
    assert '"type":"result"' in log and '"name":"Write"' in log
    assert r.tokens == sum(model.usage_sent) == 6 * 1050
    assert r.cost_usd > 0 and all(a.usage.cost_usd > 0 for a in r.attempts)
    # The claim a person reads is Claude Code's final answer, not its stream-json.
    assert [a.make.claim for a in r.attempts if a.make] == ["slugify is fixed."] * 2


@needs_cli("claude")
async def test_a_cost_budget_below_one_call_stops_claude_code(
    client: Client, settings: Settings, demo_repo: Path, monkeypatch
) -> None:
    with ScriptedClaude(*claude_turns(HALF_FIX), *claude_turns(COMPLETE_FIX)) as model:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000")
        spec = example(
            "claude-code.yaml",
            demo_repo,
            "basic",
            model.url,
            budget={"max_attempts": 3, "max_cost_usd": 0.0001},
            approval_timeout=2,
        )
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            r = await result_of(handle, within=180)
    assert r.state == TaskState.BUDGET_EXCEEDED, r.reason
    # Stopped at the gateway: the first call crossed the budget, the next was refused.
    assert r.reason.startswith("cost budget spent during the attempt after 1 calls"), r.reason
    assert len(r.attempts) == 1 and r.cost_usd > 0.0001 and len(model.requests) == 1
    assert "this task's cost budget is spent" in attempt_log(settings, r, 1)


# --------------------------------------------------------------------------- aider


def aider_reply(content: str) -> Any:
    return reply(f"Here it is.\n\nslugify.py\n```python\n{content}```\n")


@needs_cli("aider")
@pytest.mark.parametrize("level", LEVELS)
async def test_aider_example(
    client: Client, settings: Settings, demo_repo: Path, level: str, monkeypatch
) -> None:
    with ScriptedModel() as model:
        model.script([aider_reply(HALF_FIX), aider_reply(COMPLETE_FIX)])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-aider-0000")
        spec = example("aider.yaml", demo_repo, level, model.url)
        async with build_worker(client, settings):
            r = await approved(client, spec, settings.task_queue)
    assert_fixed_after_feedback(r, demo_repo)
    assert len(model.requests) == 2 and all(req["body"]["stream"] for req in model.requests)
    assert all(req["headers"]["authorization"] == "Bearer sk-test-aider-0000"
               for req in model.requests)  # fmt: skip
    assert_key_nowhere(settings, r, demo_repo, "sk-test-aider-0000")
    # The gateway asked the stream for its usage and counted exactly that (10 + 5 a call).
    assert all(req["body"]["stream_options"] == {"include_usage": True} for req in model.requests)
    assert [a.usage.tokens for a in r.attempts] == [15, 15]
    assert all(a.usage.cost_usd > 0 for a in r.attempts)
    assert "Tokens:" in attempt_log(settings, r, 1)
    # The claim is aider's reply, without its banner, file listing or token lines.
    for a in r.attempts:
        assert a.make is not None and a.make.claim.startswith("Here it is."), a.make
        assert "Tokens:" not in a.make.claim and "Aider v" not in a.make.claim


NEW_TEST = """import unittest

from slugify import slugify


class RunsOfPunctuation(unittest.TestCase):
    def test_runs_become_one_hyphen(self):
        self.assertEqual(slugify("a -- b!!"), "a-b")
"""


@needs_cli("aider")
@pytest.mark.parametrize("level", LEVELS)
async def test_aider_adds_a_file_on_its_first_attempt(
    client: Client, settings: Settings, demo_repo: Path, level: str, monkeypatch
) -> None:
    """A fix that needs a new file: aider creates it (its git use never reaches the
    sandbox's read-only index) and its edit of the existing file is kept beside it."""
    answer = (
        f"Here it is.\n\nslugify.py\n```python\n{COMPLETE_FIX}```\n\n"
        f"tests/test_runs.py\n```python\n{NEW_TEST}```\n"
    )
    with ScriptedModel() as model:
        model.script([reply(answer)])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-aider-0000")
        spec = example("aider.yaml", demo_repo, level, model.url)
        async with build_worker(client, settings):
            r = await approved(client, spec, settings.task_queue)
    assert r.state == TaskState.DONE_WITH_EVIDENCE and len(r.attempts) == 1, r.reason
    assert (demo_repo / "tests" / "test_runs.py").read_text() == NEW_TEST
    assert (demo_repo / "slugify.py").read_text() == COMPLETE_FIX
    log = attempt_log(settings, r, 1)
    assert "index.lock" not in log and "Permission denied" not in log, log


# --------------------------------------------------------------------------- Codex

PATCH = """apply_patch <<'EOF'
*** Begin Patch
*** Update File: slugify.py
@@
{lines}
*** End Patch
EOF"""
BUGGY = (EXAMPLES / "demo" / "repo" / "slugify.py").read_text()


def codex_turns(before: str, after: str) -> list:
    """Codex edits through an ``apply_patch`` heredoc (its exec_command runs it)."""
    lines = [f"-{line}" for line in before.splitlines()]
    lines += [f"+{line}" for line in after.splitlines()]
    return [
        turn("Looking.", ("exec_command", {"cmd": "cat slugify.py"})),
        turn("", ("exec_command", {"cmd": PATCH.format(lines="\n".join(lines))})),
        turn("slugify is fixed."),
    ]


@needs_cli("codex")
@pytest.mark.parametrize("level", LEVELS)
async def test_codex_example(
    client: Client, settings: Settings, demo_repo: Path, monkeypatch, level: str
) -> None:
    turns = [*codex_turns(BUGGY, HALF_FIX), *codex_turns(HALF_FIX, COMPLETE_FIX)]
    with ScriptedResponses(*turns) as model:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-codex-0000")
        spec = example("codex.yaml", demo_repo, level, f"{model.url}/v1")
        async with build_worker(client, settings):
            r = await approved(client, spec, settings.task_queue)
    assert_fixed_after_feedback(r, demo_repo)
    assert all(req["headers"]["authorization"] == "Bearer sk-test-codex-0000"
               for req in model.requests)  # fmt: skip
    assert_key_nowhere(settings, r, demo_repo, "sk-test-codex-0000")
    # Measured from response.completed; priced by the model the answers name (gpt-5).
    assert r.tokens == sum(model.usage_sent) == 6 * 1050
    assert r.cost_usd == pytest.approx(6 * (1000 * 1.25 + 50 * 10) / 1e6)
    # The claim is Codex's last agent message, not its JSON events.
    assert [a.make.claim for a in r.attempts if a.make] == ["slugify is fixed."] * 2


# --------------------------------------------------------------------------- failures


async def blocked(client: Client, settings: Settings, spec: TaskSpec) -> TaskResult:
    async with build_worker(client, settings):
        handle, _ = await start_task(client, spec, settings.task_queue)
        return await result_of(handle, within=120)


@needs_cli("claude")
async def test_a_missing_key_blocks_before_any_attempt(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """Said in the --wait output and by loop status, with no attempt spent."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    spec = example("claude-code.yaml", demo_repo, "basic", "http://127.0.0.1:9")
    file = tmp_path / "task.yaml"
    file.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "LOOP_TASK_QUEUE": settings.task_queue,
        "LOOP_HOME": str(settings.home),
    }
    loop = str(Path(sys.executable).parent / "loop")
    async with build_worker(client, settings):
        waited = await asyncio.create_subprocess_exec(
            loop, "start", str(file), "--wait", env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(waited.communicate(), 120)
        status = await asyncio.create_subprocess_exec(
            loop, "status", spec.id, env=env, stdout=asyncio.subprocess.PIPE
        )
        shown, _ = await asyncio.wait_for(status.communicate(), 60)
    reason = "ANTHROPIC_API_KEY is not set where the worker runs"
    assert waited.returncode == 1 and "BLOCKED" in out.decode() and reason in out.decode()
    assert "BLOCKED" in shown.decode() and reason in shown.decode()
    assert "attempts: 0" in out.decode()


@needs_cli("claude")
async def test_an_endpoint_that_is_down_blocks_before_any_attempt(
    client: Client, settings: Settings, demo_repo: Path, monkeypatch
) -> None:
    port = closed_port()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000")
    settings = settings.model_copy(update={"endpoint_wait": 2.0})
    r = await blocked(client, settings, example("claude-code.yaml", demo_repo, "basic",
                                                 f"http://127.0.0.1:{port}"))  # fmt: skip
    assert r.state == TaskState.BLOCKED and r.attempts == []
    assert f"http://127.0.0.1:{port} did not answer for 2 s" in r.reason


@needs_cli("claude")
async def test_a_key_refused_at_its_model_list_blocks_before_any_attempt(
    client: Client, settings: Settings, demo_repo: Path, monkeypatch
) -> None:
    """The example as shipped, its endpoint taking another key: explore asks the model
    list with the worker's key, and the task ends BLOCKED before Claude Code runs."""
    with ScriptedClaude(key="sk-ant-right") as model:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
        r = await blocked(
            client, settings, example("claude-code.yaml", demo_repo, "basic", model.url)
        )
    assert r.state == TaskState.BLOCKED and r.attempts == [], r.reason
    assert f"{model.url} refused the key in ANTHROPIC_API_KEY (401 Unauthorized)" in r.reason
    assert "scripted 401" in r.reason and model.requests == []  # no model call was made


@needs_cli("claude")
async def test_an_endpoint_that_refuses_the_key_blocks_after_one_attempt(
    client: Client, settings: Settings, demo_repo: Path, monkeypatch
) -> None:
    with ScriptedClaude(*[refuse(401)] * 10) as model:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
        r = await blocked(
            client, settings, example("claude-code.yaml", demo_repo, "basic", model.url)
        )
    assert r.state == TaskState.BLOCKED, r.reason
    assert len(r.attempts) == 1 and r.attempts[0].verdict is None
    # The gateway saw every call refused: the provider's own words, where the log is.
    assert f"agent.provider: {model.url} answered 401 to every model call" in r.reason
    assert "scripted 401" in r.reason and "(log: " in r.reason


async def test_an_agent_that_is_not_installed_blocks_before_any_attempt(
    client: Client, settings: Settings, demo_repo: Path
) -> None:
    """As the agent guides' sh -c form: `sh` runs, the agent it names is nowhere."""
    spec = TaskSpec.model_validate(
        {**yaml.safe_load((EXAMPLES / "claude-code.yaml").read_text()),
         "repo": str(demo_repo), "budget": {"max_attempts": 3},
         "agent": {"command": ["sh", "-c", 'no-such-agent-cli -p "$(cat "$LOOP_PROMPT_FILE")"']},
         "sandbox": {"mode": "basic"}}
    )  # fmt: skip
    r = await blocked(client, settings, spec)
    assert r.state == TaskState.BLOCKED and r.attempts == []
    assert "runs `no-such-agent-cli`, which the task's uid cannot find" in r.reason


async def test_a_gate_that_cannot_run_at_base_blocks_before_any_attempt(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/sh\nexit 0\n")
    agent.chmod(0o755)
    spec = TaskSpec.model_validate(
        {"id": f"t-{os.urandom(3).hex()}", "goal": "fix slugify", "repo": str(demo_repo),
         "agent": {"command": [str(agent)]},
         "verify": [{"name": "tests", "run": "no-such-test-runner -q"}],
         "sandbox": {"mode": "basic"}}
    )  # fmt: skip
    r = await blocked(client, settings, spec)
    assert r.state == TaskState.BLOCKED and r.attempts == []
    assert r.reason.startswith(
        "prepare_and_explore failed: gate tests: `no-such-test-runner -q` runs"
    )


# --------------------------------------------------------------------------- budgets


@pytest.mark.parametrize(
    "cli",
    [
        pytest.param("claude", marks=needs_cli("claude")),
        pytest.param("codex", marks=needs_cli("codex")),
    ],
)
async def test_a_token_budget_stops_the_cli_at_the_call_that_crossed_it(
    client: Client, settings: Settings, demo_repo: Path, monkeypatch, cli: str
) -> None:
    """1500 tokens, 1050 a call: the second call crosses it, the third is refused in the
    provider's own error shape, and the CLI stops; the attempt is not judged."""
    if cli == "claude":
        scripted: Any = ScriptedClaude(*claude_turns(COMPLETE_FIX))
        name, variable, url = "claude-code.yaml", "ANTHROPIC_API_KEY", ""
    else:
        scripted = ScriptedResponses(*codex_turns(BUGGY, COMPLETE_FIX))
        name, variable, url = "codex.yaml", "OPENAI_API_KEY", "/v1"
    with scripted as model:
        monkeypatch.setenv(variable, "sk-test-budget-0000")
        limits = {"max_attempts": 3, "max_tokens": 1500}
        spec = example(name, demo_repo, "basic", model.url + url, budget=limits, approval_timeout=2)
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            r = await result_of(handle, within=180)
    assert r.state == TaskState.BUDGET_EXCEEDED, r.reason
    assert r.reason.startswith("token budget spent during the attempt after 2 calls"), r.reason
    assert len(model.requests) == 2 and r.tokens == 2100  # over by less than one call
    assert len(r.attempts) == 1 and r.attempts[0].verdict is None
