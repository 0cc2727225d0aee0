"""The runner's own output, against the report its process sent: what disagrees.

The reporter runs inside the test process, beside the code under test, so its records
are only as good as that process is honest. pytest and unittest also print what they
saw (a mark per test as it ends, a summary line at the end) to the gate's output, which
reaches the worker through a pipe the test process cannot rewrite afterwards
(``activities.host.proc``). A forgery that rewrites the records but not what the runner
printed is caught here: a failure mark the report does not have, a summary that counts
fewer passes than the report claims, a run whose runner printed no result at all.

The checks only ever find a report *less* trustworthy: output the parser does not
recognise (a plugin's own format, prints between the marks) gives no finding.
Pure: the activity reads the log and passes its lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from loop.contracts import FAILURES, SuiteReport

PYTEST_SUMMARY = re.compile(
    r"^=*\s*(?P<stats>(?:\d+ [a-z]+(?: [a-z]+)?(?:, )?)+|no tests ran) in [\d.]+s"
    r"(?: \([^)]*\))?\s*=*\s*$"
)
"""pytest's last line: ``2 failed, 3 passed in 0.12s`` (``=`` around it unless ``-q``)."""
STAT = re.compile(r"(\d+) ([a-z]+(?: [a-z]+)?)")
MARKS = "\\.FEsxXRfu"
QUIET_PROGRESS = re.compile(rf"^([{MARKS}]+)\s*(?:\[\s*\d+%\]|\[\s*\d+\s*/\s*\d+\])?\s*$")
"""``-q``: the marks alone, then the percentage."""
FILE_PROGRESS = re.compile(rf"^(\S+\.py|\S+::\S+) ([{MARKS}]+)\s*(?:\[\s*\d+%\])?\s*$")
"""Default verbosity: the file, then its marks."""
VERBOSE = re.compile(r"^(\S+::.*?) (PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\b")
UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
UNITTEST_RESULT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$")
UNITTEST_PROGRESS = re.compile(r"^([.FEsxu]+)$")
CUT = "[output cut:"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Colour and cursor codes (pytest colours its output where the environment asks)."""
SECTION = re.compile(r"^(={3,} .+ ={3,}|_{3,} .+ _{3,}|={20,}|-{20,})$")
"""Where the marks end: pytest's sections (FAILURES, warnings summary, ...), unittest's
rules; what follows quotes the tests' own output, which may hold anything."""


@dataclass
class Seen:
    """What the runner printed, as far as it could be read."""

    summary: dict[str, int] | None = None
    marks: int = 0
    """Progress marks printed (one per test as it ended)."""
    failure_marks: int = 0
    pass_marks: int = 0
    verbose_failed: set[str] = field(default_factory=set)
    cut: bool = False


def read_pytest(lines: Iterable[str]) -> Seen:
    seen = Seen()
    marking = True
    for raw in lines:
        line = ANSI.sub("", raw).rstrip("\r\n")
        if line.startswith(CUT):
            seen.cut = True
        summary = PYTEST_SUMMARY.match(line)
        if summary is not None:
            stats = summary.group("stats")
            seen.summary = {} if stats == "no tests ran" else _stats(stats)
            continue
        if SECTION.match(line):
            marking = False
        if not marking:
            continue
        progress = QUIET_PROGRESS.match(line) or FILE_PROGRESS.match(line)
        if progress is not None:
            marks = progress.group(progress.lastindex or 1)
            seen.marks += len(marks)
            seen.failure_marks += marks.count("F") + marks.count("E")
            seen.pass_marks += marks.count(".")
            continue
        verbose = VERBOSE.match(line)
        if verbose is not None:
            seen.marks += 1
            seen.pass_marks += verbose.group(2) == "PASSED"
            if verbose.group(2) in ("FAILED", "ERROR"):
                seen.failure_marks += 1
                seen.verbose_failed.add(verbose.group(1))
    return seen


def read_unittest(lines: Iterable[str]) -> Seen:
    seen = Seen()
    ran: int | None = None
    marking = True
    for raw in lines:
        line = ANSI.sub("", raw).rstrip("\r\n")
        if line.startswith(CUT):
            seen.cut = True
        if SECTION.match(line):
            marking = False
        if m := UNITTEST_RAN.match(line):
            ran = int(m.group(1))
        elif (m := UNITTEST_RESULT.match(line)) and ran is not None:
            counts = {"ran": ran}
            for part in (m.group(2) or "").split(","):
                name, _, number = part.strip().partition("=")
                if number.isdigit():
                    counts[name] = int(number)
            seen.summary = counts
        elif marking and (m := UNITTEST_PROGRESS.match(line)):
            seen.marks += len(m.group(1))
            seen.failure_marks += m.group(1).count("F") + m.group(1).count("E")
            seen.pass_marks += m.group(1).count(".")
    return seen


def _stats(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for number, word in STAT.findall(text):
        key = {"errors": "error", "warnings": "warning"}.get(word, word)
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def contradictions(report: SuiteReport, lines: Iterable[str]) -> list[str]:
    """Where the runner's own output and the report disagree (empty: they agree, or the
    runner is not one whose output Loopwork reads)."""
    if report.runner == "pytest":
        seen = read_pytest(lines)
    elif report.runner == "unittest":
        seen = read_unittest(lines)
    else:
        return []
    failing = sum(1 for c in report.tests.values() if c.outcome in FAILURES)
    passed = sum(1 for c in report.tests.values() if c.outcome == "passed")
    runner = report.runner
    found: list[str] = []
    if seen.summary is None and not seen.marks:
        if seen.cut:
            return [f"{runner}'s output was larger than the log keeps, so the report could not "
                    "be checked against it"]  # fmt: skip
        if report.tests:
            found.append(
                f"{runner} printed no result of its own (no summary line, no progress marks) "
                f"while the report has {len(report.tests)} test(s): let {runner} print to the "
                "gate's output (no -p no:terminal, no redirection), so the report can be checked"
            )
        return found
    if seen.failure_marks and not failing:
        found.append(
            f"{runner} printed {seen.failure_marks} failure mark(s) (F or E) but the report has "
            "no failing test"
        )
    for case_id in sorted(seen.verbose_failed):
        case = report.tests.get(case_id)
        if case is not None and case.outcome not in FAILURES:
            found.append(f"{runner} printed {case_id} as failed; the report says {case.outcome}")
    # Counts of failures differ honestly (a failed subtest is one more failure to unittest,
    # a failing teardown one more error to pytest); passes cannot be more than it counted.
    if seen.summary is not None:
        summary = seen.summary
        if runner == "pytest":
            said_failing = summary.get("failed", 0) + summary.get("error", 0)
            said_passed, what = summary.get("passed", 0), "passed"
        else:
            said_failing = summary.get("failures", 0) + summary.get("errors", 0)
            said_passed, what = summary.get("ran", 0), "run"
        if said_failing and not failing:
            found.append(
                f"{runner}'s summary counts {said_failing} failure(s) but the report has none"
            )
        if said_passed < passed:
            found.append(
                f"{runner}'s summary counts {said_passed} {what} but the report has {passed} "
                "passing"
            )
    elif seen.pass_marks < passed:
        found.append(
            f"{runner} printed {seen.pass_marks} pass mark(s) and no summary, but the report "
            f"has {passed} passing"
        )
    return found
