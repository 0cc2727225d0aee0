"""The lines of a command's output that say what failed, for a person and the next attempt.

A gate judged by its exit code has no per-test results; its output tail is what is
left, and it often opens with warnings (a deprecation notice, a plugin's advice)
while the failure is at the bottom. These are the lines runners use to say what
failed (pytest's short summary and ``E`` lines, unittest's ``FAIL:``, Go's ``---
FAIL``, compilers' and linters' ``error:``), in order, warnings left out. Text the
code under test printed is as hostile as any: the lines are cut and counted, and
they only decide what is shown first, never a verdict.
"""

from __future__ import annotations

import re

SHOWN = 12
LINE_CHARS = 300

_FAILURE = re.compile(
    r"""^(
        (FAILED|ERROR)\s.+                              # pytest's short test summary
      | E\s{2,}\S.*                                     # pytest's assertion detail
      | (FAIL|ERROR):\s.+                               # unittest
      | [A-Za-z_.]*(Error|Exception):\s.+               # an uncaught exception's last line
      | ---\sFAIL:.+                                    # go test
      | \s*(✕|×|●)\s.+                                  # jest, vitest, mocha
      | .*\b(error|Error|ERROR)(\[[\w-]+\])?:\s.+       # compilers, linters, mypy, make
      | =+\s.*\b(failed|errors?)\b.*=+                  # pytest's final counts line
      | \S+:\d+:\d+:\s[A-Z]+\d+\s.+                      # ruff, flake8: path:line:col: CODE
    )$""",
    re.VERBOSE,
)
_WARNING = re.compile(r"Warning\b|-- Docs: https://docs\.pytest\.org")


def failure_lines(output: str, shown: int = SHOWN) -> list[str]:
    """At most ``shown`` lines that say what failed, in the order printed, each once."""
    found: list[str] = []
    skipping = False
    for raw in output.splitlines():
        line = raw.rstrip()
        if "warnings summary" in line:
            skipping = True  # pytest's block of warnings runs to the next ==== header
            continue
        if skipping:
            if line.startswith("====="):
                skipping = False
            else:
                continue
        if not line or _WARNING.search(line) or not _FAILURE.match(line):
            continue
        line = line[:LINE_CHARS]
        if line not in found:
            found.append(line)
        if len(found) >= shown:
            break
    return found
