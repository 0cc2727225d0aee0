"""The ``regression_test`` gate: the attempt proves its fix with a test that fails without it.

Checked, not asked for: the attempt's test files (the test files it added or changed,
with the ``conftest.py`` files beside them) are laid over base's code
(``activities.host.overlay``), and each reporting ``run`` gate's command runs there.
A test counts when the attempt added it or changed its body (by its syntax, so a
comment above an old failing test is not a regression test: ``loop.rules.test_changes``),
it passes at the commit, and it fails on base's code by an assertion or an error raised
from base's own code: not because it cannot be collected there, not because an import
fails, not for want of a name the attempt added (``loop.rules.verdicts.why_not_counted``).
None means the gate fails, saying what was looked at and why each test did not count.
"""

from __future__ import annotations

import asyncio

from activities.gates.judging import Judging
from activities.gates.run import MESSAGE_CHARS
from activities.host import overlay
from activities.host.git import GitError, git
from loop.contracts import CaseResult, Evidence, GateResult, RegressionTestGate, SuiteSummary
from loop.rules import test_changes, verdicts
from loop.rules.tamper import is_test_path

KIND = RegressionTestGate.KIND

REQUIREMENT = (
    "a test the attempt added or whose body it changed fails on base's code (by an assertion "
    "or an error of base's code) and passes now"
)
REFUSED_SHOWN = 5


async def evaluate(gate: RegressionTestGate, judging: Judging) -> GateResult:
    every = await judging.changed_files()
    changed = sorted(f for f in every if is_test_path(f))

    def result(passed: bool, detail: str, proven: list[CaseResult] | None = None) -> GateResult:
        tests = None
        if proven:
            shown = [c.model_copy(update={"message": c.message[-MESSAGE_CHARS:]}) for c in proven]
            tests = SuiteSummary(runner="regression", counts={"proven": len(proven)}, failing=shown)
        return GateResult(
            name=gate.name,
            kind="regression_test",
            passed=passed,
            requirement=REQUIREMENT,
            evidence=Evidence(files=changed, detail=detail, tests=tests),
        )

    if not changed:
        return result(False, "the attempt added or changed no test file")
    touched = await _touched(judging, changed)
    added = await _added_names(
        judging, [f for f in every if f.endswith(".py") and f not in changed]
    )
    base_code = await judging.base_code()
    looked: list[str] = []
    for run_gate in judging.reporting():
        now = (await judging.at_commit(run_gate)).report
        if now is None or not now.complete:
            looked.append(f"{run_gate.name}: its run at the commit did not report whole")
            continue
        files = set(changed)
        if not any(c.outcome == "passed" and c.file in files for c in now.tests.values()):
            looked.append(f"{run_gate.name}: no test of {', '.join(changed)} passes at the commit")
            continue
        commit = await overlay.commit(
            judging.ws.path,
            judging.ws.base_commit,
            judging.commit,
            changed,
            judging.bench.log_dir / "overlay",
        )
        ran = await judging.overlay(run_gate, commit)
        if ran.report is None or not ran.report.sessions:
            looked.append(f"{run_gate.name}: its run on base's code reported nothing")
            continue
        found = verdicts.regressions(now, ran.report, touched, added, base_code)
        if found.proven:
            names = ", ".join(c.id for c in found.proven[:5])
            more = f" and {len(found.proven) - 5} more" if len(found.proven) > 5 else ""
            detail = f"fails on base's code and passes now: {names}{more}"
            return result(True, detail, found.proven)
        looked.append(_nothing_proven(run_gate.name, found))
    return result(False, "; ".join(looked) or "no run gate reports tests")


def _nothing_proven(gate: str, found: verdicts.Regression) -> str:
    parts = []
    if not found.candidates:
        parts.append("the attempt added no test and changed no test's body")
    passing = [c for c in found.candidates if not any(r.startswith(c + ":") for r in found.refused)]
    if passing:
        parts.append(f"{len(passing)} test(s) it added or changed pass on base's code too "
                     f"({', '.join(passing[:REFUSED_SHOWN])})")  # fmt: skip
    if found.refused:
        shown = "; ".join(found.refused[:REFUSED_SHOWN])
        more = f" … and {len(found.refused) - REFUSED_SHOWN} more" if len(found.refused) > 5 else ""
        parts.append(f"not counted: {shown}{more}")
    if found.untouched:
        parts.append(f"{found.untouched} other test(s) of its files it did not add or change")
    return f"{gate}: " + "; ".join(parts)


async def _source(judging: Judging, commit: str, path: str) -> bytes | None:
    """A file's bytes at ``commit`` (None: it is not there)."""
    try:
        text = await git(["cat-file", "blob", f"{commit}:{path}"], judging.ws.path)
    except GitError:  # not in that commit (added, or removed)
        return None
    return text.encode("utf-8", "surrogateescape")


async def _touched(judging: Judging, files: list[str]) -> dict[str, set[str]]:
    """Per test file, the tests the attempt added or whose body it changed."""
    found: dict[str, set[str]] = {}
    for path in files:
        now = await _source(judging, judging.commit, path)
        if now is not None:
            before = await _source(judging, judging.ws.base_commit, path)
            found[path] = await asyncio.to_thread(test_changes.changed_tests, before, now)
    return found


async def _added_names(judging: Judging, files: list[str]) -> set[str]:
    """What the attempt's code defines that base's does not (and the modules it adds)."""
    names: set[str] = set()
    for path in files:
        now = await _source(judging, judging.commit, path)
        if now is None:
            continue
        before = await _source(judging, judging.ws.base_commit, path)
        if before is None:
            names |= test_changes.module_names(path)
        names |= await asyncio.to_thread(test_changes.added_names, before, now)
    return names
