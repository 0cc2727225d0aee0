"""What a command agent spent, and what it said went wrong, read from what it left.

Agent CLIs report their usage in their own words (each CLI's module in
``loop.rules.clis`` reads its own). Any agent, or a wrapper, may instead write
``LOOP_USAGE_FILE``: ``{"tokens_in": n, "tokens_out": n, "cost_usd": x}``. Both are
the agent's own claims, read as hostile input: bounded, validated, never trusted
beyond being numbers.

The same output says why a run failed when its exit code does not (aider exits 0
on an authentication error; Claude Code's ``result`` carries ``is_error``); an
error no later attempt can fix is ``fatal``, so the task ends BLOCKED instead of
burning attempts.
"""

from __future__ import annotations

import json
import math

from loop.rules.clis import BY_NAME
from loop.rules.clis.base import MAX_COST, Reported, count

__all__ = ["Reported", "from_file", "read"]


def read(source: str, log: str, usage_file: bytes | None) -> Reported:
    """The usage and error ``source`` (``agent.usage``, resolved) reports in ``log``; a
    ``LOOP_USAGE_FILE`` the agent wrote wins over what its log says about usage."""
    cli = BY_NAME.get(source)
    found = cli.read_usage(log) if cli is not None else Reported()
    if usage_file is not None:
        declared = from_file(usage_file)
        declared.error, declared.fatal = found.error or declared.error, found.fatal
        return declared
    return found


def from_file(data: bytes) -> Reported:
    """``LOOP_USAGE_FILE``: ``{"tokens_in", "tokens_out", "cost_usd"}`` (or ``tokens``)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # an agent's file: any text
        return Reported(error="LOOP_USAGE_FILE is not JSON")
    if not isinstance(doc, dict):
        return Reported(error="LOOP_USAGE_FILE is not a JSON object")
    got = Reported()
    tokens_in = count(doc.get("tokens_in", doc.get("tokens", 0)))
    tokens_out = count(doc.get("tokens_out", 0))
    if tokens_in is None or tokens_out is None:
        return Reported(error="LOOP_USAGE_FILE: tokens must be whole numbers >= 0")
    got.add(tokens_in, tokens_out)
    if "cost_usd" in doc:
        spent = doc["cost_usd"]
        ok = isinstance(spent, int | float) and not isinstance(spent, bool)
        if not ok or not math.isfinite(spent) or not 0 <= spent <= MAX_COST:
            return Reported(error="LOOP_USAGE_FILE: cost_usd must be a number >= 0")
        got.cost_usd = float(spent)
    return got
