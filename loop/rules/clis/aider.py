"""aider: its ``Tokens: … sent, … received. Cost: $… message, $… session.`` lines.

aider exits 0 on an authentication error, so its log is where a fatal error shows.
"""

from __future__ import annotations

import re

from loop.rules.clis.base import AgentCli, CliEndpoint, Reported

_TOKENS = re.compile(
    r"^Tokens: (?P<sent>[\d.]+k?) sent"
    r"(?:, (?P<write>[\d.]+k?) cache write)?(?:, (?P<hit>[\d.]+k?) cache hit)?"
    r", (?P<received>[\d.]+k?) received\.(?:\s*Cost: \$(?P<message>[\d.]+) message, "
    r"\$(?P<session>[\d.]+) session\.)?",
    re.MULTILINE,
)
_FATAL = (
    ("litellm.AuthenticationError", "the endpoint refused the key"),
    ("litellm.NotFoundError", "the endpoint does not know the model"),
    ("The API provider's servers are down", "the endpoint cannot be reached (aider gave up)"),
)


def _number(text: str | None) -> int:
    """aider's counts: ``772``, ``1.2k``, ``12k``."""
    if not text:
        return 0
    if text.endswith("k"):
        return round(float(text[:-1]) * 1000)
    return round(float(text))


def read_usage(log: str) -> Reported:
    """The tokens of every line added up; the cost the last ``session`` figure (aider's
    running total)."""
    got = Reported()
    for m in _TOKENS.finditer(log):
        sent = sum(_number(m.group(g)) for g in ("sent", "write", "hit"))
        got.add(sent, _number(m.group("received")))
        if m.group("session"):
            got.cost_usd = float(m.group("session"))
    for marker, what in _FATAL:
        if marker in log:
            lines = [ln.strip() for ln in log.splitlines() if ln.startswith("litellm.")]
            detail = f": {lines[-1][:200]}" if lines else ""
            got.error, got.fatal = f"aider: {what}{detail}", True
            break
    return got


_OWN = ("Aider v", "Model:", "Git repo:", "Repo-map:", "Added ", "Tokens:", "Applied edit")
"""Lines aider prints itself around a reply."""


_LISTED = re.compile(r"^[\w./-]*(/|\.[A-Za-z0-9]+)$")


def _own_listing(line: str) -> bool:
    """A blank line or a file name aider lists before the reply (``README.md``,
    ``tests/__init__.py``)."""
    word = line.strip()
    return not word or bool(_LISTED.match(word))


def read_claim(log: str) -> str:
    """The last reply: the lines before aider's last ``Tokens:`` line, after what aider
    printed itself (its banner, the files it added and listed)."""
    lines = log.splitlines()
    ends = [i for i, line in enumerate(lines) if line.startswith("Tokens:")]
    if not ends:
        return ""
    block = lines[: ends[-1]]
    own = [i for i, line in enumerate(block) if line.startswith(_OWN)]
    block = block[own[-1] + 1 :] if own else block
    while block and _own_listing(block[0]):
        block = block[1:]
    return "\n".join(block).strip()


CLI = AgentCli(
    name="aider",
    programs=("aider",),
    byproducts=(".aider*",),
    endpoint=CliEndpoint("OPENAI_API_BASE", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    read_usage=read_usage,
    read_claim=read_claim,
    sample=(
        "Aider v0.86.2\nAdded slug.py to the chat.\n\nREADME.md\nFixed.\n\n"
        "Tokens: 719 sent, 17 received. Cost: $0.0024 message, $0.0024 session.\n"
    ),
)
