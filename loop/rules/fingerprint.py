"""Failure fingerprints: the same failure, seen twice, gives the same short hash.

The task workflow stops with "no new evidence" when ``max_stalled_attempts``
attempts in a row fail with the same fingerprint. So the fingerprint must
ignore what changes between two runs of an identical failure (timings, line
numbers that moved because the agent edited around them, memory addresses,
temporary folders, pids, the window of a truncated output tail) and keep what
says which failure it is (failed gate names, exit codes, messages, files).

Pure on purpose: workflow code imports this module, so no I/O, no clock, no
randomness; only the standard library and ``loop.contracts``.
"""

from __future__ import annotations

import hashlib
import json
import re

from loop.contracts import GateResult

KEEP_CHARS = 3_000
"""Normalised text kept from the end: a tail window that moved a little still matches."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# ``activities.host.proc.tail_of`` marks a cut tail; the line after the mark starts mid-line.
_TRUNCATED = re.compile(r"\A\[… \d+ earlier bytes in the log\]\n[^\n]*(?:\n|\Z)")

_RULES: list[tuple[re.Pattern[str], str]] = [
    # timestamps and clock times: 2024-05-01T12:00:03.123Z, 12:00:03, (0:01:01)
    (
        re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),
        "<time>",
    ),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    # memory addresses and other hex ids
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "0x?"),
    # folders of absolute paths (the file name is kept): /tmp/pytest-3/x/app.py -> <path>/app.py
    (re.compile(r"(?<![\w.:/~-])/(?:[^\s/:'\"()\[\]<>,;=]+/)+"), "<path>/"),
    # temporary names: tempfile's tmpab12_x9, pytest's pytest-12
    (re.compile(r"\btmp[A-Za-z0-9_]{5,}"), "tmp*"),
    (re.compile(r"\bpytest-\d+\b"), "pytest-N"),
    # durations: 0.12s, 3.41 seconds, 250 ms, 2 min
    (
        re.compile(
            r"\b\d+(?:\.\d+)?\s?(?:ms|msecs?|milliseconds?|s|secs?|seconds?|min|minutes?)\b"
        ),
        "<t>",
    ),
    # line numbers: app.py:123, app.py:12:5, line 45
    (re.compile(r"\bline \d+"), "line N"),
    (re.compile(r":\d+\b"), ":N"),
    # process ids
    (re.compile(r"\b(pid|process)([\s=:#]*)\d+", re.IGNORECASE), r"\1 N"),
    # rulers whose length follows the width of the line they frame (pytest's ==== ... ====)
    (re.compile(r"([=\-_*#~.])\1{3,}"), r"\1\1\1"),
]


def normalise(text: str) -> str:
    """``text`` without what differs between two runs of the same failure."""
    text = _ANSI.sub("", text.replace("\r\n", "\n"))
    text = _TRUNCATED.sub("", text)
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    if len(text) > KEEP_CHARS:
        text = text[-KEEP_CHARS:]
        # the cut may fall mid-line; start at the next whole line
        text = text.split("\n", 1)[1] if "\n" in text else text
    return " ".join(text.split())


def _gate(g: GateResult) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": g.name,
        "kind": g.kind,
        "policy_violation": g.policy_violation,
        "exit_code": g.evidence.exit_code,
        "files": sorted(normalise(f) for f in g.evidence.files),
        "detail": normalise(g.evidence.detail),
        "output": normalise(g.evidence.output_tail),
    }
    tests = g.evidence.tests
    if tests is not None and tests.failing:
        # Which tests fail and how: the same set failing the same way is no new evidence.
        entry["tests"] = sorted(f"{c.id} {c.outcome} {normalise(c.message)}" for c in tests.failing)
    return entry


def fingerprint(gates: list[GateResult]) -> str:
    """16 hex chars of sha256 over the failed gates and their normalised evidence.

    Empty when no gate failed (a passing verdict has no failure to repeat).
    Gates are taken in name order, so the fingerprint does not depend on the order
    the results arrive in; durations are left out entirely.
    """
    failed = sorted((g for g in gates if not g.passed), key=lambda g: g.name)
    if not failed:
        return ""
    payload = [_gate(g) for g in failed]
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
