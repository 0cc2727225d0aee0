"""Budgets and waits that take hours, on the time-skipping test server, with fake activities.

The activities are fakes registered under the real wire names (the workflow cannot
tell): what is under test here is the workflow's timers, not git or agents. The
time-skipping server cannot register custom search attributes, so the workflow's
upserts are recorded instead of sent (the real-server tests cover them for real).

The ``max_seconds`` timer is tested on the real dev server (e2e/test_task.py): the
time-skipping server does not advance time while an activity runs, and racing a
running activity is exactly what that timer is for.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.answers import AnswerActivities
from activities.slack import SlackActivities
from loop.contracts import (
    COMMIT,
    ESCALATE,
    EXPLORE,
    MAKE,
    MERGE,
    PREPARE_AND_EXPLORE,
    PREPARE_WORKSPACE,
    QUERY_STATUS,
    REMOVE_WORKSPACE,
    REPORT_USAGE,
    RESERVE_BUDGET,
    SIGNAL_EXTEND_BUDGET,
    SIGNAL_REJECT,
    SUMMARIZE,
    TASK_WORKFLOW,
    VERIFY,
    CommitInput,
    CommitResult,
    EscalateInput,
    EscalateResult,
    Evidence,
    ExploreInput,
    ExploreResult,
    ExtendBudgetSignal,
    FinalAction,
    GateResult,
    MakeInput,
    MakeResult,
    MergeInput,
    MergeResult,
    Prepared,
    PrepareExploreInput,
    PrepareInput,
    RejectSignal,
    RemoveInput,
    RemoveResult,
    ReportUsageInput,
    ReportUsageResult,
    ReserveBudgetInput,
    ReserveReply,
    SummarizeInput,
    SummarizeResult,
    TaskResult,
    TaskSpec,
    TaskState,
    TaskStatus,
    Verdict,
    VerifyInput,
    Workspace,
)
from loop.settings import Settings
from tests.support.repos import ROOT
from tests.support.slack import TOKEN as SLACK_TOKEN
from tests.support.slack import SlackStandIn, serving
from tests.support.tasks import result_of
from workflows import task as task_module
from workflows.task import TaskWorkflow

pytestmark = pytest.mark.timeout(120)
TEST_SERVER = ROOT / ".venv" / "bin" / "temporal-test-server"


class Fakes:
    """Scripted activities: verify passes from attempt ``pass_from``; make may hang."""

    def __init__(
        self,
        *,
        pass_from: int = 1,
        hang: bool = False,
        merge_ok: bool = True,
        same_failure: bool = False,
    ) -> None:
        self.pass_from, self.hang, self.merge_ok = pass_from, hang, merge_ok
        self.same_failure = same_failure
        self.escalate_delay = 0.0
        self.slack: Settings | None = None
        self.make_started = False
        self.make_cancelled = False
        self.escalations: list[EscalateInput] = []

    @activity.defn(name=PREPARE_WORKSPACE.name)
    async def prepare(self, inp: PrepareInput) -> Workspace:
        return Workspace(
            task_id=inp.task_id,
            repo=inp.repo,
            path="/wt",
            branch="loop/x",
            base_ref="main",
            base_commit="b" * 40,
            run_dir="/runs/x",
        )

    @activity.defn(name=EXPLORE.name)
    async def explore(self, inp: ExploreInput) -> ExploreResult:
        return ExploreResult(
            brief="brief", brief_path="/runs/x/brief.md", files=1, reproducer=Verdict(passed=False)
        )

    @activity.defn(name=PREPARE_AND_EXPLORE.name)
    async def prepare_and_explore(self, inp: PrepareExploreInput) -> Prepared:
        ws = await self.prepare(inp.prepare)
        explored = await self.explore(ExploreInput(task=inp.task, workspace=ws))
        return Prepared(workspace=ws, explored=explored)

    @activity.defn(name=MAKE.name)
    async def make(self, inp: MakeInput) -> MakeResult:
        if self.hang:
            self.make_started = True
            try:
                while True:
                    activity.heartbeat()
                    await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                self.make_cancelled = True
                raise
        return MakeResult(attempt=inp.attempt, commit=f"c{inp.attempt}", exit_code=0)

    @activity.defn(name=VERIFY.name)
    async def verify(self, inp: VerifyInput) -> Verdict:
        ok = inp.attempt >= self.pass_from
        tail = "FAILED test_x" if self.same_failure else f"FAILED test_{inp.attempt}"
        gate = GateResult(
            name="tests",
            kind="run",
            passed=ok,
            evidence=Evidence(exit_code=0 if ok else 1, output_tail=tail),
        )
        return Verdict(passed=ok, gates=[gate], artifact=inp.make.commit)

    @activity.defn(name=COMMIT.name)
    async def commit(self, inp: CommitInput) -> CommitResult:
        return CommitResult(branch="loop/x", commit="d" * 40)

    @activity.defn(name=MERGE.name)
    async def merge(self, inp: MergeInput) -> MergeResult:
        if self.merge_ok:
            return MergeResult(merged=True, commit="e" * 40, how="fast-forward")
        return MergeResult(merged=False, reason="base checkout has uncommitted changes: a.py")

    @activity.defn(name=REMOVE_WORKSPACE.name)
    async def remove(self, inp: RemoveInput) -> RemoveResult:
        return RemoveResult(removed=True)

    @activity.defn(name=ESCALATE.name)
    async def escalate(self, inp: EscalateInput) -> EscalateResult:
        self.escalations.append(inp)
        await asyncio.sleep(self.escalate_delay)  # a slow webhook
        return EscalateResult()

    @activity.defn(name=SUMMARIZE.name)
    async def summarize(self, inp: SummarizeInput) -> SummarizeResult:
        return SummarizeResult(trace_path="/runs/x.json", notes_path="/notes.md")

    @activity.defn(name=RESERVE_BUDGET.name)
    async def reserve(self, inp: ReserveBudgetInput) -> ReserveReply:
        return ReserveReply(granted=True)

    @activity.defn(name=REPORT_USAGE.name)
    async def report(self, inp: ReportUsageInput) -> ReportUsageResult:
        return ReportUsageResult(counted=False)

    def all(self) -> list:
        # The real check of answers, on a worker without an answer key: unsigned answers
        # are taken (and traced as unsigned), as on a worker with no LOOP_ANSWER_KEY_FILE.
        checker = AnswerActivities(Settings(home=Path(tempfile.mkdtemp()))).check_answer
        # The real Slack steps: of a worker without Slack (they post nothing), unless a test
        # points them at the Slack stand-in.
        slack = SlackActivities(self.slack or Settings(home=Path(tempfile.mkdtemp())))
        return [
            checker,
            slack.slack_post,
            slack.slack_close,
            self.prepare,
            self.explore,
            self.prepare_and_explore,
            self.make,
            self.verify,
            self.commit,
            self.merge,
            self.remove,
            self.escalate,
            self.summarize,
            self.reserve,
            self.report,
        ]


@pytest.fixture(autouse=True)
def published(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The LoopState values the workflow publishes, in order."""
    states: list[str] = []

    def record(updates: list) -> None:
        states.extend(u.value for u in updates if u.key.name == "LoopState")

    monkeypatch.setattr(task_module.workflow, "upsert_search_attributes", record)
    return states


@pytest_asyncio.fixture(scope="module")
async def skipping() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=str(TEST_SERVER)
    ) as e:
        yield e


def spec(**overrides: object) -> TaskSpec:
    data: dict = {
        "id": f"t-{uuid.uuid4().hex[:8]}",
        "goal": "make it so",
        "repo": "/repo",
        "base": "main",
        "agent": {"command": ["true"], "timeout": 7200},
        "verify": [{"name": "tests", "run": "true"}],
        "budget": {"max_attempts": 2, "max_stalled_attempts": 5},
    }
    data.update(overrides)
    return TaskSpec.model_validate(data)


def worker(client: Client, queue: str, fakes: Fakes) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=[TaskWorkflow],
        activities=fakes.all(),
        workflow_runner=UnsandboxedWorkflowRunner(),
    )


async def run(client: Client, fakes: Fakes, s: TaskSpec) -> tuple[WorkflowHandle, TaskResult]:
    queue = f"q-{uuid.uuid4().hex[:6]}"
    async with worker(client, queue, fakes):
        handle = await client.start_workflow(
            TASK_WORKFLOW, s, id=f"task-{s.id}", task_queue=queue, result_type=TaskResult
        )
        return handle, await result_of(handle)


async def test_needs_human_times_out_as_budget_exceeded(
    skipping: WorkflowEnvironment, published: list[str]
):
    fakes = Fakes(pass_from=99)
    s = spec(approval_timeout=3 * 86400)
    _, result = await run(skipping.client, fakes, s)
    assert result.state == TaskState.BUDGET_EXCEEDED
    assert published[0] == "RUNNING" and "NEEDS_HUMAN" in published
    assert published[-1] == "BUDGET_EXCEEDED"
    # The reason names the gate that kept failing before the budget that ran out.
    assert result.reason.startswith("tests failed 2 times: ")
    assert "; attempts exhausted; no answer within approval_timeout" in result.reason
    assert len(result.attempts) == 2
    assert result.human_escalation[0].resolved_by == "timeout"
    assert fakes.escalations[0].waiting_for == "feedback/extend_budget/reject"
    # Three days parked on a person are not charged to the wall clock.
    assert result.execution_seconds < 60


async def test_awaiting_approval_times_out_with_branch_ready(skipping: WorkflowEnvironment):
    fakes = Fakes(pass_from=1)
    _, result = await run(skipping.client, fakes, spec(autonomy="assisted"))
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert result.final_action == FinalAction.BRANCH_READY
    assert fakes.escalations[0].state == TaskState.AWAITING_APPROVAL


async def test_unmergeable_waits_then_ends_needs_human(skipping: WorkflowEnvironment):
    fakes = Fakes(pass_from=1, merge_ok=False)
    _, result = await run(skipping.client, fakes, spec(autonomy="unattended"))
    assert result.state == TaskState.NEEDS_HUMAN
    assert "uncommitted changes" in result.reason
    assert result.final_action == FinalAction.BRANCH_READY


async def test_stall_stops_early_with_no_new_evidence(skipping: WorkflowEnvironment):
    fakes = Fakes(pass_from=99, same_failure=True)
    s = spec(budget={"max_attempts": 5, "max_stalled_attempts": 2}, approval_timeout=60)
    _, result = await run(skipping.client, fakes, s)
    assert len(result.attempts) == 2  # stopped at the second identical failure, not the fifth
    said = result.human_escalation[0].reason
    assert said == "tests failed 2 times: FAILED test_x; no new evidence"
    assert result.state == TaskState.BUDGET_EXCEEDED


async def test_status_while_waiting(skipping: WorkflowEnvironment):
    fakes = Fakes(pass_from=99)
    s = spec(approval_timeout=10 * 86400)
    queue = f"q-{uuid.uuid4().hex[:6]}"
    client = skipping.client
    async with worker(client, queue, fakes):
        handle = await client.start_workflow(
            TASK_WORKFLOW, s, id=f"task-{s.id}", task_queue=queue, result_type=TaskResult
        )
        with skipping.auto_time_skipping_disabled():
            for _ in range(100):
                st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
                if st.state == TaskState.NEEDS_HUMAN:
                    break
                await asyncio.sleep(0.05)
        assert st.state == TaskState.NEEDS_HUMAN and st.phase is None
        assert st.budget.used.attempts == 2 and st.budget.left.attempts == 0
        await skipping.sleep(timedelta(days=11))
        result = await result_of(handle)
    assert result.state == TaskState.BUDGET_EXCEEDED


async def test_answer_sent_while_the_escalation_is_sent_is_not_lost(skipping: WorkflowEnvironment):
    fakes = Fakes(pass_from=99)
    fakes.escalate_delay = 1.0
    s = spec(approval_timeout=10 * 86400)
    queue = f"q-{uuid.uuid4().hex[:6]}"
    client = skipping.client
    async with worker(client, queue, fakes):
        handle = await client.start_workflow(
            TASK_WORKFLOW, s, id=f"task-{s.id}", task_queue=queue, result_type=TaskResult
        )
        with skipping.auto_time_skipping_disabled():
            for _ in range(100):
                if fakes.escalations:
                    break
                await asyncio.sleep(0.02)
            assert fakes.escalations  # escalate is running, its webhook still busy
            await handle.signal(SIGNAL_REJECT, RejectSignal(reason="stop"))
            result = await result_of(handle, within=20)
    assert result.state == TaskState.REJECTED and result.reason == "stop"


async def waiting(skipping: WorkflowEnvironment, handle: WorkflowHandle, after: int) -> TaskStatus:
    """The status once the task waits in NEEDS_HUMAN with ``after`` attempts made."""
    with skipping.auto_time_skipping_disabled():
        for _ in range(200):
            st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
            if st.state == TaskState.NEEDS_HUMAN and st.attempt == after:
                return st
            await asyncio.sleep(0.05)
    raise AssertionError(f"never waited after {after} attempts: {st}")


async def test_extend_adds_to_limits_and_leaves_no_limit_alone(skipping: WorkflowEnvironment):
    fakes = Fakes(pass_from=99)
    s = spec(budget={"max_attempts": 1, "max_tokens": 100}, approval_timeout=10 * 86400)
    queue = f"q-{uuid.uuid4().hex[:6]}"
    client = skipping.client
    async with worker(client, queue, fakes):
        handle = await client.start_workflow(
            TASK_WORKFLOW, s, id=f"task-{s.id}", task_queue=queue, result_type=TaskResult
        )
        before = await waiting(skipping, handle, 1)
        more = ExtendBudgetSignal(attempts=1, seconds=60, tokens=50, cost_usd=0.5)
        await handle.signal(SIGNAL_EXTEND_BUDGET, more)
        after = await waiting(skipping, handle, 2)
        await handle.signal(SIGNAL_REJECT, RejectSignal(reason="enough"))
        await result_of(handle)
    assert (before.budget.left.seconds, before.budget.left.cost_usd) == (None, None)
    assert before.budget.left.tokens == 100
    # Tokens had a limit: 50 more. Time and cost had none, and still have none.
    assert after.budget.left.tokens == 150
    assert (after.budget.left.seconds, after.budget.left.cost_usd) == (None, None)
    assert after.budget.left.attempts == 0 and after.budget.used.attempts == 2


async def test_a_wait_that_times_out_leaves_no_live_button_in_slack(
    skipping: WorkflowEnvironment, tmp_path: Path
):
    fakes = Fakes(pass_from=1)
    token = tmp_path / "token"
    token.write_text(SLACK_TOKEN)
    with serving(SlackStandIn()) as hub:
        fakes.slack = Settings(
            home=tmp_path, slack_token_file=token, slack_channel="C0T", slack_api_url=hub.url
        )
        _, result = await run(skipping.client, fakes, spec(autonomy="assisted"))
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    (message,) = hub.messages
    assert [u["ts"] for u in message.updates] == [message.ts]
    assert not message.buttons()
    assert "no answer within approval_timeout" in message.shown()
