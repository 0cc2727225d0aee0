"""A status's figures as of now (``loop.rules.progress``): the time since the workflow's
last step while its clock runs, the running attempt's spending from its heartbeat, never
counted twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from loop.contracts import (
    BudgetFigures,
    BudgetStatus,
    Phase,
    Progress,
    TaskState,
    TaskStatus,
)
from loop.rules.progress import attempt_seconds, line, live

AS_OF = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
NOW = AS_OF + timedelta(seconds=30)


def status(**changes: object) -> TaskStatus:
    st = TaskStatus(
        task_id="t",
        state=TaskState.RUNNING,
        phase=Phase.MAKE,
        attempt=2,
        budget=BudgetStatus(
            used=BudgetFigures(attempts=2, seconds=10.0, tokens=1000, cost_usd=0.01),
            left=BudgetFigures(attempts=1, seconds=90.0, tokens=None, cost_usd=0.99),
        ),
        as_of=AS_OF.isoformat(),
        ticking=True,
        attempt_started=(AS_OF - timedelta(seconds=5)).isoformat(),
    )
    return st.model_copy(update=changes)


RUNNING = Progress(attempt=2, seconds=33.0, tokens=500, cost_usd=0.25, calls=3, metered=True,
                   last_line="running tests")  # fmt: skip


def test_the_clock_and_the_running_attempt_move_the_figures() -> None:
    st = live(status(), RUNNING, NOW)
    used, left = st.budget.used, st.budget.left
    assert (used.seconds, used.tokens, used.cost_usd) == (40.0, 1500, 0.26)
    assert (left.seconds, left.tokens, left.cost_usd) == (60.0, None, 0.74)  # no limit stays
    assert st.progress == RUNNING


def test_a_wait_costs_no_time() -> None:
    st = live(status(ticking=False, phase=None), None, NOW)
    assert st.budget.used.seconds == 10.0 and st.budget.left.seconds == 90.0


def test_a_finished_attempt_is_not_counted_twice() -> None:
    """After make, the status holds the attempt's figures: a heartbeat read just before
    (describe, then query) must not be added again, nor one of another attempt."""
    for st in (status(phase=Phase.VERIFY), status(attempt=3)):
        moved = live(st, RUNNING, NOW)
        assert moved.budget.used.tokens == 1000 and moved.progress is None


def test_what_is_left_never_goes_below_nothing() -> None:
    spent = RUNNING.model_copy(update={"cost_usd": 5.0})
    assert live(status(), spent, NOW).budget.left.cost_usd == 0


def test_an_unreadable_as_of_adds_no_time() -> None:
    assert live(status(as_of="yesterday"), None, NOW).budget.used.seconds == 10.0


def test_the_line_says_time_spending_calls_and_the_last_words() -> None:
    st = live(status(), RUNNING, NOW)
    assert attempt_seconds(st, NOW) == 35.0  # by the reader's clock, not the beat's 33
    assert line(st.progress, attempt_seconds(st, NOW)) == (
        "attempt 2 · 35 s · 500 tokens · $0.2500 · 3 model calls · last: running tests"
    )
    unmetered = RUNNING.model_copy(update={"metered": False, "last_line": ""})
    assert line(unmetered) == "attempt 2 · 33 s · 500 tokens · $0.2500"
    assert line(None) == ""
