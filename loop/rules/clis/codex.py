"""Codex (``codex exec --json``): one JSON event per line.

Each ``turn.completed`` carries that turn's usage (no cost: priced by
``agent.model``); ``turn.failed`` and a network it keeps waiting for are its errors.
"""

from __future__ import annotations

from loop.rules.clis.base import AgentCli, CliEndpoint, Reported, count, json_lines


def read_usage(log: str) -> Reported:
    """The usage of every turn added up (reasoning tokens count as output)."""
    got = Reported()
    for event in json_lines(log):
        kind = event.get("type")
        if kind == "turn.completed" and isinstance(event.get("usage"), dict):
            usage = event["usage"]
            tokens_in = count(usage.get("input_tokens", 0))
            tokens_out = count(usage.get("output_tokens", 0))
            reasoning = count(usage.get("reasoning_output_tokens", 0))
            if None not in (tokens_in, tokens_out, reasoning):
                got.add(tokens_in or 0, (tokens_out or 0) + (reasoning or 0))
        elif kind == "turn.failed":
            error = event["error"] if isinstance(event.get("error"), dict) else {}
            text = str(error.get("message") or "turn failed")[:300]
            got.error = f"codex: {text}"
            got.fatal = any(f"status {c}" in text for c in (401, 403, 404))
        elif kind == "error" and "waiting for network" in str(event.get("message")):
            got.error = f"codex: the endpoint cannot be reached: {event.get('message')}"[:300]
            got.fatal = True
    return got


def read_claim(log: str) -> str:
    """The last ``agent_message`` item: what Codex said when it was done."""
    for event in reversed(json_lines(log)):
        item = event.get("item")
        if event.get("type") == "item.completed" and isinstance(item, dict):
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                return str(item["text"])
    return ""


CLI = AgentCli(
    name="codex",
    programs=("codex",),
    byproducts=(".codex",),
    endpoint=CliEndpoint("OPENAI_BASE_URL", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    read_usage=read_usage,
    read_claim=read_claim,
    sample=(
        '{"type":"item.completed","item":{"type":"agent_message","text":"Fixed."}}\n'
        '{"type":"turn.completed","usage":{"input_tokens":3200,"output_tokens":310}}\n'
    ),
)
