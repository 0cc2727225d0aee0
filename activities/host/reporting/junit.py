"""JUnit XML files a gate's runner wrote, read as the hostile input they are.

The runner (jest, go-junit-report, cargo-nextest, Maven Surefire, node's test runner,
pytest's ``--junitxml``) writes into ``$LOOP_REPORT_DIR``, a folder the worker made
empty for that run and lent to the task's uid. Only its own entries whose names match
the task file's ``report.junit`` are read: each with ``loop.hardened.files.read_untrusted`` (no
link followed, no FIFO opened, a size cap), parsed with ``defusedxml`` (no DTD, no
entities), then handed to ``junitparser``'s typed cases. Every ``<testcase>`` counts,
wherever it sits (node's runner puts them straight under ``<testsuites>``).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from xml.etree.ElementTree import ParseError

import junitparser
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from loop.contracts import CaseResult, SuiteReport
from loop.hardened.files import read_untrusted

FILE_BYTES = 32 << 20
MAX_FILES = 64
MAX_TESTS = 200_000
TEXT_CHARS = 2_000


def read(folder: Path, pattern: str) -> SuiteReport | None:
    """The report in ``folder`` (None when no file matches); call it off the event loop."""
    try:
        names = sorted(e.name for e in os.scandir(folder) if fnmatch.fnmatchcase(e.name, pattern))
    except OSError:
        return None
    if not names:
        return None
    report = SuiteReport(runner="junit")
    for name in names[:MAX_FILES]:
        data, problem = read_untrusted(folder / name, FILE_BYTES)
        if problem:
            report.problems.append(f"{name}: {problem}")
            continue
        try:
            root = fromstring(data, forbid_dtd=True)
        except (ParseError, DefusedXmlException, ValueError) as e:
            report.problems.append(f"{name} is not JUnit XML: {e}")
            continue
        report.sessions += 1
        report.finished += 1
        for elem in root.iter("testcase"):
            if len(report.tests) >= MAX_TESTS:
                report.problems.append(f"more than {MAX_TESTS} tests; the rest was not read")
                break
            case = _case(junitparser.TestCase.fromelem(elem), elem.get("file") or "")
            while case.id in report.tests:
                case.id += "'"  # two cases of one name: both count
            report.tests[case.id] = case
            report.collected[case.id] = case.file
    if len(names) > MAX_FILES:
        report.problems.append(f"{len(names)} report files; only {MAX_FILES} were read")
    return report


def _case(case: junitparser.TestCase, file: str) -> CaseResult:
    outcome = "passed"
    message = ""
    for result in case.result:
        if isinstance(result, junitparser.Error):
            outcome = "error"
        elif isinstance(result, junitparser.Failure):
            outcome = "failed"
        elif isinstance(result, junitparser.Skipped):
            outcome = "skipped" if outcome == "passed" else outcome
        message = "\n".join(t for t in (result.message, result.text) if t)
    classname = case.classname or ""
    name = case.name or ""
    return CaseResult(
        id=f"{classname}::{name}" if classname else name,
        outcome=outcome,  # type: ignore[arg-type]  # one of the Literal's, mapped above
        file=file[:1_000],
        message=message[-TEXT_CHARS:],
        output=((case.system_out or "") + (case.system_err or ""))[-TEXT_CHARS:],
    )
