"""View models: what the pages show, computed from Loopwork's contracts with no I/O.

A trace (``TaskResult``) and a status (``TaskStatus``) go in; the rows of the task list,
an attempt's timeline with its gates, the budget bars, the eval charts and the period
ledger's bars come out, ready for a template. Tested without a browser or a server.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime

from loop.contracts import (
    AttemptRecord,
    BudgetFigures,
    DaySpend,
    EvalReport,
    Feedback,
    GateResult,
    LedgerState,
    TaskResult,
    TaskState,
    TaskStatus,
)
from loop.rules import progress
from loop.rules.answers import answer_with, applies, waiting_words
from loop.rules.clis.base import count
from loop.rules.record import spent
from loop.rules.verdicts import headline
from loop.tasks import ANSWERS

WAITING = frozenset({TaskState.AWAITING_APPROVAL, TaskState.NEEDS_HUMAN})
STATES = [s.value for s in TaskState]


# --------------------------------------------------------------------------- the task list


@dataclass
class Listing:
    """One task as the visibility list and (for an open task) its status query see it."""

    task_id: str
    state: str
    """``LoopState``, or the workflow's own status when it closed some other way."""
    open: bool
    attempts: int = 0
    cost_usd: float = 0.0
    repo: str = ""
    started: datetime | None = None
    goal: str = ""
    status: TaskStatus | None = None
    """The ``status`` query of an open task (None when closed or it did not answer)."""
    max_attempts: int | None = None
    """The task file's limit, for a closed task (an open one's is in its status)."""
    sealed: str = ""
    """Why its payloads (goal, status, task file) cannot be read here: encrypted, and
    this page has no key or another one (the codec's message names the variable)."""
    reason: str = ""
    """The one line its state has (BLOCKED, NEEDS_HUMAN, BUDGET_EXCEEDED...), from the
    memo: read for an ended task too, without asking it."""


@dataclass
class TaskRow:
    task_id: str
    state: str
    phase: str
    attempt: str
    """``2 of 3`` (``2`` when the limit is unknown)."""
    repo: str
    cost: str
    age: str
    waits_for: str
    """A person (with what answers it), the worker (doing what), or nothing (ended)."""
    waiting: bool
    goal: str
    reason: str = ""
    sealed: str = ""
    """Why its goal and status are not shown (``Listing.sealed``)."""


def age(seconds: float) -> str:
    """``12 s``, ``5 min``, ``3 h``, ``2 d``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h"
    return f"{s // 86400} d"


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def _rank(row: TaskRow) -> int:
    if row.waiting:
        return 0
    return 1 if row.state == TaskState.RUNNING else 2


def task_rows(listings: list[Listing], now: datetime) -> list[TaskRow]:
    """Tasks waiting for a person first, then running ones, then ended; newest first."""
    rows = []
    ordered = sorted(listings, key=lambda x: x.started or datetime.min.replace(tzinfo=now.tzinfo))
    for x in reversed(ordered):
        st = x.status
        state = str(st.state) if st else x.state
        attempt = st.attempt if st else x.attempts
        limit = x.max_attempts
        if st and st.budget.left.attempts is not None:
            limit = (st.budget.used.attempts or 0) + st.budget.left.attempts
        waits_for, reason = "", ""
        if st and st.waiting_for:
            waits_for = f"a person: {waiting_words(st.waiting_for)}"
            reason = st.reason
        elif x.sealed and x.open:  # the search attributes are clear: its state is known
            waits_for = "a person" if state in WAITING else "the worker"
        elif x.open and st is None:
            waits_for = "a worker (no answer to the status query)"
        elif x.open and state == TaskState.RUNNING:
            waits_for = f"the worker ({st.phase})" if st.phase else "the worker"
        if not reason and state != TaskState.RUNNING:
            reason = x.reason
        rows.append(
            TaskRow(
                task_id=x.task_id,
                state=state,
                phase=str(st.phase) if st and st.phase else "",
                attempt=f"{attempt} of {limit}" if limit else str(attempt),
                repo=x.repo,
                cost=money(x.cost_usd),
                age=age((now - x.started).total_seconds()) if x.started else "",
                waits_for=waits_for,
                waiting=x.open and state in WAITING,
                goal=first_line(x.goal),
                reason=reason,
                sealed=x.sealed,
            )
        )
    return sorted(rows, key=_rank)


def sealed_note(rows: list[TaskRow]) -> str:
    """One line over the list when some tasks cannot be read here: how many, and the
    codec's reason (which names LOOP_CODEC_KEY_FILE)."""
    reasons = sorted({r.sealed for r in rows if r.sealed})
    if not reasons:
        return ""
    n = sum(1 for r in rows if r.sealed)
    tasks = "1 task is" if n == 1 else f"{n} tasks are"
    return f"{tasks} encrypted; their goal and status are not shown: " + "; ".join(
        reason.removeprefix("the payloads are encrypted: ") for reason in reasons
    )


def first_line(text: str, limit: int = 120) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --------------------------------------------------------------------------- budget bars


@dataclass
class Bar:
    label: str
    used: float
    limit: float | None
    text: str
    percent: float
    """Width of the filled part, 0-100 (a bar without a limit is drawn empty)."""
    level: str
    """``ok``, ``high`` (80 % or more), ``over`` (the limit is reached), ``none`` (no limit)."""


def bar(label: str, used: float, limit: float | None, fmt: str = "{:g}") -> Bar:
    shown = fmt.format(used)
    if limit is None:
        return Bar(label, used, None, f"{shown} (no limit)", 0.0, "none")
    pct = 100.0 if limit <= 0 else min(100.0, 100.0 * used / limit)
    level = "over" if used >= limit else "high" if pct >= 80 else "ok"
    return Bar(label, used, limit, f"{shown} of {fmt.format(limit)}", round(pct, 1), level)


def budget_bars(used: BudgetFigures, limits: BudgetFigures) -> list[Bar]:
    """Attempts, seconds, tokens and cost against their limits (``None``: no limit)."""
    return [
        bar("attempts", used.attempts or 0, limits.attempts, "{:.0f}"),
        bar("seconds", used.seconds or 0.0, limits.seconds, "{:.1f} s"),
        bar("tokens", used.tokens or 0, limits.tokens, "{:,.0f}"),
        bar("cost", used.cost_usd or 0.0, limits.cost_usd, "${:.4f}"),
    ]


def limits_of(st: TaskStatus) -> BudgetFigures:
    """The limits in force: what is used plus what is left (``None`` stays no limit)."""
    used, left = st.budget.used, st.budget.left

    def plus(u: float | None, remaining: float | None) -> float | None:
        return None if remaining is None else (u or 0) + remaining

    return BudgetFigures(
        attempts=plus(used.attempts, left.attempts),
        seconds=plus(used.seconds, left.seconds),
        tokens=plus(used.tokens, left.tokens),
        cost_usd=plus(used.cost_usd, left.cost_usd),
        tool_calls=plus(used.tool_calls, left.tool_calls),
    )


def used_of(result: TaskResult) -> BudgetFigures:
    """What a trace says was spent (for a task whose status cannot be asked any more)."""
    return BudgetFigures(
        attempts=len(result.attempts),
        seconds=result.execution_seconds,
        tokens=result.tokens,
        cost_usd=result.cost_usd,
        tool_calls=result.tool_calls,
    )


# --------------------------------------------------------------------------- the timeline


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


# --------------------------------------------------------------------------- the task page


@dataclass
class CandidateRow:
    """One candidate of a task with candidates, side by side with the others."""

    name: str
    agent: str
    state: str
    attempts: int
    spent: str
    verdict: str
    gates: list[GateRow]
    changed_lines: int
    branch: str
    commit: str
    chosen: bool
    rank: int
    reason: str
    approvable: bool
    """It waits for an approval that names it (``choose: person``)."""
    logs: str
    """Its own log folder's id (``<id>+<name>``): its attempts' logs are there."""


def candidate_rows(result: TaskResult, st: TaskStatus | None) -> list[CandidateRow]:
    """Each candidate with its evidence and cost; those an approval may name now marked."""
    waiting = {c.name: c.commit for c in st.candidates if c.commit} if st is not None else {}
    choosing = st is not None and applies("approve", st.state, st.waiting_for) and not st.commit
    live = {c.name: c for c in st.candidates if c.phase} if st is not None else {}
    rows = []
    for c in result.candidates:
        verdict = c.attempts[-1].verdict if c.attempts else None
        now = live.get(c.name)  # a running one's own figures so far
        said = verdict.summary() if verdict is not None else ""
        used = (now.tokens, now.cost_usd, 0) if now else (c.tokens, c.cost_usd, c.tool_calls)
        rows.append(
            CandidateRow(
                name=c.name,
                agent=c.agent,
                state=f"{c.state} ({now.phase})" if now else str(c.state),
                attempts=now.attempt if now else len(c.attempts),
                spent=spent(*used) or "nothing metered",
                verdict=now.last_verdict if now else said,
                gates=[gate_row(g) for g in verdict.gates] if verdict is not None else [],
                changed_lines=c.changed_lines,
                branch=c.workspace.branch if c.workspace is not None else "",
                commit=waiting.get(c.name, c.commit if c.passed else ""),
                chosen=c.chosen,
                rank=c.rank,
                reason=c.reason,
                approvable=choosing and c.name in waiting,
                logs=c.workflow_id.removeprefix("task-"),
            )
        )
    return rows


@dataclass
class EscalationRow:
    at: str
    reason: str
    waiting_for: str
    resolved_by: str


@dataclass
class EventRow:
    at: str
    kind: str
    detail: str
    decision: bool
    """A person's answer (``signal``) or one that did not apply (``signal-ignored``)."""


@dataclass
class Decisions:
    """The answers that apply now (the same rule as ``loop approve``/``reject``/...)."""

    approve: bool = False
    reject: bool = False
    feedback: bool = False
    extend: bool = False
    hint: str = ""
    """The equivalent CLI commands."""
    commit: str = ""
    """The commit the approve form approves (the one the task waits with)."""

    @property
    def any(self) -> bool:
        return self.approve or self.reject or self.feedback or self.extend

    @property
    def key(self) -> str:
        """Which forms are shown: the page replaces them only when this changes."""
        names = ("approve", "reject", "feedback", "extend")
        shown = ",".join(n for n in names if getattr(self, n)) or "none"
        return f"{shown}@{self.commit}" if self.commit else shown


def decisions(st: TaskStatus | None) -> Decisions:
    if st is None:
        return Decisions()
    return Decisions(
        **{what: applies(name, st.state, st.waiting_for) for what, name in ANSWERS.items()},
        hint=answer_with(st.task_id, st.waiting_for),
        commit=st.commit,
    )


@dataclass
class Running:
    """The running attempt's agent, as far as its last heartbeat says (its time by the
    page's clock): the page's progress line, refreshed with the other live parts."""

    attempt: int
    seconds: float
    tokens: int
    cost_usd: float
    calls: int
    metered: bool
    last_line: str
    """The agent's words: the template escapes them."""


def running(st: TaskStatus, now: datetime) -> Running | None:
    p = st.progress
    if p is None:
        return None
    seconds = progress.attempt_seconds(st, now) or 0.0
    return Running(
        attempt=p.attempt,
        seconds=round(seconds, 1),
        tokens=p.tokens,
        cost_usd=p.cost_usd,
        calls=p.calls,
        metered=p.metered,
        last_line=p.last_line,
    )


def escalations(result: TaskResult) -> list[EscalationRow]:
    return [
        EscalationRow(e.at, e.reason, waiting_words(e.waiting_for), e.resolved_by or "waiting")
        for e in result.human_escalation
    ]


def events(result: TaskResult) -> list[EventRow]:
    return [
        EventRow(e.at, e.kind, e.detail, e.kind in ("signal", "signal-ignored"))
        for e in result.events
    ]


# --------------------------------------------------------------------------- charts


@dataclass
class ChartBar:
    label: str
    value: float | None
    text: str
    percent: float
    link: str = ""


@dataclass
class Chart:
    title: str
    bars: list[ChartBar]
    note: str = ""


def chart(
    title: str, values: list[tuple[str, float | None]], fmt: str, *, top: float | None = None
) -> Chart:
    """Horizontal bars scaled to ``top`` (default: the largest value)."""
    known = [v for _, v in values if v is not None and math.isfinite(v)]
    scale = top if top is not None else (max(known) if known else 0.0)
    bars = []
    for label, v in values:
        if v is None:
            bars.append(ChartBar(label, None, "-", 0.0))
            continue
        pct = 0.0 if scale <= 0 else min(100.0, 100.0 * v / scale)
        bars.append(ChartBar(label, v, fmt.format(v), round(pct, 1)))
    return Chart(title, bars)


# --------------------------------------------------------------------------- eval


@dataclass
class FlipRow:
    case: str
    before: str
    after: str
    tasks: list[tuple[str, str]]
    """(harness, task id) of the case under each harness."""


@dataclass
class EvalView:
    suite: str
    run: str
    suite_hash: str
    harnesses: list[str]
    charts: list[Chart]
    cases: list[tuple[str, list[tuple[str, str, str, str]]]]
    """Per case: (state, attempts, task id, FAIL_TO_PASS passed/required) under each
    harness."""
    flips: list[FlipRow]


def eval_runs(text: str) -> list[EvalReport]:
    """The runs kept in ``eval-results.json`` (newest first); a run that does not decode
    is left out rather than hiding the others."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return []
    runs = data.get("runs", []) if isinstance(data, dict) else []
    found = []
    for r in runs:
        try:
            found.append(EvalReport.model_validate(r))
        except ValueError:
            continue
    return found


def eval_view(r: EvalReport) -> EvalView:
    names = [h.harness for h in r.harnesses]
    charts = [
        chart("pass rate", [(h.harness, h.pass_rate) for h in r.harnesses], "{:.0%}", top=1.0),
        chart("mean attempts", [(h.harness, h.mean_attempts) for h in r.harnesses], "{:.2f}"),
        chart(
            "cost per accepted task",
            [(h.harness, h.cost_per_accepted) for h in r.harnesses],
            "${:.4f}",
        ),
    ]
    if any(h.cost_per_accepted is None for h in r.harnesses):
        charts[2].note = "-: no task accepted, so no cost per accepted task"
    if any(h.k > 1 for h in r.harnesses):  # a harness with candidates: k tries per case
        charts += [
            chart("pass@1", [(h.harness, h.pass_at_1) for h in r.harnesses], "{:.0%}", top=1.0),
            chart(
                "pass@k",
                [(f"{h.harness} (k={h.k})", h.pass_at_k) for h in r.harnesses],
                "{:.0%}",
                top=1.0,
            ),
        ]
    by_case: dict[str, dict[str, tuple[str, str, str, str]]] = {}
    for o in r.outcomes:
        cell = (str(o.state), str(o.attempts), o.task_id, o.fail_to_pass)
        by_case.setdefault(o.case, {})[o.harness] = cell
    cases = [
        (case, [cells.get(h, ("-", "", "", "")) for h in names]) for case, cells in by_case.items()
    ]
    flips = [
        FlipRow(
            f.case,
            str(f.before),
            str(f.after),
            [(h, by_case.get(f.case, {}).get(h, ("", "", "", ""))[2]) for h in names],
        )
        for f in r.flipped
    ]
    return EvalView(r.suite, r.run, r.suite_hash[:12], names, charts, cases, flips)


# --------------------------------------------------------------------------- period ledgers


@dataclass
class Segment:
    kind: str
    """``spent``, ``reserved`` or ``left``."""
    value: float
    text: str
    percent: float


@dataclass
class LedgerBar:
    what: str
    limit: str
    segments: list[Segment]
    over: bool = False


@dataclass
class LedgerView:
    repo: str
    day: str
    bars: list[LedgerBar] = field(default_factory=list)
    open_reservations: int = 0


def ledger_bar(
    what: str, spent: float, reserved: float, limit: float | None, fmt: str
) -> LedgerBar:
    """Spent, reserved (held by running attempts) and left of a day's limit, as one bar."""
    if limit is None:
        top = spent + reserved
        segs = [
            Segment(kind, v, fmt.format(v), round(0.0 if top <= 0 else 100 * v / top, 1))
            for kind, v in (("spent", spent), ("reserved", reserved))
        ]
        return LedgerBar(what, "no limit", [s for s in segs if s.value > 0])
    left = max(0.0, limit - spent - reserved)
    top = max(limit, spent + reserved)
    segs = []
    for kind, value in (("spent", spent), ("reserved", reserved), ("left", left)):
        pct = 0.0 if top <= 0 else 100.0 * value / top
        segs.append(Segment(kind, value, fmt.format(value), round(pct, 1)))
    return LedgerBar(what, fmt.format(limit), segs, over=spent + reserved >= limit)


def ledger_view(st: LedgerState, day: str) -> LedgerView:
    d = st.days.get(day, DaySpend())
    return LedgerView(
        repo=st.repo,
        day=day,
        bars=[
            ledger_bar("cost", d.cost_usd, d.reserved_cost_usd, st.limits.cost_per_day, "${:.4f}"),
            ledger_bar(
                "tokens",
                float(d.tokens),
                float(d.reserved_tokens),
                None if st.limits.tokens_per_day is None else float(st.limits.tokens_per_day),
                "{:,.0f}",
            ),
        ],
        open_reservations=sum(1 for r in st.open.values() if r.day == day),
    )
