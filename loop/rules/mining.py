"""Which commits of a history are bug fixes their tests prove, and what those tests show.

SWE-bench's rule, by test id: a commit is a case when the tests it adds or changes fail
on its parent (the parent's code, the commit's test files laid over it) and pass at the
commit, with the same outcome both times each side runs. Those tests are its
FAIL_TO_PASS; the tests that pass on both sides, every time, its PASS_TO_PASS. A test
whose outcome changes between two runs of one side is flaky: in the commit's own test
files it drops the commit (nothing it shows can be trusted), elsewhere it is left out of
PASS_TO_PASS. Pure: the activity runs the tests and gives the reports.
"""

from __future__ import annotations

import re

from loop.contracts import FixCandidate, MinedCase, SuiteReport
from loop.rules.tamper import is_test_path

GOAL_CHARS = 4_000


def split(files: list[str]) -> tuple[list[str], list[str]]:
    """A commit's changed files: (test files, the others)."""
    tests = [f for f in files if is_test_path(f)]
    return tests, [f for f in files if f not in tests]


def case_id(suite: str, commit: str) -> str:
    """A case's id: the suite's name and the fix's short hash, within a task id's length."""
    short = commit[:10]
    name = re.sub(r"[^a-z0-9._-]", "-", suite.lower())[: 63 - len(short) - 1]
    return f"{name}-{short}" if name else f"fix-{short}"


def goal(message: str) -> str:
    """The commit message, as the case's goal (its subject first, the body after)."""
    text = message.strip()
    return text if len(text) <= GOAL_CHARS else text[: GOAL_CHARS - 1] + "…"


def _passing(report: SuiteReport) -> set[str]:
    return {i for i, c in report.tests.items() if c.outcome == "passed"}


def judge(
    candidate: FixCandidate,
    suite: str,
    parent_runs: list[SuiteReport | None],
    fix_runs: list[SuiteReport | None],
) -> tuple[MinedCase | None, str]:
    """The case ``candidate`` makes, or why it makes none."""
    for side, given in (("the parent", parent_runs), ("the commit", fix_runs)):
        for report in given:
            if report is None or not report.complete:
                why = "reported nothing" if report is None else "did not report whole"
                return None, f"the tests {why} at {side}"
    parent = [r for r in parent_runs if r is not None]
    fixed = [r for r in fix_runs if r is not None]
    files = set(candidate.test_files)
    own = {i for r in fixed for i, c in r.tests.items() if c.file in files}
    flips: set[str] = set()
    for one, two in (parent, fixed):
        first, second = _passing(one), _passing(two)
        known = set(one.tests) | set(two.tests)
        flips |= {i for i in known if (i in first) != (i in second)}
    flaky_own = sorted(flips & own)
    if flaky_own:
        return None, f"flaky: {', '.join(flaky_own[:3])} changed outcome between two runs"
    passing_at_fix = _passing(fixed[0]) & _passing(fixed[1])
    passing_at_parent = _passing(parent[0]) | _passing(parent[1])
    fail_to_pass = sorted((own & passing_at_fix) - passing_at_parent)
    if not fail_to_pass:
        return None, "its tests pass on the parent's code too: no failing test proves it a fix"
    pass_to_pass = sorted((_passing(parent[0]) & _passing(parent[1]) & passing_at_fix) - flips)
    return (
        MinedCase(
            id=case_id(suite, candidate.commit),
            commit=candidate.commit,
            parent=candidate.parent,
            goal=goal(candidate.message),
            test_files=sorted(candidate.test_files),
            fail_to_pass=fail_to_pass,
            pass_to_pass=pass_to_pass,
        ),
        "",
    )
