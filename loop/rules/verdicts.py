"""What per-test results mean for a gate: the commit judged against base, by test id.

The reference is SWE-bench's harness: tests that pass at base must still pass
(PASS_TO_PASS), tests that fail at base must now pass (FAIL_TO_PASS), each by the
id the runner gives it, from the runner's report, never from the exit code alone.
Pure: the activity runs the commands and collects the reports; this decides.

- A run whose runner was expected to report and did not, or whose report is not
  whole (a session without its end, records that failed their check), fails: "the
  test run ended before it reported". Exit code 0 does not make it a pass.
- Required to pass, by id: every test that passed at base, the tests of
  ``fail_to_pass`` (``auto``: every test that failed at base), and every test of a
  protected file. A required test the runner did not report passed is ``missing``
  or its outcome, and the gate fails.
- No test may fail, new ones included, except a test that failed at base too when
  ``fail_to_pass`` names other tests (the team's known failures).
- A non-zero exit code fails the gate unless those known failures explain it.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, field

from loop.contracts import FAILURES, CaseResult, Gate, RunGate, SuiteReport
from loop.rules.commands import programs
from loop.rules.test_changes import qualified

MESSAGE_CHARS = 400


@dataclass
class SuiteVerdict:
    passed: bool
    detail: str
    failing: list[CaseResult] = field(default_factory=list)
    """What made it fail, in order: required tests not passing, then other failures."""
    required: dict[str, str] = field(default_factory=dict)
    """Test id -> why it had to pass (``passed at base``, ``failed at base``, ...)."""
    set_aside: list[CaseResult] = field(default_factory=list)
    """Tests whose outcome did not count, each with the reason as its message."""

    def fixed(self) -> list[str]:
        """The tests the task had to make pass (not those that passed at base already)."""
        return sorted(i for i, why in self.required.items() if why != "passed at base")


def expects_report(gate: Gate) -> bool:
    """Whether the gate's runner must report: a JUnit file is named, or the command runs
    pytest (as a program, or ``-m pytest``) or ``python -m unittest``, which Loopwork's
    reporter covers."""
    if not isinstance(gate, RunGate) or not gate.reports:
        return False
    if not isinstance(gate.report, str):
        return True
    if any(
        p.rsplit("/", 1)[-1] in ("pytest", "py.test") for p in programs(["bash", "-c", gate.run])
    ):
        return True
    try:
        words = shlex.split(gate.run, comments=True)
    except ValueError:
        words = gate.run.split()
    return any(
        word == "-m" and words[i + 1] in ("pytest", "unittest") for i, word in enumerate(words[:-1])
    )


def counts_line(report: SuiteReport) -> str:
    counts = report.counts()
    order = ["passed", "failed", "error", "skipped", "xfailed", "xpassed", "collection errors"]
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    return ", ".join(parts) or "no tests"


def _matches(globs: list[str], ids: set[str]) -> tuple[set[str], list[str]]:
    """Ids that any glob (fnmatch: ``*`` crosses ``/`` and ``::``) names; globs naming none."""
    named: set[str] = set()
    unmatched: list[str] = []
    for glob in globs:
        hits = {i for i in ids if fnmatch.fnmatchcase(i, glob)}
        if not hits:
            unmatched.append(glob)
        named |= hits
    return named, unmatched


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Failure|Exit|Interrupt)\b")
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s.*|:)?$")
_NOT_RAISED = ("Traceback (most recent call last)", "During handling of", "The above exception")


def _last_raised(message: str) -> str:
    """The last line of a Python traceback that names what was raised (``socket.gaierror:
    [Errno -3] ...``): unindented, after the frames."""
    found = ""
    after_traceback = False
    for raw in message.splitlines():
        if raw.startswith("Traceback (most recent call last)"):
            after_traceback = True
            continue
        if not after_traceback or not raw.strip() or raw[0].isspace():
            continue
        if raw.startswith(_NOT_RAISED):
            continue
        if _EXCEPTION_LINE.match(raw.strip()):
            found = raw.strip()
    return found


def headline(message: str, limit: int = 160) -> str:
    """The line of a failure message that says what failed: pytest's first ``E`` line,
    else the exception raised (the last such line of a traceback), else the first line
    with text (a JUnit message). Never "Traceback (most recent call last):" alone."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    pytest_lines = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    raised = _last_raised(message)
    named = [ln for ln in lines if _RAISED.match(ln)]
    if pytest_lines:
        line = pytest_lines[0]
    elif raised:
        line = raised
    elif named:
        line = named[-1]
    else:
        line = next((ln for ln in lines if not ln.startswith(_NOT_RAISED)), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def raised_type(message: str) -> str:
    """The type of what a failure raised, read from its message ("" : not said there)."""
    m = _EXCEPTION_LINE.match(headline(message, 400))
    return m.group("type") if m is not None else ""


def _short(case: CaseResult) -> str:
    message = headline(case.message)
    return f"{case.id} ({case.outcome}{': ' + message if message else ''})"


def _listed(cases: list[CaseResult]) -> str:
    shown = ", ".join(_short(c) for c in cases[:3])
    return shown + (f" … and {len(cases) - 3} more" if len(cases) > 3 else "")


def incomplete(now: SuiteReport | None, base: SuiteReport | None, exit_code: int | None) -> str:
    """Why ``now`` cannot be judged test by test ("" when it can)."""
    if now is not None and now.complete:
        return ""
    reported = len(now.tests) if now is not None else 0
    expected = len(now.collected) if now is not None and now.collected else 0
    if not expected and base is not None:
        expected = len(base.present())
    of = f"{reported} of {expected}" if expected else f"{reported}"
    code = "no exit code (timed out)" if exit_code is None else f"exit code {exit_code}"
    detail = f"the test run ended before it reported: {code}, {of} tests reported"
    if now is not None and now.sessions > now.finished:
        cut = now.sessions - now.finished
        detail += f"; {cut} test session(s) never reported their end"
    if now is not None and now.problems:
        detail += "; " + "; ".join(now.problems)
    return detail


def judge(
    gate: RunGate,
    now: SuiteReport | None,
    base: SuiteReport | None,
    exit_code: int | None,
    protected: set[str] | None = None,
    aside: dict[str, str] | None = None,
) -> SuiteVerdict:
    """The verdict of a run gate whose runner reports (see the module docstring);
    ``aside``: tests whose outcome does not count (``loop.rules.baseline``), id -> why."""
    cut = incomplete(now, base, exit_code)
    if cut or now is None:
        return SuiteVerdict(False, cut)
    aside = aside or {}
    base_tests = base.tests if base is not None else {}
    required: dict[str, str] = {}
    for case_id, case in base_tests.items():
        if case.outcome == "passed" and case_id not in aside:
            required[case_id] = "passed at base"
    base_failing = {i for i, c in base_tests.items() if c.outcome in FAILURES}
    problems: list[str] = []
    if gate.fail_to_pass == "auto":
        required.update((i, "failed at base") for i in base_failing if i not in aside)
        tolerated: set[str] = set()
    else:
        named, unmatched = _matches(gate.fail_to_pass, set(base_tests) | set(now.tests))
        required.update((i, "named in fail_to_pass") for i in named)
        if unmatched:
            problems.append(f"fail_to_pass names no test: {', '.join(unmatched)}")
        tolerated = base_failing - set(required)
    for case_id in sorted(protected or ()):
        if case_id not in aside:
            required.setdefault(case_id, "in a protected file")

    not_passing: list[CaseResult] = []
    for case_id in sorted(required):
        ran = now.tests.get(case_id)
        at_base = base_tests[case_id].outcome if case_id in base_tests else ""
        if ran is None:
            why = "deselected" if case_id in now.deselected else "not collected or not run"
            not_passing.append(
                CaseResult(id=case_id, outcome="missing", message=why, at_base=at_base)
            )
        elif ran.outcome != "passed":
            not_passing.append(ran.model_copy(update={"at_base": at_base}))
    ignored = tolerated | set(aside)
    failures = [
        c.model_copy(update={"at_base": base_tests[c.id].outcome if c.id in base_tests else ""})
        for c in sorted(now.tests.values(), key=lambda c: c.id)
        if c.outcome in FAILURES and c.id not in required and c.id not in ignored
    ]
    base_errors = {c.id for c in base.collect_errors} if base is not None else set()
    errors = [
        c for c in now.collect_errors if gate.fail_to_pass == "auto" or c.id not in base_errors
    ]
    known = [c for c in now.tests.values() if c.id in ignored and c.outcome in FAILURES]
    if exit_code is None:
        problems.append("timed out")
    elif exit_code != 0 and not (known and not not_passing and not failures and not errors):
        problems.append(f"exit code {exit_code}")
    set_aside = [
        CaseResult(
            id=i,
            outcome=now.tests[i].outcome if i in now.tests else "missing",
            message=why,
            at_base=base_tests[i].outcome if i in base_tests else "",
        )
        for i, why in sorted(aside.items())
    ]

    failing = not_passing + failures + errors
    summary = f"{counts_line(now)} ({now.runner})"
    if failing or problems:
        parts = []
        if not_passing:
            parts.append(f"{len(not_passing)} required test(s) not passing: {_listed(not_passing)}")
        if failures:
            parts.append(f"{len(failures)} test(s) failing: {_listed(failures)}")
        if errors:
            parts.append(f"{len(errors)} collection error(s): {_listed(errors)}")
        parts += problems
        detail = f"{summary}; " + "; ".join(parts) + _aside_line(set_aside)
        return SuiteVerdict(False, detail, failing, required, set_aside)
    kept = sum(1 for why in required.values() if why == "passed at base")
    fixed = sum(1 for why in required.values() if why != "passed at base")
    against = f"; against base: {kept} passing still pass, {fixed} required now pass"
    if [c for c in known if c.id in tolerated]:
        against += f"; {len(tolerated & {c.id for c in known})} failing at base still fail (not "
        against += "named in fail_to_pass)"
    detail = summary + (against if base is not None else "") + _aside_line(set_aside)
    return SuiteVerdict(True, detail, [], required, set_aside)


def _aside_line(cases: list[CaseResult]) -> str:
    if not cases:
        return ""
    shown = ", ".join(f"{c.id} ({c.message})" for c in cases[:3])
    more = f" … and {len(cases) - 3} more" if len(cases) > 3 else ""
    return f"; set aside, not counted: {shown}{more}"


def disagreements(
    report: SuiteReport, witness: SuiteReport | None, ids: list[str], changed: set[str]
) -> list[str]:
    """Where the second observation (the witness, outside the runner) does not see the
    pass the runner reported, for each of ``ids``; ``changed``: the files the attempt
    changed (a test there that the witness cannot run is not taken on the runner's word).
    Empty: every test was seen passing twice, or could not be run again for a reason of
    the witness's own in a file the attempt left alone."""
    if witness is None or not witness.complete:
        why = incomplete(witness, None, None) if witness is not None else "it reported nothing"
        return [f"the second observation of {len(ids)} test(s) outside the runner did not "
                f"finish: {why}"]  # fmt: skip
    found: list[str] = []
    for case_id in ids:
        first = report.tests.get(case_id)
        second = witness.tests.get(case_id)
        if first is None or first.outcome != "passed":
            continue
        if second is None:
            found.append(f"{case_id}: passed under the runner; the witness did not report it")
        elif second.outcome == "missing":
            if first.file in changed:
                found.append(
                    f"{case_id}: passed under the runner; the witness could not run it "
                    f"({second.message}), and the attempt changed {first.file}"
                )
        elif second.outcome != "passed":
            said = headline(second.message, 160)
            found.append(
                f"{case_id}: passed under the runner, {second.outcome} without it"
                + (f": {said}" if said else "")
            )
    return found


@dataclass
class Lost:
    missing: list[str] = field(default_factory=list)
    deselected: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Newly skipped or xfailed."""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.deselected or self.skipped)


def lost_tests(base: SuiteReport, now: SuiteReport) -> Lost:
    """Tests the runner knew at base that it no longer runs as it did: gone from its
    collection, deselected, or newly skipped or xfailed (by the runner's own report)."""
    lost = Lost()
    present_now = now.present()
    base_deselected = set(base.deselected)
    now_deselected = set(now.deselected)
    for case_id in sorted(base.present()):
        before = base.tests.get(case_id)
        after = now.tests.get(case_id)
        if case_id in now_deselected and case_id not in base_deselected:
            lost.deselected.append(case_id)
        elif case_id not in present_now:
            lost.missing.append(case_id)
        elif (
            after is not None
            and after.outcome in ("skipped", "xfailed")
            and (before is None or before.outcome not in ("skipped", "xfailed"))
        ):
            lost.skipped.append(case_id)
    return lost


@dataclass
class Regression:
    """What ``regression_test`` found: the tests the attempt added or whose body it
    changed, which of them fail on base's code for the bug (and pass at the commit), and
    why each of the others does not count."""

    candidates: list[str]
    proven: list[CaseResult]
    refused: list[str] = field(default_factory=list)
    """``id: why it does not count``."""
    untouched: int = 0
    """Tests of the attempt's test files that it neither added nor changed."""


ASSERTIONS = ("AssertionError", "Failed", "failureException")
"""What a test raises when it fails by its assertion (pytest's ``fail``, ``raises``' DID NOT
RAISE, unittest's ``fail*``)."""
IMPORTS = ("ImportError", "ModuleNotFoundError")
LOOKUPS = ("AttributeError", "NameError", "ImportError")


def _short_type(case: CaseResult) -> str:
    return (case.exception or raised_type(case.message)).rsplit(".", 1)[-1]


def why_not_counted(case: CaseResult, added: set[str], base_code: set[str]) -> str:
    """Why a test's failure on base's code does not show the bug ("" : it does): it must
    fail by an assertion, or by an error raised from base's own code, and not because base
    lacks what the attempt added."""
    if case.outcome == "error":
        return f"it errors in its setup on base's code ({headline(case.message, 100)})"
    kind = _short_type(case)
    said = headline(case.message, 100)
    if kind in IMPORTS:
        return f"it fails on base's code only because an import fails ({said})"
    if kind in LOOKUPS:
        lacking = sorted(n for n in added if re.search(rf"\b{re.escape(n)}\b", case.message))
        if lacking:
            names = ", ".join(lacking[:3])
            return (
                f"it fails on base's code only because base lacks {names}, which the attempt added"
            )
    if kind in ASSERTIONS or kind.endswith("Failed"):
        return ""
    if case.raised_at and case.raised_at in base_code:
        return ""
    where = case.raised_at or "the test itself"
    return (
        f"it fails on base's code by {kind or 'an error'} raised in {where}, not by an "
        "assertion or an error of base's code"
    )


def regressions(
    now: SuiteReport,
    overlay: SuiteReport,
    changed: dict[str, set[str]],
    added: set[str],
    base_code: set[str],
) -> Regression:
    """Tests of ``changed`` (file -> the qualified names of the tests the attempt added or
    whose body it changed there) that pass at the commit, and among them those that fail
    in ``overlay`` (base's code with the attempt's tests) for the bug."""
    error_files = {c.file: c for c in overlay.collect_errors if c.file}
    passing = [c for c in now.tests.values() if c.outcome == "passed" and c.file in changed]
    candidates = sorted(c.id for c in passing if qualified(c.id, c.file) in changed[c.file])
    untouched = len(passing) - len(candidates)
    proven: list[CaseResult] = []
    refused: list[str] = []
    for case_id in candidates:
        case = overlay.tests.get(case_id)
        file = now.tests[case_id].file
        if case is None:
            error = error_files.get(file)
            why = (
                f"it is not collected on base's code ({headline(error.message, 100)})"
                if error is not None
                else "it did not run on base's code"
            )
            refused.append(f"{case_id}: {why}")
        elif case.outcome in FAILURES:
            why = why_not_counted(case, added, base_code)
            if why:
                refused.append(f"{case_id}: {why}")
            else:
                proven.append(case.model_copy(update={"message": case.message[-MESSAGE_CHARS:]}))
    return Regression(candidates, proven, refused, untouched)
