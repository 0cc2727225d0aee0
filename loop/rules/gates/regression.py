"""``regression_test``: a test of the attempt's that fails on base's code."""

from __future__ import annotations

from loop.contracts import GateResult, RegressionTestGate

KIND = RegressionTestGate.KIND


def describe(g: RegressionTestGate) -> str:
    return f"{g.name}: add or change a test that fails on base's code and passes with your change"


def correction(g: GateResult) -> str:
    return (
        "add (or change) a test in a test file that fails on base's code and passes with "
        f"your change; what was checked: {g.evidence.detail}"
    )
