"""``no_removed_tests``: every test present at base still runs."""

from typing import Any, ClassVar, Literal

from loop.contracts.gates.base import GateSpec


class NoRemovedTestsGate(GateSpec):
    KIND: ClassVar[str] = "no_removed_tests"
    EXAMPLE: ClassVar[dict[str, Any]] = {"name": "keep-tests", "no_removed_tests": True}

    no_removed_tests: Literal[True]
    """Fails if a test present at base is missing, newly skipped, xfailed or deselected:
    by the runner's own report at base and at the commit where a ``run`` gate has one,
    else by reading the test files."""
