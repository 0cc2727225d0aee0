"""``diff_scope``: where the attempt may change files, and what it must never touch."""

from __future__ import annotations

from loop.contracts import DiffScopeGate, GateResult

KIND = DiffScopeGate.KIND


def describe(g: DiffScopeGate) -> str:
    text = f"{g.name}: change only {', '.join(g.diff_scope.allow)}"
    if g.diff_scope.protect:
        text += f"; never touch {', '.join(g.diff_scope.protect)} (that blocks the task)"
    return text


def correction(g: GateResult) -> str:
    return f"revert your changes to files outside the allowed scope: {', '.join(g.evidence.files)}"
