"""A task's timeline: every attempt with the agent's claim, the gates' verdict, its model
calls and the feedback it was given and became."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from loop.contracts import AttemptRecord, Feedback, GateResult, TaskResult
from loop.rules.clis.base import count
from loop.rules.record import spent
from loop.rules.verdicts import headline


@dataclass
class GateRow:
    name: str
    kind: str
    passed: bool
    verdict: str
    """``pass``, ``FAIL``, ``BLOCKED`` (a policy violation) or ``uncertain``."""
    exit_code: str
    output_tail: str
    files: list[str]
    detail: str
    requirement: str
    duration: str
    log: str = ""
    """The gate's full log under ``runs/<id>/attempt-N/`` (``gate-<name>.log``), if any."""
    tests: str = ""
    """Per-test counts where the runner reported (``4 passed, 1 failed (pytest)``)."""
    failing: list[tuple[str, str, str]] = field(default_factory=list)
    """(test id, outcome, the assertion) of the tests that decided a failed verdict."""
    quoted: list[str] = field(default_factory=list)
    """Lines of the attempt that made the checker uncertain."""
    failure: list[str] = field(default_factory=list)
    """The output's lines that say what failed, shown before the tail."""


@dataclass
class FeedbackView:
    after_attempt: int
    failed: list[tuple[str, str, str]]
    """(gate, requirement, required correction) per failed requirement."""
    passing: list[str]
    human: list[str]


@dataclass
class CallRow:
    """One model call of an attempt, as the gateway measured it."""

    model: str
    status: str
    tokens_in: int
    tokens_out: int
    cost: str
    ms: str


def call_rows(text: str) -> list[CallRow]:
    """``calls.jsonl`` (the worker's file) as rows; a line not of its shape (one a crash
    cut, say) is left out."""
    rows = []
    for line in text.splitlines():
        try:
            c = json.loads(line)
        except ValueError:
            continue
        if not isinstance(c, dict) or count(c.get("status")) is None:
            continue
        rows.append(
            CallRow(
                model=str(c.get("model") or "?")[:80],
                status=str(c.get("status", "")),
                tokens_in=count(c.get("tokens_in")) or 0,
                tokens_out=count(c.get("tokens_out")) or 0,
                cost=_shown(c.get("cost_usd"), "${:.4f}"),
                ms=_shown(c.get("ms"), "{:.0f} ms"),
            )
        )
    return rows


def _shown(value: object, form: str) -> str:
    """A number of the worker's file in ``form``; "" for anything else (a bool included)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return ""
    return form.format(value)


@dataclass
class AttemptView:
    n: int
    outcome: str
    """``passed``, ``failed``, ``blocked``, ``running`` or ``no verdict``."""
    claim: str
    agent: str
    """One line on the agent's run: exit code, time, sandbox."""
    changed_files: list[str]
    gates: list[GateRow]
    verdict: str
    notes: list[str]
    usage: str
    fed: FeedbackView | None = None
    """The feedback this attempt's verdict became for the next attempt."""
    took: FeedbackView | None = None
    """The feedback this attempt was given (attempt 2 on)."""
    fingerprint: str = ""
    calls: list[CallRow] = field(default_factory=list)
    """Its model calls through the gateway (``agent.provider``)."""


def gate_row(g: GateResult) -> GateRow:
    ev = g.evidence
    if g.passed:
        verdict = "pass"
    elif g.policy_violation:
        verdict = "BLOCKED"
    elif g.uncertain:
        verdict = "uncertain"
    else:
        verdict = "FAIL"
    return GateRow(
        name=g.name,
        kind=g.kind,
        passed=g.passed,
        verdict=verdict,
        exit_code="" if ev.exit_code is None else str(ev.exit_code),
        output_tail=ev.output_tail.rstrip(),
        failure=list(ev.failure),
        files=list(ev.files),
        detail=ev.detail,
        requirement=g.requirement,
        duration=f"{ev.duration_s:.1f} s" if ev.duration_s else "",
        log=f"gate-{g.name}.log" if g.kind == "run" else "",
        tests=(
            ", ".join(f"{n} {k}" for k, n in ev.tests.counts.items()) + f" ({ev.tests.runner})"
            if ev.tests is not None
            else ""
        ),
        failing=[
            (c.id, c.outcome + (f", at base {c.at_base}" if c.at_base else ""), headline(c.message))
            for c in (ev.tests.failing if ev.tests is not None else [])
        ],
        quoted=list(ev.quoted),
    )


def feedback_view(fb: Feedback | None) -> FeedbackView | None:
    if fb is None:
        return None
    return FeedbackView(
        after_attempt=fb.after_attempt,
        failed=[(f.gate, f.requirement, f.required_correction) for f in fb.failed],
        passing=list(fb.passing),
        human=list(fb.human_feedback),
    )


def _outcome(a: AttemptRecord, last: bool, open_: bool) -> str:
    if a.verdict is None:
        return "running" if last and open_ else "no verdict"
    if a.verdict.policy_violations:
        return "blocked"
    return "passed" if a.verdict.passed else "failed"


def _agent_line(a: AttemptRecord) -> tuple[str, list[str]]:
    m = a.make
    if m is None:
        return "the agent has not finished", []
    parts = []
    if m.not_started:
        parts.append(f"did not start: {m.not_started}")
    elif m.timed_out:
        parts.append("timed out")
    elif m.exit_code is not None:
        parts.append(f"exit {m.exit_code}")
    if m.duration_s:
        parts.append(f"{m.duration_s:.1f} s")
    if m.sandbox_level:
        parts.append(m.sandbox_level.split(";")[0])
    if m.metered:
        parts.append(f"{m.model_calls} model calls through the gateway")
    notes = []
    if m.gateway_refused:
        notes.append("refused by the model gateway: " + "; ".join(m.gateway_refused[:5]))
    if m.ignored_files:
        notes.append("ignored by git, so not judged: " + ", ".join(m.ignored_files[:10]))
    if m.network_refused:
        notes.append("refused by the egress proxy: " + "; ".join(m.network_refused[:5]))
    if m.outside_writes:
        notes.append("wrote outside the worktree: " + ", ".join(m.outside_writes[:10]))
    if m.disk_exceeded:
        notes.append(m.disk_exceeded)
    if m.not_committed:
        notes.append(f"not committed: {m.not_committed}")
    if m.removed:
        notes.append("removed before the commit: " + ", ".join(m.removed[:10]))
    return " · ".join(parts), notes


def timeline(
    result: TaskResult, *, open_: bool = False, calls: dict[int, list[CallRow]] | None = None
) -> list[AttemptView]:
    """Every attempt: the agent's claim next to the gates' verdict, and the feedback that
    went into the next attempt."""
    views = []
    attempts = result.attempts
    for i, a in enumerate(attempts):
        agent, notes = _agent_line(a)
        m = a.make
        nxt = attempts[i + 1] if i + 1 < len(attempts) else None
        u = a.usage
        views.append(
            AttemptView(
                n=a.attempt,
                outcome=_outcome(a, nxt is None, open_),
                claim=(m.claim.strip() if m else ""),
                agent=agent,
                changed_files=list(m.changed_files) if m else [],
                gates=[gate_row(g) for g in a.verdict.gates] if a.verdict else [],
                verdict=a.verdict.summary() if a.verdict else "",
                notes=notes,
                usage=(
                    spent(u.tokens, u.cost_usd, u.tool_calls)
                    if (u.tokens or u.cost_usd or u.tool_calls)
                    else ""
                ),
                fed=feedback_view(nxt.feedback) if nxt else None,
                took=feedback_view(a.feedback),
                fingerprint=a.fingerprint,
                calls=(calls or {}).get(a.attempt, []),
            )
        )
    return views
