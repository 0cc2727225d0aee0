"""What a tool call ends as: text for the model, a failure it can act on, or a
policy violation that ends the attempt.
"""

from __future__ import annotations

from dataclasses import dataclass


class PolicyViolation(Exception):
    """A call that tried to leave the worktree, enter ``.git`` or write a protected path.

    The message is one line naming the path; the workflow ends the attempt BLOCKED.
    """


class ToolError(Exception):
    """A failure the model can act on (missing file, ambiguous edit, refused command).

    The message is shown to the model after ``error: ``; the loop goes on.
    """


@dataclass
class ToolOutcome:
    """What one tool call produced; ``text`` is exactly what the model will read."""

    text: str
    ok: bool = True
    error: str = ""
    """The failure in one line, starting with ``error:`` (empty when ``ok``)."""
    policy_violation: str = ""
    finished: bool = False
    answer: str = ""

    @classmethod
    def failure(cls, message: str, detail: str = "") -> ToolOutcome:
        error = message if message.startswith("error:") else f"error: {message}"
        text = f"{error}\n{detail}" if detail else error
        return cls(text=text, ok=False, error=error)


def cut(text: str, limit: int, *, keep: str = "first", hint: str = "") -> str:
    """``text`` if it fits in ``limit`` characters; else its first (or last) ``limit``
    characters followed by a note that says how much there was, so the model knows it
    has not seen everything and how to see more."""
    if len(text) <= limit:
        return text
    shown = text[:limit] if keep == "first" else text[-limit:]
    more = f"; {hint}" if hint else ""
    return f"{shown}\n[output cut: {len(text)} characters, showing the {keep} {limit}{more}]"


def clean(text: str) -> str:
    """Text safe to send as JSON: lone surrogates (undecodable file names) and NULs go."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
