"""Memory without a server: folding a run in is idempotent, and writes are atomic.

That one task's lessons reach the next task's brief is in tests/e2e/test_memory.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from activities.host.files import update_atomic
from loop.rules import memory


def test_fold_is_idempotent_per_task_run(tmp_path: Path):
    from loop.contracts import TaskResult, TaskState

    result = TaskResult(task_id="a", state=TaskState.BLOCKED, spec_hash="f" * 64)
    once = memory.fold("", "/r", result, "t1")
    assert memory.fold(once, "/r", result, "t2") == once


def test_a_crash_mid_write_leaves_the_previous_version(tmp_path: Path, monkeypatch):
    path = tmp_path / "memory.json"
    update_atomic(path, lambda _: '{"v": 1}')

    def crash(*args: object) -> None:
        raise OSError("disk pulled")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        update_atomic(path, lambda _: '{"v": 2}')
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == ["memory.json"]
