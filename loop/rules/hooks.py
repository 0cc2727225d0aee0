"""What a ``/loop`` comment or a pull request's review on GitHub asks, read as data.

A comment is anyone's text: only its first line is read, only a known verb does
anything, and what follows the verb is the answer's text (a reason, feedback) or
``extend``'s numbers, never a command line or an option of anything. A comment that
does not begin with ``/loop`` is not addressed to Loopwork at all.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from loop.contracts import CHECK_EVENTS, ReviewComment

PREFIX = "/loop"
VERBS = ("run", "retry", "approve", "reject", "feedback", "extend")
EXTEND_FIELDS = ("attempts", "seconds", "tokens", "cost_usd")
USAGE = (
    "`/loop run`, `/loop retry`, `/loop approve [note]`, `/loop reject <reason>`, "
    "`/loop feedback <text>` or `/loop extend attempts=N seconds=N tokens=N cost_usd=X`"
)


@dataclass(frozen=True)
class Command:
    verb: str
    """One of ``VERBS``; empty when the comment could not be read (``error`` says why)."""
    fields: dict[str, str] = field(default_factory=dict)
    """The answer's fields as a form gives them: ``note``, ``reason``, ``text``, or the
    ``extend`` figures."""
    error: str = ""


def addressed(body: str) -> bool:
    """Whether the comment is for Loopwork: its first line begins with ``/loop``."""
    first = body.lstrip().split("\n", 1)[0]
    return first == PREFIX or first.startswith(PREFIX + " ")


def parse(body: str) -> Command:
    """The command of a comment ``addressed`` to Loopwork. The verb is on the first line;
    an answer's text is the rest of that line and every line after it."""
    text = body.lstrip().removeprefix(PREFIX)
    head, _, tail = text.partition("\n")
    words = head.split(None, 1)
    if not words:
        return Command("", error=f"say what to do: {USAGE}")
    verb, rest = words[0].lower(), (words[1] if len(words) > 1 else "")
    arg = "\n".join(p for p in (rest.strip(), tail.strip()) if p).strip()
    if verb not in VERBS:
        return Command("", error=f"`{_quoted(words[0])}` is not a command; use {USAGE}")
    if verb in ("run", "retry"):
        return Command(verb)
    if verb == "approve":
        return Command(verb, {"note": arg})
    if verb == "reject":
        if not arg:
            return Command("", error="say why it is rejected: `/loop reject <reason>`")
        return Command(verb, {"reason": arg})
    if verb == "feedback":
        if not arg:
            return Command("", error="the feedback is empty: `/loop feedback <text>`")
        return Command(verb, {"text": arg})
    return _extend(rest)


def _extend(rest: str) -> Command:
    """``attempts=2 seconds=600``, or ``--attempts 2``, the figures ``loop extend`` takes."""
    tokens = rest.replace("=", " ").split()
    fields: dict[str, str] = {}
    while tokens:
        name = tokens.pop(0).removeprefix("--").replace("-", "_").lower()
        if name not in EXTEND_FIELDS or not tokens:
            return Command("", error=f"`/loop extend` takes {', '.join(EXTEND_FIELDS)}=N")
        value = tokens.pop(0)
        if not re.fullmatch(r"\d{1,9}(\.\d{1,4})?", value):
            return Command("", error=f"{name}: `{_quoted(value)}` is not a number")
        fields[name] = value
    if not fields:
        return Command("", error=f"say what to add: `/loop extend attempts=1` ({USAGE})")
    return Command("extend", fields)


def _quoted(word: str) -> str:
    """A word of the comment, short and with no backtick to break out of the quote."""
    return word.replace("`", "'")[:40]


REVIEW_STATES = ("changes_requested", "commented")
"""Reviews that become feedback; an approving review is not an approval (a person merging
the pull request is) unless the source says ``approve_on_review``."""
MAX_FEEDBACK_CHARS = 20_000


def review_feedback(reviewer: str, state: str, body: str, comments: list[ReviewComment]) -> str:
    """One feedback for a whole review: what the reviewer said, then each inline comment
    with its file, line and the diff hunk it is on. Empty when the review said nothing."""
    parts: list[str] = []
    if body.strip():
        parts.append(body.strip())
    for c in comments:
        where = f"{c.path}:{c.line}" if c.line is not None else f"{c.path} (outdated)"
        hunk = f"\n```diff\n{c.diff_hunk.strip()}\n```" if c.diff_hunk.strip() else ""
        parts.append(f"{where}{hunk}\n{c.body.strip()}")
    if not parts:
        return ""
    how = "requested changes" if state == "changes_requested" else "commented"
    text = f"Review on GitHub by {reviewer} ({how}):\n\n" + "\n\n".join(parts)
    if len(text) > MAX_FEEDBACK_CHARS:
        text = text[: MAX_FEEDBACK_CHARS - 20] + "\n[… cut]"
    return text


SAID_ONCE = {"issue_comment": "comment", "pull_request_review": "review"}
"""Events whose object is acted on once (a comment is created once, a review submitted
once): its id and the action are the whole key."""
RECURRING = {"issues": "issue", "pull_request": "pull_request"} | {e: e for e in CHECK_EVENTS}
"""Events whose object may see the same action again (labeled twice, closed, reopened and
closed; a check suite re-run): the key also holds when the object last changed."""


def delivery_key(event: str, payload: dict[str, Any]) -> str:
    """What a delivery is about, taken from its signed body (``X-GitHub-Delivery`` is not
    signed, so a replay may name any delivery id it likes): the comment's or review's id
    and the action; for an issue, a pull request or a CI run, its id, the action and a
    digest of when it last changed (its ``updated_at``, the label, the run's attempt). The
    same body sent again, under any delivery id, has the same key; GitHub's next event
    on the same object has another. A body without an object id is keyed by its whole
    content. Characters a workflow id may hold, at most 100."""
    action = _word(str(payload.get("action") or ""))
    name = SAID_ONCE.get(event) or RECURRING.get(event, "")
    obj = payload.get(name) if name else None
    oid = obj.get("id") if isinstance(obj, dict) else None
    if not isinstance(obj, dict) or not isinstance(oid, int) or isinstance(oid, bool):
        return f"{_word(event)}-{action}-body-{_digest(payload)}"
    key = f"{name}-{oid}-{action}"
    if event in SAID_ONCE:
        return key
    label = payload.get("label")
    changed = [obj.get(k) for k in ("updated_at", "completed_at", "run_attempt", "conclusion")]
    changed.append(label.get("id") if isinstance(label, dict) else None)
    return f"{key}-{_digest(changed)[:16]}"


def _word(text: str) -> str:
    return re.sub(r"[^a-z0-9_]", "-", text.lower())[:30]


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
