"""Harness evaluation arithmetic: outcomes in, the comparison table out (pure)."""

from __future__ import annotations

import hashlib
import json

from loop.contracts import (
    CaseOutcome,
    EvalCase,
    Flip,
    Harness,
    HarnessSummary,
    Suite,
    TaskResult,
    TaskSpec,
    TaskState,
)


def task_id(run: str, harness: str, case: str) -> str:
    """A valid task id per (run, harness, case), hashed when the names are long."""
    tid = f"eval-{run}-{harness}-{case}"
    if len(tid) <= 63:
        return tid
    return f"eval-{run}-" + hashlib.sha1(f"{harness}/{case}".encode()).hexdigest()[:16]


def spec_for(suite: Suite, harness: Harness, case: EvalCase, run: str) -> TaskSpec:
    """The task a case becomes under a harness: the case's checks, the harness's agent."""
    assert case.repo is not None
    return TaskSpec(
        id=task_id(run, harness.name, case.id),
        goal=case.goal,
        repo=case.repo,
        base=case.commit,
        agent=harness.agent,
        verify=case.verify,
        budget=harness.budget,
        approval_timeout=suite.approval_timeout,
        instructions=harness.instructions,
        environment=case.environment,
    )


def outcome(harness: str, case: str, r: TaskResult) -> CaseOutcome:
    return CaseOutcome(
        harness=harness,
        case=case,
        task_id=r.task_id,
        state=r.state,
        accepted=r.state == TaskState.DONE_WITH_EVIDENCE,
        attempts=len(r.attempts),
        tokens=r.tokens,
        cost_usd=r.cost_usd,
        escalations=len(r.human_escalation),
        seconds=r.execution_seconds,
    )


def summarize(harness: str, outcomes: list[CaseOutcome]) -> HarnessSummary:
    mine = [o for o in outcomes if o.harness == harness]
    accepted = sum(o.accepted for o in mine)
    cost = sum(o.cost_usd for o in mine)
    return HarnessSummary(
        harness=harness,
        cases=len(mine),
        accepted=accepted,
        pass_rate=accepted / len(mine) if mine else 0.0,
        mean_attempts=sum(o.attempts for o in mine) / len(mine) if mine else 0.0,
        tokens=sum(o.tokens for o in mine),
        cost_usd=cost,
        cost_per_accepted=cost / accepted if accepted else None,
        escalations=sum(o.escalations for o in mine),
        seconds=sum(o.seconds for o in mine),
    )


def flips(first: str, second: str, outcomes: list[CaseOutcome]) -> list[Flip]:
    a = {o.case: o for o in outcomes if o.harness == first}
    b = {o.case: o for o in outcomes if o.harness == second}
    return [
        Flip(case=c, before=a[c].state, after=b[c].state)
        for c in a
        if c in b and a[c].accepted != b[c].accepted
    ]


def suite_hash(suite: Suite) -> str:
    """What the results were measured on: cases, commits and gates, canonically."""
    canonical = json.dumps(suite.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
