"""``regression_test``: the attempt brings a test that catches what it fixed."""

from typing import Any, ClassVar, Literal

from loop.contracts.gates.base import GateSpec


class RegressionTestGate(GateSpec):
    KIND: ClassVar[str] = "regression_test"
    EXAMPLE: ClassVar[dict[str, Any]] = {"name": "new-test", "regression_test": True}

    regression_test: Literal[True]
    """Fails unless a test the attempt added or changed fails on base's code and passes at
    the commit (run by overlaying the attempt's test files onto base)."""
