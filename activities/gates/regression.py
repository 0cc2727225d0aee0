"""The ``regression_test`` gate: the attempt proves its fix with a test that fails without it.

Checked, not asked for: the attempt's test files (the test files it added or changed,
with the ``conftest.py`` files beside them) are laid over base's code
(``activities.host.overlay``), and each reporting ``run`` gate's command runs there.
A test of those files that passes at the commit and fails on base's code is the
regression test; none means the gate fails, saying what was looked at.
"""

from __future__ import annotations

from activities.gates.judging import Judging
from activities.gates.run import MESSAGE_CHARS
from activities.host import overlay
from loop.contracts import CaseResult, Evidence, GateResult, RegressionTestGate, SuiteSummary
from loop.rules import verdicts
from loop.rules.tamper import is_test_path

KIND = RegressionTestGate.KIND

REQUIREMENT = "a test the attempt added or changed fails on base's code and passes now"


async def evaluate(gate: RegressionTestGate, judging: Judging) -> GateResult:
    changed = sorted(f for f in await judging.changed_files() if is_test_path(f))

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
        found = verdicts.regressions(now, ran.report, files)
        if found.proven:
            names = ", ".join(c.id for c in found.proven[:5])
            more = f" and {len(found.proven) - 5} more" if len(found.proven) > 5 else ""
            detail = f"fails on base's code and passes now: {names}{more}"
            return result(True, detail, found.proven)
        looked.append(
            f"{run_gate.name}: {len(found.candidates)} test(s) of the attempt's files pass on "
            f"base's code too ({', '.join(found.candidates[:5])})"
        )
    return result(False, "; ".join(looked) or "no run gate reports tests")
