"""Evaluation without a server: a harness may not change the suite, a case's snapshot is
deterministic. Running the example suite is in tests/e2e/test_eval.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loop.errors import TaskFileError
from loop.loaders import load_harness, snapshot
from tests.support.repos import EXAMPLES

EVAL = EXAMPLES / "eval"


def test_a_harness_that_touches_the_gates_is_refused(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: cheat\nagent: {command: [python3, x.py]}\nverify: [{name: tests, run: 'true'}]\n"
    )
    with pytest.raises(TaskFileError, match="may not change the gates, rubric or cases"):
        load_harness(bad)


def test_a_source_snapshot_has_a_deterministic_commit(tmp_path: Path):
    _, first = snapshot(EVAL / "cases" / "clamp", tmp_path / "a")
    _, second = snapshot(EVAL / "cases" / "clamp", tmp_path / "b")
    _, other = snapshot(EVAL / "cases" / "wordcount", tmp_path / "c")
    assert first == second != other
