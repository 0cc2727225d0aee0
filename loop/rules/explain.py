"""Why an agent's run itself went wrong, in one line a person reads where they look
(the verdict table, ``loop status``, the inbox, escalation messages)."""

from __future__ import annotations

from loop.contracts import MakeResult, TaskSpec

LINE_CHARS = 200
CANNOT_EXECUTE = (126, 127)
"""The shell's codes for a program it could not execute, or could not find."""


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:LINE_CHARS] if lines else ""


def agent_trouble(made: MakeResult | None) -> str:
    """ "" when the agent ran and exited 0 (or is the model loop); else what happened, its
    last line of output and where its log is."""
    if made is None:
        return ""
    if made.not_started:
        what = f"the agent could not start: {made.not_started}"
    elif made.timed_out:
        what = "the agent timed out" + (
            f" after {made.duration_s:.0f} s" if made.duration_s else ""
        )
    elif made.exit_code not in (None, 0):
        what = f"the agent exited {made.exit_code}"
        if made.exit_code in CANNOT_EXECUTE:
            what = f"the agent could not start (exit {made.exit_code})"
    elif made.agent_error:
        what = f"the agent failed (exit {made.exit_code})"
    else:
        return ""
    detail = made.agent_error or last_line(made.output_tail)
    if detail and not made.not_started:
        what += f": {detail}"
    if made.log_path:
        what += f" (log: {made.log_path})"
    return what


def could_not_start(made: MakeResult) -> bool:
    """No attempt after this one can do better: the agent's program never ran, or it
    said its endpoint refused its key or cannot be reached."""
    return bool(made.not_started) or made.exit_code in CANNOT_EXECUTE or made.agent_error_fatal


def unpriced_budget(spec: TaskSpec, made: MakeResult) -> str:
    """The token or cost limit a command agent's attempt could not be held to, because it
    reported nothing it spent ("" when there is none)."""
    if spec.agent.backend != "command" or made.usage_reported:
        return ""
    limited = [k for k in ("max_tokens", "max_cost_usd") if getattr(spec.budget, k) is not None]
    return f"budget.{limited[0]}" if limited else ""
