"""The status comment a task keeps on its GitHub issue: what it says, and how.

One comment, edited in place as the task moves: its state, the attempt, why it waits or
ended, what a person can answer, its pull request, and the last verdict as a table of
gates. ``view`` is what the workflow knows, cut down to what the comment shows (so the
workflow can tell whether the comment needs an edit without asking GitHub, and history
holds a few lines per edit, not the evidence); ``comment`` writes the markdown with an
``inert`` function (``loop.hardened.text.for_github`` in the activity) applied to every
text Loopwork did not write itself: a gate's evidence, a reason quoting the agent.
"""

from __future__ import annotations

from collections.abc import Callable

from loop.contracts import GateResult, StatusGate, TaskState, TaskStatusView
from loop.rules.answers import waiting_words

MAX_GATES = 20
"""Rows of the verdict table; more are counted."""
MAX_SAID = 300

Inert = Callable[[str, int], str]
"""Text from outside Loopwork -> one inert markdown line of at most that many characters."""


def view(
    task_id: str,
    state: TaskState,
    attempt: int,
    max_attempts: int | None,
    reason: str,
    waiting_for: str,
    gates: list[GateResult],
    pull_request: str,
    commit: str = "",
) -> TaskStatusView:
    return TaskStatusView(
        task_id=task_id,
        state=state,
        attempt=attempt,
        max_attempts=max_attempts,
        reason=reason[:MAX_SAID],
        waiting_for=waiting_for,
        gates=[
            StatusGate(
                name=g.name,
                verdict="pass" if g.passed else ("uncertain" if g.uncertain else "fail"),
                said=_evidence(g)[:MAX_SAID],
            )
            for g in gates[: MAX_GATES + 1]
        ],
        more_gates=max(0, len(gates) - MAX_GATES),
        pull_request=pull_request,
        commit=commit,
    )


def comment(v: TaskStatusView, inert: Inert) -> str:
    """The comment's markdown (the activity adds the review page's link where it knows it)."""
    of = f" of {v.max_attempts}" if v.max_attempts else ""
    task = v.task_id.replace("`", "'")  # ids are [A-Za-z0-9._-]: belt and braces
    lines = [f"**Loopwork** · task `{task}` · **{v.state.value}** · attempt {v.attempt}{of}"]
    if v.reason:
        lines += ["", inert(v.reason, MAX_SAID)]
    if v.waiting_for:
        lines += ["", f"Waits for {inert(waiting_words(v.waiting_for), MAX_SAID)}."]
    if v.commit:
        # What `/loop approve` approves: a comment made before this commit waited does not.
        lines += ["", f"Commit to approve: `{v.commit[:40]}`"]  # git's hex
    if v.pull_request:
        lines += ["", f"Pull request: {inert(v.pull_request, MAX_SAID)}"]
    if v.gates:
        lines += ["", "| gate | verdict | evidence |", "| --- | --- | --- |"]
        for g in v.gates[:MAX_GATES]:
            verdict = g.verdict if g.verdict != "fail" else "**fail**"
            lines.append(f"| {inert(g.name, 60)} | {verdict} | {inert(g.said, 200)} |")
        if v.more_gates:
            lines.append(f"| … | {v.more_gates} more | |")
    return "\n".join(lines)


def _evidence(g: GateResult) -> str:
    e = g.evidence
    if e.tests is not None and e.tests.counts:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(e.tests.counts.items()))
        return f"{e.tests.runner}: {counts}"
    said = e.detail or (e.failure[0] if e.failure else "")
    if not said and e.exit_code is not None:
        said = f"exit {e.exit_code}"
    return said
