"""The ``run`` gate: the command's runner's per-test report, judged against base.

Where the runner reports (pytest and ``python -m unittest`` through Loopwork's
reporter, any runner through JUnit XML), the verdict is made of test outcomes by id
(``loop.rules.verdicts``): exit code 0 alone is never a pass. Where it cannot
(``report: exit``, or a command that runs no test runner and did not report at base
either), the exit code decides and the evidence says so. Either way the diff scan
runs: what the attempt added that could end or steer the test process makes the
verdict uncertain, for a person to look at.
"""

from __future__ import annotations

import pathspec

from activities.gates.command import Ran
from activities.gates.judging import Judging
from loop.contracts import (
    FAILURES,
    CaseResult,
    Evidence,
    GateResult,
    RunGate,
    SuiteReport,
    SuiteSummary,
)
from loop.redact import redact
from loop.rules import verdicts
from loop.rules.failures import failure_lines
from loop.rules.tamper import allowed

KIND = RunGate.KIND

FAILING_SHOWN = 10
MESSAGE_CHARS = 600
OUTPUT_CHARS = 300
QUOTED = 12


def command_in_words(command: str, limit: int = 200) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def requirement(gate: RunGate, per_test: bool) -> str:
    command = f"`{command_in_words(gate.run)}`"
    if not per_test:
        return f"{command} exits 0"
    return f"{command}: every test passing at base still passes, {_fail_to_pass(gate)}, none fails"


def _fail_to_pass(gate: RunGate) -> str:
    if gate.fail_to_pass == "auto":
        return "every test failing at base now passes"
    return f"these pass: {', '.join(gate.fail_to_pass)}"


def summary(report: SuiteReport, failing: list[CaseResult], path: str) -> SuiteSummary:
    def cut(case: CaseResult) -> CaseResult:
        return case.model_copy(
            update={
                "message": redact(case.message)[-MESSAGE_CHARS:],
                "output": redact(case.output)[-OUTPUT_CHARS:],
            }
        )

    return SuiteSummary(
        runner=report.runner,
        counts=report.counts(),
        failing=[cut(c) for c in failing[:FAILING_SHOWN]],
        more_failing=max(0, len(failing) - FAILING_SHOWN),
        report_path=path,
    )


def protected_ids(judging: Judging, base: SuiteReport | None) -> set[str]:
    """Tests of files a ``diff_scope`` protects, as base's report knows them."""
    globs = judging.task.protected_paths()
    if not globs or base is None:
        return set()
    spec = pathspec.GitIgnoreSpec.from_lines(globs)
    return {i for i, f in base.present().items() if f and spec.match_file(f)}


async def evaluate(gate: RunGate, judging: Judging) -> GateResult:
    now = await judging.at_commit(gate)
    base: Ran | None = await judging.at_base(gate) if gate.report != "exit" else None
    proc = now.proc
    evidence = Evidence(
        exit_code=proc.exit_code, output_tail=proc.output_tail, duration_s=proc.duration_s
    )
    base_report = base.report if base is not None else None
    expected = verdicts.expects_report(gate) or base_report is not None
    if proc.timed_out and now.report is None:
        passed, detail = False, f"timed out after {gate.timeout} s"
    elif gate.report == "exit" or (not expected and now.report is None):
        passed = proc.exit_code == 0 and not proc.timed_out
        why = "report: exit" if gate.report == "exit" else "its runner reports no tests"
        detail = f"exit code {proc.exit_code} (the exit code alone decides: {why})"
    else:
        judged = verdicts.judge(
            gate, now.report, base_report, proc.exit_code, protected_ids(judging, base_report)
        )
        passed, detail = judged.passed, judged.detail
        if now.report is not None:
            evidence.tests = summary(now.report, judged.failing, now.path)
    evidence.detail = detail
    if not passed and not (evidence.tests and evidence.tests.failing):
        evidence.failure = failure_lines(proc.output_tail)
    result = GateResult(
        name=gate.name,
        kind="run",
        passed=passed,
        requirement=requirement(gate, expected or now.report is not None),
        evidence=evidence,
    )
    suspicious = [f for f in await judging.findings() if not allowed(f, gate.allow_constructs)]
    if suspicious:
        result.uncertain = True
        result.passed = False
        result.evidence.quoted = [f.quote() for f in suspicious[:QUOTED]]
        constructs = ", ".join(dict.fromkeys(f.construct for f in suspicious))
        result.evidence.detail = (
            f"uncertain: the attempt adds what can end or steer the test process ({constructs});"
            f" a person must look (or list them in allow_constructs); the tests: {detail}"
        )
    return result


def at_base(gate: RunGate, ran: Ran) -> GateResult:
    """The gate's run on base's code, as the reproducer shows it: what fails there."""
    proc, report = ran.proc, ran.report
    evidence = Evidence(
        exit_code=proc.exit_code, output_tail=proc.output_tail, duration_s=proc.duration_s
    )
    if proc.timed_out:
        passed, evidence.detail = False, f"timed out after {gate.timeout} s"
    elif report is not None:
        failing = [c for c in report.tests.values() if c.outcome in FAILURES]
        failing += report.collect_errors
        passed = proc.exit_code == 0 and not failing and report.complete
        evidence.detail = (
            f"{verdicts.counts_line(report)} ({report.runner}), exit code {proc.exit_code}"
        )
        evidence.tests = summary(report, failing, ran.path)
    else:
        passed, evidence.detail = proc.exit_code == 0, f"exit code {proc.exit_code}"
    return GateResult(
        name=gate.name,
        kind="run",
        passed=passed,
        requirement=requirement(gate, report is not None or verdicts.expects_report(gate)),
        evidence=evidence,
    )
