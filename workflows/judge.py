"""The verdict on one attempt: the gates on its commit, then the LLM reviewers.

``verify`` runs every command and rule gate on a clean checkout of the attempt's
commit; each ``llm_review`` gate is a model call of its own (``review``), run after
the others so the reviewer can cite their evidence. The verdict lists the gates in
the task file's order.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        REVIEW,
        VERIFY,
        BuiltEnvironment,
        LlmReviewGate,
        MakeResult,
        RegressionTestGate,
        ReviewInput,
        RunGate,
        TaskSpec,
        Verdict,
        VerifyInput,
        Workspace,
    )
    from loop.contracts.step_context import sent_once
    from workflows.steps import Tell, act, act_kept

REVIEW_SECONDS = 360


def verify_seconds(spec: TaskSpec) -> int:
    """What verify may take: each command at the commit, once more at base where the run
    folder lost it (a moved task), and once more on base with the attempt's tests when a
    ``regression_test`` gate asks."""
    runs = 2 + any(isinstance(g, RegressionTestGate) for g in spec.verify)
    return sum(g.seconds() * (runs if isinstance(g, RunGate) else 1) for g in spec.verify) + 120


async def judge(
    spec: TaskSpec,
    ws: Workspace,
    n: int,
    made: MakeResult,
    environment: BuiltEnvironment | None,
    tell: Tell,
) -> Verdict:
    # The gates judge the commit and read the claim, never what the agent printed: its
    # tail is in history once (make's result), not again in verify's input; nor the task
    # file and workspace where make kept them on this host, nor the rest of make's result
    # where make kept it (sent again whole where the host lost them; ``tell``: the trace).
    # ``environment``: the one the attempt's commit was built with, where it changes the
    # key files.
    step = VerifyInput(
        task=spec,
        workspace=ws,
        attempt=n,
        make=made.model_copy(update={"output_tail": "", "context": ""}),
        environment=environment,
    )
    sent = sent_once(step.model_copy(update={"make_from": made.kept}), ws.run_dir, made.context)
    verdict = await act_kept(
        VERIFY,
        sent,
        whole=lambda: sent_once(step, ws.run_dir, ""),
        tell=tell,
        summary=f"verify: attempt {n}",
        seconds=verify_seconds(spec),
        ws=ws,
    )
    reviews = [g for g in spec.verify if isinstance(g, LlmReviewGate)]
    if not reviews:
        return verdict
    by_name = {g.name: g for g in verdict.gates}
    for gate in reviews:
        by_name[gate.name] = await act(
            REVIEW,
            ReviewInput(
                task=spec,
                workspace=ws,
                attempt=n,
                gate=gate,
                artifact=made.commit,
                evidence=verdict.gates,
                claim=made.claim,
            ),
            summary=f"review: {gate.name}",
            seconds=REVIEW_SECONDS,
            ws=ws,
        )
    ordered = [by_name[g.name] for g in spec.verify if g.name in by_name]
    return verdict.model_copy(update={"gates": ordered, "passed": all(g.passed for g in ordered)})
