"""The openai backend's tools: what the model sees, how each call is confined to the
worktree, and ``execute``, which runs one call and never raises for the model's
mistakes. ``tool_step`` (``activities.tools``) is the activity around it."""

from activities.host.toolbox.arguments import parse_arguments
from activities.host.toolbox.calls import execute
from activities.host.toolbox.confine import resolve_path
from activities.host.toolbox.outcome import PolicyViolation, ToolError, ToolOutcome, cut
from activities.host.toolbox.policy import command_words, run_refusal
from activities.host.toolbox.schemas import (
    ERROR_CHARS,
    HIDDEN_ENV_PREFIXES,
    MAX_FILE_BYTES,
    TOOL_SCHEMAS,
)

__all__ = [
    "ERROR_CHARS",
    "HIDDEN_ENV_PREFIXES",
    "MAX_FILE_BYTES",
    "TOOL_SCHEMAS",
    "PolicyViolation",
    "ToolError",
    "ToolOutcome",
    "command_words",
    "cut",
    "execute",
    "parse_arguments",
    "resolve_path",
    "run_refusal",
]
