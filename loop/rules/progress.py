"""A task's figures as of now, not as of its workflow's last step.

The ``status`` query answers from the workflow's state, whose clock stands at its last
step: during a 20-minute attempt it would say the same seconds, tokens and cost on
every poll. A reader moves them on with what it knows besides: the time since the
query's ``as_of`` while the wall clock runs, and what the running attempt has spent so
far (its step's heartbeat, ``Progress``), until that attempt's own figures are in the
task's (docs/concepts/states.md, "Progress").
"""

from __future__ import annotations

from datetime import datetime

from loop.contracts import BudgetStatus, Phase, Progress, TaskStatus


def live(st: TaskStatus, progress: Progress | None, now: datetime) -> TaskStatus:
    """``st`` as of ``now``, with the running attempt's ``progress`` (kept in ``st``)."""
    seconds = _since(st.as_of, now) if st.ticking else 0.0
    running = progress if _counts(st, progress) else None
    tokens = running.tokens if running else 0
    cost = running.cost_usd if running else 0.0
    used, left = st.budget.used, st.budget.left
    budget = BudgetStatus(
        used=used.model_copy(
            update={
                "seconds": round((used.seconds or 0.0) + seconds, 1),
                "tokens": (used.tokens or 0) + tokens,
                "cost_usd": round((used.cost_usd or 0.0) + cost, 6),
            }
        ),
        left=left.model_copy(
            update={
                "seconds": _less(left.seconds, seconds),
                "tokens": _less(left.tokens, tokens),
                "cost_usd": _less(left.cost_usd, cost),
            }
        ),
    )
    return st.model_copy(update={"budget": budget, "progress": running})


def attempt_seconds(st: TaskStatus, now: datetime) -> float | None:
    """How long the running attempt's agent has run, by the reader's clock (never less than
    its heartbeat says); None while no agent runs."""
    if not st.attempt_started or st.progress is None:
        return st.progress.seconds if st.progress is not None else None
    return max(_since(st.attempt_started, now), st.progress.seconds)


def line(p: Progress | None, seconds: float | None = None) -> str:
    """The running attempt in one line: ``attempt 2 · 41 s · 12,400 tokens · $0.0310 ·
    6 model calls · last: Running tests…`` ("" while no attempt's agent runs);
    ``seconds`` is its time by the reader's clock, else its heartbeat's."""
    if p is None:
        return ""
    said = f"attempt {p.attempt} · {p.seconds if seconds is None else seconds:.0f} s"
    said += f" · {p.tokens:,} tokens · ${p.cost_usd:,.4f}"
    if p.metered:
        said += f" · {p.calls} model call{'s' * (p.calls != 1)}"
    if p.last_line:
        said += f" · last: {p.last_line}"
    return said


def _counts(st: TaskStatus, progress: Progress | None) -> bool:
    """The heartbeat is of the attempt the status says runs, and its figures are not in
    the task's yet (after make, the status has them: counting both would be twice)."""
    return progress is not None and st.phase == Phase.MAKE and progress.attempt == st.attempt


def _since(at: str, now: datetime) -> float:
    try:
        then = datetime.fromisoformat(at)
    except ValueError:
        return 0.0
    if then.tzinfo is None or now.tzinfo is None:
        return 0.0
    return max(0.0, (now - then).total_seconds())


def _less(left: float | None, spent: float) -> float | None:
    """What is left after ``spent`` more ("no limit" stays so)."""
    return None if left is None else max(0, left - spent)
