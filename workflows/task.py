"""TaskWorkflow: one task, from its task file to a named terminal state.

Read it top to bottom as the diagram in docs/architecture.md ("The task loop"):

    prepare workspace -> explore -> (make -> verify)xN -> finalize by autonomy -> summarize

with the branches named where they happen: a policy violation ends BLOCKED, a
spent budget or a stall escalates to NEEDS_HUMAN and waits for a signal, the
wall-clock budget is a timer that cancels the running activity, and an
``assisted`` task waits in AWAITING_APPROVAL for ``approve`` or ``reject``. Two
concerns are modules of their own: the finalize (``workflows.finalize``) and the wait
for a person (``workflows.waiting``).

Everything here is deterministic bookkeeping; side effects are activities named
in ``loop.contracts``. Time spent waiting on a person is not charged to the
wall-clock budget, so the timer runs only around the active segments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.candidates as candidates
    import workflows.environment as environment
    import workflows.finalize as finalize
    import workflows.hosts as hosts
    import workflows.patches as patches
    import workflows.period as period
    from loop.contracts import (
        ENDPOINT_PREFLIGHT_S,
        EXPLORE,
        MAKE,
        SUMMARIZE,
        TASK_WORKFLOW,
        WAITING_DECISION,
        AgentLimits,
        AttemptRecord,
        CommitStatusInput,
        ExploreInput,
        ExploreResult,
        MakeInput,
        MakeResult,
        Phase,
        PromptParts,
        ReserveReply,
        SummarizeInput,
        TaskResult,
        TaskSpec,
        TaskState,
        TaskStatusView,
        Usage,
        Verdict,
    )
    from loop.contracts.step_context import digest, sent_once
    from loop.rules import budget, explain, reasons, status
    from loop.rules import feedback as fb
    from loop.rules.fingerprint import fingerprint
    from loop.rules.record import spec_hash
    from workflows.agent import model_attempt
    from workflows.clock import OutOfTime
    from workflows.judge import judge
    from workflows.record import Cited, now
    from workflows.status import StatusComment, commit_status
    from workflows.steps import HostLost, StepFailed, act, act_kept
    from workflows.waiting import Waiting


GOAL_MET_AT_BASE = "goal-met-at-base"
"""The patch under which a task whose gates all pass before any change waits for a person
at explore (before it, it spent its attempts on a goal no verdict could show)."""


@dataclass
class _Stop:
    """Why an active segment ended without a verified result."""

    state: TaskState  # BLOCKED, BUDGET_EXCEEDED or NEEDS_HUMAN (escalate)
    reason: str
    budget: bool = False
    """A spent budget or a stall: an unanswered escalation ends BUDGET_EXCEEDED."""


@workflow.defn(name=TASK_WORKFLOW)
class TaskWorkflow(Waiting):
    @workflow.init
    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)

    # ------------------------------------------------------------------ the process

    @workflow.run
    async def run(self, spec: TaskSpec) -> TaskResult:
        self.result.spec_hash = spec_hash(spec)
        self._event("started", f"autonomy={spec.autonomy} base={spec.base or 'HEAD'}")
        self._publish()
        commenting: asyncio.Task[None] | None = None
        if spec.github_issue is not None and patches.patched("github-status-comment"):
            self.status_comment = StatusComment(spec.github_issue, self._status_view, self._event)
            commenting = asyncio.create_task(self.status_comment.run())
        try:
            await self._process()
        except StepFailed as e:
            self._end(TaskState.BLOCKED, str(e))
        except asyncio.CancelledError:
            # The reason a cancel request gave (a GitHub issue closed, say) is the task's.
            self._end(TaskState.CANCELLED, workflow.cancellation_reason() or "cancelled by request")
        if self.answering:
            # Answer updates still being checked hear that the task has ended (their
            # refusal is in the trace) before it closes. No history has one: it issues
            # no command, and signals are not waited for.
            await workflow.wait_condition(lambda: not self.answering)
        if self.held is not None and patches.patched("settle-on-every-end"):
            # Cancelled, out of time, or blocked mid-attempt: what it held goes back.
            await self._settle(self.held, Usage())
        await candidates.close(self)
        self.phase = Phase.SUMMARIZE
        await self._summarize()
        if commenting is not None and self.status_comment is not None:
            self.status_comment.closing = True  # its last word: the terminal state
            await commenting
        # Messages still being retried are delivered before the task closes.
        await asyncio.gather(*self.notifications)
        return self.result

    def _status_view(self) -> TaskStatusView:
        """What the issue's status comment shows now (``loop.rules.status``)."""
        verdict = self._latest_verdict()
        return status.view(
            self.spec.id,
            self.state,
            len(self.result.attempts),
            self.max_attempts,
            self.reason,
            self.waiting_for,
            verdict.gates if verdict is not None else [],
            self.pull_request_url,
            self.awaiting_commit(),
        )

    async def _process(self) -> None:
        while True:
            try:
                stop = await self.clock.run(self._attempts())
                if stop is None:
                    if await finalize.run(self):
                        continue  # a review of its pull request: another attempt
                    return
            except OutOfTime as e:
                stop = _Stop(TaskState.BUDGET_EXCEEDED, str(e))
            except HostLost as e:
                stop = await self._host_lost(e)
                if stop is None:
                    continue  # moved: the loop goes on on the new host
            if stop.state != TaskState.NEEDS_HUMAN:
                self._end(stop.state, stop.reason)
                return
            decision = await self._wait_for_person(stop.reason, WAITING_DECISION)
            if decision is None:
                timeout_state = TaskState.BUDGET_EXCEEDED if stop.budget else TaskState.NEEDS_HUMAN
                self._end(timeout_state, f"{stop.reason}; no answer within approval_timeout")
                return
            if decision.kind == "reject":
                self._end(TaskState.REJECTED, decision.text or "rejected")
                return
            # feedback or extend_budget: the loop goes on from where it stopped.
            self.stalled = 0
            self.last_fingerprint = ""

    async def _attempts(self) -> _Stop | None:
        """Prepare and explore once, then make -> verify until pass or a reason to stop."""
        if self.spec.candidates is not None and patches.patched(candidates.PATCH):
            out = await candidates.run(self)  # its candidates' attempts, one of them kept
            return None if out is None else _Stop(out.state, out.reason, budget=out.budget)
        explore_s = sum(g.seconds() for g in self.spec.verify) + 60 + ENDPOINT_PREFLIGHT_S
        explored: ExploreResult | None = None
        laying = environment.wanted(self.spec)
        if self.ws is None:
            self.phase = Phase.EXPLORE
            if self.explored or laying or not patches.patched("explore-where-prepared"):
                self.ws = await hosts.prepare(self.spec)
            else:
                # Both first steps in one: they run on one host anyway.
                prepared = await hosts.prepare_and_explore(self.spec, explore_s)
                self.ws, explored = prepared.workspace, prepared.explored
            self._placed()
        if laying and self.ws.environment is None:
            # Before explore (its runs at base use it), and again on a host moved to.
            self.ws = await environment.lay(self.spec, self.ws, self._event)
        if not self.explored:
            if explored is None:
                explored = await act(
                    EXPLORE,
                    sent_once(ExploreInput(task=self.spec, workspace=self.ws), self.ws.run_dir, ""),
                    summary="explore",
                    seconds=explore_s,
                    ws=self.ws,
                )
            self._explored(explored)
            # Nothing an attempt did could be judged, or shown a fix: a person answers first.
            why, met = reasons.at_base(self.spec, explored.reproducer)
            if why and (not met or patches.patched(GOAL_MET_AT_BASE)):
                return _Stop(TaskState.NEEDS_HUMAN, why)

        while True:
            if self.last_verdict is not None and self.last_verdict.passed:
                return None  # verified on a host lost before the end: finalize again
            if self.result.attempts and len(self.result.attempts) >= self.max_attempts:
                return _Stop(TaskState.NEEDS_HUMAN, self._stuck("attempts exhausted"), budget=True)
            spent = self._spent_budget()
            if spent:
                return _Stop(TaskState.NEEDS_HUMAN, spent, budget=True)
            n = len(self.result.attempts) + 1
            grant = await period.reserve(
                self.spec,
                n,
                cost_usd=budget.left(self.max_cost, self.result.cost_usd),
                tokens=budget.left(self.max_tokens, self.result.tokens),
            )
            if not grant.granted:
                return _Stop(TaskState.NEEDS_HUMAN, grant.reason, budget=True)
            # No ledger, no reservation: nothing to settle after the attempt (histories
            # from before settled every attempt, and replay as recorded).
            if grant.held or not patches.patched("settle-held-only"):
                self.held = n
            stop = await self._attempt(n, grant)
            if stop is not None or (self.last_verdict is not None and self.last_verdict.passed):
                return stop

    async def _attempt(self, n: int, grant: ReserveReply) -> _Stop | None:
        assert self.ws is not None
        record = AttemptRecord(attempt=n, feedback=self.next_feedback)
        self.result.attempts.append(record)
        self.last_verdict, self.attempt_started = None, now()
        self._event("attempt", f"attempt {n} of {self.max_attempts}")
        self._publish()

        self.phase = Phase.MAKE
        prompt = PromptParts(
            from_task=True,  # the goal, the gates, the guidance: the task file's, sent with it
            # The brief by its file where the attempt runs on explore's host (history holds
            # the text once); by its text on any other host, which has no such file.
            brief="" if self._brief_here() else self.brief,
            brief_path=self.result.explore_brief if self._brief_here() else "",
            feedback=self.next_feedback,
            human_feedback=list(self.human_feedback),
            **self._evidence_here(),
            **self._claim_here(),
        )
        step = MakeInput(
            task=self.spec, workspace=self.ws, attempt=n, prompt=prompt, limits=self._limits(grant)
        )
        make_input = sent_once(step, self.ws.run_dir, self.kept)
        whole = partial(self._whole, step)  # made only where the host lost a file
        try:
            if self.spec.agent.backend == "openai":
                made, violation = await self._model_attempt(make_input, grant, whole)
            else:
                made, violation = (
                    await act_kept(
                        MAKE,
                        make_input,
                        whole=whole,
                        tell=self._event,
                        summary=f"make: attempt {n}",
                        seconds=self.spec.agent.timeout + 120,
                        ws=self.ws,
                    ),
                    "",
                )
        except StepFailed:
            await self._settle(n, Usage())  # release what the attempt held
            raise
        if made.tries > 1:
            self._event(
                "retried",
                f"attempt {n}: make ran {made.tries} times (a worker died or the step failed; "
                "each retry started again from the attempt's start commit)",
            )
        self.kept = made.context
        used = Usage(tokens=made.tokens, cost_usd=made.cost_usd, tool_calls=made.tool_calls)
        await self._settle(n, used)
        record.make, record.usage = made, used
        self.result.tokens += made.tokens
        self.result.cost_usd += made.cost_usd
        self.result.tool_calls += made.tool_calls
        self.result.commit = made.commit
        if violation:
            return _Stop(TaskState.BLOCKED, f"policy violation: {violation}")
        if made.outside_writes:
            return _Stop(
                TaskState.BLOCKED, f"write outside the worktree: {', '.join(made.outside_writes)}"
            )
        if made.protected_writes:
            tried = ", ".join(made.protected_writes)
            return _Stop(
                TaskState.BLOCKED,
                f"protected path: attempt {n} tried to write {tried} (refused by the sandbox)",
            )
        trouble = explain.agent_trouble(made)
        if trouble and patches.patched("explain-agent-trouble"):
            self._event("agent", f"attempt {n}: {trouble}")
            if explain.could_not_start(made):
                # Every later attempt would fail the same way, before doing anything.
                return _Stop(TaskState.BLOCKED, trouble)
        unpriced = explain.unpriced_budget(self.spec, made)
        if unpriced and patches.patched("usage-for-budgets"):
            return _Stop(
                TaskState.NEEDS_HUMAN,
                f"attempt {n}: the agent reported no usage, so {unpriced} cannot be held",
            )

        if made.budget_spent:
            # The gateway refused the agent's next call: its work stopped half-way, so
            # there is nothing to judge; a person extends the budget or ends the task.
            return _Stop(TaskState.NEEDS_HUMAN, made.budget_spent, budget=True)

        self.phase = Phase.VERIFY
        own = await environment.for_attempt(self.spec, self.ws, made, self.kept, self._event)
        verdict = await judge(self.spec, self.ws, n, made, own, self._event)
        self._verified_on_github(verdict.artifact or made.commit, verdict)
        record.verdict = verdict
        self.last_verdict = verdict
        self.result.evidence = verdict.gates
        self._event("verdict", f"attempt {n}: {verdict.summary()}")
        violations = verdict.policy_violations
        if violations:
            return _Stop(TaskState.BLOCKED, "; ".join(g.evidence.detail for g in violations))
        uncertain = [g.name for g in verdict.gates if g.uncertain]
        if uncertain:
            return _Stop(TaskState.NEEDS_HUMAN, f"uncertain checker: {', '.join(uncertain)}")
        if verdict.passed:
            return None

        record.fingerprint = fingerprint(verdict.gates)
        if record.fingerprint == self.last_fingerprint:
            self.stalled += 1
        else:
            self.stalled, self.last_fingerprint = 1, record.fingerprint
        self.next_feedback = fb.build(n, made, verdict, self.human_feedback)
        self.cited = Cited.of(verdict, self.ws.host, made)
        if self.stalled >= self.spec.budget.max_stalled_attempts:
            return _Stop(TaskState.NEEDS_HUMAN, self._stuck("no new evidence"), budget=True)
        return None

    def _verified_on_github(self, sha: str, verdict: Verdict) -> None:
        """``loopwork/verify`` on a commit the task pushed to GitHub (a repository by URL,
        every attempt pushed), beside the task: a failure is an event, never in its way."""
        assert self.ws is not None
        spec, remote = self.spec, self.ws.remote
        ref = spec.github_issue
        if not remote or not (spec.finalize.github or ref or "github.com" in remote):
            return
        if not patches.patched("commit-status"):
            return
        inp = CommitStatusInput(
            repo=spec.finalize.github,
            remote=remote,
            token_env=ref.token_env if ref is not None else "GITHUB_TOKEN",
            sha=sha,
            passed=verdict.passed,
            description=verdict.summary()[:140],
            task_id=spec.id,
        )

        async def tell() -> None:
            failed = await commit_status(inp)
            if failed:
                self._event("commit-status-failed", failed)

        self.notifications.append(asyncio.create_task(tell()))

    async def _summarize(self) -> None:
        self.result.execution_seconds = round(self.clock.used, 3)
        try:
            written = await act(
                SUMMARIZE,
                SummarizeInput(result=self.result, goal=self.spec.goal, repo=self.spec.repo),
                summary="write trace and notes",
                ws=self.ws,
            )
        except (StepFailed, HostLost) as e:
            self._event("summarize-failed", str(e))
            return
        self.result.trace_path, self.result.notes_path = written.trace_path, written.notes_path

    # ------------------------------------------------------------------ hosts

    def _evidence_here(self) -> dict[str, Any]:
        """The feedback's evidence by the verdict file verify kept, where the attempt runs on
        that host (an LLM reviewer's evidence is not in it: that goes by its text)."""
        cited = self.cited
        if cited is None or self.ws is None or self.ws.host != cited.host or not cited.kept:
            return {}
        return {"evidence_from": cited.kept, "evidence_of": cited.gates}

    def _claim_here(self) -> dict[str, Any]:
        """The feedback's quote of the last claim by the result make kept, where the
        attempt runs on that host (``PromptParts.previous_from``)."""
        cited, fed = self.cited, self.next_feedback
        if cited is None or not cited.made or fed is None or not fed.previous_output:
            return {}
        if self.ws is None or self.ws.host != cited.host:
            return {}
        return {"previous_from": cited.made, "previous_digest": digest(fed.previous_output)}

    def _whole(self, step: MakeInput) -> MakeInput:
        """``step`` with nothing by a file of its host but what it cannot do without: sent
        again where the host lost one (``act_kept``). The brief goes by its text where the
        task has it (a candidate was given it by its file alone)."""
        prompt = step.prompt.model_copy(
            update={"evidence_from": "", "evidence_of": [], "previous_from": "",
                    "previous_digest": "",
                    **({"brief": self.brief, "brief_path": ""} if self.brief else {})}
        )  # fmt: skip
        assert self.ws is not None
        return sent_once(step.model_copy(update={"prompt": prompt}), self.ws.run_dir, "")

    def _brief_here(self) -> bool:
        """Whether explore's brief file is on the host the worktree is on now."""
        return (
            bool(self.result.explore_brief)
            and self.ws is not None
            and (self.ws.host == self.brief_host)
        )

    def _explored(self, explored: ExploreResult) -> None:
        assert self.ws is not None
        self.brief, self.brief_host = explored.brief, self.ws.host
        self.kept = explored.context
        self.result.explore_brief = explored.brief_path
        self._event(
            "explored", f"{explored.files} files; reproducer: {explored.reproducer.summary()}"
        )
        self.explored = True

    async def _host_lost(self, e: HostLost) -> _Stop | None:
        """The attempt the lost host ran counts as failed; the task moves, or waits."""
        assert self.ws is not None
        self._event("host-lost", str(e))
        if self.held is not None:
            await self._settle(self.held, Usage())
        record = self.result.attempts[-1] if self.result.attempts else None
        if record is not None and record.verdict is None:
            record.verdict = self.last_verdict = hosts.lost_verdict(e)
        if not self.ws.remote or self.choice is not None:  # candidates share their host
            return _Stop(TaskState.NEEDS_HUMAN, hosts.stays(e))
        self.ws = await hosts.prepare(self.spec, moved_from=self.ws)
        self._placed(moved_from=e.host)
        return None

    async def _settle(self, n: int, used: Usage) -> None:
        """Settle attempt ``n``'s reservation: once, whichever way the attempt ended, and
        only where a ledger holds one."""
        if self.held is None:
            return
        self.held = None
        await period.settle(self.spec, n, used)

    def _limits(self, grant: ReserveReply) -> AgentLimits:
        """What the attempt may spend: the task's own budget, within the period's grant."""
        used, limit = self.result, self.spec.budget.max_tool_calls
        return AgentLimits(
            tokens=budget.smaller(budget.left(self.max_tokens, used.tokens), grant.tokens),
            cost_usd=budget.smaller(budget.left(self.max_cost, used.cost_usd), grant.cost_usd),
            tool_calls=budget.left(limit, used.tool_calls),
        )

    async def _model_attempt(
        self, make_input: MakeInput, grant: ReserveReply, whole: Callable[[], MakeInput]
    ) -> tuple[MakeResult, str]:
        """The openai backend: the model loop as a child workflow between open and close."""
        made, agent = await model_attempt(make_input, self._limits(grant), whole, self._event)
        self._event("agent", f"attempt {make_input.attempt}: {agent.ended}: {agent.reason}")
        return made, agent.policy_violation
