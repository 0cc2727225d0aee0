"""The ``hidden_tests`` gate: tests the agent never sees, run on its commit by the worker.

The test files come from a commit of the repository or a folder outside it
(``HiddenTests.ref``), read by the worker, and are laid over a checkout of the attempt's
commit (and of base) in the worker's own folder: never into the agent's worktree, never
into its clone's objects (the checkout is a worktree of the clone, and laid files are
never added), never followed through a link the attempt committed. The named ``run``
gate's command runs there with per-test reporting and is judged as a ``run`` gate is
(``loop.rules.verdicts``): the ``fail_to_pass`` tests must pass, every other test as on
base's code with the same files laid over it. What a person or the next attempt is told
names failing tests and their assertion messages, never the tests' source: pytest prints
source lines around a failure, so the evidence keeps only its ``E`` lines, and no output.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from activities.gates import run as run_gate
from activities.gates.command import Ran, run_command
from activities.gates.judging import Judging
from loop.contracts import (
    CaseResult,
    Evidence,
    GateResult,
    HiddenTestsGate,
    RunGate,
    SuiteReport,
)
from loop.rules import verdicts
from loop.rules.tamper import allowed

KIND = HiddenTestsGate.KIND

QUOTED = 12


async def evaluate(gate: HiddenTestsGate, judging: Judging) -> GateResult:
    spec = gate.hidden_tests

    def failed(detail: str) -> GateResult:
        return GateResult(
            name=gate.name,
            kind="hidden_tests",
            passed=False,
            requirement=REQUIREMENT,
            evidence=Evidence(detail=detail),
        )

    runner = _runner(gate, judging)
    if runner is None:
        named = f"no run gate named {spec.run!r}" if spec.run else "no run gate that reports tests"
        return failed(f"the task has {named} to run the hidden tests with")
    files, problem = await judging.hidden_files(spec)
    if problem:
        return failed(problem)
    tests = runner.model_copy(
        update={"name": gate.name, "fail_to_pass": spec.fail_to_pass, "flaky": []}
    )
    base = await _at_base(tests, judging, files, spec.pass_to_pass)
    if base is None:
        return failed("the hidden tests reported nothing on base's code")
    async with judging.laid(judging.commit, f"hidden-{gate.name}", files) as (tree, folder):
        now = await run_command(
            tests, judging.at_the_commit, tree, folder, judging.bench.home, judging.task.sandbox
        )
        judged = verdicts.judge(tests, now.report, base, now.proc.exit_code)
        seen, disagree = 0, []
        if judged.passed and now.report is not None:
            seen, disagree = await run_gate.witnessed(
                tests, judging, now.report, judged, set(), tree=tree
            )
    detail = judged.detail + (
        f"; {seen} seen passing again outside the runner" if seen and not disagree else ""
    )
    evidence = Evidence(exit_code=now.proc.exit_code, duration_s=now.proc.duration_s)
    evidence.detail = f"{len(files)} hidden file(s): {detail}"
    if now.report is not None:
        summary = run_gate.summary(now.report, judged.failing, now.path, [], judged.fixed())
        evidence.tests = summary.model_copy(
            update={"failing": [_without_source(c) for c in summary.failing]}
        )
    result = GateResult(
        name=gate.name,
        kind="hidden_tests",
        passed=judged.passed,
        requirement=REQUIREMENT,
        evidence=evidence,
    )
    questions = (now.report.contradictions if now.report is not None else []) + disagree
    found = [f for f in await judging.findings() if not allowed(f, runner.allow_constructs)]
    if found or questions:
        result.uncertain, result.passed = True, False
        result.evidence.quoted = [f.quote() for f in found[:QUOTED]] + questions[:QUOTED]
        result.evidence.detail = (
            "uncertain: the attempt adds what can end or steer the test process, or the tests' "
            f"outcomes disagree between two observations; a person must look; {detail}"
        )
    return result


REQUIREMENT = (
    "the hidden tests, laid over the commit: those failing on base's code with them pass, "
    "every other one as at base"
)


def _runner(gate: HiddenTestsGate, judging: Judging) -> RunGate | None:
    if gate.hidden_tests.command:
        return RunGate(
            name=gate.name, run=gate.hidden_tests.command, timeout=gate.hidden_tests.timeout
        )
    reporting = judging.reporting()
    if gate.hidden_tests.run:
        return next((g for g in reporting if g.name == gate.hidden_tests.run), None)
    return reporting[0] if reporting else None


async def _at_base(
    tests: RunGate, judging: Judging, files: dict[str, bytes], recorded: list[str] | None
) -> SuiteReport | None:
    """Base's outcomes with the hidden files laid over it: recorded where the case says
    them (a mined suite names its FAIL_TO_PASS and PASS_TO_PASS), else measured once per
    task and kept in the run folder."""
    if recorded is not None and isinstance(tests.fail_to_pass, list):
        cases = {i: CaseResult(id=i, outcome="passed") for i in recorded}
        cases |= {i: CaseResult(id=i, outcome="failed") for i in tests.fail_to_pass}
        return SuiteReport(runner="recorded", sessions=1, finished=1, tests=cases)
    digest = hashlib.sha256(
        b"".join(p.encode() + b"\0" + d for p, d in sorted(files.items()))
        + tests.model_dump_json().encode()
        + judging.ws.base_commit.encode()
    ).hexdigest()[:16]
    kept = Path(judging.ws.run_dir) / "base" / f"hidden-{tests.name}-{digest}.json"
    if kept.is_file():
        try:
            return Ran.model_validate_json(kept.read_text()).report
        except ValueError:
            pass  # cut by a crash: measured again
    label = f"hidden-base-{tests.name}"
    async with judging.laid(judging.ws.base_commit, label, files) as (tree, folder):
        ran = await run_command(
            tests, judging.ws, tree, folder, judging.bench.home, judging.task.sandbox
        )
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(ran.model_dump_json())
    return ran.report


def _without_source(case: CaseResult) -> CaseResult:
    """A failing hidden test as the agent may hear of it: its id and its assertion, never
    the lines of its source pytest shows around it, nor what it printed."""
    lines = [ln.strip() for ln in case.message.splitlines()]
    said = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    # pytest explains a value by the call that made it ("+  where 'a' = slug('a, b')"):
    # that is the test's source again.
    said = [ln for ln in said if not ln.lstrip("+ ").startswith(("where ", "and "))]
    message = "\n".join(said) if said else verdicts.headline(case.message)
    return case.model_copy(update={"message": message, "output": ""})
