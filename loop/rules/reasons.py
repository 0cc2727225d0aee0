"""Why a task waits or ended, in words that name the cause (docs/concepts/states.md).

A person reading ``no new evidence`` in the inbox learns that the loop gave up, not
why: ``repeated`` names the gate that kept failing, how often in a row, and what it
saw last ("scope failed 3 times: slugify.py outside src/**"). ``met_at_base`` says when
the task file's gates cannot tell a fix from no change at all, before any attempt is
spent on it.

Pure on purpose: the task workflow imports this module.
"""

from __future__ import annotations

from loop.contracts import AttemptRecord, GateResult, RunGate, TaskSpec, Verdict

DETAIL_CHARS = 200
SAME_AS_UNCHANGED = frozenset({"run", "diff_scope", "no_removed_tests"})
"""Gate kinds whose verdict on an attempt that changes nothing is their verdict at base:
a ``run`` gate is judged against base, and an empty diff is within any scope and removes
no test. Every other kind (a review, a claim, a regression test, CI checks) needs the
attempt to judge."""


def evidence_line(g: GateResult) -> str:
    """What a gate saw, in one line: its detail, else the line that says what
    failed, else its output's last line."""
    ev = g.evidence
    lines = [ln.strip() for ln in ev.output_tail.splitlines() if ln.strip()]
    said = ev.detail or (ev.failure[0] if ev.failure else "") or (lines[-1] if lines else "")
    said = " ".join(said.split())
    return said[:DETAIL_CHARS] + ("…" if len(said) > DETAIL_CHARS else "")


def repeated(attempts: list[AttemptRecord]) -> str:
    """The failure the last judged attempt ended with, and in how many attempts in a row
    its gate failed: ``scope failed 3 times: slugify.py outside src/**``; "" when the last
    attempt that reached verify did not fail."""
    judged = [a for a in attempts if a.verdict is not None]
    last = judged[-1].verdict if judged else None
    if last is None or last.passed or not last.failed:
        return ""
    gate = last.failed[0]
    times = 0
    for a in reversed(attempts):
        if a.verdict is None or not _fails(a.verdict, gate.name):
            break
        times += 1
    said = f"{gate.name} failed {_times(times)}: {evidence_line(gate)}".rstrip(": ")
    others = [g.name for g in last.failed[1:]]
    if others:
        said += f"; {', '.join(others)} failed too"
    return said


def at_base(spec: TaskSpec, reproducer: Verdict) -> tuple[str, bool]:
    """Why a person must answer before any attempt is spent, from explore's run at base:
    (why, whether it is because the goal is met already); ("", False) to go on. A gate
    unsure at base comes first: nothing an attempt did could be judged."""
    unsure = [g for g in reproducer.gates if g.uncertain]
    if unsure:
        return "at base, " + "; ".join(f"{g.name}: {g.evidence.detail}" for g in unsure), False
    met = met_at_base(spec, reproducer)
    return met, bool(met)


def met_at_base(spec: TaskSpec, reproducer: Verdict) -> str:
    """Why no attempt is needed, or can be judged: every gate would pass without a change
    (each ``run`` gate passes at base, with nothing required to go from failing to
    passing, and the rest are kinds an empty change passes); "" otherwise."""
    runs = [g for g in spec.verify if isinstance(g, RunGate)]
    if not runs or not reproducer.gates or not reproducer.passed:
        return ""
    if any(g.kind not in SAME_AS_UNCHANGED for g in spec.verify):
        return ""
    if any(g.uncertain or not g.passed for g in reproducer.gates):
        return ""
    seen = "; ".join(f"{g.name}: {evidence_line(g) or 'pass'}" for g in reproducer.gates)
    return (
        f"goal already met at base: every gate passes before any change ({seen}), so no "
        "attempt could show a fix; if the goal does not hold, add a test that fails at base "
        "and answer with feedback, or reject"
    )


def _fails(verdict: Verdict, name: str) -> bool:
    return any(g.name == name and not g.passed for g in verdict.gates)


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"
