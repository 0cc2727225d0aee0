"""What every agent CLI module provides, and the parsing helpers they share.

A CLI's output is its own claim, read as hostile input: bounded, validated, never
trusted beyond being numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_TOKENS = 10**12
MAX_COST = 10.0**6


@dataclass
class Reported:
    """What a run said it spent, and what it said went wrong."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    """None when the agent reports tokens only (Codex): priced by ``agent.model``."""
    error: str = ""
    fatal: bool = False
    """An error no later attempt can fix (the key refused, the endpoint unreachable)."""
    found: bool = False
    """Whether any usage was reported at all."""

    def add(self, tokens_in: int, tokens_out: int) -> None:
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.found = True


@dataclass(frozen=True)
class CliEndpoint:
    """Where a known agent CLI sends its model calls, and the key it sends."""

    url_variable: str
    default_url: str
    key_variable: str


@dataclass(frozen=True)
class AgentCli:
    """One agent CLI Loopwork knows by name: everything about it in one value."""

    name: str
    """What ``agent.usage`` calls it (``claude-code``)."""
    programs: tuple[str, ...]
    """The program names that, first in a command, mean this CLI runs (``claude``)."""
    byproducts: tuple[str, ...]
    """Globs of what it leaves in the worktree (history, caches, settings): never committed."""
    endpoint: CliEndpoint
    read_usage: Callable[[str], Reported]
    """Its usage and fatal errors, from the log of one run."""
    read_claim: Callable[[str], str]
    """Its final message to the person, from the log of one run ("" when it has none):
    what the review page and ``loop status`` show as the agent's claim."""
    sample: str
    """A log of one run that reports usage and ends with a message, as the CLI prints it
    (docs and tests)."""


def count(value: Any) -> int | None:
    """A token count the CLI printed, or None when it is not a whole number in range."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        return None
    return value


def cost(value: Any) -> float | None:
    """A cost the CLI printed, or None when it is not a number in range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= MAX_COST else None


def json_lines(log: str) -> list[dict[str, Any]]:
    """The JSON objects of a log that prints one event per line."""
    found = []
    for line in log.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except (ValueError, RecursionError):  # the agent prints what it likes
                continue
            if isinstance(doc, dict):
                found.append(doc)
    return found
