"""The agent CLIs Loopwork knows by name: one module each, one registry.

A module holds all a CLI means to Loopwork: the program names that identify it in a
command, what it leaves in the worktree, the variables naming its endpoint and key,
and how its log reports usage and fatal errors. Adding a CLI: a module here, added
to ``CLIS``, its name to ``UsageSource`` in ``loop.contracts.task`` and its
byproducts to ``AGENT_BYPRODUCTS`` there (contracts import no rules);
``tests/unit/test_agent_clis.py`` fails while one of them is missing.
"""

from __future__ import annotations

import os

from loop.rules.clis import aider, claude_code, codex
from loop.rules.clis.base import AgentCli, CliEndpoint, Reported
from loop.rules.commands import programs

CLIS: tuple[AgentCli, ...] = (claude_code.CLI, aider.CLI, codex.CLI)
BY_NAME = {cli.name: cli for cli in CLIS}
_BY_PROGRAM = {program: cli for cli in CLIS for program in cli.programs}

__all__ = ["BY_NAME", "CLIS", "AgentCli", "CliEndpoint", "Reported", "usage_source"]


def usage_source(command: list[str], declared: str) -> str:
    """Where a command agent's usage is read: what the task declares, or for ``auto`` the
    known CLI its command runs ("none" when it runs none)."""
    if declared != "auto":
        return declared
    for word in programs(command) if command else []:
        found = _BY_PROGRAM.get(os.path.basename(word))
        if found:
            return found.name
    return "none"
