"""``no_removed_tests``: every test present at base still runs."""

from __future__ import annotations

from loop.contracts import GateResult, NoRemovedTestsGate

KIND = NoRemovedTestsGate.KIND


def describe(g: NoRemovedTestsGate) -> str:
    return f"{g.name}: do not remove, skip, xfail or deselect any existing test"


def correction(g: GateResult) -> str:
    return f"restore the removed, skipped or deselected tests: {', '.join(g.evidence.files)}"
