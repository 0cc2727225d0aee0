"""CandidateWorkflow: one candidate of a task with candidates, a child of its task.

It is the task's own attempt loop (``TaskWorkflow._attempts``: make -> verify ->
feedback, up to its ``max_attempts``) for its own agent, in its own worktree
(``loop/<id>/<name>``, on the host of the task's first candidate, where the task's pool
is) as its own uid (its id ``<id>+<name>``), and it stops at a verdict that passes or
at a reason to stop, without finalizing: the task chooses (``workflows.candidates``)
and finalizes the one it keeps. Its record is what it returns, also when the task
cancels it (another candidate was chosen, or the task ended): what it held of the
period budget is settled first. Its ``status`` and ``trace`` queries are the task's,
for its own attempts (docs/concepts/candidates.md).
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.hosts as hosts
    from loop.contracts import (
        CANDIDATE_WORKFLOW,
        AgentLimits,
        CandidateInput,
        CandidateRecord,
        ReserveReply,
        SharedBudget,
        TaskState,
        Usage,
    )
    from loop.rules import feedback as fb
    from loop.rules.candidates import agent_words, task_of
    from workflows.clock import OutOfTime
    from workflows.record import Cited
    from workflows.steps import HostLost, StepFailed
    from workflows.task import TaskWorkflow, _Stop


@workflow.defn(name=CANDIDATE_WORKFLOW)
class CandidateWorkflow(TaskWorkflow):
    @workflow.init
    def __init__(self, inp: CandidateInput) -> None:
        super().__init__(inp.spec)
        self.name = inp.name
        self.shared: SharedBudget | None = inp.shared
        self.human_feedback = list(inp.human_feedback)
        before = inp.before
        self.ws = inp.workspace or (before.workspace if before is not None else None)
        if before is not None:
            self.result.attempts = list(before.attempts)
            self.result.tokens, self.result.cost_usd = before.tokens, before.cost_usd
            self.result.tool_calls = before.tool_calls

    @workflow.run
    async def run(self, inp: CandidateInput) -> CandidateRecord:  # type: ignore[override]  # another workflow, its own input
        task, agent = task_of(inp.spec.id), agent_words(inp.spec.agent)
        self._event("started", f"candidate {inp.name} of task {task}: {agent}")
        self._publish()
        try:
            stop = await self._clock_run(inp)
        except asyncio.CancelledError:
            stop = _Stop(TaskState.CANCELLED, "")
        why = workflow.cancellation_reason()
        if stop is not None and why is not None:
            # Stopped by its task (another candidate chosen, or the task ended), whichever
            # way its step ended: its agent stopped by the pool, or its step cancelled.
            stop = _Stop(TaskState.CANCELLED, why or "stopped by its task")
        if self.held is not None:
            await self._settle(self.held, Usage())
        state = TaskState.DONE_WITH_EVIDENCE if stop is None else stop.state
        self._end(state, "verified" if stop is None else stop.reason)
        return self._record(stop)

    async def _clock_run(self, inp: CandidateInput) -> _Stop | None:
        """Its worktree (made beside the first candidate's where it has none), what the
        task explored, then its attempts."""
        try:
            if self.ws is None:
                assert inp.host is not None
                self.ws = await hosts.prepare(self.spec, beside=inp.host)
                self._placed()
            if inp.explored is not None and not self.explored:
                self._explored(inp.explored)
            self._resume()
            return await self.clock.run(self._attempts())
        except OutOfTime as e:
            return _Stop(TaskState.BUDGET_EXCEEDED, str(e))
        except HostLost as e:
            return _Stop(TaskState.NEEDS_HUMAN, f"{e}: a candidate does not move to another host")
        except StepFailed as e:
            return _Stop(TaskState.BLOCKED, str(e))

    def _resume(self) -> None:
        """Feedback from where an earlier round stopped: its last failed verdict."""
        last = self.result.attempts[-1] if self.result.attempts else None
        if last is None or last.make is None or last.verdict is None or last.verdict.passed:
            return
        assert self.ws is not None
        self.next_feedback = fb.build(last.attempt, last.make, last.verdict, self.human_feedback)
        self.cited = Cited.of(last.verdict, self.ws.host, last.make)

    def _limits(self, grant: ReserveReply) -> AgentLimits:
        """The attempt's limits, with the task's pool its calls count in."""
        return super()._limits(grant).model_copy(update={"shared": self.shared})

    def _record(self, stop: _Stop | None) -> CandidateRecord:
        last = self.result.attempts[-1] if self.result.attempts else None
        verdict = last.verdict if last is not None else None
        made = last.make if last is not None else None
        return CandidateRecord(
            name=self.name,
            agent=agent_words(self.spec.agent),
            state=TaskState.DONE_WITH_EVIDENCE if stop is None else stop.state,
            reason="" if stop is None else stop.reason,
            budget=stop is not None and stop.budget,
            attempts=self.result.attempts,
            tokens=self.result.tokens,
            cost_usd=self.result.cost_usd,
            tool_calls=self.result.tool_calls,
            workspace=self.ws,
            commit=(verdict.artifact if verdict is not None and verdict.artifact else "")
            or (made.commit if made is not None else ""),
            changed_lines=made.changed_lines if made is not None else 0,
            workflow_id=workflow.info().workflow_id,
            execution_seconds=round(self.clock.used, 3),
        )
