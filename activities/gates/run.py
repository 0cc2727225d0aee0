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

from pathlib import Path

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
from loop.rules import baseline, verdicts
from loop.rules.failures import failure_lines
from loop.rules.tamper import allowed

KIND = RunGate.KIND

FAILING_SHOWN = 10
FIXED_SHOWN = 200
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


def summary(
    report: SuiteReport,
    failing: list[CaseResult],
    path: str,
    set_aside: list[CaseResult] | None = None,
    fixed: list[str] | None = None,
) -> SuiteSummary:
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
        set_aside=[cut(c) for c in (set_aside or [])[:FAILING_SHOWN]],
        fixed=(fixed or [])[:FIXED_SHOWN],
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
    questions: list[str] = []
    if proc.timed_out and now.report is None:
        passed, detail = False, f"timed out after {gate.timeout} s"
    elif gate.report == "exit" or (not expected and now.report is None):
        passed = proc.exit_code == 0 and not proc.timed_out
        why = "report: exit" if gate.report == "exit" else "its runner reports no tests"
        detail = f"exit code {proc.exit_code} (the exit code alone decides: {why})"
    else:
        protected = protected_ids(judging, base_report)
        aside = await judging.aside(gate) if base_report is not None else {}
        judged = verdicts.judge(gate, now.report, base_report, proc.exit_code, protected, aside)
        judged = await _retried(gate, judging, now, base_report, protected, aside, judged)
        passed, detail = judged.passed, judged.detail
        if now.report is None:
            detail += reporter_hint(proc.output_tail)
        else:
            evidence.tests = summary(
                now.report, judged.failing, now.path, judged.set_aside, judged.fixed()
            )
            questions = list(now.report.contradictions)
            if passed:
                seen, disagree = await witnessed(gate, judging, now.report, judged, protected)
                questions += disagree
                if seen and not disagree:
                    detail += f"; {seen} seen passing again outside the runner"
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
    if suspicious or questions:
        result.uncertain = True
        result.passed = False
        quoted = [f.quote() for f in suspicious[:QUOTED]] + questions[:QUOTED]
        result.evidence.quoted = quoted
        why = []
        if suspicious:
            constructs = ", ".join(dict.fromkeys(f.construct for f in suspicious))
            why.append(f"the attempt adds what can end or steer the test process ({constructs})")
        if questions:
            why.append("the tests' outcomes disagree between two observations")
        result.evidence.detail = (
            f"uncertain: {'; '.join(why)}; a person must look"
            + (" (or list the constructs in allow_constructs)" if suspicious else "")
            + f"; the tests: {detail}"
        )
    return result


RERUN_MAX = 20
"""At most this many failing tests are run once more to tell a flaky one from a failure."""


async def _retried(
    gate: RunGate,
    judging: Judging,
    now: Ran,
    base: SuiteReport | None,
    protected: set[str],
    aside: dict[str, str],
    judged: verdicts.SuiteVerdict,
) -> verdicts.SuiteVerdict:
    """A verdict that failed only on a few tests' outcomes: those tests once more. One that
    passes there is flaky: set aside, never counted as fixed (a task whose every test to
    fix is flaky fixed nothing)."""
    report = now.report
    failing = [c.id for c in judged.failing if c.outcome in FAILURES and c.id in report.tests] if (
        report is not None and report.complete and not report.contradictions
    ) else []  # fmt: skip
    if judged.passed or not failing or len(failing) > RERUN_MAX:
        return judged
    if len(failing) < len(judged.failing):
        return judged  # a missing test or a collection error: no retry makes that pass
    again = (await judging.rerun(gate, failing)).report
    if again is None or not again.complete:
        return judged
    flaky = {i for i in failing if (c := again.tests.get(i)) is not None and c.outcome == "passed"}
    if not flaky:
        return judged
    merged = dict(aside) | dict.fromkeys(flaky, "flaky: failed, then passed on a retry")
    rejudged = verdicts.judge(gate, report, base, now.proc.exit_code, protected, merged)
    had_to_fix = set(judged.fixed())
    if rejudged.passed and had_to_fix and had_to_fix <= flaky:
        names = ", ".join(sorted(had_to_fix)[:3])
        rejudged.passed = False
        rejudged.detail += (
            f"; nothing the task had to fix was shown fixed: {names} failed, then passed on a "
            "retry (flaky)"
        )
    return rejudged


async def witnessed(
    gate: RunGate,
    judging: Judging,
    report: SuiteReport,
    judged: verdicts.SuiteVerdict,
    protected: set[str],
    tree: Path | None = None,
) -> tuple[int, list[str]]:
    """The tests the verdict rests on (those it had to fix, those of protected files), run
    again outside the runner: how many were seen passing, and where the two observations
    disagree, what to quote."""
    if report.runner not in ("pytest", "unittest"):
        return 0, []
    ids = sorted((set(judged.fixed()) | protected) & set(report.tests))
    if not ids:
        return 0, []
    files: dict[str, list[str]] = {}
    for case_id in ids:
        files.setdefault(report.tests[case_id].file, []).append(case_id)
    plan = {"runner": report.runner, "root": report.root, "files": sorted(files.items())}
    seen = (await judging.witness(gate, plan, tree)).report
    changed = set(await judging.changed_files())
    passing = sum(1 for i in ids if seen is not None and i in seen.tests
                  and seen.tests[i].outcome == "passed")  # fmt: skip
    return passing, verdicts.disagreements(report, seen, ids, changed)


def reporter_hint(output: str) -> str:
    """Why the reporter did not load, where the runner said so, with the fix."""
    if 'importing plugin "loopwork"' in output or "No module named 'loopwork_report'" in output:
        return (
            "; Loopwork's reporter could not load in the test process: the command's own "
            "environment hid it (a PYTHONPATH set where Loopwork cannot extend it, python -I "
            "or -E): extend PYTHONPATH (PYTHONPATH=src:$PYTHONPATH) or use pytest's "
            "pythonpath option"
        )
    return ""


def at_base(gate: RunGate, ran: Ran, aside: dict[str, str] | None = None) -> GateResult:
    """The gate's run on base's code, as the reproducer shows it: what fails there, and
    what of that is set aside (``aside``: flaky, or pre-existing failures of the
    environment). A gate whose every failure at base is the environment's is *uncertain*:
    an attempt could show nothing fixed, so a person is asked before any is spent."""
    proc, report = ran.proc, ran.report
    aside = aside or {}
    evidence = Evidence(
        exit_code=proc.exit_code, output_tail=proc.output_tail, duration_s=proc.duration_s
    )
    uncertain = False
    if proc.timed_out:
        passed, evidence.detail = False, f"timed out after {gate.timeout} s"
    elif report is not None:
        failing = [c for c in report.tests.values() if c.outcome in FAILURES]
        failing += report.collect_errors
        passed = proc.exit_code == 0 and not failing and report.complete
        evidence.detail = (
            f"{verdicts.counts_line(report)} ({report.runner}), exit code {proc.exit_code}"
        )
        set_aside = [
            CaseResult(id=i, outcome=report.tests[i].outcome, message=why)
            for i, why in sorted(aside.items())
            if i in report.tests
        ]
        evidence.tests = summary(
            report, [c for c in failing if c.id not in aside], ran.path, set_aside
        )
        if set_aside:
            shown = ", ".join(f"{c.id} ({c.message})" for c in set_aside[:3])
            more = f" … and {len(set_aside) - 3} more" if len(set_aside) > 3 else ""
            evidence.detail += f"; set aside, not required: {shown}{more}"
        if baseline.only_environment(gate, report, aside):
            uncertain = True
            evidence.detail += (
                "; every test failing at base fails for its environment, not by an assertion: "
                "no attempt could show one fixed. Name the bug's tests in fail_to_pass (or in "
                "the goal), or give the gate what those tests need, then answer with feedback"
            )
    else:
        passed, evidence.detail = proc.exit_code == 0, f"exit code {proc.exit_code}"
    return GateResult(
        name=gate.name,
        kind="run",
        passed=passed,
        requirement=requirement(gate, report is not None or verdicts.expects_report(gate)),
        evidence=evidence,
        uncertain=uncertain,
    )
