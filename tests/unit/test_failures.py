"""What failed, found in a command's output: the line a person and the next attempt
read first when a gate has no per-test results."""

from __future__ import annotations

from loop.contracts import Evidence, GateResult
from loop.rules.failures import LINE_CHARS, SHOWN, failure_lines
from loop.rules.gates import required_correction
from loop.ui.views.timeline import gate_row

PYTEST = """\
/site-packages/pytest_asyncio/plugin.py:208: PytestDeprecationWarning: The configuration option
  "asyncio_default_fixture_loop_scope" is unset.
  warnings.warn(PytestDeprecationWarning(_DEFAULT_FIXTURE_LOOP_SCOPE_UNSET))
============================= test session starts ==============================
tests/test_slugify.py .F.                                                [100%]
=================================== FAILURES ===================================
    def test_punctuation():
>       assert slugify("Hello, World!") == "hello-world"
E       AssertionError: assert 'hello,-world!' == 'hello-world'
tests/test_slugify.py:9: AssertionError
=============================== warnings summary ===============================
tests/test_slugify.py::test_punctuation
  DeprecationWarning: error: this line is a warning's
-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
=========================== short test summary info ============================
FAILED tests/test_slugify.py::test_punctuation - AssertionError: assert 'hello,-world!' == 'h…
========================= 1 failed, 2 passed in 0.03s ==========================
"""


def test_the_assertion_comes_first_and_warnings_are_folded_away() -> None:
    lines = failure_lines(PYTEST)
    assert lines[0] == "E       AssertionError: assert 'hello,-world!' == 'hello-world'"
    assert any(line.startswith("FAILED tests/test_slugify.py::test_punctuation") for line in lines)
    assert not any("Warning" in line or "warning's" in line for line in lines)


def test_other_runners_say_what_failed_in_their_words() -> None:
    unittest = (
        "FAIL: test_x (t.T.test_x)\nTraceback (most recent call last):\nAssertionError: 1 != 2\n"
    )
    assert failure_lines(unittest) == ["FAIL: test_x (t.T.test_x)", "AssertionError: 1 != 2"]
    assert failure_lines("--- FAIL: TestSlug (0.00s)\nok other\n") == ["--- FAIL: TestSlug (0.00s)"]
    lint = "src/a.py:3:1: F401 `os` imported but unused\nFound 1 error.\n"
    assert failure_lines(lint) == ["src/a.py:3:1: F401 `os` imported but unused"]
    assert failure_lines("src/b.py:4: error: Incompatible types\n") == [
        "src/b.py:4: error: Incompatible types"
    ]
    assert failure_lines("all good\n3 passed\n") == []


def test_output_the_code_under_test_floods_is_bounded() -> None:
    flood = "\n".join(f"FAILED t::{i} " + "x" * 10_000 for i in range(10_000))
    lines = failure_lines(flood)
    assert len(lines) == SHOWN and all(len(line) <= LINE_CHARS for line in lines)


def test_an_exit_code_gate_is_corrected_and_shown_with_what_failed() -> None:
    g = GateResult(
        name="lint", kind="run", passed=False, requirement="`make lint` must exit 0",
        evidence=Evidence(exit_code=1, output_tail=PYTEST, failure=failure_lines(PYTEST)),
    )  # fmt: skip
    assert required_correction(g).endswith(
        "it said: E       AssertionError: assert 'hello,-world!' == 'hello-world'"
    )
    assert gate_row(g).failure[0].startswith("E       AssertionError")
