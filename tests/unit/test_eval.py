"""Harness evaluation: harnesses can't cheat, source snapshots are deterministic.

A whole evaluation on the example suite is in tests/e2e/test_eval.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from loop.errors import TaskFileError
from loop.loaders import load_harness, snapshot
from tests.support.paths import EXAMPLES

pytestmark = pytest.mark.timeout(180)
EVAL = EXAMPLES / "eval"


def test_a_harness_that_touches_the_gates_is_refused(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: cheat\nagent: {command: [python3, x.py]}\nverify: [{name: tests, run: 'true'}]\n"
    )
    with pytest.raises(TaskFileError, match="may not change the gates, rubric or cases"):
        load_harness(bad)


async def test_cli_refuses_a_cheating_harness_with_exit_2(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: cheat\nagent: {command: [python3, x.py]}\nrubric: lenient\n")
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "loop"),
        "eval",
        str(EVAL / "suite.yaml"),
        "--harness",
        str(bad),
        env={**os.environ, "LOOP_HOME": str(tmp_path / "home")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "may not change the gates" in err.decode() and "Traceback" not in err.decode()


def test_a_source_snapshot_has_a_deterministic_commit(tmp_path: Path):
    _, first = snapshot(EVAL / "cases" / "clamp", tmp_path / "a")
    _, second = snapshot(EVAL / "cases" / "clamp", tmp_path / "b")
    _, other = snapshot(EVAL / "cases" / "wordcount", tmp_path / "c")
    assert first == second != other
