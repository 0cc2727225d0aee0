"""Reasons that name the cause, end to end: a gate failing the same way again and again is
named with what it saw; a provider that refuses the key or lacks the model ends the task
BLOCKED before any attempt, in the provider's words; a goal that holds at base waits for a
person at explore, before any attempt."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from loop.contracts import SIGNAL_FEEDBACK, FeedbackSignal, TaskState
from loop.settings import Settings
from tests.support.agents import COMPLETE_FIX, FIX_AT_ONCE, agent_calls, write_agent
from tests.support.model_server import ScriptedModel, reply, status
from tests.support.repos import git
from tests.support.tasks import result_of, start, task, wait_for
from worker import build_worker


async def test_a_gate_failing_alike_names_itself_and_what_it_saw(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """The fix is in slugify.py, the scope allows src/** and tests/** only: three attempts
    fail scope identically, and the reason says so rather than "no new evidence" alone."""
    scope = {"name": "scope", "diff_scope": {"allow": ["src/**", "tests/**"]}}
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), approval_timeout=600)
    spec["verify"] = [spec["verify"][0], scope]
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN, within=120)
        memo = await (await handle.describe()).memo()
        await handle.cancel()
        await result_of(handle)
    cause = "scope failed 3 times: slugify.py outside src/** and tests/**"
    assert st.reason == f"{cause}; no new evidence", st.reason
    assert st.attempt == 3
    assert str(memo["reason"]).startswith(cause)  # what `loop inbox` and the list read


async def test_a_model_the_provider_lacks_blocks_before_any_attempt(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    with ScriptedModel(key="sk-right-0000", models=("gpt-4o-mini",)) as model:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-right-0000")
        spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE))
        spec["agent"] |= {"provider": {"api": "openai", "base_url": model.url}, "model": "gpt-nope"}
        async with build_worker(client, settings):
            r = await result_of(await start(client, settings, spec))
    assert r.state == TaskState.BLOCKED and r.attempts == [], r.reason
    assert f"agent.provider: {model.url} has no model gpt-nope" in r.reason
    assert "404 Not Found): scripted 404 Not Found" in r.reason  # the provider's words
    assert agent_calls(settings, spec["id"]) == [] and model.requests == []


async def test_a_key_the_provider_refuses_blocks_before_any_attempt(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    with ScriptedModel(key="sk-right-0000") as model:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-1111")
        spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE))
        spec["agent"] |= {"provider": {"api": "openai", "base_url": model.url}}
        async with build_worker(client, settings):
            r = await result_of(await start(client, settings, spec))
    assert r.state == TaskState.BLOCKED and r.attempts == [], r.reason
    assert f"{model.url} refused the key in OPENAI_API_KEY (401 Unauthorized)" in r.reason
    assert "scripted 401 Unauthorized" in r.reason and "sk-wrong-1111" not in r.reason
    assert agent_calls(settings, spec["id"]) == []


async def test_a_provider_without_a_model_list_is_not_judged_by_it(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """The cheapest way to fool the check: a server that lists its models but answers a
    model's name with 404 for another reason. Listed models pass without asking; a model
    not listed but found by name passes too (lists are paged); neither spends a call."""
    with ScriptedModel() as model:  # lists "scripted", finds any model by name
        monkeypatch.setenv("OPENAI_API_KEY", "sk-any-0000")
        spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE))
        spec["agent"] |= {"provider": {"api": "openai", "base_url": model.url}, "model": "gpt-x"}
        async with build_worker(client, settings):
            r = await result_of(await start(client, settings, spec))
    assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
    assert len(r.attempts) == 1


async def test_a_goal_met_at_base_waits_at_explore_spending_no_attempt(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """slugify is fixed on main already: every gate passes before any change, so no
    attempt could show a fix. The task asks a person at explore; feedback then lets it go
    on (the goal may be more than its gates say)."""
    (demo_repo / "slugify.py").write_text(COMPLETE_FIX)
    git(demo_repo, "commit", "-qam", "fixed by hand")
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), approval_timeout=600)
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN)
        assert agent_calls(settings, spec["id"]) == []
        await handle.signal(SIGNAL_FEEDBACK, FeedbackSignal(text="check it anyway"))
        r = await result_of(handle)
    assert r.state == TaskState.DONE_WITH_EVIDENCE and len(r.attempts) == 1, r.reason
    assert st.attempt == 0 and st.waiting_for == "feedback/extend_budget/reject"
    assert st.reason.startswith("goal already met at base: every gate passes before any change")
    assert "tests: " in st.reason and "add a test that fails at base" in st.reason


async def test_a_known_cli_without_its_key_is_pointed_at_agent_provider(
    client: Client, settings: Settings, demo_repo: Path, monkeypatch
) -> None:
    """Claude Code run without ``agent.provider`` and without its key: the fix is the
    gateway, never the key in the sandbox."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    spec = task(demo_repo, ["claude", "-p", "fix slugify"])
    async with build_worker(client, settings):
        r = await result_of(await start(client, settings, spec))
    assert r.state == TaskState.BLOCKED and r.attempts == [], r.reason
    assert "the agent needs ANTHROPIC_API_KEY for its model API" in r.reason
    assert "agent.provider ({api: anthropic})" in r.reason and "sandbox.env" not in r.reason


CALLS_ITS_MODEL = """
import urllib.error, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
body = json.dumps({"model": "its-own-default", "messages": [{"role": "user", "content": "go"}]})
req = urllib.request.Request(base + "/chat/completions", data=body.encode(),
                             headers={"Authorization": f"Bearer {key}",
                                      "Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=30).read()
except urllib.error.HTTPError as e:
    print(f"the API said {e.code}", flush=True)
    sys.exit(1)
"""
"""An agent that picks its own model (the task names none, so explore cannot ask about
it): one call, and it gives up on an error, as CLIs do."""


async def test_a_provider_refusing_every_call_of_an_attempt_blocks_in_its_words(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """The model the agent asks for is not there (404 on every call): BLOCKED after that
    one attempt, with what the provider said, rather than attempts spent to a stall."""
    with ScriptedModel() as model:
        model.script([status(404, {"error": {"message": "model its-own-default not found"}})])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-any-0000")
        spec = task(demo_repo, write_agent(tmp_path, CALLS_ITS_MODEL))
        spec["agent"] |= {"provider": {"api": "openai", "base_url": model.url}}
        async with build_worker(client, settings):
            r = await result_of(await start(client, settings, spec))
    assert r.state == TaskState.BLOCKED and len(r.attempts) == 1, r.reason
    assert f"agent.provider: {model.url} answered 404 to every model call" in r.reason
    assert "model its-own-default not found" in r.reason


async def test_a_provider_that_answers_one_call_is_not_refusing(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """The cheapest way to end a task for good by mistake: one 404 among answered calls
    (a side request, a probe). Only every call refused is the provider's final word."""
    probe = CALLS_ITS_MODEL.replace("try:", "try:\n    urllib.request.urlopen(req, timeout=30)")
    with ScriptedModel() as model:
        model.script([reply("fine"), status(404), reply("fine"), status(404)])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-any-0000")
        spec = task(demo_repo, write_agent(tmp_path, probe), budget={"max_attempts": 2})
        spec["agent"] |= {"provider": {"api": "openai", "base_url": model.url}}
        async with build_worker(client, settings):
            handle = await start(client, settings, spec)
            st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN, within=90)
            await handle.cancel()
            await result_of(handle)
    assert st.attempt == 2 and "answered 404 to every" not in st.reason, st.reason
