"""``run``: a command judged test by test against base, or by its exit code."""

from __future__ import annotations

from loop.contracts import GateResult, RunGate, SuiteSummary
from loop.rules.verdicts import expects_report

KIND = RunGate.KIND


def describe(g: RunGate) -> str:
    if not expects_report(g):
        return f"{g.name}: `{g.run}` must exit 0 (timeout {g.timeout} s)"
    wanted = (
        "every test failing at base must pass"
        if g.fail_to_pass == "auto"
        else f"these must pass: {', '.join(g.fail_to_pass)}"
    )
    return (
        f"{g.name}: `{g.run}` (timeout {g.timeout} s), judged test by test against base: "
        f"every test passing at base must still pass, {wanted}, no test may fail; ending the "
        "test process early fails it"
    )


UNCERTAIN = (
    "remove what ends or steers the test process (quoted below): while it is there the "
    "verdict cannot be trusted and a person is asked"
)


def failing(tests: SuiteSummary, asked: str, each: str) -> str:
    """``asked`` the first failing tests by name (and how many more), then ``each``."""
    names = ", ".join(c.id for c in tests.failing[:5])
    more = tests.more_failing + max(0, len(tests.failing) - 5)
    return f"{asked}: {names}" + (f" (and {more} more)" if more else "") + f"; {each}"


def correction(g: GateResult) -> str:
    detail, tests = g.evidence.detail, g.evidence.tests
    if g.uncertain:
        return UNCERTAIN
    if detail.startswith("timed out"):
        return f"make the command finish in time ({detail}); do not hang"
    if "ended before it reported" in detail:
        return (
            "let the test run finish and report every test: do not end the process early, and "
            "do not skip, deselect or hide tests"
        )
    if tests is not None and tests.failing:
        return failing(
            tests,
            "change the code so that these tests pass",
            "each one's assertion is listed under its name",
        )
    first = g.evidence.failure[0] if g.evidence.failure else ""
    said = f"; it said: {first}" if first else "; read the output tail for the failing check"
    return f"change the code so that the command exits 0 (it exited {g.evidence.exit_code}){said}"
