"""``hidden_tests``: tests the agent cannot see, described and corrected without their source."""

from __future__ import annotations

from loop.contracts import GateResult, HiddenTestsGate
from loop.rules.gates.run import UNCERTAIN, failing

KIND = HiddenTestsGate.KIND


def describe(g: HiddenTestsGate) -> str:
    return (
        f"{g.name}: tests you cannot see run on your change, test by test: those that fail on "
        "base's code must pass, the others as they did at base; they replace any file of the "
        "same path, so writing or deleting test files does not change them"
    )


def correction(g: GateResult) -> str:
    tests = g.evidence.tests
    if g.uncertain:
        return UNCERTAIN
    if tests is not None and tests.failing:
        return failing(
            tests,
            "fix the code under test so that these hidden tests pass",
            "each one's assertion message is listed under its name (the tests themselves stay "
            "hidden)",
        )
    return f"fix the code under test: {g.evidence.detail}"
