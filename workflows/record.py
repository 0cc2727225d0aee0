"""What a task knows about itself, and what it tells: its state, its result and trace
events, its budget figures, the ``status`` and ``trace`` queries and the search
attributes. ``TaskWorkflow`` (``workflows.task``) is the process; this is its record.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

if TYPE_CHECKING:
    from workflows.choice import Choice
    from workflows.status import StatusComment

with workflow.unsafe.imports_passed_through():
    import workflows.patches as patches
    from loop.contracts import (
        QUERY_STATUS,
        QUERY_TRACE,
        SA_ATTEMPTS,
        SA_COST,
        SA_HOST,
        SA_REPO,
        SA_STATE,
        WAITING_APPROVAL,
        BudgetFigures,
        BudgetStatus,
        Feedback,
        MakeResult,
        Phase,
        TaskResult,
        TaskSpec,
        TaskState,
        TaskStatus,
        TraceEvent,
        Usage,
        Verdict,
        Workspace,
    )
    from loop.rules import answers, budget, explain, reasons
    from workflows.clock import WallClock


@dataclass
class Decision:
    """A person's answer to a waiting task."""

    kind: str  # approve | reject | feedback | extend | merged | closed (its pull request)
    text: str = ""
    by: str = ""
    """How the trace credits who answered: `` (by slack:ann)``, `` (unsigned)``."""

    def said(self) -> str:
        """The answer in a few words, for the message that asked for it."""
        words = {"approve": "approved", "reject": "rejected", "feedback": "feedback given"}
        head = words.get(self.kind, "budget extended") + self.by
        return f"{head}: {self.text}" if self.text else head


class Waits(Protocol):
    """A task that waits for a person (``workflows.waiting``), as its candidates' side and
    its finalize ask it to."""

    async def _wait_for_person(
        self,
        reason: str,
        waiting_for: str,
        state: TaskState = TaskState.NEEDS_HUMAN,
        limit: tuple[int, str] | None = None,
    ) -> Decision | None: ...


@dataclass
class Cited:
    """The verdict the next attempt's feedback comes from, as far as its host kept it."""

    kept: str
    """Where verify kept it (``Verdict.kept``); empty where it did not."""
    gates: list[str]
    """The gates whose evidence is in that file: verify's, not an LLM reviewer's."""
    host: str
    made: str = ""
    """Where make kept the result whose claim the feedback quotes (``MakeResult.kept``);
    empty where it did not."""

    @classmethod
    def of(cls, verdict: Verdict, host: str, made: MakeResult | None = None) -> Cited:
        gates = [g.name for g in verdict.gates if g.kind != "llm_review"]
        kept = made.kept if made is not None else ""
        return cls(kept=verdict.kept, gates=gates, host=host, made=kept)


class TaskRecord:
    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.state = TaskState.RUNNING
        self.phase: Phase | None = Phase.EXPLORE
        self.reason = ""
        self.waiting_for = ""
        self.ws: Workspace | None = None
        self.brief = ""
        self.brief_host = ""
        """The host whose run folder holds explore's brief file."""
        self.max_attempts = spec.budget.max_attempts
        self.clock = WallClock(spec.budget.max_seconds)
        self.max_tokens = spec.budget.max_tokens
        self.max_cost = spec.budget.max_cost_usd
        self.stalled = 0
        self.last_fingerprint = ""
        self.human_feedback: list[str] = []
        self.next_feedback: Feedback | None = None
        self.last_verdict: Verdict | None = None
        self.decision: Decision | None = None
        self.result = TaskResult(task_id=spec.id, state=TaskState.RUNNING)
        self.held: int | None = None
        """The attempt whose period-budget reservation is not settled yet."""
        self.kept = ""
        self.cited: Cited | None = None
        """Where the last make kept the task file and workspace on its host: later steps
        there are sent that path instead of the two."""
        self.explored = False
        self.choice: Choice | None = None
        """A task with candidates: them, and which one it keeps (``workflows.candidates``)."""
        self.notifications: list[asyncio.Task[Any]] = []
        self.seen_signatures: list[str] = []
        """Signatures of the answers taken so far: each is good once."""
        self.answered: dict[str, str] = {}
        """What each answer taken so far did, by its ``answer_id``: one answer is taken
        once, however often (and by whichever path) it arrives."""
        self.told: tuple[str, str] = (str(TaskState.RUNNING), "")
        """The state and reason the memo holds (lists read them without a query)."""
        self.answering = 0
        """Answer updates being checked now: the task closes only once none is."""
        self.status_comment: StatusComment | None = None
        """The issue's status comment (``spec.github_issue``), when the task keeps one."""
        self.pull_request_url = ""
        self.attempt_started = ""
        """When the current attempt began (its status says so, for its elapsed time)."""

    def _placed(self, moved_from: str = "") -> None:
        """The worktree is on ``self.ws.host`` now: the trace, the status and the UI say so."""
        assert self.ws is not None
        self.result.worktree, self.result.branch = self.ws.path, self.ws.branch
        if not self.ws.host:
            return  # a worker from before hosts prepared it
        self.result.host = self.ws.host
        if moved_from:
            self._event("moved", f"from host {moved_from} to host {self.ws.host}")
        else:
            self._event("placed", f"host {self.ws.host}: {self.ws.path}")
        self._publish()

    def _refusal(self, name: str) -> str:
        """Why answer ``name`` cannot be taken now ("" when it can): the rule
        (``loop.rules.answers``), and one answer per wait (a second one racing the first is
        refused, not silently put in its place)."""
        if self.decision is not None:
            return (
                f"task {self.spec.id} has just taken {self.decision.kind}; "
                f"{name} does not apply now"
            )
        return answers.refusal(self.spec.id, name, self.state, self.waiting_for)

    def choosing(self) -> bool:
        """Whether several candidates wait for an approval that names one."""
        return self.choice is not None and bool(self.choice.waiting)

    def approved(self) -> bool:
        """Whether a person chose the candidate the task keeps (its approval)."""
        return self.choice is not None and bool(self.choice.approved)

    def awaiting_commit(self) -> str:
        """The commit an approval approves now ("" unless the task waits for one)."""
        return self.result.commit if self.waiting_for == WAITING_APPROVAL else ""

    def _latest_verdict(self) -> Verdict | None:
        """The verdict a person is shown: the last one, else the last attempt's."""
        if self.last_verdict is None and self.result.attempts:
            return self.result.attempts[-1].verdict
        return self.last_verdict

    def waiting_since(self) -> str:
        """When the wait for a person began ("" when the task waits for none)."""
        waits = self.result.human_escalation
        return waits[-1].at if self.waiting_for and waits else ""

    def _stuck(self, head: str) -> str:
        """Why the loop stopped on its own (``head``: "no new evidence", "attempts
        exhausted"), after its cause: the gate that kept failing and what it saw
        (``loop.rules.reasons``), and what went wrong with the agent's last run, if
        anything did. A person reads the cause, not only that the loop gave up."""
        cause = reasons.repeated(self.result.attempts)
        reason = f"{cause}; {head}" if cause else head
        last = self.result.attempts[-1].make if self.result.attempts else None
        trouble = explain.agent_trouble(last)
        return f"{reason}; last attempt: {trouble}" if trouble else reason

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> TaskStatus:
        return TaskStatus(
            task_id=self.spec.id,
            state=self.state,
            phase=self.phase if self.state == TaskState.RUNNING else None,
            attempt=len(self.result.attempts),
            waiting_for=self.waiting_for,
            reason=self.reason,
            budget=self._budget(),
            last_verdict=self.last_verdict.summary() if self.last_verdict else "",
            agent=explain.agent_trouble(self.result.attempts[-1].make)
            if self.result.attempts
            else "",
            retried=sum(ev.kind == "retried" for ev in self.result.events),
            host=self.ws.host if self.ws is not None else "",
            commit=self.awaiting_commit(),
            waiting_since=self.waiting_since(),
            candidates=self.choice.views() if self.choice is not None else [],
            as_of=workflow.now().isoformat(),
            ticking=self.clock.running,
            attempt_started=self.attempt_started if self.state == TaskState.RUNNING else "",
        )

    @workflow.query(name=QUERY_TRACE)
    def trace(self) -> TaskResult:
        """The result so far; while the task waits, its reason is why it waits."""
        return self.result.model_copy(
            update={
                "execution_seconds": round(self.clock.seconds(), 3),
                "reason": self.result.reason or self.reason,
            }
        )

    # ------------------------------------------------------------------ budgets

    def _spent_budget(self) -> str:
        used = Usage(
            tokens=self.result.tokens,
            cost_usd=self.result.cost_usd,
            tool_calls=self.result.tool_calls,
        )
        return budget.spent(used, self.max_tokens, self.max_cost, self.spec.budget.max_tool_calls)

    def _budget(self) -> BudgetStatus:
        used = BudgetFigures(
            attempts=len(self.result.attempts),
            seconds=round(self.clock.seconds(), 3),
            tokens=self.result.tokens,
            cost_usd=round(self.result.cost_usd, 6),
            tool_calls=self.result.tool_calls,
        )
        limits = BudgetFigures(
            attempts=self.max_attempts,
            seconds=self.clock.limit,
            tokens=self.max_tokens,
            cost_usd=self.max_cost,
            tool_calls=self.spec.budget.max_tool_calls,
        )
        return budget.status(used, limits)

    # ------------------------------------------------------------------ plumbing

    def _end(self, state: TaskState, reason: str) -> None:
        self.state, self.reason, self.waiting_for, self.phase = state, reason, "", None
        self.result.state, self.result.reason = state, reason
        self._event("ended", f"{state}: {reason}")
        self._publish()

    def _event(self, kind: str, detail: str = "") -> None:
        self.result.events.append(TraceEvent(at=now(), kind=kind, detail=detail))
        if not workflow.unsafe.is_replaying():
            workflow.logger.info("%s %s", kind, detail, extra={"task_id": self.spec.id})

    def _publish(self) -> None:
        """Search attributes for the Temporal UI and `loop status`/`loop inbox` queries;
        the state with its reason as the UI's current details and, once it has a reason,
        in the memo, which every list reads without asking the task (it is a payload:
        encrypted with the others where a codec is on)."""
        self.result.state = self.state
        said = f"{self.state}: {self.reason}" if self.reason else str(self.state)
        if self.phase is not None and self.state == TaskState.RUNNING:
            said += f" ({self.phase})"
        workflow.set_current_details(said)
        told = (str(self.state), self.reason[:REASON_CHARS])
        if (
            told != self.told
            and (self.reason or self.told[1])
            and patches.patched("reason-in-memo")
        ):
            workflow.upsert_memo({"state": told[0], "reason": told[1]})
            self.told = told
        updates: list[SearchAttributeUpdate[Any]] = [
            SA_STATE.value_set(str(self.state)),
            SA_ATTEMPTS.value_set(len(self.result.attempts)),
            SA_COST.value_set(round(self.result.cost_usd, 6)),
            SA_REPO.value_set(self.spec.repo),
            # Only for workspaces that have a host: histories from before replay as recorded.
            *([SA_HOST.value_set(self.ws.host)] if self.ws and self.ws.host else []),
        ]
        if patches.patched("publish-changes"):
            # What changed only, and nothing when nothing did: each upsert is in history.
            now_set = workflow.info().typed_search_attributes
            updates = [u for u in updates if now_set.get(u.key) != u.value]
            if not updates:
                return
        workflow.upsert_search_attributes(updates)


REASON_CHARS = 300
"""Of a reason, what the memo keeps (the trace keeps it whole)."""


def now() -> str:
    return workflow.now().isoformat(timespec="seconds")
