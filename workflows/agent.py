"""AgentWorkflow: the model loop of one attempt, each model call and tool call a step.

    model_step -> tool_step per tool call -> model_step -> ... until finish(answer),
    a reply without tool calls, max_steps, a spent budget, or a policy violation.

Each model call is one activity whose result is in history, so after a crash no
call that already answered is sent again; each tool call is one activity, so a
write or a command is applied once. Inputs and results carry references to the
conversation's artifacts (under the attempt's run folder), never the
conversation itself, so a step's history bytes do not grow with the step
number. Budgets are a ledger: before each call the workflow caps the call's
``max_tokens`` to what is left, and counts the provider's reported usage after.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        AGENT_WORKFLOW,
        BEGIN_ATTEMPT,
        END_ATTEMPT,
        HOST_LOST,
        MODEL_STEP,
        TOOL_STEP,
        AgentInput,
        AgentLimits,
        AgentResult,
        EndAttemptInput,
        MakeInput,
        MakeResult,
        ModelStepInput,
        ToolStepInput,
        Usage,
    )
    from loop.rules import budget
    from workflows.steps import (
        MODEL_RETRY,
        HostLost,
        StepFailed,
        Tell,
        act,
        act_kept,
        failure_reason,
        on_host,
    )

MODEL_CALL_TIMEOUT = timedelta(minutes=10)


@workflow.defn(name=AGENT_WORKFLOW)
class AgentWorkflow:
    @workflow.run
    async def run(self, inp: AgentInput) -> AgentResult:
        try:
            return await self._loop(inp)
        except HostLost as e:
            # The task decides what a lost host means (move, or wait for it).
            raise ApplicationError(str(e), e.host, type=HOST_LOST, non_retryable=True) from None

    async def _loop(self, inp: AgentInput) -> AgentResult:
        agent, limits = inp.task.agent, inp.limits
        assert agent.model is not None
        attempt_dir = f"{inp.workspace.run_dir}/attempt-{inp.attempt}"
        usage = inp.usage.model_copy()
        step = inp.step
        protected = inp.task.protected_paths()

        def end(ended: str, reason: str, **kw: object) -> AgentResult:
            return AgentResult.model_validate(
                {
                    "ended": ended,
                    "reason": reason,
                    "steps": step,
                    "usage": usage,
                    "attempt_dir": attempt_dir,
                    **kw,
                }
            )

        while True:
            if step >= agent.max_steps:
                return end("max_steps", f"{agent.max_steps} model steps used")
            cap = agent.max_tokens_per_call
            spent = budget.spent(usage, limits.tokens, limits.cost_usd, limits.tool_calls)
            if spent:
                return end("budget", spent)
            if limits.tokens is not None:
                cap = min(cap, limits.tokens - usage.tokens)
            step += 1
            reply = await on_host(
                MODEL_STEP,
                ModelStepInput(
                    task_id=inp.task.id,
                    attempt=inp.attempt,
                    step=step,
                    attempt_dir=attempt_dir,
                    model=agent.model,
                    base_url=agent.base_url,
                    max_tokens=cap,
                    shared=limits.shared,
                ),
                summary=f"model: step {step}",
                limit=MODEL_CALL_TIMEOUT,
                retry=MODEL_RETRY,
                ws=inp.workspace,
            )
            if reply.refused:
                return end("budget", reply.refused, stopped=reply.refused)
            usage = Usage(
                tokens=usage.tokens + reply.tokens_in + reply.tokens_out,
                cost_usd=usage.cost_usd + reply.cost_usd,
                tool_calls=usage.tool_calls,
            )
            if not reply.tool_calls:
                return end("no_tool_calls", "the model stopped calling tools", answer=reply.content)

            for call in reply.tool_calls:
                if limits.tool_calls is not None and usage.tool_calls >= limits.tool_calls:
                    return end("budget", "tool-call budget spent")
                done = await on_host(
                    TOOL_STEP,
                    ToolStepInput(
                        task_id=inp.task.id,
                        attempt=inp.attempt,
                        step=step,
                        call=call,
                        attempt_dir=attempt_dir,
                        workspace=inp.workspace,
                        policy=agent.tools,
                        protected=protected,
                        sandbox=inp.task.sandbox,
                        base_url=agent.base_url,
                    ),
                    summary=f"tool: {call.name} (step {step})",
                    limit=timedelta(seconds=agent.tools.run_timeout + 60),
                    retry=MODEL_RETRY,
                    ws=inp.workspace,
                )
                usage = usage.model_copy(update={"tool_calls": usage.tool_calls + 1})
                if done.policy_violation:
                    return end(
                        "policy_violation",
                        done.policy_violation,
                        policy_violation=done.policy_violation,
                    )
                if done.finished:
                    return end("finish", "the model called finish", answer=done.answer)

            if workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(inp.model_copy(update={"step": step, "usage": usage}))


async def model_attempt(
    inp: MakeInput, limits: AgentLimits, whole: Callable[[], MakeInput], tell: Tell
) -> tuple[MakeResult, AgentResult]:
    """One attempt of the ``openai`` backend, for the task loop: open it (as ``whole()``
    makes it where its host lost a file ``inp`` names), run this workflow as a child within
    the agent's timeout, close it (the work-in-progress commit)."""
    n, task = inp.attempt, inp.task
    await act_kept(
        BEGIN_ATTEMPT, inp, whole=whole, tell=tell, summary=f"begin attempt {n}", ws=inp.workspace
    )
    child = AgentInput(task=task, workspace=inp.workspace, attempt=n, limits=limits)

    async def loop() -> AgentResult:
        try:
            done: AgentResult = await workflow.execute_child_workflow(
                AGENT_WORKFLOW,
                child,
                id=f"{workflow.info().workflow_id}-attempt-{n}",
                result_type=AgentResult,
                static_summary=f"model loop, attempt {n}",
            )
            return done
        except ChildWorkflowError as e:
            if isinstance(e.cause, CancelledError):
                raise asyncio.CancelledError from e  # the task's own timeout or cancel request
            if isinstance(e.cause, ApplicationError) and e.cause.type == HOST_LOST:
                raise HostLost(str(e.cause.details[0])) from e
            raise StepFailed(f"model loop failed: {failure_reason(e)}") from e

    try:
        agent = await asyncio.wait_for(loop(), timeout=task.agent.timeout)
    except TimeoutError:
        agent = AgentResult(ended="timeout", reason=f"{task.agent.timeout} s passed")
    made = await act(
        END_ATTEMPT,
        EndAttemptInput(task=task, workspace=inp.workspace, attempt=n, agent=agent),
        summary=f"end attempt {n}",
        ws=inp.workspace,
    )
    return made, agent
