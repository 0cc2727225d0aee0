"""The words a person reads for what the workflow names on the wire.

A waiting task records what it waits for as the answers it takes (``approve/reject``):
wire names, which the review page, ``loop`` and messages turn into the thing a
person gives and the commands that give it.
"""

from __future__ import annotations

from loop.contracts import WAITING_APPROVAL, WAITING_DECISION


def waiting_words(waiting_for: str) -> str:
    """What a waiting task needs from a person, named by the commands that give it."""
    if waiting_for == WAITING_APPROVAL:
        return "approval (loop approve, or loop reject)"
    if waiting_for == WAITING_DECISION:
        return "a decision (loop feedback, loop extend, or loop reject)"
    return waiting_for
