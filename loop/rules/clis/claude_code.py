"""Claude Code (``claude -p --output-format stream-json --verbose``).

Its final ``result`` event carries the server's token sums (``usage``), the CLI's
cost estimate (``total_cost_usd``) and, on failure, ``is_error`` with the reason.
"""

from __future__ import annotations

from loop.rules.clis.base import AgentCli, CliEndpoint, Reported, cost, count, json_lines

_UNREACHABLE = ("Unable to connect", "ConnectionRefused", "ENOTFOUND", "ECONNREFUSED")
_REFUSED_KEY = ("Invalid API key", "Not logged in", "authentication_failed")
_INPUT = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def read_usage(log: str) -> Reported:
    """Every ``result`` event's usage and cost, summed; its error when ``is_error``."""
    got = Reported()
    for event in json_lines(log):
        if event.get("type") != "result":
            continue
        usage = event["usage"] if isinstance(event.get("usage"), dict) else {}
        counted = [count(usage.get(k, 0)) for k in _INPUT]
        out = count(usage.get("output_tokens", 0))
        if all(c is not None for c in counted) and out is not None:
            got.add(sum(c for c in counted if c is not None), out)
        spent = cost(event.get("total_cost_usd"))
        if spent is not None:
            got.cost_usd = (got.cost_usd or 0.0) + spent
        if event.get("is_error"):
            text = str(event.get("result") or event.get("subtype") or "error")[:300]
            got.error = f"claude: {text}"
            got.fatal = event.get("api_error_status") in (401, 403) or any(
                s in text for s in (*_REFUSED_KEY, *_UNREACHABLE)
            )
    return got


def read_claim(log: str) -> str:
    """The text of the last ``result`` event: the answer Claude Code gives at the end."""
    for event in reversed(json_lines(log)):
        if event.get("type") == "result" and isinstance(event.get("result"), str):
            return str(event["result"])
    return ""


CLI = AgentCli(
    name="claude-code",
    programs=("claude",),
    byproducts=(".claude",),
    endpoint=CliEndpoint("ANTHROPIC_BASE_URL", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
    read_usage=read_usage,
    read_claim=read_claim,
    sample=(
        '{"type":"result","subtype":"success","is_error":false,"result":"Fixed.",'
        '"total_cost_usd":0.0021,"usage":{"input_tokens":1200,"output_tokens":80}}'
    ),
)
