"""What a person reads is in Loopwork's words: its states and the commands a person runs,
never a signal's wire name, a Temporal status, or a count Loopwork did not make."""

from __future__ import annotations

from loop.contracts import WAITING_APPROVAL, WAITING_DECISION
from loop.rules.answers import waiting_words
from loop.rules.record import spent


def test_an_agent_clis_tool_calls_are_not_shown_as_zero() -> None:
    """Only Loopwork's own model loop counts tool calls; a CLI agent's "0" would be false."""
    assert spent(1200, 0.0123, 0) == "1,200 tokens · $0.0123"
    assert spent(1200, 0.0123, 7) == "1,200 tokens · $0.0123 · 7 tool calls"


def test_what_a_task_waits_for_is_named_by_the_commands_that_give_it() -> None:
    for wire in (WAITING_APPROVAL, WAITING_DECISION):
        words = waiting_words(wire)
        assert "extend_budget" not in words and "/" not in words
        assert "loop reject" in words
    assert "loop extend" in waiting_words(WAITING_DECISION)
