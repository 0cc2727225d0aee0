"""Hidden tests laid over a checkout whose tree an agent's commit decided: a link, a FIFO or
a folder where a hidden file goes must neither carry the file out of the checkout nor
stall the worker; a kept folder's links and oversized files are not read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.host import hidden

HIDDEN = {"tests/test_hidden.py": b"def test_fixed():\n    assert True\n"}


def test_a_linked_tests_folder_gets_a_real_one_and_outside_is_untouched(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (tree / "tests").symlink_to(outside)
    hidden.lay(tree, HIDDEN)
    assert not (tree / "tests").is_symlink()
    assert (tree / "tests" / "test_hidden.py").read_bytes() == HIDDEN["tests/test_hidden.py"]
    assert list(outside.iterdir()) == []


def test_a_linked_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    tree, target = tmp_path / "tree", tmp_path / "victim.txt"
    (tree / "tests").mkdir(parents=True)
    target.write_text("untouched")
    (tree / "tests" / "test_hidden.py").symlink_to(target)
    hidden.lay(tree, HIDDEN)
    assert target.read_text() == "untouched"
    laid = tree / "tests" / "test_hidden.py"
    assert not laid.is_symlink() and laid.read_bytes() == HIDDEN["tests/test_hidden.py"]


def test_a_fifo_where_the_file_goes_does_not_stall_the_worker(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    os.mkfifo(tree / "tests" / "test_hidden.py")
    hidden.lay(tree, HIDDEN)  # opening the FIFO for writing would block here
    assert (tree / "tests" / "test_hidden.py").read_bytes() == HIDDEN["tests/test_hidden.py"]


def test_a_folder_where_the_file_goes_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "tests" / "test_hidden.py").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        hidden.lay(tree, HIDDEN)


def test_a_kept_folder_skips_links_and_refuses_what_is_too_big(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept, secret = tmp_path / "hidden", tmp_path / "secret.txt"
    (kept / "tests").mkdir(parents=True)
    secret.write_text("not a test")
    (kept / "tests" / "test_link.py").symlink_to(secret)
    (kept / "tests" / "test_real.py").write_text("def test_x():\n    pass\n")
    found, problem = hidden.from_folder(kept, ["tests/**"])
    assert problem == "" and list(found) == ["tests/test_real.py"]
    monkeypatch.setattr(hidden, "MAX_BYTES", 8)
    found, problem = hidden.from_folder(kept, ["tests/**"])
    assert found == {} and "cannot be read" in problem, problem
