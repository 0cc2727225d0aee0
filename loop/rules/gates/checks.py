"""``github_checks``: what the remote CI must say about the attempt's pushed commit."""

from __future__ import annotations

from loop.contracts import GateResult, GitHubChecksGate

KIND = GitHubChecksGate.KIND


def describe(g: GitHubChecksGate) -> str:
    names = ", ".join(g.github_checks.required)
    return f"{g.name}: GitHub's checks {names} must succeed on your pushed commit (the remote CI)"


def correction(g: GateResult) -> str:
    found = "; ".join(g.evidence.failure[:20])
    return f"make the failed checks pass ({g.evidence.detail})" + (f": {found}" if found else "")
