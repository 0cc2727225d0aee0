"""What a command agent spent, and what it said went wrong, read from what it left.

Agent CLIs report their usage in their own words: Claude Code's final ``result``
event (``--output-format stream-json``), aider's ``Tokens: … Cost: $…`` lines,
Codex's ``turn.completed`` events (``--json``). Any agent (or a wrapper) may
instead write ``LOOP_USAGE_FILE``: ``{"tokens_in": n, "tokens_out": n,
"cost_usd": x}``. Both are the agent's own claims, read as hostile input: bounded,
validated, never trusted beyond being numbers.

The same output says why a run failed when its exit code does not (aider exits 0
on an authentication error; Claude Code's ``result`` carries ``is_error``); an
error no later attempt can fix (the key refused, the endpoint unreachable) is
``fatal``, so the task ends BLOCKED instead of burning attempts.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

MAX_TOKENS = 10**12
MAX_COST = 10.0**6


@dataclass
class Reported:
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    """None when the agent reports tokens only (Codex): priced by ``agent.model``."""
    error: str = ""
    fatal: bool = False
    found: bool = False
    """Whether any usage was reported at all."""

    def add(self, tokens_in: int, tokens_out: int) -> None:
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.found = True


def read(source: str, log: str, usage_file: bytes | None) -> Reported:
    """The usage and error ``source`` (``agent.usage``, resolved) reports in ``log``; a
    ``LOOP_USAGE_FILE`` the agent wrote wins over what its log says about usage."""
    reader = _READERS.get(source)
    found = reader(log) if reader is not None else Reported()
    if usage_file is not None:
        declared = from_file(usage_file)
        declared.error, declared.fatal = found.error or declared.error, found.fatal
        return declared
    return found


def from_file(data: bytes) -> Reported:
    """``LOOP_USAGE_FILE``: ``{"tokens_in", "tokens_out", "cost_usd"}`` (or ``tokens``)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return Reported(error="LOOP_USAGE_FILE is not JSON")
    if not isinstance(doc, dict):
        return Reported(error="LOOP_USAGE_FILE is not a JSON object")
    got = Reported()
    tokens_in = _count(doc.get("tokens_in", doc.get("tokens", 0)))
    tokens_out = _count(doc.get("tokens_out", 0))
    if tokens_in is None or tokens_out is None:
        return Reported(error="LOOP_USAGE_FILE: tokens must be whole numbers >= 0")
    got.add(tokens_in, tokens_out)
    if "cost_usd" in doc:
        cost = doc["cost_usd"]
        ok = isinstance(cost, int | float) and not isinstance(cost, bool)
        if not ok or not math.isfinite(cost) or not 0 <= cost <= MAX_COST:
            return Reported(error="LOOP_USAGE_FILE: cost_usd must be a number >= 0")
        got.cost_usd = float(cost)
    return got


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        return None
    return value


def _json_lines(log: str) -> list[dict[str, Any]]:
    found = []
    for line in log.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                found.append(doc)
    return found


# --------------------------------------------------------------------------- Claude Code

_UNREACHABLE = ("Unable to connect", "ConnectionRefused", "ENOTFOUND", "ECONNREFUSED")
_REFUSED_KEY = ("Invalid API key", "Not logged in", "authentication_failed")


def claude_code(log: str) -> Reported:
    """The ``result`` event of ``claude -p --output-format stream-json --verbose``: its
    ``usage`` (the server's sums) and ``total_cost_usd`` (the CLI's estimate)."""
    got = Reported()
    for event in _json_lines(log):
        if event.get("type") != "result":
            continue
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
        parts = [
            usage.get(k, 0)
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        counted = [_count(p) for p in parts]
        out = _count(usage.get("output_tokens", 0))
        if all(c is not None for c in counted) and out is not None:
            got.add(sum(c for c in counted if c is not None), out)
        cost = event.get("total_cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost <= MAX_COST:
            got.cost_usd = (got.cost_usd or 0.0) + float(cost)
        if event.get("is_error"):
            text = str(event.get("result") or event.get("subtype") or "error")[:300]
            got.error = f"claude: {text}"
            status = event.get("api_error_status")
            got.fatal = status in (401, 403) or any(
                s in text for s in (*_REFUSED_KEY, *_UNREACHABLE)
            )
    return got


# --------------------------------------------------------------------------- aider

_AIDER_TOKENS = re.compile(
    r"^Tokens: (?P<sent>[\d.]+k?) sent"
    r"(?:, (?P<write>[\d.]+k?) cache write)?(?:, (?P<hit>[\d.]+k?) cache hit)?"
    r", (?P<received>[\d.]+k?) received\.(?:\s*Cost: \$(?P<message>[\d.]+) message, "
    r"\$(?P<session>[\d.]+) session\.)?",
    re.MULTILINE,
)
_AIDER_FATAL = (
    ("litellm.AuthenticationError", "the endpoint refused the key"),
    ("litellm.NotFoundError", "the endpoint does not know the model"),
    ("The API provider's servers are down", "the endpoint cannot be reached (aider gave up)"),
)


def _aider_number(text: str | None) -> int:
    """aider's counts: ``772``, ``1.2k``, ``12k``."""
    if not text:
        return 0
    if text.endswith("k"):
        return round(float(text[:-1]) * 1000)
    return round(float(text))


def aider(log: str) -> Reported:
    """aider's ``Tokens: … sent, … received. Cost: $… message, $… session.`` lines: the
    tokens added up, the cost the last ``session`` figure (its running total)."""
    got = Reported()
    for m in _AIDER_TOKENS.finditer(log):
        sent = sum(_aider_number(m.group(g)) for g in ("sent", "write", "hit"))
        got.add(sent, _aider_number(m.group("received")))
        if m.group("session"):
            got.cost_usd = float(m.group("session"))
    for marker, what in _AIDER_FATAL:
        if marker in log:
            lines = [ln.strip() for ln in log.splitlines() if ln.startswith("litellm.")]
            detail = f": {lines[-1][:200]}" if lines else ""
            got.error, got.fatal = f"aider: {what}{detail}", True
            break
    return got


# --------------------------------------------------------------------------- Codex


def codex(log: str) -> Reported:
    """``codex exec --json``: the ``usage`` of every ``turn.completed`` (no cost: priced by
    ``agent.model``), and ``turn.failed`` or a network it keeps waiting for."""
    got = Reported()
    for event in _json_lines(log):
        kind = event.get("type")
        if kind == "turn.completed" and isinstance(event.get("usage"), dict):
            usage = event["usage"]
            tokens_in = _count(usage.get("input_tokens", 0))
            tokens_out = _count(usage.get("output_tokens", 0))
            reasoning = _count(usage.get("reasoning_output_tokens", 0))
            if None not in (tokens_in, tokens_out, reasoning):
                got.add(tokens_in or 0, (tokens_out or 0) + (reasoning or 0))
        elif kind == "turn.failed":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            text = str(error.get("message") or "turn failed")[:300]
            got.error = f"codex: {text}"
            got.fatal = any(f"status {c}" in text for c in (401, 403, 404))
        elif kind == "error" and "waiting for network" in str(event.get("message")):
            got.error = f"codex: the endpoint cannot be reached: {event.get('message')}"[:300]
            got.fatal = True
    return got


_READERS = {"claude-code": claude_code, "aider": aider, "codex": codex}
