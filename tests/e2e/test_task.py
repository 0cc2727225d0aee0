"""End to end on the real dev server: real git repositories, real subprocess agents."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueKind
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from loop.contracts import (
    QUERY_TRACE,
    SIGNAL_APPROVE,
    SIGNAL_EXTEND_BUDGET,
    SIGNAL_REJECT,
    ExtendBudgetSignal,
    FinalAction,
    RejectSignal,
    TaskResult,
    TaskState,
)
from loop.settings import Settings
from tests.support.agents import (
    COMPLETE_FIX,
    FIX_AT_ONCE,
    PASS_ON_SECOND,
    agent_calls,
    write_agent,
)
from tests.support.repos import git
from tests.support.tasks import result_of, start, task, wait_for
from worker import WORKFLOWS, build_worker

pytestmark = pytest.mark.timeout(120)


async def test_pass_after_feedback(client: Client, settings: Settings, demo_repo: Path, tmp_path):
    agent = write_agent(tmp_path, PASS_ON_SECOND)
    spec = task(demo_repo, agent)
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert [a.verdict.passed for a in result.attempts] == [False, True]
    assert result.final_action == FinalAction.LEFT_IN_WORKTREE
    calls = agent_calls(settings, spec["id"])
    assert [c["attempt"] for c in calls] == [1, 2]
    assert calls[0]["feedback"] is None and calls[1]["feedback"].endswith("feedback.json")
    # The feedback reached the prompt of attempt 2, structured, with the failing evidence.
    prompt = Path(settings.runs / spec["id"] / "attempt-2" / "prompt.md").read_text()
    assert "Feedback from attempt 1" in prompt and "Failed: tests" in prompt
    assert result.attempts[1].feedback.failed[0].evidence.exit_code == 1
    assert "scope" in result.attempts[1].feedback.passing
    # The verified change is in the worktree's branch, not in base.
    assert "findall" in Path(result.worktree, "slugify.py").read_text()
    assert "findall" not in (demo_repo / "slugify.py").read_text()
    trace = Path(result.trace_path)
    assert (
        trace.exists() and TaskResult.model_validate_json(trace.read_text()).state == result.state
    )
    assert f"## {spec['id']}: DONE_WITH_EVIDENCE" in settings.notes.read_text()


DISTINCT_FAILURES_THEN_PASS = """
if attempt < 3:
    pathlib.Path("slugify.py").write_text(f"def slugify(t):\\n    return 'wrong{attempt}'\\n")
else:
    pathlib.Path("slugify.py").write_text(COMPLETE)
"""


async def test_attempts_exhausted_then_extend(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    agent = write_agent(tmp_path, DISTINCT_FAILURES_THEN_PASS)
    spec = task(demo_repo, agent, budget={"max_attempts": 2, "max_stalled_attempts": 5})
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN)
        # The cause first (the gate that failed, how often), then why the loop stopped.
        assert st.reason.startswith("tests failed 2 times: ") and st.attempt == 2
        assert st.reason.endswith("; attempts exhausted")
        assert st.waiting_for == "feedback/extend_budget/reject"
        assert st.budget.left.attempts == 0
        await handle.signal(SIGNAL_EXTEND_BUDGET, ExtendBudgetSignal(attempts=1))
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert len(result.attempts) == 3
    assert result.human_escalation[0].resolved_by == "extend"
    inbox = (settings.home / "inbox.jsonl").read_text()
    assert "attempts exhausted" in inbox and f"loop extend {spec['id']}" in inbox


TOUCH_PROTECTED = """
try:
    pathlib.Path("tests/test_slugify.py").write_text("# tests gone\\n")
except OSError as e:
    out.write_text(f"refused: {e}")
pathlib.Path("tests/test_slugify_more.py").write_text("# a new file under the protect glob\\n")
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


async def test_protected_path_blocks_at_once(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    """A protected file stays read-only to the agent; a new one matching the glob blocks."""
    agent = write_agent(tmp_path, TOUCH_PROTECTED)
    spec = task(demo_repo, agent)
    spec["verify"][1]["diff_scope"]["protect"] = ["tests/test_slugify*.py"]
    before = (demo_repo / "tests" / "test_slugify.py").read_text()
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        result = await result_of(handle)
    assert result.state == TaskState.BLOCKED
    assert "protected path touched: tests/test_slugify_more.py" in result.reason
    assert result.attempts[0].make.claim.startswith("refused: ")
    assert Path(result.worktree, "tests", "test_slugify.py").read_text() == before
    assert len(result.attempts) == 1 and len(agent_calls(settings, spec["id"])) == 1


async def test_assisted_approve_merges_into_base(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    agent = write_agent(tmp_path, FIX_AT_ONCE)
    base_before = git(demo_repo, "rev-parse", "main")
    async with build_worker(client, settings):
        handle = await start(client, settings, task(demo_repo, agent, autonomy="assisted"))
        st = await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        assert st.waiting_for == "approve/reject"
        assert git(demo_repo, "rev-parse", "main") == base_before  # nothing merged yet
        await handle.signal(SIGNAL_APPROVE, {"note": "looks right", "extra": "ignored"})
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert result.final_action == FinalAction.MERGED
    assert git(demo_repo, "rev-parse", "main") == result.commit != base_before
    assert "findall" in (demo_repo / "slugify.py").read_text()  # checked-out base updated
    assert git(demo_repo, "status", "--porcelain") == ""
    assert not Path(result.worktree).exists()  # a merged, clean worktree is removed


async def test_reject_ends_rejected(client: Client, settings: Settings, demo_repo: Path, tmp_path):
    agent = write_agent(tmp_path, FIX_AT_ONCE)
    base_before = git(demo_repo, "rev-parse", "main")
    async with build_worker(client, settings):
        handle = await start(client, settings, task(demo_repo, agent, autonomy="assisted"))
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        await handle.signal(SIGNAL_REJECT, RejectSignal(reason="not this way"))
        result = await result_of(handle)
    assert result.state == TaskState.REJECTED and result.reason == "not this way"
    assert git(demo_repo, "rev-parse", "main") == base_before
    assert Path(result.worktree).exists()  # the rejected work is kept for inspection


async def test_unattended_merges_without_waiting(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    agent = write_agent(tmp_path, FIX_AT_ONCE)
    async with build_worker(client, settings):
        handle = await start(client, settings, task(demo_repo, agent, autonomy="unattended"))
        result = await result_of(handle)
    assert result.final_action == FinalAction.MERGED
    assert not [e for e in result.events if e.kind == "waiting"]
    assert "findall" in (demo_repo / "slugify.py").read_text()


SLOW = """
pathlib.Path("slugify.py").write_text(COMPLETE)
pathlib.Path(str(out) + ".pid").write_text(str(os.getpid()))
time.sleep(60)
"""


async def test_cancel_during_make_kills_agent_and_keeps_worktree(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    agent = write_agent(tmp_path, SLOW)
    spec = task(demo_repo, agent)
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.phase == "make")
        pid_file = settings.runs / spec["id"] / "attempt-1" / "agent" / "output.md.pid"
        deadline = time.monotonic() + 20
        while not pid_file.exists():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        pid = int(pid_file.read_text())
        await handle.cancel()
        result = await result_of(handle)
        trace = await handle.query(QUERY_TRACE, result_type=TaskResult)
    assert trace.state == TaskState.CANCELLED
    assert result.state == TaskState.CANCELLED
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert Path(result.worktree).exists()
    assert Path(result.trace_path).exists()


async def test_two_tasks_on_one_repo_do_not_disturb_each_other(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    a = write_agent(
        tmp_path,
        'pathlib.Path("slugify.py").write_text(COMPLETE)\n'
        'pathlib.Path("notes").mkdir(exist_ok=True)\n'
        'pathlib.Path("notes/a.txt").write_text("a")\n',
    )
    b = write_agent(
        tmp_path,
        'pathlib.Path("slugify.py").write_text(COMPLETE)\n'
        'pathlib.Path("notes").mkdir(exist_ok=True)\n'
        'pathlib.Path("notes/b.txt").write_text("b")\n',
    )
    async with build_worker(client, settings):
        ha = await start(client, settings, task(demo_repo, a))
        hb = await start(client, settings, task(demo_repo, b))
        ra, rb = await asyncio.gather(result_of(ha), result_of(hb))
    assert ra.state == rb.state == TaskState.DONE_WITH_EVIDENCE
    assert sorted(ra.attempts[0].make.changed_files) == ["notes/a.txt", "slugify.py"]
    assert sorted(rb.attempts[0].make.changed_files) == ["notes/b.txt", "slugify.py"]
    assert ra.worktree != rb.worktree


async def test_max_seconds_timer_cancels_the_running_agent(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    agent = write_agent(tmp_path, SLOW)
    spec = task(demo_repo, agent, budget={"max_attempts": 3, "max_seconds": 3})
    started = time.monotonic()
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        result = await result_of(handle)
    took = time.monotonic() - started
    assert result.state == TaskState.BUDGET_EXCEEDED
    assert result.reason == "wall-clock budget of 3 s spent"
    assert took < 15  # the 60 s agent was cut short, not waited for
    pid = int((settings.runs / spec["id"] / "attempt-1" / "agent" / "output.md.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text()
    assert 3 <= result.execution_seconds < 10
    assert len(result.attempts) == 1 and result.attempts[0].verdict is None


# --------------------------------------------------------------------------- no workflow cache


FAIL_THEN_PASS = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
else:
    pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text(f"attempt {attempt}")
"""


@pytest.mark.timeout(120)
async def test_full_task_without_a_workflow_cache(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """max_cached_workflows=0: every workflow task rebuilds the workflow from its history
    (the recorded histories replay in tests/workflow/test_replay.py)."""
    spec = task(demo_repo, write_agent(tmp_path, FAIL_THEN_PASS))
    async with build_worker(client, settings, max_cached_workflows=0):
        handle = await start(client, settings, spec)
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert len(result.attempts) == 2
    assert [a.verdict.passed for a in result.attempts if a.verdict] == [False, True]
    history = await handle.fetch_history()
    # No workflow task went to a sticky queue: none found the workflow in a cache.
    sticky = [
        e
        for e in history.events
        if e.HasField("workflow_task_scheduled_event_attributes")
        and e.workflow_task_scheduled_event_attributes.task_queue.kind
        == TaskQueueKind.TASK_QUEUE_KIND_STICKY
    ]
    assert not sticky
    # And the run it left behind replays as well.
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(history)
    assert replayed.replay_failure is None


SAYS_AS_CLAUDE = """#!/usr/bin/python3
import json, os, pathlib
print(json.dumps({"type": "result", "is_error": False, "result": "said as its final message"}))
if os.environ.get("WRITE_OUTPUT"):
    pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).write_text("written to the output file")
pathlib.Path("slugify.py").write_text(%r)
"""


class _Answers(BaseHTTPRequestHandler):
    """An endpoint that answers anything (the explore's pre-flight asks only that)."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_POST = do_GET


@pytest.mark.parametrize("writes", [True, False], ids=["output-file", "final-message"])
async def test_the_claim_is_the_output_file_else_a_known_clis_final_message(
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    writes: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program Loopwork knows by name (here one called ``claude``, printing Claude Code's
    ``result`` event): its final message is the claim, unless it wrote LOOP_OUTPUT_FILE,
    which the protocol makes the claim (and what ``contains`` reads) whenever it is there."""
    named = tmp_path / "claude"
    named.write_text(SAYS_AS_CLAUDE % COMPLETE_FIX)
    named.chmod(0o755)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{server.server_port}")
    command = ["env", "WRITE_OUTPUT=1", str(named)] if writes else [str(named)]
    spec = task(demo_repo, command)
    spec["sandbox"] = {
        "env": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
        "allow_hosts": [f"127.0.0.1:{server.server_port}"],
    }
    spec["verify"].append({"name": "answer", "contains": ["written" if writes else "final"]})
    try:
        async with build_worker(client, settings):
            r = await result_of(await start(client, settings, spec))
    finally:
        server.shutdown()
    assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
    made = r.attempts[0].make
    assert made is not None
    wanted = "written to the output file" if writes else "said as its final message"
    assert made.claim == wanted


SECOND_RUN = """
import pathlib
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.upper()\\n")
    out.write_text("second run, first try")
else:
    pathlib.Path("slugify.py").write_text(COMPLETE + "\\n# the second run's fix\\n")
    out.write_text("second run, fixed")
"""


async def test_a_rerun_judges_only_its_own_commits(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """Two attempts, twice, with another agent the second time: the rerun's attempt 2
    starts from the rerun's attempt 1, and nothing of the first run's folder is read."""
    spec = task(demo_repo, write_agent(tmp_path, PASS_ON_SECOND))
    async with build_worker(client, settings):
        first = await result_of(await start(client, settings, spec))
        again = dict(spec, agent={"command": write_agent(tmp_path, SECOND_RUN)})
        second = await result_of(await start(client, settings, again, rerun=True))
    assert first.state == second.state == TaskState.DONE_WITH_EVIDENCE, second.reason
    made = [a.make for a in second.attempts]
    assert made[0] is not None and made[1] is not None
    earlier = {a.make.commit for a in first.attempts if a.make is not None}
    assert made[1].start_commit == made[0].commit, "attempt 2 starts where attempt 1 ended"
    assert not ({m.commit for m in made} | {m.start_commit for m in made}) & earlier
    kept = list(settings.runs.glob(f"{spec['id']}.prev-*"))
    assert len(kept) == 1 and (kept[0] / "attempt-2" / "start_commit").is_file()
    run = settings.runs / spec["id"]
    assert (run / "attempt-2" / "start_commit").read_text().strip() == made[0].commit
    clone = settings.worktrees / spec["id"]
    judged = git(clone, "show", f"{second.attempts[1].verdict.artifact}:slugify.py")
    assert "the second run's fix" in judged


async def test_a_start_beside_its_own_worker_is_eager(
    client: Client, settings: Settings, demo_repo: Path, tmp_path
):
    """``loop demo``'s start: its worker shares the client, so the first workflow task comes
    back with the start (no poll round trip) and the task runs as any other. Asked for
    without a worker of this client in the process, the start is an ordinary one."""
    from loop.contracts import TaskSpec
    from loop.tasks import start_task

    agent = write_agent(tmp_path, FIX_AT_ONCE)
    alone = TaskSpec.model_validate(task(demo_repo, agent))
    handle, _ = await start_task(client, alone, settings.task_queue, eager=True)
    assert getattr(handle, "__temporal_eagerly_started") is False  # nobody here to take it
    async with build_worker(client, settings):
        assert (await result_of(handle)).state == TaskState.DONE_WITH_EVIDENCE
        beside = TaskSpec.model_validate(task(demo_repo, agent))
        handle, _ = await start_task(client, beside, settings.task_queue, eager=True)
        assert getattr(handle, "__temporal_eagerly_started") is True
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
