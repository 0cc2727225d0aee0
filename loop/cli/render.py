"""How tasks look on a terminal: one status line, and the final table of gates with evidence."""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loop.contracts import (
    BudgetStatus,
    CandidateView,
    GateResult,
    TaskResult,
    TaskState,
    TaskStatus,
    TraceEvent,
)
from loop.hardened.text import for_terminal
from loop.rules.answers import waiting_words
from loop.rules.candidates import view
from loop.rules.explain import agent_trouble
from loop.rules.record import spent


def status_line(st: TaskStatus) -> str:
    text = f"[{st.task_id}] {st.state} · attempt {st.attempt}"
    if st.phase:
        text += f" · {st.phase}"
    elif st.waiting_for:
        text += f" · waits for {waiting_words(st.waiting_for)}"
    if st.last_verdict:
        text += f" · last verdict: {st.last_verdict}"
    if st.reason and st.state != TaskState.RUNNING:
        text += f" · {st.reason}"
    elif st.agent:
        text += f" · {st.agent}"
    if st.retried:
        text += f" · make retried in {st.retried} attempt(s), see `loop trace`"
    if st.host:
        text += f" · host {st.host}"
    return text


def money(value: float | None) -> str:
    return "no limit" if value is None else f"${value:,.4f}"


def count(value: float | None) -> str:
    return "no limit" if value is None else f"{round(value):,}"


def seconds(value: float | None) -> str:
    return "no limit" if value is None else f"{value:,.1f} s"


def budget_table(b: BudgetStatus) -> Table:
    """What a task has used of each budget and what is left of it."""
    table = Table("budget", "used", "left")
    used, left = b.used, b.left
    table.add_row("attempts", count(used.attempts or 0), count(left.attempts))
    table.add_row("wall clock", seconds(used.seconds or 0.0), seconds(left.seconds))
    table.add_row("tokens", count(used.tokens or 0), count(left.tokens))
    table.add_row("cost", money(used.cost_usd or 0.0), money(left.cost_usd))
    table.add_row("tool calls", count(used.tool_calls or 0), count(left.tool_calls))
    return table


def candidates_table(views: list[CandidateView]) -> Table:
    """A task's candidates: each one's state, attempts, spend and verdict, and the choice."""
    table = Table("candidate", "agent", "state", "attempts", "cost", "tokens", "verdict", "commit")
    for c in views:
        state = (
            str(c.state) + (f" ({c.phase})" if c.phase else "") + (" · chosen" if c.chosen else "")
        )
        state += f" · #{c.rank}" if c.rank else ""
        table.add_row(
            c.name, Text(for_terminal(c.agent)), state, str(c.attempt), f"${c.cost_usd:.4f}",
            f"{c.tokens:,}", Text(for_terminal(c.last_verdict or c.reason)), c.commit[:12],
        )  # fmt: skip
    return table


class ProgressLine:
    """The running attempt's progress while ``--wait`` follows a task: one line updated in
    place on a terminal; elsewhere (a log, a pipe) a plain line when it changed, at most
    every ``PLAIN_EVERY_S`` seconds. Event lines are printed above it (``clear`` first)."""

    PLAIN_EVERY_S = 10.0

    def __init__(self, out: Console) -> None:
        self.out = out
        self.live = out.is_terminal
        self.shown = ""
        self.printed_at = 0.0

    def show(self, text: str) -> None:
        if not text or text == self.shown:
            return
        if self.live:
            width = max(20, self.out.width - 1)
            self.out.file.write("\r\x1b[K" + for_terminal(text)[:width])
            self.out.file.flush()
        elif time.monotonic() - self.printed_at >= self.PLAIN_EVERY_S:
            self.out.print(text, markup=False)
            self.printed_at = time.monotonic()
        self.shown = text

    def clear(self) -> None:
        if self.live and self.shown:
            self.out.file.write("\r\x1b[K")
            self.out.file.flush()
        self.shown = ""


def event_line(task_id: str, ev: TraceEvent) -> str:
    return f"{ev.at[11:19]}  [{task_id}] {ev.kind:<9} {ev.detail}"


def evidence(g: GateResult) -> str:
    ev = g.evidence
    parts = []
    if ev.exit_code is not None and "exit code" not in ev.detail:
        parts.append(f"exit {ev.exit_code}")
    if ev.detail:
        parts.append(ev.detail)
    elif ev.files:
        parts.append(", ".join(ev.files[:5]))
    if ev.quoted:
        parts.append(ev.quoted[0][:160])
    tail = [ln for ln in ev.output_tail.strip().splitlines() if ln.strip()]
    if ev.failure and not g.passed:
        parts.append(ev.failure[0][:160])
    elif tail and not g.passed and ev.tests is None:
        parts.append(tail[-1][:100])
    return " · ".join(parts)


def print_result(out: Console, r: TaskResult) -> None:
    out.print()
    headline = Text(f"{r.task_id}: {r.state}", style="bold")
    headline.append(f" — {for_terminal(r.reason)}", style="")
    out.print(headline)
    if r.candidates:
        out.print(candidates_table([view(c) for c in r.candidates]))
        if r.choice:
            out.print(f"chosen: {for_terminal(r.choice)}", markup=False)
    print_gates(out, r)


def print_gates(out: Console, r: TaskResult) -> None:
    """Each attempt's gates and their evidence, and what went wrong with its agent: the
    same table whether the task ended, waits for a person, or is still running."""
    table = Table("attempt", "gate", "result", "evidence")
    for a in r.attempts:
        if a.verdict is None:
            table.add_row(str(a.attempt), "-", "-", "did not reach verify")
            continue
        for g in a.verdict.gates:
            verdict = (
                Text("pass", style="green")
                if g.passed
                else Text("uncertain", style="yellow")
                if g.uncertain
                else Text("FAIL", style="red")
            )
            table.add_row(str(a.attempt), g.name, verdict, evidence(g))
    out.print(table)
    for a in r.attempts:
        made = a.make
        if made is None:
            continue
        trouble = agent_trouble(made)
        if trouble:
            out.print(f"attempt {a.attempt}: {trouble}", markup=False)
        if made.network_refused:
            refused = "; ".join(made.network_refused[:3])
            more = (
                f" (+{len(made.network_refused) - 3} more)" if len(made.network_refused) > 3 else ""
            )
            out.print(
                f"attempt {a.attempt}: the egress proxy refused {for_terminal(refused)}{more}",
                markup=False,
            )
        if made.gateway_refused:
            refused = for_terminal("; ".join(made.gateway_refused[:3]))  # the agent's words
            out.print(f"attempt {a.attempt}: the model gateway refused {refused}", markup=False)
        if made.ignored_files:
            shown = ", ".join(made.ignored_files[:5])
            out.print(f"attempt {a.attempt}: ignored by git, so not judged: {shown}", markup=False)
    out.print(
        f"attempts: {len(r.attempts)} · final action: {r.final_action} · "
        f"branch: {r.branch or '-'} · commit: {r.commit[:12] or '-'} · "
        f"active time: {r.execution_seconds:.1f} s",
        markup=False,
    )
    if r.tokens or r.cost_usd or r.tool_calls:
        for a in r.attempts:
            u = a.usage
            out.print(f"attempt {a.attempt}: {spent(u.tokens, u.cost_usd, u.tool_calls)}")
        out.print(f"total: {spent(r.tokens, r.cost_usd, r.tool_calls)}")
    if r.worktree:
        removed = any(ev.kind == "worktree" and ev.detail == "removed" for ev in r.events)
        where = f" on host {r.host}" if r.host else ""
        out.print(f"worktree: {r.worktree}{where}{' (removed)' if removed else ''}", markup=False)
    if r.trace_path:
        out.print(f"trace: {r.trace_path} · notes: {r.notes_path}", markup=False)
