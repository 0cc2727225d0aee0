"""What an attempt did to tests, by their syntax (``loop.rules.test_changes``)."""

from __future__ import annotations

from loop.rules import test_changes

BASE = b"""\
import pytest


def test_a():
    assert f(1) == 2


class TestB:
    def test_c(self):
        assert g() == 3
"""


def test_a_comment_or_blank_line_is_no_change_but_a_new_body_is() -> None:
    commented = BASE.replace(b"def test_a", b"# fixed by the attempt\ndef test_a").replace(
        b"    assert f(1) == 2", b"    # still\n\n    assert f(1) == 2"
    )
    assert test_changes.changed_tests(BASE, commented) == set()
    rewritten = BASE.replace(b"assert g() == 3", b"assert g() == 4")
    assert test_changes.changed_tests(BASE, rewritten) == {"TestB::test_c"}
    added = BASE + b"\n\ndef test_new():\n    assert h()\n"
    assert test_changes.changed_tests(BASE, added) == {"test_new"}
    marked = BASE.replace(b"def test_a", b"@pytest.mark.slow\ndef test_a")
    assert test_changes.changed_tests(BASE, marked) == {"test_a"}
    assert test_changes.changed_tests(None, BASE) == {"test_a", "TestB::test_c"}


def test_added_names_and_modules() -> None:
    base = b"def slug(t):\n    return t\n"
    now = b"def slug(t):\n    return helper(t)\n\n\ndef helper(t):\n    return t\nLIMIT = 3\n"
    assert test_changes.added_names(base, now) == {"helper", "LIMIT"}
    assert test_changes.module_names("src/pkg/helper.py") >= {"src.pkg.helper", "pkg.helper",
                                                              "helper"}  # fmt: skip


def test_ids_as_definitions_name_them() -> None:
    assert test_changes.qualified("tests/t.py::TestB::test_c[x-1]", "tests/t.py") == "TestB::test_c"
    assert test_changes.qualified("tests/t.py::test_a", "tests/t.py") == "test_a"
    assert test_changes.qualified("tests.test_s.T.test_p", "tests/test_s.py") == "T::test_p"
