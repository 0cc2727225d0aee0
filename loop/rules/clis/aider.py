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


CLI = AgentCli(
    name="aider",
    programs=("aider",),
    byproducts=(".aider*",),
    endpoint=CliEndpoint("OPENAI_API_BASE", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    read_usage=read_usage,
    sample="Tokens: 719 sent, 17 received. Cost: $0.0024 message, $0.0024 session.\n",
)
