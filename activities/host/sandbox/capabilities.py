"""What one run may do, worked out once from its level and its kind.

A run is an agent, a ``run`` tool call or a gate, at one of three levels. Every
branch of the sandbox reads this value instead of asking the level or the kind
again, so a new level is one entry in ``_CONFINEMENT`` plus its launch, and a new
kind of run is one line in ``Capabilities.of``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loop.contracts import SandboxLevel, SandboxPolicy

Kind = Literal["agent", "tool", "gate", "setup"]
"""``setup`` builds a repository's environment in a checkout of its own (``builds``)."""


@dataclass(frozen=True)
class Confinement:
    """What a level gives every run."""

    own_uid: bool
    """The run is the task's leased uid (with a cgroup, rlimits, seccomp, a view)."""
    namespaces: bool
    """bubblewrap's namespaces over a read-only host (else ordinary permissions)."""


_CONFINEMENT = {
    SandboxLevel.STRICT: Confinement(own_uid=True, namespaces=True),
    SandboxLevel.BASIC: Confinement(own_uid=True, namespaces=False),
    SandboxLevel.OFF: Confinement(own_uid=False, namespaces=False),
}


@dataclass(frozen=True)
class Capabilities:
    level: SandboxLevel
    confined: bool
    """Anything at all is confined (``off`` runs as the worker)."""
    namespaces: bool
    writes_tree: bool
    """Agents and tool calls change the worktree; a gate only reads a checkout."""
    keeps_home: bool
    """The agent's HOME (given by the caller) persists between attempts and tool calls;
    a gate's is fresh each run."""
    trusts_argv: bool
    """Paths the command names are shown (the task file's command, a gate's); a tool
    call is the model's, so it names nothing into view."""
    own_site: bool
    """Python's user site is off (a gate must not import what a user folder holds)."""
    network: str
    """The policy's network for this kind (a gate's is ``gate_network``)."""

    @classmethod
    def of(cls, policy: SandboxPolicy, kind: Kind) -> Capabilities:
        level = SandboxLevel(policy.mode)
        confinement = _CONFINEMENT[level]
        gate = kind == "gate"
        return cls(
            level=level,
            confined=confinement.own_uid,
            namespaces=confinement.namespaces,
            writes_tree=not gate,
            keeps_home=not gate,
            trusts_argv=kind != "tool",
            own_site=gate,
            network=policy.gate_network if gate else policy.network,
        )
