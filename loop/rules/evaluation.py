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
        candidates=harness.candidates,
        choose=harness.choose if harness.candidates is not None else "first",
        max_parallel=harness.max_parallel if harness.candidates is not None else None,
    )


def outcome(harness: str, case: str, r: TaskResult) -> CaseOutcome:
    judged = [c for c in r.candidates if c.state not in (TaskState.CANCELLED, TaskState.RUNNING)]
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
        fail_to_pass=fail_to_pass(r),
        candidates=len(judged),
        candidates_passed=sum(c.passed for c in judged),
    )


def fail_to_pass(r: TaskResult) -> str:
    """``passed/required`` of the FAIL_TO_PASS tests at the task's last verdict, over the
    gates that judge tests (a mined case's hidden tests, a ``run`` gate)."""
    verdict = next((a.verdict for a in reversed(r.attempts) if a.verdict is not None), None)
    if verdict is None:
        return ""
    required = passed = 0
    for g in verdict.gates:
        tests = g.evidence.tests
        if tests is None or not tests.fixed:
            continue
        failing = {c.id for c in tests.failing}
        required += len(tests.fixed)
        passed += sum(1 for i in tests.fixed if i not in failing)
    return f"{passed}/{required}" if required else ""


def summarize(harness: str, outcomes: list[CaseOutcome]) -> HarnessSummary:
    mine = [o for o in outcomes if o.harness == harness]
    accepted = sum(o.accepted for o in mine)
    cost = sum(o.cost_usd for o in mine)
    one, any_ = pass_at(mine)
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
        k=max((o.candidates for o in mine), default=0) or 1,
        pass_at_1=one,
        pass_at_k=any_,
    )


def pass_at(outcomes: list[CaseOutcome]) -> tuple[float, float]:
    """(pass@1, pass@k) over a harness's cases: per case, the share of its candidates
    whose verdict passed, and whether any did (a case without candidates is one try:
    whether it was accepted)."""
    if not outcomes:
        return 0.0, 0.0
    ones, anys = [], []
    for o in outcomes:
        if o.candidates:
            ones.append(o.candidates_passed / o.candidates)
            anys.append(1.0 if o.candidates_passed else 0.0)
        else:
            ones.append(1.0 if o.accepted else 0.0)
            anys.append(ones[-1])
    return sum(ones) / len(ones), sum(anys) / len(anys)


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
